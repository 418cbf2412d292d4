//! HTTP/3 against aioquic's server (PyPI), on loopback UDP: the sans-IO
//! connection (`switchyard_common::h3::H3Conn`, quinn-proto + the core's
//! HTTP/3) pumped by a blocking UDP loop. Each test starts its own server.

use std::time::Duration;

use bytes::Bytes;
use switchyard_common::h3::H3Failure;
use switchyard_core::alt_svc::{AltSvc, AltSvcCache, Origin};
use switchyard_core::{Host, Instant as CoreInstant, Scheme};
use switchyard_tests::h3::{request, H3Server, Pump};

const WITHIN: Duration = Duration::from_secs(10);

fn server_and_connection() -> Option<(H3Server, Pump)> {
    let server = H3Server::aioquic()?;
    let pump = Pump::connect(server.addr(), "localhost", &server.tls(), WITHIN).expect("the QUIC handshake");
    Some((server, pump))
}

#[test]
fn a_get_comes_back_whole_with_its_fields() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let url = format!("https://localhost:{}/hello?x=1", server.port);
    let answers = pump.fetch_all(vec![(request("GET", &url), Bytes::new())], WITHIN);
    let a = &answers[0];
    assert!(a.complete, "{:?} / {:?}", a.failure, pump.log);
    let head = a.head.as_ref().expect("a head");
    assert_eq!(head.status(), 200);
    assert_eq!(head.version(), http::Version::HTTP_3);
    assert_eq!(head.headers()["x-path"], "/hello?x=1", "the :path we sent arrived as sent");
    assert_eq!(a.body, b"hello");
    assert!(pump.conn.peer_settings().is_some(), "the server's SETTINGS came on its control stream");
    // The server's Alt-Svc, parsed into the cache as a client learns it.
    let field = AltSvc::parse(head.headers()["alt-svc"].as_bytes()).expect("a valid Alt-Svc");
    let mut cache = AltSvcCache::default();
    let origin = Origin::new(Scheme::Https, Host::parse("localhost").unwrap(), server.port);
    cache.learn(&origin, &field, CoreInstant::ZERO, Duration::ZERO);
    assert_eq!(cache.lookup(&origin, b"h3", CoreInstant::from_millis(59_000)).map(|a| a.port()), Some(443));
}

#[test]
fn many_streams_share_one_connection_and_large_bodies_cross_flow_control() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let base = format!("https://localhost:{}", server.port);
    // Eight at once, one of 3 MiB: three times the stream window, so it only
    // completes if reading returns credit.
    let mut requests: Vec<_> =
        (0..7).map(|i| (request("GET", &format!("{base}/bytes/{}", 1000 * i)), Bytes::new())).collect();
    requests.push((request("GET", &format!("{base}/bytes/{}", 3 << 20)), Bytes::new()));
    let answers = pump.fetch_all(requests, WITHIN * 3);
    for (i, a) in answers.iter().enumerate() {
        assert!(a.complete, "request {i}: {:?}", a.failure);
        let want = if i == 7 { 3 << 20 } else { 1000 * i };
        assert_eq!(a.body.len(), want, "request {i}");
        assert!(a.body.iter().all(|&b| b == b'x'));
    }
    assert_eq!(pump.conn.open_requests(), 0, "every stream is forgotten once answered");
}

#[test]
fn a_post_body_goes_up_and_statuses_come_back() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let base = format!("https://localhost:{}", server.port);
    let upload = Bytes::from(vec![7u8; 300_000]);
    let answers = pump.fetch_all(
        vec![
            (request("POST", &format!("{base}/echo")), upload.clone()),
            (request("POST", &format!("{base}/echo")), Bytes::new()),
            (request("GET", &format!("{base}/status/404")), Bytes::new()),
            (request("HEAD", &format!("{base}/bytes/50")), Bytes::new()),
        ],
        WITHIN,
    );
    assert!(
        answers.iter().all(|a| a.complete),
        "{:?}",
        answers.iter().map(|a| &a.failure).collect::<Vec<_>>()
    );
    assert_eq!(answers[0].head.as_ref().unwrap().headers()["x-received"], "300000");
    assert_eq!(answers[0].body, upload);
    assert_eq!(answers[1].head.as_ref().unwrap().headers()["x-received"], "0");
    assert_eq!(answers[2].head.as_ref().unwrap().status(), 404);
    let head = answers[3].head.as_ref().unwrap();
    assert_eq!(head.headers()["content-length"], "50", "HEAD: the length of what a GET would get");
    assert!(answers[3].body.is_empty());
}

