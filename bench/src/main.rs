//! `switchyard-bench`: every client against the same loopback servers in one run,
//! reported as medians over several runs and as ratios. Wall-clock numbers are
//! noisy on small VMs: compare ratios within a run, never absolute numbers
//! across runs.
//!
//! ```text
//! cargo run --release -p switchyard-bench                # full: 3 runs, under 6 minutes
//! cargo run --release -p switchyard-bench -- --quick     # 1 short run, under 1 minute
//!     [--runs R] [--requests N] [--out DIR] [--check]
//! ```
//!
//! Each measurement runs in a fresh process (its own peak RSS; pinned with
//! `taskset` where the scenario says so); servers run in processes of their own.
//! `--check` exits non-zero unless every scenario produced a number for every
//! client (CI runs `--quick --check`; it never asserts timings).
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used, missing_docs)]
// A binary: its modules' `pub` items are crate-internal by nature.
#![allow(unreachable_pub)]

mod budget;
mod core;
mod h3;
mod large;
mod measure;
mod report;
mod server;

use std::process::Stdio;
use std::time::{Duration, Instant};

use measure::Sample;
use report::{Row, Scenario};
use server::{Kind, Server};

const SEQUENTIAL: &[&str] = &[
    "raw",
    "switchyard-tokio",
    "switchyard-smol",
    "switchyard-smol-main",
    "switchyard-smol-local",
    "switchyard-std",
    "hyper-util",
    "reqwest",
    "ureq",
];
const CONCURRENT: &[&str] = &[
    "raw-tokio",
    "raw-smol",
    "switchyard-tokio",
    "switchyard-smol",
    "switchyard-std",
    "hyper-util",
    "reqwest",
    "ureq",
];
const HTTP2: &[&str] =
    &["h2", "switchyard-tokio", "switchyard-smol", "switchyard-std", "hyper-util", "reqwest"];
const IDLE: &[&str] = &["switchyard-tokio", "switchyard-smol", "switchyard-std", "hyper-util", "reqwest"];
const EYEBALLS: &[&str] =
    &["raw", "switchyard-tokio", "switchyard-smol", "switchyard-std", "hyper-util", "reqwest", "ureq"];

struct Options {
    runs: usize,
    requests: usize,
    rounds: usize,
    quick: bool,
    check: bool,
    out: std::path::PathBuf,
    /// `--only s1,s3`: just these scenarios (all when empty).
    only: Vec<String>,
}

impl Options {
    fn wants(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == id)
    }
}

fn options(args: &[String]) -> Options {
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let quick = args.iter().any(|a| a == "--quick");
    Options {
        runs: value("--runs").and_then(|v| v.parse().ok()).unwrap_or(if quick { 1 } else { 3 }),
        requests: value("--requests").and_then(|v| v.parse().ok()).unwrap_or(if quick {
            2_000
        } else {
            20_000
        }),
        rounds: if quick { 1 } else { 3 },
        quick,
        check: args.iter().any(|a| a == "--check"),
        out: value("--out").map_or_else(|| std::path::PathBuf::from("target/bench"), Into::into),
        only: value("--only")
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
            .unwrap_or_default(),
    }
}

