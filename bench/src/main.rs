//! `switchyard-bench`: every client against the same loopback server in one run,
//! reported as medians and ratios. Wall-clock numbers are noisy on small VMs:
//! compare ratios within a run, never absolute numbers across runs.
//!
//! Run: `cargo run --release -p switchyard-bench [-- --requests N]`.
//! The server (a minimal single-thread tokio HTTP/1.1 server writing a fixed
//! response) runs in its own process, started and stopped by the harness.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BODY: &[u8] = b"Hello, World!";

fn response(close: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n",
        BODY.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
    .into_iter()
    .chain(BODY.iter().copied())
    .collect()
}

/// The server process: accept, and answer every request head with the fixed response.
fn serve(port_file: &str, close: bool) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        std::fs::write(port_file, listener.local_addr().unwrap().port().to_string()).unwrap();
        let reply = response(close);
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            let reply = reply.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 8192];
                let mut have = 0;
                loop {
                    match s.read(&mut buf[have..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => have += n,
                    }
                    // Answer each complete head; keep any partial one.
                    while let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                        if s.write_all(&reply).await.is_err() || close {
                            return;
                        }
                        buf.copy_within(end + 4..have, 0);
                        have -= end + 4;
                    }
                }
            });
        }
    });
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(close: bool) -> Server {
        let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-{close}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.arg("serve").arg(&dir).stdout(Stdio::null());
        if close {
            cmd.arg("close");
        }
        let child = cmd.spawn().expect("server process");
        let start = Instant::now();
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&dir) {
                if let Ok(p) = p.trim().parse() {
                    break p;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "server did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = std::fs::remove_file(&dir);
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) of this process, from /proc (10 ms ticks).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

struct Result {
    client: &'static str,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us: f64,
}

fn summarize(client: &'static str, mut lat: Vec<Duration>, wall: Duration, cpu_used: Duration) -> Result {
    lat.sort();
    let n = lat.len().max(1);
    let pct = |p: f64| lat[((n as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6;
    Result {
        client,
        rps: n as f64 / wall.as_secs_f64(),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_us: cpu_used.as_secs_f64() * 1e6 / n as f64,
    }
}

/// Runs `one` `n` times sequentially, timing each.
fn sequential(client: &'static str, n: usize, mut one: impl FnMut()) -> Result {
    for _ in 0..n / 10 {
        one(); // warm-up
    }
    let (c0, t0) = (cpu(), Instant::now());
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        one();
        lat.push(t.elapsed());
    }
    summarize(client, lat, t0.elapsed(), cpu() - c0)
}

fn raw_loop(port: u16, close: bool) -> impl FnMut() {
    let expected = response(close).len();
    let mut conn: Option<std::net::TcpStream> = None;
    let req = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes();
    let mut buf = vec![0u8; 4096];
    move || {
        let s = conn.get_or_insert_with(|| {
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_nodelay(true).unwrap();
            s
        });
        s.write_all(&req).unwrap();
        let mut got = 0;
        while got < expected {
            let n = s.read(&mut buf[got..]).unwrap();
            assert!(n > 0, "server closed early");
            got += n;
        }
        if close {
            conn = None;
        }
    }
}

/// 64 tasks on a single-thread runtime, each sending `n / 64` requests in turn.
fn concurrent<F, Fut>(client: &'static str, rt: &tokio::runtime::Runtime, n: usize, make: F) -> Result
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    const TASKS: usize = 64;
    let per = n / TASKS;
    let (c0, t0) = (cpu(), Instant::now());
    let lat = rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        let mut handles = Vec::new();
        for _ in 0..TASKS {
            let futs: Vec<Fut> = (0..per).map(|_| make()).collect();
            handles.push(local.spawn_local(async move {
                let mut lat = Vec::with_capacity(per);
                for f in futs {
                    let t = Instant::now();
                    f.await;
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        local
            .run_until(async {
                let mut all = Vec::new();
                for h in handles {
                    all.extend(h.await.unwrap());
                }
                all
            })
            .await
    });
    summarize(client, lat, t0.elapsed(), cpu() - c0)
}

/// The baseline for scenario 2: a bare tokio read/write loop per task, one
/// kept-alive connection each.
async fn raw_tokio(port: u16, count: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.set_nodelay(true).unwrap();
    let req = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes();
    let expected = response(false).len();
    let mut buf = vec![0u8; 4096];
    for _ in 0..count {
        s.write_all(&req).await.unwrap();
        let mut got = 0;
        while got < expected {
            got += s.read(&mut buf[got..]).await.unwrap();
        }
    }
}

fn print(title: &str, results: &[Result]) {
    println!("\n{title}");
    let base = &results[0];
    let reqwest = results.iter().find(|r| r.client == "reqwest");
    println!(
        "  {:<22} {:>10} {:>9} {:>9} {:>10} {:>9} {:>11}",
        "client", "req/s", "p50 µs", "p99 µs", "CPU µs/req", "vs raw", "vs reqwest"
    );
    for r in results {
        println!(
            "  {:<22} {:>10.0} {:>9.1} {:>9.1} {:>10.2} {:>9.2} {:>11}",
            r.client,
            r.rps,
            r.p50_us,
            r.p99_us,
            r.cpu_us,
            r.rps / base.rps,
            reqwest.map_or("-".into(), |q| format!("{:.2}", r.rps / q.rps)),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve(&args[2], args.get(3).map(String::as_str) == Some("close"));
        return;
    }
    let n: usize = args
        .iter()
        .position(|a| a == "--requests")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    for close in [false, true] {
        let server = Server::start(close);
        let port = server.port;
        let url = format!("http://127.0.0.1:{port}/");
        let n = if close { n / 4 } else { n };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut results = vec![sequential("raw std socket", n, raw_loop(port, close))];

        let client = switchyard_tokio::Client::builder().build().unwrap();
        results.push(sequential("switchyard-tokio", n, || {
            rt.block_on(async {
                let mut r = client.get(&url).send().await.unwrap();
                assert_eq!(r.body_mut().collect().await.unwrap().as_ref(), BODY);
            });
        }));

        let hyper: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(hyper_util::client::legacy::connect::HttpConnector::new());
        let uri: http::Uri = url.parse().unwrap();
        results.push(sequential("hyper-util (legacy)", n, || {
            rt.block_on(async {
                use http_body_util::BodyExt;
                let r = hyper.get(uri.clone()).await.unwrap();
                assert_eq!(r.into_body().collect().await.unwrap().to_bytes().as_ref(), BODY);
            });
        }));

        let reqwest = reqwest::Client::builder().build().unwrap();
        results.push(sequential("reqwest", n, || {
            rt.block_on(async {
                let r = reqwest.get(&url).send().await.unwrap();
                assert_eq!(r.bytes().await.unwrap().as_ref(), BODY);
            });
        }));

        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        results.push(sequential("ureq", n, || {
            let mut r = agent.get(&url).call().unwrap();
            assert_eq!(r.body_mut().read_to_vec().unwrap(), BODY);
        }));

        print(
            if close {
                "Scenario 4: connection churn (every response Connection: close), sequential"
            } else {
                "Scenario 1: sequential HTTP/1.1 GETs on one kept-alive connection (pin with: taskset -c 0 switchyard-bench)"
            },
            &results,
        );
        drop(server);
    }

    // Scenario 2: 64 concurrent HTTP/1.1 GETs through each client's pool.
    let server = Server::start(false);
    let port = server.port;
    let url: &'static str = Box::leak(format!("http://127.0.0.1:{port}/").into_boxed_str());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (c0, t0) = (cpu(), Instant::now());
    rt.block_on(async {
        let tasks: Vec<_> = (0..64).map(|_| tokio::spawn(raw_tokio(port, n / 64))).collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let raw_wall = t0.elapsed();
    let raw = Result {
        client: "raw tokio loop (64 tasks)",
        rps: (n / 64 * 64) as f64 / raw_wall.as_secs_f64(),
        p50_us: 0.0,
        p99_us: 0.0,
        cpu_us: (cpu() - c0).as_secs_f64() * 1e6 / n as f64,
    };
    let sw = switchyard_tokio::Client::builder().build().unwrap();
    let switchyard = concurrent("switchyard-tokio", &rt, n, || {
        let c = sw.clone();
        async move {
            let mut r = c.get(url).send().await.unwrap();
            assert_eq!(r.body_mut().collect().await.unwrap().as_ref(), BODY);
        }
    });
    let hy: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let uri: http::Uri = url.parse().unwrap();
    let hyper = concurrent("hyper-util (legacy)", &rt, n, || {
        let (c, u) = (hy.clone(), uri.clone());
        async move {
            use http_body_util::BodyExt;
            let r = c.get(u).await.unwrap();
            assert_eq!(r.into_body().collect().await.unwrap().to_bytes().as_ref(), BODY);
        }
    });
    let rq = reqwest::Client::builder().build().unwrap();
    let reqwest = concurrent("reqwest", &rt, n, || {
        let c = rq.clone();
        async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.bytes().await.unwrap().as_ref(), BODY);
        }
    });
    print(
        "Scenario 2: 64 concurrent HTTP/1.1 GETs through the pool (single-thread runtime; raw loop has no latencies)",
        &[raw, switchyard, hyper, reqwest],
    );
    drop(server);
}
