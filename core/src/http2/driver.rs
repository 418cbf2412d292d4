//! The HTTP/2 connection driver: one client connection, all its streams, no I/O.
//!
//! The same shape as the HTTP/1.1 [`Driver`](crate::http1::Driver): the
//! adapter moves bytes, the driver decides.
//!
//! | the adapter sees | it calls |
//! |---|---|
//! | bytes from the socket | [`Driver::handle_read`] (or [`read_buffer`](Driver::read_buffer) + [`handle_appended`](Driver::handle_appended)); end of stream: [`handle_eof`](Driver::handle_eof); an error: [`handle_read_error`](Driver::handle_read_error) |
//! | [`Driver::poll_transmit`] has bytes | writes them, then [`Driver::handle_written`] |
//! | [`Driver::poll_event`] | acts on [`Event`]s: SETTINGS, GOAWAY, a response head, body data, trailers, a stream's end or failure, a PONG, the connection's end |
//! | a call to start | [`Driver::open`] (the pool said a stream is free), then its body with [`Driver::send_data`] while [`Driver::wants_body`] |
//! | a call's body read | [`Driver::release`] (returns the stream's flow-control credit) |
//! | a call over | [`Driver::close_stream`] (resets a stream still open) |
//!
//! What it keeps, per RFC 9113:
//!
//! * **Framing**: the preface and our SETTINGS (no server push; our stream
//!   window), every frame type a client may receive, checked for size and
//!   stream; header blocks split over CONTINUATION frames, each bounded
//!   ([`DriverConfig::max_header_block`]: past it the connection ends with
//!   ENHANCE_YOUR_CALM, so a CONTINUATION flood cannot grow memory).
//! * **HPACK** ([`hpack`](super::hpack)): the server's blocks decoded, ours
//!   encoded, one table per connection.
//! * **Flow control, both ways**: request bodies go out only as far as the
//!   server's connection and stream windows allow, one frame at a time,
//!   streams taking turns; the server's DATA is checked against the windows
//!   we granted. **A stalled reader never stalls its connection**: connection
//!   credit is returned as DATA arrives, stream credit only as the caller
//!   consumes the body ([`Driver::release`]). A stream nobody reads holds at
//!   most its own window; every other stream keeps flowing.
//! * **Responses**: `:status` first and once, no request pseudo-headers, no
//!   connection-specific fields, informational (1xx) heads skipped, trailers
//!   only with END_STREAM, DATA held to the response's `content-length`.
//!   A malformed response fails its stream (RST_STREAM PROTOCOL_ERROR), not
//!   the connection.
//! * **An early answer wins**: a server may answer before it has read the
//!   request body and end its side; the head and body are delivered as
//!   usual, and the rest of the request body is not sent.
//! * **GOAWAY**: streams above its last stream id fail as unprocessed (the
//!   retry rules may send them again); the others run to their end; no new
//!   stream opens.
//!
//! It keeps no timer: the connection's deadlines (usable within the
//! handshake timeout, PONGs) are the pool's; a call's are its own.
//!
//! ```
//! # use switchyard_core::http2::{Driver, DriverConfig, Event};
//!
//! let mut driver = Driver::new(DriverConfig::default());
//! // The preface and our SETTINGS wait to be written.
//! let preface = driver.poll_transmit().unwrap().to_vec();
//! assert!(preface.starts_with(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
//! driver.handle_written(preface.len());
//!
//! // The server's SETTINGS (empty): the connection is usable.
//! driver.handle_read(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
//! assert!(matches!(driver.poll_event(), Some(Event::Settings { max_concurrent_streams: None })));
//!
//! let request = http::Request::get("http://a.test/").body(()).unwrap();
//! let (parts, ()) = request.into_parts();
//! let stream = driver.open(&parts, true).unwrap();
//! assert_eq!(stream, 1);
//! // The server answers: HEADERS with END_HEADERS | END_STREAM, `:status 204` (index 9).
//! driver.handle_read(&[0, 0, 1, 1, 5, 0, 0, 0, 1, 0x89]);
//! let Some(Event::Head { response, .. }) = driver.poll_event() else { panic!() };
//! assert_eq!(response.status(), 204);
//! assert!(matches!(driver.poll_event(), Some(Event::End { stream: 1 })));
//! ```

use std::collections::{BTreeMap, VecDeque};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::hpack::{Decoder, TableEncoder};
use super::session::{code, ConnectionEnd, GoAway, Peer, StreamError};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// The largest frame we accept: the protocol's default, which we never raise.
const MAX_FRAME: usize = 16_384;
/// The largest window either side may have (RFC 9113 §6.9.1).
const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Bytes of answers to the server's control frames (SETTINGS and PING
/// acknowledgements) that may wait unwritten; past this the server is
/// flooding (ENHANCE_YOUR_CALM).
const MAX_PENDING_CONTROL: usize = 1 << 20;

/// How the driver runs a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Each stream's receive window (our SETTINGS_INITIAL_WINDOW_SIZE): what
    /// a response body may hold unread.
    pub stream_window: u32,
    /// The connection's receive window.
    pub connection_window: u32,
    /// A header block (HEADERS and its CONTINUATIONs) longer than this on the
    /// wire ends the connection (ENHANCE_YOUR_CALM): the bound on what one
    /// block may make us keep. Blocks are reported with their length, so a
    /// smaller limit on heads is the caller's (the session's) to apply.
    pub max_header_block: usize,
    /// The decoded header list size we advertise
    /// (SETTINGS_MAX_HEADER_LIST_SIZE; advisory for the server).
    pub max_header_list: u32,
}