/// Runs one measurement in a child process; `None` if it failed or hung.
fn measure(scenario: &str, client: &str, port: u16, n: usize, pin: Option<usize>) -> Option<Sample> {
    let exe = std::env::current_exe().ok()?;
    let mut child = server::command(&exe, pin)
        .args(["measure", scenario, client, &port.to_string(), &n.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > Duration::from_secs(120) => {
                let _ = child.kill();
                eprintln!("  {scenario}/{client}: no result within 120 s");
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return None,
        }
    }
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let sample = text.lines().last().and_then(Sample::parse);
    if sample.is_none() {
        eprintln!("  {scenario}/{client} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    sample
}

/// Every client, `runs` times (interleaved, so drift hits all alike), medians.
fn run_scenario(
    id: &'static str,
    title: String,
    server: &str,
    clients: &[&'static str],
    measure_one: impl Fn(&str) -> Option<Sample>,
    runs: usize,
) -> Scenario {
    eprintln!("{id}: {title}");
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); clients.len()];
    for _ in 0..runs {
        for (i, client) in clients.iter().enumerate() {
            if let Some(s) = measure_one(client) {
                samples[i].push(s);
            }
        }
    }
    let rows = clients.iter().zip(samples).map(|(c, s)| Row::median(c, &s)).collect();
    Scenario { id, title, server: server.to_owned(), rows }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let num = |i: usize| arg(i).parse::<usize>().unwrap_or(0);
    match arg(1) {
        "serve-h1" => return server::serve_h1(arg(2).parse().expect("port"), false),
        "serve-h1-close" => return server::serve_h1(arg(2).parse().expect("port"), true),
        "serve-h1-slow" => {
            let port = arg(2).parse().expect("port");
            return server::serve_h1_with(port, server::response(false), false, Some(server::SLOW));
        }
        "serve-h1-sized" => {
            let (port, size) = (arg(2).parse().expect("port"), arg(3).parse().expect("size"));
            return server::serve_h1_with(port, server::sized_response(size), false, None);
        }
        "serve-h2" => return server::serve_h2(arg(2).parse().expect("port")),
        "serve-h2o" => {
            let ca = args.get(3).map(std::path::Path::new);
            return server::serve_h2o(arg(2).parse().expect("port"), ca);
        }
        "serve-tls" => return server::serve_tls(arg(2).parse().expect("port"), std::path::Path::new(arg(3))),
        "measure" => {
            // reqwest is built with `rustls-no-provider`: the process picks ring.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let (scenario, client, port, n) = (arg(2), arg(3), num(4) as u16, num(5));
            let sample = match scenario {
                "s1" | "s1-pinned" => measure::sequential_client(client, port, n, false),
                "s4" => measure::sequential_client(client, port, n, true),
                id if id.starts_with("s7") => large::spec(id).and_then(|s| large::client(s, client, port, n)),
                "s8" => measure::idle_memory(client, port, n, false),
                "s8-h2" => measure::idle_memory(client, port, n, true),
                "s2" => measure::concurrent_client(client, port, n, false),
                "s3" => measure::concurrent_client(client, port, n, true),
                "s3-tls" => measure::tls_client(client, port, n),
                "s5" => measure::happy_eyeballs(client, port, n),
                "s9" => h3::client(client, port, n),
                "s9-large" => h3::large_client(client, port, n),
                _ => None,
            };
            match sample {
                Some(s) => println!("{}", s.json()),
                None => std::process::exit(2),
            }
            return;
        }
        "core-ops" => {
            let (kind, size, ops) = (arg(2), num(3), num(4));
            let response = core::typical_response();
            let mut setup;
            let mut op = if kind == "decode" {
                core::Op::Decode(&response)
            } else {
                setup = core::pool_with(size);
                core::Op::AcquireRelease(&mut setup)
            };
            println!("{}", core::measured(&mut op, ops));
            return;
        }
        _ => {}
    }
    let o = options(&args);
    let started = Instant::now();
    let n = o.requests;
    let mut scenarios = Vec::new();

    for (id, pin) in [("s1", None), ("s1-pinned", Some(0))] {
        if !o.wants(id) {
            continue;
        }
        if pin.is_some() && !server::has("taskset") {
            eprintln!("{id}: skipped, no taskset");
            continue;
        }
        let srv = Server::start(Kind::Http1, pin);
        let title = match pin {
            None => "1. Sequential HTTP/1.1 GETs on one kept-alive connection (unpinned)".to_owned(),
            Some(_) => "1. Sequential HTTP/1.1 GETs, client and server pinned to core 0".to_owned(),
        };
        let port = srv.port;
        scenarios.push(run_scenario(
            id,
            title,
            srv.name,
            SEQUENTIAL,
            |c| measure(id, c, port, n, pin),
            o.runs,
        ));
    }

    if o.wants("s2") {
        let srv = Server::start(Kind::Http1, None);
        let port = srv.port;
        let title = format!(
            "2. {} concurrent HTTP/1.1 GETs through the pool (switchyard with default pool settings; peers keep every idle connection)",
            measure::CONCURRENCY
        );
        scenarios.push(run_scenario(
            "s2",
            title,
            srv.name,
            CONCURRENT,
            |c| measure("s2", c, port, n, None),
            o.runs,
        ));
    }

    if o.wants("s3") {
        let srv = Server::start(Kind::H2c, None);
        let port = srv.port;
        let title = format!("3. {} concurrent streams on one HTTP/2 connection (h2c)", measure::CONCURRENCY);
        scenarios.push(run_scenario(
            "s3",
            title,
            srv.name,
            HTTP2,
            |c| measure("s3", c, port, n, None),
            o.runs,
        ));
    }

    let tls = server::Tls::new();
    let ca_file = o.out.join("bench-ca.der");
    let _ = std::fs::create_dir_all(&o.out);
    // Children find the CA here.
    let ca_written = std::fs::write(&ca_file, &tls.ca).is_ok();
    if ca_written {
        std::env::set_var("SWITCHYARD_BENCH_CA", &ca_file);
    }
    let h2o = if o.wants("s3-tls") { Server::h2o_tls(&tls) } else { None };
    match (ca_written, h2o) {
        _ if !o.wants("s3-tls") => {}
        (true, Some(srv)) => {
            let port = srv.port;
            let title = format!(
                "3. {} concurrent streams on one HTTP/2 connection over TLS (ALPN h2)",
                measure::CONCURRENCY
            );
            scenarios.push(run_scenario(
                "s3-tls",
                title,
                srv.name,
                HTTP2,
                |c| measure("s3-tls", c, port, n, None),
                o.runs,
            ));
        }
        _ => eprintln!("s3-tls: skipped (h2o is not installed)"),
    }

    if o.wants("s4") {
        let srv = Server::start(Kind::Http1Close, None);
        let port = srv.port;
        let title = "4. Connection churn: every response `Connection: close`".to_owned();
        scenarios.push(run_scenario(
            "s4",
            title,
            srv.name,
            SEQUENTIAL,
            |c| measure("s4", c, port, n / 4, None),
            o.runs,
        ));
    }

    for spec in large::SPECS.iter().filter(|s| o.wants(s.id)) {
        let srv = match spec.wire {
            large::Wire::Clear if spec.upload => Some(Server::start(Kind::Http1, None)),
            large::Wire::Clear => Some(Server::start(Kind::Http1Sized(spec.size), None)),
            _ if spec.upload => Some(Server::tls_uploads(&tls)),
            _ if ca_written => Server::h2o_tls_files(&tls),
            _ => None,
        };
        let Some(srv) = srv else {
            eprintln!("{}: skipped (h2o is not installed)", spec.id);
            continue;
        };
        let port = srv.port;
        let count = spec.requests(o.quick);
        scenarios.push(run_scenario(
            spec.id,
            spec.title(),
            srv.name,
            spec.clients(),
            |c| measure(spec.id, c, port, count, None),
            o.runs,
        ));
    }

    for (id, http2) in [("s8", false), ("s8-h2", true)] {
        if !o.wants(id) {
            continue;
        }
        let srv = Server::start(if http2 { Kind::H2c } else { Kind::Http1Slow }, None);
        let port = srv.port;
        let count = if o.quick { 200 } else { 1_000 };
        let title = if http2 {
            format!(
                "8. Memory per idle connection: {count} concurrent HTTP/2 calls (h2c), each to a host of its own, then kept idle by the pool; req/s column = idle connections per MiB of RSS growth (higher is better), RSS = the process's peak"
            )
        } else {
            format!(
                "8. Memory per idle connection: {count} concurrent HTTP/1.1 calls (each answered 300 ms late), then kept idle by the pool; req/s column = idle connections per MiB of RSS growth (higher is better), RSS = the process's peak"
            )
        };
        scenarios.push(run_scenario(
            id,
            title,
            srv.name,
            IDLE,
            |c| measure(id, c, port, count, None),
            o.runs,
        ));
    }

    match switchyard_tests::net::v4_listener_with_hanging_v6().filter(|_| o.wants("s5")) {
        Some((v4, _hanging)) => {
            let srv = switchyard_tests::server::TestServer::start_on(v4, Default::default());
            let port = srv.port();
            let title =
                "5. Happy Eyeballs: first route ([::1]) never answers; time to the response head".to_owned();
            let rounds = o.rounds;
            scenarios.push(run_scenario(
                "s5",
                title,
                "hyper test server on 127.0.0.1, [::1] black-holed",
                EYEBALLS,
                |c| measure("s5", c, port, rounds, None),
                o.runs,
            ));
        }
        None if o.wants("s5") => eprintln!("s5: skipped, no IPv6 loopback to black-hole"),
        None => {}
    }

    if o.wants("s9") {
        match h3::Ngtcp2::start(&tls).filter(|_| ca_written) {
            Some(srv) => {
                let port = srv.port;
                let title = format!(
                    "9. {} concurrent streams on one HTTP/3 connection (QUIC, TLS 1.3)",
                    measure::CONCURRENCY
                );
                scenarios.push(run_scenario(
                    "s9",
                    title,
                    h3::SERVER,
                    h3::CLIENTS,
                    |c| measure("s9", c, port, n, None),
                    o.runs,
                ));
            }
            None => eprintln!("s9: skipped (ngtcp2's gtlsserver is not installed)"),
        }
    }
    if o.wants("s9-large") {
        match h3::Ngtcp2::start(&tls).filter(|_| ca_written) {
            Some(srv) => {
                let port = srv.port;
                let count = if o.quick { 2 } else { 6 };
                scenarios.push(run_scenario(
                    "s9-large",
                    h3::large_title(),
                    h3::SERVER,
                    h3::CLIENTS,
                    |c| measure("s9-large", c, port, count, None),
                    o.runs,
                ));
            }
            None => eprintln!("s9-large: skipped (ngtcp2's gtlsserver is not installed)"),
        }
    }

    let core = report::core_scenario(o.quick);
    let report = report::Report { scenarios, core, runs: o.runs, requests: n, quick: o.quick };
    let markdown = report.markdown();
    println!("{markdown}");
    let _ = std::fs::create_dir_all(&o.out);
    let _ = std::fs::write(o.out.join("report.md"), &markdown);
    let _ = std::fs::write(o.out.join("report.json"), report.json());
    eprintln!(
        "wrote {}/report.md and report.json in {:.0} s",
        o.out.display(),
        started.elapsed().as_secs_f64()
    );
    if o.check {
        // Scenarios left out with --only are not missing.
        let missing: Vec<String> = report
            .missing()
            .into_iter()
            .filter(|m| m.split([' ', '/']).next().is_some_and(|id| o.wants(id)))
            .collect();
        if !missing.is_empty() {
            eprintln!("--check: no number for: {}", missing.join(", "));
            std::process::exit(1);
        }
        eprintln!("--check: every scenario produced a number for every client");
        match budget::check(&report.core) {
            Ok(lines) => eprintln!("--check: within the instruction budget: {lines}"),
            Err(over) => {
                eprintln!("--check: over the instruction budget (bench/instructions.budget): {over}");
                std::process::exit(1);
            }
        }
    }
}
