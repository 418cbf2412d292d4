//! Each call's phases as times, recorded from the client's events (typed, not
//! parsed from text): what `-w` and `--har` report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use switchyard_common::{Error, EventListener};
use switchyard_core::{AttemptId, CallId, ConnectionId, Event, EventKind, Instant, Route, Source};

/// One connect attempt of a call's race.
#[derive(Debug, Clone)]
struct Attempt {
    id: AttemptId,
    route: Route,
    start: Instant,
    tls_start: Option<Instant>,
    tls_end: Option<Instant>,
    end: Option<Instant>,
}

/// What one call went through, on the client's clock.
#[derive(Debug, Clone)]
pub struct CallRecord {
    /// The wall-clock time the call started (HAR's `startedDateTime`).
    pub wall_start: SystemTime,
    /// When the call started, on this process's clock (to place it in a
    /// transfer of several hops).
    pub local_start: std::time::Instant,
    /// When it started, on the client's clock.
    pub start: Instant,
    /// The request as the client was given it (method, URI, headers).
    pub method: http::Method,
    /// The request's URI.
    pub uri: http::Uri,
    /// The request's headers as given (the client adds `Host` and, unless
    /// told otherwise, `User-Agent`).
    pub headers: http::HeaderMap,
    dns_start: Option<Instant>,
    dns_end: Option<Instant>,
    attempts: Vec<Attempt>,
    /// The attempt whose connection carried the call (a new connection).
    winner: Option<usize>,
    /// The connection that carried the last try, and how it was found.
    pub connection: Option<(ConnectionId, Source)>,
    /// How many times the call took a connection: 1, plus one per retry.
    pub tries: u32,
    request_start: Option<Instant>,
    request_end: Option<Instant>,
    /// Request body bytes written.
    pub sent_body: u64,
    response_head: Option<Instant>,
    body_end: Option<Instant>,
    /// Response body bytes read, once the body ended.
    pub body_bytes: Option<u64>,
    end: Option<Instant>,
    /// The failure, if the call failed.
    pub failed: Option<String>,
}

/// A call's phases, in seconds from its start (0 when a phase did not happen:
/// a pooled connection has no DNS, connect or TLS), as curl's `-w` times.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// DNS done.
    pub namelookup: f64,
    /// TCP (or the proxy tunnel) connected.
    pub connect: f64,
    /// TLS done (0 without TLS or on a reused connection).
    pub appconnect: f64,
    /// The request was about to be sent (curl's pretransfer).
    pub pretransfer: f64,
    /// The response head arrived.
    pub starttransfer: f64,
    /// The body ended (or the call did).
    pub total: f64,
}

/// HAR 1.2 `timings`, in milliseconds; `-1` for a phase that does not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HarTimings {
    /// Waiting before DNS or connecting (the pool's queue).
    pub blocked: f64,
    /// DNS.
    pub dns: f64,
    /// TCP connect, TLS included.
    pub connect: f64,
    /// TLS alone.
    pub ssl: f64,
    /// Writing the request.
    pub send: f64,
    /// Waiting for the response head.
    pub wait: f64,
    /// Reading the body.
    pub receive: f64,
}

impl HarTimings {
    /// The entry's `time`: the sum of the phases that apply (`ssl` is inside
    /// `connect`).
    #[must_use]
    pub fn total(&self) -> f64 {
        [self.blocked, self.dns, self.connect, self.send, self.wait, self.receive]
            .iter()
            .filter(|v| **v >= 0.0)
            .sum()
    }
}

fn between(a: Option<Instant>, b: Option<Instant>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        (Some(_), Some(_)) => Some(Duration::ZERO),
        _ => None,
    }
}

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(-1.0, |d| d.as_secs_f64() * 1000.0)
}

impl CallRecord {
    fn winner(&self) -> Option<&Attempt> {
        self.winner.and_then(|i| self.attempts.get(i))
    }

    /// The route of the new connection that carried the call, if it made one.
    #[must_use]
    pub fn new_route(&self) -> Option<&Route> {
        self.winner().map(|a| &a.route)
    }

    /// Connect attempts the call's race started.
    #[must_use]
    pub fn connect_attempts(&self) -> usize {
        self.attempts.len()
    }

    /// When the call's last phase ended, on the client's clock.
    fn last(&self) -> Instant {
        [self.body_end, self.end, self.response_head, self.request_end]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(self.start)
    }

    /// The phases from the call's start.
    #[must_use]
    pub fn phases(&self) -> Phases {
        let since = |t: Option<Instant>| between(Some(self.start), t).map_or(0.0, |d| d.as_secs_f64());
        let w = self.winner();
        let tcp = w.and_then(|a| a.tls_start.or(a.end));
        Phases {
            namelookup: since(self.dns_end),
            connect: since(tcp),
            appconnect: since(w.and_then(|a| a.tls_end)),
            pretransfer: since(self.request_start),
            starttransfer: since(self.response_head),
            total: since(Some(self.last())),
        }
    }