impl Default for DriverConfig {
    fn default() -> DriverConfig {
        DriverConfig {
            stream_window: 65_535,
            connection_window: 65_535,
            max_header_block: 256 * 1024,
            max_header_list: 64 * 1024,
        }
    }
}

/// What happened on the connection, in the order it happened.
#[derive(Debug)]
pub enum Event {
    /// The server's SETTINGS (every one, not acknowledgements): the first
    /// makes the connection usable.
    Settings {
        /// SETTINGS_MAX_CONCURRENT_STREAMS, if the frame carried it.
        max_concurrent_streams: Option<u32>,
    },
    /// The server is going away: no new streams. Streams above its last id
    /// fail on their own ([`Event::Failed`]).
    GoAway(GoAway),
    /// A stream's final response head.
    Head {
        /// The stream.
        stream: u32,
        /// Status and fields (version HTTP/2).
        response: http::Response<()>,
        /// The header block's length on the wire.
        block_len: usize,
    },
    /// Response body bytes (give their credit back with [`Driver::release`]).
    Data {
        /// The stream.
        stream: u32,
        /// The bytes.
        data: Bytes,
    },
    /// The response's trailers (then [`Event::End`]).
    Trailers {
        /// The stream.
        stream: u32,
        /// The fields.
        trailers: HeaderMap,
        /// The header block's length on the wire.
        block_len: usize,
    },
    /// The response is complete.
    End {
        /// The stream.
        stream: u32,
    },
    /// The stream failed (reset by either side, refused by GOAWAY, or the
    /// connection ended under it). Nothing more comes on it.
    Failed {
        /// The stream.
        stream: u32,
        /// What happened (the session judges it).
        error: StreamError,
    },
    /// The answer to our PING ([`Driver::ping`]).
    Pong,
    /// The connection is over: every stream has had its last event.
    Closed(ConnectionEnd),
}

/// A request head ready for a stream: its pseudo-fields and fields, taken
/// from the request (no copy of the request itself; field values share their
/// bytes). The connection's encoder writes it when the stream opens.
#[derive(Clone, Debug)]
pub struct RequestHead {
    method: http::Method,
    uri: http::Uri,
    host: Option<HeaderValue>,
    fields: Vec<(http::HeaderName, HeaderValue)>,
    content_length: Option<u64>,
}

impl RequestHead {
    /// The head of `parts`: the pseudo-fields from the method and URI
    /// (`host` becomes `:authority` when the URI has none), then the fields,
    /// without the connection-specific ones RFC 9113 §8.2.2 forbids
    /// (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`,
    /// `upgrade`, `host`, and `te` other than `trailers`).
    /// `content_length`: sent as `content-length` when the fields have none
    /// (a streamed body's declared length).
    #[must_use]
    pub fn encode(parts: &http::request::Parts, content_length: Option<u64>) -> RequestHead {
        use http::header as h;
        let fields = parts
            .headers
            .iter()
            .filter(|(name, value)| {
                !(matches!(**name, h::CONNECTION | h::TRANSFER_ENCODING | h::UPGRADE | h::HOST)
                    || name.as_str() == "keep-alive"
                    || name.as_str() == "proxy-connection"
                    || (**name == h::TE && value.as_bytes() != b"trailers"))
            })
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        RequestHead {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            host: parts.headers.get(h::HOST).cloned(),
            fields,
            content_length: content_length.filter(|_| !parts.headers.contains_key(h::CONTENT_LENGTH)),
        }
    }

    fn write(&self, e: &mut TableEncoder, block: &mut BytesMut) {
        e.begin(block);
        self.each_field(false, |name, value, _| e.field(block, name, value));
    }

    /// Each field of the head in the order it goes out (pseudo-fields first),
    /// with, when `mark` asks, whether it is a credential (a sensitive value,
    /// or `authorization` and `proxy-authorization`; HTTP/2's table encoder
    /// decides that by itself): HTTP/2's and HTTP/3's encoders write the same list.
    pub(crate) fn each_field(&self, mark: bool, mut field: impl FnMut(&str, &[u8], bool)) {
        field(":method", self.method.as_str().as_bytes(), false);
        let connect = self.method == http::Method::CONNECT;
        if !connect {
            field(":scheme", self.uri.scheme_str().unwrap_or("https").as_bytes(), false);
        }
        match (self.uri.authority(), &self.host) {
            (Some(a), _) => field(":authority", a.as_str().as_bytes(), false),
            (None, Some(host)) => field(":authority", host.as_bytes(), false),
            (None, None) => {}
        }
        if !connect {
            let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
            field(":path", if path.is_empty() { b"/" } else { path.as_bytes() }, false);
        }
        for (name, value) in &self.fields {
            let sensitive = mark
                && (value.is_sensitive()
                    || *name == http::header::AUTHORIZATION
                    || *name == http::header::PROXY_AUTHORIZATION);
            field(name.as_str(), value.as_bytes(), sensitive);
        }
        if let Some(n) = self.content_length {
            field("content-length", n.to_string().as_bytes(), false);
        }
    }

