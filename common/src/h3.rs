//! One HTTP/3 connection (RFC 9114) over QUIC (RFC 9000), sans-IO: quinn-proto
//! runs QUIC (packets, loss recovery, congestion control, TLS 1.3 through
//! rustls) and the core's [`http3`](switchyard_core::http3) pieces run HTTP/3
//! on its streams (our control stream and SETTINGS, the server's control and
//! QPACK streams, each request stream's frames and message rules). Datagrams
//! go in and out and time enters as `now`: an adapter owns one UDP socket per
//! connection and pumps it, as it pumps an HTTP/2 connection's bytes.
//!
//! The pump, whatever the runtime:
//!
//! 1. send every datagram [`H3Conn::poll_transmit`] gives (to
//!    [`H3Conn::remote`]);
//! 2. hand every [`H3Event`] from [`H3Conn::poll_event`] to its call;
//! 3. wait for a datagram from the socket or [`H3Conn::poll_timeout`],
//!    whichever comes first, and give it to [`H3Conn::handle_datagram`] or
//!    [`H3Conn::handle_timeout`]; then from 1.
//!
//! Requests are opened with [`H3Conn::open`] once [`H3Event::Connected`]
//! came; each stream's events come back tagged with the id `open` returned.
//! A request's failure says whether it may be retried on another connection
//! ([`H3Failure::is_retryable`]): a stream the server's GOAWAY did not take,
//! or one it refused with H3_REQUEST_REJECTED, never reached the application.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, Event, ReadError,
    StreamEvent, StreamId, TransportConfig, VarInt, WriteError,
};
use switchyard_core::http3::control::{Control, ControlEvent};
use switchyard_core::http3::stream::{RequestStream, Scope, StreamError};
use switchyard_core::http3::{code, Settings};

pub use switchyard_core::http3::stream::StreamEvent as ResponseEvent;

/// An HTTP/3 connection's limits.
#[derive(Clone, Copy, Debug)]
pub struct H3Config {
    /// The largest response field section we accept (announced as
    /// SETTINGS_MAX_FIELD_SECTION_SIZE). Default 64 KiB.
    pub max_field_section_size: u64,
    /// QUIC's idle timeout: the connection closes after this long without a
    /// packet from the server. Default 30 s.
    pub idle_timeout: Duration,
    /// How much one response body may have in flight before we read it
    /// (QUIC's stream receive window). Default 1 MiB.
    pub stream_window: u32,
}

impl Default for H3Config {
    fn default() -> H3Config {
        H3Config {
            max_field_section_size: 64 * 1024,
            idle_timeout: Duration::from_secs(30),
            stream_window: 1024 * 1024,
        }
    }
}

/// Why a connection could not start.
#[derive(Debug)]
pub enum H3ConnectError {
    /// The TLS configuration's provider has no cipher suite QUIC's Initial
    /// packets can use (TLS_AES_128_GCM_SHA256).
    NoInitialCipherSuite,
    /// A limit of [`H3Config`] that QUIC cannot carry.
    Config(&'static str),
    /// quinn-proto refused to start (an unusable address or server name).
    Connect(quinn_proto::ConnectError),
}

impl std::fmt::Display for H3ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H3ConnectError::NoInitialCipherSuite => f.write_str(
                "the TLS provider has no cipher suite for QUIC's Initial packets (TLS_AES_128_GCM_SHA256)",
            ),
            H3ConnectError::Config(what) => write!(f, "HTTP/3 configuration: {what}"),
            H3ConnectError::Connect(e) => write!(f, "QUIC could not start: {e}"),
        }
    }
}

impl std::error::Error for H3ConnectError {}

/// Why a request was not opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H3OpenError {
    /// The handshake is not over yet ([`H3Event::Connected`] not yet given).
    NotConnected,
    /// The server's MAX_STREAMS is reached: wait for a stream to end.
    AtLimit,
    /// The server sent GOAWAY, or the connection is closed: use another.
    Closed,
}

impl std::fmt::Display for H3OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            H3OpenError::NotConnected => "the HTTP/3 connection's handshake is not over",
            H3OpenError::AtLimit => "the server's stream limit is reached",
            H3OpenError::Closed => "the HTTP/3 connection is going away or closed",
        })
    }
}

