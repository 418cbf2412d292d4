//! The HTTP/2 driver against a scripted server: frames built here, the
//! driver's output parsed back. Deterministic: no I/O, no clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use switchyard_core::http2::hpack::Encoder;
use switchyard_core::http2::{
    ConnectionEnd, Driver, DriverConfig, Event, OpenError, Peer, StreamError, PREFACE,
};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in entries {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(4, 0, 0, &p)
}

fn head_block(status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = BytesMut::new();
    Encoder.field(&mut b, ":status", status.to_string().as_bytes());
    for (n, v) in fields {
        Encoder.field(&mut b, n, v.as_bytes());
    }
    b.to_vec()
}

fn headers(stream: u32, status: u16, fields: &[(&str, &str)], end: bool) -> Vec<u8> {
    frame(1, 0x4 | u8::from(end), stream, &head_block(status, fields))
}

fn data(stream: u32, bytes: &[u8], end: bool) -> Vec<u8> {
    frame(0, u8::from(end), stream, bytes)
}

fn window_update(stream: u32, n: u32) -> Vec<u8> {
    frame(8, 0, stream, &n.to_be_bytes())
}

/// The client's side, parsed: every frame it wrote so far.
struct Wire {
    driver: Driver,
    buf: Vec<u8>,
    preface_seen: bool,
}

impl Wire {
    fn new(config: DriverConfig) -> Wire {
        let mut w = Wire { driver: Driver::new(config), buf: Vec::new(), preface_seen: false };
        let first = w.written();
        assert_eq!(first[0].kind, 4, "SETTINGS follows the preface");
        w.driver.handle_read(&settings(&[]));
        assert!(matches!(w.driver.poll_event(), Some(Event::Settings { max_concurrent_streams: None })));
        w
    }

    fn written(&mut self) -> Vec<Frame> {
        while let Some(bytes) = self.driver.poll_transmit() {
            let n = bytes.len();
            self.buf.extend_from_slice(bytes);
            self.driver.handle_written(n);
        }
        if !self.preface_seen {
            assert!(self.buf.starts_with(PREFACE));
            self.buf.drain(..PREFACE.len());
            self.preface_seen = true;
        }
        let mut frames = Vec::new();
        while self.buf.len() >= 9 {
            let len =
                (usize::from(self.buf[0]) << 16) | (usize::from(self.buf[1]) << 8) | usize::from(self.buf[2]);
            if self.buf.len() < 9 + len {
                break;
            }
            let f = Frame {
                kind: self.buf[3],
                flags: self.buf[4],
                stream: u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]),
                payload: self.buf[9..9 + len].to_vec(),
            };
            self.buf.drain(..9 + len);
            frames.push(f);
        }
        frames
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.driver.poll_event()).collect()
    }

    fn get(&mut self, path: &str) -> u32 {
        let (parts, ()) = http::Request::get(format!("http://a.test{path}")).body(()).unwrap().into_parts();
        self.driver.open(&parts, true).unwrap()
    }
}

fn goaway_code(frames: &[Frame]) -> Option<u32> {
    frames.iter().find(|f| f.kind == 7).map(|f| u32::from_be_bytes(f.payload[4..8].try_into().unwrap()))
}