    pub(crate) fn is_head_request(&self) -> bool {
        self.method == http::Method::HEAD
    }
}

/// Why [`Driver::open`] did not open a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The connection is over, or going away: the request was not sent.
    Closed(StreamError),
    /// The server's stream limit is reached (the pool's count was wrong).
    AtLimit,
    /// Stream ids ran out: the connection takes no more streams.
    Exhausted,
}

#[derive(Debug)]
struct Stream {
    /// What the server may still send us before we return credit.
    recv_window: i64,
    /// Consumed bytes not yet returned in a WINDOW_UPDATE.
    unannounced: u32,
    /// What we may still send.
    send_window: i64,
    /// Body bytes waiting for window, and whether END_STREAM follows them.
    queue: VecDeque<Bytes>,
    queued: usize,
    end_queued: bool,
    local_closed: bool,
    remote_closed: bool,
    /// The final head arrived.
    head: bool,
    /// No body may come (HEAD, 204, 304).
    bodiless: bool,
    is_head_request: bool,
    /// The response's content-length, and the DATA received so far.
    expected: Option<u64>,
    received: u64,
}

/// A header block being collected from HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    bytes: BytesMut,
    end_stream: bool,
}

/// One HTTP/2 client connection. See the [module docs](self).
#[derive(Debug)]
pub struct Driver {
    config: DriverConfig,
    out: BytesMut,
    input: BytesMut,
    decoder: Decoder,
    encoder: TableEncoder,
    /// Where request heads are encoded (kept between streams).
    scratch: BytesMut,
    /// Boxed: a map's moves stay small.
    streams: BTreeMap<u32, Box<Stream>>,
    /// Streams with body bytes waiting for window, in turn.
    sending: VecDeque<u32>,
    next_stream: u32,
    events: VecDeque<Event>,
    /// The server's settings.
    peer_max_streams: Option<u32>,
    peer_initial_window: i64,
    peer_max_frame: usize,
    settings_seen: bool,
    conn_send_window: i64,
    conn_recv_window: i64,
    conn_unannounced: u32,
    goaway: Option<GoAway>,
    block: Option<Block>,
    ping_out: bool,
    ping_payload: u64,
    closed: bool,
    data_bytes: u64,
    credit_stalls: u64,
}

