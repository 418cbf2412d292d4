//! The pool's life as metrics through the [`metrics`] facade (feature
//! `metrics`), named after OpenTelemetry's HTTP client semantic conventions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::StatusCode;
use metrics::{counter, gauge, histogram};
use switchyard_core::{CallId, ConnectionId, Event, EventKind, Instant};

use crate::{Error, EventListener};

/// An [`EventListener`] that records, through the `metrics` facade (so any
/// exporter installed as its recorder: Prometheus, OpenTelemetry, StatsD):
///
/// | metric | kind | attributes |
/// |---|---|---|
/// | `http.client.request.duration` | histogram, seconds | `http.request.method`, `server.address`, `server.port`, `url.scheme`, `http.response.status_code` or `error.type` |
/// | `http.client.connection.duration` | histogram, seconds (first exchange to close) | `server.address`, `server.port`, `url.scheme` |
/// | `http.client.open_connections` | gauge | `http.connection.state` (`idle`, `active`), `server.address`, `server.port`, `url.scheme` |
/// | `switchyard.connection.closes` | counter | `reason`, `server.address`, `server.port`, `url.scheme` |
/// | `switchyard.route.ejections` | counter | `server.address`, `server.port`, `url.scheme` |
///
/// Connections are counted from their first exchange (a connection no call
/// ever used, such as a warm one still waiting, is not counted yet). The
/// request duration runs from the call's start to its response head (or
/// its failure), as `call_end` reports it.
///
/// ```
/// # fn f() -> Result<(), switchyard_common::Error> {
/// # use switchyard_common::metrics;
/// // Then: `Client::builder().event_listener(metrics::MetricsListener::new())`
/// // on any adapter (its `metrics` module), with a recorder installed
/// // (the `metrics` crate's `set_global_recorder`).
/// let listener = metrics::MetricsListener::new();
/// # let _ = listener; Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MetricsListener {
    calls: Mutex<HashMap<CallId, CallState>>,
    conns: Mutex<HashMap<ConnectionId, ConnState>>,
}

#[derive(Debug)]
struct CallState {
    start: Instant,
    method: String,
    server: Arc<Server>,
    status: Option<StatusCode>,
}

#[derive(Debug)]
struct ConnState {
    since: Instant,
    server: Arc<Server>,
    /// Exchanges it carries now.
    active: u32,
}

/// The conventions' server attributes.
#[derive(Debug)]
struct Server {
    address: String,
    port: String,
    scheme: &'static str,
}

impl Server {
    fn labels(&self) -> [(&'static str, String); 3] {
        [
            ("server.address", self.address.clone()),
            ("server.port", self.port.clone()),
            ("url.scheme", self.scheme.to_owned()),
        ]
    }
}

impl MetricsListener {
    /// A listener with nothing recorded yet.
    #[must_use]
    pub fn new() -> MetricsListener {
        MetricsListener::default()
    }

