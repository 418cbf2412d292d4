//! switchyard-std's own surface: reader bodies, io::Read responses, dropped
//! bodies, configuration errors.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Read;
use std::time::Duration;

use switchyard_core::CloseReason;
use switchyard_std::{Body, Client, HttpVersion};
use switchyard_tests::server::{ServerOptions, TestServer};

#[test]
fn a_reader_body_is_sent_chunked_and_the_response_reads_as_io_read() {
    let server = TestServer::start(ServerOptions::default());
    let client = Client::new().unwrap();
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let request = http::Request::post(format!("http://127.0.0.1:{}/echo", server.port()))
        .body(Body::from_reader(std::io::Cursor::new(payload.clone()), None))
        .unwrap();
    let mut response = client.send(request).unwrap();
    let mut echoed = Vec::new();
    response.body_mut().read_to_end(&mut echoed).unwrap();
    assert!(echoed == payload, "echoed {} bytes", echoed.len());
    assert!(response.body().is_end());
    assert_eq!(server.records()[0].body_len, payload.len());
}

/// A reader body with a `Content-Length` goes out with that length (not
/// chunked); a reader that ends short of it, or runs past it, is a typed error
/// naming both numbers, and its connection is not reused.
#[test]
fn a_sized_reader_body_is_sent_with_its_length_and_held_to_it() {
    let server = TestServer::start(ServerOptions::default());
    let client = Client::new().unwrap();
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", server.port());
    let sized = |path: &str, len: &str, bytes: &'static [u8]| {
        http::Request::post(url(path))
            .header("content-length", len)
            .body(Body::from_reader(std::io::Cursor::new(bytes), None))
            .unwrap()
    };
    let seen = client.send(sized("/headers", "4", b"abcd")).unwrap().text().unwrap();
    assert!(seen.contains("content-length: 4") && !seen.contains("transfer-encoding"), "{seen}");
    assert_eq!(client.send(sized("/echo", "4", b"abcd")).unwrap().text().unwrap(), "abcd");
    for (len, says) in [("10", "4 of 10"), ("2", "longer than")] {
        let created = client.stats().created;
        let e = client.send(sized("/echo", len, b"abcd")).expect_err("the length does not hold");
        let text = format!("{e:#}");
        assert!(text.contains(says), "length {len}: {text}");
        assert!(matches!(e.kind(), switchyard_std::ErrorKind::InvalidRequest(_)), "{e:?}");
        assert_eq!(client.get(url("/hello")).send().unwrap().text().unwrap(), "hello");
        // A new connection carried /hello, and the broken one is closed (a
        // pooled connection the server closed meanwhile may also have been
        // found stale on the way: only one connection is left open).
        let stats = client.stats();
        assert!(stats.created > created, "the broken connection was not reused: {stats:?}");
        assert_eq!(stats.totals.open, 1, "{stats:?}");
    }
}

/// `Body::from_reader(reader, Some(len))` (a file with its size): sent with
/// that `Content-Length`, held to it as a header-declared length is.
#[test]
fn a_reader_with_its_length_is_sent_with_it() {
    let server = TestServer::start(ServerOptions::default());
    let client = Client::new().unwrap();
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", server.port());
    let path = std::env::temp_dir().join(format!("switchyard-upload-{}", std::process::id()));
    std::fs::write(&path, b"from a file").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let length = file.metadata().unwrap().len();
    let body = Body::from_reader(file, Some(length));
    assert_eq!(body.len(), Some(11));
    let seen = client.post(url("/headers")).body(body).send().unwrap().text().unwrap();
    assert!(seen.contains("content-length: 11") && !seen.contains("transfer-encoding"), "{seen}");
    let file = std::fs::File::open(&path).unwrap();
    let echoed = client.post(url("/echo")).body(Body::from_reader(file, Some(length))).send().unwrap();
    assert_eq!(echoed.text().unwrap(), "from a file");
    std::fs::remove_file(&path).unwrap();
    for (bytes, len, says) in [(&b"ab"[..], 10, "2 of 10"), (&b"abcdef"[..], 3, "longer than")] {
        let e = client
            .post(url("/echo"))
            .body(Body::from_reader(std::io::Cursor::new(bytes), Some(len)))
            .send()
            .expect_err("the length does not hold");
        assert!(format!("{e:#}").contains(says), "{e:#}");
        assert!(matches!(e.kind(), switchyard_std::ErrorKind::InvalidRequest(_)), "{e:?}");
    }
    assert_eq!(client.stats().totals.in_use, 0);
}

