//! Arbitrary bytes as an HTTP/3 response stream and as a server's
//! unidirectional stream, each fed whole, then in arbitrary splits: no input
//! panics; both feeds give the same events and the same error (DATA parts
//! joined); a response's events come in order (one head, body parts,
//! trailers at most once, `End` last and once) and the body never passes a
//! declared content-length. Shared by the `h3_streams` fuzz target and
//! `core/tests/fuzz_replay.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use bytes::BytesMut;
use switchyard_core::http3::control::{Control, ControlEvent};
use switchyard_core::http3::frame::FrameError;
use switchyard_core::http3::stream::{RequestStream, StreamError, StreamEvent};
use switchyard_core::http3::Settings;

#[derive(Debug, PartialEq)]
enum Seen {
    Head(u16, Option<u64>),
    Data(Vec<u8>),
    Trailers(usize),
    End,
}

/// Feeds `wire` to `take` in parts (sizes from `cuts`, whole when empty),
/// FIN with the last; `take` drains what the part gave.
fn feed<E>(
    wire: &[u8],
    cuts: &[u8],
    mut take: impl FnMut(&mut BytesMut, bool) -> Result<(), E>,
) -> Result<(), E> {
    let mut buf = BytesMut::new();
    let mut at = 0;
    let mut cuts = cuts.iter().map(|&c| usize::from(c % 16) + 1).cycle();
    loop {
        let n = if wire.is_empty() { 0 } else { cuts.next().unwrap_or(wire.len()).min(wire.len() - at) };
        buf.extend_from_slice(&wire[at..at + n]);
        at += n;
        let fin = at == wire.len();
        take(&mut buf, fin)?;
        if fin {
            return Ok(());
        }
    }
}

fn response(method: &str, wire: &[u8], cuts: &[u8]) -> Result<Vec<Seen>, StreamError> {
    let req = http::Request::builder().method(method).uri("https://a.test/").body(()).unwrap().into_parts().0;
    let mut s = RequestStream::new(&req, 4096);
    let mut out: Vec<Seen> = Vec::new();
    feed::<StreamError>(wire, cuts, |buf, fin| {
        while let Some(e) = s.recv(buf, fin)? {
            let seen = match e {
                StreamEvent::Head(r) => {
                    let len = r.headers().get("content-length").and_then(|v| v.to_str().ok()?.parse().ok());
                    Seen::Head(r.status().as_u16(), len)
                }
                StreamEvent::Data(d) => Seen::Data(d.to_vec()),
                StreamEvent::Trailers(t) => Seen::Trailers(t.len()),
                StreamEvent::End => Seen::End,
            };
            if let (Seen::Data(more), Some(Seen::Data(prev))) = (&seen, out.last_mut()) {
                prev.extend_from_slice(more);
                continue;
            }
            out.push(seen);
        }
        if fin {
            assert!(s.is_done(), "FIN with every byte in hand ends the stream one way or the other");
        }
        Ok(())
    })?;
    Ok(out)
}

fn check_order(events: &[Seen], method: &str) {
    let mut iter = events.iter();
    let Some(Seen::Head(status, len)) = iter.next() else {
        assert!(events.is_empty(), "events before the head: {events:?}");
        return;
    };
    let mut body = 0u64;
    let mut rest: Vec<&Seen> = iter.collect();
    assert_eq!(rest.pop(), Some(&Seen::End), "End last: {events:?}");
    for (i, e) in rest.iter().enumerate() {
        match e {
            Seen::Data(d) => body += d.len() as u64,
            Seen::Trailers(_) => assert_eq!(i, rest.len() - 1, "trailers last before End"),
            other => panic!("{other:?} after the head"),
        }
    }
    if method == "HEAD" || *status == 204 || *status == 304 {
        assert_eq!(body, 0);
    } else if let Some(len) = len {
        assert_eq!(body, *len, "a complete body is its content-length");
    }
}

fn uni(wire: &[u8], cuts: &[u8]) -> Result<Vec<ControlEvent>, FrameError> {
    let mut c = Control::new(Settings::default());
    let mut out = Vec::new();
    feed::<FrameError>(wire, cuts, |buf, fin| {
        while let Some(e) = c.recv(3, buf, fin)? {
            out.push(e);
        }
        Ok(())
    })?;
    Ok(out)
}

pub fn run(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let (cuts, wire) = rest.split_at(usize::from(first >> 4).min(rest.len()));
    let method = if first & 1 == 0 { "GET" } else { "HEAD" };
    let whole = response(method, wire, &[]);
    let split = response(method, wire, cuts);
    assert_eq!(whole, split, "whole vs split");
    if let Ok(events) = &whole {
        check_order(events, method);
    }
    assert_eq!(uni(wire, &[]), uni(wire, cuts), "a unidirectional stream, whole vs split");
}
