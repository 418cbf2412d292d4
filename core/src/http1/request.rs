//! Request encoding: the head (request line and header fields) and the body
//! framing (Content-Length or chunked).

use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, Method};

use super::Http1Error;

/// How the request target is written (RFC 9112 §3.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum TargetForm {
    /// `/path?query`: to the origin, or through a tunnel. Default.
    #[default]
    Origin,
    /// `http://host:port/path?query`: plain http through an HTTP proxy.
    Absolute,
    /// `host:port`: a `CONNECT` request.
    Authority,
}

/// How the request body is framed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RequestBody {
    /// No body.
    None,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// Unknown length, streamed (`Transfer-Encoding: chunked`).
    Chunked,
}

/// Writes the request head into `out`: request line, `Host` when absent, the
/// caller's headers in order, then the framing header the body needs.
///
/// The caller owns the headers but not the framing: a `Transfer-Encoding` header,
/// or a `Content-Length` that disagrees with `body`, is an error.
///
/// ```
/// # use switchyard_core::http1::{encode_head, RequestBody, TargetForm};
/// let req = http::Request::post("http://example.com:8080/upload?x=1").body(()).unwrap();
/// let (parts, ()) = req.into_parts();
/// let mut out = Vec::new();
/// encode_head(&parts, TargetForm::Origin, RequestBody::Chunked, &mut out).unwrap();
/// assert_eq!(
///     String::from_utf8(out).unwrap(),
///     "POST /upload?x=1 HTTP/1.1\r\nhost: example.com:8080\r\ntransfer-encoding: chunked\r\n\r\n"
/// );
/// ```
pub fn encode_head(
    parts: &http::request::Parts,
    form: TargetForm,
    body: RequestBody,
    out: &mut Vec<u8>,
) -> Result<(), Http1Error> {
    encode(parts, form, body, out).map(|_| ())
}

/// What a request head's fields tell the exchange beyond its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeadFacts {
    /// `Expect: 100-continue`.
    pub(crate) expect_continue: bool,
    /// `Connection: close`.
    pub(crate) close: bool,
}

