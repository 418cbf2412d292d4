//! Response decoding: incremental, split-invariant, bounded, zero-copy bodies.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};

use super::request::trim;
use super::Http1Error;
use crate::connection::{CloseReason, Reuse};

/// Bounds on what the decoder buffers. Every default is stated on its field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Limits {
    /// Largest response head (status line and header fields), and largest trailer
    /// section. Default: 64 KiB.
    pub max_head_size: usize,
    /// Most header fields in a head or trailer section. Default: 100.
    pub max_headers: usize,
    /// Longest chunk-size line, extensions included. Default: 4 KiB.
    pub max_chunk_line: usize,
    /// Most informational (1xx) responses before the final one; one more is
    /// [`Http1Error::TooManyInformational`]. Default: 5 (as Go's client).
    pub max_informational: usize,
    /// Also keep each head's bytes as they arrived (informational ones too), as a [`RawHead`] in
    /// the response's extensions: header names in the server's case, its
    /// reason phrase, the fields' order and spacing — what a tool that prints
    /// heads as received needs (curl's `-i`). Costs one copy of the head per
    /// response. Default: off.
    pub keep_raw_head: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_size: 64 * 1024,
            max_headers: 100,
            max_chunk_line: 4096,
            max_informational: 5,
            keep_raw_head: false,
        }
    }
}

/// A response head's bytes as they arrived (status line, header lines, the
/// blank line), kept in the response's extensions when
/// [`Limits::keep_raw_head`] is on. The parsed head (the `http` types) is
/// what the client acts on; this is for showing it as the server wrote it.
///
/// ```
/// # use switchyard_core::http1::RawHead;
/// let raw = RawHead::new(bytes::Bytes::from_static(b"HTTP/1.1 200 Fine\r\nX-Mixed-Case: 1\r\n\r\n"));
/// assert_eq!(raw.reason(), "Fine");
/// assert_eq!(raw.lines().collect::<Vec<_>>(), ["HTTP/1.1 200 Fine", "X-Mixed-Case: 1"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawHead {
    head: Bytes,
    interim: Vec<Bytes>,
}

impl RawHead {
    /// A raw head from its bytes.
    #[must_use]
    pub fn new(bytes: Bytes) -> RawHead {
        RawHead { head: bytes, interim: Vec::new() }
    }
    /// The bytes, blank line included.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.head
    }
    /// On a final head: the informational heads (`100 Continue`, `103 Early
    /// Hints`, …) that came before it, each as received, in order (at most
    /// [`Limits::max_informational`]).
    #[must_use]
    pub fn interim(&self) -> &[Bytes] {
        &self.interim
    }
    /// The status line and each header line, without their line ends (a
    /// line folded onto the one before is its own line here, as sent).
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        std::str::from_utf8(&self.head)
            .unwrap_or_default()
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .filter(|l| !l.is_empty())
    }
    /// The status line's reason phrase as sent (may be empty).
    #[must_use]
    pub fn reason(&self) -> &str {
        let line = self.lines().next().unwrap_or_default();
        line.splitn(3, ' ').nth(2).unwrap_or_default()
    }
}

/// One piece of a decoded response, in order: any number of `Informational`, one
/// `Head`, then `Data`* and optionally `Trailers` followed by `End` — or, after a
/// `101` or a successful `CONNECT`, `Upgraded`.
#[derive(Clone, Debug)]
pub enum Frame {
    /// A 1xx response other than 101 (100 Continue, 103 Early Hints, …).
    Informational(http::Response<()>),
    /// The final response head.
    Head(http::Response<()>),
    /// Body bytes: a view of the caller's buffer, not a copy.
    Data(Bytes),
    /// The chunked body's trailer fields.
    Trailers(HeaderMap),
    /// The body is complete.
    End,
    /// The connection now belongs to the caller (101 Switching Protocols, or a 2xx
    /// answer to `CONNECT`); bytes left in the buffer belong to the new protocol.
    Upgraded,
}