#[test]
fn a_get_round_trip_with_body_and_trailers() {
    let mut w = Wire::new(DriverConfig::default());
    let id = w.get("/x?y=1");
    let frames = w.written();
    let h = frames.iter().find(|f| f.kind == 1).unwrap();
    assert_eq!((h.stream, h.flags & 0x5), (id, 0x5), "HEADERS with END_STREAM | END_HEADERS");
    let mut fields = Vec::new();
    switchyard_core::http2::hpack::Decoder::default()
        .decode(&Bytes::from(h.payload.clone()), |n, v| fields.push((format!("{n:?}"), v)))
        .unwrap();
    assert!(fields.iter().any(|(_, v)| v == "/x?y=1"), "{fields:?}");
    assert!(fields.iter().any(|(_, v)| v == "a.test"), "{fields:?}");

    w.driver.handle_read(&headers(id, 200, &[("content-length", "5"), ("x-a", "b")], false));
    w.driver.handle_read(&data(id, b"hel", false));
    w.driver.handle_read(&data(id, b"lo", false));
    let mut t = BytesMut::new();
    Encoder.field(&mut t, "grpc-status", b"0");
    w.driver.handle_read(&frame(1, 0x5, id, &t));
    let events = w.events();
    assert!(
        matches!(&events[0], Event::Head { stream, response, .. } if *stream == id && response.status() == 200 && response.headers()["x-a"] == "b")
    );
    assert!(matches!(&events[1], Event::Data { data, .. } if &data[..] == b"hel"));
    assert!(matches!(&events[2], Event::Data { data, .. } if &data[..] == b"lo"));
    assert!(matches!(&events[3], Event::Trailers { trailers, .. } if trailers["grpc-status"] == "0"));
    assert!(matches!(events[4], Event::End { stream } if stream == id));
    w.driver.close_stream(id);
    assert!(w.written().iter().all(|f| f.kind != 3), "a finished stream is not reset");
    assert_eq!(w.driver.open_streams(), 0);
}

