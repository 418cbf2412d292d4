//! Arbitrary inputs to the HTTP/1.1 connection driver: response bytes cut at
//! any point, EOFs, read and write errors, partial writes of any size, body
//! chunks, timer firings and time going forwards, abandoned bodies — in any
//! order, wanted or not. No input may panic, and after every step: events come
//! in their order and end once; nothing is buffered without bound; a driver
//! that has not finished always has something to do (bytes to write, a read
//! or a body chunk it wants, or a timer). Shared by the `h1_driver` fuzz target
//! and `core/tests/h1_driver_ops.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use switchyard_core::http1::{Conn, Driver, DriverConfig, Event, Limits, Request, RequestBody, TargetForm};
use switchyard_core::Instant;

#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// The next `n` bytes of the scripted response.
    Read {
        n: u8,
    },
    Eof,
    ReadError {
        timeout: bool,
    },
    /// The socket takes `n` bytes of what the driver hands out.
    Write {
        n: u16,
    },
    WriteError {
        timeout: bool,
    },
    /// A body chunk of `len` bytes; `last` ends the body.
    Body {
        len: u8,
        last: bool,
    },
    BodyError,
    Advance {
        ms: u16,
    },
    Timeout,
    Abandon,
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    method: u8,
    body: u8,
    expect: bool,
    response: u8,
    raw: Vec<u8>,
    deadline_ms: Option<u16>,
    body_timeout_ms: Option<u16>,
    timeouts: bool,
    ops: Vec<Op>,
}

const SCRIPTS: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n",
    b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\r\nuntil the connection closes",
    b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\nnew protocol bytes",
    b"\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n",
];

fn limits() -> Limits {
    Limits {
        max_head_size: 512,
        max_headers: 16,
        max_chunk_line: 64,
        max_informational: 3,
        keep_raw_head: true,
    }
}

/// Checks what the driver has said so far, in order.
#[derive(Default)]
struct Order {
    headers_sent: bool,
    body_sent: bool,
    head: bool,
    ended: bool,
}

