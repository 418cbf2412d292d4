//! The HTTP/1.1 connection driver, on virtual time: every phase, timer and
//! failure classification, with explicit `now` and no sockets.
#![allow(clippy::unwrap_used)]

use std::io;
use std::time::Duration;

use proptest::prelude::*;
use switchyard_core::http1::{
    BodyFailure, Conn, Driver, DriverConfig, Event, Failure, Peek, Request, RequestBody, TargetForm,
};
use switchyard_core::pool::{ExchangeFailureKind, Progress};
use switchyard_core::{CloseReason, Instant, Reuse};

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn config() -> DriverConfig {
    DriverConfig {
        read_timeout: Some(Duration::from_secs(5)),
        write_timeout: Some(Duration::from_secs(5)),
        ..DriverConfig::default()
    }
}

fn parts(method: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method).uri("http://example.com/up");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

fn start(conn: Conn, p: &http::request::Parts, body: RequestBody, deadline: Option<Instant>) -> Driver {
    conn.start(ms(0), Request::new(p, TargetForm::Origin, body).deadline(deadline))
        .map_err(|r| r.error)
        .expect("valid request")
}

/// Writes everything the driver hands out, `step` bytes at a time.
fn write_all(d: &mut Driver, now: Instant, step: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    while let Some(out) = d.poll_transmit() {
        let n = out.len().min(step);
        wire.extend_from_slice(&out[..n]);
        d.handle_written(now, n);
    }
    wire
}

fn events(d: &mut Driver) -> Vec<Event> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

fn exchange_failure(kind: ExchangeFailureKind, progress: Progress) -> Event {
    Event::Failed(Failure::Exchange { kind, progress })
}

fn eof_before_response() -> ExchangeFailureKind {
    ExchangeFailureKind::Io {
        kind: io::ErrorKind::UnexpectedEof,
        message: "the connection closed before any response byte".into(),
    }
}

const OK_HI: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi";

#[test]
fn get_then_reuse_with_a_probe() {
    let p = parts("GET", &[]);
    let conn = Conn::new(config());
    assert!(!conn.needs_probe(), "a fresh connection needs no probe");
    let mut d = start(conn, &p, RequestBody::None, None);
    assert!(!d.wants_body());
    let wire = write_all(&mut d, ms(1), usize::MAX);
    assert_eq!(wire, b"GET /up HTTP/1.1\r\nhost: example.com\r\n\r\n");
    assert_eq!(events(&mut d), [Event::HeadersSent]);
    assert!(d.wants_read());
    d.handle_read(ms(2), OK_HI);
    let ev = events(&mut d);
    assert!(matches!(&ev[0], Event::Head(r) if r.status() == 200));
    assert_eq!(ev[1..], [Event::Data("hi".into()), Event::Done(Reuse::Reusable)]);
    assert!(d.is_finished() && !d.wants_read() && d.poll_timeout().is_none());
    let idle = d.finish().expect("reusable");
    assert_eq!(idle.exchanges(), 1);
    assert!(idle.needs_probe());
    assert_eq!(idle.check(Peek::Quiet), Ok(()));
    assert_eq!(idle.check(Peek::Eof), Err(CloseReason::ServerClose));
    assert_eq!(idle.check(Peek::Error), Err(CloseReason::Unhealthy));
}

#[test]
fn bytes_after_a_response_retire_the_connection_and_condemn_it_idle() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    let mut two = OK_HI.to_vec();
    two.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    d.handle_read(ms(1), &two);
    let ev = events(&mut d);
    assert_eq!(ev.last(), Some(&Event::Done(Reuse::Retire(CloseReason::BytesAfterResponse))));
    assert_eq!(d.finish().unwrap_err(), CloseReason::BytesAfterResponse);
}

