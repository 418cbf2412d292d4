//! [`Session`]: one HTTP/2 connection's rules, decided from the facts its
//! bridge reports.
//!
//! The bridge (an adapter's glue around an HTTP/2 implementation such as the
//! `h2` crate) only pumps frames and reports what happened: the bytes the server
//! sent ([`Session::read`]), how a stream or the connection ended
//! ([`StreamError`], [`ConnectionEnd`]), a response head's size, and the
//! pool's word to end the connection now ([`PoolAction::Abort`]). The session
//! answers with the verdicts the pool and the call need:
//!
//! | fact | verdict |
//! | --- | --- |
//! | server's SETTINGS, GOAWAY (last stream id, code) | a [`Report`] for [`Pool::settings`] and [`Pool::goaway`] |
//! | a stream failed, with who reset it and how far it got | the [`ExchangeFailure`] for [`Pool::exchange_failed`] ([`Session::stream_failed`]) |
//! | a response body failed mid-way | whether the connection may carry more ([`Session::body_failed`]) |
//! | a response head or trailers of a given size | fail or pass ([`Session::response_head`], [`Session::trailers_fit`]) |
//! | 421 on a stream the pool issued as [`Source::Coalesced`] | retry on a connection of its own ([`Session::misdirected`]) |
//! | the connection's task ended | the [`CloseReason`] for [`Pool::connection_closed`] ([`Session::ended`]) |
//!
//! It keeps no timer: the one deadline an HTTP/2 connection has of its own —
//! usable (SETTINGS with a stream limit above zero) within the handshake
//! timeout — is the pool's, which retires the connection as
//! [`CloseReason::NeverUsable`] and, when a stream is still waiting on it, asks
//! for [`PoolAction::Abort`].
//!
//! ```
//! # use switchyard_core::http2::{Peer, Report, Session, StreamError};
//! # use switchyard_core::pool::{ExchangeFailureKind, Progress, RequestFacts};
//!
//! let mut session = Session::new(64 * 1024);
//! let mut reports = Vec::new();
//! // GOAWAY (type 7): last stream id 3, NO_ERROR.
//! session.read(&[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0], &mut reports);
//! assert!(matches!(reports[..], [Report::GoAway(g)] if g.last_stream_id == 3));
//! let facts = RequestFacts { idempotent: false, body_replayable: true };
//! let goaway = StreamError::GoAway { code: 0, by: Peer::Server };
//! // Stream 5 is above the last id: the server never processed it, so even a
//! // POST may go again.
//! let f = session.stream_failed(Some(5), &goaway, Progress::RequestWritten, facts);
//! assert_eq!(f.kind, ExchangeFailureKind::GoAwayUnprocessed);
//! // Stream 3 is not: it may have been processed.
//! let f = session.stream_failed(Some(3), &goaway, Progress::RequestWritten, facts);
//! assert!(matches!(f.kind, ExchangeFailureKind::Io { .. }));
//! ```
//!
//! [`Pool::settings`]: crate::Pool::settings
//! [`Pool::goaway`]: crate::Pool::goaway
//! [`Pool::exchange_failed`]: crate::Pool::exchange_failed
//! [`Pool::connection_closed`]: crate::Pool::connection_closed
//! [`PoolAction::Abort`]: crate::PoolAction::Abort

use std::collections::BTreeSet;
use std::fmt;
use std::io;

use super::frame::{FrameNote, FrameScanner};
use crate::connection::{CloseReason, Reuse, Source};
use crate::retry::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};

/// HTTP/2 error codes the rules name (RFC 9113 §7).
pub mod code {
    /// Graceful: not an error.
    pub const NO_ERROR: u32 = 0x0;
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// The stream is no longer needed.
    pub const CANCEL: u32 = 0x8;
}

/// Stream ids remembered as having an oversized header block, at most.
const OVERSIZED_KEPT: usize = 1024;

/// Who sent a RST_STREAM or GOAWAY.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    /// This client (its HTTP/2 implementation found the server at fault, or
    /// the stream was dropped).
    Us,
    /// The server.
    Server,
}

