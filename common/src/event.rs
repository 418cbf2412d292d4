//! Events: the core's (proxy selection, DNS, connect attempts, TLS, acquisition,
//! release, close with reason, retries) and the exchange's own (request and
//! response heads and bodies, call end), delivered to an [`EventListener`] and to
//! `tracing` at debug level. Listeners run outside the client's lock.
//!
//! # The rules listeners can rely on
//!
//! - **Order** (OkHttp's): `call_start`, `proxy_select_start`/`_end`, `dns_start`/
//!   `_end`, `connect_start`, `secure_connect_start`/`_end`, `connect_end` (for a
//!   new connection), `connection_acquired` (its `exchange=N` is the exchange's
//!   ordinal on that connection: 0 for a new one), `request_headers_start`/`_end`,
//!   `request_body_start`/`_end` (requests with a body), `response_headers_start`/
//!   `_end`, `response_body_start`/`_end`, `connection_released`, `call_end` (or
//!   `call_failed`). A connection that will carry no new exchange says
//!   `no_new_exchanges` before its `connection_released`, then `connection_closed`.
//!   A retry shows as `retry_decision`, then the next `connection_acquired`; a
//!   retry reuses the call's DNS answers (no second `dns_start`).
//! - **Delivery**: one thread delivers at a time, in the order events happened;
//!   every event of a call has reached the listener when `send` returns (the ones
//!   up to the response head) and when the body's end is handed out (the rest),
//!   whichever thread made them.

use std::sync::{Arc, Mutex};

use http::StatusCode;
use switchyard_core::{CallId, Event, Instant};

use crate::Error;

/// Receives a call's events. Every method does nothing by default; implement the
/// ones you need. Keep them fast: they run on the task that made the progress.
///
/// ```
/// # use switchyard_common::EventListener;
/// # use switchyard_core::{CallId, Event, Instant};
/// // `use switchyard_tokio::{CallId, Event, EventListener, Instant};` (or your adapter's)
/// struct Printer;
/// impl EventListener for Printer {
///     fn core_event(&self, event: &Event) {
///         println!("{:?} {:?}", event.at, event.kind);
///     }
///     fn response_headers_end(&self, call: CallId, status: http::StatusCode, _at: Instant) {
///         println!("{call}: {status}");
///     }
/// }
/// // Then: `Client::builder().event_listener(Printer)` on any adapter.
/// # let call = switchyard_core::IdAllocator::default().next_call();
/// # Printer.call_end(call, Instant::ZERO);
/// ```
#[allow(unused_variables)]
pub trait EventListener: Send + Sync + 'static {
    /// A call starts.
    fn call_start(&self, call: CallId, request: &http::request::Parts, at: Instant) {}
    /// An event from the core: proxy selection, DNS, connect start/end/failed,
    /// secure connect, connection acquired/released/closed, no new exchanges,
    /// retry decisions.
    fn core_event(&self, event: &Event) {}
    /// The request head is about to be written (after `connection_acquired`).
    fn request_headers_start(&self, call: CallId, at: Instant) {}
    /// The request head was written.
    fn request_headers_end(&self, call: CallId, at: Instant) {}
    /// The request body is about to be written (requests with a body only).
    fn request_body_start(&self, call: CallId, at: Instant) {}
    /// The request body was written (`bytes` long).
    fn request_body_end(&self, call: CallId, bytes: u64, at: Instant) {}
    /// The request is written; the client waits for the response head.
    fn response_headers_start(&self, call: CallId, at: Instant) {}
    /// The response head arrived.
    fn response_headers_end(&self, call: CallId, status: StatusCode, at: Instant) {}
    /// The response body is about to be read (responses with a body to read).
    fn response_body_start(&self, call: CallId, at: Instant) {}
    /// The response body ended (`bytes` long).
    fn response_body_end(&self, call: CallId, bytes: u64, at: Instant) {}
    /// The call succeeded (its response head arrived).
    fn call_end(&self, call: CallId, at: Instant) {}
    /// The call failed.
    fn call_failed(&self, call: CallId, error: &Error, at: Instant) {}
}

/// The listeners a builder collected, as one: none, the one, or a fan-out
/// that tells each, in the order they were added.
pub(crate) fn fan_out(mut listeners: Vec<Arc<dyn EventListener>>) -> Option<Arc<dyn EventListener>> {
    match listeners.len() {
        0 => None,
        1 => listeners.pop(),
        _ => Some(Arc::new(FanOut(listeners))),
    }
}