impl std::error::Error for H3OpenError {}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum H3Failure {
    /// The response broke HTTP/3's rules (a stream error: the connection
    /// goes on; or a connection error that closed it).
    Protocol(StreamError),
    /// The server reset the stream with this code.
    Reset(u64),
    /// The server's GOAWAY left this stream unprocessed.
    NotProcessed,
    /// The connection ended first (the reason as quinn-proto or the server gave it).
    ConnectionLost(String),
}

impl H3Failure {
    /// Whether the request never reached the application, so it may be sent
    /// again on another connection whatever its method: a stream past the
    /// server's GOAWAY, or one refused with H3_REQUEST_REJECTED (RFC 9114 §4.1.1).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            H3Failure::NotProcessed => true,
            H3Failure::Reset(code) => switchyard_core::http3::stream::reset_is_retryable(*code),
            H3Failure::Protocol(_) | H3Failure::ConnectionLost(_) => false,
        }
    }
}

impl H3Failure {
    /// The failure the pool's retry rules judge, for a request that failed
    /// with this after `progress`: a GOAWAY's unprocessed stream and
    /// H3_REQUEST_REJECTED are "not processed" (retried on another
    /// connection whatever the method), another reset is HTTP/2's stream
    /// reset, a malformed answer a protocol error, a lost connection an
    /// I/O failure.
    ///
    /// ```
    /// # use switchyard_common::h3::H3Failure;
    /// use switchyard_core::pool::{ExchangeFailureKind, Progress, RequestFacts};
    /// let facts = RequestFacts::new(&http::Method::POST, false, true);
    /// let f = H3Failure::NotProcessed.judged(Progress::RequestWritten, facts);
    /// assert_eq!(f.kind, ExchangeFailureKind::GoAwayUnprocessed);
    /// ```
    #[must_use]
    pub fn judged(
        &self,
        progress: switchyard_core::pool::Progress,
        facts: switchyard_core::pool::RequestFacts,
    ) -> switchyard_core::pool::ExchangeFailure {
        use switchyard_core::pool::ExchangeFailureKind as K;
        let kind = match self {
            H3Failure::NotProcessed => K::GoAwayUnprocessed,
            H3Failure::Reset(_) if self.is_retryable() => K::RefusedStream,
            H3Failure::Reset(code) => K::StreamReset { code: u32::try_from(*code).unwrap_or(u32::MAX) },
            H3Failure::Protocol(e) => K::Protocol { message: format!("HTTP/3: {e}") },
            H3Failure::ConnectionLost(why) => K::Io {
                kind: std::io::ErrorKind::ConnectionAborted,
                message: format!("the HTTP/3 connection was lost: {why}"),
            },
        };
        switchyard_core::pool::ExchangeFailure { kind, progress, request: facts }
    }
}

/// A GOAWAY whose first unprocessed request stream is `first`, as the pool
/// hears it ([`Pool::goaway`](switchyard_core::Pool::goaway) counts in
/// HTTP/2's stream ids: client streams 1, 3, 5, …, where HTTP/3's are 0, 4,
/// 8, …): the same number of requests taken, so its stream-budget lesson holds.
///
/// ```
/// # use switchyard_common::h3::goaway_for_pool;
/// // Streams 0, 4 and 8 were taken (the first unprocessed is 12): HTTP/2's
/// // 1, 3 and 5, so its last stream id is 5.
/// assert_eq!(goaway_for_pool(12).last_stream_id, 5);
/// assert_eq!(goaway_for_pool(0).last_stream_id, 0);
/// ```
#[must_use]
pub fn goaway_for_pool(first: u64) -> switchyard_core::http2::GoAway {
    let taken = first / 4;
    let last_stream_id = u32::try_from((taken * 2).saturating_sub(1)).unwrap_or(u32::MAX);
    switchyard_core::http2::GoAway { last_stream_id, error_code: 0 }
}

impl std::fmt::Display for H3Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H3Failure::Protocol(e) => write!(f, "HTTP/3 protocol error: {e}"),
            H3Failure::Reset(c) => write!(f, "the server reset the stream ({})", code::name(*c)),
            H3Failure::NotProcessed => f.write_str("the server's GOAWAY left the request unprocessed"),
            H3Failure::ConnectionLost(why) => write!(f, "the HTTP/3 connection was lost: {why}"),
        }
    }
}

