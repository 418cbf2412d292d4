//! Arbitrary `Alt-Svc` field values and cache operations: the parser never
//! panics and keeps only usable alternatives (port not 0, a protocol name of 1
//! to 255 bytes); whatever it accepts, once printed back and parsed again,
//! gives the same alternatives; the cache, fed those fields for a handful of
//! origins between lookups, expiries and network changes, keeps its bounds and
//! index, and a lookup only ever returns a fresh alternative of the origin's
//! last field. Shared by the `alt_svc` fuzz target and
//! `core/tests/fuzz_replay.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use switchyard_core::alt_svc::{AltSvc, AltSvcCache, AltSvcConfig, Alternative, Origin, MAX_PROTOCOL_LEN};
use switchyard_core::{Host, Instant, Scheme};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Learn this field value for origin `n % 4`, `age` seconds old.
    Learn {
        origin: u8,
        value: Vec<u8>,
        age: u16,
    },
    Lookup {
        origin: u8,
        h3: bool,
        advance: u16,
    },
    Expire {
        advance: u16,
    },
    Forget {
        origin: u8,
    },
    NetworkChanged,
}

fn origin(n: u8) -> Origin {
    Origin::new(Scheme::Https, Host::parse(&format!("o{}.test", n % 4)).unwrap(), 443)
}

/// An alternative written back as a field entry.
fn print(a: &Alternative) -> String {
    let mut protocol = String::new();
    for &b in a.protocol() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            protocol.push(b as char);
        } else {
            protocol.push_str(&format!("%{b:02X}"));
        }
    }
    let host = a.host().map(ToString::to_string).unwrap_or_default();
    format!(
        "{protocol}=\"{host}:{}\"; ma={}; persist={}",
        a.port(),
        a.max_age().as_secs(),
        u8::from(a.persist())
    )
}

fn check_parse(value: &[u8]) -> Option<AltSvc> {
    let parsed = AltSvc::parse(value).ok()?;
    if let AltSvc::Alternatives(list) = &parsed {
        for a in list {
            assert!(a.port() != 0, "port 0 kept");
            assert!(!a.protocol().is_empty() && a.protocol().len() <= MAX_PROTOCOL_LEN);
        }
        if !list.is_empty() {
            let again = list.iter().map(print).collect::<Vec<_>>().join(", ");
            assert_eq!(AltSvc::parse(again.as_bytes()).as_ref(), Ok(&parsed), "printed back: {again}");
        }
    }
    Some(parsed)
}

pub fn run(data: &[u8]) {
    // The raw bytes as one field first.
    check_parse(data);
    let mut u = Unstructured::new(data);
    let Ok(ops) = Vec::<Op>::arbitrary(&mut u) else { return };
    let mut cache = AltSvcCache::new(AltSvcConfig { max_origins: 3, max_per_origin: 3 });
    let mut now = Instant::ZERO;
    for op in ops.into_iter().take(64) {
        match op {
            Op::Learn { origin: o, value, age } => {
                if let Some(field) = check_parse(&value) {
                    cache.learn(&origin(o), &field, now, Duration::from_secs(age.into()));
                }
            }
            Op::Lookup { origin: o, h3, advance } => {
                now += Duration::from_secs(advance.into());
                let protocol: &[u8] = if h3 { b"h3" } else { b"h2" };
                let expected = cache
                    .alternatives(&origin(o), now)
                    .find(|(a, _)| a.protocol() == protocol)
                    .map(|(a, _)| a.clone());
                assert_eq!(cache.lookup(&origin(o), protocol, now).cloned(), expected);
            }
            Op::Expire { advance } => {
                now += Duration::from_secs(advance.into());
                cache.expire(now);
                assert!(cache.next_expiry().is_none_or(|at| at > now));
            }
            Op::Forget { origin: o } => {
                let first = cache.alternatives(&origin(o), now).next().map(|(a, _)| a.clone());
                if let Some(a) = first {
                    cache.forget(&origin(o), a.protocol(), a.host(), a.port());
                    assert!(cache.alternatives(&origin(o), now).all(|(b, _)| *b != a));
                }
            }
            Op::NetworkChanged => cache.network_changed(),
        }
        cache.check_invariants();
    }
}
