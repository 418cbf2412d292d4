//! HTTPS records (RFC 9460): how DNS says where and how to reach an origin
//! before the first connection — which protocols it speaks (`alpn`: `h3`
//! means HTTP/3 is there from the first request, no `Alt-Svc` round needed),
//! on which port, at which name, with which addresses to try first.
//!
//! [`ServiceBinding`] is one record as the resolver decoded it; [`endpoints`]
//! applies the RFC's rules to a record set and gives the endpoints in the
//! order to try them:
//!
//! - an AliasMode record (priority 0) names another name to ask about instead;
//!   with one present, the set's ServiceMode records are ignored (§2.4.2);
//! - a ServiceMode record whose `mandatory` list names a key we do not
//!   implement is skipped (§8), as is one that lists `mandatory` itself or
//!   an `alpn` it cannot have;
//! - endpoints come by priority, lowest first (ties in the order DNS gave);
//! - a record's protocols are its `alpn` list plus the scheme's default
//!   (`http/1.1`) unless `no-default-alpn` is set (§7.1.1);
//! - the target `.` is the origin's own name; no `port` is the origin's port.
//!
//! ```
//! use switchyard_core::service_binding::{endpoints, Bindings, ServiceBinding, SvcParam};
//!
//! let record = ServiceBinding {
//!     priority: 1,
//!     target: ".".into(),
//!     params: vec![SvcParam::Alpn(vec![b"h3".to_vec(), b"h2".to_vec()]), SvcParam::Port(8443)],
//! };
//! let Bindings::Service(list) = endpoints(443, &[record]) else { unreachable!() };
//! assert_eq!(list[0].port, 8443);
//! assert!(list[0].speaks(b"h3") && list[0].speaks(b"http/1.1"));
//! assert_eq!(list[0].host, None); // the origin's own name
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::address::Host;

/// Service parameter keys (RFC 9460 §14.3.2).
pub mod key {
    /// `mandatory`.
    pub const MANDATORY: u16 = 0;
    /// `alpn`.
    pub const ALPN: u16 = 1;
    /// `no-default-alpn`.
    pub const NO_DEFAULT_ALPN: u16 = 2;
    /// `port`.
    pub const PORT: u16 = 3;
    /// `ipv4hint`.
    pub const IPV4HINT: u16 = 4;
    /// `ech` (not implemented here: a record that makes it mandatory is skipped).
    pub const ECH: u16 = 5;
    /// `ipv6hint`.
    pub const IPV6HINT: u16 = 6;
}

/// One service parameter as decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SvcParam {
    /// The keys a client must implement to use the record.
    Mandatory(Vec<u16>),
    /// ALPN protocol ids.
    Alpn(Vec<Vec<u8>>),
    /// The scheme's default protocol is not offered.
    NoDefaultAlpn,
    /// The port to use.
    Port(u16),
    /// IPv4 addresses to try before (or while) the name resolves.
    Ipv4Hint(Vec<Ipv4Addr>),
    /// IPv6 addresses, likewise.
    Ipv6Hint(Vec<Ipv6Addr>),
    /// Any other key (`ech` among them), by number.
    Other(u16),
}

impl SvcParam {
    fn key(&self) -> u16 {
        match self {
            SvcParam::Mandatory(_) => key::MANDATORY,
            SvcParam::Alpn(_) => key::ALPN,
            SvcParam::NoDefaultAlpn => key::NO_DEFAULT_ALPN,
            SvcParam::Port(_) => key::PORT,
            SvcParam::Ipv4Hint(_) => key::IPV4HINT,
            SvcParam::Ipv6Hint(_) => key::IPV6HINT,
            SvcParam::Other(k) => *k,
        }
    }
}

/// One HTTPS (or SVCB) record: its priority (0: AliasMode), target name
/// (`.` or empty: the owner name) and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceBinding {
    /// 0 for AliasMode; otherwise lower is preferred.
    pub priority: u16,
    /// The target name as written (a trailing dot allowed), or `.`.
    pub target: String,
    /// The parameters, in the record's order.
    pub params: Vec<SvcParam>,
}

