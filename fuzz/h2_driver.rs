//! Arbitrary inputs to the HTTP/2 connection driver: well-formed and hostile
//! server frames (any type, flags, stream, payload; SETTINGS, WINDOW_UPDATE,
//! CONTINUATION and RST floods; oversized header blocks), raw bytes, every
//! read split at any byte, interleaved with the caller's side (streams
//! opened, bodies sent, credit released, streams closed, PINGs, window
//! growth, EOF). No input may panic, and after every step: each stream's
//! events come in order and end once; the connection's end comes last and
//! once; a closed connection opens nothing; what waits to be written stays
//! bounded. Shared by the `h2_driver` fuzz target and
//! `core/tests/fuzz_replay.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use bytes::{Bytes, BytesMut};
use switchyard_core::http2::hpack::Encoder;
use switchyard_core::http2::{Driver, DriverConfig, Event};

#[derive(Arbitrary, Debug, Clone)]
pub enum Frame {
    /// SETTINGS with up to a few entries (any ids and values).
    Settings {
        entries: Vec<(u16, u32)>,
        ack: bool,
    },
    /// A response head (a real HPACK block) on the n-th opened stream.
    Head {
        stream: u8,
        status: u16,
        fields: u8,
        end: bool,
        split: Option<u8>,
    },
    /// DATA of `len` bytes on the n-th opened stream.
    Data {
        stream: u8,
        len: u16,
        end: bool,
        pad: Option<u8>,
    },
    /// Trailers (END_STREAM) on the n-th opened stream.
    Trailers {
        stream: u8,
    },
    RstStream {
        stream: u8,
        code: u32,
    },
    WindowUpdate {
        stream: Option<u8>,
        increment: u32,
    },
    Ping {
        ack: bool,
        payload: u64,
    },
    GoAway {
        last: u32,
        code: u32,
    },
    /// CONTINUATION frames of `size` bytes each, `count` of them, after a
    /// HEADERS without END_HEADERS.
    Flood {
        stream: u8,
        count: u8,
        size: u16,
    },
    /// Any frame header and payload.
    Raw {
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    Open {
        post: bool,
        big_header: bool,
    },
    Send {
        stream: u8,
        len: u16,
        end: bool,
    },
    Release {
        stream: u8,
        n: u16,
    },
    Close {
        stream: u8,
    },
    Ping,
    Grow {
        stream: u32,
        connection: u32,
    },
    /// A server frame, delivered in pieces of `split` bytes.
    Server {
        frame: Frame,
        split: u8,
    },
    /// Raw bytes.
    Bytes(Vec<u8>),
    Write {
        n: u16,
    },
    Eof,
    Error,
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    stream_window: u32,
    connection_window: u32,
    ops: Vec<Op>,
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len().min(0xff_ffff);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&payload[..len]);
}

fn pick(opened: &[u32], n: u8) -> u32 {
    if opened.is_empty() {
        1
    } else {
        opened[usize::from(n) % opened.len()]
    }
}

fn encode(spec: &Frame, opened: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    match spec {
        Frame::Settings { entries, ack } => {
            let mut p = Vec::new();
            for (id, v) in entries.iter().take(8) {
                p.extend_from_slice(&id.to_be_bytes());
                p.extend_from_slice(&v.to_be_bytes());
            }
            frame(&mut out, 4, u8::from(*ack), 0, if *ack { &[][..] } else { &p[..] });
        }
        Frame::Head { stream, status, fields, end, split } => {
            let mut b = BytesMut::new();
            Encoder.field(&mut b, ":status", (status % 600).to_string().as_bytes());
            for i in 0..(fields % 8) {
                Encoder.field(&mut b, &format!("x-f{i}"), b"v");
            }
            if *fields > 200 {
                Encoder.field(&mut b, "content-length", b"3");
            }
            let id = pick(opened, *stream);
            let end_flag = u8::from(*end);
            match split.map(|s| usize::from(s).min(b.len())) {
                Some(at) => {
                    frame(&mut out, 1, end_flag, id, &b[..at]);
                    frame(&mut out, 9, 4, id, &b[at..]);
                }
                None => frame(&mut out, 1, 4 | end_flag, id, &b),
            }
        }
        Frame::Data { stream, len, end, pad } => {
            let id = pick(opened, *stream);
            let body = vec![b'd'; usize::from(*len) % 20_000];
            match pad {
                Some(p) => {
                    let mut payload = vec![*p];
                    payload.extend_from_slice(&body);
                    payload.extend(std::iter::repeat_n(0, usize::from(*p)));
                    frame(&mut out, 0, 8 | u8::from(*end), id, &payload);
                }
                None => frame(&mut out, 0, u8::from(*end), id, &body),
            }
        }
        Frame::Trailers { stream } => {
            let mut b = BytesMut::new();
            Encoder.field(&mut b, "x-t", b"1");
            frame(&mut out, 1, 5, pick(opened, *stream), &b);
        }
        Frame::RstStream { stream, code } => {
            frame(&mut out, 3, 0, pick(opened, *stream), &code.to_be_bytes())
        }
        Frame::WindowUpdate { stream, increment } => {
            let id = stream.map_or(0, |s| pick(opened, s));
            frame(&mut out, 8, 0, id, &increment.to_be_bytes());
        }
        Frame::Ping { ack, payload } => frame(&mut out, 6, u8::from(*ack), 0, &payload.to_be_bytes()),
        Frame::GoAway { last, code } => {
            let mut p = last.to_be_bytes().to_vec();
            p.extend_from_slice(&code.to_be_bytes());
            frame(&mut out, 7, 0, 0, &p);
        }
        Frame::Flood { stream, count, size } => {
            let id = pick(opened, *stream);
            frame(&mut out, 1, 0, id, &[0x88]);
            let chunk = vec![0u8; usize::from(*size) % 16_385];
            for _ in 0..*count {
                frame(&mut out, 9, 0, id, &chunk);
            }
        }
        Frame::Raw { kind, flags, stream, payload } => {
            frame(&mut out, *kind, *flags, *stream & 0x7fff_ffff, &payload[..payload.len().min(20_000)]);
        }
    }
    out
}