/// How a stream (or the whole connection) failed, as the HTTP/2
/// implementation reports it: facts, no judgement.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StreamError {
    /// RST_STREAM with this error code.
    Reset {
        /// The HTTP/2 error code.
        code: u32,
        /// Who sent it.
        by: Peer,
    },
    /// The connection is going away (GOAWAY) with this error code.
    GoAway {
        /// The HTTP/2 error code.
        code: u32,
        /// Who sent it.
        by: Peer,
    },
    /// The socket failed (reset, EOF, broken pipe).
    Io {
        /// What the I/O layer said.
        message: String,
    },
    /// Anything else the implementation reports (a frame it could not parse,
    /// the connection already gone).
    Other {
        /// What it said.
        message: String,
    },
    /// A wait for the head or a body chunk passed the read timeout: the
    /// peer may have stalled (report [`Pool::stream_stalled`](crate::Pool::stream_stalled)
    /// too; the pool's PING decides about the connection).
    ReadTimeout,
    /// A wait for the server's windows to take more of the upload passed the
    /// write timeout: the peer may have stalled, as for a read timeout.
    WriteTimeout,
    /// The call's own deadline or its body timeout passed: says nothing
    /// about the connection.
    Deadline,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by = |p: &Peer| match p {
            Peer::Us => "by us",
            Peer::Server => "by the server",
        };
        match self {
            StreamError::Reset { code, by: p } => write!(f, "stream reset {} ({})", by(p), code_name(*code)),
            StreamError::GoAway { code, by: p } => write!(f, "GOAWAY {} ({})", by(p), code_name(*code)),
            StreamError::Io { message } | StreamError::Other { message } => f.write_str(message),
            StreamError::ReadTimeout => f.write_str("read timed out"),
            StreamError::WriteTimeout => {
                f.write_str("the server's flow-control window stayed shut past the write timeout")
            }
            StreamError::Deadline => f.write_str("the call's deadline passed"),
        }
    }
}

/// An HTTP/2 error code's name (RFC 9113 §7), or its number.
#[must_use]
pub fn code_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("{code:#x}"), |n| (*n).into())
}

/// The server's GOAWAY.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GoAway {
    /// Streams above this id were not processed (RFC 9113 §6.8).
    pub last_stream_id: u32,
    /// Why (0: NO_ERROR, a graceful shutdown).
    pub error_code: u32,
}

impl GoAway {
    /// The graceful shutdown notice RFC 9113 §6.8 recommends first: NO_ERROR
    /// and the highest stream id (every stream opened so far may finish).
    #[must_use]
    pub const fn graceful() -> GoAway {
        GoAway { last_stream_id: (1 << 31) - 1, error_code: code::NO_ERROR }
    }
}

/// What the pool must hear, read off the server's frames.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Report {
    /// Report with [`Pool::settings`](crate::Pool::settings).
    Settings {
        /// SETTINGS_MAX_CONCURRENT_STREAMS, if the frame carried it.
        max_concurrent_streams: Option<u32>,
    },
    /// Report with [`Pool::goaway`](crate::Pool::goaway).
    GoAway(GoAway),
}

/// How the connection's task ended.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ConnectionEnd {
    /// Its last handle was dropped: the pool closed it (the pool knows why).
    Released,
    /// The server closed it cleanly.
    Closed,
    /// It failed (or the server's GOAWAY ended it).
    Failed(StreamError),
}

/// One HTTP/2 connection's state as the rules need it. See the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct Session {
    scanner: FrameScanner,
    head_limit: usize,
    settings: bool,
    /// The server's last SETTINGS set MAX_CONCURRENT_STREAMS to 0.
    zero_streams: bool,
    goaway: Option<GoAway>,
    /// Streams whose header block (head or trailers) passed the limit on the
    /// wire; forgotten once asked, the oldest first past [`OVERSIZED_KEPT`].
    oversized: BTreeSet<u32>,
    /// Why the pool ended the connection early ([`PoolAction::Abort`](crate::PoolAction::Abort)).
    ending: Option<CloseReason>,
    notes: Vec<FrameNote>,
}

impl Session {
    /// A session whose response heads and trailers are bounded by `head_limit`
    /// bytes, as HTTP/1.1 heads are (counted on the wire and decoded).
    #[must_use]
    pub fn new(head_limit: usize) -> Session {
        Session {
            scanner: FrameScanner::with_header_block_limit(head_limit),
            head_limit,
            settings: false,
            zero_streams: false,
            goaway: None,
            oversized: BTreeSet::new(),
            ending: None,
            notes: Vec::new(),
        }
    }

