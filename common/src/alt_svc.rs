//! What a client learned from `Alt-Svc` fields (RFC 7838): per https origin,
//! the HTTP/3 alternatives its responses advertised, kept for the client's
//! life in the core's bounded [`AltSvcCache`] (1 024 origins, least recently
//! used evicted). A call to an origin with a fresh `h3` alternative on the
//! same host gets an Address that offers HTTP/3 beside TCP on the advertised
//! port: the pool races QUIC against TCP for it ([`HttpVersion::Http3`](crate::HttpVersion::Http3)'s race).
//!
//! Learned only where it is safe to: over https, from a response that came
//! directly (through a proxy the field could be the proxy's doing, and
//! QUIC would not go through it anyway).
//!
//! HTTPS records (RFC 9460) teach the same thing from DNS: a client whose
//! resolver can ask for them ([`AsyncResolve::service_bindings`](crate::AsyncResolve::service_bindings), hickory's)
//! asks once per https origin named by a domain — the name itself on port 443,
//! `_PORT._https.NAME` on another (RFC 9460 §9.1) — in the background (the
//! first call does not wait for it), and an endpoint that offers `h3` on the
//! origin's own name counts as an alternative until the records' time to
//! live ends. Names without one are remembered for 5 minutes, failed queries
//! for 1; at most 1 024 names are kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use switchyard_core::alt_svc::{AltSvc, AltSvcCache, Origin};
use switchyard_core::{Host, Scheme};

/// A client's `Alt-Svc` memory (see the module docs).
#[derive(Debug)]
pub struct AltSvcMemory {
    cache: Mutex<AltSvcCache>,
    /// Whether anything was ever learned: until then, a call pays one load.
    any: AtomicBool,
    /// The cache's clock starts here.
    epoch: Instant,
    /// What HTTPS records said, per query name.
    records: Mutex<BTreeMap<String, Asked>>,
    /// The resolver cannot ask for HTTPS records: never try again.
    no_records: AtomicBool,
}

/// Where a name's HTTPS query stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    /// Asked; no answer yet.
    Pending,
    /// Answered: the `h3` port on the name itself, if any, until then.
    Known { h3: Option<u16>, until: switchyard_core::Instant },
}

/// How many names' HTTPS answers are kept.
const RECORDS_KEPT: usize = 1024;
/// How long a name without an `h3` endpoint is not asked again.
const NOTHING_FOR: Duration = Duration::from_secs(300);
/// How long after a failed query a name is not asked again.
const FAILED_FOR: Duration = Duration::from_secs(60);

impl Default for AltSvcMemory {
    fn default() -> AltSvcMemory {
        AltSvcMemory {
            cache: Mutex::default(),
            any: AtomicBool::new(false),
            epoch: Instant::now(),
            records: Mutex::default(),
            no_records: AtomicBool::new(false),
        }
    }
}

/// The name an origin's HTTPS records are asked under (RFC 9460 §9.1): the
/// host on port 443, `_PORT._https.HOST` on another; none for an IP.
fn query_name(origin: &Origin) -> Option<String> {
    if origin.host().ip().is_some() {
        return None;
    }
    let host = origin.host().to_string();
    Some(if origin.port() == 443 { host } else { format!("_{}._https.{host}", origin.port()) })
}

/// An https URI's origin, as the cache keys it.
fn origin(uri: &http::Uri) -> Option<Origin> {
    if !uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https")) {
        return None;
    }
    let host = Host::parse(uri.host()?).ok()?;
    Some(Origin::new(Scheme::Https, host, uri.port_u16().unwrap_or(443)))
}

