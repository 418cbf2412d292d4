//! [`Error`]: what failed and where, for every way a call can end badly.
//!
//! An error is one layer: its [`Display`](fmt::Display) says what failed for
//! which URL, and [`source`](std::error::Error::source) returns the cause
//! (the route failures, the exchange's failure), which it does not repeat — so
//! `anyhow` and `eyre` print each cause once. The alternate form, `{:#}`,
//! prints the whole chain on one line:
//!
//! ```
//! # use switchyard_common::{Error, ErrorKind, TimeoutPhase};
//! let e = Error::timeout(TimeoutPhase::ResponseHead).with_url("https://example.com/x");
//! assert_eq!(e.to_string(), "timed out waiting for the response head from https://example.com/x");
//! assert!(e.is_timeout() && !e.is_connect());
//! assert_eq!(e.url(), Some("https://example.com/x"));
//! assert!(matches!(e.kind(), ErrorKind::Timeout(TimeoutPhase::ResponseHead)));
//! ```

use std::fmt;
use std::sync::Arc;

use switchyard_core::error::Failure as RaceFailure;
use switchyard_core::http1::Http1Error;
use switchyard_core::pool::ExchangeFailureKind;
use switchyard_core::{AcquireError, AddressError, ConnectError, ExchangeError, TlsFailure};

/// Why a call failed: [`Error::kind`] to match on, predicates (`is_connect`,
/// `is_dns`, `is_tls`, `is_timeout`, `is_body`, `is_status`) to test, and the
/// URL it concerned ([`Error::url`], credentials redacted).
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    /// The request's URL, any password shown as `***`.
    url: Option<Arc<str>>,
    /// For a timeout before the call had a connection: how far it had got.
    stage: Option<switchyard_core::ConnectStage>,
}

/// What failed (see [`Error::kind`]). Its `Debug` is short: the variant and
/// a one-line summary (`Connect("connect refused")`, `Timeout(ResponseBody)`);
/// the whole chain is the [`Error`]'s `{:#}`.
#[derive(Clone)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The URL is not an absolute `http(s)` URL this client may call (no
    /// scheme, a bad scheme, host or port; cleartext not permitted; an
    /// impossible protocol list). The cause, when there is one, is the source.
    InvalidUrl(Option<AddressError>),
    /// The request cannot be sent as given (a header that cannot be encoded,
    /// a body that failed, …).
    InvalidRequest(String),
    /// No connection: DNS, every connect attempt, TLS, the pool's wait, or
    /// shutdown. The source lists every route tried and why each failed.
    Connect(AcquireError),
    /// The exchange failed and was not retried; the source says whether the
    /// request may have been sent.
    Exchange(Box<ExchangeError>),
    /// The response body failed after the head arrived.
    Body(BodyError),
    /// A timeout passed, in this phase of the call.
    Timeout(TimeoutPhase),
    /// [`error_for_status`](crate::Error::status): the server answered with a
    /// client (4xx) or server (5xx) error status.
    Status(http::StatusCode),
    /// The client configuration is invalid (TLS roots, client certificate, a
    /// setting out of range, …).
    Config(String),
    /// The response body is not what it was read as (`json()`: not that JSON).
    Decode(String),
    /// The response cannot be taken over as another protocol (`upgrade()`):
    /// it is not a `101 Switching Protocols` on HTTP/1.1, or its body was
    /// already read.
    Upgrade(String),
    /// Following redirects failed: more hops than the client's redirect
    /// policy allows (`redirect(Policy::limited(n))`), or a hop to a URL that
    /// cannot be called. The error's URL is the last one called; the text
    /// names the limit and where the next hop would have gone.
    Redirect(String),
    /// An HTTP proxy answered `407 Proxy Authentication Required` to an
    /// absolute-form request (a `CONNECT` refused with 407 is a
    /// [`ErrorKind::Connect`] whose route failure says so). Either way
    /// [`Error::is_proxy_auth`] is true.
    ProxyAuth {
        /// The proxy's URL (never its credentials).
        proxy: String,
        /// Credentials were sent and refused (else none were configured).
        credentials_refused: bool,
    },
    /// A Manager was asked for a server it was not built with (no connection
    /// is opened for it).
    NotDeclared {
        /// The host (or URL) asked for.
        host: String,
        /// When a server handle was asked for another server's URL: the
        /// handle's server (the URL goes elsewhere; that server may still be
        /// declared, and reached through its own handle).
        handle: Option<String>,
    },
    /// A Manager's servers did not all reach their minimum in time; the text
    /// gives each server's readiness and last error.
    NotReady(String),
    /// A bug in switchyard (the engine fed the core an input it cannot have
    /// asked for). Logged at `error` level when it happens; please report it.
    Internal(String),
}