/// Heads compare by status, version and header fields (extensions are ignored).
impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        let same_head = |a: &http::Response<()>, b: &http::Response<()>| {
            a.status() == b.status() && a.version() == b.version() && a.headers() == b.headers()
        };
        match (self, other) {
            (Frame::Informational(a), Frame::Informational(b)) | (Frame::Head(a), Frame::Head(b)) => {
                same_head(a, b)
            }
            (Frame::Data(a), Frame::Data(b)) => a == b,
            (Frame::Trailers(a), Frame::Trailers(b)) => a == b,
            (Frame::End, Frame::End) | (Frame::Upgraded, Frame::Upgraded) => true,
            _ => false,
        }
    }
}

impl Eq for Frame {}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Chunk {
    Size { scanned: usize },
    Data { remaining: u64 },
    DataEnd,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Head { scanned: usize },
    Empty,
    Length { remaining: u64 },
    Chunked(Chunk),
    Trailers { scanned: usize },
    UntilClose,
    EndPending,
    UpgradePending,
    Ended,
    Upgraded,
}

/// Decodes one response. Feed it the connection's read buffer; it consumes what it
/// decodes and leaves the rest. See [`ResponseDecoder::decode`].
#[derive(Clone, Debug)]
pub struct ResponseDecoder {
    limits: Limits,
    head_request: bool,
    connect_request: bool,
    state: State,
    failed: Option<Http1Error>,
    received: u64,
    declared: Option<u64>,
    server_close: bool,
    close_delimited: bool,
    got_continue: bool,
    informational: usize,
    got_final: bool,
    /// Bytes were left (or arrived) past the end of the response.
    excess: bool,
    /// With `keep_raw_head`: the informational heads so far, as received.
    interim: Vec<Bytes>,
}

impl ResponseDecoder {
    /// A decoder for the response to a request with `method` (HEAD responses have
    /// no body; a 2xx to CONNECT is a tunnel).
    #[must_use]
    pub fn new(method: &http::Method, limits: Limits) -> ResponseDecoder {
        ResponseDecoder {
            limits,
            head_request: *method == http::Method::HEAD,
            connect_request: *method == http::Method::CONNECT,
            state: State::Head { scanned: 0 },
            failed: None,
            received: 0,
            declared: None,
            server_close: false,
            close_delimited: false,
            got_continue: false,
            informational: 0,
            got_final: false,
            excess: false,
            interim: Vec::new(),
        }
    }