#[test]
fn a_buffered_body_joins_the_head_in_one_write_and_partial_writes_are_counted() {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(5), None);
    assert!(d.wants_body(), "the body may join the head");
    d.handle_body_chunk(ms(0), b"hello", true);
    assert!(!d.wants_body());
    // One byte at a time: HeadersSent once, when the head's last byte is written.
    let wire = write_all(&mut d, ms(0), 1);
    assert!(wire.ends_with(b"\r\n\r\nhello"));
    assert_eq!(d.written(), wire.len() as u64);
    assert_eq!(events(&mut d), [Event::HeadersSent, Event::BodySent { bytes: 5 }]);
    d.handle_read(ms(1), OK_HI);
    assert_eq!(events(&mut d).last(), Some(&Event::Done(Reuse::Reusable)));
}

#[test]
fn a_streamed_body_is_asked_for_one_chunk_at_a_time() {
    let p = parts("PUT", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Chunked, None);
    write_all(&mut d, ms(0), usize::MAX);
    for chunk in [&b"ab"[..], b"cde"] {
        assert!(d.wants_body());
        d.handle_body_chunk(ms(0), chunk, false);
        assert!(!d.wants_body(), "nothing more until this chunk is written");
        write_all(&mut d, ms(0), 2);
    }
    d.handle_body_chunk(ms(0), b"", true);
    let wire = write_all(&mut d, ms(0), usize::MAX);
    assert_eq!(wire, b"0\r\n\r\n");
    assert_eq!(events(&mut d), [Event::HeadersSent, Event::BodySent { bytes: 5 }]);
    assert!(!d.wants_body());
}

#[test]
fn expect_continue_waits_for_100_then_sends() {
    let p = parts("POST", &[("expect", "100-continue")]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(3), None);
    assert!(!d.wants_body());
    write_all(&mut d, ms(0), usize::MAX);
    assert!(!d.wants_body(), "waiting for 100 Continue");
    assert_eq!(d.poll_timeout(), Some(ms(1000)));
    d.handle_read(ms(10), b"HTTP/1.1 100 Continue\r\n\r\n");
    assert!(d.wants_body());
    d.handle_body_chunk(ms(10), b"abc", true);
    assert_eq!(write_all(&mut d, ms(10), usize::MAX), b"abc");
    d.handle_read(ms(20), OK_HI);
    assert_eq!(events(&mut d).last(), Some(&Event::Done(Reuse::Reusable)));
}

#[test]
fn expect_continue_sends_anyway_when_our_timer_fires() {
    let p = parts("POST", &[("expect", "100-continue")]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(3), None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_timeout(ms(999));
    assert!(!d.wants_body(), "not yet");
    d.handle_timeout(ms(1000));
    assert!(d.wants_body(), "RFC 9110 §10.1.1: the client may stop waiting");
}

#[test]
fn a_final_answer_instead_of_100_withholds_the_body_for_good() {
    let p = parts("POST", &[("expect", "100-continue")]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(3), None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(5), b"HTTP/1.1 417 Expectation Failed\r\ncontent-length: 0\r\n\r\n");
    assert!(!d.wants_body());
    let ev = events(&mut d);
    assert!(matches!(&ev[1], Event::Head(r) if r.status() == 417));
    assert_eq!(ev[2], Event::Done(Reuse::Retire(CloseReason::ExpectNotHonoured)));
}

#[test]
fn an_early_answer_stops_the_upload_and_is_returned() {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(1 << 20), None);
    d.handle_body_chunk(ms(0), &vec![b'x'; 1 << 20], true);
    // The socket takes the head and a little of the body, then the server answers.
    let first = d.poll_transmit().unwrap().len();
    d.handle_written(ms(1), 200);
    assert!(d.written() < first as u64);
    d.handle_read(ms(2), b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n");
    assert!(d.poll_transmit().is_none(), "the rest is not sent");
    let ev = events(&mut d);
    assert!(matches!(&ev[1], Event::Head(r) if r.status() == 413), "{ev:?}");
    assert_eq!(ev[2], Event::Done(Reuse::Retire(CloseReason::RequestBodyIncomplete)));
}

#[test]
fn after_a_broken_write_the_answer_sent_before_the_break_is_salvaged() {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(10), None);
    d.handle_body_chunk(ms(0), b"0123456789", true);
    d.poll_transmit();
    d.handle_write_error(ms(1), &io::Error::from(io::ErrorKind::BrokenPipe));
    assert!(d.wants_read());
    assert_eq!(d.poll_timeout(), Some(ms(501)), "the grace for an early response");
    d.handle_read(ms(2), b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n");
    let ev = events(&mut d);
    assert!(matches!(&ev[0], Event::Head(r) if r.status() == 413), "{ev:?}");
    assert_eq!(ev[1], Event::Done(Reuse::Retire(CloseReason::RequestBodyIncomplete)));
}

#[test]
fn a_broken_write_without_an_answer_fails_as_written_after_the_grace() {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(1), None);
    d.handle_body_chunk(ms(0), b"x", true);
    d.poll_transmit();
    let broken = io::Error::from(io::ErrorKind::ConnectionReset);
    d.handle_write_error(ms(1), &broken);
    d.handle_timeout(ms(500));
    assert_eq!(events(&mut d), []);
    d.handle_timeout(ms(501));
    let kind = ExchangeFailureKind::from_io(&broken);
    assert_eq!(events(&mut d), [exchange_failure(kind, Progress::RequestWritten)]);
    assert_eq!(d.finish().unwrap_err(), CloseReason::Failure);
}

