//! Retry decisions as data (BEHAVIOUR §6). Given how an exchange failed, how far it
//! got, and what the request allows, [`decide`] says: retry on the same
//! connection, retry on another (possibly fresh) connection, or fail — and whether
//! the request may have been sent.
//!
//! * Always safe, any method: the request was provably not processed — nothing of
//!   it was written, REFUSED_STREAM, or GOAWAY above the last stream id.
//! * A reused connection that failed after the request was written but before any
//!   response byte: retry on a fresh connection only for idempotent methods (or a
//!   request the caller marked retryable) whose body can be replayed. Otherwise
//!   fail, saying the request may have been sent.
//! * Never: timeouts, protocol errors, a response that had started, and a fresh
//!   connection that failed after writing (retrying that would loop).
//! * A stream reset (not REFUSED_STREAM) before any response byte on a reused
//!   connection is "written, no response": the stale-connection rule, once, on a
//!   fresh connection.
//! * REFUSED_STREAM: the same connection once; a second refusal retires it and
//!   the call moves on (its next race plans the refusing route last); refused on
//!   a second connection, the call fails with [`NoRetry::Refused`].
//! * "Not processed" is claimed only with proof: nothing written,
//!   REFUSED_STREAM, or a stream above a GOAWAY's last stream id.
//! * A timeout or failure on a connection that never completed an exchange
//!   marks its route failed in the route database (the pool does it).
//! * At most `max_retries` retries per call (3 by default). Free retries do not
//!   count toward it: a stream above a GOAWAY's last stream id, and a
//!   REFUSED_STREAM for a stream opened before the server's SETTINGS (the
//!   client's doing, not the server's); they have their own bound
//!   (`max_free_retries`, 10 by default).

use std::fmt;
use std::io;

/// How an exchange failed.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ExchangeFailureKind {
    /// The connection failed: reset, EOF, broken pipe.
    Io {
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// A read or write timed out.
    Timeout,
    /// The peer broke the protocol (malformed response, bad framing, …).
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// HTTP/2 RST_STREAM with REFUSED_STREAM: not processed.
    RefusedStream,
    /// HTTP/2 GOAWAY whose last-stream-id is below this stream: not processed.
    GoAwayUnprocessed,
    /// HTTP/2 RST_STREAM with another error code.
    StreamReset {
        /// The HTTP/2 error code.
        code: u32,
    },
    /// The server answered `421 Misdirected Request`.
    Misdirected,
    /// The client's shutdown ended the connection when its grace was over
    /// ([`Pool::abort_in_use`](crate::pool::Pool::abort_in_use)): never
    /// retried ([`NoRetry::Shutdown`]), and no mark against the route.
    Shutdown,
}

impl ExchangeFailureKind {
    /// An I/O failure from an `io::Error`.
    #[must_use]
    pub fn from_io(err: &io::Error) -> ExchangeFailureKind {
        if err.kind() == io::ErrorKind::TimedOut {
            return ExchangeFailureKind::Timeout;
        }
        ExchangeFailureKind::Io { kind: err.kind(), message: err.to_string() }
    }
}

impl fmt::Display for ExchangeFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExchangeFailureKind::Io { message, .. } => write!(f, "connection failed: {message}"),
            ExchangeFailureKind::Timeout => f.write_str("timed out"),
            ExchangeFailureKind::Protocol { message } => write!(f, "protocol error: {message}"),
            ExchangeFailureKind::RefusedStream => f.write_str("stream refused (REFUSED_STREAM)"),
            ExchangeFailureKind::GoAwayUnprocessed => f.write_str("not processed before GOAWAY"),
            ExchangeFailureKind::StreamReset { code } => {
                write!(f, "stream reset with error code {code:#x}")
            }
            ExchangeFailureKind::Misdirected => f.write_str("421 Misdirected Request"),
            ExchangeFailureKind::Shutdown => {
                f.write_str("ended by the client's shutdown (its grace period was over)")
            }
        }
    }
}

/// How far the exchange got before it failed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Progress {
    /// No byte of the request was written.
    NothingWritten,
    /// Some or all of the request was written; no response byte was read.
    RequestWritten,
    /// Response bytes had been read.
    ResponseStarted,
}

/// What the request allows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RequestFacts {
    /// The method is idempotent (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) or the
    /// caller marked the request retryable.
    pub idempotent: bool,
    /// The body can be sent again (none, or buffered).
    pub body_replayable: bool,
}