    /// The HAR timings.
    #[must_use]
    pub fn har_timings(&self) -> HarTimings {
        let w = self.winner();
        let dns = between(self.dns_start, self.dns_end);
        let connect = w.and_then(|a| between(Some(a.start), a.end));
        let ssl = w.and_then(|a| between(a.tls_start, a.tls_end));
        let before_request = between(Some(self.start), self.request_start.or(self.end)).unwrap_or_default();
        let blocked = before_request
            .saturating_sub(dns.unwrap_or_default())
            .saturating_sub(connect.unwrap_or_default());
        HarTimings {
            blocked: ms(Some(blocked)),
            dns: ms(dns),
            connect: ms(connect),
            ssl: ms(ssl),
            send: ms(between(self.request_start, self.request_end)).max(0.0),
            wait: ms(between(self.request_end, self.response_head)).max(0.0),
            receive: ms(between(self.response_head, self.body_end.or(self.end))).max(0.0),
        }
    }
}

/// The listener that records every call's phases (give a clone to the
/// client's builder).
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    calls: Arc<Mutex<BTreeMap<CallId, CallRecord>>>,
}

impl Recorder {
    /// One call's record.
    #[must_use]
    pub fn get(&self, call: CallId) -> Option<CallRecord> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).get(&call).cloned()
    }

    /// Every call's record, in the order they started.
    #[must_use]
    pub fn all(&self) -> Vec<(CallId, CallRecord)> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    fn with(&self, call: CallId, f: impl FnOnce(&mut CallRecord)) {
        if let Some(r) = self.calls.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&call) {
            f(r);
        }
    }
}

impl EventListener for Recorder {
    fn call_start(&self, call: CallId, request: &http::request::Parts, at: Instant) {
        let record = CallRecord {
            wall_start: SystemTime::now(),
            local_start: std::time::Instant::now(),
            start: at,
            method: request.method.clone(),
            uri: request.uri.clone(),
            headers: request.headers.clone(),
            dns_start: None,
            dns_end: None,
            attempts: Vec::new(),
            winner: None,
            connection: None,
            tries: 0,
            request_start: None,
            request_end: None,
            sent_body: 0,
            response_head: None,
            body_end: None,
            body_bytes: None,
            end: None,
            failed: None,
        };
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).insert(call, record);
    }

    fn core_event(&self, event: &Event) {
        let Some(call) = event.call else { return };
        let at = event.at;
        self.with(call, |r| match &event.kind {
            EventKind::DnsStart { .. } => {
                r.dns_start.get_or_insert(at);
            }
            EventKind::DnsEnd { .. } | EventKind::DnsFailed { .. } => r.dns_end = Some(at),
            EventKind::ConnectStart { attempt, route } => r.attempts.push(Attempt {
                id: *attempt,
                route: route.clone(),
                start: at,
                tls_start: None,
                tls_end: None,
                end: None,
            }),
            EventKind::SecureConnectStart { attempt } => {
                if let Some(a) = r.attempts.iter_mut().find(|a| a.id == *attempt) {
                    a.tls_start = Some(at);
                }
            }
            EventKind::SecureConnectEnd { attempt, .. } => {
                if let Some(a) = r.attempts.iter_mut().find(|a| a.id == *attempt) {
                    a.tls_end = Some(at);
                }
            }
            EventKind::ConnectEnd { attempt, .. } => {
                if let Some(a) = r.attempts.iter_mut().find(|a| a.id == *attempt) {
                    a.end = Some(at);
                }
            }
            EventKind::ConnectionAcquired { connection, source, .. } => {
                r.tries += 1;
                r.connection = Some((*connection, *source));
                r.winner = if *source == Source::New {
                    // The attempt that connected last before the acquisition
                    // won (a later one may have been kept for the pool).
                    r.attempts
                        .iter()
                        .enumerate()
                        .filter(|(_, a)| a.end.is_some_and(|e| e <= at))
                        .max_by_key(|(_, a)| a.end)
                        .map(|(i, _)| i)
                } else {
                    None
                };
            }
            _ => {}
        });
    }

    fn request_headers_start(&self, call: CallId, at: Instant) {
        self.with(call, |r| r.request_start = Some(at));
    }
    fn request_headers_end(&self, call: CallId, at: Instant) {
        self.with(call, |r| r.request_end = Some(at));
    }
    fn request_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.with(call, |r| {
            r.request_end = Some(at);
            r.sent_body = bytes;
        });
    }
    fn response_headers_end(&self, call: CallId, _status: http::StatusCode, at: Instant) {
        self.with(call, |r| r.response_head = Some(at));
    }
    fn response_body_end(&self, call: CallId, bytes: u64, at: Instant) {
        self.with(call, |r| {
            r.body_end = Some(at);
            r.body_bytes = Some(bytes);
        });
    }
    fn call_end(&self, call: CallId, at: Instant) {
        self.with(call, |r| r.end = Some(at));
    }
    fn call_failed(&self, call: CallId, error: &Error, at: Instant) {
        self.with(call, |r| {
            r.end = Some(at);
            r.failed = Some(format!("{error:#}"));
        });
    }
}