/// A reader that fails half-way: the call fails with a typed error (never a
/// retry: the body cannot be replayed) and the connection is not reused.
#[test]
fn a_failing_reader_fails_the_call_and_retires_the_connection() {
    struct Broken(usize);
    impl Read for Broken {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0);
            buf[..n].fill(b'x');
            self.0 -= n;
            Ok(n)
        }
    }
    let server = TestServer::start(ServerOptions::default());
    let client = Client::new().unwrap();
    let request = http::Request::post(format!("http://127.0.0.1:{}/echo", server.port()))
        .body(Body::from_reader(Broken(40_000), None))
        .unwrap();
    let err = client.send(request).unwrap_err();
    assert!(format!("{err:#}").contains("disk on fire"), "{err:#}");
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use, s.totals.open), (0, 0, 0), "{s:?}");
    assert_eq!(s.closed.get(&CloseReason::RequestBodyIncomplete), Some(&1), "{s:?}");
}

#[test]
fn dropping_a_body_early_drains_a_little_or_closes_never_leaks() {
    let server = TestServer::start(ServerOptions::default());
    let client = Client::new().unwrap();
    let base = format!("http://127.0.0.1:{}", server.port());
    // Small remainder: drained on drop, the connection reused.
    drop(client.get(format!("{base}/bytes/2000")).send().unwrap());
    assert_eq!(client.stats().totals.idle, 1);
    // Large remainder (2 MiB): past the drain limit, so the connection closes.
    let mut big = client.get(format!("{base}/bytes/2097152")).send().unwrap();
    let _first = big.body_mut().chunk().unwrap();
    drop(big);
    let s = client.stats();
    assert_eq!((s.totals.in_use, s.calls), (0, 0), "{s:?}");
    assert_eq!(s.closed.get(&CloseReason::UnreadBody), Some(&1), "{s:?}");
    assert_eq!(s.reused, 1, "{s:?}");
}

/// HTTP/2 only, blocking, with prior knowledge on `http://`:
/// several threads share one connection, each on its own stream.
#[test]
fn http2_only_shares_one_connection_across_threads() {
    let server = TestServer::start(ServerOptions::default());
    let client = Client::builder().http_version(HttpVersion::Http2Only).build().unwrap();
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut response = client.get(&url).send().unwrap();
                    assert_eq!(response.version(), http::Version::HTTP_2);
                    response.body_mut().text().unwrap()
                })
            })
            .collect();
        for c in calls {
            assert_eq!(c.join().unwrap(), "hello");
        }
    });
    let records = server.records();
    assert_eq!(records.len(), 8);
    assert!(records.iter().all(|r| r.version == http::Version::HTTP_2));
    assert_eq!(server.connections(), 1, "one HTTP/2 connection carried every call");
}

#[test]
fn a_zero_idle_probe_interval_is_a_configuration_error() {
    let err = Client::builder().idle_probe_interval(Some(Duration::ZERO)).build().unwrap_err();
    assert!(
        matches!(err.kind(), switchyard_std::ErrorKind::Config(why) if why.contains("idle_probe_interval")),
        "{err}"
    );
    assert!(Client::builder().idle_probe_interval(None).build().is_ok(), "None disables the sweep");
}

#[test]
fn a_read_timeout_ends_a_stalled_body_with_a_typed_error() {
    use switchyard_tests::fault::{Fault, FaultOptions, FaultServer, Reply};
    let server = FaultServer::start(FaultOptions::default());
    server.push([Reply::ok("late body").with(Fault::BodyDelay(Duration::from_secs(3)))]);
    let client = Client::builder().read_timeout(Duration::from_millis(200)).build().unwrap();
    let mut r = client.get(format!("http://127.0.0.1:{}/", server.port())).send().unwrap();
    let err = r.body_mut().collect().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    drop(r);
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use, s.totals.open), (0, 0, 0), "{s:?}");
}