impl AltSvcMemory {
    fn now(&self) -> switchyard_core::Instant {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        switchyard_core::Instant::from_millis(ms)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, AltSvcCache> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Learns what `headers` (a response to `uri`) say: the `Alt-Svc`
    /// fields, one list however many lines carry it, their `ma` counted
    /// from now minus the response's `Age`. A field that does not parse is
    /// ignored whole; `clear` forgets the origin's alternatives.
    pub fn learn(&self, uri: &http::Uri, headers: &http::HeaderMap) {
        let mut fields = headers.get_all(http::header::ALT_SVC).iter();
        let Some(first) = fields.next() else { return };
        let Some(origin) = origin(uri) else { return };
        let mut value = first.as_bytes().to_vec();
        for more in fields {
            value.extend_from_slice(b", ");
            value.extend_from_slice(more.as_bytes());
        }
        let Ok(field) = AltSvc::parse(&value) else { return };
        let age = headers
            .get(http::header::AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        let now = self.now();
        self.cache().learn(&origin, &field, now, age);
        self.any.store(true, Ordering::Relaxed);
    }

    /// The UDP port of a fresh `h3` alternative `uri`'s origin advertised on
    /// its own host, if any.
    #[must_use]
    pub fn h3_port(&self, uri: &http::Uri) -> Option<u16> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let origin = origin(uri)?;
        let now = self.now();
        let cache = self.cache();
        let port = cache
            .alternatives(&origin, now)
            .find(|(a, _)| a.protocol() == b"h3" && a.host().is_none_or(|h| h == origin.host()))
            .map(|(a, _)| a.port());
        drop(cache);
        port.or_else(|| match self.records().get(&query_name(&origin)?) {
            Some(Asked::Known { h3: Some(port), until }) if *until > now => Some(*port),
            _ => None,
        })
    }

    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Asked>> {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The name to ask HTTPS records for before a call to `uri`, if it is
    /// time to (an https origin named by a domain, not asked lately); it is
    /// marked asked.
    #[must_use]
    pub fn should_ask(&self, uri: &http::Uri) -> Option<String> {
        if self.no_records.load(Ordering::Relaxed) {
            return None;
        }
        let name = query_name(&origin(uri)?)?;
        let host = name.as_str();
        let now = self.now();
        let mut records = self.records();
        match records.get(host) {
            Some(Asked::Pending) => return None,
            Some(Asked::Known { until, .. }) if *until > now => return None,
            _ => {}
        }
        if records.len() >= RECORDS_KEPT && !records.contains_key(host) {
            records.retain(|_, a| matches!(a, Asked::Known { until, .. } if *until > now));
            if records.len() >= RECORDS_KEPT {
                let evicted = records.keys().next().cloned();
                if let Some(k) = evicted {
                    records.remove(&k);
                }
            }
        }
        records.insert(host.to_owned(), Asked::Pending);
        Some(name)
    }

    /// The resolver cannot ask for HTTPS records: `host` is no longer
    /// pending and no name is asked again.
    pub fn cannot_ask(&self, host: &str) {
        self.no_records.store(true, Ordering::Relaxed);
        self.records().remove(host);
    }

    /// What the HTTPS query for `name` (as [`should_ask`](Self::should_ask)
    /// gave it) answered.
    pub fn learn_records(&self, name: &str, answer: std::io::Result<crate::HttpsRecords>) {
        let host = name;
        let now = self.now();
        let origin_port = name
            .strip_prefix('_')
            .and_then(|rest| rest.split_once("._https."))
            .and_then(|(port, _)| port.parse().ok())
            .unwrap_or(443);
        let known = match answer {
            Ok(found) => {
                let bindings = switchyard_core::service_binding::endpoints(origin_port, &found.records);
                let h3 = bindings.first_speaking(b"h3").filter(|e| e.host.is_none()).map(|e| e.port);
                let lasts = if h3.is_some() { found.ttl.unwrap_or(NOTHING_FOR) } else { NOTHING_FOR };
                Asked::Known { h3, until: now.saturating_add(lasts) }
            }
            Err(_) => Asked::Known { h3: None, until: now.saturating_add(FAILED_FOR) },
        };
        if matches!(known, Asked::Known { h3: Some(_), .. }) {
            self.any.store(true, Ordering::Relaxed);
        }
        if let Some(entry) = self.records().get_mut(host) {
            *entry = known;
        }
    }

    /// Forgets everything learned (a network change: alternatives that are
    /// not marked `persist` no longer hold).
    pub fn network_changed(&self) {
        self.cache().network_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> http::HeaderMap {
        fields.iter().map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn an_h3_alternative_on_the_same_host_is_used_and_others_are_not() {
        let m = AltSvcMemory::default();
        let uri: http::Uri = "https://a.test:8443/x".parse().unwrap();
        assert_eq!(m.h3_port(&uri), None);
        m.learn(&uri, &headers(&[("alt-svc", r#"h3="other.test:1", h2=":2", h3=":9443"; ma=60"#)]));
        assert_eq!(m.h3_port(&uri), Some(9443), "another host's alternative is skipped");
        // Another origin (port) learned nothing.
        assert_eq!(m.h3_port(&"https://a.test/".parse().unwrap()), None);
        m.learn(&uri, &headers(&[("alt-svc", "clear")]));
        assert_eq!(m.h3_port(&uri), None);
    }

    #[test]
    fn https_records_are_asked_once_per_name_and_their_h3_port_used() {
        use switchyard_core::service_binding::{ServiceBinding, SvcParam};
        let m = AltSvcMemory::default();
        let uri: http::Uri = "https://a.test/".parse().unwrap();
        assert_eq!(m.should_ask(&"https://10.0.0.1/".parse().unwrap()), None, "an IP has no records");
        let other_port: http::Uri = "https://a.test:8443/".parse().unwrap();
        assert_eq!(m.should_ask(&other_port).as_deref(), Some("_8443._https.a.test"), "RFC 9460 §9.1");
        assert_eq!(m.should_ask(&"http://a.test/".parse().unwrap()), None);
        assert_eq!(m.should_ask(&uri).as_deref(), Some("a.test"));
        assert_eq!(m.should_ask(&uri), None, "pending: not asked twice");
        let record = ServiceBinding {
            priority: 1,
            target: ".".into(),
            params: vec![SvcParam::Alpn(vec![b"h3".to_vec()]), SvcParam::Port(4433)],
        };
        let found = crate::HttpsRecords { records: vec![record], ttl: Some(Duration::from_secs(120)) };
        m.learn_records("a.test", Ok(found));
        assert_eq!(m.h3_port(&uri), Some(4433));
        assert_eq!(m.should_ask(&uri), None, "known for its time to live");
        // A failed query is not retried at once, and teaches nothing.
        let b: http::Uri = "https://b.test/".parse().unwrap();
        assert!(m.should_ask(&b).is_some());
        m.learn_records("b.test", Err(std::io::ErrorKind::TimedOut.into()));
        assert_eq!((m.h3_port(&b), m.should_ask(&b)), (None, None));
        // A resolver that cannot ask is not asked again.
        let c: http::Uri = "https://c.test/".parse().unwrap();
        assert!(m.should_ask(&c).is_some());
        m.cannot_ask("c.test");
        assert_eq!(m.should_ask(&"https://d.test/".parse().unwrap()), None);
    }

    #[test]
    fn cleartext_stale_and_malformed_fields_teach_nothing() {
        let m = AltSvcMemory::default();
        let http: http::Uri = "http://a.test/".parse().unwrap();
        m.learn(&http, &headers(&[("alt-svc", r#"h3=":443""#)]));
        assert_eq!(m.h3_port(&"https://a.test:80/".parse().unwrap()), None);
        let https: http::Uri = "https://a.test/".parse().unwrap();
        m.learn(&https, &headers(&[("alt-svc", r#"h3=":443"; ma=60"#), ("age", "60")]));
        assert_eq!(m.h3_port(&https), None, "as old as its max-age: stale on arrival");
        m.learn(&https, &headers(&[("alt-svc", r#"h3=":443"; ma=60"#), ("alt-svc", "h3=")]));
        assert_eq!(m.h3_port(&https), None, "one malformed line spoils the field");
        m.learn(&https, &headers(&[("alt-svc", "h2=\":8443\""), ("alt-svc", "h3=\":4433\"")]));
        assert_eq!(m.h3_port(&https), Some(4433), "lines join into one list");
    }
}