/// Several listeners as one.
struct FanOut(Vec<Arc<dyn EventListener>>);

impl EventListener for FanOut {
    fn call_start(&self, call: CallId, request: &http::request::Parts, at: Instant) {
        self.0.iter().for_each(|l| l.call_start(call, request, at));
    }
    fn core_event(&self, event: &Event) {
        self.0.iter().for_each(|l| l.core_event(event));
    }
    fn request_headers_start(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.request_headers_start(call, at));
    }
    fn request_headers_end(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.request_headers_end(call, at));
    }
    fn request_body_start(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.request_body_start(call, at));
    }
    fn request_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.0.iter().for_each(|l| l.request_body_end(call, bytes, at));
    }
    fn response_headers_start(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.response_headers_start(call, at));
    }
    fn response_headers_end(&self, call: CallId, status: StatusCode, at: Instant) {
        self.0.iter().for_each(|l| l.response_headers_end(call, status, at));
    }
    fn response_body_start(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.response_body_start(call, at));
    }
    fn response_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.0.iter().for_each(|l| l.response_body_end(call, bytes, at));
    }
    fn call_end(&self, call: CallId, at: Instant) {
        self.0.iter().for_each(|l| l.call_end(call, at));
    }
    fn call_failed(&self, call: CallId, error: &Error, at: Instant) {
        self.0.iter().for_each(|l| l.call_failed(call, error, at));
    }
}

/// The request head is written: `request_headers_end`, then what comes next
/// in the order listeners rely on — `request_body_start` when a body follows,
/// else `response_headers_start` (the request is complete; the head is
/// awaited). The same on HTTP/1.1 and HTTP/2.
pub fn request_head_written(l: &dyn EventListener, call: CallId, at: Instant, has_body: bool) {
    l.request_headers_end(call, at);
    if has_body {
        l.request_body_start(call, at);
    } else {
        l.response_headers_start(call, at);
    }
}

/// The request body is written (`bytes` long): `request_body_end`, then
/// `response_headers_start`.
pub fn request_body_written(l: &dyn EventListener, call: CallId, bytes: u64, at: Instant) {
    l.request_body_end(call, bytes, at);
    l.response_headers_start(call, at);
}

/// A listener that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopListener;
impl EventListener for NoopListener {}

/// One recorded event: when, for which call (none for pool-wide events), what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// When, on the client's clock.
    pub at: Instant,
    /// The call, if the event belongs to one.
    pub call: Option<CallId>,
    /// The event's name (`dns_start`, `connect_end`, `connection_acquired`, …).
    pub name: &'static str,
    /// Details, human-readable.
    pub detail: String,
}

/// A listener that records every event in order, for tests and timelines.
///
/// ```
/// # use switchyard_common::{EventListener, EventLog};
/// # use switchyard_core::{CallId, Instant};
/// let log = EventLog::default(); // give a clone to `ClientBuilder::event_listener`
/// # let call: CallId = switchyard_core::IdAllocator::default().next_call();
/// // … calls …
/// # log.call_end(call, Instant::ZERO);
/// assert_eq!(log.events()[0].name, "call_end");
/// for e in log.events() {
///     println!("{:?} {} {}", e.call, e.name, e.detail);
/// }
/// ```
#[derive(Debug, Default, Clone)]
pub struct EventLog {
    events: Arc<Mutex<Vec<Recorded>>>,
}

impl EventLog {
    /// Everything recorded so far.
    #[must_use]
    pub fn events(&self) -> Vec<Recorded> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
    /// The names of one call's events, in order.
    #[must_use]
    pub fn names_for(&self, call: CallId) -> Vec<&'static str> {
        self.events().into_iter().filter(|e| e.call == Some(call)).map(|e| e.name).collect()
    }
    /// Forgets everything.
    pub fn clear(&self) {
        if let Ok(mut e) = self.events.lock() {
            e.clear();
        }
    }
    fn push(&self, at: Instant, call: Option<CallId>, name: &'static str, detail: String) {
        if let Ok(mut e) = self.events.lock() {
            e.push(Recorded { at, call, name, detail });
        }
    }
}

/// The snake_case name of a core event and its details. An event about a
/// connection whose certificate was not verified
/// (`danger_accept_invalid_certificates`) says so at the end of its details.
#[must_use]
pub fn describe(event: &Event) -> (&'static str, String) {
    let (name, mut detail) = describe_kind(event);
    if event.unverified_tls {
        detail.push_str(" [certificate NOT verified]");
    }
    (name, detail)
}