    fn end(&self, call: CallId, at: Instant, outcome: Result<(), &Error>) {
        let Some(c) = lock(&self.calls).remove(&call) else { return };
        let seconds = at.saturating_duration_since(c.start).as_secs_f64();
        let mut labels: Vec<(&'static str, String)> = c.server.labels().into();
        labels.push(("http.request.method", c.method));
        match (outcome, c.status) {
            (Ok(()), Some(status)) => labels.push(("http.response.status_code", status.as_u16().to_string())),
            (Ok(()), None) => {}
            (Err(e), _) => labels.push(("error.type", error_type(e).to_owned())),
        }
        histogram!("http.client.request.duration", &labels).record(seconds);
    }

    fn open(server: &Server, state: &'static str, delta: f64) {
        let mut labels: Vec<(&'static str, String)> = server.labels().into();
        labels.push(("http.connection.state", state.to_owned()));
        gauge!("http.client.open_connections", &labels).increment(delta);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A short, low-cardinality name for the failure (the conventions'
/// `error.type`).
fn error_type(e: &Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_dns() {
        "dns"
    } else if e.is_tls() {
        "tls"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() {
        "body"
    } else if e.is_shutdown() {
        "shutdown"
    } else {
        "other"
    }
}

impl EventListener for MetricsListener {
    fn call_start(&self, call: CallId, request: &http::request::Parts, at: Instant) {
        let uri = &request.uri;
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let server = Server {
            address: uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }).to_string(),
            scheme: if https { "https" } else { "http" },
        };
        let state = CallState {
            start: at,
            method: request.method.to_string(),
            server: Arc::new(server),
            status: None,
        };
        lock(&self.calls).insert(call, state);
    }

    fn response_headers_end(&self, call: CallId, status: StatusCode, _at: Instant) {
        if let Some(c) = lock(&self.calls).get_mut(&call) {
            c.status = Some(status);
        }
    }

    fn call_end(&self, call: CallId, at: Instant) {
        self.end(call, at, Ok(()));
    }

    fn call_failed(&self, call: CallId, error: &Error, at: Instant) {
        self.end(call, at, Err(error));
    }

    fn core_event(&self, event: &Event) {
        match &event.kind {
            EventKind::ConnectionAcquired { connection, .. } => {
                let Some(call) = event.call else { return };
                let Some(server) = lock(&self.calls).get(&call).map(|c| Arc::clone(&c.server)) else {
                    return;
                };
                let mut conns = lock(&self.conns);
                let c = conns.entry(*connection).or_insert_with(|| {
                    MetricsListener::open(&server, "idle", 1.0);
                    ConnState { since: event.at, server, active: 0 }
                });
                c.active += 1;
                if c.active == 1 {
                    MetricsListener::open(&c.server, "idle", -1.0);
                    MetricsListener::open(&c.server, "active", 1.0);
                }
            }
            EventKind::ConnectionReleased { connection } => {
                if let Some(c) = lock(&self.conns).get_mut(connection) {
                    if c.active > 0 {
                        c.active -= 1;
                        if c.active == 0 {
                            MetricsListener::open(&c.server, "active", -1.0);
                            MetricsListener::open(&c.server, "idle", 1.0);
                        }
                    }
                }
            }
            EventKind::ConnectionClosed { connection, reason } => {
                let Some(c) = lock(&self.conns).remove(connection) else { return };
                MetricsListener::open(&c.server, if c.active > 0 { "active" } else { "idle" }, -1.0);
                let labels = c.server.labels();
                let seconds = event.at.saturating_duration_since(c.since).as_secs_f64();
                histogram!("http.client.connection.duration", &labels).record(seconds);
                let mut labels: Vec<(&'static str, String)> = labels.into();
                labels.push(("reason", reason.to_string()));
                counter!("switchyard.connection.closes", &labels).increment(1);
            }
            EventKind::RouteEjected { route, .. } => {
                let a = route.address();
                let host = a.host().to_string();
                let server = Server {
                    address: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
                    port: a.port().to_string(),
                    scheme: if a.is_https() { "https" } else { "http" },
                };
                counter!("switchyard.route.ejections", &server.labels()).increment(1);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use switchyard_core::{CloseReason, IdAllocator, Source};

    fn event(at: u64, call: Option<CallId>, kind: EventKind) -> Event {
        Event { at: Instant::from_millis(at), call, kind, unverified_tls: false }
    }

    type Seen = std::collections::BTreeMap<(String, Vec<String>), DebugValue>;

    /// Adds what was recorded since the last look to `seen` (the debugging
    /// recorder's snapshot hands out each value once and resets it).
    fn look(recorder: &DebuggingRecorder, seen: &mut Seen) {
        for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> =
                key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            let entry = seen.entry((key.name().to_owned(), labels));
            match (entry, value) {
                (std::collections::btree_map::Entry::Vacant(v), value) => {
                    v.insert(value);
                }
                (std::collections::btree_map::Entry::Occupied(mut o), value) => match (o.get_mut(), value) {
                    (DebugValue::Counter(a), DebugValue::Counter(b)) => *a += b,
                    (DebugValue::Gauge(a), DebugValue::Gauge(b)) => *a = (a.0 + b.0).into(),
                    (DebugValue::Histogram(a), DebugValue::Histogram(b)) => a.extend(b),
                    (a, b) => panic!("{a:?} then {b:?}"),
                },
            }
        }
    }

    fn find<'a>(seen: &'a Seen, name: &str, label: &str) -> &'a DebugValue {
        seen.iter()
            .find(|((n, l), _)| n == name && l.iter().any(|x| x == label))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("{name} {label}: {seen:?}"))
    }

    #[test]
    fn a_call_and_its_connection_are_recorded_in_the_conventions_names() {
        let recorder = DebuggingRecorder::new();
        let mut ids = IdAllocator::default();
        let (c1, c2, k) = (ids.next_call(), ids.next_call(), ids.next_connection());
        let l = MetricsListener::new();
        let get = http::Request::get("https://api.test/x").body(()).unwrap().into_parts().0;
        metrics::with_local_recorder(&recorder, || {
            l.call_start(c1, &get, Instant::from_millis(0));
            l.core_event(&event(
                10,
                Some(c1),
                EventKind::ConnectionAcquired { connection: k, source: Source::New, exchange: 0 },
            ));
            l.response_headers_end(c1, StatusCode::OK, Instant::from_millis(250));
            l.call_end(c1, Instant::from_millis(250));
            l.core_event(&event(260, Some(c1), EventKind::ConnectionReleased { connection: k }));
        });
        let mut all = Seen::new();
        look(&recorder, &mut all);
        assert_eq!(
            find(&all, "http.client.request.duration", "http.response.status_code=200"),
            &DebugValue::Histogram(vec![0.25.into()])
        );
        let row = all.keys().find(|k| k.0 == "http.client.request.duration").unwrap();
        assert_eq!(
            row.1,
            [
                "http.request.method=GET",
                "http.response.status_code=200",
                "server.address=api.test",
                "server.port=443",
                "url.scheme=https"
            ]
        );
        assert_eq!(
            find(&all, "http.client.open_connections", "http.connection.state=idle"),
            &DebugValue::Gauge(1.0.into())
        );
        assert_eq!(
            find(&all, "http.client.open_connections", "http.connection.state=active"),
            &DebugValue::Gauge(0.0.into())
        );
        // A second call on it, failing, then the close.
        metrics::with_local_recorder(&recorder, || {
            l.call_start(c2, &get, Instant::from_millis(1000));
            l.core_event(&event(
                1000,
                Some(c2),
                EventKind::ConnectionAcquired { connection: k, source: Source::Pooled, exchange: 1 },
            ));
        });
        look(&recorder, &mut all);
        assert_eq!(
            find(&all, "http.client.open_connections", "http.connection.state=active"),
            &DebugValue::Gauge(1.0.into())
        );
        let timeout = Error::timeout(crate::TimeoutPhase::ResponseHead);
        metrics::with_local_recorder(&recorder, || {
            l.call_failed(c2, &timeout, Instant::from_millis(1500));
            l.core_event(&event(1500, Some(c2), EventKind::ConnectionReleased { connection: k }));
            l.core_event(&event(
                2010,
                None,
                EventKind::ConnectionClosed { connection: k, reason: CloseReason::IdleTimeout },
            ));
        });
        look(&recorder, &mut all);
        assert_eq!(
            find(&all, "http.client.request.duration", "error.type=timeout"),
            &DebugValue::Histogram(vec![0.5.into()])
        );
        assert_eq!(
            find(&all, "http.client.connection.duration", "server.address=api.test"),
            &DebugValue::Histogram(vec![2.0.into()]),
            "from its first exchange (10 ms) to its close"
        );
        for state in ["idle", "active"] {
            assert_eq!(
                find(&all, "http.client.open_connections", &format!("http.connection.state={state}")),
                &DebugValue::Gauge(0.0.into())
            );
        }
        let closes =
            find(&all, "switchyard.connection.closes", &format!("reason={}", CloseReason::IdleTimeout));
        assert_eq!(closes, &DebugValue::Counter(1));
        // Nothing is left behind.
        assert!(lock(&l.calls).is_empty() && lock(&l.conns).is_empty());
    }
}
