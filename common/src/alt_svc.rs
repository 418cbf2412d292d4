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
}

impl Default for AltSvcMemory {
    fn default() -> AltSvcMemory {
        AltSvcMemory { cache: Mutex::default(), any: AtomicBool::new(false), epoch: Instant::now() }
    }
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
        port
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