/// [`encode_head`], and what the fields said ([`HeadFacts`]).
pub(crate) fn encode(
    parts: &http::request::Parts,
    form: TargetForm,
    body: RequestBody,
    out: &mut Vec<u8>,
) -> Result<HeadFacts, Http1Error> {
    let invalid = |reason| Http1Error::InvalidRequest { reason };
    let uri = &parts.uri;
    let authority = uri.authority().map(|a| {
        // Userinfo never goes on the wire in the target or Host.
        a.as_str().rsplit_once('@').map_or(a.as_str(), |(_, hp)| hp)
    });
    // One pass over the caller's fields for everything the framing and the
    // exchange ask of them: a request has few, and a hashed lookup per name
    // cost more than looking at each (five lookups, ~450 instructions).
    let mut facts = HeadFacts::default();
    let (mut has_host, mut te) = (false, false);
    let mut declared: Result<Option<u64>, Http1Error> = Ok(None);
    for (name, value) in &parts.headers {
        if *name == TRANSFER_ENCODING {
            te = true;
        } else if *name == CONTENT_LENGTH {
            if let Ok(found) = declared {
                declared = content_length_value(value.as_bytes(), found);
            }
        } else if *name == HOST {
            has_host = true;
        } else if *name == EXPECT {
            facts.expect_continue |= value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        } else if *name == CONNECTION {
            facts.close |=
                value.as_bytes().split(|b| *b == b',').any(|t| trim(t).eq_ignore_ascii_case(b"close"));
        }
    }
    if te {
        return Err(invalid("Transfer-Encoding is set by the encoder, not the caller"));
    }
    let declared = declared?;
    match (body, declared) {
        (RequestBody::Chunked, Some(_)) => {
            return Err(invalid("Content-Length given for a chunked body"));
        }
        (RequestBody::Length(n), Some(d)) if n != d => {
            return Err(invalid("Content-Length header disagrees with the body length"));
        }
        (RequestBody::None, Some(d)) if d != 0 => {
            return Err(invalid("Content-Length header given for a request without a body"));
        }
        _ => {}
    }

    // Request line.
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    match form {
        TargetForm::Origin => {
            let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
            out.extend_from_slice(if pq.is_empty() { b"/" } else { pq.as_bytes() });
        }
        TargetForm::Absolute => {
            let scheme = uri.scheme_str().ok_or_else(|| invalid("absolute-form needs a scheme"))?;
            let authority = authority.ok_or_else(|| invalid("absolute-form needs an authority"))?;
            out.extend_from_slice(scheme.as_bytes());
            out.extend_from_slice(b"://");
            out.extend_from_slice(authority.as_bytes());
            let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
            out.extend_from_slice(if pq.is_empty() { b"/" } else { pq.as_bytes() });
        }
        TargetForm::Authority => {
            if parts.method != Method::CONNECT {
                return Err(invalid("authority-form is only for CONNECT"));
            }
            let a = uri.authority().ok_or_else(|| invalid("CONNECT needs host:port"))?;
            if a.port_u16().is_none() {
                return Err(invalid("CONNECT needs an explicit port"));
            }
            out.extend_from_slice(authority.unwrap_or_default().as_bytes());
        }
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");

    if !has_host {
        let host = authority.ok_or_else(|| invalid("no Host header and no authority in the URI"))?;
        let host = strip_default_port(host, uri.scheme_str());
        header(out, b"host", host.as_bytes());
    }
    for (name, value) in &parts.headers {
        header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match body {
        RequestBody::Chunked => header(out, b"transfer-encoding", b"chunked"),
        RequestBody::Length(n) if declared.is_none() => {
            header(out, b"content-length", itoa(n, &mut [0; 20]));
        }
        // RFC 9110 §8.6: send a length when the method gives content a meaning.
        RequestBody::None if declared.is_none() && method_expects_body(&parts.method) => {
            header(out, b"content-length", b"0");
        }
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(facts)
}

fn method_expects_body(m: &Method) -> bool {
    *m == Method::POST || *m == Method::PUT || *m == Method::PATCH
}

fn strip_default_port<'a>(authority: &'a str, scheme: Option<&str>) -> &'a str {
    let default = match scheme {
        Some(s) if s.eq_ignore_ascii_case("https") => ":443",
        Some(s) if s.eq_ignore_ascii_case("http") => ":80",
        _ => return authority,
    };
    authority.strip_suffix(default).unwrap_or(authority)
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Decimal digits of `n` in `buf`, without allocating.
fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// The caller's `Content-Length` after one more of its values (`found`: the
/// earlier ones'); several equal values count as one.
fn content_length_value(value: &[u8], mut found: Option<u64>) -> Result<Option<u64>, Http1Error> {
    for part in value.split(|b| *b == b',') {
        let n = super::parse_decimal(trim(part))
            .ok_or(Http1Error::InvalidRequest { reason: "Content-Length header is not a number" })?;
        if found.is_some_and(|f| f != n) {
            return Err(Http1Error::InvalidRequest { reason: "conflicting Content-Length headers" });
        }
        found = Some(n);
    }
    Ok(found)
}

pub(super) fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t')).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !matches!(c, b' ' | b'\t')).map_or(start, |e| e + 1);
    &b[start..end]
}

/// Frames request body bytes: counts them against a `Content-Length`, or wraps
/// them in chunks.
#[derive(Clone, Debug)]
pub struct BodyEncoder {
    kind: RequestBody,
    sent: u64,
    finished: bool,
}

impl BodyEncoder {
    /// An encoder for this framing.
    #[must_use]
    pub fn new(kind: RequestBody) -> BodyEncoder {
        BodyEncoder { kind, sent: 0, finished: kind == RequestBody::None }
    }

    /// Bytes of body given so far.
    #[must_use]
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether the body was finished.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Appends `data`, framed, to `out`. Empty data writes nothing (an empty chunk
    /// would end a chunked body).
    pub fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), Http1Error> {
        if self.finished {
            return Err(Http1Error::BodyNotAllowed);
        }
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
        match self.kind {
            RequestBody::None => return Err(Http1Error::BodyNotAllowed),
            RequestBody::Length(declared) => {
                BodyCounter { declared: Some(declared), sent: self.sent }.add(len)?;
                out.extend_from_slice(data);
            }
            RequestBody::Chunked => {
                write_hex(len, out);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
        }
        self.sent += len;
        Ok(())
    }

    /// Frames a `len`-byte chunk the caller writes itself: what goes before it
    /// into `before`, what goes after into `after` (both empty for a
    /// `Content-Length` body). The same checks as [`BodyEncoder::encode`].
    pub fn frame(&mut self, len: usize, before: &mut Vec<u8>, after: &mut Vec<u8>) -> Result<(), Http1Error> {
        if self.finished {
            return Err(Http1Error::BodyNotAllowed);
        }
        if len == 0 {
            return Ok(());
        }
        let len = len as u64;
        match self.kind {
            RequestBody::None => return Err(Http1Error::BodyNotAllowed),
            RequestBody::Length(declared) => {
                BodyCounter { declared: Some(declared), sent: self.sent }.add(len)?;
            }
            RequestBody::Chunked => {
                write_hex(len, before);
                before.extend_from_slice(b"\r\n");
                after.extend_from_slice(b"\r\n");
            }
        }
        self.sent += len;
        Ok(())
    }

    /// Ends the body: checks the length, or writes the last chunk and trailers.
    pub fn finish(&mut self, trailers: Option<&HeaderMap>, out: &mut Vec<u8>) -> Result<(), Http1Error> {
        if self.finished {
            return Err(Http1Error::BodyNotAllowed);
        }
        match self.kind {
            RequestBody::None => {}
            RequestBody::Length(declared) => {
                BodyCounter { declared: Some(declared), sent: self.sent }.finish()?;
            }
            RequestBody::Chunked => {
                out.extend_from_slice(b"0\r\n");
                for (name, value) in trailers.into_iter().flatten() {
                    header(out, name.as_str().as_bytes(), value.as_bytes());
                }
                out.extend_from_slice(b"\r\n");
            }
        }
        self.finished = true;
        Ok(())
    }
}

fn write_hex(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// A request body's length rule, counted as the body goes out: with a
/// declared length (`Content-Length`), no more and no fewer bytes than it
/// says. HTTP/1.1's framing ([`BodyEncoder`]) and HTTP/2's streams apply the
/// same counter, in the same words.
///
/// ```
/// # use switchyard_core::http1::{BodyCounter, Http1Error};
/// let mut c = BodyCounter::new(Some(5));
/// c.add(3).unwrap();
/// assert_eq!(c.finish(), Err(Http1Error::BodyTooShort { declared: 5, sent: 3 }));
/// assert_eq!(c.add(3), Err(Http1Error::BodyTooLong { declared: 5 }));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyCounter {
    declared: Option<u64>,
    sent: u64,
}

impl BodyCounter {
    /// A counter for a body of `declared` bytes (`None`: any length).
    #[must_use]
    pub fn new(declared: Option<u64>) -> BodyCounter {
        BodyCounter { declared, sent: 0 }
    }

    /// `n` more bytes: past the declared length is an error (nothing counted).
    pub fn add(&mut self, n: u64) -> Result<(), Http1Error> {
        if let Some(declared) = self.declared.filter(|d| self.sent + n > *d) {
            return Err(Http1Error::BodyTooLong { declared });
        }
        self.sent += n;
        Ok(())
    }

    /// The body ended: short of the declared length is an error.
    pub fn finish(&self) -> Result<(), Http1Error> {
        match self.declared {
            Some(declared) if self.sent != declared => {
                Err(Http1Error::BodyTooShort { declared, sent: self.sent })
            }
            _ => Ok(()),
        }
    }

    /// Bytes counted so far.
    #[must_use]
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(req: http::Request<()>, form: TargetForm, body: RequestBody) -> Result<String, Http1Error> {
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        encode_head(&parts, form, body, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn origin_absolute_and_authority_forms() {
        let r = || http::Request::get("http://example.com/a/b?c=d").body(()).unwrap();
        assert_eq!(
            head(r(), TargetForm::Origin, RequestBody::None).unwrap(),
            "GET /a/b?c=d HTTP/1.1\r\nhost: example.com\r\n\r\n"
        );
        assert_eq!(
            head(r(), TargetForm::Absolute, RequestBody::None).unwrap(),
            "GET http://example.com/a/b?c=d HTTP/1.1\r\nhost: example.com\r\n\r\n"
        );
        let connect = http::Request::connect("example.com:443").body(()).unwrap();
        assert_eq!(
            head(connect, TargetForm::Authority, RequestBody::None).unwrap(),
            "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n"
        );
        let no_port = http::Request::connect("example.com").body(()).unwrap();
        assert!(head(no_port, TargetForm::Authority, RequestBody::None).is_err());
    }

    #[test]
    fn host_is_kept_when_given_and_userinfo_dropped() {
        let r =
            http::Request::get("https://user:pw@example.com:443/").header("host", "other").body(()).unwrap();
        assert_eq!(
            head(r, TargetForm::Origin, RequestBody::None).unwrap(),
            "GET / HTTP/1.1\r\nhost: other\r\n\r\n"
        );
        let r = http::Request::get("https://user:pw@example.com:8443/").body(()).unwrap();
        assert_eq!(
            head(r, TargetForm::Origin, RequestBody::None).unwrap(),
            "GET / HTTP/1.1\r\nhost: example.com:8443\r\n\r\n"
        );
        let r = http::Request::get("/only-path").body(()).unwrap();
        assert!(head(r, TargetForm::Origin, RequestBody::None).is_err());
    }

    #[test]
    fn framing_headers() {
        let post = || http::Request::post("http://e.com/").body(()).unwrap();
        assert!(head(post(), TargetForm::Origin, RequestBody::Length(5))
            .unwrap()
            .ends_with("content-length: 5\r\n\r\n"));
        assert!(head(post(), TargetForm::Origin, RequestBody::None)
            .unwrap()
            .ends_with("content-length: 0\r\n\r\n"));
        let te =
            http::Request::post("http://e.com/").header("transfer-encoding", "chunked").body(()).unwrap();
        assert!(head(te, TargetForm::Origin, RequestBody::Chunked).is_err());
        let cl = http::Request::post("http://e.com/").header("content-length", "4").body(()).unwrap();
        assert!(head(cl, TargetForm::Origin, RequestBody::Length(5)).is_err());
        let cl = http::Request::post("http://e.com/").header("content-length", "5").body(()).unwrap();
        assert_eq!(
            head(cl, TargetForm::Origin, RequestBody::Length(5)).unwrap().matches("content-length").count(),
            1
        );
    }

    /// The one pass over a request's fields reads what the separate lookups
    /// read: every value of a repeated field, in any order among the others,
    /// whatever their case, with the same errors and the same precedence.
    #[test]
    fn the_fields_pass_reads_every_value_of_every_field_it_needs() {
        let encode_with = |fields: &[(&str, &str)], body| {
            let mut b = http::Request::post("http://e.com/");
            for (n, v) in fields {
                b = b.header(*n, *v);
            }
            let (parts, ()) = b.body(()).unwrap().into_parts();
            let mut out = Vec::new();
            encode(&parts, TargetForm::Origin, body, &mut out).map(|f| (f, String::from_utf8(out).unwrap()))
        };
        let facts = |fields: &[(&str, &str)]| encode_with(fields, RequestBody::Length(5)).unwrap().0;
        let filler = [("accept", "*/*"), ("x-a", "1"), ("user-agent", "t")];
        for at in 0..=filler.len() {
            let mut fields = filler.to_vec();
            fields.insert(at, ("Expect", "100-Continue"));
            assert!(facts(&fields).expect_continue, "{fields:?}");
            let mut fields = filler.to_vec();
            fields.insert(at, ("connection", "keep-alive, Close"));
            assert!(facts(&fields).close, "{fields:?}");
            // A later value of the same field counts too.
            let mut fields = filler.to_vec();
            fields.insert(at, ("connection", "keep-alive"));
            fields.push(("connection", " close "));
            assert!(facts(&fields).close, "{fields:?}");
            let mut fields = filler.to_vec();
            fields.insert(at, ("host", "other.example"));
            let (_, head) = encode_with(&fields, RequestBody::Length(5)).unwrap();
            assert_eq!(head.matches("host:").count(), 1, "{head}");
            assert!(head.contains("host: other.example\r\n"), "{head}");
        }
        assert_eq!(facts(&filler), HeadFacts::default());
        assert!(!facts(&[("expect", "100-continue-ish")]).expect_continue);
        assert!(!facts(&[("connection", "closed")]).close);
        // Content-Length: equal values (one field or several) are one; a
        // disagreement, or a value that is no number, is refused.
        assert!(encode_with(&[("content-length", "5"), ("content-length", "5, 5")], RequestBody::Length(5))
            .is_ok());
        let refused = |fields: &[(&str, &str)]| match encode_with(fields, RequestBody::Length(5)) {
            Err(Http1Error::InvalidRequest { reason }) => reason,
            other => panic!("{fields:?}: {other:?}"),
        };
        assert_eq!(
            refused(&[("content-length", "5"), ("content-length", "6")]),
            "conflicting Content-Length headers"
        );
        assert_eq!(refused(&[("content-length", "five")]), "Content-Length header is not a number");
        // Transfer-Encoding is refused first, wherever it stands.
        for fields in [
            [("content-length", "x"), ("transfer-encoding", "chunked")],
            [("transfer-encoding", "chunked"), ("content-length", "x")],
        ] {
            assert_eq!(refused(&fields), "Transfer-Encoding is set by the encoder, not the caller");
        }
    }

    #[test]
    fn body_encoders() {
        let mut out = Vec::new();
        let mut e = BodyEncoder::new(RequestBody::Chunked);
        e.encode(b"hello", &mut out).unwrap();
        e.encode(b"", &mut out).unwrap();
        e.encode(&[b'x'; 26], &mut out).unwrap();
        let mut t = HeaderMap::new();
        t.insert("x-sum", "1".parse().unwrap());
        e.finish(Some(&t), &mut out).unwrap();
        let expected = format!("5\r\nhello\r\n1a\r\n{}\r\n0\r\nx-sum: 1\r\n\r\n", "x".repeat(26));
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        assert_eq!(e.encode(b"late", &mut Vec::new()), Err(Http1Error::BodyNotAllowed));

        let mut l = BodyEncoder::new(RequestBody::Length(3));
        assert_eq!(l.encode(b"abcd", &mut Vec::new()), Err(Http1Error::BodyTooLong { declared: 3 }));
        l.encode(b"ab", &mut Vec::new()).unwrap();
        assert_eq!(l.finish(None, &mut Vec::new()), Err(Http1Error::BodyTooShort { declared: 3, sent: 2 }));
    }
}