impl RequestFacts {
    /// Facts for `method`; `marked_retryable` lets a caller vouch for a request
    /// (e.g. a POST with an idempotency key).
    ///
    /// ```
    /// # use switchyard_core::pool::RequestFacts;
    /// assert!(RequestFacts::new(&http::Method::PUT, false, true).idempotent);
    /// assert!(!RequestFacts::new(&http::Method::POST, false, true).idempotent);
    /// assert!(RequestFacts::new(&http::Method::POST, true, true).idempotent);
    /// ```
    #[must_use]
    pub fn new(method: &http::Method, marked_retryable: bool, body_replayable: bool) -> RequestFacts {
        use http::Method as M;
        let idempotent =
            marked_retryable || [M::GET, M::HEAD, M::PUT, M::DELETE, M::OPTIONS, M::TRACE].contains(method);
        RequestFacts { idempotent, body_replayable }
    }
}

/// One failed exchange, as the adapter saw it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ExchangeFailure {
    /// What failed.
    pub kind: ExchangeFailureKind,
    /// How far the exchange got.
    pub progress: Progress,
    /// What the request allows.
    pub request: RequestFacts,
}

impl ExchangeFailure {
    /// The call's own deadline passed mid-exchange (the embedder's timer, not
    /// the connection's): a timeout, and how far the exchange got is taken
    /// as "the request was written" — the claim that never wrongly allows a
    /// replay.
    ///
    /// ```
    /// # use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
    /// let f = ExchangeFailure::call_deadline(RequestFacts { idempotent: false, body_replayable: true });
    /// assert_eq!((f.kind, f.progress), (ExchangeFailureKind::Timeout, Progress::RequestWritten));
    /// ```
    #[must_use]
    pub fn call_deadline(request: RequestFacts) -> ExchangeFailure {
        ExchangeFailure { kind: ExchangeFailureKind::Timeout, progress: Progress::RequestWritten, request }
    }

    /// A pooled connection found dead before anything was written (`why`):
    /// nothing was sent, so the call may go elsewhere.
    #[must_use]
    pub fn stale(why: &str, request: RequestFacts) -> ExchangeFailure {
        let e = io::Error::new(io::ErrorKind::ConnectionAborted, why.to_owned());
        ExchangeFailure {
            kind: ExchangeFailureKind::from_io(&e),
            progress: Progress::NothingWritten,
            request,
        }
    }
}

/// Why a retry happens.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RetryReason {
    /// Nothing was written.
    NotSent,
    /// REFUSED_STREAM.
    RefusedStream,
    /// GOAWAY above the last stream id.
    GoAwayUnprocessed,
    /// A reused connection failed before any response byte; the request is idempotent.
    StaleConnection,
    /// `421 Misdirected Request`: the connection must not be coalesced.
    Misdirected,
    /// A stream reset (not REFUSED_STREAM) before any response byte, on a reused
    /// connection: written, no response; an idempotent request goes once more,
    /// on a fresh connection.
    StreamReset,
    /// REFUSED_STREAM for a stream opened beyond the limit the server had
    /// advertised (before its SETTINGS, which then allowed fewer): the client's
    /// doing, so neither the connection nor the call's retry count is charged.
    StreamLimit,
}

impl RetryReason {
    /// Whether a retry for this reason is free: it does not count toward the
    /// call's retry cap (GOAWAY, a refusal beyond the advertised limit), only
    /// toward the free-retry bound.
    #[must_use]
    pub fn is_free(self) -> bool {
        matches!(self, RetryReason::GoAwayUnprocessed | RetryReason::StreamLimit)
    }
}

/// Why a failure was not retried.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NoRetry {
    /// Timeouts are never retried.
    Timeout,
    /// Protocol errors are never retried.
    Protocol,
    /// The response had started.
    ResponseStarted,
    /// The connection was fresh; retrying would loop.
    FreshConnection,
    /// The method is not idempotent and the request was not marked retryable.
    NotIdempotent,
    /// The body cannot be replayed.
    BodyNotReplayable,
    /// The stream was reset with an error.
    StreamReset,
    /// The call used up its retries.
    RetryLimit,
    /// The call used up its free retries (GOAWAY, refusals beyond the limit).
    FreeRetryLimit,
    /// REFUSED_STREAM on a second connection: the server will not take it.
    Refused,
    /// The call's deadline has passed: a retry could not finish in time.
    DeadlinePassed,
    /// The pool is shutting down: no connection is opened or shared for a
    /// retry.
    Shutdown,
    /// The retry budget of the call's Address is spent: its recent retries
    /// reached their share of its recent calls
    /// ([`RetryBudget`](crate::pool::RetryBudget)).
    RetryBudget,
}

