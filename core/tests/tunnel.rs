//! Tunnel Addresses (the far side of a gateway's `CONNECT`): raw byte streams
//! planned, raced and remembered like every route, never TLS, never HTTP,
//! never shared.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use support::{https, tls, PoolSim};
use switchyard_core::{AcquireOptions, Address, PoolAction, PoolConfig, Protocol, Proxy, Reuse, Scheme};

fn tunnel(host: &str, port: u32) -> Address {
    Address::builder(Scheme::Https, host, port).tunnel().build().unwrap()
}

fn exclusive() -> AcquireOptions {
    AcquireOptions { exclusive: true, ..AcquireOptions::default() }
}

#[test]
fn a_tunnel_address_is_its_own_pool_and_never_asks_for_tls() {
    let t = tunnel("10.0.0.1", 8443);
    assert!(t.is_tunnel() && t.is_https());
    assert_eq!(t.protocols(), [Protocol::Http1]);
    // A cleartext origin may be tunnelled to even where cleartext is refused:
    // the bytes are the tunnel client's own.
    let plain = Address::builder(Scheme::Http, "a.test", 80).cleartext_permitted(false).tunnel().build();
    assert!(plain.is_ok());
    assert!(Address::builder(Scheme::Http, "a.test", 80).cleartext_permitted(false).build().is_err());
    // Never equal to (or coalescable with) the same origin's HTTP Address.
    let origin = Address::builder(Scheme::Https, "10.0.0.1", 8443).build().unwrap();
    assert_ne!(t, origin);
    assert!(!t.equal_except_host(&tunnel("10.0.0.2", 8443)));

    let mut sim = PoolSim::new(PoolConfig::default());
    let c = sim.acquire_with(0, &t, exclusive());
    assert_eq!(sim.drain(), [format!("connect {c} 10.0.0.1:8443")]);
    // Connected is established: no handshake (no TLS for an https origin).
    let out = sim.connected(1, c);
    assert!(out.iter().any(|s| s.starts_with("established")), "{out:?}");
    assert!(out.iter().any(|s| s.starts_with(&format!("acquired {c}"))), "{out:?}");
    let k = sim.held[&c];
    assert_eq!(sim.pool.connection(k).unwrap().protocol(), Protocol::Http1);
    assert!(!sim.pool.connection(k).unwrap().route().requires_tls());
    // Handed out once: a second call on the same Address connects anew, and
    // the tunnel's end closes its connection.
    let c2 = sim.acquire_with(2, &t, exclusive());
    assert_eq!(sim.drain(), [format!("connect {c2} 10.0.0.1:8443")]);
    let out = sim.finish(3, c);
    assert!(out.iter().any(|s| s.starts_with(&format!("close {k}"))), "{out:?}");
}

#[test]
fn a_tunnel_through_an_http_proxy_is_a_connect_without_tls() {
    let proxy = Proxy::http("10.9.0.1", 3128).unwrap();
    let t = Address::builder(Scheme::Http, "db.test", 5432).proxy(proxy).tunnel().build().unwrap();
    let mut sim = PoolSim::new(PoolConfig::default());
    let c = sim.acquire_with(0, &t, exclusive());
    assert_eq!(sim.drain(), [format!("connect {c} 10.9.0.1:3128")]);
    let a = sim.last_attempt(c);
    sim.pool.handle_connected(support::ms(1), a).unwrap();
    let mut route = None;
    while let Some(action) = sim.pool.poll_action() {
        if let PoolAction::Handshake { route: r, .. } = action {
            route = Some(r);
        }
    }
    let route = route.expect("a CONNECT handshake through the proxy");
    assert!(route.requires_tunnel(), "a raw tunnel goes through the proxy as CONNECT");
    assert!(!route.requires_tls());
    assert!(!route.uses_absolute_form());
    let out = sim.established(2, c, None, None);
    assert!(out.iter().any(|s| s.starts_with(&format!("acquired {c}"))), "{out:?}");
}

#[test]
fn a_tunnel_never_lands_on_a_shared_connection() {
    let mut sim = PoolSim::new(PoolConfig::default());
    // An HTTP/2 connection to the origin, with a certificate for everything.
    let origin = https("a.test");
    let c = sim.acquire(0, &origin);
    sim.drain();
    sim.dns(0, c, &["10.0.0.1"]);
    sim.connected(1, c);
    sim.established(2, c, Some(Protocol::Http2), Some(tls(&["*.test", "a.test"])));
    sim.pool.settings(support::ms(2), sim.held[&c], None).unwrap();
    sim.drain();
    let t = tunnel("a.test", 443);
    let c2 = sim.acquire_with(3, &t, exclusive());
    // The name's answer is known (cached); the tunnel dials its own route.
    let out = sim.drain();
    assert_eq!(out, [format!("connect {c2} 10.0.0.1:443")], "never coalesced onto the HTTP/2 connection");
    sim.connected(5, c2);
    let k = sim.held[&c2];
    assert_ne!(k, sim.held[&c]);
    sim.pool
        .exchange_finished(support::ms(6), c2, Reuse::Retire(switchyard_core::CloseReason::Exclusive))
        .unwrap();
    sim.drain();
    assert!(sim.pool.connection(k).is_none());
}
