//! Connections spent under load, counted from both sides: `-n` requests from
//! `-c` concurrent callers (each looping) against the in-process TLS test
//! server, HTTP/1.1 and HTTP/2 by ALPN. Prints the TCP connects and TLS
//! handshakes the client started (from its events), the connections the
//! server accepted, and the wall time.
//!
//! `cargo run --release -p switchyard-tests --example churn -- 2000 16`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

use std::time::Instant;

use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{Client, EventLog};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let (n, c) = (args.next().unwrap_or(2000), args.next().unwrap_or(16));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (name, http1_only) in [("HTTP/1.1 over TLS", true), ("HTTP/2 over TLS", false)] {
        let ca = TestCa::new();
        let mut options = ServerOptions { http1_only, ..ServerOptions::default() };
        options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
        let server = TestServer::start(options);
        let log = EventLog::default();
        let client = Client::builder()
            .add_root_certificate(ca.cert.clone())
            .resolve(&format!("a.test:{}", server.port()), ["127.0.0.1".parse().unwrap()])
            .event_listener(log.clone())
            .build()
            .unwrap();
        let url = format!("https://a.test:{}/hello", server.port());
        let started = Instant::now();
        let failed = rt.block_on(async {
            let tasks: Vec<_> = (0..c)
                .map(|i| {
                    let (client, url) = (client.clone(), url.clone());
                    let share = n / c + usize::from(i < n % c);
                    tokio::spawn(async move {
                        let mut failed = 0;
                        for _ in 0..share {
                            let ok = match client.get(&url).send().await {
                                Ok(mut r) => r.body_mut().collect().await.is_ok(),
                                Err(_) => false,
                            };
                            failed += usize::from(!ok);
                        }
                        failed
                    })
                })
                .collect();
            let mut failed = 0;
            for t in tasks {
                failed += t.await.unwrap();
            }
            failed
        });
        let wall = started.elapsed();
        let events = log.events();
        let count = |name: &str| events.iter().filter(|e| e.name == name).count();
        println!(
            "{name}: {n} requests, {c} callers: {failed} failed; client started {} TCP connects and {} TLS \
             handshakes, cancelled {} attempts; server accepted {} connections; {:.0} ms",
            count("connect_start"),
            count("secure_connect_start"),
            count("connect_cancelled"),
            server.connections(),
            wall.as_secs_f64() * 1000.0
        );
    }
}