    /// The bytes the server sent, as read (any split, before the HTTP/2
    /// implementation sees them). Appends what the pool must hear now.
    pub fn read(&mut self, bytes: &[u8], out: &mut Vec<Report>) {
        self.scanner.feed(bytes, &mut self.notes);
        let notes = std::mem::take(&mut self.notes);
        for note in &notes {
            match *note {
                FrameNote::Settings { max_concurrent_streams } => {
                    out.push(self.heard(Report::Settings { max_concurrent_streams }));
                }
                FrameNote::GoAway { last_stream_id, error_code } => {
                    out.push(self.heard(Report::GoAway(GoAway { last_stream_id, error_code })));
                }
                FrameNote::HeaderBlockTooLarge { stream_id } => self.mark_oversized(stream_id),
            }
        }
        self.notes = notes;
        self.notes.clear();
    }

    /// A fact an HTTP/2 implementation read itself (our
    /// [`Driver`](super::Driver) does; a bridge uses [`read`](Self::read)):
    /// the server's SETTINGS or GOAWAY. Returns what the pool must hear (a
    /// later GOAWAY never raises the last stream id).
    pub fn heard(&mut self, report: Report) -> Report {
        match report {
            Report::Settings { max_concurrent_streams } => {
                self.settings = true;
                if let Some(n) = max_concurrent_streams {
                    self.zero_streams = n == 0;
                }
                report
            }
            Report::GoAway(GoAway { last_stream_id, error_code }) => {
                // A later GOAWAY may only lower the last id (RFC 9113 §6.8).
                let last = self.goaway.map_or(last_stream_id, |g| g.last_stream_id.min(last_stream_id));
                let g = GoAway { last_stream_id: last, error_code };
                self.goaway = Some(g);
                Report::GoAway(g)
            }
        }
    }

    /// A header block of `len` bytes on the wire arrived on `stream` (the
    /// driver's count): past the head limit, that head or those trailers fail
    /// ([`response_head`](Self::response_head), [`trailers_fit`](Self::trailers_fit)).
    pub fn block_read(&mut self, stream: u32, len: usize) {
        if len > self.head_limit {
            self.mark_oversized(stream);
        }
    }

    fn mark_oversized(&mut self, stream: u32) {
        self.oversized.insert(stream);
        while self.oversized.len() > OVERSIZED_KEPT {
            self.oversized.pop_first();
        }
    }

    /// DATA payload bytes read so far (what an adaptive window measures).
    #[must_use]
    pub fn data_bytes(&self) -> u64 {
        self.scanner.data_bytes()
    }

    /// Whether the server's first SETTINGS frame has been read.
    #[must_use]
    pub fn settings_received(&self) -> bool {
        self.settings
    }

    /// The server's GOAWAY, once read.
    #[must_use]
    pub fn goaway(&self) -> Option<GoAway> {
        self.goaway
    }

    /// The pool ends the connection now ([`PoolAction::Abort`](crate::PoolAction::Abort)):
    /// its streams' failures are judged in that light.
    pub fn end(&mut self, reason: CloseReason) {
        self.ending.get_or_insert(reason);
    }

    /// Why the pool ended the connection early, if it did.
    #[must_use]
    pub fn ending(&self) -> Option<CloseReason> {
        self.ending
    }