/// Where a call was when a timeout passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// Waiting for a connection: the pool's wait, a connect or a handshake.
    Connect,
    /// The request is on a connection; its response head has not arrived (the
    /// call's or the head's timeout, or a read timeout).
    ResponseHead,
    /// Reading the response body (the call's or the body's timeout, or a read
    /// timeout).
    ResponseBody,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connecting to",
            TimeoutPhase::ResponseHead => "waiting for the response head from",
            TimeoutPhase::ResponseBody => "reading the response body from",
        })
    }
}

/// `bytes` as JSON of type `T` (feature `json`), for the adapters' `json()`.
///
/// # Errors
/// [`ErrorKind::Decode`] saying where the JSON went wrong.
#[cfg(feature = "json")]
pub fn decode_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::from(ErrorKind::Decode(format!("not the expected JSON: {e}"))))
}

/// A response body failed mid-stream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BodyError {
    /// The HTTP/1.1 framing broke, or the connection closed early.
    Http1(Http1Error),
    /// The HTTP/2 stream failed.
    Http2(String),
    /// The HTTP/3 stream failed (reset, a protocol error, the connection lost).
    Http3(String),
    /// The HTTP/2 trailers are larger than the response head limit
    /// (`max_response_head_size`, which bounds trailers on HTTP/1.1 too).
    TrailersTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Reading timed out.
    Timeout,
    /// The connection failed.
    Io(std::sync::Arc<std::io::Error>),
    /// The client's shutdown ended the HTTP/2 connection at the end of its
    /// grace, before the body did ([`Error::is_shutdown`]).
    Shutdown,
    /// Writing the body out failed (`copy_to`, `save_to`: the writer's or the
    /// file's error, the path in its text); the connection was fine.
    Sink(std::sync::Arc<std::io::Error>),
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Error {
        Error { kind, url: None, stage: None }
    }
}

impl Error {
    /// An invalid URL (`url` as given; a password in it is redacted).
    #[must_use]
    pub fn invalid_url(url: &str, cause: Option<AddressError>) -> Error {
        Error::from(ErrorKind::InvalidUrl(cause)).with_url(&crate::redact(url))
    }
    /// A request that cannot be sent as given.
    #[must_use]
    pub fn invalid_request(why: impl Into<String>) -> Error {
        Error::from(ErrorKind::InvalidRequest(why.into()))
    }
    /// No connection.
    #[must_use]
    pub fn connect(e: AcquireError) -> Error {
        Error::from(ErrorKind::Connect(e))
    }
    /// A failed exchange.
    #[must_use]
    pub fn exchange(e: ExchangeError) -> Error {
        Error::from(ErrorKind::Exchange(Box::new(e)))
    }
    /// A failed response body. A body that timed out (the call's deadline,
    /// the body's or a read timeout) is
    /// [`ErrorKind::Timeout`]`(`[`TimeoutPhase::ResponseBody`]`)`, as every
    /// timeout is a `Timeout` of its phase.
    #[must_use]
    pub fn body(e: BodyError) -> Error {
        match e {
            BodyError::Timeout => Error::timeout(TimeoutPhase::ResponseBody),
            e => Error::from(ErrorKind::Body(e)),
        }
    }
    /// A timeout in `phase`.
    #[must_use]
    pub fn timeout(phase: TimeoutPhase) -> Error {
        Error::from(ErrorKind::Timeout(phase))
    }
    /// The call's deadline passed before it had a connection, at `stage`
    /// (`None`: unknown): a timeout of the connect phase whose text names
    /// the stage ("timed out connecting to URL (resolving the name)").
    #[must_use]
    pub fn connect_timeout_at(stage: Option<switchyard_core::ConnectStage>) -> Error {
        let mut e = Error::timeout(TimeoutPhase::Connect);
        e.stage = stage;
        e
    }
    /// The call's own deadline passed where the core says it stood
    /// ([`Pool::call_timed_out`](switchyard_core::Pool::call_timed_out)):
    /// connecting (the text names the stage) or waiting for the response
    /// head.
    #[must_use]
    pub fn call_timeout(stood: switchyard_core::CallTimeout) -> Error {
        match stood {
            switchyard_core::CallTimeout::Connecting(stage) => Error::connect_timeout_at(stage),
            switchyard_core::CallTimeout::Exchange => Error::timeout(TimeoutPhase::ResponseHead),
        }
    }
    /// How far a call had got when its deadline passed before it had a
    /// connection (see [`Error::connect_timeout_at`]).
    #[must_use]
    pub fn connect_stage(&self) -> Option<switchyard_core::ConnectStage> {
        self.stage
    }
    /// An invalid configuration.
    #[must_use]
    pub fn config(why: impl Into<String>) -> Error {
        Error::from(ErrorKind::Config(why.into()))
    }
    /// A bug in switchyard: logged at `error` level now, and returned as
    /// [`ErrorKind::Internal`] (never as a problem with the caller's request).
    #[must_use]
    pub fn internal(why: impl fmt::Display) -> Error {
        let why = why.to_string();
        tracing::error!(target: "switchyard", error = %why, "internal error (a bug in switchyard; please report it)");
        Error::from(ErrorKind::Internal(why))
    }
    /// An HTTP proxy asked for authentication (407).
    #[must_use]
    pub fn proxy_auth(proxy: &str, credentials_refused: bool) -> Error {
        Error::from(ErrorKind::ProxyAuth { proxy: proxy.to_owned(), credentials_refused })
    }
    /// A client or server error status (see `error_for_status` on responses).
    #[must_use]
    pub fn status(status: http::StatusCode) -> Error {
        Error::from(ErrorKind::Status(status))
    }