#[test]
fn any_split_of_the_server_bytes_gives_the_same_events() {
    let mut script = settings(&[(3, 10)]);
    script.extend(headers(1, 200, &[("content-length", "3")], false));
    script.extend(data(1, b"abc", true));
    script.extend(frame(6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]));
    let describe = |events: Vec<Event>| -> Vec<String> {
        events
            .into_iter()
            .map(|e| match e {
                Event::Data { stream, data } => format!("data {stream} {data:?}"),
                Event::Head { stream, response, .. } => format!("head {stream} {}", response.status()),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let mut whole = Wire::new(DriverConfig::default());
    whole.get("/");
    whole.driver.handle_read(&script);
    let want = describe(whole.events());
    let want_frames = whole.written();
    for step in [1, 2, 3, 7, 9, 10, 17] {
        let mut w = Wire::new(DriverConfig::default());
        w.get("/");
        let mut got = Vec::new();
        for chunk in script.chunks(step) {
            w.driver.handle_read(chunk);
            got.extend(w.events());
        }
        // Data may arrive in pieces: join them for the comparison.
        let got = describe(got);
        let joined: Vec<String> = got.into_iter().fold(Vec::new(), |mut acc, e| {
            if let (Some(last), true) = (acc.last_mut(), e.starts_with("data")) {
                if last.starts_with("data") {
                    *last = format!("{}{}", &last[..last.len() - 1], &e[e.find('b').unwrap() + 2..]);
                    return acc;
                }
            }
            acc.push(e);
            acc
        });
        assert_eq!(joined, want, "split every {step} bytes");
        assert_eq!(w.written(), want_frames, "split every {step} bytes");
    }
}

#[test]
fn one_stream_until_the_servers_settings_then_its_limit() {
    let mut d = Driver::new(DriverConfig::default());
    let (parts, ()) = http::Request::get("http://a.test/").body(()).unwrap().into_parts();
    assert_eq!(d.open(&parts, true), Ok(1));
    assert_eq!(d.open(&parts, true), Err(OpenError::AtLimit), "one stream before SETTINGS");
    d.handle_read(&settings(&[(3, 2)]));
    assert_eq!(d.open(&parts, true), Ok(3));
    assert_eq!(d.open(&parts, true), Err(OpenError::AtLimit));
}

/// Two streams whose bodies nobody reads fill their own windows; the
/// connection's credit comes back as DATA arrives, so a third stream still
/// gets its whole answer.
#[test]
fn a_stalled_reader_does_not_stall_its_connection() {
    let window = 1 << 20;
    let mut w = Wire::new(DriverConfig {
        stream_window: window,
        connection_window: 2 * window,
        ..Default::default()
    });
    w.written();
    let stalled: Vec<u32> = (0..4).map(|_| w.get("/big")).collect();
    let small = w.get("/small");
    // The server's view of the connection window.
    let mut conn = 2 * i64::from(window);
    for &id in &stalled {
        w.driver.handle_read(&headers(id, 200, &[], false));
        let mut sent = 0;
        while sent < window as usize {
            let n = (window as usize - sent).min(16_384);
            assert!(conn >= n as i64, "the connection window ran out after {sent} bytes on stream {id}");
            w.driver.handle_read(&data(id, &vec![b'x'; n], false));
            conn -= n as i64;
            sent += n;
            for f in w.written() {
                if f.kind == 8 && f.stream == 0 {
                    conn += i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
                }
            }
        }
    }
    assert!(conn >= 16_384, "connection credit left for other streams: {conn}");
    w.driver.handle_read(&headers(small, 200, &[("content-length", "2")], false));
    w.driver.handle_read(&data(small, b"ok", true));
    let events = w.events();
    assert!(events.iter().any(|e| matches!(e, Event::End { stream } if *stream == small)));
    assert!(!events.iter().any(|e| matches!(e, Event::Failed { .. })), "{events:?}");
    // Past its own window, a stalled stream is the server's fault: only it fails.
    w.driver.handle_read(&data(stalled[0], b"x", false));
    let events = w.events();
    assert!(
        matches!(
            &events[..],
            [Event::Failed { stream, error: StreamError::Reset { code: 3, by: Peer::Us } }] if *stream == stalled[0]
        ),
        "{events:?}"
    );
    assert!(!w.driver.is_closed());
}

#[test]
fn request_bodies_go_out_under_both_windows_with_back_pressure() {
    let mut w = Wire::new(DriverConfig::default());
    w.written();
    let (parts, ()) = http::Request::post("http://a.test/up").body(()).unwrap().into_parts();
    let id = w.driver.open(&parts, false).unwrap();
    assert!(w.driver.wants_body(id));
    w.driver.send_data(id, Bytes::from(vec![1u8; 100_000]), true);
    assert!(!w.driver.wants_body(id), "one chunk past the window at most");
    let sent: usize = w.written().iter().filter(|f| f.kind == 0).map(|f| f.payload.len()).sum();
    assert_eq!(sent, 65_535, "the protocol's initial windows");
    w.driver.handle_read(&window_update(0, 50_000));
    assert_eq!(w.written().iter().filter(|f| f.kind == 0).count(), 0, "the stream window is still shut");
    w.driver.handle_read(&window_update(id, 50_000));
    let frames = w.written();
    let more: usize = frames.iter().filter(|f| f.kind == 0).map(|f| f.payload.len()).sum();
    assert_eq!(more, 34_465);
    assert_eq!(frames.last().unwrap().flags & 1, 1, "END_STREAM on the last DATA");
    assert!(frames.iter().all(|f| f.payload.len() <= 16_384));
}

/// A server that answers 413 before reading the upload: the answer is what
/// the caller gets, and nothing more of the body goes out.
#[test]
fn an_early_answer_wins_and_stops_the_upload() {
    let mut w = Wire::new(DriverConfig::default());
    w.written();
    let (parts, ()) = http::Request::post("http://a.test/up").body(()).unwrap().into_parts();
    let id = w.driver.open(&parts, false).unwrap();
    w.driver.send_data(id, Bytes::from(vec![0u8; 16_384]), false);
    w.written();
    w.driver.handle_read(&headers(id, 413, &[("content-length", "0")], true));
    w.driver.handle_read(&frame(3, 0, id, &0u32.to_be_bytes())); // RST_STREAM NO_ERROR
    let events = w.events();
    assert!(matches!(&events[0], Event::Head { response, .. } if response.status() == 413));
    assert!(matches!(events[1], Event::End { .. }));
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(w.driver.body_done(id) && !w.driver.wants_body(id));
    w.driver.send_data(id, Bytes::from(vec![0u8; 1000]), true);
    assert!(w.written().iter().all(|f| f.kind != 0), "no more of the body");
}

#[test]
fn goaway_fails_the_streams_it_left_unprocessed_and_ends_new_ones() {
    let mut w = Wire::new(DriverConfig::default());
    w.driver.handle_read(&settings(&[(3, 100)]));
    w.events();
    let ids: Vec<u32> = (0..3).map(|_| w.get("/")).collect();
    let mut p = 1u32.to_be_bytes().to_vec();
    p.extend(0u32.to_be_bytes());
    w.driver.handle_read(&frame(7, 0, 0, &p));
    let events = w.events();
    assert!(matches!(events[0], Event::GoAway(g) if g.last_stream_id == 1));
    let failed: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Failed { stream, error: StreamError::GoAway { by: Peer::Server, .. } } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(failed, ids[1..]);
    let (parts, ()) = http::Request::get("http://a.test/").body(()).unwrap().into_parts();
    assert!(matches!(w.driver.open(&parts, true), Err(OpenError::Closed(_))));
    // Stream 1 runs to its end.
    w.driver.handle_read(&headers(1, 200, &[], true));
    assert!(matches!(w.events()[..], [Event::Head { .. }, Event::End { stream: 1 }]));
    w.driver.handle_eof();
    assert!(matches!(w.events()[..], [Event::Closed(ConnectionEnd::Failed(StreamError::GoAway { .. }))]));
}

#[test]
fn malformed_responses_fail_their_stream_only() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("DATA before a head", data(1, b"x", false)),
        (
            "a head without :status",
            frame(1, 0x4, 1, &{
                let mut b = BytesMut::new();
                Encoder.field(&mut b, "x-a", b"b");
                b.to_vec()
            }),
        ),
        ("a connection-specific field", headers(1, 200, &[("connection", "close")], false)),
        ("an upper-case name", headers(1, 200, &[("X-Upper", "1")], false)),
        ("a body longer than content-length", {
            let mut v = headers(1, 200, &[("content-length", "1")], false);
            v.extend(data(1, b"ab", true));
            v
        }),
        ("a body shorter than content-length", {
            let mut v = headers(1, 200, &[("content-length", "3")], false);
            v.extend(data(1, b"ab", true));
            v
        }),
        ("trailers without END_STREAM", {
            let mut v = headers(1, 200, &[], false);
            v.extend(headers(1, 200, &[], false));
            v
        }),
        ("a 1xx head that ends the stream", headers(1, 103, &[], true)),
    ];
    for (what, bytes) in cases {
        let mut w = Wire::new(DriverConfig::default());
        w.written();
        let id = w.get("/");
        w.driver.handle_read(&bytes);
        let events = w.events();
        let failed = events.iter().any(|e| {
            matches!(e, Event::Failed { stream, error: StreamError::Reset { code: 1, by: Peer::Us } } if *stream == id)
        });
        assert!(failed, "{what}: {events:?}");
        assert!(!w.driver.is_closed(), "{what}: the connection stays");
        let frames = w.written();
        assert!(frames.iter().any(|f| f.kind == 3 && f.stream == id), "{what}: RST_STREAM sent");
        // The connection still carries a new stream.
        let next = w.get("/");
        w.driver.handle_read(&headers(next, 204, &[], true));
        assert!(w.events().iter().any(|e| matches!(e, Event::End { stream } if *stream == next)), "{what}");
    }
}