    /// Decodes the next frame from the front of `buf`, consuming its bytes.
    /// `Ok(None)`: more input is needed (or the response is over). `eof`: the peer
    /// closed its side, so nothing more will arrive — a close-delimited body ends,
    /// anything else incomplete is a truncation error. Errors are sticky.
    ///
    /// Any split of the same bytes into successive `buf` contents yields the same
    /// head, body bytes, trailers and keep-alive decision.
    pub fn decode(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<Frame>, Http1Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.step(buf, eof) {
            Ok(frame) => {
                // Whatever follows a complete response was not asked for: an
                // unsolicited response (smuggling) or garbage. The connection
                // cannot carry another exchange; the bytes are never decoded.
                if self.state == State::Ended && !buf.is_empty() {
                    self.excess = true;
                }
                Ok(frame)
            }
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Whether the final head has been decoded.
    #[must_use]
    pub fn has_head(&self) -> bool {
        self.got_final
    }

    /// Whether a `100 Continue` arrived.
    #[must_use]
    pub fn got_continue(&self) -> bool {
        self.got_continue
    }

    /// Whether the response is complete (`End` or `Upgraded` was returned).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Ended | State::Upgraded)
    }

    /// Whether the connection was handed over (101 or a CONNECT tunnel).
    #[must_use]
    pub fn is_upgraded(&self) -> bool {
        matches!(self.state, State::Upgraded | State::UpgradePending)
    }

    /// Body bytes decoded so far.
    #[must_use]
    pub fn body_received(&self) -> u64 {
        self.received
    }

    /// Whether bytes arrived past the end of the response (in the buffer when
    /// the response ended, or on any later `decode`).
    #[must_use]
    pub fn has_excess(&self) -> bool {
        self.excess
    }

    /// What the response means for the connection, as of now: reusable only when
    /// the response is complete, framed by length or chunks, nothing was received
    /// past its end, and neither side asked to close. Before completion:
    /// [`CloseReason::UnreadBody`].
    #[must_use]
    pub fn reuse(&self) -> Reuse {
        let reason = if self.failed.is_some() {
            CloseReason::Failure
        } else if self.is_upgraded() {
            CloseReason::Exclusive
        } else if !self.is_complete() {
            CloseReason::UnreadBody
        } else if self.excess {
            CloseReason::BytesAfterResponse
        } else if self.server_close {
            CloseReason::ServerClose
        } else if self.close_delimited {
            CloseReason::CloseDelimited
        } else {
            return Reuse::Reusable;
        };
        Reuse::Retire(reason)
    }

    fn step(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<Frame>, Http1Error> {
        loop {
            match self.state {
                State::Head { scanned } => return self.head(buf, eof, scanned),
                State::Empty | State::EndPending => {
                    self.state = State::Ended;
                    return Ok(Some(Frame::End));
                }
                State::UpgradePending => {
                    self.state = State::Upgraded;
                    return Ok(Some(Frame::Upgraded));
                }
                State::Ended | State::Upgraded => return Ok(None),
                State::Length { remaining: 0 } => {
                    self.state = State::Ended;
                    return Ok(Some(Frame::End));
                }
                State::Length { remaining } => {
                    let Some(data) = self.take(buf, remaining, eof)? else { return Ok(None) };
                    self.state = State::Length { remaining: remaining - data.len() as u64 };
                    return Ok(Some(Frame::Data(data)));
                }
                State::UntilClose => {
                    if !buf.is_empty() {
                        let data = buf.split().freeze();
                        self.received += data.len() as u64;
                        return Ok(Some(Frame::Data(data)));
                    }
                    if eof {
                        self.state = State::Ended;
                        return Ok(Some(Frame::End));
                    }
                    return Ok(None);
                }
                State::Chunked(Chunk::Size { scanned }) => {
                    let Some(size) = self.chunk_size(buf, eof, scanned)? else { return Ok(None) };
                    self.state = if size == 0 {
                        State::Trailers { scanned: 0 }
                    } else {
                        State::Chunked(Chunk::Data { remaining: size })
                    };
                }
                State::Chunked(Chunk::Data { remaining }) => {
                    let Some(data) = self.take(buf, remaining, eof)? else { return Ok(None) };
                    let left = remaining - data.len() as u64;
                    self.state = State::Chunked(if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data { remaining: left }
                    });
                    return Ok(Some(Frame::Data(data)));
                }
                State::Chunked(Chunk::DataEnd) => {
                    if buf.len() < 2 {
                        if buf.first().is_some_and(|b| *b != b'\r') {
                            return Err(Http1Error::MissingChunkTerminator);
                        }
                        return self.need_more(eof);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(Http1Error::MissingChunkTerminator);
                    }
                    buf.advance(2);
                    self.state = State::Chunked(Chunk::Size { scanned: 0 });
                }
                State::Trailers { scanned } => return self.trailers(buf, eof, scanned),
            }
        }
    }

    fn need_more(&self, eof: bool) -> Result<Option<Frame>, Http1Error> {
        if eof {
            Err(Http1Error::TruncatedBody { expected: self.declared, received: self.received })
        } else {
            Ok(None)
        }
    }

    /// Up to `remaining` body bytes from the front of `buf`, without copying.
    fn take(&mut self, buf: &mut BytesMut, remaining: u64, eof: bool) -> Result<Option<Bytes>, Http1Error> {
        if buf.is_empty() {
            return self.need_more(eof).map(|_| None);
        }
        let n = usize::try_from(remaining).unwrap_or(usize::MAX).min(buf.len());
        self.received += n as u64;
        Ok(Some(buf.split_to(n).freeze()))
    }

    fn head(&mut self, buf: &mut BytesMut, eof: bool, scanned: usize) -> Result<Option<Frame>, Http1Error> {
        let limit = self.limits.max_head_size;
        let found = find_blank_line(buf, scanned);
        // Only bytes of this head, and none past the limit, are judged: a
        // wrong byte beyond the limit is never seen when the head arrives in
        // pieces (the limit fails first), so it must not be seen whole either.
        let judged = found.map_or(&buf[..], |end| &buf[..end]);
        check_status_line_start(&judged[..judged.len().min(limit.saturating_add(1))])?;
        let Some(end) = found else {
            if buf.len() > limit {
                return Err(Http1Error::HeadTooLarge { limit });
            }
            self.state = State::Head { scanned: buf.len() };
            if eof {
                return Err(if buf.is_empty() && self.informational == 0 {
                    Http1Error::EmptyResponse
                } else {
                    Http1Error::TruncatedHead { received: buf.len() }
                });
            }
            return Ok(None);
        };
        if end > limit {
            return Err(Http1Error::HeadTooLarge { limit });
        }
        // Most heads fit the stack's slots (left uninitialized: httparse writes
        // each before reading it); a head with more fields than that, within
        // the limit, is parsed again with slots on the heap. Measured: filling
        // and freeing a heap vector of `max_headers` slots cost ~800
        // instructions per response (callgrind).
        let max = self.limits.max_headers;
        let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
        let parsed = match parse_head(&buf[..end], &mut stack[..max.min(STACK_HEADERS)], max) {
            Err(Http1Error::TooManyHeaders { .. }) if max > STACK_HEADERS => {
                let mut heap = Vec::with_capacity(max);
                heap.resize_with(max, MaybeUninit::uninit);
                parse_head(&buf[..end], &mut heap, max)?
            }
            other => other?,
        };
        let Head { len: n, status, version, headers: map, fields } = parsed;
        let raw = self.limits.keep_raw_head.then(|| Bytes::copy_from_slice(&buf[..n]));
        buf.advance(n);
        self.state = State::Head { scanned: 0 };
        let mut response = http::Response::new(());
        if let Some(raw) = raw {
            let informational = status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS;
            let interim = if informational {
                if self.interim.len() < self.limits.max_informational {
                    self.interim.push(raw.clone());
                }
                Vec::new()
            } else {
                std::mem::take(&mut self.interim)
            };
            response.extensions_mut().insert(RawHead { head: raw, interim });
        }
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = map;

        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            if status == StatusCode::CONTINUE {
                self.got_continue = true;
            }
            self.informational += 1;
            if self.informational > self.limits.max_informational {
                return Err(Http1Error::TooManyInformational { limit: self.limits.max_informational });
            }
            return Ok(Some(Frame::Informational(response)));
        }
        self.got_final = true;
        // `Connection: close`, or HTTP/1.0 without `Connection: keep-alive`.
        self.server_close = fields.close || (version == Version::HTTP_10 && !fields.keep_alive);
        self.state = self.framing(&response, fields)?;
        Ok(Some(Frame::Head(response)))
    }