fn frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    out.put_uint(len as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

impl Driver {
    /// A connection whose preface, SETTINGS and connection window are ready
    /// to be written.
    #[must_use]
    pub fn new(config: DriverConfig) -> Driver {
        let stream_window = i64::from(config.stream_window.min(MAX_WINDOW as u32));
        let connection_window = i64::from(config.connection_window.clamp(65_535, MAX_WINDOW as u32));
        let mut out = BytesMut::with_capacity(128);
        out.put_slice(PREFACE);
        frame_header(&mut out, 18, SETTINGS, 0, 0);
        out.put_u16(0x2); // SETTINGS_ENABLE_PUSH
        out.put_u32(0);
        out.put_u16(0x4); // SETTINGS_INITIAL_WINDOW_SIZE
        out.put_u32(stream_window as u32);
        out.put_u16(0x6); // SETTINGS_MAX_HEADER_LIST_SIZE
        out.put_u32(config.max_header_list);
        if connection_window > 65_535 {
            frame_header(&mut out, 4, WINDOW_UPDATE, 0, 0);
            out.put_u32((connection_window - 65_535) as u32);
        }
        Driver {
            config: DriverConfig {
                stream_window: stream_window as u32,
                connection_window: connection_window as u32,
                ..config
            },
            out,
            input: BytesMut::new(),
            decoder: Decoder::default(),
            encoder: TableEncoder::default(),
            scratch: BytesMut::new(),
            streams: BTreeMap::new(),
            sending: VecDeque::new(),
            next_stream: 1,
            events: VecDeque::new(),
            peer_max_streams: None,
            peer_initial_window: 65_535,
            peer_max_frame: MAX_FRAME,
            settings_seen: false,
            conn_send_window: 65_535,
            conn_recv_window: connection_window,
            conn_unannounced: 0,
            goaway: None,
            block: None,
            ping_out: false,
            ping_payload: 0,
            closed: false,
            data_bytes: 0,
            credit_stalls: 0,
        }
    }

    /// Bytes to write, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// Everything there is to write, taken at once (empty: nothing); the
    /// owned alternative to [`poll_transmit`](Self::poll_transmit) and
    /// [`handle_written`](Self::handle_written).
    pub fn take_transmit(&mut self) -> Bytes {
        self.out.split().freeze()
    }

    /// `n` bytes of [`poll_transmit`](Self::poll_transmit)'s were written.
    pub fn handle_written(&mut self, n: usize) {
        self.out.advance(n.min(self.out.len()));
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the connection is over (no stream may open; every stream has
    /// had its last event once the queue is drained).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Streams open (not yet ended both ways or reset).
    #[must_use]
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// DATA payload bytes received (padding included): what the adaptive
    /// window measures.
    #[must_use]
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// How many times DATA left a stream whose body goes on with less credit
    /// than one frame: the server had to wait for our WINDOW_UPDATE (the
    /// adaptive window's second signal that the window was the limit).
    #[must_use]
    pub fn credit_stalls(&self) -> u64 {
        self.credit_stalls
    }

    /// The server's GOAWAY, once received.
    #[must_use]
    pub fn goaway(&self) -> Option<GoAway> {
        self.goaway
    }

    /// The buffer reads may append to; then [`handle_appended`](Self::handle_appended).
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        &mut self.input
    }

    /// `n` bytes were appended to [`read_buffer`](Self::read_buffer)
    /// (the count is informational: the buffer's contents are what counts).
    pub fn handle_appended(&mut self, _n: usize) {
        self.process();
    }

    /// Bytes the server sent (any split).
    pub fn handle_read(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
        self.process();
    }

    /// The server closed the connection.
    pub fn handle_eof(&mut self) {
        let error = match self.goaway {
            Some(g) => StreamError::GoAway { code: g.error_code, by: Peer::Server },
            None => StreamError::Io { message: "the server closed the HTTP/2 connection".into() },
        };
        let end = if self.streams.is_empty() && self.goaway.is_none() {
            ConnectionEnd::Closed
        } else {
            ConnectionEnd::Failed(error.clone())
        };
        self.end(&error, end);
    }

    /// Reading or writing failed.
    pub fn handle_read_error(&mut self, message: &str) {
        let error = StreamError::Io { message: message.into() };
        self.end(&error, ConnectionEnd::Failed(error.clone()));
    }

    /// Opens a stream for a request: its HEADERS (and CONTINUATIONs) are
    /// queued. `end_of_stream`: the request has no body. The head is encoded
    /// as [`RequestHead::encode`] says.
    pub fn open(&mut self, parts: &http::request::Parts, end_of_stream: bool) -> Result<u32, OpenError> {
        self.open_head(&RequestHead::encode(parts, None), end_of_stream)
    }

    /// Opens a stream for a head taken from its request beforehand
    /// ([`RequestHead::encode`], on the caller's side); the connection's
    /// encoder writes it now.
    pub fn open_head(&mut self, head: &RequestHead, end_of_stream: bool) -> Result<u32, OpenError> {
        if self.closed {
            let message = "the HTTP/2 connection is closed".into();
            return Err(OpenError::Closed(StreamError::Other { message }));
        }
        if let Some(g) = self.goaway {
            return Err(OpenError::Closed(StreamError::GoAway { code: g.error_code, by: Peer::Server }));
        }
        let limit = self.peer_max_streams.unwrap_or(if self.settings_seen { u32::MAX } else { 1 });
        if self.streams.len() >= limit as usize {
            return Err(OpenError::AtLimit);
        }
        if self.next_stream > MAX_WINDOW as u32 {
            return Err(OpenError::Exhausted);
        }
        let id = self.next_stream;
        self.next_stream += 2;
        let flags = if end_of_stream { END_STREAM } else { 0 };
        let mut block = std::mem::take(&mut self.scratch);
        block.clear();
        head.write(&mut self.encoder, &mut block);
        self.put_header_block(id, flags, &block);
        self.scratch = block;
        self.streams.insert(
            id,
            Box::new(Stream {
                recv_window: i64::from(self.config.stream_window),
                unannounced: 0,
                send_window: self.peer_initial_window,
                queue: VecDeque::new(),
                queued: 0,
                end_queued: false,
                local_closed: end_of_stream,
                remote_closed: false,
                head: false,
                bodiless: head.is_head_request(),
                is_head_request: head.is_head_request(),
                expected: None,
                received: 0,
            }),
        );
        Ok(id)
    }

    fn put_header_block(&mut self, id: u32, flags: u8, block: &[u8]) {
        let max = self.peer_max_frame;
        let mut rest = block;
        let first = rest.len().min(max);
        let end = if first == rest.len() { END_HEADERS } else { 0 };
        frame_header(&mut self.out, first, HEADERS, flags | end, id);
        self.out.put_slice(&rest[..first]);
        rest = &rest[first..];
        while !rest.is_empty() {
            let n = rest.len().min(max);
            let end = if n == rest.len() { END_HEADERS } else { 0 };
            frame_header(&mut self.out, n, CONTINUATION, end, id);
            self.out.put_slice(&rest[..n]);
            rest = &rest[n..];
        }
    }

    /// Whether the stream takes another body chunk now: it is open, its
    /// earlier chunks went out, and the server's windows have room. At most
    /// one chunk past the windows is ever buffered.
    #[must_use]
    pub fn wants_body(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| {
            !s.local_closed
                && !s.remote_closed
                && !s.end_queued
                && s.queued == 0
                && s.send_window > 0
                && self.conn_send_window > 0
        })
    }

    /// Whether the stream's request side is over: its body was all sent, or
    /// the server no longer wants it (it answered and ended its side, or
    /// the stream is gone).
    #[must_use]
    pub fn body_done(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_none_or(|s| s.local_closed || s.remote_closed)
    }

    /// Body bytes for a stream, `end`: the last. They go out as the windows
    /// allow; nothing is sent on a stream that is closed or gone.
    pub fn send_data(&mut self, stream: u32, data: Bytes, end: bool) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.local_closed || s.end_queued {
            return;
        }
        if s.remote_closed {
            // The server answered and ended its side: the rest is not sent.
            return;
        }
        if data.is_empty() && !end {
            return;
        }
        let was_idle = s.queued == 0 && !s.end_queued;
        s.queued += data.len();
        if !data.is_empty() {
            s.queue.push_back(data);
        }
        s.end_queued = end;
        if was_idle {
            self.sending.push_back(stream);
        }
        self.flush_data();
    }

    /// The caller consumed `n` body bytes of `stream`: their credit goes back
    /// to the server (in batches of half the window).
    pub fn release(&mut self, stream: u32, n: usize) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.unannounced = s.unannounced.saturating_add(n as u32);
        if !s.remote_closed && s.unannounced >= self.config.stream_window / 2 {
            let inc = s.unannounced;
            s.unannounced = 0;
            s.recv_window += i64::from(inc);
            frame_header(&mut self.out, 4, WINDOW_UPDATE, 0, stream);
            self.out.put_u32(inc);
        }
    }

    /// The caller is done with `stream`: a stream not yet ended both ways is
    /// reset (CANCEL); what it still buffers is dropped.
    pub fn close_stream(&mut self, stream: u32) {
        let Some(s) = self.streams.remove(&stream) else { return };
        let over = s.local_closed && s.remote_closed;
        if !over && !self.closed {
            frame_header(&mut self.out, 4, RST_STREAM, 0, stream);
            self.out.put_u32(code::CANCEL);
        }
        self.sending.retain(|&id| id != stream);
    }

    /// Sends a PING; [`Event::Pong`] when the server answers. `false`: one is
    /// already out (its PONG answers this one too) or the connection is over.
    pub fn ping(&mut self) -> bool {
        if self.ping_out || self.closed {
            return false;
        }
        self.ping_out = true;
        self.ping_payload = self.ping_payload.wrapping_add(1);
        frame_header(&mut self.out, 8, PING, 0, 0);
        self.out.put_u64(self.ping_payload);
        true
    }

    /// Grows our windows (the adaptive window's decision): the stream window
    /// for every stream (a SETTINGS frame) and the connection window (a
    /// WINDOW_UPDATE). Windows never shrink here.
    pub fn grow_windows(&mut self, stream_window: u32, connection_window: u32) {
        if self.closed {
            return;
        }
        let stream_window = stream_window.min(MAX_WINDOW as u32);
        if stream_window > self.config.stream_window {
            let delta = i64::from(stream_window - self.config.stream_window);
            self.config.stream_window = stream_window;
            frame_header(&mut self.out, 6, SETTINGS, 0, 0);
            self.out.put_u16(0x4);
            self.out.put_u32(stream_window);
            for s in self.streams.values_mut() {
                s.recv_window += delta;
            }
        }
        let connection_window = connection_window.min(MAX_WINDOW as u32);
        if connection_window > self.config.connection_window {
            let delta = connection_window - self.config.connection_window;
            self.config.connection_window = connection_window;
            self.conn_recv_window += i64::from(delta);
            frame_header(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
            self.out.put_u32(delta);
        }
    }

    /// Ends the connection from our side, gracefully (GOAWAY NO_ERROR): open
    /// streams fail as closed by us.
    pub fn go_away(&mut self) {
        if self.closed {
            return;
        }
        self.connection_error(code::NO_ERROR);
    }

    fn flush_data(&mut self) {
        let mut turns = self.sending.len();
        while turns > 0 {
            turns -= 1;
            let Some(id) = self.sending.pop_front() else { break };
            let Some(s) = self.streams.get_mut(&id) else { continue };
            if s.remote_closed && !s.local_closed {
                // An early answer: stop sending (the stream ends with the
                // caller's close_stream).
                s.queue.clear();
                s.queued = 0;
                s.end_queued = false;
                continue;
            }
            let n = s.queue.front().map_or(0, Bytes::len);
            if n == 0 && !s.end_queued {
                continue; // nothing to send
            }
            let allowed = (self.conn_send_window.min(s.send_window).max(0) as usize).min(self.peer_max_frame);
            if n > 0 && allowed == 0 {
                self.sending.push_back(id); // waits for a WINDOW_UPDATE
                continue;
            }
            let take = n.min(allowed);
            let chunk = match s.queue.front_mut() {
                Some(front) if take < front.len() => front.split_to(take),
                Some(_) => s.queue.pop_front().unwrap_or_default(),
                None => Bytes::new(),
            };
            s.queued -= chunk.len();
            s.send_window -= chunk.len() as i64;
            self.conn_send_window -= chunk.len() as i64;
            let last = s.queued == 0 && s.end_queued;
            if last {
                s.local_closed = true;
                s.end_queued = false;
            }
            let flags = if last { END_STREAM } else { 0 };
            frame_header(&mut self.out, chunk.len(), DATA, flags, id);
            self.out.put_slice(&chunk);
            if s.queued > 0 {
                self.sending.push_back(id);
                turns += 1;
            }
        }
    }

    fn process(&mut self) {
        while !self.closed {
            if self.input.len() < 9 {
                return;
            }
            let len = (usize::from(self.input[0]) << 16)
                | (usize::from(self.input[1]) << 8)
                | usize::from(self.input[2]);
            let kind = self.input[3];
            if len > MAX_FRAME {
                self.connection_error(FRAME_SIZE_ERROR);
                return;
            }
            if self.input.len() < 9 + len {
                self.input.reserve(9 + len - self.input.len());
                return;
            }
            let flags = self.input[4];
            let stream = u32::from_be_bytes([self.input[5], self.input[6], self.input[7], self.input[8]])
                & 0x7fff_ffff;
            self.input.advance(9);
            let payload = self.input.split_to(len).freeze();
            if !self.settings_seen && kind != SETTINGS {
                // The server's preface is a SETTINGS frame (RFC 9113 §3.4).
                self.connection_error(PROTOCOL_ERROR);
                return;
            }
            if let Some(block) = &self.block {
                if kind != CONTINUATION || stream != block.stream {
                    self.connection_error(PROTOCOL_ERROR);
                    return;
                }
            }
            match kind {
                DATA => self.on_data(stream, flags, payload),
                HEADERS => self.on_headers(stream, flags, payload),
                PRIORITY => {
                    if stream == 0 {
                        self.connection_error(PROTOCOL_ERROR);
                    } else if len != 5 {
                        self.stream_error(stream, FRAME_SIZE_ERROR);
                    }
                }
                RST_STREAM => self.on_reset(stream, &payload),
                SETTINGS => self.on_settings(stream, flags, &payload),
                PUSH_PROMISE => self.connection_error(PROTOCOL_ERROR), // we disabled push
                PING => self.on_ping(stream, flags, &payload),
                GOAWAY => self.on_goaway(stream, &payload),
                WINDOW_UPDATE => self.on_window_update(stream, &payload),
                CONTINUATION => self.on_continuation(stream, flags, &payload),
                _ => {} // unknown frame types are ignored (§4.1)
            }
        }
    }

    /// A stream id the server refers to: known, closed (ours, below the next),
    /// or one that was never opened (a connection error for most frames).
    fn is_idle(&self, stream: u32) -> bool {
        stream >= self.next_stream || stream % 2 == 0
    }

    fn on_data(&mut self, stream: u32, flags: u8, mut payload: Bytes) {
        if stream == 0 || self.is_idle(stream) {
            return self.connection_error(PROTOCOL_ERROR);
        }
        let total = payload.len();
        self.data_bytes += total as u64;
        // Connection flow control counts the whole payload, padding included.
        self.conn_recv_window -= total as i64;
        if self.conn_recv_window < 0 {
            return self.connection_error(FLOW_CONTROL_ERROR);
        }
        // Connection credit goes back as DATA arrives: the stream windows
        // bound what a stream holds unread, so one stalled reader cannot
        // hold the whole connection.
        self.conn_unannounced += total as u32;
        if self.conn_unannounced >= self.config.connection_window / 2 {
            let inc = self.conn_unannounced;
            self.conn_unannounced = 0;
            self.conn_recv_window += i64::from(inc);
            frame_header(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
            self.out.put_u32(inc);
        }
        let padding = if flags & PADDED != 0 {
            let Some(&pad) = payload.first() else { return self.connection_error(PROTOCOL_ERROR) };
            if usize::from(pad) >= payload.len() {
                return self.connection_error(PROTOCOL_ERROR);
            }
            payload.advance(1);
            payload.truncate(payload.len() - usize::from(pad));
            usize::from(pad) + 1
        } else {
            0
        };
        let Some(s) = self.streams.get_mut(&stream) else {
            return; // a stream we closed: its data is dropped
        };
        if s.remote_closed {
            return self.stream_error(stream, STREAM_CLOSED);
        }
        s.recv_window -= total as i64;
        if s.recv_window < 0 {
            return self.stream_error(stream, FLOW_CONTROL_ERROR);
        }
        if s.recv_window < MAX_FRAME as i64 && flags & END_STREAM == 0 {
            self.credit_stalls += 1;
        }
        if !s.head {
            return self.stream_error(stream, PROTOCOL_ERROR);
        }
        s.received += payload.len() as u64;
        if s.bodiless && !payload.is_empty() || s.expected.is_some_and(|e| s.received > e) {
            return self.stream_error(stream, PROTOCOL_ERROR);
        }
        // Padding is consumed here: its stream credit is the caller's too.
        s.unannounced = s.unannounced.saturating_add(padding as u32);
        if !payload.is_empty() {
            self.events.push_back(Event::Data { stream, data: payload });
        }
        if flags & END_STREAM != 0 {
            self.remote_end(stream);
        }
    }

    fn remote_end(&mut self, stream: u32) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if !s.bodiless && s.expected.is_some_and(|e| e != s.received) {
            return self.stream_error(stream, PROTOCOL_ERROR);
        }
        s.remote_closed = true;
        if s.local_closed {
            // Over both ways: nothing more can come or go.
            self.streams.remove(&stream);
        } else {
            // An early answer: the rest of the body is not sent.
            s.queue.clear();
            s.queued = 0;
            s.end_queued = false;
        }
        self.events.push_back(Event::End { stream });
    }

    fn on_headers(&mut self, stream: u32, flags: u8, mut payload: Bytes) {
        if stream == 0 || self.is_idle(stream) {
            return self.connection_error(PROTOCOL_ERROR);
        }
        if flags & PADDED != 0 {
            let Some(&pad) = payload.first() else { return self.connection_error(PROTOCOL_ERROR) };
            payload.advance(1);
            if usize::from(pad) > payload.len() {
                return self.connection_error(PROTOCOL_ERROR);
            }
            payload.truncate(payload.len() - usize::from(pad));
        }
        if flags & PRIORITY_FLAG != 0 {
            if payload.len() < 5 {
                return self.connection_error(FRAME_SIZE_ERROR);
            }
            payload.advance(5);
        }
        if flags & END_HEADERS != 0 {
            self.on_block(stream, &payload, flags & END_STREAM != 0);
        } else {
            if payload.len() > self.config.max_header_block {
                return self.connection_error(ENHANCE_YOUR_CALM);
            }
            let mut bytes = BytesMut::with_capacity(payload.len() * 2);
            bytes.put_slice(&payload);
            self.block = Some(Block { stream, bytes, end_stream: flags & END_STREAM != 0 });
        }
    }

    fn on_continuation(&mut self, stream: u32, flags: u8, payload: &[u8]) {
        let Some(block) = self.block.as_mut().filter(|b| b.stream == stream) else {
            return self.connection_error(PROTOCOL_ERROR);
        };
        if block.bytes.len() + payload.len() > self.config.max_header_block {
            return self.connection_error(ENHANCE_YOUR_CALM);
        }
        block.bytes.put_slice(payload);
        if flags & END_HEADERS != 0 {
            let Some(block) = self.block.take() else { return };
            self.on_block(block.stream, &block.bytes.freeze(), block.end_stream);
        }
    }

    /// A whole header block for `stream`: decoded (always, to keep HPACK in
    /// step), then a head, trailers, or a malformed response.
    fn on_block(&mut self, stream: u32, block: &Bytes, end_stream: bool) {
        let mut fields = super::fields::HeadFields::default();
        let decoded = self.decoder.decode(block, |name, value| fields.field(name, value));
        let super::fields::HeadFields { status, headers, bad, .. } = fields;
        let mut malformed = bad.is_some();
        match decoded {
            Ok(()) => {}
            Err(e) if e.is_malformed() => malformed = true,
            Err(_) => return self.connection_error(COMPRESSION_ERROR),
        }
        let Some(s) = self.streams.get_mut(&stream) else {
            return; // a stream we closed: decoded only to keep the table in step
        };
        if s.remote_closed {
            return self.stream_error(stream, STREAM_CLOSED);
        }
        if s.head {
            // Trailers: no pseudo-fields, and they end the stream.
            if malformed || status.is_some() || !end_stream {
                return self.stream_error(stream, PROTOCOL_ERROR);
            }
            let block_len = block.len();
            self.events.push_back(Event::Trailers { stream, trailers: headers, block_len });
            return self.remote_end(stream);
        }
        let status = match status {
            Some(Ok(status)) if !malformed => status,
            _ => return self.stream_error(stream, PROTOCOL_ERROR),
        };
        if status.is_informational() {
            // 1xx: another head follows; one that ends the stream is malformed.
            if end_stream || status == StatusCode::SWITCHING_PROTOCOLS {
                return self.stream_error(stream, PROTOCOL_ERROR);
            }
            return;
        }
        s.head = true;
        s.bodiless =
            s.is_head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        s.expected = match headers.get(http::header::CONTENT_LENGTH).map(HeaderValue::to_str) {
            None => None,
            Some(Ok(v)) => match v.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => return self.stream_error(stream, PROTOCOL_ERROR),
            },
            Some(Err(_)) => return self.stream_error(stream, PROTOCOL_ERROR),
        };
        let mut response = http::Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = http::Version::HTTP_2;
        *response.headers_mut() = headers;
        self.events.push_back(Event::Head { stream, response, block_len: block.len() });
        if end_stream {
            self.remote_end(stream);
        }
    }

    fn on_reset(&mut self, stream: u32, payload: &[u8]) {
        if stream == 0 || self.is_idle(stream) {
            return self.connection_error(PROTOCOL_ERROR);
        }
        let Ok(code) = <[u8; 4]>::try_from(payload).map(u32::from_be_bytes) else {
            return self.connection_error(FRAME_SIZE_ERROR);
        };
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.remote_closed && code == code::NO_ERROR {
            // After a complete answer: the server wants no more of the
            // request body (RFC 9113 §8.1). Not a failure.
            self.streams.remove(&stream);
            self.sending.retain(|&id| id != stream);
            return;
        }
        self.fail(stream, StreamError::Reset { code, by: Peer::Server });
    }

    /// The stream is over with `error`: it fails, unless its response was
    /// already complete ([`Event::End`] is its last event; only the rest of
    /// the request body is dropped then).
    fn fail(&mut self, stream: u32, error: StreamError) {
        let Some(s) = self.streams.remove(&stream) else { return };
        self.sending.retain(|&id| id != stream);
        if !s.remote_closed {
            self.events.push_back(Event::Failed { stream, error });
        }
    }

    fn on_settings(&mut self, stream: u32, flags: u8, payload: &[u8]) {
        if stream != 0 {
            return self.connection_error(PROTOCOL_ERROR);
        }
        if flags & ACK != 0 {
            if !payload.is_empty() {
                self.connection_error(FRAME_SIZE_ERROR);
            }
            return;
        }
        if payload.len() % 6 != 0 {
            return self.connection_error(FRAME_SIZE_ERROR);
        }
        let mut max_concurrent_streams = None;
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                0x1 => self.encoder.set_max(value as usize),
                0x2 if value > 1 => return self.connection_error(PROTOCOL_ERROR),
                0x3 => max_concurrent_streams = Some(value),
                0x4 => {
                    if i64::from(value) > MAX_WINDOW {
                        return self.connection_error(FLOW_CONTROL_ERROR);
                    }
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return self.connection_error(FLOW_CONTROL_ERROR);
                        }
                    }
                }
                0x5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return self.connection_error(PROTOCOL_ERROR);
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {} // the header list size (advisory), unknown settings
            }
        }
        if max_concurrent_streams.is_some() {
            self.peer_max_streams = max_concurrent_streams;
        }
        self.settings_seen = true;
        if self.out.len() > MAX_PENDING_CONTROL {
            return self.connection_error(ENHANCE_YOUR_CALM);
        }
        frame_header(&mut self.out, 0, SETTINGS, ACK, 0);
        self.events.push_back(Event::Settings { max_concurrent_streams });
        self.flush_data();
    }

    fn on_ping(&mut self, stream: u32, flags: u8, payload: &[u8]) {
        if stream != 0 {
            return self.connection_error(PROTOCOL_ERROR);
        }
        if payload.len() != 8 {
            return self.connection_error(FRAME_SIZE_ERROR);
        }
        if flags & ACK != 0 {
            if self.ping_out && payload == self.ping_payload.to_be_bytes() {
                self.ping_out = false;
                self.events.push_back(Event::Pong);
            }
            return;
        }
        if self.out.len() > MAX_PENDING_CONTROL {
            return self.connection_error(ENHANCE_YOUR_CALM);
        }
        frame_header(&mut self.out, 8, PING, ACK, 0);
        self.out.put_slice(payload);
    }

    fn on_goaway(&mut self, stream: u32, payload: &[u8]) {
        if stream != 0 {
            return self.connection_error(PROTOCOL_ERROR);
        }
        if payload.len() < 8 {
            return self.connection_error(FRAME_SIZE_ERROR);
        }
        let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        let error_code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        // A later GOAWAY may only lower the last id (RFC 9113 §6.8).
        let last_stream_id = self.goaway.map_or(last, |g| g.last_stream_id.min(last));
        let g = GoAway { last_stream_id, error_code };
        self.goaway = Some(g);
        self.events.push_back(Event::GoAway(g));
        let refused: Vec<u32> =
            self.streams.range(last_stream_id.saturating_add(1)..).map(|(id, _)| *id).collect();
        for id in refused {
            self.fail(id, StreamError::GoAway { code: error_code, by: Peer::Server });
        }
    }

    fn on_window_update(&mut self, stream: u32, payload: &[u8]) {
        let Ok(raw) = <[u8; 4]>::try_from(payload).map(u32::from_be_bytes) else {
            return self.connection_error(FRAME_SIZE_ERROR);
        };
        let inc = i64::from(raw & 0x7fff_ffff);
        if stream == 0 {
            if inc == 0 {
                return self.connection_error(PROTOCOL_ERROR);
            }
            self.conn_send_window += inc;
            if self.conn_send_window > MAX_WINDOW {
                return self.connection_error(FLOW_CONTROL_ERROR);
            }
        } else {
            if self.is_idle(stream) {
                return self.connection_error(PROTOCOL_ERROR);
            }
            let Some(s) = self.streams.get_mut(&stream) else { return };
            if inc == 0 {
                return self.stream_error(stream, PROTOCOL_ERROR);
            }
            s.send_window += inc;
            if s.send_window > MAX_WINDOW {
                return self.stream_error(stream, FLOW_CONTROL_ERROR);
            }
        }
        self.flush_data();
    }

    /// The stream is broken: RST_STREAM with `code`, and it fails.
    fn stream_error(&mut self, stream: u32, code: u32) {
        if !self.streams.contains_key(&stream) {
            return;
        }
        frame_header(&mut self.out, 4, RST_STREAM, 0, stream);
        self.out.put_u32(code);
        self.fail(stream, StreamError::Reset { code, by: Peer::Us });
    }

    /// The connection is broken (or we end it): GOAWAY with `code`; every
    /// stream fails.
    fn connection_error(&mut self, code: u32) {
        if self.closed {
            return;
        }
        frame_header(&mut self.out, 8, GOAWAY, 0, 0);
        self.out.put_u32(0); // we accept no streams of the server's
        self.out.put_u32(code);
        let error = StreamError::GoAway { code, by: Peer::Us };
        let end = if code == code::NO_ERROR {
            ConnectionEnd::Released
        } else {
            ConnectionEnd::Failed(error.clone())
        };
        self.end(&error, end);
    }

    fn end(&mut self, error: &StreamError, end: ConnectionEnd) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.block = None;
        self.sending.clear();
        for (stream, s) in std::mem::take(&mut self.streams) {
            if !s.remote_closed {
                self.events.push_back(Event::Failed { stream, error: error.clone() });
            }
        }
        self.events.push_back(Event::Closed(end));
    }
}

/// The fields' sizes as the session counts a header list.
pub fn field_sizes(fields: &HeaderMap) -> impl Iterator<Item = (usize, usize)> + '_ {
    fields.iter().map(|(n, v)| (n.as_str().len(), v.len()))
}