#[test]
fn informational_heads_are_skipped() {
    let mut w = Wire::new(DriverConfig::default());
    let id = w.get("/");
    w.driver.handle_read(&headers(id, 103, &[("link", "</a>")], false));
    w.driver.handle_read(&headers(id, 200, &[], true));
    let events = w.events();
    assert!(
        matches!(&events[..], [Event::Head { response, .. }, Event::End { .. }] if response.status() == 200)
    );
}

#[test]
fn hostile_connections_end_with_the_right_code() {
    let big_block = vec![0u8; 20_000];
    let cases: Vec<(&str, Vec<u8>, u32)> = vec![
        ("a frame past our maximum size", frame(0, 0, 1, &vec![0; 16_385]), 6),
        ("a server push", frame(5, 0x4, 1, &[0, 0, 0, 2]), 1),
        ("DATA on stream 0", frame(0, 0, 0, b"x"), 1),
        ("HEADERS on a stream never opened", headers(7, 200, &[], true), 1),
        ("SETTINGS with a bad length", frame(4, 0, 0, &[0, 3, 0]), 6),
        ("SETTINGS window past 2^31-1", settings(&[(4, 0x8000_0000)]), 3),
        ("SETTINGS frame size too small", settings(&[(5, 100)]), 1),
        ("PING of 7 bytes", frame(6, 0, 0, &[0; 7]), 6),
        ("WINDOW_UPDATE of 0 on the connection", window_update(0, 0), 1),
        ("the connection window past 2^31-1", window_update(0, 0x7fff_ffff), 3),
        ("an HPACK index past the tables", frame(1, 0x4, 1, &[0xff, 0x7f]), 9),
        ("CONTINUATION without HEADERS", frame(9, 0x4, 1, &[0x88]), 1),
        (
            "a frame between HEADERS and CONTINUATION",
            {
                let mut v = frame(1, 0, 1, &[0x88]);
                v.extend(frame(6, 0, 0, &[0; 8]));
                v
            },
            1,
        ),
        (
            "a CONTINUATION flood",
            {
                let mut v = frame(1, 0, 1, &[]);
                for _ in 0..20 {
                    v.extend(frame(9, 0, 1, &big_block[..16_000]));
                }
                v
            },
            11,
        ),
    ];
    for (what, bytes, code) in cases {
        let mut w = Wire::new(DriverConfig::default());
        w.written();
        let id = w.get("/");
        w.driver.handle_read(&bytes);
        assert!(w.driver.is_closed(), "{what}");
        let events = w.events();
        assert!(
            events.iter().any(|e| matches!(e, Event::Failed { stream, error: StreamError::GoAway { code: c, by: Peer::Us } } if *stream == id && *c == code)),
            "{what}: {events:?}"
        );
        assert!(matches!(events.last(), Some(Event::Closed(ConnectionEnd::Failed(_)))), "{what}");
        assert_eq!(goaway_code(&w.written()), Some(code), "{what}");
        let (parts, ()) = http::Request::get("http://a.test/").body(()).unwrap().into_parts();
        assert!(matches!(w.driver.open(&parts, true), Err(OpenError::Closed(_))), "{what}");
    }
}