    /// The same error, about `url` (shown with any password as `***`). An error
    /// that already names a URL keeps it.
    #[must_use]
    pub fn with_url(mut self, url: &str) -> Error {
        if self.url.is_none() {
            self.url = Some(crate::redact(url).into());
        }
        self
    }

    /// What failed.
    #[must_use]
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The URL of the request that failed, with any password shown as `***`
    /// (`None` for a client that could not be built).
    #[must_use]
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// The status, for an [`ErrorKind::Status`] error.
    #[must_use]
    pub fn status_code(&self) -> Option<http::StatusCode> {
        match self.kind {
            ErrorKind::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The race's failures, when no connection could be made.
    fn race_failures(&self) -> &[RaceFailure] {
        match &self.kind {
            ErrorKind::Connect(AcquireError::Connect(race)) => &race.failures,
            _ => &[],
        }
    }

    /// Whether the call got no connection (DNS, TCP, proxy, TLS, the pool's
    /// wait, shutdown). Timeouts while connecting count too (see also
    /// [`Error::is_timeout`]).
    #[must_use]
    pub fn is_connect(&self) -> bool {
        matches!(self.kind, ErrorKind::Connect(_) | ErrorKind::Timeout(TimeoutPhase::Connect))
    }

    /// Whether no connection could be made because DNS gave no usable answer
    /// for any route.
    #[must_use]
    pub fn is_dns(&self) -> bool {
        let failures = self.race_failures();
        !failures.is_empty() && failures.iter().all(|f| matches!(f, RaceFailure::Dns { .. }))
    }

    /// Whether a TLS handshake failed (untrusted certificate, wrong host, pin
    /// mismatch, protocol error) on some route.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        self.tls_failure().is_some()
    }

    /// Which part of TLS failed, when [`Error::is_tls`].
    #[must_use]
    pub fn tls_failure(&self) -> Option<TlsFailure> {
        self.race_failures().iter().find_map(|f| match f {
            RaceFailure::Connect { error: ConnectError::Tls { kind, .. }, .. } => Some(*kind),
            _ => None,
        })
    }

    /// Whether the response body failed after the head arrived (a body
    /// timeout counts too).
    #[must_use]
    pub fn is_body(&self) -> bool {
        matches!(self.kind, ErrorKind::Body(_) | ErrorKind::Timeout(TimeoutPhase::ResponseBody))
    }

    /// Whether a proxy asked for authentication (a 407 to `CONNECT` or to an
    /// absolute-form request, or a SOCKS5 proxy refusing the credentials or
    /// every method offered).
    #[must_use]
    pub fn is_proxy_auth(&self) -> bool {
        matches!(self.kind, ErrorKind::ProxyAuth { .. })
            || self
                .race_failures()
                .iter()
                .any(|f| matches!(f, RaceFailure::Connect { error: ConnectError::ProxyAuth { .. }, .. }))
    }

    /// Whether this is an `error_for_status` error.
    #[must_use]
    pub fn is_status(&self) -> bool {
        matches!(self.kind, ErrorKind::Status(_))
    }

    /// No connection because every route's server refused it (TCP RST on
    /// connect: nothing listens there), so the request was never sent.
    ///
    /// ```
    /// # use switchyard_common::Error;
    /// assert!(!Error::config("x").is_refused());
    /// ```
    #[must_use]
    pub fn is_refused(&self) -> bool {
        let failures = self.race_failures();
        !failures.is_empty()
            && failures.iter().all(|f| {
                matches!(
                    f,
                    RaceFailure::Connect {
                        error: ConnectError::Io { kind: std::io::ErrorKind::ConnectionRefused, .. },
                        ..
                    }
                )
            })
    }

    /// The connection was reset, or the HTTP/2 stream was reset, during the
    /// exchange or the response body (TCP RST, `RST_STREAM`, a refused stream).
    #[must_use]
    pub fn is_reset(&self) -> bool {
        use std::io::ErrorKind as Io;
        let reset = |k: Io| matches!(k, Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe);
        match &self.kind {
            ErrorKind::Exchange(e) => match &e.kind {
                ExchangeFailureKind::Io { kind, .. } => reset(*kind),
                ExchangeFailureKind::RefusedStream | ExchangeFailureKind::StreamReset { .. } => true,
                _ => false,
            },
            ErrorKind::Body(BodyError::Io(e)) => reset(e.kind()),
            ErrorKind::Body(BodyError::Http2(_) | BodyError::Http3(_)) => true,
            _ => false,
        }
    }

    /// Whether following redirects failed ([`ErrorKind::Redirect`]: past the
    /// policy's limit). reqwest's `is_redirect`.
    #[must_use]
    pub fn is_redirect(&self) -> bool {
        matches!(self.kind, ErrorKind::Redirect(_))
    }

    /// Whether the call ended because the client is shutting down
    /// (`Client::shutdown`): refused, or waiting for a connection when it
    /// did; failed in a way that would have been retried while it did (no
    /// connection is opened for a retry then); or still running on an HTTP/2
    /// connection when the grace ended (the head or the body, on every
    /// adapter). An HTTP/1.1 exchange is never cut short by a shutdown.
    #[must_use]
    pub fn is_shutdown(&self) -> bool {
        match &self.kind {
            ErrorKind::Connect(AcquireError::Shutdown) => true,
            ErrorKind::Body(BodyError::Shutdown) => true,
            // A failure that would have been retried, during a shutdown.
            ErrorKind::Exchange(e) => e.why == switchyard_core::pool::NoRetry::Shutdown,
            _ => false,
        }
    }

    /// Whether the call failed because its host's retry budget was spent: the
    /// failure would otherwise have been retried
    /// ([`ClientBuilder::retry_budget`](crate::ClientBuilder::retry_budget)).
    /// The failure itself, and whether the request may have been sent, are
    /// in the [`ErrorKind::Exchange`] source.
    #[must_use]
    pub fn is_retry_budget_exhausted(&self) -> bool {
        matches!(&self.kind, ErrorKind::Exchange(e) if e.why == switchyard_core::pool::NoRetry::RetryBudget)
    }

    /// Whether a timeout ended the call (the call's, the head's or the body's,
    /// a read, a connect, or the pool's wait).
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        self.timeout_phase().is_some()
    }