/// One way to reach the origin, from a ServiceMode record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The record's priority (lower first).
    pub priority: u16,
    /// The name to connect to, or `None` for the origin's own.
    pub host: Option<Host>,
    /// The port.
    pub port: u16,
    /// The protocols offered there (the `alpn` list, then the default
    /// `http/1.1` unless `no-default-alpn`).
    pub alpn: Vec<Vec<u8>>,
    /// Addresses to try (IPv6 hints first, then IPv4, each in the record's order).
    pub hints: Vec<IpAddr>,
}

impl Endpoint {
    /// Whether `protocol` (an ALPN id such as `b"h3"`) is offered.
    #[must_use]
    pub fn speaks(&self, protocol: &[u8]) -> bool {
        self.alpn.iter().any(|p| p.as_slice() == protocol)
    }
}

/// What a record set says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bindings {
    /// Ask about this name instead (AliasMode).
    Alias(Host),
    /// The endpoints, in the order to try them (may be empty: every record
    /// was unusable).
    Service(Vec<Endpoint>),
}

impl Bindings {
    /// The first endpoint that offers `protocol`.
    #[must_use]
    pub fn first_speaking(&self, protocol: &[u8]) -> Option<&Endpoint> {
        match self {
            Bindings::Alias(_) => None,
            Bindings::Service(list) => list.iter().find(|e| e.speaks(protocol)),
        }
    }
}

/// The target as a host: `None` for `.` (or empty), the owner's name.
fn target(name: &str) -> Result<Option<Host>, ()> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Ok(None);
    }
    Host::parse(name).map(Some).map_err(|_| ())
}

/// The keys this module implements, so a record making them mandatory is usable.
const IMPLEMENTED: [u16; 5] = [key::ALPN, key::NO_DEFAULT_ALPN, key::PORT, key::IPV4HINT, key::IPV6HINT];

/// The endpoints a record set names, by the rules in the module docs, for
/// an origin on `origin_port`.
#[must_use]
pub fn endpoints(origin_port: u16, records: &[ServiceBinding]) -> Bindings {
    if let Some(alias) = records.iter().find(|r| r.priority == 0) {
        if let Ok(Some(host)) = target(&alias.target) {
            return Bindings::Alias(host);
        }
        // An alias to `.` means "no service here" (§2.5.1); a malformed
        // one is unusable. Either way nothing to connect to.
        return Bindings::Service(Vec::new());
    }
    let mut list: Vec<Endpoint> = records.iter().filter_map(|r| endpoint(origin_port, r)).collect();
    list.sort_by_key(|e| e.priority); // stable: ties keep DNS's order
    Bindings::Service(list)
}