#[test]
fn a_malformed_answer_fails_its_stream_and_the_connection_goes_on() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let base = format!("https://localhost:{}", server.port);
    let bad = pump.fetch_all(vec![(request("HEAD", &format!("{base}/bad/x")), Bytes::new())], WITHIN);
    match &bad[0].failure {
        Some(H3Failure::Protocol(e)) => assert_eq!(e.code, 0x10e, "H3_MESSAGE_ERROR: {e}"),
        other => panic!("content on a HEAD answer must fail its stream: {other:?}"),
    }
    let next = pump.fetch_all(vec![(request("GET", &format!("{base}/after")), Bytes::new())], WITHIN);
    assert!(next[0].complete && next[0].body == b"hello", "{:?}", next[0].failure);
}

#[test]
fn a_connection_closed_by_the_server_fails_what_is_still_open() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let base = format!("https://localhost:{}", server.port);
    let answers = pump.fetch_all(vec![(request("GET", &format!("{base}/close")), Bytes::new())], WITHIN);
    assert!(answers[0].complete || answers[0].failure.is_some());
    // After the server's CONNECTION_CLOSE, the connection is over and says why.
    let deadline = std::time::Instant::now() + WITHIN;
    while !pump.log.iter().any(|l| l.starts_with("closed")) && std::time::Instant::now() < deadline {
        pump.turn(deadline, &mut |_| {});
    }
    assert!(pump.log.iter().any(|l| l.starts_with("closed")), "{:?}", pump.log);
    assert!(!pump.conn.is_connected());
    let refused =
        pump.conn.open(std::time::Instant::now(), &request("GET", &format!("{base}/")), Bytes::new());
    assert_eq!(refused, Err(switchyard_common::h3::H3OpenError::Closed));
}