    /// In which phase a timeout ended the call.
    #[must_use]
    pub fn timeout_phase(&self) -> Option<TimeoutPhase> {
        match &self.kind {
            ErrorKind::Timeout(phase) => Some(*phase),
            ErrorKind::Body(BodyError::Timeout) => Some(TimeoutPhase::ResponseBody),
            ErrorKind::Connect(AcquireError::Timeout { .. }) => Some(TimeoutPhase::Connect),
            // The call's deadline, or every attempt timed out (TCP, a proxy
            // tunnel, TLS).
            ErrorKind::Connect(AcquireError::Connect(race)) if race.timed_out() => {
                Some(TimeoutPhase::Connect)
            }
            ErrorKind::Exchange(e) if matches!(e.kind, ExchangeFailureKind::Timeout) => {
                Some(TimeoutPhase::ResponseHead)
            }
            _ => None,
        }
    }

    /// Whether the server may have received the request. `false` means it provably
    /// did not, so sending it again is safe.
    #[must_use]
    pub fn may_have_been_sent(&self) -> bool {
        match &self.kind {
            ErrorKind::Exchange(e) => e.may_have_been_sent,
            ErrorKind::Body(_) | ErrorKind::Status(_) | ErrorKind::Decode(_) | ErrorKind::Upgrade(_) => true,
            ErrorKind::Redirect(_) => true,
            ErrorKind::Timeout(phase) => *phase != TimeoutPhase::Connect,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.url.as_deref();
        let on = |f: &mut fmt::Formatter<'_>, word: &str| match url {
            Some(u) => write!(f, " {word} {u}"),
            None => Ok(()),
        };
        match &self.kind {
            ErrorKind::InvalidUrl(_) => match url {
                Some(u) => write!(f, "invalid URL {u:?}")?,
                None => f.write_str("invalid URL")?,
            },
            ErrorKind::InvalidRequest(why) => {
                f.write_str("invalid request")?;
                on(f, "to")?;
                write!(f, ": {why}")?;
            }
            ErrorKind::Connect(AcquireError::Shutdown) => {
                f.write_str("the client is shut down")?;
            }
            ErrorKind::Connect(_) => {
                if self.is_timeout() {
                    f.write_str("timed out")?;
                    on(f, "connecting to")?;
                    if let ErrorKind::Connect(AcquireError::Connect(race)) = &self.kind {
                        if let Some(stage) = race.stage {
                            write!(f, " ({stage})")?;
                        }
                    }
                } else {
                    f.write_str("no connection")?;
                    on(f, "to")?;
                }
            }
            ErrorKind::Exchange(e) if matches!(e.kind, ExchangeFailureKind::Timeout) => {
                // Its phase named, as a call timeout's text names it.
                f.write_str("the exchange")?;
                on(f, "with")?;
                f.write_str(" timed out waiting for the response head")?;
            }
            ErrorKind::Exchange(_) => {
                f.write_str("the exchange")?;
                on(f, "with")?;
                f.write_str(" failed")?;
            }
            ErrorKind::Body(_) => {
                f.write_str("the response body")?;
                on(f, "from")?;
                f.write_str(" failed")?;
            }
            ErrorKind::Timeout(phase) => {
                match url {
                    Some(u) => write!(f, "timed out {phase} {u}")?,
                    None => write!(f, "timed out {phase} the server")?,
                }
                if let Some(stage) = self.stage {
                    write!(f, " ({stage})")?;
                }
            }
            ErrorKind::Status(s) => {
                write!(f, "HTTP status {s}")?;
                on(f, "from")?;
            }
            ErrorKind::Config(why) => write!(f, "invalid client configuration: {why}")?,
            ErrorKind::ProxyAuth { proxy, credentials_refused } => {
                if *credentials_refused {
                    write!(f, "the proxy {proxy} refused the credentials given")?;
                } else {
                    write!(f, "the proxy {proxy} requires authentication, and none is configured for it")?;
                }
                on(f, "for")?;
            }
            ErrorKind::Decode(why) => {
                f.write_str("the response body")?;
                on(f, "from")?;
                write!(f, " could not be decoded: {why}")?;
            }
            ErrorKind::Upgrade(why) => {
                f.write_str("the response")?;
                on(f, "from")?;
                write!(f, " cannot be upgraded: {why}")?;
            }
            ErrorKind::Redirect(why) => {
                f.write_str("error following redirect")?;
                on(f, "from")?;
                write!(f, ": {why}")?;
            }
            ErrorKind::NotDeclared { host, handle: None } => write!(
                f,
                "{host} is not a server this manager was built with (no connection is opened for it)"
            )?,
            ErrorKind::NotDeclared { host, handle: Some(server) } => write!(
                f,
                "{host} is not this handle's server ({server}); a handle sends only to its own server \
                 (for another declared server, ask the manager for its handle: connection(host))"
            )?,
            ErrorKind::NotReady(why) => write!(f, "the manager's servers are not ready: {why}")?,
            ErrorKind::Internal(why) => {
                write!(f, "internal error in switchyard (a bug; please report it): {why}")?
            }
        }
        if f.alternate() {
            let mut cause = std::error::Error::source(self);
            while let Some(c) = cause {
                write!(f, ": {c}")?;
                cause = c.source();
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    /// Short: the kind's name and the whole chain, once.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match &self.kind {
            ErrorKind::InvalidUrl(_) => "InvalidUrl",
            ErrorKind::InvalidRequest(_) => "InvalidRequest",
            ErrorKind::Connect(_) => "Connect",
            ErrorKind::Exchange(_) => "Exchange",
            ErrorKind::Body(_) => "Body",
            ErrorKind::Timeout(_) => "Timeout",
            ErrorKind::Status(_) => "Status",
            ErrorKind::Config(_) => "Config",
            ErrorKind::Decode(_) => "Decode",
            ErrorKind::Upgrade(_) => "Upgrade",
            ErrorKind::Redirect(_) => "Redirect",
            ErrorKind::ProxyAuth { .. } => "ProxyAuth",
            ErrorKind::NotDeclared { .. } => "NotDeclared",
            ErrorKind::NotReady(_) => "NotReady",
            ErrorKind::Internal(_) => "Internal",
        };
        write!(f, "Error::{name}({self:#})")
    }
}

impl fmt::Debug for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, summary): (&str, Option<String>) = match self {
            ErrorKind::InvalidUrl(e) => ("InvalidUrl", e.as_ref().map(ToString::to_string)),
            ErrorKind::InvalidRequest(why) => ("InvalidRequest", Some(why.clone())),
            ErrorKind::Connect(AcquireError::Shutdown) => ("Connect", Some("shut down".into())),
            ErrorKind::Connect(AcquireError::Timeout { .. }) => {
                ("Connect", Some("pool wait timed out".into()))
            }
            ErrorKind::Connect(AcquireError::Connect(race)) => {
                let first = race.failures.first().map_or_else(|| "no route".to_owned(), short_failure);
                let more = race.failures.len().saturating_sub(1);
                ("Connect", Some(if more > 0 { format!("{first} (+{more} more)") } else { first }))
            }
            ErrorKind::Connect(e) => ("Connect", Some(e.to_string())),
            ErrorKind::Exchange(e) => ("Exchange", Some(e.kind.to_string())),
            ErrorKind::Body(e) => ("Body", Some(e.to_string())),
            ErrorKind::Timeout(phase) => return write!(f, "Timeout({phase:?})"),
            ErrorKind::Status(s) => return write!(f, "Status({})", s.as_u16()),
            ErrorKind::Config(why) => ("Config", Some(why.clone())),
            ErrorKind::Decode(why) => ("Decode", Some(why.clone())),
            ErrorKind::Upgrade(why) => ("Upgrade", Some(why.clone())),
            ErrorKind::Redirect(why) => ("Redirect", Some(why.clone())),
            ErrorKind::ProxyAuth { proxy, credentials_refused } => {
                return write!(
                    f,
                    "ProxyAuth {{ proxy: {proxy:?}, credentials_refused: {credentials_refused} }}"
                )
            }
            ErrorKind::NotDeclared { host, .. } => return write!(f, "NotDeclared {{ host: {host:?} }}"),
            ErrorKind::NotReady(why) => ("NotReady", Some(why.clone())),
            ErrorKind::Internal(why) => ("Internal", Some(why.clone())),
        };
        match summary {
            Some(s) => write!(f, "{name}({s:?})"),
            None => f.write_str(name),
        }
    }
}

