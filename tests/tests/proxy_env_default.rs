//! Proxies from the environment are on by default, on every adapter (as in
//! reqwest and curl), and `no_proxy()` turns them off.
//!
//! One test in a binary of its own: it sets `HTTP_PROXY` and `NO_PROXY` for the
//! whole process, which no other test may see.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use switchyard_tests::proxy::TestProxy;
use switchyard_tests::server::{ServerOptions, TestServer};

const LOOPBACK: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)];

/// What one adapter's default client and its `no_proxy()` client got.
type Fetch = fn(proxied: &str, bypassed: &str, direct: bool) -> (String, String);

fn tokio_fetch(proxied: &str, bypassed: &str, direct: bool) -> (String, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut b = switchyard_tokio::Client::builder().resolve(&authority(bypassed), LOOPBACK);
        if direct {
            b = b.no_proxy().resolve(&authority(proxied), LOOPBACK);
        }
        let client = b.build().unwrap();
        let a = client.get(proxied).send().await.unwrap().text().await.unwrap();
        let b = client.get(bypassed).send().await.unwrap().text().await.unwrap();
        (a, b)
    })
}

fn smol_fetch(proxied: &str, bypassed: &str, direct: bool) -> (String, String) {
    smol::block_on(async {
        let mut b = switchyard_smol::Client::builder().resolve(&authority(bypassed), LOOPBACK);
        if direct {
            b = b.no_proxy().resolve(&authority(proxied), LOOPBACK);
        }
        let client = b.build().unwrap();
        let a = client.get(proxied).send().await.unwrap().text().await.unwrap();
        let b = client.get(bypassed).send().await.unwrap().text().await.unwrap();
        (a, b)
    })
}

fn std_fetch(proxied: &str, bypassed: &str, direct: bool) -> (String, String) {
    let mut b = switchyard_std::Client::builder().resolve(&authority(bypassed), LOOPBACK);
    if direct {
        b = b.no_proxy().resolve(&authority(proxied), LOOPBACK);
    }
    let client = b.build().unwrap();
    let a = client.get(proxied).send().unwrap().text().unwrap();
    let b = client.get(bypassed).send().unwrap().text().unwrap();
    (a, b)
}

fn authority(url: &str) -> String {
    url.parse::<http::Uri>().unwrap().authority().unwrap().to_string()
}

#[test]
fn proxies_from_the_environment_are_on_by_default_on_every_adapter() {
    let server = TestServer::start(ServerOptions::default());
    let hosts: BTreeMap<String, IpAddr> = [("origin.test".to_owned(), LOOPBACK[0])].into();
    let proxy = TestProxy::http(hosts);
    // Only this binary's one test sees these.
    std::env::set_var("HTTP_PROXY", format!("http://{}", proxy.addr));
    std::env::set_var("NO_PROXY", "bypass.test");
    std::env::remove_var("http_proxy");
    std::env::remove_var("no_proxy");
    std::env::remove_var("REQUEST_METHOD");
    let proxied = format!("http://origin.test:{}/hello", server.port());
    let bypassed = format!("http://bypass.test:{}/hello", server.port());
    let adapters: [(&str, Fetch); 3] = [("tokio", tokio_fetch), ("smol", smol_fetch), ("std", std_fetch)];
    for (name, fetch) in adapters {
        let before = proxy.targets().len();
        let (a, b) = fetch(&proxied, &bypassed, false);
        assert_eq!((a.as_str(), b.as_str()), ("hello", "hello"), "{name}");
        assert_eq!(
            proxy.targets()[before..],
            [format!("forward origin.test:{}", server.port())],
            "{name}: the default client used HTTP_PROXY for origin.test and NO_PROXY kept bypass.test direct"
        );
        let (a, b) = fetch(&proxied, &bypassed, true);
        assert_eq!((a.as_str(), b.as_str()), ("hello", "hello"), "{name}");
        assert_eq!(proxy.targets().len(), before + 1, "{name}: no_proxy() never used the proxy");
    }
}