#[test]
fn an_untrusted_certificate_ends_the_handshake_with_a_reason() {
    let Some(server) = H3Server::aioquic() else { return };
    let other = switchyard_tests::certs::TestCa::new();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(other.cert.clone().into()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(switchyard_common::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let err = Pump::connect(server.addr(), "localhost", &tls, WITHIN).unwrap_err();
    assert!(err.contains("closed") && err.to_lowercase().contains("certificate"), "{err}");
}

#[test]
fn nobody_listening_ends_within_the_idle_timeout_not_never() {
    // A UDP port with no server: the handshake gets no answer (and maybe an
    // ICMP error); the connection gives up within QUIC's idle timeout.
    let Some(server) = H3Server::aioquic() else { return };
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let tls = server.tls();
    let mut conn = switchyard_common::h3::H3Conn::connect(
        std::time::Instant::now(),
        addr,
        "localhost",
        &tls,
        switchyard_common::h3::H3Config { idle_timeout: Duration::from_millis(300), ..Default::default() },
    )
    .unwrap();
    let start = std::time::Instant::now();
    let mut closed = None;
    let mut buf = Vec::new();
    while closed.is_none() && start.elapsed() < WITHIN {
        while conn.poll_transmit(std::time::Instant::now(), &mut buf).is_some() {}
        std::thread::sleep(Duration::from_millis(20));
        conn.handle_timeout(std::time::Instant::now());
        while let Some(e) = conn.poll_event() {
            if let switchyard_common::h3::H3Event::Closed(why) = e {
                closed = Some(why);
            }
        }
    }
    let why = closed.expect("the connection ended");
    assert!(why.contains("timed out"), "{why}");
}

#[test]
fn what_may_be_retried_elsewhere() {
    assert!(H3Failure::NotProcessed.is_retryable());
    assert!(H3Failure::Reset(0x10b).is_retryable(), "H3_REQUEST_REJECTED");
    assert!(!H3Failure::Reset(0x10c).is_retryable(), "H3_REQUEST_CANCELLED may have been processed");
    assert!(!H3Failure::ConnectionLost("x".into()).is_retryable());
}

// ngtcp2's server (Debian's `ngtcp2-server`: ngtcp2 + nghttp3 over GnuTLS).

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn ngtcp2_serves_files_to_many_streams_at_once() {
    let big = pattern(2 << 20);
    let small = pattern(1000);
    let Some(server) = switchyard_tests::h3::H3Server::ngtcp2(&[], &[("big", &big), ("small", &small)])
    else {
        return;
    };
    let mut pump =
        Pump::connect(server.addr(), "localhost", &server.tls(), WITHIN).expect("the QUIC handshake");
    let base = format!("https://localhost:{}", server.port);
    let mut requests: Vec<_> =
        (0..7).map(|_| (request("GET", &format!("{base}/small")), Bytes::new())).collect();
    requests.push((request("GET", &format!("{base}/big")), Bytes::new()));
    let answers = pump.fetch_all(requests, WITHIN * 3);
    for (i, a) in answers.iter().enumerate() {
        assert!(a.complete, "request {i}: {:?} {:?}", a.failure, pump.log);
        assert_eq!(a.head.as_ref().unwrap().status(), 200);
        assert!(&a.body == if i == 7 { &big } else { &small }, "request {i}: the file, byte for byte");
    }
    let missing =
        pump.fetch_all(vec![(request("GET", &format!("{base}/nothing-here")), Bytes::new())], WITHIN);
    assert_eq!(missing[0].head.as_ref().map(|h| h.status().as_u16()), Some(404));
}

#[test]
fn ngtcp2_stream_limit_is_an_error_to_wait_on_not_a_failure() {
    let file = pattern(50_000);
    let Some(server) = switchyard_tests::h3::H3Server::ngtcp2(&["--max-streams-bidi=2"], &[("f", &file)])
    else {
        return;
    };
    let mut pump =
        Pump::connect(server.addr(), "localhost", &server.tls(), WITHIN).expect("the QUIC handshake");
    let url = format!("https://localhost:{}/f", server.port);
    let now = std::time::Instant::now;
    let first = pump.conn.open(now(), &request("GET", &url), Bytes::new()).unwrap();
    let second = pump.conn.open(now(), &request("GET", &url), Bytes::new()).unwrap();
    assert_eq!(
        pump.conn.open(now(), &request("GET", &url), Bytes::new()),
        Err(switchyard_common::h3::H3OpenError::AtLimit),
        "the server's MAX_STREAMS is 2"
    );
    let deadline = now() + WITHIN;
    let mut ended = Vec::new();
    while ended.len() < 2 && now() < deadline {
        pump.turn(deadline, &mut |e| {
            if let switchyard_common::h3::H3Event::Response {
                stream,
                event: switchyard_common::h3::ResponseEvent::End,
            } = e
            {
                ended.push(stream);
            }
        });
    }
    ended.sort_unstable();
    assert_eq!(ended, [first, second], "{:?}", pump.log);
    // Streams that ended give their credit back: more may open.
    let deadline = now() + WITHIN;
    let mut opened = None;
    while opened.is_none() && now() < deadline {
        match pump.conn.open(now(), &request("GET", &url), Bytes::new()) {
            Ok(id) => opened = Some(id),
            Err(switchyard_common::h3::H3OpenError::AtLimit) => pump.turn(deadline, &mut |_| {}),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(opened.is_some(), "MAX_STREAMS never rose: {:?}", pump.log);
}

#[test]
fn ngtcp2_with_ten_percent_loss_each_way_every_response_still_arrives_whole() {
    let file = pattern(200_000);
    let Some(server) =
        switchyard_tests::h3::H3Server::ngtcp2(&["--tx-loss=0.1", "--rx-loss=0.1"], &[("f", &file)])
    else {
        return;
    };
    let mut pump = Pump::connect(server.addr(), "localhost", &server.tls(), WITHIN * 3)
        .expect("the QUIC handshake under loss");
    let url = format!("https://localhost:{}/f", server.port);
    let answers = pump.fetch_all((0..10).map(|_| (request("GET", &url), Bytes::new())).collect(), WITHIN * 6);
    for (i, a) in answers.iter().enumerate() {
        assert!(a.complete, "request {i}: {:?}", a.failure);
        assert!(a.body == file, "request {i}: byte for byte despite loss");
    }
    assert!(pump.conn.stats().path.lost_packets > 0, "the loss was real: {:?}", pump.conn.stats().path);
}

#[test]
fn an_https_record_leads_to_http3_before_any_alt_svc() {
    use hickory_proto::rr::rdata::svcb::{Alpn, IpHint, SvcParamKey, SvcParamValue, SVCB};
    use hickory_proto::rr::rdata::A;
    use switchyard_core::service_binding::endpoints;
    use switchyard_tests::dns::{DnsServer, Zone};

    let Some(server) = H3Server::aioquic() else { return };
    // h3.test has no A record: only its HTTPS record says where it is (the
    // address hint) and that it speaks h3 on the server's UDP port.
    let svcb = SVCB::new(
        1,
        hickory_proto::rr::Name::root(),
        vec![
            (SvcParamKey::Alpn, SvcParamValue::Alpn(Alpn(vec!["h3".to_owned()]))),
            (SvcParamKey::Port, SvcParamValue::Port(server.port)),
            (SvcParamKey::Ipv4Hint, SvcParamValue::Ipv4Hint(IpHint(vec![A(std::net::Ipv4Addr::LOCALHOST)]))),
        ],
    );
    let dns = DnsServer::start([
        ("h3.test".to_owned(), Zone { https: vec![svcb], ttl: 300, ..Zone::default() }),
        (
            "plain.test".to_owned(),
            Zone { v4: vec![std::net::Ipv4Addr::LOCALHOST.into()], ttl: 300, ..Zone::default() },
        ),
    ]);
    let resolver = switchyard_tokio::HickoryResolver::with_servers(&[dns.addr()]).expect("a resolver");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let found = rt.block_on(resolver.https_records("h3.test")).expect("the HTTPS query");
    assert_eq!(found.ttl, Some(Duration::from_secs(300)));
    let bindings = endpoints(443, &found.records);
    let h3 = bindings.first_speaking(b"h3").expect("an endpoint that speaks h3");
    assert_eq!((h3.host.as_ref(), h3.port), (None, server.port));
    let addr = std::net::SocketAddr::new(h3.hints[0], h3.port);
    let mut pump =
        Pump::connect(addr, "h3.test", &server.tls(), WITHIN).expect("HTTP/3 to the hinted address");
    let answers = pump.fetch_all(vec![(request("GET", "https://h3.test/from-dns"), Bytes::new())], WITHIN);
    assert!(answers[0].complete, "{:?}", answers[0].failure);
    assert_eq!(answers[0].head.as_ref().unwrap().headers()["x-path"], "/from-dns");
    // A name with only A records: an empty answer, not an error; a name
    // that does not exist: NotFound, naming it.
    let plain = rt.block_on(resolver.https_records("plain.test")).expect("an empty answer");
    assert_eq!(plain, switchyard_common::hickory::HttpsRecords::default());
    let missing = rt.block_on(resolver.https_records("nowhere.test")).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    assert!(missing.to_string().contains("nowhere.test"), "{missing}");
}

#[test]
fn a_goaway_fails_the_streams_it_did_not_take_as_retryable() {
    let Some((server, mut pump)) = server_and_connection() else { return };
    let base = format!("https://localhost:{}", server.port);
    // The first asks for GOAWAY naming the stream after it; the two after
    // it go unanswered by the server and must come back as not processed.
    let answers = pump.fetch_all(
        vec![
            (request("GET", &format!("{base}/goaway")), Bytes::new()),
            (request("GET", &format!("{base}/a")), Bytes::new()),
            (request("POST", &format!("{base}/echo")), Bytes::from_static(b"not idempotent")),
        ],
        WITHIN,
    );
    assert!(answers[0].complete && answers[0].body == b"last", "{:?} {:?}", answers[0].failure, pump.log);
    for a in &answers[1..] {
        assert_eq!(a.failure, Some(H3Failure::NotProcessed), "{:?}", pump.log);
        assert!(
            a.failure.as_ref().is_some_and(H3Failure::is_retryable),
            "even the POST: it was never processed"
        );
    }
    assert!(pump.log.iter().any(|l| l == "goaway 4"), "{:?}", pump.log);
    let refused =
        pump.conn.open(std::time::Instant::now(), &request("GET", &format!("{base}/")), Bytes::new());
    assert_eq!(refused, Err(switchyard_common::h3::H3OpenError::Closed), "no new streams after GOAWAY");
}

#[test]
fn requests_wait_for_the_handshake_and_closing_fails_what_is_open() {
    let Some(server) = H3Server::aioquic() else { return };
    let now = std::time::Instant::now;
    let mut conn = switchyard_common::h3::H3Conn::connect(
        now(),
        server.addr(),
        "localhost",
        &server.tls(),
        switchyard_common::h3::H3Config::default(),
    )
    .expect("start QUIC");
    let url = format!("https://localhost:{}/", server.port);
    assert_eq!(
        conn.open(now(), &request("GET", &url), Bytes::new()),
        Err(switchyard_common::h3::H3OpenError::NotConnected),
        "no stream before the handshake is over"
    );
    let mut pump =
        Pump::connect(server.addr(), "localhost", &server.tls(), WITHIN).expect("the QUIC handshake");
    let id = pump.conn.open(now(), &request("GET", &format!("{url}slow")), Bytes::new()).expect("a stream");
    pump.conn.close(now());
    let mut failed = None;
    let mut closed = false;
    while let Some(e) = pump.conn.poll_event() {
        match e {
            switchyard_common::h3::H3Event::Failed { stream, failure } if stream == id => {
                failed = Some(failure)
            }
            switchyard_common::h3::H3Event::Closed(_) => closed = true,
            _ => {}
        }
    }
    assert!(matches!(failed, Some(H3Failure::ConnectionLost(_))), "{failed:?}");
    assert!(closed && !pump.conn.is_connected());
    assert_eq!(pump.conn.open_requests(), 0);
}