#[test]
fn a_stalled_write_times_out_with_no_salvage() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    d.poll_transmit();
    d.handle_written(ms(1000), 3); // progress rearms the timer
    assert_eq!(d.poll_timeout(), Some(ms(6000)));
    d.handle_timeout(ms(6000));
    assert_eq!(events(&mut d), [exchange_failure(ExchangeFailureKind::Timeout, Progress::RequestWritten)]);
}

#[test]
fn read_timeouts_say_how_far_the_response_got() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    events(&mut d);
    d.handle_timeout(ms(5000));
    assert_eq!(events(&mut d), [exchange_failure(ExchangeFailureKind::Timeout, Progress::RequestWritten)]);

    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    events(&mut d);
    d.handle_read(ms(100), b"HTTP/1.1 2");
    d.handle_timeout(ms(5099));
    assert_eq!(events(&mut d), []);
    d.handle_timeout(ms(5100));
    assert_eq!(events(&mut d), [exchange_failure(ExchangeFailureKind::Timeout, Progress::ResponseStarted)]);
}

#[test]
fn a_trickled_head_cannot_outlive_the_call() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, Some(ms(1000)));
    write_all(&mut d, ms(0), usize::MAX);
    events(&mut d);
    let head = b"HTTP/1.1 200 OK\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut t = 0;
    for b in head.iter() {
        t += 50;
        d.handle_read(ms(t), &[*b]);
        if d.is_finished() {
            break;
        }
    }
    assert!(t <= 1000 + 50);
    assert_eq!(events(&mut d), [exchange_failure(ExchangeFailureKind::Timeout, Progress::ResponseStarted)]);
}

#[test]
fn a_deadline_passed_before_writing_fails_as_nothing_written() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, Some(ms(10)));
    d.handle_timeout(ms(10));
    assert_eq!(events(&mut d), [exchange_failure(ExchangeFailureKind::Timeout, Progress::NothingWritten)]);
}

#[test]
fn a_close_before_any_response_byte_is_an_io_failure_after_writing() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    events(&mut d);
    d.handle_eof(ms(1));
    assert_eq!(events(&mut d), [exchange_failure(eof_before_response(), Progress::RequestWritten)]);
}