    /// A stream failed. `stream` is its id once it was opened (`None`: the
    /// request never got one); `progress` how far it got. The failure says what
    /// the retry rules need: above GOAWAY's last stream id (or never opened)
    /// the request was not processed, whatever the code; REFUSED_STREAM from
    /// the server was not processed either; a reset by the server is a
    /// stream reset, one by us a protocol failure of the server's response.
    #[must_use]
    pub fn stream_failed(
        &self,
        stream: Option<u32>,
        error: &StreamError,
        progress: Progress,
        request: RequestFacts,
    ) -> ExchangeFailure {
        use ExchangeFailureKind as K;
        let kind = if self.ending == Some(CloseReason::Shutdown) {
            // The pool ended the connection at the end of a shutdown's grace
            // (whatever the stream then saw: our own reset, the socket closed).
            K::Shutdown
        } else if self.ending == Some(CloseReason::NeverUsable) && self.zero_streams && stream.is_none() {
            // Leased before the server's SETTINGS said zero, never sent: the
            // server refuses every stream, so another connection in this
            // never-usable period would fare no better (the pool's rule: one
            // connection per period). Not retried; nothing was sent.
            K::Protocol {
                message: "the server allowed no streams (its SETTINGS said MAX_CONCURRENT_STREAMS 0) \
                          within the handshake timeout"
                    .into(),
            }
        } else if self.ending == Some(CloseReason::NeverUsable) && self.zero_streams {
            K::Io {
                kind: io::ErrorKind::ConnectionAborted,
                message: "the server allowed no streams (its SETTINGS said MAX_CONCURRENT_STREAMS 0) \
                          within the handshake timeout"
                    .into(),
            }
        } else if self.ending == Some(CloseReason::NeverUsable) {
            K::Io {
                kind: io::ErrorKind::ConnectionAborted,
                message: "the server never made the HTTP/2 connection usable (no SETTINGS, or no stream \
                          allowed, within the handshake timeout)"
                    .into(),
            }
        } else {
            match error {
                StreamError::Reset { code: code::REFUSED_STREAM, by: Peer::Server } => K::RefusedStream,
                StreamError::Reset { code, by: Peer::Server } => K::StreamReset { code: *code },
                StreamError::Reset { code, by: Peer::Us } => K::Protocol {
                    message: format!("the response broke HTTP/2 (we reset the stream: {})", code_name(*code)),
                },
                StreamError::GoAway { code, by: Peer::Server } => {
                    let processed = match (stream, self.goaway) {
                        (Some(id), Some(g)) => id <= g.last_stream_id,
                        (None, _) => false,
                        // Not read off the wire (an embedder without the
                        // scanner): the implementation fails only the
                        // streams the GOAWAY left unprocessed.
                        (Some(_), None) => *code != code::NO_ERROR,
                    };
                    if processed {
                        K::Io {
                            kind: io::ErrorKind::ConnectionReset,
                            message: format!(
                                "the server went away (GOAWAY, {}) before the stream finished",
                                code_name(*code)
                            ),
                        }
                    } else {
                        K::GoAwayUnprocessed
                    }
                }
                StreamError::GoAway { code, by: Peer::Us } => K::Protocol {
                    message: format!("the server broke HTTP/2 (we sent GOAWAY: {})", code_name(*code)),
                },
                StreamError::Io { message } => {
                    K::Io { kind: io::ErrorKind::ConnectionReset, message: message.clone() }
                }
                StreamError::Other { message } => K::Protocol { message: message.clone() },
                StreamError::ReadTimeout | StreamError::WriteTimeout | StreamError::Deadline => K::Timeout,
            }
        };
        ExchangeFailure { kind, progress, request }
    }

    /// A response body (or its trailers) failed mid-way: whether the
    /// connection may carry more exchanges. A reset by the server (other than
    /// CANCEL) leaves the connection's state unknown, so it takes no new ones
    /// ([`CloseReason::StreamReset`]); a broken socket fails it; our own
    /// reset, a read timeout (the pool's PING decides) or a GOAWAY the pool
    /// already heard says nothing more.
    #[must_use]
    pub fn body_failed(&self, error: &StreamError) -> Reuse {
        match error {
            StreamError::Reset { code, by: Peer::Server } if *code != code::CANCEL => {
                Reuse::Retire(CloseReason::StreamReset)
            }
            StreamError::Io { .. } => Reuse::Retire(CloseReason::Failure),
            _ => Reuse::Reusable,
        }
    }

    /// A response head arrived on `stream` with these fields (each name's and
    /// value's length). Over the head limit — on the wire, or decoded as RFC
    /// 9113 §6.5.2 counts it (name + value + 32 per field, `:status`
    /// included) — it fails the response, typed; the connection stays usable.
    pub fn response_head(
        &mut self,
        stream: u32,
        fields: impl IntoIterator<Item = (usize, usize)>,
        request: RequestFacts,
    ) -> Result<(), ExchangeFailure> {
        // `:status` and its three digits count as a field too.
        if self.fits(stream, fields, 7 + 3 + 32) {
            return Ok(());
        }
        let message = format!("response head larger than {} bytes", self.head_limit);
        Err(ExchangeFailure {
            kind: ExchangeFailureKind::Protocol { message },
            progress: Progress::ResponseStarted,
            request,
        })
    }

    /// Trailers arrived on `stream`: whether they fit the head limit (the
    /// same bound as the head). When they do not, the body fails, typed; the
    /// connection stays usable.
    pub fn trailers_fit(&mut self, stream: u32, fields: impl IntoIterator<Item = (usize, usize)>) -> bool {
        self.fits(stream, fields, 0)
    }

    /// The head limit.
    #[must_use]
    pub fn head_limit(&self) -> usize {
        self.head_limit
    }