/// How an event says where a DNS answer came from (nothing for a lookup).
fn dns_source(source: switchyard_core::DnsSource) -> &'static str {
    match source {
        switchyard_core::DnsSource::Cache => " (from cache)",
        switchyard_core::DnsSource::Shared => " (shared lookup)",
        _ => "",
    }
}

fn describe_kind(event: &Event) -> (&'static str, String) {
    use switchyard_core::EventKind as K;
    match &event.kind {
        K::ProxySelectStart { address } => ("proxy_select_start", address.to_string()),
        K::ProxySelectEnd { proxies, reason } => {
            let list = proxies.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            match reason {
                Some(why) => ("proxy_select_end", format!("{list} ({why})")),
                None => ("proxy_select_end", list),
            }
        }
        K::DnsStart { host, source, .. } => ("dns_start", format!("{host}{}", dns_source(*source))),
        K::DnsEnd { host, addresses, family, source, .. } => {
            let family = match family {
                Some(switchyard_core::Family::V6) => " (AAAA)",
                Some(switchyard_core::Family::V4) => " (A)",
                None => "",
            };
            let addresses = addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            ("dns_end", format!("{host}{family} -> {addresses}{}", dns_source(*source)))
        }
        K::DnsFailed { host, error, source, .. } => {
            ("dns_failed", format!("{host}: {error}{}", dns_source(*source)))
        }
        K::ConnectStart { attempt, route } => ("connect_start", format!("{attempt} {route}")),
        K::SecureConnectStart { attempt } => ("secure_connect_start", attempt.to_string()),
        K::SecureConnectEnd { attempt, protocol } => {
            ("secure_connect_end", format!("{attempt} alpn={protocol}"))
        }
        K::ConnectEnd { attempt, route, protocol } => {
            ("connect_end", format!("{attempt} {route} {protocol}"))
        }
        K::ConnectFailed { attempt, route, error } => {
            ("connect_failed", format!("{attempt} {route}: {error}"))
        }
        K::ConnectCancelled { attempt, route, reason } => {
            ("connect_cancelled", format!("{attempt} {route} ({reason:?})"))
        }
        K::PooledConnectionTaken { connection } => ("pooled_connection_taken", connection.to_string()),
        K::AttemptKeptForPool { attempt, route } => ("attempt_kept_for_pool", format!("{attempt} {route}")),
        K::RouteEjected { route, failures, backoff } => (
            "route_ejected",
            format!("{route} after {failures} failures in a row, for {} ms", backoff.as_millis()),
        ),
        K::RouteRestored { route } => ("route_restored", route.to_string()),
        K::ConnectionAcquired { connection, source, exchange } => {
            ("connection_acquired", format!("{connection} {source:?} exchange={exchange}"))
        }
        K::ConnectionReleased { connection } => ("connection_released", connection.to_string()),
        K::ConnectionClosed { connection, reason } => ("connection_closed", format!("{connection} {reason}")),
        K::NoNewExchanges { connection, reason } => ("no_new_exchanges", format!("{connection} {reason}")),
        K::RetryDecision { connection, decision } => ("retry_decision", format!("{connection} {decision:?}")),
        K::WarmReadiness { address, readiness, open, wanted, last_error, next_retry } => {
            let mut d = format!("{address}: {readiness} ({open}/{wanted} open)");
            if let Some(t) = next_retry {
                d.push_str(&format!(", retry in {} ms", (*t - event.at).as_millis()));
            }
            if let Some(e) = last_error {
                d.push_str(&format!(", last error: {e}"));
            }
            ("warm_readiness", d)
        }
        other => ("other", format!("{other:?}")),
    }
}

impl EventListener for EventLog {
    fn call_start(&self, call: CallId, request: &http::request::Parts, at: Instant) {
        self.push(at, Some(call), "call_start", format!("{} {}", request.method, request.uri));
    }
    fn core_event(&self, event: &Event) {
        let (name, detail) = describe(event);
        self.push(event.at, event.call, name, detail);
    }
    fn request_headers_start(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "request_headers_start", String::new());
    }
    fn request_headers_end(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "request_headers_end", String::new());
    }
    fn request_body_start(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "request_body_start", String::new());
    }
    fn response_headers_start(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "response_headers_start", String::new());
    }
    fn response_body_start(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "response_body_start", String::new());
    }
    fn request_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.push(at, Some(call), "request_body_end", format!("{bytes} bytes"));
    }
    fn response_headers_end(&self, call: CallId, status: StatusCode, at: Instant) {
        self.push(at, Some(call), "response_headers_end", status.to_string());
    }
    fn response_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.push(at, Some(call), "response_body_end", format!("{bytes} bytes"));
    }
    fn call_end(&self, call: CallId, at: Instant) {
        self.push(at, Some(call), "call_end", String::new());
    }
    fn call_failed(&self, call: CallId, error: &Error, at: Instant) {
        self.push(at, Some(call), "call_failed", error.to_string());
    }
}