impl std::error::Error for H3Failure {}

/// What the connection has for its owner.
#[derive(Clone, Debug)]
pub enum H3Event {
    /// The QUIC handshake is over (TLS verified, ALPN `h3`): requests may open.
    Connected,
    /// The server's SETTINGS.
    Settings(Settings),
    /// A response event for the request stream `stream`.
    Response {
        /// The id [`H3Conn::open`] returned.
        stream: u64,
        /// Head, body part, trailers or end.
        event: ResponseEvent,
    },
    /// The request on `stream` failed; no more events come for it.
    Failed {
        /// The id [`H3Conn::open`] returned.
        stream: u64,
        /// Why.
        failure: H3Failure,
    },
    /// The server is going away: no new requests; streams from `id` on were
    /// failed as [`H3Failure::NotProcessed`].
    GoAway(u64),
    /// The connection is over; every open request was failed before this.
    Closed(String),
    /// The server's MAX_STREAMS gave room for more requests: an open that
    /// failed with [`H3OpenError::AtLimit`] may be tried again.
    StreamsAvailable,
    /// A streamed request body's queue on `stream` emptied into QUIC's
    /// buffers: more may be sent ([`H3Conn::send`]).
    Writable {
        /// The id [`H3Conn::open`] returned.
        stream: u64,
    },
}

/// Whether a streamed request body may go on ([`H3Conn::send_room`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H3SendRoom {
    /// Room for more.
    Room,
    /// The queue is at its bound: wait for [`H3Event::Writable`].
    Full,
    /// The server wants no more (it stopped the stream, or answered and
    /// ended it), or the request is over: send nothing more.
    Stop,
}

struct Request {
    id: StreamId,
    stream: RequestStream,
    recv: BytesMut,
    /// Bytes queued for the stream, in order, and whether FIN follows them.
    out: VecDeque<Bytes>,
    finish: bool,
    /// The request side is over (finished, or the server stopped it).
    sent: bool,
    /// Body bytes handed to the owner and not yet [consumed](H3Conn::consumed):
    /// the stream is not read past its window while they wait, so QUIC's flow
    /// control holds the server back (a slow reader costs its own stream only).
    held: usize,
}

impl Request {
    fn queued(&self) -> usize {
        self.out.iter().map(Bytes::len).sum()
    }
}

/// How much a streamed request body may queue beyond what QUIC took.
const SEND_QUEUE: usize = 64 * 1024;

/// One HTTP/3 connection (see the module docs).
pub struct H3Conn {
    endpoint: Endpoint,
    handle: ConnectionHandle,
    conn: quinn_proto::Connection,
    remote: SocketAddr,
    config: H3Config,
    control: Control,
    /// Our control stream and what is still to be written on it.
    control_out: Option<(StreamId, VecDeque<Bytes>)>,
    uni: BTreeMap<u64, (StreamId, BytesMut)>,
    requests: BTreeMap<u64, Request>,
    events: VecDeque<H3Event>,
    /// Datagrams the endpoint answers with (stateless resets and the like).
    responses: VecDeque<Vec<u8>>,
    connected: bool,
    closed: bool,
    /// Why the connection was lost, as QUIC said it.
    lost: Option<quinn_proto::ConnectionError>,
}

impl std::fmt::Debug for H3Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Conn")
            .field("remote", &self.remote)
            .field("connected", &self.connected)
            .field("closed", &self.closed)
            .field("requests", &self.requests.len())
            .finish_non_exhaustive()
    }
}

/// Writes `out`'s chunks in order as far as flow control allows: `Ok(true)`
/// when all went, `Ok(false)` when blocked, `Err` when the stream is stopped
/// or closed.
fn write_queue(send: &mut quinn_proto::SendStream<'_>, out: &mut VecDeque<Bytes>) -> Result<bool, ()> {
    while let Some(chunk) = out.front_mut() {
        match send.write(chunk) {
            Ok(n) if n == chunk.len() => {
                out.pop_front();
            }
            Ok(n) => {
                bytes::Buf::advance(chunk, n);
                return Ok(false);
            }
            Err(WriteError::Blocked) => return Ok(false),
            Err(_) => return Err(()),
        }
    }
    Ok(true)
}

