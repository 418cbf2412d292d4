//! Per-host state under many distinct hosts: `-n` calls, each to a host name
//! of its own that resolves (to 127.0.0.1) and refuses, on one client of each
//! adapter. Prints resident memory and the pool's per-host counts every
//! tenth of the run: after warm-up they must stay flat (issue 53).
//!
//! `cargo run --release -p switchyard-tests --example hosts -- 100000`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

use std::net::IpAddr;

/// Every name resolves to 127.0.0.1.
struct Everything;

impl switchyard_common::Resolve for Everything {
    fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        Ok(vec!["127.0.0.1".parse().unwrap()])
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(20_000, |a| a.parse().expect("a number"));
    let which = std::env::args().nth(2).unwrap_or_else(|| "all".into());
    let port = switchyard_tests::net::refused_port();
    let url = |i: usize| format!("http://h{i}.example.test:{port}/");
    let report = |name: &str, i: usize, addresses: usize| {
        println!("{name:5} {i:7} calls: rss {:6} KiB, addresses in the pool {addresses}", rss_kib());
    };
    if which == "all" || which == "tokio" {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let client = switchyard_tokio::Client::builder().resolver(Everything).build().unwrap();
        rt.block_on(async {
            for i in 0..n {
                if i % (n / 10).max(1) == 0 {
                    report("tokio", i, client.stats_by_address().len());
                }
                assert!(client.get(url(i)).send().await.is_err());
            }
        });
        report("tokio", n, client.stats_by_address().len());
    }
    if which == "all" || which == "smol" {
        let client = switchyard_smol::Client::builder().resolver(Everything).build().unwrap();
        smol::block_on(async {
            for i in 0..n {
                if i % (n / 10).max(1) == 0 {
                    report("smol", i, client.stats_by_address().len());
                }
                assert!(client.get(url(i)).send().await.is_err());
            }
        });
        report("smol", n, client.stats_by_address().len());
    }
    if which == "all" || which == "std" {
        let client = switchyard_std::Client::builder().resolver(Everything).build().unwrap();
        for i in 0..n {
            if i % (n / 10).max(1) == 0 {
                report("std", i, client.stats_by_address().len());
            }
            assert!(client.get(url(i)).send().is_err());
        }
        report("std", n, client.stats_by_address().len());
    }
}
