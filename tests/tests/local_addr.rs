//! A connection's local address (`connection_local_addr`, curl's
//! `local_ip`/`local_port`), on every adapter, over cleartext HTTP/1.1 and
//! HTTP/2 and over TLS (the TCP stream inside the TLS one), with and without
//! a bound local address; none once the connection is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::{IpAddr, SocketAddr};

use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};

/// A cleartext server and a TLS one (ALPN h2 and http/1.1) for `a.test`.
fn servers(ca: &TestCa) -> (TestServer, TestServer) {
    let plain = TestServer::start(ServerOptions::default());
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    (plain, TestServer::start(options))
}

/// What every local address must be: this machine's end of a loopback
/// connection, a real port, not the server's.
fn check(local: Option<SocketAddr>, server_port: u16, what: &str) {
    let local = local.unwrap_or_else(|| panic!("{what}: no local address"));
    assert_eq!(local.ip(), IpAddr::from([127, 0, 0, 1]), "{what}");
    assert!(local.port() != 0 && local.port() != server_port, "{what}: {local}");
}

macro_rules! async_case {
    ($adapter:ident, $block_on:expr) => {{
        let ca = TestCa::new();
        let (plain, tls) = servers(&ca);
        for (version, bound) in [
            ($adapter::HttpVersion::Http1Only, false),
            ($adapter::HttpVersion::Http2Only, false),
            ($adapter::HttpVersion::Http1Only, true),
        ] {
            let mut b = $adapter::Client::builder()
                .no_proxy()
                .http_version(version)
                .add_root_certificate(ca.cert.clone())
                .resolve(&format!("a.test:{}", tls.port()), [IpAddr::from([127, 0, 0, 1])]);
            if bound {
                b = b.local_address(IpAddr::from([127, 0, 0, 1]));
            }
            let client = b.build().unwrap();
            let what = format!("{} {version:?} bound {bound}", stringify!($adapter));
            $block_on(async {
                for (url, port) in [
                    (format!("http://127.0.0.1:{}/hello", plain.port()), plain.port()),
                    (format!("https://a.test:{}/hello", tls.port()), tls.port()),
                ] {
                    let r = client.get(&url).send().await.unwrap();
                    let id = r.connection_id().unwrap();
                    check(client.connection_local_addr(id), port, &format!("{what} {url}"));
                    let _ = r.bytes().await.unwrap();
                }
            });
            client.evict_idle();
            // Closed: the pool no longer knows it.
            let r =
                $block_on(client.get(&format!("http://127.0.0.1:{}/close", plain.port())).send()).unwrap();
            let id = r.connection_id().unwrap();
            drop($block_on(r.bytes()));
            client.evict_idle();
            assert_eq!(client.connection_local_addr(id), None, "{what}: after close");
        }
    }};
}

#[test]
fn tokio_reports_local_addresses() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    async_case!(switchyard_tokio, |f| rt.block_on(f));
}

#[test]
fn smol_reports_local_addresses() {
    async_case!(switchyard_smol, smol::block_on);
}

#[test]
fn std_reports_local_addresses() {
    let ca = TestCa::new();
    let (plain, tls) = servers(&ca);
    for version in [switchyard_std::HttpVersion::Http1Only, switchyard_std::HttpVersion::Http2Only] {
        let client = switchyard_std::Client::builder()
            .no_proxy()
            .http_version(version)
            .add_root_certificate(ca.cert.clone())
            .resolve(&format!("a.test:{}", tls.port()), [IpAddr::from([127, 0, 0, 1])])
            .build()
            .unwrap();
        for (url, port) in [
            (format!("http://127.0.0.1:{}/hello", plain.port()), plain.port()),
            (format!("https://a.test:{}/hello", tls.port()), tls.port()),
        ] {
            let r = client.get(&url).send().unwrap();
            let id = r.connection_id().unwrap();
            check(client.connection_local_addr(id), port, &format!("std {version:?} {url}"));
            let _ = r.bytes().unwrap();
        }
    }
}