fn stream_key(id: StreamId) -> u64 {
    VarInt::from(id).into_inner()
}

impl H3Conn {
    /// Starts a connection to `remote` for `server_name` (verified against
    /// the certificate, sent as SNI), with `tls` as the TLS configuration (its
    /// roots and verifier; the ALPN list becomes `h3` alone).
    ///
    /// # Errors
    /// The TLS provider cannot do QUIC, a limit is out of range, or
    /// quinn-proto refuses the address or name.
    pub fn connect(
        now: Instant,
        remote: SocketAddr,
        server_name: &str,
        tls: &rustls::ClientConfig,
        config: H3Config,
    ) -> Result<H3Conn, H3ConnectError> {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = QuicClientConfig::try_from(tls).map_err(|_| H3ConnectError::NoInitialCipherSuite)?;
        let mut transport = TransportConfig::default();
        // The server opens no request streams of its own; its unidirectional
        // ones are its control stream, QPACK's two and a few it may invent.
        transport.max_concurrent_bidi_streams(VarInt::from_u32(0));
        transport.max_concurrent_uni_streams(VarInt::from_u32(16));
        transport.stream_receive_window(VarInt::from_u32(config.stream_window));
        transport.max_idle_timeout(Some(
            config
                .idle_timeout
                .try_into()
                .map_err(|_| H3ConnectError::Config("idle timeout past QUIC's range"))?,
        ));
        let mut client = ClientConfig::new(Arc::new(quic));
        client.transport_config(Arc::new(transport));
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
        let (handle, conn) =
            endpoint.connect(now, client, remote, server_name).map_err(H3ConnectError::Connect)?;
        let settings =
            Settings { max_field_section_size: Some(config.max_field_section_size), ..Settings::default() };
        Ok(H3Conn {
            endpoint,
            handle,
            conn,
            remote,
            config,
            control: Control::new(settings),
            control_out: None,
            uni: BTreeMap::new(),
            requests: BTreeMap::new(),
            events: VecDeque::new(),
            responses: VecDeque::new(),
            connected: false,
            closed: false,
            lost: None,
        })
    }