fn endpoint(origin_port: u16, record: &ServiceBinding) -> Option<Endpoint> {
    let host = target(&record.target).ok()?;
    let mut alpn: Vec<Vec<u8>> = Vec::new();
    let (mut default_alpn, mut port) = (true, origin_port);
    let (mut v6, mut v4) = (Vec::new(), Vec::new());
    for param in &record.params {
        match param {
            SvcParam::Mandatory(keys) => {
                // `mandatory` may not list itself, and every key must be one we implement.
                if keys.iter().any(|k| *k == key::MANDATORY || !IMPLEMENTED.contains(k)) {
                    return None;
                }
                // …and every mandatory key must be present in the record.
                if keys.iter().any(|k| !record.params.iter().any(|p| p.key() == *k)) {
                    return None;
                }
            }
            SvcParam::Alpn(ids) => {
                if ids.iter().any(Vec::is_empty) {
                    return None;
                }
                alpn.extend(ids.iter().cloned());
            }
            SvcParam::NoDefaultAlpn => default_alpn = false,
            SvcParam::Port(p) => port = *p,
            SvcParam::Ipv4Hint(ips) => v4.extend(ips.iter().map(|ip| IpAddr::V4(*ip))),
            SvcParam::Ipv6Hint(ips) => v6.extend(ips.iter().map(|ip| IpAddr::V6(*ip))),
            SvcParam::Other(_) => {}
        }
    }
    if !default_alpn && alpn.is_empty() {
        return None; // no-default-alpn without alpn offers nothing (§7.1.1)
    }
    if default_alpn && !alpn.iter().any(|p| p == b"http/1.1") {
        alpn.push(b"http/1.1".to_vec());
    }
    if port == 0 {
        return None;
    }
    v6.extend(v4);
    Some(Endpoint { priority: record.priority, host, port, alpn, hints: v6 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(priority: u16, target: &str, params: Vec<SvcParam>) -> ServiceBinding {
        ServiceBinding { priority, target: target.into(), params }
    }

    fn service(b: Bindings) -> Vec<Endpoint> {
        match b {
            Bindings::Service(list) => list,
            Bindings::Alias(h) => panic!("alias to {h}"),
        }
    }

    #[test]
    fn priority_order_defaults_and_hints() {
        let set = [
            record(2, "alt.example.com.", vec![SvcParam::Alpn(vec![b"h2".to_vec()])]),
            record(
                1,
                ".",
                vec![
                    SvcParam::Alpn(vec![b"h3".to_vec()]),
                    SvcParam::Ipv4Hint(vec![Ipv4Addr::LOCALHOST]),
                    SvcParam::Ipv6Hint(vec![Ipv6Addr::LOCALHOST]),
                ],
            ),
            record(2, "b.example.com", vec![]),
        ];
        let list = service(endpoints(443, &set));
        assert_eq!(list.len(), 3);
        assert_eq!((list[0].priority, list[0].host.as_ref(), list[0].port), (1, None, 443));
        assert_eq!(list[0].alpn, [b"h3".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(list[0].hints, ["::1".parse::<IpAddr>().unwrap(), "127.0.0.1".parse().unwrap()]);
        assert_eq!(list[1].host, Some(Host::parse("alt.example.com").unwrap()), "ties keep DNS's order");
        assert_eq!(list[2].alpn, [b"http/1.1".to_vec()]);
        assert_eq!(endpoints(443, &set).first_speaking(b"h3").map(|e| e.priority), Some(1));
        assert_eq!(endpoints(443, &set).first_speaking(b"h2").map(|e| e.priority), Some(2));
    }

    #[test]
    fn alias_mode_wins_over_service_mode() {
        let set = [
            record(1, ".", vec![SvcParam::Alpn(vec![b"h3".to_vec()])]),
            record(0, "cdn.example.net.", vec![]),
        ];
        assert_eq!(endpoints(443, &set), Bindings::Alias(Host::parse("cdn.example.net").unwrap()));
        assert_eq!(endpoints(443, &[record(0, ".", vec![])]), Bindings::Service(Vec::new()), "no service");
    }

    #[test]
    fn unusable_records_are_skipped_and_the_rest_kept() {
        let good = record(3, ".", vec![SvcParam::Alpn(vec![b"h3".to_vec()])]);
        let set = [
            // ech made mandatory: not implemented here.
            record(1, ".", vec![SvcParam::Mandatory(vec![key::ECH]), SvcParam::Other(key::ECH)]),
            // mandatory listing itself.
            record(1, ".", vec![SvcParam::Mandatory(vec![key::MANDATORY])]),
            // a mandatory key that is absent.
            record(1, ".", vec![SvcParam::Mandatory(vec![key::PORT])]),
            // no-default-alpn with no alpn.
            record(1, ".", vec![SvcParam::NoDefaultAlpn]),
            // an empty alpn id.
            record(1, ".", vec![SvcParam::Alpn(vec![Vec::new()])]),
            // port 0, and a target that is no host name.
            record(1, ".", vec![SvcParam::Port(0)]),
            record(1, "bad name!", vec![]),
            good.clone(),
        ];
        let list = service(endpoints(443, &set));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].priority, 3);
        // A mandatory key we implement, present: fine.
        let ok = record(
            1,
            ".",
            vec![
                SvcParam::Mandatory(vec![key::ALPN, key::PORT]),
                SvcParam::Alpn(vec![b"h3".to_vec()]),
                SvcParam::Port(4433),
            ],
        );
        assert_eq!(service(endpoints(443, &[ok]))[0].port, 4433);
        // no-default-alpn leaves only what alpn lists.
        let only = record(1, ".", vec![SvcParam::Alpn(vec![b"h3".to_vec()]), SvcParam::NoDefaultAlpn]);
        assert_eq!(service(endpoints(443, &[only]))[0].alpn, [b"h3".to_vec()]);
    }
}