/// The `tracing` span of one call: `call`, under `target` (each adapter's
/// crate name), with the method, the URI without userinfo, and empty `call` /
/// `status` fields the call fills in ([`call_traced!`](crate::call_traced!)). The adapters' `send`
/// runs inside it.
#[macro_export]
macro_rules! call_span {
    ($target:expr, $method:expr, $uri:expr) => {
        $crate::__tracing::info_span!(
            target: $target,
            "call",
            method = %$method,
            uri = %$crate::without_userinfo($uri),
            call = $crate::__tracing::field::Empty,
            status = $crate::__tracing::field::Empty,
        )
    };
}

/// Records how a call's `send` ended in its span (a `&tracing::Span`) from
/// its result (a `&Result<http::Response<_>, Error>`): the status, then an
/// event under `target` (each adapter's crate name, as its span's), `debug`
/// for a response and `warn` with the whole error chain for a failure. The
/// call id is in the span from the call's start (recorded once).
#[macro_export]
macro_rules! call_traced {
    ($target:expr, $span:expr, $result:expr) => {
        match $result {
            Ok(response) => {
                let status = response.status().as_u16();
                $span.record("status", status);
                $crate::__tracing::debug!(target: $target, parent: $span, status, "response head");
            }
            Err(e) => {
                $crate::__tracing::warn!(target: $target, parent: $span, error = %format_args!("{e:#}"), "call failed");
            }
        }
    };
}

/// Where switchyard's `debug` events go: each adapter's crate name as their
/// `tracing` target (`switchyard_tokio`, …, as its call spans), so that
/// `RUST_LOG=switchyard_tokio=debug` shows a call's connection timeline and
/// its end. Built with [`log_sites!`](crate::log_sites!) (a target is a
/// constant of each event's call site, hence functions made per target);
/// [`LogSites::DEFAULT`] is target `switchyard`.
#[derive(Clone, Copy)]
pub struct LogSites {
    /// The target.
    pub target: &'static str,
    /// Whether `debug` events of this target are wanted.
    pub enabled: fn() -> bool,
    /// One core event (its name and its detail), inside the call's span when
    /// there is one.
    pub core_event: fn(&Event, Option<&tracing::Span>, &'static str, &str),
    /// A call's end (its body read to the end, or dropped), in its span, with
    /// the body's length so far.
    pub call_end: fn(&tracing::Span, u64),
}

impl std::fmt::Debug for LogSites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSites").field("target", &self.target).finish_non_exhaustive()
    }
}

impl LogSites {
    /// Target `switchyard` (a hub built without an adapter's sites).
    pub const DEFAULT: LogSites = crate::log_sites!("switchyard");
}

/// A [`LogSites`] for `target` (a string literal: each adapter's crate name).
///
/// ```
/// static SITES: switchyard_common::LogSites = switchyard_common::log_sites!("my_adapter");
/// assert_eq!(SITES.target, "my_adapter");
/// ```
#[macro_export]
macro_rules! log_sites {
    ($target:literal) => {
        $crate::LogSites {
            target: $target,
            enabled: || $crate::__tracing::enabled!(target: $target, $crate::__tracing::Level::DEBUG),
            core_event: |e, span, name, detail| match (e.call, span) {
                (Some(call), Some(span)) => $crate::__tracing::debug!(
                    target: $target,
                    parent: span,
                    event = name,
                    call = %call,
                    at = %e.at,
                    unverified_tls = e.unverified_tls,
                    "{detail}"
                ),
                (Some(call), None) => $crate::__tracing::debug!(
                    target: $target,
                    event = name,
                    call = %call,
                    at = %e.at,
                    unverified_tls = e.unverified_tls,
                    "{detail}"
                ),
                (None, _) => $crate::__tracing::debug!(
                    target: $target,
                    event = name,
                    at = %e.at,
                    unverified_tls = e.unverified_tls,
                    "{detail}"
                ),
            },
            call_end: |span, bytes| $crate::__tracing::debug!(target: $target, parent: span, bytes, "call end"),
        }
    };
}