/// What each stream has said so far.
#[derive(Default)]
struct Order {
    streams: BTreeMap<u32, (bool, bool)>, // (head seen, ended)
    closed: bool,
}

impl Order {
    fn see(&mut self, e: &Event) {
        assert!(!self.closed, "an event after the connection closed: {e:?}");
        let mut stream_event = |id: u32, head: bool, ends: bool| {
            let s = self.streams.entry(id).or_default();
            assert!(!s.1, "an event after stream {id} ended: {e:?}");
            if head {
                assert!(!s.0, "two heads on stream {id}");
                s.0 = true;
            } else if !ends || matches!(e, Event::End { .. }) {
                assert!(s.0, "body or end before the head on stream {id}");
            }
            if ends {
                s.1 = true;
            }
        };
        match e {
            Event::Head { stream, .. } => stream_event(*stream, true, false),
            Event::Data { stream, data } => {
                assert!(!data.is_empty(), "empty data event");
                stream_event(*stream, false, false);
            }
            Event::Trailers { stream, .. } => stream_event(*stream, false, false),
            Event::End { stream } => stream_event(*stream, false, true),
            Event::Failed { stream, .. } => stream_event(*stream, false, true),
            Event::Closed(_) => self.closed = true,
            Event::Settings { .. } | Event::GoAway(_) | Event::Pong => {}
        }
    }
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else { return };
    let config = DriverConfig {
        stream_window: input.stream_window % (1 << 24) + 1,
        connection_window: input.connection_window % (1 << 25) + 1,
        max_header_block: 32 * 1024,
        ..DriverConfig::default()
    };
    let mut driver = Driver::new(config);
    let mut opened: Vec<u32> = Vec::new();
    let mut order = Order::default();
    for op in input.ops.into_iter().take(400) {
        match op {
            Op::Open { post, big_header } => {
                let mut b = http::Request::builder()
                    .method(if post { "POST" } else { "GET" })
                    .uri("https://a.test/x");
                if big_header {
                    b = b.header("x-big", "v".repeat(40_000));
                }
                let (parts, ()) = b.body(()).unwrap().into_parts();
                let closed = driver.is_closed();
                if let Ok(id) = driver.open(&parts, !post) {
                    assert!(!closed, "a stream opened on a closed connection");
                    assert!(opened.last().is_none_or(|l| id > *l), "stream ids grow");
                    opened.push(id);
                }
            }
            Op::Send { stream, len, end } => {
                let id = pick(&opened, stream);
                driver.send_data(id, Bytes::from(vec![b's'; usize::from(len)]), end);
                if end {
                    assert!(!driver.wants_body(id), "a body that ended wants no more");
                }
            }
            Op::Release { stream, n } => driver.release(pick(&opened, stream), usize::from(n)),
            Op::Close { stream } => driver.close_stream(pick(&opened, stream)),
            Op::Ping => {
                driver.ping();
            }
            Op::Grow { stream, connection } => driver.grow_windows(stream, connection),
            Op::Server { frame: spec, split } => {
                let bytes = encode(&spec, &opened);
                let step = usize::from(split).max(1);
                for chunk in bytes.chunks(step) {
                    driver.handle_read(chunk);
                }
            }
            Op::Bytes(b) => driver.handle_read(&b),
            Op::Write { n } => {
                let pending = driver.poll_transmit().map_or(0, <[u8]>::len);
                driver.handle_written(usize::from(n).min(pending));
            }
            Op::Eof => driver.handle_eof(),
            Op::Error => driver.handle_read_error("reset"),
        }
        while let Some(e) = driver.poll_event() {
            order.see(&e);
        }
        assert_eq!(order.closed, driver.is_closed(), "the Closed event and is_closed disagree");
        let pending = driver.poll_transmit().map_or(0, <[u8]>::len);
        // Bounded: control answers stop at 1 MiB (then ENHANCE_YOUR_CALM);
        // beyond that only what the caller itself queued (bodies, heads).
        assert!(pending < (1 << 20) + 64 * 1024 * 400 + 45_000 * 400, "{pending} bytes wait to be written");
    }
    // Whatever state it is left in, the connection can always be ended.
    driver.handle_eof();
    while let Some(e) = driver.poll_event() {
        order.see(&e);
    }
    assert!(driver.is_closed() && order.closed);
    let (parts, ()) = http::Request::get("https://a.test/").body(()).unwrap().into_parts();
    assert!(driver.open(&parts, true).is_err());
}