/// One route failure in a few words, for [`ErrorKind`]'s `Debug`.
fn short_failure(f: &RaceFailure) -> String {
    match f {
        RaceFailure::Connect { error: ConnectError::Io { kind, .. }, .. } => match kind {
            std::io::ErrorKind::ConnectionRefused => "connect refused".into(),
            k => format!("connect failed: {k:?}"),
        },
        RaceFailure::Connect { error, .. } => error.to_string(),
        RaceFailure::Dns { host, .. } => format!("DNS failed for {host}"),
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Http1(e) => fmt::Display::fmt(e, f),
            BodyError::Http2(e) => write!(f, "HTTP/2 stream error: {e}"),
            BodyError::Http3(e) => write!(f, "HTTP/3 stream error: {e}"),
            BodyError::TrailersTooLarge { limit } => {
                write!(f, "trailer section larger than {limit} bytes (the response head limit)")
            }
            BodyError::Timeout => f.write_str("read timed out"),
            BodyError::Io(e) => write!(f, "connection failed: {e}"),
            BodyError::Shutdown => {
                f.write_str("the client's shutdown ended the connection (its grace period was over)")
            }
            BodyError::Sink(e) => write!(f, "writing the body out failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::InvalidUrl(Some(e)) => Some(e),
            ErrorKind::Connect(AcquireError::Shutdown) => None,
            ErrorKind::Connect(e) => Some(e),
            ErrorKind::Exchange(e) => Some(&**e),
            ErrorKind::Body(e) => Some(e),
            _ => None,
        }
    }
}