impl Order {
    fn see(&mut self, e: &Event) {
        assert!(!self.ended, "an event after the exchange ended: {e:?}");
        match e {
            Event::HeadersSent => {
                assert!(!self.headers_sent, "HeadersSent twice");
                self.headers_sent = true;
            }
            Event::BodySent { .. } => {
                assert!(self.headers_sent && !self.body_sent, "BodySent out of order");
                self.body_sent = true;
            }
            Event::Head(_) => {
                assert!(!self.head, "two heads");
                self.head = true;
            }
            Event::Data(_) | Event::Trailers(_) => assert!(self.head, "body before the head"),
            Event::Done(_) => {
                assert!(self.head, "done without a head");
                self.ended = true;
            }
            Event::Failed(_) => self.ended = true,
        }
    }
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else { return };
    let method = ["GET", "POST", "HEAD", "PUT", "CONNECT"][usize::from(input.method) % 5];
    let body = match input.body % 3 {
        0 => RequestBody::None,
        1 => RequestBody::Length(u64::from(input.body)),
        _ => RequestBody::Chunked,
    };
    let uri = if method == "CONNECT" { "http://example.com:443/" } else { "http://example.com/x" };
    let mut b = http::Request::builder().method(method).uri(uri);
    if input.expect {
        b = b.header("expect", "100-continue");
    }
    let (parts, ()) = b.body(()).unwrap().into_parts();
    let form = if method == "CONNECT" { TargetForm::Authority } else { TargetForm::Origin };
    let config = DriverConfig {
        limits: limits(),
        read_timeout: input.timeouts.then(|| Duration::from_millis(300)),
        write_timeout: input.timeouts.then(|| Duration::from_millis(200)),
        ..DriverConfig::default()
    };
    let response: &[u8] = match usize::from(input.response) {
        i if i < SCRIPTS.len() * 2 => SCRIPTS[i % SCRIPTS.len()],
        _ => &input.raw,
    };
    let mut now = Instant::ZERO;
    let request = Request::new(&parts, form, body)
        .deadline(input.deadline_ms.map(|ms| now + Duration::from_millis(u64::from(ms))))
        .body_timeout(input.body_timeout_ms.map(|ms| Duration::from_millis(u64::from(ms))));
    let mut driver = match Conn::new(config).start(now, request) {
        Ok(d) => d,
        Err(refused) => {
            assert_eq!(refused.conn.exchanges(), 0);
            return;
        }
    };
    let mut order = Order::default();
    let mut at = 0usize;
    for op in input.ops {
        let mut last_read = 0;
        match op {
            Op::Read { n } => {
                let end = (at + usize::from(n)).min(response.len());
                last_read = end - at;
                driver.handle_read(now, &response[at..end]);
                at = end;
            }
            Op::Eof => driver.handle_eof(now),
            Op::ReadError { timeout } => {
                let kind =
                    if timeout { std::io::ErrorKind::TimedOut } else { std::io::ErrorKind::ConnectionReset };
                driver.handle_read_error(now, &kind.into());
            }
            Op::Write { n } => {
                let pending = driver.poll_transmit().map_or(0, <[u8]>::len);
                driver.handle_written(now, usize::from(n).min(pending));
            }
            Op::WriteError { timeout } => {
                let kind =
                    if timeout { std::io::ErrorKind::TimedOut } else { std::io::ErrorKind::BrokenPipe };
                driver.handle_write_error(now, &kind.into());
            }
            // Even lengths as owned bytes, scaled so many reach 16 KiB (held,
            // not copied); odd ones copied.
            Op::Body { len, last } if len % 2 == 0 => {
                driver.handle_body_bytes(now, vec![b'b'; usize::from(len) * 257].into(), last);
            }
            Op::Body { len, last } => driver.handle_body_chunk(now, &vec![b'b'; usize::from(len)], last),
            Op::BodyError => driver.handle_body_error(now, "source failed"),
            Op::Advance { ms } => now += Duration::from_millis(u64::from(ms)),
            Op::Timeout => driver.handle_timeout(now),
            Op::Abandon => driver.abandon(now),
        }
        check(&mut driver, &mut order, now, last_read);
    }
    // Whatever state it is left in, the exchange can always be ended.
    let finished = driver.is_finished();
    let outcome = driver.finish();
    if !finished {
        assert!(outcome.is_err(), "an unfinished exchange must not give back a reusable connection");
    }
}

fn check(driver: &mut Driver, order: &mut Order, now: Instant, last_read: usize) {
    while let Some(e) = driver.poll_event() {
        order.see(&e);
    }
    assert_eq!(order.ended, driver.is_finished(), "the terminal event and is_finished disagree");
    // Bounded buffering: the read buffer never holds more than the head limit
    // and the chunk-line limit past the last read; what waits to be written is
    // the head and at most one encoded chunk (255 bytes and its framing), or
    // one owned chunk the driver holds as given (up to 255 × 257 bytes).
    let l = limits();
    assert!(
        driver.buffered() <= l.max_head_size + l.max_chunk_line + last_read + 8,
        "{} buffered",
        driver.buffered()
    );
    if let Some(out) = driver.poll_transmit() {
        assert!(out.len() <= 1024 + 255 * 257, "{} bytes waiting to be written", out.len());
    }
    // Never stuck: an unfinished driver always has something to do.
    if !driver.is_finished() {
        let busy = driver.wants_read()
            || driver.wants_body()
            || driver.poll_transmit().is_some()
            || driver.poll_timeout().is_some();
        assert!(busy, "stuck: unfinished, wanting nothing, no timer");
    }
    if let Some(t) = driver.poll_timeout() {
        // A deadline in the past is fine (it fires on the next handle_timeout);
        // one more than a day away is not something this config can arm.
        assert!(t <= now + Duration::from_secs(86_400), "timer too far: {t:?}");
    }
}