#[test]
fn eof_while_sending_waits_for_the_request_to_finish() {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(2), None);
    d.handle_eof(ms(0));
    assert!(!d.wants_read());
    assert_eq!(events(&mut d), [], "not an answer yet: the write side reports first");
    d.handle_body_chunk(ms(0), b"ab", true);
    write_all(&mut d, ms(0), usize::MAX);
    let ev = events(&mut d);
    assert_eq!(ev.last(), Some(&exchange_failure(eof_before_response(), Progress::RequestWritten)));
}

#[test]
fn a_malformed_head_is_a_protocol_failure_once_the_response_started() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(1), b"SSH-2.0-OpenSSH\r\n");
    let ev = events(&mut d);
    assert!(matches!(
        ev.last(),
        Some(Event::Failed(Failure::Exchange {
            kind: ExchangeFailureKind::Protocol { .. },
            progress: Progress::ResponseStarted
        }))
    ));
}

#[test]
fn the_body_deadline_runs_from_the_head() {
    let p = parts("GET", &[]);
    let mut d = Conn::new(config())
        .start(
            ms(0),
            Request::new(&p, TargetForm::Origin, RequestBody::None)
                .body_timeout(Some(Duration::from_millis(300))),
        )
        .unwrap();
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(100), b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nab");
    assert_eq!(d.poll_timeout(), Some(ms(400)));
    d.handle_read(ms(399), b"c");
    d.handle_timeout(ms(400));
    let ev = events(&mut d);
    assert_eq!(ev.last(), Some(&Event::Failed(Failure::Body(BodyFailure::Timeout))));
    assert_eq!(d.finish().unwrap_err(), CloseReason::Failure);
}

#[test]
fn back_pressure_no_read_while_an_event_waits() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    events(&mut d);
    d.handle_read(ms(1), b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc");
    assert!(!d.wants_read());
    assert!(matches!(d.poll_event(), Some(Event::Head(_))));
    assert!(!d.wants_read());
    assert_eq!(d.poll_event(), Some(Event::Data("abc".into())));
    assert!(d.wants_read());
}

#[test]
fn an_abandoned_body_is_drained_within_its_bounds() {
    let p = parts("GET", &[]);
    // The rest arrives within the bounds: reusable.
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(1), b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc");
    d.abandon(ms(2));
    assert_eq!(d.poll_timeout(), Some(ms(102)));
    d.handle_read(ms(50), b"def");
    assert_eq!(events(&mut d).last(), Some(&Event::Done(Reuse::Reusable)));
    assert!(d.finish().is_ok());

    // Too slow: closed.
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(1), b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc");
    d.abandon(ms(2));
    d.handle_timeout(ms(102));
    assert_eq!(events(&mut d).last(), Some(&Event::Done(Reuse::Retire(CloseReason::UnreadBody))));

    // Too much: closed.
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(1), b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n");
    d.abandon(ms(2));
    let mut t = 2;
    while !d.is_finished() {
        t += 1;
        d.handle_read(ms(t), &[b'z'; 8192]);
    }
    assert!(t < 20);
    assert_eq!(events(&mut d).last(), Some(&Event::Done(Reuse::Retire(CloseReason::UnreadBody))));

    // Dropped before the head: nothing to drain.
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.abandon(ms(1));
    assert!(d.finish().is_err());
}

#[test]
fn a_refused_request_gives_the_connection_back_untouched() {
    // A Content-Length beside a chunked body: the encoder refuses it.
    let mut bad = parts("GET", &[]);
    bad.headers.insert("content-length", http::HeaderValue::from_static("3"));
    let conn = Conn::new(config());
    let refused =
        conn.start(ms(0), Request::new(&bad, TargetForm::Origin, RequestBody::Chunked)).unwrap_err();
    assert_eq!(refused.conn.exchanges(), 0);
    assert!(refused.error.to_string().contains("chunked"), "{}", refused.error);
}

