//! Checks shared by the fuzz targets and by `core/tests` (which include this file
//! with `#[path]`, so plain `cargo test` replays the fuzz corpus without the fuzz
//! tooling). Depends on `switchyard-core`, `http` and `bytes` only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use bytes::BytesMut;
use switchyard_core::http1::{
    BodyEncoder, Frame, Http1Error, Limits, RequestBody, ResponseDecoder, TargetForm,
};
use switchyard_core::Reuse;

/// Header fields as (name, value) pairs, in order.
pub type Fields = Vec<(String, Vec<u8>)>;

/// Everything a decoded response amounts to, body chunk boundaries aside.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub informational: Vec<u16>,
    pub head: Option<(u16, Fields)>,
    pub body: Vec<u8>,
    pub trailers: Fields,
    pub end: bool,
    pub upgraded: bool,
    pub error: Option<Http1Error>,
    pub reuse: Reuse,
}

fn fields(h: &http::HeaderMap) -> Fields {
    h.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect()
}

/// Feeds `input` to a decoder in pieces cut at `cuts` (offsets, any order, any
/// value), then signals EOF if `eof`. Small limits make the limit paths reachable.
pub fn decode_in_splits(
    method: &http::Method,
    input: &[u8],
    cuts: &[usize],
    eof: bool,
    limits: Limits,
) -> Outcome {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(input.len());
    points.sort_unstable();
    points.dedup();
    let mut decoder = ResponseDecoder::new(method, limits);
    let mut out = Outcome {
        informational: vec![],
        head: None,
        body: vec![],
        trailers: vec![],
        end: false,
        upgraded: false,
        error: None,
        reuse: Reuse::Reusable,
    };
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let last = points.len() - 1;
    'feed: for (i, p) in points.into_iter().enumerate() {
        buf.extend_from_slice(&input[fed..p]);
        fed = p;
        let at_eof = eof && i == last;
        // Each call consumes input, returns a frame, or asks for more: bounded.
        for _ in 0..(input.len() + 16) * 4 {
            match decoder.decode(&mut buf, at_eof) {
                Ok(Some(Frame::Informational(r))) => out.informational.push(r.status().as_u16()),
                Ok(Some(Frame::Head(r))) => {
                    assert!(out.head.is_none(), "two heads");
                    out.head = Some((r.status().as_u16(), fields(r.headers())));
                }
                Ok(Some(Frame::Data(d))) => {
                    assert!(!d.is_empty(), "empty data frame");
                    out.body.extend_from_slice(&d);
                }
                Ok(Some(Frame::Trailers(t))) => out.trailers = fields(&t),
                Ok(Some(Frame::End)) => out.end = true,
                Ok(Some(Frame::Upgraded)) => out.upgraded = true,
                Ok(None) => continue 'feed,
                Err(e) => {
                    // Errors are sticky.
                    assert_eq!(decoder.decode(&mut buf, at_eof), Err(e.clone()));
                    out.error = Some(e);
                    break 'feed;
                }
            }
        }
        panic!("decoder made no progress");
    }
    out.reuse = decoder.reuse();
    if out.end || out.upgraded {
        assert!(decoder.is_complete());
    }
    out
}

/// Fuzz entry: the first bytes pick the method, EOF, limits and cut points; the
/// rest is the response. Decoding whole and in pieces must agree.
pub fn check_split_invariance(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let method = [http::Method::GET, http::Method::HEAD, http::Method::CONNECT, http::Method::POST]
        [usize::from(data[0] % 4)]
    .clone();
    let eof = data[1] & 1 == 1;
    let limits = if data[1] & 2 == 2 {
        Limits {
            max_head_size: 256,
            max_headers: 4,
            max_chunk_line: 16,
            max_informational: 2,
            keep_raw_head: false,
        }
    } else {
        Limits::default()
    };
    let ncuts = usize::from(data[2] % 8);
    let body_start = (3 + ncuts * 2).min(data.len());
    let cuts: Vec<usize> = data[3..body_start]
        .chunks(2)
        .map(|c| usize::from(c[0]) | (usize::from(*c.get(1).unwrap_or(&0)) << 8))
        .collect();
    let input = &data[body_start..];
    let whole = decode_in_splits(&method, input, &[], eof, limits);
    let split = decode_in_splits(&method, input, &cuts, eof, limits);
    assert_eq!(whole, split, "split at {cuts:?} changed the outcome");
    let bytewise: Vec<usize> = (0..input.len().min(512)).collect();
    let tiny = decode_in_splits(&method, input, &bytewise, eof, limits);
    assert_eq!(whole, tiny, "byte-at-a-time changed the outcome");
}

/// A request as the round trip builds it.
#[derive(Debug, Clone)]
pub struct RoundTrip {
    pub method: http::Method,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<Vec<u8>>,
    pub trailers: Vec<(String, String)>,
}