    /// RFC 9112 §6.3: how the body of this response is delimited.
    fn framing(&mut self, response: &http::Response<()>, fields: Fields) -> Result<State, Http1Error> {
        let status = response.status();
        if status == StatusCode::SWITCHING_PROTOCOLS || (self.connect_request && status.is_success()) {
            return Ok(State::UpgradePending);
        }
        if self.head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            return Ok(State::Empty);
        }
        if fields.te && fields.cl {
            return Err(Http1Error::ContentLengthAndTransferEncoding);
        }
        if fields.te {
            if fields.te_chunked {
                return Ok(State::Chunked(Chunk::Size { scanned: 0 }));
            }
            self.close_delimited = true;
            return Ok(State::UntilClose);
        }
        if fields.cl {
            let n = match fields.length {
                Some(n) => n,
                // Invalid or conflicting: the error, from the map.
                None => response_content_length(response.headers())?,
            };
            self.declared = Some(n);
            return Ok(State::Length { remaining: n });
        }
        self.close_delimited = true;
        Ok(State::UntilClose)
    }

    /// Parses a chunk-size line (`1a;ext=v\r\n`), consuming it.
    fn chunk_size(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
        scanned: usize,
    ) -> Result<Option<u64>, Http1Error> {
        let limit = self.limits.max_chunk_line;
        let Some(nl) = buf[scanned.min(buf.len())..].iter().position(|b| *b == b'\n').map(|p| p + scanned)
        else {
            if buf.len() > limit {
                return Err(Http1Error::ChunkLineTooLong { limit });
            }
            self.state = State::Chunked(Chunk::Size { scanned: buf.len() });
            return self.need_more(eof).map(|_| None);
        };
        if nl + 1 > limit {
            return Err(Http1Error::ChunkLineTooLong { limit });
        }
        let line = &buf[..nl];
        let bad = || Http1Error::InvalidChunkSize { line: lossy(line) };
        let line_body = line.strip_suffix(b"\r").ok_or_else(bad)?;
        let size_part = match line_body.iter().position(|b| *b == b';') {
            Some(i) => trim(&line_body[..i]),
            None => line_body,
        };
        if size_part.is_empty() || size_part.len() > 16 {
            return Err(bad());
        }
        let mut size: u64 = 0;
        for &b in size_part {
            let digit = (b as char).to_digit(16).ok_or_else(bad)?;
            size = (size << 4) | u64::from(digit);
        }
        buf.advance(nl + 1);
        Ok(Some(size))
    }

    fn trailers(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
        scanned: usize,
    ) -> Result<Option<Frame>, Http1Error> {
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.state = State::Ended;
            return Ok(Some(Frame::End));
        }
        if buf.len() < 2 && (buf.is_empty() || buf[0] == b'\r') {
            return self.need_more(eof);
        }
        let limit = self.limits.max_head_size;
        let Some(end) = find_blank_line(buf, scanned) else {
            if buf.len() > limit {
                return Err(Http1Error::TrailersTooLarge { limit });
            }
            self.state = State::Trailers { scanned: buf.len() };
            return self.need_more(eof);
        };
        if end > limit {
            return Err(Http1Error::TrailersTooLarge { limit });
        }
        let mut headers = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
        let n = match httparse::parse_headers(&buf[..end], &mut headers) {
            Ok(httparse::Status::Complete((n, _))) => n,
            Ok(httparse::Status::Partial) => {
                return Err(Http1Error::MalformedTrailers { reason: "incomplete" })
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Http1Error::MalformedTrailers { reason: "too many trailer fields" })
            }
            Err(e) => return Err(Http1Error::MalformedTrailers { reason: httparse_reason(e) }),
        };
        let count = headers.iter().take_while(|h| !h.name.is_empty()).count();
        let (map, _) = header_map(&headers[..count])
            .map_err(|_| Http1Error::MalformedTrailers { reason: "invalid trailer field" })?;
        buf.advance(n);
        self.state = State::EndPending;
        Ok(Some(Frame::Trailers(map)))
    }
}