#[test]
fn a_body_longer_than_announced_fails_as_the_callers_fault() {
    let p = parts("POST", &[]);
    // Before anything was written: the connection goes back as it was.
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(2), None);
    d.handle_body_chunk(ms(0), b"abc", true);
    assert!(matches!(events(&mut d).as_slice(), [Event::Failed(Failure::Request { .. })]));
    assert!(d.finish().is_ok());
    // After the head went out: the connection cannot be reused.
    let mut d = start(Conn::new(config()), &p, RequestBody::Length(2), None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_body_error(ms(1), "disk read failed");
    assert!(matches!(
        events(&mut d).as_slice(),
        [Event::HeadersSent, Event::Failed(Failure::Request { .. })]
    ));
    assert_eq!(d.finish().unwrap_err(), CloseReason::RequestBodyIncomplete);
}

#[test]
fn upgrades_and_close_delimited_bodies_retire() {
    let p = parts("GET", &[]);
    let mut d = start(Conn::new(config()), &p, RequestBody::None, None);
    write_all(&mut d, ms(0), usize::MAX);
    d.handle_read(ms(1), b"HTTP/1.1 200 OK\r\n\r\nall of it");
    d.handle_eof(ms(2));
    let ev = events(&mut d);
    assert_eq!(
        ev[ev.len() - 2..],
        [Event::Data("all of it".into()), Event::Done(Reuse::Retire(CloseReason::CloseDelimited))]
    );
}

/// Runs one exchange: `reads` split points over `response`, `write_step` bytes per write.
fn run(body: &[u8], response: &[u8], cuts: &[usize], write_step: usize) -> (Vec<u8>, Vec<Event>) {
    let p = parts(if body.is_empty() { "GET" } else { "POST" }, &[]);
    let framing = if body.is_empty() { RequestBody::None } else { RequestBody::Chunked };
    let mut d = start(Conn::new(config()), &p, framing, None);
    let mut wire = Vec::new();
    let mut fed = false;
    let mut all = Vec::new();
    while !d.is_finished() || d.poll_timeout().is_some() {
        if d.wants_body() {
            d.handle_body_chunk(ms(0), body, true);
        }
        let w = write_all(&mut d, ms(0), write_step);
        wire.extend_from_slice(&w);
        if !fed && !d.wants_body() && d.poll_transmit().is_none() {
            fed = true;
            let mut at = 0;
            for &c in cuts {
                let c = c.min(response.len());
                if c > at {
                    d.handle_read(ms(1), &response[at..c]);
                    all.extend(events(&mut d));
                    at = c;
                }
            }
            d.handle_read(ms(1), &response[at..]);
            all.extend(events(&mut d));
            d.handle_eof(ms(2));
        }
        all.extend(events(&mut d));
        if d.is_finished() {
            break;
        }
        if fed && !d.wants_read() && d.poll_event().is_none() {
            break;
        }
    }
    all.extend(events(&mut d));
    (wire, all)
}

proptest! {
    /// Splits of the response and of the writes change nothing: the same wire
    /// bytes, the same events, in the same order.
    #[test]
    fn splits_change_nothing(
        body in proptest::collection::vec(any::<u8>(), 0..64),
        mut cuts in proptest::collection::vec(0usize..120, 0..6),
        step in 1usize..40,
        chunked in any::<bool>(),
    ) {
        cuts.sort_unstable();
        let response: &[u8] = if chunked {
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabcde"
        };
        let (wire1, ev1) = run(&body, response, &[], usize::MAX);
        let (wire2, ev2) = run(&body, response, &cuts, step);
        prop_assert_eq!(wire1, wire2);
        let data = |ev: &[Event]| ev.iter().filter_map(|e| match e { Event::Data(b) => Some(b.to_vec()), _ => None }).flatten().collect::<Vec<u8>>();
        prop_assert_eq!(data(&ev1), b"abcde".to_vec());
        prop_assert_eq!(data(&ev2), b"abcde".to_vec());
        let shape = |ev: &[Event]| ev.iter().filter(|e| !matches!(e, Event::Data(_))).cloned().collect::<Vec<_>>();
        prop_assert_eq!(shape(&ev1), shape(&ev2));
        prop_assert_eq!(ev2.last(), Some(&Event::Done(Reuse::Reusable)));
    }
}

