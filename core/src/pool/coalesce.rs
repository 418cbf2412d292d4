//! Coalescing checks (BEHAVIOUR §5): may an HTTP/2 connection to host A carry a
//! request for host B? Only when B's DNS answers include the connection's remote
//! IP *and* its verified certificate covers B *and* B's pins (if any) pass — never
//! on IP alone, never on the certificate alone. The other conditions (HTTP/2,
//! direct, equal Address but for host, not marked no-coalescing) are checked by
//! the pool with the connection's state.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::address::Host;
use crate::connection::TlsFacts;

/// Whether a certificate with these facts covers `host` (RFC 6125 rules: names
/// compare case-insensitively; a wildcard stands for exactly one whole left-most
/// label and never matches an IP literal).
///
/// ```
/// # use switchyard_core::{Host, TlsFacts, pool::certificate_covers};
/// let facts = TlsFacts { dns_names: vec!["*.example.com".into()], ..TlsFacts::default() };
/// assert!(certificate_covers(&facts, &Host::parse("api.example.com").unwrap()));
/// assert!(!certificate_covers(&facts, &Host::parse("a.b.example.com").unwrap()));
/// assert!(!certificate_covers(&facts, &Host::parse("example.com").unwrap()));
/// ```
#[must_use]
pub fn certificate_covers(facts: &TlsFacts, host: &Host) -> bool {
    // An unverified certificate proves nothing about any name, nor does one
    // that a verifier unknown to us accepted.
    if facts.unverified || facts.caller_verifier {
        return false;
    }
    match host {
        Host::Ip(ip) => facts.ip_addresses.contains(ip),
        Host::Domain(name) => {
            let name = name.strip_suffix('.').unwrap_or(name);
            facts.dns_names.iter().any(|pattern| name_matches(pattern, name))
        }
    }
}

fn name_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.strip_suffix('.').unwrap_or(pattern);
    if let Some(suffix) = pattern.strip_prefix("*.") {
        // One whole label, and at least two labels in the suffix (no `*.com`).
        if suffix.is_empty() || !suffix.contains('.') {
            return false;
        }
        match name.split_once('.') {
            Some((label, rest)) => !label.is_empty() && rest.eq_ignore_ascii_case(suffix),
            None => false,
        }
    } else {
        !pattern.contains('*') && pattern.eq_ignore_ascii_case(name)
    }
}

/// Public-key pins: for a host pattern, the SHA-256 SPKI digests of which at least
/// one must appear in the connection's chain. Patterns are exact names or
/// `*.suffix` (one label). Hosts without pins always pass.
///
/// ```
/// # use switchyard_core::{Host, TlsFacts, pool::CertificatePins};
/// let mut pins = CertificatePins::default();
/// pins.add("api.example.com", [7u8; 32]);
/// let good = TlsFacts { spki_sha256: vec![[7u8; 32]], ..TlsFacts::default() };
/// let bad = TlsFacts { spki_sha256: vec![[8u8; 32]], ..TlsFacts::default() };
/// let host = Host::parse("api.example.com").unwrap();
/// assert!(pins.check(&host, &good));
/// assert!(!pins.check(&host, &bad));
/// assert!(pins.check(&Host::parse("other.example").unwrap(), &bad));
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CertificatePins {
    pins: BTreeMap<String, Vec<[u8; 32]>>,
}

impl CertificatePins {
    /// Pins `digest` for hosts matching `pattern`.
    pub fn add(&mut self, pattern: &str, digest: [u8; 32]) {
        let list = self.pins.entry(pattern.to_ascii_lowercase()).or_default();
        if !list.contains(&digest) {
            list.push(digest);
        }
    }

    /// Whether no pins are configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pins.is_empty()
    }

    /// Whether a connection with `facts` passes the pins for `host`.
    #[must_use]
    pub fn check(&self, host: &Host, facts: &TlsFacts) -> bool {
        let Host::Domain(name) = host else {
            return true;
        };
        let mut pinned = false;
        for (pattern, digests) in &self.pins {
            if name_matches(pattern, name) {
                pinned = true;
                if digests.iter().any(|d| facts.spki_sha256.contains(d)) {
                    return true;
                }
            }
        }
        !pinned
    }
}

/// Whether `answers` include the connection's remote IP.
pub(crate) fn ip_matches(answers: &[IpAddr], remote: IpAddr) -> bool {
    answers.contains(&remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(names: &[&str]) -> TlsFacts {
        TlsFacts { dns_names: names.iter().map(|s| (*s).to_owned()).collect(), ..TlsFacts::default() }
    }
    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn exact_and_wildcard_names() {
        let f = facts(&["example.com", "*.cdn.example.com"]);
        assert!(certificate_covers(&f, &host("EXAMPLE.com")));
        assert!(certificate_covers(&f, &host("img.cdn.example.com")));
        assert!(!certificate_covers(&f, &host("cdn.example.com")));
        assert!(!certificate_covers(&f, &host("www.example.com")));
        assert!(!certificate_covers(&facts(&["*.com"]), &host("example.com")));
        assert!(!certificate_covers(&facts(&["w*.example.com"]), &host("www.example.com")));
    }

    #[test]
    fn ip_hosts_need_ip_sans() {
        let mut f = facts(&["*.example.com"]);
        assert!(!certificate_covers(&f, &host("10.0.0.1")));
        f.ip_addresses.push("10.0.0.1".parse().unwrap());
        assert!(certificate_covers(&f, &host("10.0.0.1")));
    }

    #[test]
    fn wildcard_pins() {
        let mut p = CertificatePins::default();
        p.add("*.example.com", [1; 32]);
        let ok = TlsFacts { spki_sha256: vec![[9; 32], [1; 32]], ..TlsFacts::default() };
        assert!(p.check(&host("a.example.com"), &ok));
        assert!(!p.check(&host("a.example.com"), &TlsFacts::default()));
        assert!(p.check(&host("example.com"), &TlsFacts::default()));
    }
}