/// Its [`Display`](fmt::Display) is the whole story (the framing error, the
/// stream's reason, the I/O error's message), so it has no further source.
impl std::error::Error for BodyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_debug_in_a_few_words_and_resets_are_recognisable() {
        let reset = Error::body(BodyError::Io(std::sync::Arc::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        ))));
        assert!(reset.is_reset() && !reset.is_refused() && !reset.is_timeout());
        assert_eq!(format!("{:?}", reset.kind()), r#"Body("connection failed: reset by peer")"#);
        assert!(Error::body(BodyError::Http2("stream reset: CANCEL".into())).is_reset());
        let late = Error::body(BodyError::Timeout);
        assert!(matches!(late.kind(), ErrorKind::Timeout(TimeoutPhase::ResponseBody)) && !late.is_reset());
        assert_eq!(format!("{:?}", Error::status(http::StatusCode::NOT_FOUND).kind()), "Status(404)");
        assert_eq!(format!("{:?}", Error::config("no roots").kind()), r#"Config("no roots")"#);
    }

    #[test]
    fn display_is_one_layer_and_the_chain_prints_each_cause_once() {
        let io = std::sync::Arc::new(std::io::Error::other("reset by peer"));
        let e = Error::body(BodyError::Io(io)).with_url("https://ann:pw@example.com/x");
        assert_eq!(e.to_string(), "the response body from https://ann:***@example.com/x failed");
        assert_eq!(
            format!("{e:#}"),
            "the response body from https://ann:***@example.com/x failed: connection failed: reset by peer"
        );
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection failed: reset by peer"));
        assert!(!e.to_string().contains("reset by peer"), "Display does not repeat its source");
        assert_eq!(format!("{e:?}"), format!("Error::Body({e:#})"));
        assert!(e.is_body() && !e.is_connect() && !e.is_timeout() && e.may_have_been_sent());
    }

    #[test]
    fn invalid_urls_name_the_url_and_internal_errors_are_distinct() {
        let e = Error::invalid_url("example.com/path", None);
        assert_eq!(e.to_string(), "invalid URL \"example.com/path\"");
        let e = Error::internal("connection id 7 was never issued");
        assert!(matches!(e.kind(), ErrorKind::Internal(_)));
        assert!(e.to_string().starts_with("internal error in switchyard"), "{e}");
        assert!(!e.to_string().contains("invalid request"), "{e}");
    }

    #[test]
    fn timeouts_say_their_phase() {
        for (phase, text) in [
            (TimeoutPhase::Connect, "timed out connecting to http://h/"),
            (TimeoutPhase::ResponseHead, "timed out waiting for the response head from http://h/"),
            (TimeoutPhase::ResponseBody, "timed out reading the response body from http://h/"),
        ] {
            let e = Error::timeout(phase).with_url("http://h/");
            assert_eq!((e.to_string().as_str(), e.timeout_phase()), (text, Some(phase)));
            assert_eq!(e.is_connect(), phase == TimeoutPhase::Connect);
            assert_eq!(e.is_body(), phase == TimeoutPhase::ResponseBody);
        }
        let e = Error::status(http::StatusCode::NOT_FOUND).with_url("http://h/x");
        assert_eq!(e.to_string(), "HTTP status 404 Not Found from http://h/x");
        assert_eq!((e.status_code(), e.is_status()), (Some(http::StatusCode::NOT_FOUND), true));
    }
}