/// Fails at once when the bytes so far cannot begin an HTTP/1.x status line
/// (`HTTP/1.` and a digit), instead of waiting for a blank line or the head
/// limit. Only complete prefixes are judged, so any split of the input gives
/// the same verdict.
fn check_status_line_start(buf: &[u8]) -> Result<(), Http1Error> {
    const START: &[u8] = b"HTTP/1.";
    // Empty lines before a status line are left to the head parser (robustness,
    // as RFC 9112 §2.2 asks of servers for request lines).
    let skip = buf.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
    let mismatch =
        buf[skip..].iter().take(START.len() + 1).enumerate().position(|(i, b)| match START.get(i) {
            Some(expected) => b != expected,
            None => !b.is_ascii_digit(),
        });
    match mismatch {
        None => Ok(()),
        // The bytes up to the first wrong one: the same whatever the split.
        Some(i) => Err(Http1Error::NotHttp { start: lossy(&buf[skip..=skip + i]) }),
    }
}

/// The index just past the first empty line (`\n\n`, `\n\r\n`) at or after
/// `scanned - 2`, so a terminator split across reads is still found.
fn find_blank_line(buf: &[u8], scanned: usize) -> Option<usize> {
    let start = scanned.saturating_sub(2);
    let mut i = start;
    while let Some(p) = buf.get(i..).and_then(|rest| rest.iter().position(|b| *b == b'\n')) {
        let nl = i + p;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

/// Header slots on the stack for a response head; more (up to
/// [`Limits::max_headers`]) go on the heap.
const STACK_HEADERS: usize = 32;

/// A parsed response head.
struct Head {
    len: usize,
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    fields: Fields,
}

/// What the framing and the connection's fate need from a head's fields,
/// read while the header map is built (a hashed lookup per name afterwards
/// cost ~420 instructions per response).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fields {
    /// A `Connection` token `close`.
    close: bool,
    /// A `Connection` token `keep-alive`.
    keep_alive: bool,
    /// A `Transfer-Encoding` field.
    te: bool,
    /// The last non-empty `Transfer-Encoding` token is `chunked`.
    te_chunked: bool,
    /// A `Content-Length` field.
    cl: bool,
    /// Its value, when every value agrees and is a number (`None` then: the
    /// exact error is worked out from the map).
    length: Option<u64>,
}

impl Fields {
    fn read(&mut self, name: &HeaderName, value: &[u8]) {
        let tokens = || value.split(|b| *b == b',').map(trim);
        if *name == CONNECTION {
            for t in tokens() {
                self.close |= t.eq_ignore_ascii_case(b"close");
                self.keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if *name == TRANSFER_ENCODING {
            self.te = true;
            if let Some(last) = tokens().rfind(|t| !t.is_empty()) {
                self.te_chunked = last.eq_ignore_ascii_case(b"chunked");
            }
        } else if *name == CONTENT_LENGTH {
            let first = !self.cl;
            self.cl = true;
            for t in tokens() {
                self.length = match (super::parse_decimal(t), self.length) {
                    (Some(n), None) if first => Some(n),
                    (Some(n), Some(f)) if n == f => Some(n),
                    _ => None,
                };
                if self.length.is_none() {
                    return;
                }
            }
        }
    }
}

/// Parses the complete head `buf` with `slots` (`max`: the limit, for the
/// error).
fn parse_head<'b>(
    buf: &'b [u8],
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
    max: usize,
) -> Result<Head, Http1Error> {
    let mut parsed = httparse::Response::new(&mut []);
    let len =
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut parsed, buf, slots) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return Err(Http1Error::MalformedHead { reason: "incomplete head" })
            }
            Err(httparse::Error::TooManyHeaders) => return Err(Http1Error::TooManyHeaders { limit: max }),
            Err(e) => return Err(Http1Error::MalformedHead { reason: httparse_reason(e) }),
        };
    let code = parsed.code.unwrap_or(0);
    let status = StatusCode::from_u16(code)
        .map_err(|_| Http1Error::MalformedHead { reason: "invalid status code" })?;
    let version = if parsed.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    // Small header values are copied: measured faster than sharing the head's
    // buffer, which costs a reference count per value.
    let (headers, fields) = header_map(parsed.headers)?;
    Ok(Head { len, status, version, headers, fields })
}