    fn fits(&mut self, stream: u32, fields: impl IntoIterator<Item = (usize, usize)>, extra: usize) -> bool {
        let on_wire = !self.oversized.is_empty() && self.oversized.remove(&stream);
        let size = fields.into_iter().map(|(n, v)| n + v + 32).sum::<usize>() + extra;
        !on_wire && size <= self.head_limit
    }

    /// A `421 Misdirected Request` (RFC 9110 §15.5.20) on a stream the pool
    /// handed out as `source`: on a coalesced connection, with a request that
    /// can be sent again, it is a failure the pool retries on a connection of
    /// its own (and stops coalescing onto this one). Anywhere else it is the
    /// caller's answer (`None`).
    #[must_use]
    pub fn misdirected(status: u16, source: Source, request: RequestFacts) -> Option<ExchangeFailure> {
        (status == 421 && source == Source::Coalesced && request.body_replayable).then_some(ExchangeFailure {
            kind: ExchangeFailureKind::Misdirected,
            progress: Progress::ResponseStarted,
            request,
        })
    }

    /// The connection's task ended: why, for [`Pool::connection_closed`](crate::Pool::connection_closed)
    /// (the pool ignores it when it closed the connection itself).
    #[must_use]
    pub fn ended(&self, end: &ConnectionEnd) -> CloseReason {
        if let Some(reason) = self.ending {
            return reason;
        }
        match end {
            ConnectionEnd::Released => CloseReason::Shutdown,
            ConnectionEnd::Closed => CloseReason::ServerClose,
            ConnectionEnd::Failed(StreamError::GoAway { by: Peer::Server, .. }) => CloseReason::GoAway,
            ConnectionEnd::Failed(_) if self.goaway.is_some() => CloseReason::GoAway,
            ConnectionEnd::Failed(_) => CloseReason::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FACTS: RequestFacts = RequestFacts { idempotent: true, body_replayable: true };

    fn goaway_frame(last: u32, code: u32) -> Vec<u8> {
        let mut f = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
        f.extend(last.to_be_bytes());
        f.extend(code.to_be_bytes());
        f
    }

    fn session_with_goaway(last: u32, code: u32) -> Session {
        let mut s = Session::new(1000);
        let mut out = Vec::new();
        s.read(&goaway_frame(last, code), &mut out);
        assert_eq!(out, [Report::GoAway(GoAway { last_stream_id: last, error_code: code })]);
        s
    }

    fn kind(s: &Session, stream: Option<u32>, e: &StreamError) -> ExchangeFailureKind {
        s.stream_failed(stream, e, Progress::RequestWritten, FACTS).kind
    }

    #[test]
    fn settings_are_reported_and_remembered() {
        let mut s = Session::new(1000);
        let mut out = Vec::new();
        assert!(!s.settings_received());
        s.read(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0], &mut out);
        assert_eq!(out, [Report::Settings { max_concurrent_streams: Some(0) }]);
        assert!(s.settings_received());
    }

    #[test]
    fn goaway_decides_by_the_last_stream_id_whatever_the_code() {
        for code in [code::NO_ERROR, 0x2, 0xb] {
            let s = session_with_goaway(5, code);
            let e = StreamError::GoAway { code, by: Peer::Server };
            assert_eq!(kind(&s, Some(7), &e), ExchangeFailureKind::GoAwayUnprocessed, "code {code}");
            assert_eq!(kind(&s, None, &e), ExchangeFailureKind::GoAwayUnprocessed, "never opened");
            for processed in [1, 5] {
                assert!(
                    matches!(kind(&s, Some(processed), &e), ExchangeFailureKind::Io { .. }),
                    "{processed}"
                );
            }
        }
        // A later GOAWAY never raises the last id.
        let mut s = session_with_goaway(5, 0);
        s.read(&goaway_frame(9, 0), &mut Vec::new());
        assert_eq!(s.goaway().map(|g| g.last_stream_id), Some(5));
    }

    #[test]
    fn a_connection_ended_by_shutdown_fails_its_streams_as_the_shutdowns() {
        let mut s = Session::new(1000);
        s.end(CloseReason::Shutdown);
        let failures = [
            StreamError::Io { message: "the pool ended the HTTP/2 connection".into() },
            StreamError::Reset { code: code::CANCEL, by: Peer::Us },
            StreamError::GoAway { code: 0, by: Peer::Us },
        ];
        for e in &failures {
            assert_eq!(kind(&s, Some(1), e), ExchangeFailureKind::Shutdown, "{e:?}");
            assert_eq!(kind(&s, None, e), ExchangeFailureKind::Shutdown, "{e:?}");
        }
    }

    #[test]
    fn goaway_not_read_off_the_wire_trusts_the_implementation() {
        let s = Session::new(1000);
        let graceful = StreamError::GoAway { code: 0, by: Peer::Server };
        assert_eq!(kind(&s, Some(3), &graceful), ExchangeFailureKind::GoAwayUnprocessed);
        let failed = StreamError::GoAway { code: 2, by: Peer::Server };
        assert!(matches!(kind(&s, Some(3), &failed), ExchangeFailureKind::Io { .. }));
    }

    #[test]
    fn resets_are_judged_by_code_and_by_who_sent_them() {
        let s = Session::new(1000);
        let refused = StreamError::Reset { code: code::REFUSED_STREAM, by: Peer::Server };
        assert_eq!(kind(&s, Some(1), &refused), ExchangeFailureKind::RefusedStream);
        let reset = StreamError::Reset { code: 0x2, by: Peer::Server };
        assert_eq!(kind(&s, Some(1), &reset), ExchangeFailureKind::StreamReset { code: 2 });
        let ours = StreamError::Reset { code: 0x1, by: Peer::Us };
        match kind(&s, Some(1), &ours) {
            ExchangeFailureKind::Protocol { message } => {
                assert!(message.contains("PROTOCOL_ERROR"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let sent_goaway = StreamError::GoAway { code: 0x1, by: Peer::Us };
        assert!(matches!(kind(&s, Some(1), &sent_goaway), ExchangeFailureKind::Protocol { .. }));
        let io = StreamError::Io { message: "broken pipe".into() };
        assert!(matches!(
            kind(&s, Some(1), &io),
            ExchangeFailureKind::Io { kind: io::ErrorKind::ConnectionReset, .. }
        ));
        assert_eq!(kind(&s, Some(1), &StreamError::ReadTimeout), ExchangeFailureKind::Timeout);
        let other = StreamError::Other { message: "frame with invalid size".into() };
        assert!(matches!(kind(&s, Some(1), &other), ExchangeFailureKind::Protocol { .. }));
        // Progress and facts are passed through.
        let f = s.stream_failed(None, &io, Progress::NothingWritten, FACTS);
        assert_eq!((f.progress, f.request), (Progress::NothingWritten, FACTS));
    }

    #[test]
    fn a_connection_the_pool_ended_as_never_usable_says_so() {
        let mut s = Session::new(1000);
        s.end(CloseReason::NeverUsable);
        s.end(CloseReason::Failure); // the first reason stays
        let e = StreamError::Other { message: "connection closed".into() };
        match kind(&s, Some(1), &e) {
            ExchangeFailureKind::Io { kind: io::ErrorKind::ConnectionAborted, message } => {
                assert!(message.contains("never made the HTTP/2 connection usable"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.ended(&ConnectionEnd::Released), CloseReason::NeverUsable);
        assert_eq!(s.ending(), Some(CloseReason::NeverUsable));
    }

    #[test]
    fn a_server_allowing_no_streams_is_named_when_the_pool_ends_its_connection() {
        let mut s = Session::new(1000);
        let mut out = Vec::new();
        // SETTINGS: MAX_CONCURRENT_STREAMS (3) = 0.
        s.read(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0], &mut out);
        s.end(CloseReason::NeverUsable);
        let e = StreamError::Other { message: "connection closed".into() };
        match kind(&s, Some(1), &e) {
            ExchangeFailureKind::Io { message, .. } => {
                assert!(message.contains("MAX_CONCURRENT_STREAMS 0"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // A request that never got its stream (it waited behind the zero)
        // is not sent again elsewhere in this period: a protocol failure.
        match kind(&s, None, &e) {
            ExchangeFailureKind::Protocol { message } => {
                assert!(message.contains("MAX_CONCURRENT_STREAMS 0"))
            }
            other => panic!("{other:?}"),
        }
        // A later SETTINGS raising the limit: the generic message again.
        s.read(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 5], &mut out);
        match kind(&s, Some(1), &e) {
            ExchangeFailureKind::Io { message, .. } => {
                assert!(!message.contains("MAX_CONCURRENT"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_body_failure_says_whether_the_connection_goes_on() {
        let s = Session::new(1000);
        let by_server = |code| StreamError::Reset { code, by: Peer::Server };
        assert_eq!(s.body_failed(&by_server(0x2)), Reuse::Retire(CloseReason::StreamReset));
        assert_eq!(s.body_failed(&by_server(code::CANCEL)), Reuse::Reusable);
        assert_eq!(s.body_failed(&StreamError::Reset { code: 0x2, by: Peer::Us }), Reuse::Reusable);
        assert_eq!(
            s.body_failed(&StreamError::Io { message: "eof".into() }),
            Reuse::Retire(CloseReason::Failure)
        );
        assert_eq!(s.body_failed(&StreamError::GoAway { code: 0, by: Peer::Server }), Reuse::Reusable);
        assert_eq!(s.body_failed(&StreamError::ReadTimeout), Reuse::Reusable);
    }

    #[test]
    fn heads_and_trailers_are_bounded_on_the_wire_and_decoded() {
        let mut s = Session::new(100);
        // Decoded: 10 + 10 + 32 + :status (42) = 94 fits; one byte more does not.
        assert!(s.response_head(1, [(10, 10)], FACTS).is_ok());
        let f = s.response_head(1, [(10, 17)], FACTS).unwrap_err();
        assert_eq!(f.progress, Progress::ResponseStarted);
        assert!(
            matches!(f.kind, ExchangeFailureKind::Protocol { ref message } if message.contains("100 bytes"))
        );
        assert!(s.trailers_fit(1, [(30, 38)]));
        assert!(!s.trailers_fit(1, [(30, 39)]));
        // On the wire: HEADERS on stream 3, 101 payload bytes; noted once.
        let mut frame = vec![0, 0, 101, 1, 4, 0, 0, 0, 3];
        frame.extend([0u8; 101]);
        s.read(&frame, &mut Vec::new());
        assert!(s.response_head(3, [], FACTS).is_err());
        assert!(s.response_head(3, [], FACTS).is_ok(), "forgotten once asked");
        frame[8] = 5;
        s.read(&frame, &mut Vec::new());
        assert!(!s.trailers_fit(5, []));
    }

    #[test]
    fn oversized_streams_are_bounded() {
        let mut s = Session::new(0);
        for id in 0..(OVERSIZED_KEPT as u32 + 10) {
            let mut frame = vec![0, 0, 1, 1, 4];
            frame.extend((2 * id + 1).to_be_bytes());
            frame.push(0);
            s.read(&frame, &mut Vec::new());
        }
        assert_eq!(s.oversized.len(), OVERSIZED_KEPT);
    }

    #[test]
    fn misdirected_is_a_retry_only_when_coalesced_and_replayable() {
        assert!(Session::misdirected(421, Source::Coalesced, FACTS).is_some());
        for source in [Source::Pooled, Source::Shared, Source::New] {
            assert!(Session::misdirected(421, source, FACTS).is_none(), "{source:?}");
        }
        let one_shot = RequestFacts { idempotent: true, body_replayable: false };
        assert!(Session::misdirected(421, Source::Coalesced, one_shot).is_none());
        assert!(Session::misdirected(200, Source::Coalesced, FACTS).is_none());
    }

    #[test]
    fn the_end_of_the_connection_has_a_reason() {
        let s = Session::new(1000);
        assert_eq!(s.ended(&ConnectionEnd::Released), CloseReason::Shutdown);
        assert_eq!(s.ended(&ConnectionEnd::Closed), CloseReason::ServerClose);
        let goaway = StreamError::GoAway { code: 0, by: Peer::Server };
        assert_eq!(s.ended(&ConnectionEnd::Failed(goaway)), CloseReason::GoAway);
        let io = ConnectionEnd::Failed(StreamError::Io { message: "reset".into() });
        assert_eq!(s.ended(&io), CloseReason::Failure);
        // After a GOAWAY was read, the connection's failure is its going away.
        assert_eq!(session_with_goaway(1, 0).ended(&io), CloseReason::GoAway);
    }

    #[test]
    fn error_codes_have_names() {
        assert_eq!(code_name(7), "REFUSED_STREAM");
        assert_eq!(code_name(0xd), "HTTP_1_1_REQUIRED");
        assert_eq!(code_name(0x42), "0x42");
        assert_eq!(StreamError::Reset { code: 8, by: Peer::Us }.to_string(), "stream reset by us (CANCEL)");
    }
}