/// The request API and response helpers, blocking (as on the async adapters,
/// `switchyard_tests::ecosystem`): URLs as `&str`/`String`/`Uri`, header
/// constants, auth, default headers and User-Agent, query, JSON, `text`/
/// `bytes`/`json`/`error_for_status`, ids in the extensions, two listeners.
#[test]
fn the_request_api_and_response_helpers() {
    use switchyard_std::{ErrorKind, EventLog};
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());
    let (one, two) = (EventLog::default(), EventLog::default());
    let mut defaults = http::HeaderMap::new();
    defaults.insert("x-team", http::HeaderValue::from_static("switchyard"));
    let client = Client::builder()
        .default_headers(defaults)
        .event_listener(one.clone())
        .event_listener(two.clone())
        .build()
        .unwrap();
    let text = client.get(format!("{base}/headers")).send().unwrap().text().unwrap();
    assert!(text.contains(&format!("user-agent: {}", switchyard_std::DEFAULT_USER_AGENT)), "{text}");
    assert!(text.contains("x-team: switchyard"), "{text}");
    let uri: http::Uri = format!("{base}/headers").parse().unwrap();
    let text = client
        .get(uri)
        .header(http::header::ACCEPT, "text/plain")
        .bearer_auth("t0ken")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(text.contains("accept: text/plain") && text.contains("authorization: Bearer t0ken"), "{text}");
    let r = client.get(format!("{base}/q")).query(&[("a", "b c")]).send().unwrap();
    assert_eq!(r.text().unwrap(), "/q?a=b+c");

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Item {
        n: u32,
    }
    let back: Item = client.post(format!("{base}/echo")).json(&Item { n: 7 }).send().unwrap().json().unwrap();
    assert_eq!(back, Item { n: 7 });
    assert_eq!(client.get(format!("{base}/bytes/3")).send().unwrap().bytes().unwrap(), &b"xxx"[..]);

    let r = client.patch(format!("{base}/status/503")).send().unwrap();
    let (call, conn) = (r.call_id().unwrap(), r.connection_id().unwrap());
    let e = r.error_for_status().unwrap_err();
    assert!(e.is_status() && e.url().is_some_and(|u| u.ends_with("/status/503")), "{e:?}");
    for log in [&one, &two] {
        let acquired =
            log.events().into_iter().find(|e| e.name == "connection_acquired" && e.call == Some(call));
        assert!(acquired.is_some_and(|e| e.detail.starts_with(&conn.to_string())));
    }
    let e = client.get("localhost:8080/x").send().unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidUrl(_)) && e.to_string().contains("localhost:8080/x"),
        "{e:?}"
    );
}

/// The call timeout covers the body; the head timeout only the head.
#[test]
fn the_call_timeout_covers_the_body() {
    use switchyard_std::TimeoutPhase;
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());
    let client = Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let r = client.get(format!("{base}/slow-body/1500")).send().unwrap();
    let e = r.text().unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseBody), "{e:?}");
    let e = client.get(format!("{base}/sleep/1500")).send().unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseHead), "{e:?}");
    let client = Client::builder().head_timeout(Duration::from_millis(300)).build().unwrap();
    assert_eq!(client.get(format!("{base}/slow-body/600")).send().unwrap().text().unwrap(), "late");
}

/// One `tracing` span per call, under `switchyard_std` (as on the async adapters).
#[test]
fn a_tracing_span_per_call() {
    switchyard_tests::ecosystem::ready(switchyard_tests::ecosystem::tracing_spans(
        "switchyard_std",
        async |url| {
            let client = Client::new().unwrap();
            let r = client.get(url).send().map_err(|e| format!("{e:#}"))?;
            let status = r.status().as_u16();
            let _ = r.text().map_err(|e| format!("{e:#}"))?;
            Ok(status)
        },
    ));
}