impl fmt::Display for NoRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoRetry::Timeout => "timeouts are not retried",
            NoRetry::Protocol => "protocol errors are not retried",
            NoRetry::ResponseStarted => "the response had started",
            NoRetry::FreshConnection => "the connection was new, so a retry could loop",
            NoRetry::NotIdempotent => "the method is not idempotent and the request was not marked retryable",
            NoRetry::BodyNotReplayable => "the body cannot be replayed",
            NoRetry::StreamReset => "the stream was reset",
            NoRetry::RetryLimit => "the retry limit was reached",
            NoRetry::Refused => "refused on two connections",
            NoRetry::FreeRetryLimit => "the bound on retries after GOAWAY or early refusals was reached",
            NoRetry::DeadlinePassed => "the call's deadline had passed",
            NoRetry::Shutdown => "the client is shutting down",
            NoRetry::RetryBudget => {
                "retry budget exhausted for this host (its recent retries reached their share of its calls)"
            }
        })
    }
}

/// The verdict on a failed exchange.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RetryDecision {
    /// Send it again on the same connection (a first REFUSED_STREAM).
    SameConnection(RetryReason),
    /// Send it again on another connection; `fresh` forbids pooled ones.
    NewConnection {
        /// Why.
        reason: RetryReason,
        /// Only a newly connected connection will do.
        fresh: bool,
    },
    /// Give up.
    Fail {
        /// Why not retried.
        why: NoRetry,
        /// Whether the server may have received and processed the request.
        may_have_been_sent: bool,
    },
}

/// Whether the server may have processed the request, for a failure that is
/// not retried: provably unprocessed failures (REFUSED_STREAM, a stream above
/// GOAWAY's last id, 421, an I/O failure before anything was written) say no.
#[must_use]
pub fn may_have_been_sent(failure: &ExchangeFailure) -> bool {
    use ExchangeFailureKind as K;
    let written = failure.progress != Progress::NothingWritten;
    let unprocessed = matches!(failure.kind, K::RefusedStream | K::GoAwayUnprocessed | K::Misdirected)
        || (!written && matches!(failure.kind, K::Io { .. } | K::Shutdown));
    !unprocessed && written
}

/// What [`decide`] needs to know besides the failure: the connection's
/// history and the call's retry budget.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RetryContext {
    /// The connection had completed an exchange before this one.
    pub reused: bool,
    /// REFUSED_STREAMs this connection gave earlier (held against it).
    pub refusals_before: u32,
    /// Another connection already refused this call (REFUSED_STREAM).
    pub refused_elsewhere: bool,
    /// The stream was opened beyond the limit the server had advertised: before
    /// its SETTINGS arrived, and those SETTINGS then allowed fewer streams than
    /// the connection carried. A refusal of it is the client's doing.
    pub beyond_limit: bool,
    /// Retries this call made that counted, and their cap.
    pub retries: u32,
    /// The cap on counted retries ([`PoolConfig::max_retries`](crate::pool::PoolConfig::max_retries)).
    pub max_retries: u32,
    /// Free retries this call made (see [`RetryReason::is_free`]).
    pub free_retries: u32,
    /// Their cap ([`PoolConfig::max_free_retries`](crate::pool::PoolConfig::max_free_retries)).
    pub max_free_retries: u32,
}

impl RetryContext {
    /// A first attempt with the default caps (3 counted, 10 free).
    #[must_use]
    pub fn first(reused: bool) -> RetryContext {
        RetryContext {
            reused,
            refusals_before: 0,
            refused_elsewhere: false,
            beyond_limit: false,
            retries: 0,
            max_retries: 3,
            free_retries: 0,
            max_free_retries: 10,
        }
    }
}