#[test]
fn a_ping_flood_is_answered_until_the_answers_pile_up() {
    let mut w = Wire::new(DriverConfig::default());
    w.written();
    let ping = frame(6, 0, 0, &[7; 8]);
    w.driver.handle_read(&ping);
    let answers = w.written();
    assert_eq!(answers, [Frame { kind: 6, flags: 1, stream: 0, payload: vec![7; 8] }]);
    // Nobody writes: the answers pile up, and past a bound the server is
    // told to calm down.
    let flood: Vec<u8> = ping.repeat(70_000);
    w.driver.handle_read(&flood);
    assert!(w.driver.is_closed());
    assert_eq!(goaway_code(&w.written()), Some(11));
}

#[test]
fn our_ping_gets_its_pong_and_windows_grow() {
    let mut w = Wire::new(DriverConfig::default());
    w.written();
    assert!(w.driver.ping());
    assert!(!w.driver.ping(), "one at a time");
    let out = w.written();
    let payload = out.iter().find(|f| f.kind == 6).unwrap().payload.clone();
    w.driver.handle_read(&frame(6, 1, 0, &payload));
    assert!(matches!(w.events()[..], [Event::Pong]));
    w.driver.grow_windows(1 << 20, 4 << 20);
    let out = w.written();
    assert!(out.iter().any(|f| f.kind == 4 && f.payload == [0, 4, 0, 0x10, 0, 0]));
    assert!(out.iter().any(|f| f.kind == 8 && f.stream == 0));
}