/// Encodes `rt` with a chunked body, decodes it with an independent test decoder,
/// and checks that method, target, headers, body and trailers survive.
pub fn roundtrip(rt: &RoundTrip) {
    let mut builder =
        http::Request::builder().method(rt.method.clone()).uri(format!("http://example.com{}", rt.path));
    for (n, v) in &rt.headers {
        builder = builder.header(n.as_str(), v.as_str());
    }
    let (parts, ()) = builder.body(()).expect("round-trip requests are valid").into_parts();
    let mut wire = Vec::new();
    switchyard_core::http1::encode_head(&parts, TargetForm::Origin, RequestBody::Chunked, &mut wire).unwrap();
    let mut enc = BodyEncoder::new(RequestBody::Chunked);
    for c in &rt.chunks {
        enc.encode(c, &mut wire).unwrap();
    }
    let mut trailers = http::HeaderMap::new();
    for (n, v) in &rt.trailers {
        trailers.append(http::HeaderName::from_bytes(n.as_bytes()).unwrap(), v.parse().unwrap());
    }
    enc.finish(Some(&trailers), &mut wire).unwrap();

    let decoded = decode_request(&wire).expect("the encoder's output parses");
    assert_eq!(decoded.method, rt.method.as_str());
    assert_eq!(decoded.target, rt.path);
    let mut expected: Vec<(String, String)> = vec![("host".into(), "example.com".into())];
    for (n, v) in parts.headers.iter() {
        expected.push((n.as_str().to_owned(), v.to_str().unwrap().to_owned()));
    }
    expected.push(("transfer-encoding".into(), "chunked".into()));
    assert_eq!(decoded.headers, expected);
    assert_eq!(decoded.body, rt.chunks.concat());
    let expected_trailers: Vec<(String, String)> =
        trailers.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned())).collect();
    assert_eq!(decoded.trailers, expected_trailers);
    assert_eq!(decoded.rest, 0, "bytes after the request");
}

/// Fuzz entry: builds a [`RoundTrip`] from raw bytes.
pub fn check_roundtrip(data: &[u8]) {
    let mut it = data.iter().copied();
    let mut next = move || it.next();
    let methods =
        [http::Method::GET, http::Method::POST, http::Method::PUT, http::Method::PATCH, http::Method::DELETE];
    let Some(m) = next() else { return };
    let method = methods[usize::from(m) % methods.len()].clone();
    let token = |b: u8| b"abcdefghijklmnopqrstuvwxyz0123456789-_."[usize::from(b) % 39] as char;
    let mut path = String::from("/");
    for _ in 0..next().map_or(0, |n| n % 16) {
        path.push(token(next().unwrap_or(0)));
    }
    let mut headers = Vec::new();
    for i in 0..next().map_or(0, |n| n % 6) {
        let name = format!("x-h{i}{}", token(next().unwrap_or(0)));
        let value: String = (0..next().map_or(0, |n| n % 20)).map(|_| token(next().unwrap_or(0))).collect();
        headers.push((name, value));
    }
    let mut chunks = Vec::new();
    for _ in 0..next().map_or(0, |n| n % 8) {
        let len = usize::from(next().unwrap_or(0));
        chunks.push((0..len).map(|_| next().unwrap_or(0)).collect());
    }
    let mut trailers = Vec::new();
    for i in 0..next().map_or(0, |n| n % 3) {
        trailers.push((format!("x-t{i}"), token(next().unwrap_or(0)).to_string()));
    }
    roundtrip(&RoundTrip { method, path, headers, chunks, trailers });
}

/// What the test decoder read.
#[derive(Debug)]
pub struct DecodedRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    pub rest: usize,
}

/// A deliberately simple, independent request decoder (CRLF lines, chunked
/// body), used only to check the encoder.
pub fn decode_request(wire: &[u8]) -> Option<DecodedRequest> {
    fn line(wire: &[u8], at: &mut usize) -> Option<String> {
        let start = *at;
        let end = wire[start..].windows(2).position(|w| w == b"\r\n")? + start;
        *at = end + 2;
        String::from_utf8(wire[start..end].to_vec()).ok()
    }
    fn fields(wire: &[u8], at: &mut usize) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        loop {
            let l = line(wire, at)?;
            if l.is_empty() {
                return Some(out);
            }
            let (n, v) = l.split_once(": ")?;
            out.push((n.to_owned(), v.to_owned()));
        }
    }
    let mut at = 0;
    let request_line = line(wire, &mut at)?;
    let mut parts = request_line.splitn(3, ' ');
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    if parts.next()? != "HTTP/1.1" {
        return None;
    }
    let headers = fields(wire, &mut at)?;
    let mut body = Vec::new();
    loop {
        let size = usize::from_str_radix(&line(wire, &mut at)?, 16).ok()?;
        if size == 0 {
            break;
        }
        body.extend_from_slice(wire.get(at..at + size)?);
        at += size;
        if wire.get(at..at + 2)? != b"\r\n" {
            return None;
        }
        at += 2;
    }
    let trailers = fields(wire, &mut at)?;
    Some(DecodedRequest { method, target, headers, body, trailers, rest: wire.len() - at })
}
