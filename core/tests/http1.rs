//! The HTTP/1.1 codec: RFC 9112 framing cases, keep-alive rules and errors as
//! tables; split invariance and request round trips as properties.
#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/harness.rs"]
mod harness;

use bytes::BytesMut;
use harness::{decode_in_splits, Outcome, RoundTrip};
use http::Method;
use proptest::prelude::*;
use switchyard_core::http1::{BodyPermission, Exchange, Frame, Http1Error, Limits, RequestBody, TargetForm};
use switchyard_core::{CloseReason, Reuse};

fn decode(method: &Method, input: &str, eof: bool) -> Outcome {
    decode_in_splits(method, input.as_bytes(), &[], eof, Limits::default())
}
fn get(input: &str) -> Outcome {
    decode(&Method::GET, input, false)
}
fn get_eof(input: &str) -> Outcome {
    decode(&Method::GET, input, true)
}
fn retire(r: CloseReason) -> Reuse {
    Reuse::Retire(r)
}

// ------------------------------------------------------------------ framing

#[test]
fn content_length_body() {
    let o = get("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(o.head.as_ref().unwrap().0, 200);
    assert_eq!(o.body, b"hello");
    assert!(o.end);
    assert_eq!(o.reuse, Reuse::Reusable);
}

#[test]
fn chunked_with_extensions_and_trailers() {
    // RFC 9112 §7.1: chunk-ext after the size, trailer fields after the last chunk.
    let o = get(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
         4;name=value\r\nWiki\r\n5 ; x=\"q\"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n",
    );
    assert_eq!(o.body, b"Wikipedia in\r\n\r\nchunks.");
    assert_eq!(o.trailers, [("expires".to_owned(), b"never".to_vec())]);
    assert!(o.end);
    assert_eq!(o.reuse, Reuse::Reusable);
    let bare = get("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
    assert!(bare.end && bare.body.is_empty() && bare.trailers.is_empty());
}

#[test]
fn close_delimited_body_ends_at_eof_and_retires_the_connection() {
    let o = get("HTTP/1.1 200 OK\r\n\r\nuntil the end");
    assert!(!o.end, "not over before EOF");
    assert_eq!(o.reuse, retire(CloseReason::UnreadBody));
    let o = get_eof("HTTP/1.1 200 OK\r\n\r\nuntil the end");
    assert_eq!(o.body, b"until the end");
    assert!(o.end);
    assert_eq!(o.reuse, retire(CloseReason::CloseDelimited));
    // A transfer coding that does not end in chunked is also close-delimited.
    let o = get_eof("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz");
    assert_eq!((o.body.as_slice(), o.reuse), (&b"xyz"[..], retire(CloseReason::CloseDelimited)));
}

#[test]
fn no_body_for_head_204_304() {
    let o = decode(&Method::HEAD, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", false);
    assert!(o.end && o.body.is_empty());
    assert_eq!(o.reuse, Reuse::Reusable);
    for status in ["204 No Content", "304 Not Modified"] {
        let o = get(&format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n"));
        assert!(o.end && o.body.is_empty(), "{status}");
    }
}

#[test]
fn informational_responses_are_skipped() {
    let o = get("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(o.informational, [100, 103]);
    assert_eq!(o.head.unwrap().0, 200);
    assert!(o.end);
}

#[test]
fn switching_protocols_hands_over_the_connection() {
    let mut buf =
        BytesMut::from(&b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"[..]);
    let (parts, ()) = http::Request::get("http://e.com/ws").body(()).unwrap().into_parts();
    let (mut ex, _) =
        Exchange::new(&parts, TargetForm::Origin, RequestBody::None, Limits::default()).unwrap();
    assert!(matches!(ex.decode(&mut buf, false).unwrap(), Some(Frame::Head(r)) if r.status() == 101));
    assert_eq!(ex.decode(&mut buf, false).unwrap(), Some(Frame::Upgraded));
    assert_eq!(ex.decode(&mut buf, false).unwrap(), None);
    assert_eq!(&buf[..], b"\x81\x05hello", "the new protocol's bytes are left for the caller");
    assert_eq!(ex.reuse(), retire(CloseReason::Exclusive));
}

#[test]
fn connect_2xx_is_a_tunnel() {
    let o = decode(&Method::CONNECT, "HTTP/1.1 200 Connection Established\r\n\r\n", false);
    assert!(o.upgraded);
    assert_eq!(o.reuse, retire(CloseReason::Exclusive));
    let o = decode(&Method::CONNECT, "HTTP/1.1 407 Proxy Auth\r\nContent-Length: 2\r\n\r\nno", false);
    assert!(!o.upgraded && o.end);
}

// ------------------------------------------------------------------ keep-alive

#[test]
fn keep_alive_rules() {
    let cases: &[(&str, Reuse)] = &[
        ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", Reuse::Reusable),
        (
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            retire(CloseReason::ServerClose),
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: upgrade, Close\r\nContent-Length: 0\r\n\r\n",
            retire(CloseReason::ServerClose),
        ),
        ("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", retire(CloseReason::ServerClose)),
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", Reuse::Reusable),
    ];
    for (input, expected) in cases {
        assert_eq!(get(input).reuse, *expected, "{input:?}");
    }
}

#[test]
fn request_connection_close_retires() {
    let (parts, ()) =
        http::Request::get("http://e.com/").header("connection", "close").body(()).unwrap().into_parts();
    let (mut ex, _) =
        Exchange::new(&parts, TargetForm::Origin, RequestBody::None, Limits::default()).unwrap();
    let mut buf = BytesMut::from(&b"HTTP/1.1 204 No Content\r\n\r\n"[..]);
    while ex.decode(&mut buf, false).unwrap().is_some() {}
    assert_eq!(ex.reuse(), retire(CloseReason::RequestClose));
}

#[test]
fn unread_body_and_framing_errors_retire() {
    assert_eq!(
        get("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").reuse,
        retire(CloseReason::UnreadBody)
    );
    assert_eq!(get("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").reuse, retire(CloseReason::Failure));
}

#[test]
fn expect_100_continue() {
    let req = || {
        http::Request::put("http://e.com/big")
            .header("expect", "100-continue")
            .body(())
            .unwrap()
            .into_parts()
            .0
    };
    // 100 arrives: the body may go.
    let (mut ex, _) =
        Exchange::new(&req(), TargetForm::Origin, RequestBody::Length(3), Limits::default()).unwrap();
    assert_eq!(ex.body_permission(), BodyPermission::AwaitContinue);
    assert_eq!(ex.encode_body(b"abc", &mut Vec::new()), Err(Http1Error::BodyNotAllowed));
    let mut buf = BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\n"[..]);
    ex.decode(&mut buf, false).unwrap();
    assert_eq!(ex.body_permission(), BodyPermission::Send);
    let mut out = Vec::new();
    ex.encode_body(b"abc", &mut out).unwrap();
    ex.finish_body(None, &mut out).unwrap();
    buf.extend_from_slice(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    while ex.decode(&mut buf, false).unwrap().is_some() {}
    assert_eq!(ex.reuse(), Reuse::Reusable);

    // A final response first: the body is withheld and the connection retired.
    let (mut ex, _) =
        Exchange::new(&req(), TargetForm::Origin, RequestBody::Length(3), Limits::default()).unwrap();
    let mut buf = BytesMut::from(&b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n"[..]);
    while ex.decode(&mut buf, false).unwrap().is_some() {}
    assert_eq!(ex.body_permission(), BodyPermission::Withheld);
    assert_eq!(ex.reuse(), retire(CloseReason::ExpectNotHonoured));

    // The adapter's timeout: send anyway.
    let (mut ex, _) =
        Exchange::new(&req(), TargetForm::Origin, RequestBody::Length(3), Limits::default()).unwrap();
    ex.continue_timed_out();
    assert_eq!(ex.body_permission(), BodyPermission::Send);
}

#[test]
fn response_before_the_request_body_is_sent_retires() {
    let (parts, ()) = http::Request::post("http://e.com/").body(()).unwrap().into_parts();
    let (mut ex, _) =
        Exchange::new(&parts, TargetForm::Origin, RequestBody::Length(10), Limits::default()).unwrap();
    ex.encode_body(b"12345", &mut Vec::new()).unwrap();
    let mut buf = BytesMut::from(&b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\n\r\n"[..]);
    while ex.decode(&mut buf, false).unwrap().is_some() {}
    assert_eq!(ex.reuse(), retire(CloseReason::RequestBodyIncomplete));
}

/// The body was encoded whole (head and body in one buffer) but an early
/// answer stopped the write: the adapter says so, and the connection retires.
#[test]
fn an_abandoned_body_retires_even_when_fully_encoded() {
    let (parts, ()) = http::Request::post("http://e.com/").body(()).unwrap().into_parts();
    let (mut ex, _) =
        Exchange::new(&parts, TargetForm::Origin, RequestBody::Length(5), Limits::default()).unwrap();
    let mut out = Vec::new();
    ex.encode_body(b"12345", &mut out).unwrap();
    ex.finish_body(None, &mut out).unwrap();
    assert!(ex.body_sent());
    let mut buf = BytesMut::from(&b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n"[..]);
    while ex.decode(&mut buf, false).unwrap().is_some() {}
    assert_eq!(ex.reuse(), Reuse::Reusable, "everything went out: reusable");
    ex.abandon_body();
    assert!(!ex.body_sent());
    assert_eq!(ex.reuse(), retire(CloseReason::RequestBodyIncomplete));
}

// ------------------------------------------------------------------ errors

#[test]
fn framing_errors() {
    let cases: &[(&str, Http1Error)] = &[
        (
            "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
            Http1Error::InvalidContentLength { value: "abc".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            Http1Error::InvalidContentLength { value: "-1".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            Http1Error::InvalidContentLength { value: "+5".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            Http1Error::InvalidContentLength { value: "99999999999999999999".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            Http1Error::ConflictingContentLength { values: vec!["5".into(), "6".into()] },
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            Http1Error::ContentLengthAndTransferEncoding,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            Http1Error::InvalidChunkSize { line: "zz\r".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
            Http1Error::InvalidChunkSize { line: "10000000000000000\r".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\n",
            Http1Error::InvalidChunkSize { line: "5".into() },
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
            Http1Error::MissingChunkTerminator,
        ),
        ("HTTP/1.1 2000 OK\r\n\r\n", Http1Error::MalformedHead { reason: "invalid status line" }),
        ("HTTP/2.0 200 OK\r\n\r\n", Http1Error::NotHttp { start: "HTTP/2".into() }),
        ("HTTP/1.x 200 OK\r\n\r\n", Http1Error::NotHttp { start: "HTTP/1.x".into() }),
        (
            "HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n",
            Http1Error::MalformedHead { reason: "invalid header name" },
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(get(input).error.as_ref(), Some(expected), "{input:?}");
    }
    // Equal duplicates are one length (RFC 9112 §6.3 item 5).
    assert_eq!(get("HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok").body, b"ok");
}

#[test]
fn limits() {
    let limits = Limits {
        max_head_size: 64,
        max_headers: 3,
        max_chunk_line: 8,
        max_informational: 5,
        keep_raw_head: false,
    };
    let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(100));
    let o = decode_in_splits(&Method::GET, big.as_bytes(), &[], false, limits);
    assert_eq!(o.error, Some(Http1Error::HeadTooLarge { limit: 64 }));
    // Without a terminator in sight, buffering stops at the limit too.
    let o = decode_in_splits(&Method::GET, &big.as_bytes()[..80], &[], false, limits);
    assert_eq!(o.error, Some(Http1Error::HeadTooLarge { limit: 64 }));
    let many = "HTTP/1.1 200 OK\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\n\r\n";
    let o = decode_in_splits(&Method::GET, many.as_bytes(), &[], false, limits);
    assert_eq!(o.error, Some(Http1Error::TooManyHeaders { limit: 3 }));
    let ext = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;aaaaaaaaaaaaa\r\nx\r\n0\r\n\r\n";
    let o = decode_in_splits(&Method::GET, ext.as_bytes(), &[], false, limits);
    assert_eq!(o.error, Some(Http1Error::ChunkLineTooLong { limit: 8 }));
    let default = format!("HTTP/1.1 200 OK\r\n{}\r\n", "h: v\r\n".repeat(101));
    assert_eq!(get(&default).error, Some(Http1Error::TooManyHeaders { limit: 100 }));
}

/// Heads are parsed with a few dozen header slots on the stack and, past them,
/// again with the limit's worth on the heap: every count around that switch,
/// and around the limit, parses whole or fails with the limit it passed.
#[test]
fn header_counts_around_the_stack_slots_and_the_limit() {
    let head = |n: usize| {
        let mut h = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_owned();
        for i in 1..n {
            h.push_str(&format!("x-{i}: v{i}\r\n"));
        }
        h + "\r\nok"
    };
    for max in [1, 3, 31, 32, 33, 64, 100, 150] {
        let limits = Limits { max_headers: max, ..Limits::default() };
        for n in [1, 2, 31, 32, 33, 34, 64, 99, 100, 101, 150, 151] {
            let o = decode_in_splits(&Method::GET, head(n).as_bytes(), &[], false, limits);
            if n <= max {
                assert_eq!(o.error, None, "{n} fields, limit {max}");
                let (status, fields) = o.head.expect("head");
                assert_eq!(status, 200);
                assert_eq!(fields.len(), n, "{n} fields, limit {max}");
                assert_eq!(
                    fields.last().map(|f| f.1.clone()),
                    Some(if n == 1 { b"2".to_vec() } else { format!("v{}", n - 1).into_bytes() })
                );
                assert_eq!(o.body, b"ok");
            } else {
                assert_eq!(
                    o.error,
                    Some(Http1Error::TooManyHeaders { limit: max }),
                    "{n} fields, limit {max}"
                );
            }
        }
    }
}

#[test]
fn truncation_is_an_error_not_silent_success() {
    let o = get_eof("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    assert_eq!(o.error, Some(Http1Error::TruncatedBody { expected: Some(10), received: 3 }));
    assert_eq!(o.body, b"abc");
    let o = get_eof("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
    assert_eq!(o.error, Some(Http1Error::TruncatedBody { expected: None, received: 2 }));
    let o = get_eof("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n");
    assert_eq!(o.error, Some(Http1Error::TruncatedBody { expected: None, received: 5 }));
    assert_eq!(get_eof("").error, Some(Http1Error::EmptyResponse));
    assert_eq!(get_eof("HTTP/1.1 200").error, Some(Http1Error::TruncatedHead { received: 12 }));
    assert_eq!(
        get_eof("HTTP/1.1 100 Continue\r\n\r\n").error,
        Some(Http1Error::TruncatedHead { received: 0 }),
        "after an interim response, EOF is a truncated head, not an empty response"
    );
}

/// Anything after the end of a response — an unsolicited second response, a
/// body on a 204 or on a HEAD response, garbage — retires the connection and is
/// never decoded, whether it arrived with the response or in a later read.
#[test]
fn bytes_after_the_response_retire_the_connection() {
    let smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nforeign";
    let cases: [(&Method, String); 6] = [
        (&Method::GET, format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok{smuggled}")),
        (
            &Method::GET,
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n{smuggled}"),
        ),
        (&Method::GET, format!("HTTP/1.1 204 No Content\r\n\r\n{smuggled}")),
        (&Method::GET, "HTTP/1.1 204 No Content\r\n\r\nbody on a 204".to_owned()),
        (&Method::HEAD, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody".to_owned()),
        (&Method::GET, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\r\n".to_owned()),
    ];
    for (method, input) in &cases {
        // Whole, split at every point, and byte by byte: the same verdict.
        for cut in 0..=input.len() {
            let o = decode_in_splits(method, input.as_bytes(), &[cut], false, Limits::default());
            assert!(o.end, "{input:?} cut at {cut}");
            assert_eq!(o.reuse, retire(CloseReason::BytesAfterResponse), "{input:?} cut at {cut}");
            assert!(!o.body.ends_with(b"foreign"), "the extra response is never read as this body");
        }
    }
    // Exactly the response: reusable.
    assert_eq!(get("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").reuse, Reuse::Reusable);
    // A tunnel's bytes belong to the new protocol, not to a next response.
    let o = decode(&Method::CONNECT, "HTTP/1.1 200 OK\r\n\r\nTLS bytes", false);
    assert_eq!(o.reuse, retire(CloseReason::Exclusive));
}

#[test]
fn informational_responses_are_limited() {
    let interim = "HTTP/1.1 103 Early Hints\r\n\r\n";
    let final_ = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let five = format!("{}{final_}", interim.repeat(5));
    assert_eq!(get(&five).head.map(|h| h.0), Some(200));
    let six = format!("{}{final_}", interim.repeat(6));
    let o = get(&six);
    assert_eq!(o.error, Some(Http1Error::TooManyInformational { limit: 5 }));
    assert_eq!(o.informational.len(), 5);
    // An endless stream of 100 Continue ends at the limit too.
    let endless = "HTTP/1.1 100 Continue\r\n\r\n".repeat(1000);
    assert_eq!(get(&endless).error, Some(Http1Error::TooManyInformational { limit: 5 }));
}

#[test]
fn a_first_line_that_is_not_http_fails_at_once() {
    // No blank line and far below the head limit: still an error, not "need more".
    for (input, start) in
        [("SSH-2.0-OpenSSH_9.6\r\n", "S"), ("\x15\x03\x03\x00\x02", "\u{15}"), ("HTTX", "HTTX")]
    {
        let o = get(input);
        assert_eq!(o.error, Some(Http1Error::NotHttp { start: start.into() }), "{input:?}");
    }
    // A prefix of a status line is not judged early, nor are empty lines before it.
    assert_eq!(get("HTTP/1").error, None);
    assert_eq!(get("\r\nHTTP/1").error, None);
    assert_eq!(get("\r\nSSH").error, Some(Http1Error::NotHttp { start: "S".into() }));
    assert_eq!(get("HTTP/1.1 200").error, None);
}

#[test]
fn body_frames_share_the_read_buffer() {
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"[..]);
    let base = buf.as_ptr() as usize;
    let mut dec = switchyard_core::http1::ResponseDecoder::new(&Method::GET, Limits::default());
    dec.decode(&mut buf, false).unwrap();
    let Some(Frame::Data(d)) = dec.decode(&mut buf, false).unwrap() else { panic!() };
    assert_eq!(d.as_ptr() as usize, base + 38, "a view of the buffer, not a copy");
}

// ------------------------------------------------------------------ properties

#[derive(Debug, Clone)]
enum Framing {
    Length,
    Chunked(Vec<usize>),
    Close,
}

fn response() -> impl Strategy<Value = (Vec<u8>, bool)> {
    (
        prop::sample::select(vec![200u16, 201, 204, 304, 404, 500]),
        prop::collection::vec(("[a-z][a-z0-9-]{0,10}", "[ -~]{0,20}"), 0..5),
        prop::collection::vec(any::<u8>(), 0..300),
        prop_oneof![
            Just(Framing::Length),
            prop::collection::vec(1usize..64, 0..8).prop_map(Framing::Chunked),
            Just(Framing::Close)
        ],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(status, headers, body, framing, close, interim)| {
            let mut out = Vec::new();
            if interim {
                out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            out.extend_from_slice(format!("HTTP/1.1 {status} X\r\n").as_bytes());
            for (n, v) in headers {
                if matches!(n.as_str(), "content-length" | "transfer-encoding" | "connection") {
                    continue;
                }
                out.extend_from_slice(format!("x-{n}: {}\r\n", v.trim()).as_bytes());
            }
            if close {
                out.extend_from_slice(b"connection: close\r\n");
            }
            let eof = matches!(framing, Framing::Close);
            match framing {
                Framing::Length => {
                    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                    out.extend_from_slice(&body);
                }
                Framing::Chunked(sizes) => {
                    out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                    let mut rest = &body[..];
                    for s in sizes.into_iter().chain(std::iter::once(usize::MAX)) {
                        let n = s.min(rest.len());
                        if n == 0 {
                            break;
                        }
                        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                        out.extend_from_slice(&rest[..n]);
                        out.extend_from_slice(b"\r\n");
                        rest = &rest[n..];
                    }
                    out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
                }
                Framing::Close => {
                    out.extend_from_slice(b"\r\n");
                    out.extend_from_slice(&body);
                }
            }
            (out, eof)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any chunking of a valid response decodes to the same head, body, trailers
    /// and keep-alive decision as the whole — and the decode succeeds.
    #[test]
    fn split_invariant_on_valid_responses(
        (input, eof) in response(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = decode_in_splits(&Method::GET, &input, &[], eof, Limits::default());
        prop_assert!(whole.error.is_none(), "{:?}", whole.error);
        prop_assert!(whole.end);
        let split = decode_in_splits(&Method::GET, &input, &cuts, eof, Limits::default());
        prop_assert_eq!(&whole, &split);
        let bytewise: Vec<usize> = (0..input.len()).collect();
        prop_assert_eq!(&whole, &decode_in_splits(&Method::GET, &input, &bytewise, eof, Limits::default()));
    }

    /// Arbitrary bytes: never a panic, and still split-invariant (errors included).
    #[test]
    fn split_invariant_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..400)) {
        harness::check_split_invariance(&data);
    }

    #[test]
    fn chunked_requests_round_trip(
        method in prop::sample::select(vec![Method::GET, Method::POST, Method::PUT, Method::DELETE]),
        path in "/[a-z0-9._~-]{0,20}",
        headers in prop::collection::vec(("x-[a-z]{1,8}", "[a-zA-Z0-9 ]{0,16}"), 0..5),
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 0..6),
        trailers in prop::collection::vec(("x-t[a-z]{1,4}", "[a-z0-9]{1,8}"), 0..3),
    ) {
        let headers = headers.into_iter().map(|(n, v)| (n, v.trim().to_owned())).collect();
        harness::roundtrip(&RoundTrip { method, path, headers, chunks, trailers });
    }
}

/// Replays the checked-in fuzz corpus, so `cargo test` catches regressions found
/// by the fuzzers without any fuzz tooling.
#[test]
fn fuzz_corpus_replays() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut replayed = 0;
    for (target, check) in [
        ("response_decoder", harness::check_split_invariance as fn(&[u8])),
        ("request_roundtrip", harness::check_roundtrip),
    ] {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            check(&std::fs::read(&f).unwrap());
            replayed += 1;
        }
    }
    assert!(replayed >= 10, "the seed corpus is missing ({replayed} files)");
}

// ------------------------------------------------ the head's fields, in one pass

/// What RFC 9112 §6.3 and the keep-alive rules make of a head's fields,
/// worked out the slow way (a lookup per field name, every value).
fn reference(fields: &[(&str, &str)], http10: bool) -> (Result<Option<u64>, &'static str>, bool, bool) {
    let mut map = http::HeaderMap::new();
    for (n, v) in fields {
        map.append(http::HeaderName::from_bytes(n.as_bytes()).unwrap(), v.parse().unwrap());
    }
    let tokens = |name| -> Vec<String> {
        map.get_all(name)
            .iter()
            .flat_map(|v| {
                v.to_str().unwrap().split(',').map(|t| t.trim_matches([' ', '\t']).to_ascii_lowercase())
            })
            .collect()
    };
    let conn = tokens(http::header::CONNECTION);
    let server_close =
        conn.iter().any(|t| t == "close") || (http10 && !conn.iter().any(|t| t == "keep-alive"));
    let te = map.contains_key(http::header::TRANSFER_ENCODING);
    let cl = map.contains_key(http::header::CONTENT_LENGTH);
    // (framing: Ok(Some(n)) length, Ok(None) chunked or until close; chunked?)
    if te && cl {
        return (Err("te+cl"), false, server_close);
    }
    if te {
        let last = tokens(http::header::TRANSFER_ENCODING).into_iter().rfind(|t| !t.is_empty());
        return (Ok(None), last.as_deref() == Some("chunked"), server_close);
    }
    if cl {
        let values: Vec<Option<u64>> = tokens(http::header::CONTENT_LENGTH)
            .iter()
            .map(|t| t.parse::<u64>().ok().filter(|_| !t.starts_with('+')))
            .collect();
        // In order: the first value that is no number, or differs.
        let mut found = None;
        for v in values {
            match (v, found) {
                (None, _) => return (Err("invalid"), false, server_close),
                (Some(n), Some(f)) if n != f => return (Err("conflict"), false, server_close),
                (n, _) => found = n,
            }
        }
        return (Ok(found), false, server_close);
    }
    (Ok(None), false, server_close)
}

proptest! {
    /// The decoder reads a head's `Connection`, `Transfer-Encoding` and
    /// `Content-Length` values while it builds the header map; the framing,
    /// the errors and the connection's fate are those of the slow reading,
    /// for any mix, order and repetition of those fields among others.
    #[test]
    fn head_fields_frame_as_the_slow_reading_does(
        fields in prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec!["close", "keep-alive", "Keep-Alive, close", "upgrade", " close ", "closed", ""])
                    .prop_map(|v| ("connection", v)),
                prop::sample::select(vec!["chunked", "gzip, chunked", "chunked, gzip", "gzip", "", " , chunked, ", "Chunked"])
                    .prop_map(|v| ("transfer-encoding", v)),
                prop::sample::select(vec!["5", "5, 5", " 5", "x", "5, 6", "", "11", "0"])
                    .prop_map(|v| ("content-length", v)),
                prop::sample::select(vec!["a", "b"]).prop_map(|v| ("x-other", v)),
            ],
            0..5,
        ),
        http10 in any::<bool>(),
    ) {
        let (framing, chunked, server_close) = reference(&fields, http10);
        let mut input = format!("HTTP/1.{} 200 OK\r\n", if http10 { 0 } else { 1 });
        for (n, v) in &fields {
            input.push_str(&format!("{n}: {v}\r\n"));
        }
        input.push_str("\r\n");
        let (body, close_delimited) = match framing {
            Ok(Some(n)) => ("a".repeat(usize::try_from(n).unwrap()), false),
            Ok(None) if chunked => ("5\r\nhello\r\n0\r\n\r\n".to_owned(), false),
            Ok(None) => ("hello".to_owned(), true),
            Err(_) => (String::new(), false),
        };
        input.push_str(&body);
        let out = get_eof(&input);
        match framing {
            Err(kind) => {
                let got = format!("{:?}", out.error);
                let want = match kind {
                    "te+cl" => "ContentLengthAndTransferEncoding",
                    "invalid" => "InvalidContentLength",
                    _ => "ConflictingContentLength",
                };
                prop_assert!(got.contains(want), "{:?}: {} (expected {})", fields, got, want);
            }
            Ok(n) => {
                prop_assert!(out.error.is_none(), "{:?}: {:?}", fields, out.error);
                prop_assert!(out.end, "{:?}: no end", fields);
                let want_body = match n {
                    Some(n) => "a".repeat(usize::try_from(n).unwrap()),
                    None => "hello".to_owned(),
                };
                prop_assert_eq!(String::from_utf8_lossy(&out.body), want_body);
                let reuse = if server_close {
                    retire(CloseReason::ServerClose)
                } else if close_delimited {
                    retire(CloseReason::CloseDelimited)
                } else {
                    Reuse::Reusable
                };
                prop_assert_eq!(out.reuse, reuse, "{:?} http10={}", fields, http10);
            }
        }
    }
}

/// `keep_raw_head`: the final head's bytes as they arrived (names in the
/// server's case, its reason phrase, odd spacing), whatever the pieces the
/// bytes come in; informational heads' too; off by default.
#[test]
fn the_raw_head_is_kept_only_when_asked_and_whatever_the_split() {
    use switchyard_core::http1::{RawHead, ResponseDecoder};
    let head =
        "HTTP/1.1 307 Redirect Now\r\nX-Mixed-Case:  odd \r\nLOCATION: /there\r\ncontent-length: 2\r\n\r\n";
    let input = format!("HTTP/1.1 100 Continue\r\n\r\n{head}ok");
    let raw_of = |limits: Limits, split: usize| {
        let mut decoder = ResponseDecoder::new(&Method::GET, limits);
        let mut buf = BytesMut::new();
        let mut found = None;
        for piece in input.as_bytes().chunks(split) {
            buf.extend_from_slice(piece);
            while let Some(frame) = decoder.decode(&mut buf, false).unwrap() {
                match frame {
                    Frame::Informational(r) => assert_eq!(
                        r.extensions().get::<RawHead>().map(RawHead::as_bytes),
                        limits.keep_raw_head.then_some(&b"HTTP/1.1 100 Continue\r\n\r\n"[..])
                    ),
                    Frame::Head(r) => {
                        assert_eq!(r.headers()["x-mixed-case"], "odd");
                        found = Some(r.extensions().get::<RawHead>().cloned());
                    }
                    _ => {}
                }
            }
        }
        found.expect("a final head")
    };
    let on = Limits { keep_raw_head: true, ..Limits::default() };
    for split in [1, 2, 3, 7, 64, input.len()] {
        let raw = raw_of(on, split).expect("kept");
        assert_eq!(raw.as_bytes(), head.as_bytes(), "split {split}");
        assert_eq!(raw.reason(), "Redirect Now");
        assert_eq!(raw.lines().nth(2), Some("LOCATION: /there"));
        assert_eq!(raw.interim(), [bytes::Bytes::from_static(b"HTTP/1.1 100 Continue\r\n\r\n")]);
        assert_eq!(raw_of(Limits::default(), split), None, "off by default");
    }
    assert_eq!(RawHead::new(bytes::Bytes::from_static(b"HTTP/1.1 200\r\n\r\n")).reason(), "");
}