fn header_map(headers: &[httparse::Header<'_>]) -> Result<(HeaderMap, Fields), Http1Error> {
    let mut map = HeaderMap::with_capacity(headers.len());
    let mut fields = Fields::default();
    for h in headers {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| Http1Error::MalformedHead { reason: "invalid header name" })?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| Http1Error::MalformedHead { reason: "invalid header value" })?;
        fields.read(&name, h.value);
        map.append(name, value);
    }
    Ok((map, fields))
}

fn tokens<'a>(headers: &'a HeaderMap, name: &HeaderName) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers.get_all(name).into_iter().flat_map(|v| v.as_bytes().split(|b| *b == b',')).map(trim)
}

fn response_content_length(headers: &HeaderMap) -> Result<u64, Http1Error> {
    // One pass without collecting (the common head has one value); the
    // values are gathered only to report a conflict.
    let mut found: Option<u64> = None;
    for v in tokens(headers, &CONTENT_LENGTH) {
        let n =
            super::parse_decimal(v).ok_or_else(|| Http1Error::InvalidContentLength { value: lossy(v) })?;
        if found.is_some_and(|f| f != n) {
            let mut values: Vec<&[u8]> = tokens(headers, &CONTENT_LENGTH).collect();
            values.dedup();
            return Err(Http1Error::ConflictingContentLength {
                values: values.iter().map(|v| lossy(v)).collect(),
            });
        }
        found = Some(n);
    }
    found.ok_or(Http1Error::InvalidContentLength { value: String::new() })
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned()
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status line",
        httparse::Error::Token => "invalid token",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}