/// Decides what to do about `failure` on a connection, given `ctx`.
///
/// ```
/// # use switchyard_core::pool::*;
/// let get = RequestFacts::new(&http::Method::GET, false, true);
/// let post = RequestFacts::new(&http::Method::POST, false, true);
/// let reset = ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: "reset".into() };
/// let stale = |request| ExchangeFailure { kind: reset.clone(), progress: Progress::RequestWritten, request };
/// let reused = RetryContext::first(true);
/// assert_eq!(decide(&stale(get), &reused),
///            RetryDecision::NewConnection { reason: RetryReason::StaleConnection, fresh: true });
/// assert_eq!(decide(&stale(post), &reused),
///            RetryDecision::Fail { why: NoRetry::NotIdempotent, may_have_been_sent: true });
///
/// // GOAWAY above the last stream id: retried even after the counted retries are spent.
/// let goaway = ExchangeFailure { kind: ExchangeFailureKind::GoAwayUnprocessed, progress: Progress::RequestWritten, request: post };
/// let spent = RetryContext { retries: 3, ..reused };
/// assert_eq!(decide(&goaway, &spent),
///            RetryDecision::NewConnection { reason: RetryReason::GoAwayUnprocessed, fresh: false });
/// ```
#[must_use]
pub fn decide(failure: &ExchangeFailure, ctx: &RetryContext) -> RetryDecision {
    use ExchangeFailureKind as K;
    let written = failure.progress != Progress::NothingWritten;
    let fail = |why, may_have_been_sent| RetryDecision::Fail { why, may_have_been_sent };
    // A body that was (partly) streamed and cannot be produced again rules out any retry.
    let replay_blocked = written && !failure.request.body_replayable;
    if failure.kind == K::Shutdown {
        // Nothing new is opened or shared during a shutdown.
        return fail(NoRetry::Shutdown, may_have_been_sent(failure));
    }
    let free = match &failure.kind {
        K::GoAwayUnprocessed => {
            Some(RetryDecision::NewConnection { reason: RetryReason::GoAwayUnprocessed, fresh: false })
        }
        K::RefusedStream if ctx.beyond_limit => Some(RetryDecision::SameConnection(RetryReason::StreamLimit)),
        _ => None,
    };
    if let Some(decision) = free {
        if replay_blocked {
            return fail(NoRetry::BodyNotReplayable, false);
        }
        if ctx.free_retries >= ctx.max_free_retries {
            return fail(NoRetry::FreeRetryLimit, false);
        }
        return decision;
    }
    if ctx.retries >= ctx.max_retries {
        return fail(NoRetry::RetryLimit, may_have_been_sent(failure));
    }
    match &failure.kind {
        K::Timeout => fail(NoRetry::Timeout, written),
        K::Protocol { .. } => fail(NoRetry::Protocol, written),
        // Reset before any response byte, on a reused connection: "written, no
        // response", like a stale connection.
        K::StreamReset { .. } => match failure.progress {
            Progress::ResponseStarted => fail(NoRetry::StreamReset, true),
            _ if !ctx.reused => fail(NoRetry::StreamReset, written),
            _ if !failure.request.idempotent => fail(NoRetry::NotIdempotent, written),
            _ if replay_blocked => fail(NoRetry::BodyNotReplayable, written),
            _ => RetryDecision::NewConnection { reason: RetryReason::StreamReset, fresh: true },
        },
        K::RefusedStream | K::GoAwayUnprocessed | K::Misdirected if replay_blocked => {
            fail(NoRetry::BodyNotReplayable, false)
        }
        K::RefusedStream if ctx.refused_elsewhere => fail(NoRetry::Refused, false),
        K::RefusedStream if ctx.refusals_before == 0 => {
            RetryDecision::SameConnection(RetryReason::RefusedStream)
        }
        K::RefusedStream => RetryDecision::NewConnection { reason: RetryReason::RefusedStream, fresh: false },
        // Handled above, as a free retry.
        K::GoAwayUnprocessed => {
            RetryDecision::NewConnection { reason: RetryReason::GoAwayUnprocessed, fresh: false }
        }
        K::Misdirected => RetryDecision::NewConnection { reason: RetryReason::Misdirected, fresh: true },
        // Decided first, above; the same verdict.
        K::Shutdown => fail(NoRetry::Shutdown, may_have_been_sent(failure)),
        K::Io { .. } => match failure.progress {
            Progress::NothingWritten => {
                RetryDecision::NewConnection { reason: RetryReason::NotSent, fresh: true }
            }
            Progress::ResponseStarted => fail(NoRetry::ResponseStarted, true),
            Progress::RequestWritten if !ctx.reused => fail(NoRetry::FreshConnection, true),
            Progress::RequestWritten if !failure.request.idempotent => fail(NoRetry::NotIdempotent, true),
            Progress::RequestWritten if !failure.request.body_replayable => {
                fail(NoRetry::BodyNotReplayable, true)
            }
            Progress::RequestWritten => {
                RetryDecision::NewConnection { reason: RetryReason::StaleConnection, fresh: true }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> ExchangeFailureKind {
        ExchangeFailureKind::Io { kind: io::ErrorKind::ConnectionReset, message: "reset".into() }
    }
    fn f(
        kind: ExchangeFailureKind,
        progress: Progress,
        idempotent: bool,
        replayable: bool,
    ) -> ExchangeFailure {
        ExchangeFailure { kind, progress, request: RequestFacts { idempotent, body_replayable: replayable } }
    }
    use Progress::*;

    fn ctx(reused: bool, refusals_before: u32, retries: u32, max_retries: u32) -> RetryContext {
        RetryContext { reused, refusals_before, retries, max_retries, ..RetryContext::first(reused) }
    }

    #[test]
    fn not_written_is_always_retried_any_method() {
        let d = decide(&f(io(), NothingWritten, false, false), &ctx(false, 0, 0, 3));
        assert_eq!(d, RetryDecision::NewConnection { reason: RetryReason::NotSent, fresh: true });
    }

    #[test]
    fn written_on_fresh_connection_is_never_retried() {
        assert_eq!(
            decide(&f(io(), RequestWritten, true, true), &ctx(false, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::FreshConnection, may_have_been_sent: true }
        );
    }

    #[test]
    fn stale_reused_connection_rules() {
        assert!(matches!(
            decide(&f(io(), RequestWritten, true, true), &ctx(true, 0, 0, 3)),
            RetryDecision::NewConnection { reason: RetryReason::StaleConnection, fresh: true }
        ));
        assert_eq!(
            decide(&f(io(), RequestWritten, true, false), &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::BodyNotReplayable, may_have_been_sent: true }
        );
        assert_eq!(
            decide(&f(io(), ResponseStarted, true, true), &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::ResponseStarted, may_have_been_sent: true }
        );
    }

    #[test]
    fn a_shutdown_is_never_retried_and_says_whether_it_was_sent() {
        for (p, sent) in [(NothingWritten, false), (RequestWritten, true), (ResponseStarted, true)] {
            for (reused, retries) in [(false, 0), (true, 0), (true, 3)] {
                assert_eq!(
                    decide(&f(ExchangeFailureKind::Shutdown, p, true, true), &ctx(reused, 0, retries, 3)),
                    RetryDecision::Fail { why: NoRetry::Shutdown, may_have_been_sent: sent },
                    "{p:?} reused {reused} retries {retries}"
                );
            }
        }
    }

    #[test]
    fn timeouts_and_protocol_errors_never_retry() {
        for p in [NothingWritten, RequestWritten, ResponseStarted] {
            assert!(matches!(
                decide(&f(ExchangeFailureKind::Timeout, p, true, true), &ctx(true, 0, 0, 3)),
                RetryDecision::Fail { why: NoRetry::Timeout, .. }
            ));
            let proto = ExchangeFailureKind::Protocol { message: "bad".into() };
            assert!(matches!(
                decide(&f(proto, p, true, true), &ctx(true, 0, 0, 3)),
                RetryDecision::Fail { why: NoRetry::Protocol, .. }
            ));
        }
    }

    #[test]
    fn refused_stream_same_connection_once_then_elsewhere() {
        let r = f(ExchangeFailureKind::RefusedStream, RequestWritten, false, true);
        assert_eq!(
            decide(&r, &ctx(true, 0, 0, 3)),
            RetryDecision::SameConnection(RetryReason::RefusedStream)
        );
        assert_eq!(
            decide(&r, &ctx(true, 1, 1, 3)),
            RetryDecision::NewConnection { reason: RetryReason::RefusedStream, fresh: false }
        );
        // A POST whose streamed body is gone cannot be resent, but was not processed.
        let gone = f(ExchangeFailureKind::RefusedStream, RequestWritten, false, false);
        assert_eq!(
            decide(&gone, &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::BodyNotReplayable, may_have_been_sent: false }
        );
    }

    #[test]
    fn goaway_and_misdirected() {
        let g = f(ExchangeFailureKind::GoAwayUnprocessed, RequestWritten, false, true);
        assert!(matches!(decide(&g, &ctx(true, 0, 0, 3)), RetryDecision::NewConnection { fresh: false, .. }));
        let m = f(ExchangeFailureKind::Misdirected, ResponseStarted, false, true);
        assert!(matches!(decide(&m, &ctx(true, 0, 0, 3)), RetryDecision::NewConnection { fresh: true, .. }));
    }

    /// A stream reset before any response byte on a reused connection is
    /// "written, no response": the stale-connection rules, once, on a fresh
    /// connection. After a response byte, or on a fresh connection, it fails.
    #[test]
    fn stream_reset_before_the_response_is_written_no_response() {
        let reset = |progress, idempotent| {
            f(ExchangeFailureKind::StreamReset { code: 2 }, progress, idempotent, true)
        };
        assert_eq!(
            decide(&reset(RequestWritten, true), &ctx(true, 0, 0, 3)),
            RetryDecision::NewConnection { reason: RetryReason::StreamReset, fresh: true }
        );
        assert_eq!(
            decide(&reset(RequestWritten, false), &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::NotIdempotent, may_have_been_sent: true }
        );
        assert_eq!(
            decide(&reset(RequestWritten, true), &ctx(false, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::StreamReset, may_have_been_sent: true },
            "a fresh connection: no retry (the retry itself runs on a fresh one, so this is once)"
        );
        assert_eq!(
            decide(&reset(ResponseStarted, true), &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::StreamReset, may_have_been_sent: true }
        );
        let gone = f(ExchangeFailureKind::StreamReset { code: 2 }, RequestWritten, true, false);
        assert_eq!(
            decide(&gone, &ctx(true, 0, 0, 3)),
            RetryDecision::Fail { why: NoRetry::BodyNotReplayable, may_have_been_sent: true }
        );
    }

    #[test]
    fn refused_on_a_second_connection_fails_typed() {
        let r = f(ExchangeFailureKind::RefusedStream, RequestWritten, true, true);
        let elsewhere = RetryContext { refused_elsewhere: true, ..ctx(true, 0, 1, 3) };
        assert_eq!(
            decide(&r, &elsewhere),
            RetryDecision::Fail { why: NoRetry::Refused, may_have_been_sent: false }
        );
    }

    #[test]
    fn goaway_and_early_refusals_are_free_retries_with_their_own_bound() {
        let g = f(ExchangeFailureKind::GoAwayUnprocessed, RequestWritten, false, true);
        let spent = ctx(true, 0, 3, 3);
        assert_eq!(
            decide(&g, &spent),
            RetryDecision::NewConnection { reason: RetryReason::GoAwayUnprocessed, fresh: false },
            "the counted retries are spent, a GOAWAY retry is not counted"
        );
        let free_spent = RetryContext { free_retries: 10, ..spent };
        assert_eq!(
            decide(&g, &free_spent),
            RetryDecision::Fail { why: NoRetry::FreeRetryLimit, may_have_been_sent: false }
        );
        // A refusal of a stream opened before SETTINGS: the same connection, free,
        // whatever the connection's earlier refusals.
        let r = f(ExchangeFailureKind::RefusedStream, RequestWritten, false, true);
        let early = RetryContext { beyond_limit: true, refusals_before: 1, ..spent };
        assert_eq!(decide(&r, &early), RetryDecision::SameConnection(RetryReason::StreamLimit));
        assert!(RetryReason::StreamLimit.is_free() && RetryReason::GoAwayUnprocessed.is_free());
        assert!(!RetryReason::RefusedStream.is_free() && !RetryReason::NotSent.is_free());
        // A streamed body that is gone still cannot be resent.
        let gone = f(ExchangeFailureKind::GoAwayUnprocessed, RequestWritten, false, false);
        assert_eq!(
            decide(&gone, &spent),
            RetryDecision::Fail { why: NoRetry::BodyNotReplayable, may_have_been_sent: false }
        );
    }

    #[test]
    fn retry_limit() {
        assert_eq!(
            decide(&f(io(), NothingWritten, true, true), &ctx(true, 0, 3, 3)),
            RetryDecision::Fail { why: NoRetry::RetryLimit, may_have_been_sent: false }
        );
        assert_eq!(
            decide(&f(io(), RequestWritten, true, true), &ctx(true, 0, 3, 3)),
            RetryDecision::Fail { why: NoRetry::RetryLimit, may_have_been_sent: true }
        );
    }
}