/// Sends `chunks` (sizes) as a body framed by `kind`, each as owned bytes
/// (`owned`) or copied, writing `step` bytes at a time; returns the wire and
/// the events.
fn upload(kind: RequestBody, chunks: &[usize], owned: bool, step: usize) -> (Vec<u8>, Vec<Event>) {
    let p = parts("POST", &[]);
    let mut d = start(Conn::new(config()), &p, kind, None);
    let mut wire = Vec::new();
    for (i, &len) in chunks.iter().enumerate() {
        assert!(d.wants_body(), "asked for chunk {i}");
        let last = i + 1 == chunks.len();
        // Distinct bytes per chunk, so misordering shows.
        let data = bytes::Bytes::from(vec![b'a' + (i % 26) as u8; len]);
        if owned {
            d.handle_body_bytes(ms(0), data, last);
        } else {
            d.handle_body_chunk(ms(0), &data, last);
        }
        wire.extend(write_all(&mut d, ms(0), step));
    }
    d.handle_read(ms(1), OK_HI);
    (wire, events(&mut d))
}

#[test]
fn a_large_owned_chunk_goes_out_whole_and_in_order() {
    // 64 KiB in one chunk, written 1000 bytes at a time, after the head.
    let (wire, ev) = upload(RequestBody::Length(65_536), &[65_536], true, 1000);
    let head_end = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(wire.len() - head_end, 65_536);
    assert!(wire[head_end..].iter().all(|b| *b == b'a'));
    assert_eq!(ev[..2], [Event::HeadersSent, Event::BodySent { bytes: 65_536 }]);
    assert_eq!(ev.last(), Some(&Event::Done(Reuse::Reusable)));
    // Chunked framing around an owned chunk, then the last chunk.
    let (wire, _) = upload(RequestBody::Chunked, &[20_000, 3], true, usize::MAX);
    let body = &wire[wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    let mut expected = b"4e20\r\n".to_vec();
    expected.extend(std::iter::repeat_n(b'a', 20_000));
    expected.extend_from_slice(b"\r\n3\r\nbbb\r\n0\r\n\r\n");
    assert_eq!(body, expected);
}

#[test]
fn an_owned_chunk_past_the_declared_length_fails_the_request_like_a_copied_one() {
    for owned in [false, true] {
        let p = parts("POST", &[]);
        let mut d = start(Conn::new(config()), &p, RequestBody::Length(10), None);
        let data = bytes::Bytes::from(vec![b'x'; 20_000]);
        if owned {
            d.handle_body_bytes(ms(0), data, true);
        } else {
            d.handle_body_chunk(ms(0), &data, true);
        }
        assert!(
            matches!(events(&mut d).last(), Some(Event::Failed(Failure::Request { .. }))),
            "owned: {owned}"
        );
        assert!(d.poll_transmit().is_none(), "nothing of the refused chunk goes out");
    }
}

proptest! {
    /// Owned chunks (held, not copied, when large) put exactly the bytes of
    /// copied chunks on the wire, with the same events, whatever the chunk
    /// sizes, framing and write sizes.
    #[test]
    fn owned_and_copied_chunks_write_the_same_bytes(
        chunks in proptest::collection::vec(0usize..40_000, 1..5),
        chunked in any::<bool>(),
        step in prop_oneof![Just(usize::MAX), 1usize..5_000],
    ) {
        let total: usize = chunks.iter().sum();
        let kind = if chunked { RequestBody::Chunked } else { RequestBody::Length(total as u64) };
        let copied = upload(kind, &chunks, false, step);
        let owned = upload(kind, &chunks, true, step);
        prop_assert_eq!(&copied.0, &owned.0);
        prop_assert_eq!(copied.1, owned.1);
    }
}