#[test]
fn a_server_reset_fails_the_stream_and_eof_fails_the_rest() {
    let mut w = Wire::new(DriverConfig::default());
    w.driver.handle_read(&settings(&[(3, 10)]));
    w.events();
    let a = w.get("/");
    let b = w.get("/");
    w.driver.handle_read(&frame(3, 0, a, &7u32.to_be_bytes()));
    assert!(matches!(
        w.events()[..],
        [Event::Failed { stream, error: StreamError::Reset { code: 7, by: Peer::Server } }] if stream == a
    ));
    w.driver.handle_eof();
    let events = w.events();
    assert!(matches!(&events[0], Event::Failed { stream, error: StreamError::Io { .. } } if *stream == b));
    assert!(matches!(events[1], Event::Closed(ConnectionEnd::Failed(_))));
}

#[test]
fn a_large_request_head_is_split_into_continuations() {
    let mut w = Wire::new(DriverConfig::default());
    w.written();
    let (parts, ()) = http::Request::get("http://a.test/")
        .header("x-big", "v".repeat(40_000))
        .body(())
        .unwrap()
        .into_parts();
    let id = w.driver.open(&parts, true).unwrap();
    let frames = w.written();
    assert_eq!(frames[0].kind, 1);
    assert_eq!(frames[0].flags & 0x4, 0);
    assert!(frames[1..].iter().all(|f| f.kind == 9 && f.stream == id));
    assert_eq!(frames.last().unwrap().flags & 0x4, 0x4);
    let mut block = Vec::new();
    for f in &frames {
        block.extend_from_slice(&f.payload);
    }
    let mut big = 0;
    switchyard_core::http2::hpack::Decoder::default()
        .decode(&Bytes::from(block), |_, v| big = big.max(v.len()))
        .unwrap();
    assert_eq!(big, 40_000);
}

/// DATA that leaves a continuing stream less than a frame of credit is a
/// credit stall (the server must wait for our WINDOW_UPDATE: the adaptive
/// window's second signal); a body that ends, or leaves room, is not.
#[test]
fn credit_stalls_count_streams_the_server_must_wait_on() {
    let window = 65_535;
    let mut w =
        Wire::new(DriverConfig { stream_window: window, connection_window: 1 << 20, ..Default::default() });
    w.written();
    let a = w.get("/a");
    w.driver.handle_read(&headers(a, 200, &[], false));
    w.driver.handle_read(&data(a, &[b'x'; 16_384], false));
    w.driver.handle_read(&data(a, &[b'x'; 16_384], false));
    assert_eq!(w.driver.credit_stalls(), 0, "half the window left");
    w.driver.handle_read(&data(a, &[b'x'; 16_384], false));
    assert_eq!(w.driver.credit_stalls(), 1, "16 383 bytes of credit left, the body goes on");
    let b = w.get("/b");
    w.driver.handle_read(&headers(b, 200, &[], false));
    for _ in 0..3 {
        w.driver.handle_read(&data(b, &[b'x'; 16_384], false));
    }
    assert_eq!(w.driver.credit_stalls(), 2, "the second stream's turn");
    w.driver.handle_read(&data(b, &[b'x'; 16_383], true));
    assert_eq!(w.driver.credit_stalls(), 2, "a body that ends with its window spent waits for nothing");
}