    /// The server's address: where every datagram goes.
    #[must_use]
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Whether the handshake is over and the connection not closed.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.connected && !self.closed
    }

    /// Whether the connection is over and has nothing more to send: its
    /// socket may be dropped.
    #[must_use]
    pub fn is_drained(&self) -> bool {
        self.conn.is_drained()
    }

    /// Request streams open (sent or still answering).
    #[must_use]
    pub fn open_requests(&self) -> usize {
        self.requests.len()
    }

    /// The server's SETTINGS, once they came.
    #[must_use]
    pub fn peer_settings(&self) -> Option<&Settings> {
        self.control.peer_settings()
    }

    /// Whether any datagram came back from the server yet (a QUIC attempt
    /// that heard nothing while TCP got through suggests UDP is dropped on
    /// the way; see the core's `h3_race`).
    #[must_use]
    pub fn heard_from_server(&self) -> bool {
        self.conn.stats().udp_rx.datagrams > 0
    }

    /// The server's certificate chain, leaf first, once the handshake
    /// verified it.
    #[must_use]
    pub fn peer_certificates(&self) -> Option<Vec<rustls::pki_types::CertificateDer<'static>>> {
        let identity = self.conn.crypto_session().peer_identity()?;
        identity.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok().map(|chain| *chain)
    }

    /// Why the connection was lost, when QUIC lost it (a handshake that
    /// failed, the idle timeout, the server's close).
    #[must_use]
    pub fn lost(&self) -> Option<&quinn_proto::ConnectionError> {
        self.lost.as_ref()
    }

    /// Why the connection closed, in the pool's words: the server's close
    /// (or its silence past the idle timeout) or a failure.
    #[must_use]
    pub fn close_reason(&self) -> switchyard_core::CloseReason {
        use quinn_proto::ConnectionError as E;
        use switchyard_core::CloseReason;
        match &self.lost {
            Some(E::ApplicationClosed(_) | E::ConnectionClosed(_)) => CloseReason::ServerClose,
            Some(E::TimedOut) => CloseReason::IdleTimeout,
            Some(E::LocallyClosed) => CloseReason::Shutdown,
            _ => CloseReason::Failure,
        }
    }

    /// QUIC's round-trip estimate and counters.
    #[must_use]
    pub fn stats(&self) -> quinn_proto::ConnectionStats {
        self.conn.stats()
    }

    /// A datagram `from` the server arrived (`from` is checked by QUIC's
    /// connection ids, not here).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: BytesMut) {
        let mut buf = Vec::new();
        match self.endpoint.handle(now, from, None, None, data, &mut buf) {
            Some(DatagramEvent::ConnectionEvent(handle, event)) if handle == self.handle => {
                self.conn.handle_event(event);
            }
            Some(DatagramEvent::Response(transmit)) => {
                buf.truncate(transmit.size);
                self.responses.push_back(buf);
            }
            _ => {}
        }
        self.drive(now);
    }

    /// The instant [`handle_timeout`](Self::handle_timeout) is due, if any.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    /// Time passed: retransmissions, the idle timeout, keep-alives.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.conn.handle_timeout(now);
        self.drive(now);
    }

    /// The next datagram to send to [`remote`](Self::remote), written into
    /// `buf` (cleared first): its length, or `None` when nothing is to be sent now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        buf.clear();
        if let Some(datagram) = self.responses.pop_front() {
            buf.extend_from_slice(&datagram);
            return Some(buf.len());
        }
        let transmit = self.conn.poll_transmit(now, 1, buf)?;
        buf.truncate(transmit.size);
        Some(transmit.size)
    }

    /// The next event for the connection's owner.
    pub fn poll_event(&mut self) -> Option<H3Event> {
        self.events.pop_front()
    }

    /// Opens a request stream: the head (and `body`, whole; empty for none)
    /// are queued and go out as QUIC's flow control allows, FIN after them.
    /// Returns the stream's id, which its events carry.
    ///
    /// # Errors
    /// [`H3OpenError`]: not connected yet, at the server's stream limit, or
    /// going away.
    pub fn open(
        &mut self,
        now: Instant,
        request: &http::request::Parts,
        body: Bytes,
    ) -> Result<u64, H3OpenError> {
        let length =
            (!body.is_empty() || request.method == http::Method::POST || request.method == http::Method::PUT)
                .then_some(body.len() as u64);
        let key = self.open_stream(request, length)?;
        if !body.is_empty() {
            self.queue_data(key, body);
        }
        self.finish_stream(now, key);
        Ok(key)
    }

    /// Opens a request stream whose body the caller streams with
    /// [`send`](Self::send) (`length`: its declared length, sent as
    /// `content-length`, if known). Returns the stream's id.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_streaming(
        &mut self,
        now: Instant,
        request: &http::request::Parts,
        length: Option<u64>,
    ) -> Result<u64, H3OpenError> {
        let key = self.open_stream(request, length)?;
        self.flush(key);
        self.drive(now);
        Ok(key)
    }

    /// Sends a part of a streamed request body (`end`: the body is over; an
    /// empty `chunk` with `end` only ends it). Ignored once the server
    /// stopped the stream or the request is gone; ask
    /// [`send_room`](Self::send_room) first.
    pub fn send(&mut self, now: Instant, stream: u64, chunk: Bytes, end: bool) {
        if self.requests.get(&stream).is_none_or(|r| r.sent) {
            return;
        }
        if !chunk.is_empty() {
            self.queue_data(stream, chunk);
        }
        if end {
            self.finish_stream(now, stream);
        } else {
            self.flush(stream);
            self.drive(now);
        }
    }

    /// Whether a streamed body on `stream` may go on now.
    #[must_use]
    pub fn send_room(&self, stream: u64) -> H3SendRoom {
        match self.requests.get(&stream) {
            Some(r) if !r.sent && !r.finish => {
                if r.queued() < SEND_QUEUE {
                    H3SendRoom::Room
                } else {
                    H3SendRoom::Full
                }
            }
            _ => H3SendRoom::Stop,
        }
    }

    /// The owner took `n` bytes of `stream`'s body from its events: the
    /// stream may be read that much further.
    pub fn consumed(&mut self, now: Instant, stream: u64, n: usize) {
        let Some(r) = self.requests.get_mut(&stream) else { return };
        r.held = r.held.saturating_sub(n);
        self.on_request_readable(now, stream);
        self.drive(now);
    }

    fn open_stream(
        &mut self,
        request: &http::request::Parts,
        length: Option<u64>,
    ) -> Result<u64, H3OpenError> {
        if self.closed || self.control.goaway().is_some() {
            return Err(H3OpenError::Closed);
        }
        if !self.connected {
            return Err(H3OpenError::NotConnected);
        }
        let id = self.conn.streams().open(Dir::Bi).ok_or(H3OpenError::AtLimit)?;
        let stream = RequestStream::new(request, self.field_limit());
        let mut head = BytesMut::new();
        stream.write_head(request, length, &mut head);
        let out = VecDeque::from([head.freeze()]);
        let key = stream_key(id);
        let request = Request { id, stream, recv: BytesMut::new(), out, finish: false, sent: false, held: 0 };
        self.requests.insert(key, request);
        Ok(key)
    }

    fn queue_data(&mut self, key: u64, body: Bytes) {
        let Some(r) = self.requests.get_mut(&key) else { return };
        let mut frame = BytesMut::new();
        RequestStream::write_data_header(body.len() as u64, &mut frame);
        r.out.push_back(frame.freeze());
        r.out.push_back(body);
    }

    fn finish_stream(&mut self, now: Instant, key: u64) {
        if let Some(r) = self.requests.get_mut(&key) {
            r.finish = true;
        }
        self.flush(key);
        self.drive(now);
    }

    /// Abandons the request on `stream` (its caller went away): the stream
    /// is reset and stopped with H3_REQUEST_CANCELLED; no more events for it.
    pub fn cancel(&mut self, now: Instant, stream: u64) {
        if let Some(r) = self.requests.remove(&stream) {
            let cancelled = VarInt::from_u32(code::REQUEST_CANCELLED as u32);
            let _ = self.conn.send_stream(r.id).reset(cancelled);
            let _ = self.conn.recv_stream(r.id).stop(cancelled);
        }
        self.drive(now);
    }

    /// Sends a QUIC PING (any packet the server sends back after it shows
    /// the connection alive).
    pub fn ping(&mut self, now: Instant) {
        self.conn.ping();
        self.drive(now);
    }

    /// Why the handshake failed, as a connect failure the core judges
    /// (`None` while it has not failed). A TLS alert (QUIC's crypto error
    /// codes, 0x100 + the alert) is a TLS failure: a certificate's when the
    /// alert is about a certificate, the name's when rustls said the name
    /// did not match.
    #[must_use]
    pub fn connect_error(&self) -> Option<switchyard_core::ConnectError> {
        use switchyard_core::{ConnectError, TlsFailure};
        let lost = self.lost.as_ref()?;
        let (code, reason, ours) = match lost {
            quinn_proto::ConnectionError::TransportError(e) => (u64::from(e.code), e.reason.clone(), true),
            quinn_proto::ConnectionError::ConnectionClosed(c) => {
                (u64::from(c.error_code), String::from_utf8_lossy(&c.reason).into_owned(), false)
            }
            other => {
                let kind = match other {
                    quinn_proto::ConnectionError::TimedOut => std::io::ErrorKind::TimedOut,
                    quinn_proto::ConnectionError::Reset => std::io::ErrorKind::ConnectionReset,
                    _ => std::io::ErrorKind::ConnectionAborted,
                };
                let message = format!("QUIC handshake with {}: {other}", self.remote);
                return Some(ConnectError::Io { kind, message });
            }
        };
        if (0x100..0x200).contains(&code) {
            let alert = code - 0x100;
            let kind = if reason.contains("not valid for name") || reason.contains("NotValidForName") {
                TlsFailure::Hostname
            } else if (42..=49).contains(&alert) {
                TlsFailure::Certificate
            } else {
                TlsFailure::Protocol
            };
            let who = if ours { "" } else { "the server refused the handshake: " };
            return Some(ConnectError::Tls {
                kind,
                message: format!("{who}{reason} (QUIC, TLS alert {alert})"),
            });
        }
        let message = format!("QUIC handshake with {} failed: {lost}", self.remote);
        Some(ConnectError::Io { kind: std::io::ErrorKind::ConnectionAborted, message })
    }

    /// Closes the connection gracefully (H3_NO_ERROR); open requests fail.
    pub fn close(&mut self, now: Instant) {
        self.close_with(now, code::NO_ERROR, "closed by the client");
    }

    fn field_limit(&self) -> usize {
        usize::try_from(self.config.max_field_section_size).unwrap_or(usize::MAX)
    }

    fn close_with(&mut self, now: Instant, error: u64, reason: &str) {
        if !self.closed {
            let code = VarInt::from_u64(error).unwrap_or(VarInt::from_u32(code::INTERNAL_ERROR as u32));
            self.conn.close(now, code, Bytes::copy_from_slice(reason.as_bytes()));
            self.fail_all(&format!("closed by us: {reason}"));
        }
    }

    fn fail_all(&mut self, why: &str) {
        for (stream, _) in std::mem::take(&mut self.requests) {
            self.events
                .push_back(H3Event::Failed { stream, failure: H3Failure::ConnectionLost(why.to_owned()) });
        }
        if !self.closed {
            self.closed = true;
            self.events.push_back(H3Event::Closed(why.to_owned()));
        }
    }

    /// Writes what a stream has queued, as far as flow control allows.
    fn flush(&mut self, key: u64) {
        let Some(r) = self.requests.get_mut(&key) else { return };
        let was_full = r.queued() >= SEND_QUEUE;
        let mut send = self.conn.send_stream(r.id);
        match write_queue(&mut send, &mut r.out) {
            Ok(true) if r.finish && !r.sent => {
                let _ = send.finish();
                r.sent = true;
            }
            Ok(_) => {
                if was_full && !r.finish && r.queued() < SEND_QUEUE {
                    self.events.push_back(H3Event::Writable { stream: key });
                }
            }
            Err(()) => {
                // Stopped by the server or closed: the request side is over.
                r.out.clear();
                r.sent = true;
            }
        }
    }

    fn flush_control(&mut self) {
        let Some((id, out)) = self.control_out.as_mut() else { return };
        // A control stream the server stopped is its protocol error, which
        // its CONNECTION_CLOSE will tell.
        let _ = write_queue(&mut self.conn.send_stream(*id), out);
    }

    /// A stream's readable bytes, at most `budget` of them: `(fin, reset code)`.
    fn read(&mut self, id: StreamId, into: &mut BytesMut, mut budget: usize) -> (bool, Option<u64>) {
        let mut recv = self.conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return (false, None) };
        let mut fin = false;
        let mut reset = None;
        loop {
            if budget == 0 {
                break;
            }
            match chunks.next(budget) {
                Ok(Some(chunk)) => {
                    budget -= chunk.bytes.len();
                    into.extend_from_slice(&chunk.bytes);
                }
                Ok(None) => {
                    fin = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    reset = Some(code.into_inner());
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        (fin, reset)
    }

    fn on_request_readable(&mut self, now: Instant, key: u64) {
        let Some(mut r) = self.requests.remove(&key) else {
            // A stream we no longer want: its bytes are dropped unread.
            return;
        };
        // Read no further than the stream's window past what the owner holds
        // (never less than a frame header's worth while it holds nothing).
        let window = self.config.stream_window as usize;
        let budget =
            window.saturating_sub(r.held + r.recv.len()).max(if r.held == 0 { 16 * 1024 } else { 0 });
        let (fin, reset) = self.read(r.id, &mut r.recv, budget);
        loop {
            match r.stream.recv(&mut r.recv, fin) {
                Ok(Some(event)) => {
                    let end = matches!(event, ResponseEvent::End);
                    if let ResponseEvent::Data(data) = &event {
                        r.held += data.len();
                    }
                    self.events.push_back(H3Event::Response { stream: key, event });
                    if end {
                        // The response is whole; a request body still going is
                        // no longer wanted by anyone.
                        if !r.sent {
                            let _ =
                                self.conn.send_stream(r.id).reset(VarInt::from_u32(code::NO_ERROR as u32));
                        }
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let code =
                        VarInt::from_u64(e.code).unwrap_or(VarInt::from_u32(code::INTERNAL_ERROR as u32));
                    self.events.push_back(H3Event::Failed { stream: key, failure: H3Failure::Protocol(e) });
                    if e.scope == Scope::Connection {
                        self.close_with(now, e.code, e.reason);
                    } else {
                        let _ = self.conn.recv_stream(r.id).stop(code);
                        let _ = self.conn.send_stream(r.id).reset(code);
                    }
                    return;
                }
            }
        }
        if let Some(code) = reset {
            self.events.push_back(H3Event::Failed { stream: key, failure: H3Failure::Reset(code) });
            return;
        }
        self.requests.insert(key, r);
    }

    fn on_uni_readable(&mut self, now: Instant, key: u64) {
        let Some((id, mut buf)) = self.uni.remove(&key) else { return };
        let (fin, reset) = self.read(id, &mut buf, usize::MAX);
        loop {
            // A reset stream is over as a finished one is (a critical one's
            // end closes the connection either way).
            match self.control.recv(key, &mut buf, fin || reset.is_some()) {
                Ok(Some(ControlEvent::Settings(s))) => self.events.push_back(H3Event::Settings(s)),
                Ok(Some(ControlEvent::GoAway(first))) => {
                    let unprocessed: Vec<u64> =
                        self.requests.keys().copied().filter(|k| self.control.unprocessed(*k)).collect();
                    for stream in unprocessed {
                        self.requests.remove(&stream);
                        self.events.push_back(H3Event::Failed { stream, failure: H3Failure::NotProcessed });
                    }
                    self.events.push_back(H3Event::GoAway(first));
                }
                Ok(None) => break,
                Err(e) => {
                    self.close_with(now, e.code, e.reason);
                    return;
                }
            }
        }
        if !(fin || reset.is_some()) {
            self.uni.insert(key, (id, buf));
        }
    }

    /// Runs quinn-proto's events through HTTP/3 until none is left.
    fn drive(&mut self, now: Instant) {
        loop {
            while let Some(event) = self.conn.poll_endpoint_events() {
                if let Some(back) = self.endpoint.handle_event(self.handle, event) {
                    self.conn.handle_event(back);
                }
            }
            let Some(event) = self.conn.poll() else { break };
            match event {
                Event::Connected => {
                    self.connected = true;
                    if let Some(id) = self.conn.streams().open(Dir::Uni) {
                        let mut first = BytesMut::new();
                        self.control.open(&mut first);
                        self.control_out = Some((id, VecDeque::from([first.freeze()])));
                        self.flush_control();
                    }
                    self.events.push_back(H3Event::Connected);
                }
                Event::ConnectionLost { reason } => {
                    self.fail_all(&reason.to_string());
                    self.lost = Some(reason);
                }
                Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => {
                    self.events.push_back(H3Event::StreamsAvailable);
                }
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    while let Some(id) = self.conn.streams().accept(Dir::Uni) {
                        let key = stream_key(id);
                        self.uni.insert(key, (id, BytesMut::new()));
                        self.on_uni_readable(now, key);
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    let key = stream_key(id);
                    if self.uni.contains_key(&key) {
                        self.on_uni_readable(now, key);
                    } else {
                        self.on_request_readable(now, key);
                    }
                }
                Event::Stream(StreamEvent::Writable { id }) => {
                    let key = stream_key(id);
                    if self.control_out.as_ref().is_some_and(|(c, _)| *c == id) {
                        self.flush_control();
                    } else {
                        self.flush(key);
                    }
                }
                Event::Stream(StreamEvent::Stopped { id, .. }) => {
                    // The server wants no more of the request body (it may
                    // already have answered): stop sending, keep reading.
                    if let Some(r) = self.requests.get_mut(&stream_key(id)) {
                        r.out.clear();
                        let streaming = !r.finish;
                        r.sent = true;
                        if streaming {
                            self.events.push_back(H3Event::Writable { stream: stream_key(id) });
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
