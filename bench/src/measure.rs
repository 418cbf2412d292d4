//! One measurement, in a process of its own (so peak RSS is the client's and
//! pinning applies to it alone): one client, one scenario, printed as a JSON
//! line for the harness.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::server::{response, BODY};

/// What one measurement found.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Client CPU (user + system) per request, µs.
    pub cpu_us: f64,
    /// Peak resident memory of the process, KiB.
    pub rss_kib: u64,
    /// The client's voluntary context switches per 1 000 requests: it blocked
    /// with nothing to do (waits the time hides when the peer is the limit).
    pub vol_k: f64,
    /// Involuntary context switches per 1 000 requests: it was preempted.
    pub inv_k: f64,
}

impl Sample {
    /// As one JSON line.
    pub fn json(&self) -> String {
        format!(
            "{{\"rps\":{:.1},\"p50_us\":{:.2},\"p99_us\":{:.2},\"cpu_us\":{:.3},\"rss_kib\":{},\"vol_k\":{:.2},\"inv_k\":{:.2}}}",
            self.rps, self.p50_us, self.p99_us, self.cpu_us, self.rss_kib, self.vol_k, self.inv_k
        )
    }

    /// From a JSON line printed by [`Sample::json`].
    pub fn parse(line: &str) -> Option<Sample> {
        let field = |name: &str| -> Option<f64> {
            let at = line.find(&format!("\"{name}\":"))? + name.len() + 3;
            let rest = &line[at..];
            let end = rest.find([',', '}']).unwrap_or(rest.len());
            rest[..end].trim().parse().ok()
        };
        Some(Sample {
            rps: field("rps")?,
            p50_us: field("p50_us")?,
            p99_us: field("p99_us")?,
            cpu_us: field("cpu_us")?,
            rss_kib: field("rss_kib")? as u64,
            vol_k: field("vol_k").unwrap_or(0.0),
            inv_k: field("inv_k").unwrap_or(0.0),
        })
    }
}

/// What this process used so far: CPU time and context switches.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    /// User + system CPU time, from /proc (10 ms ticks).
    pub(crate) cpu: Duration,
    /// Voluntary context switches of the live threads.
    pub(crate) vol: u64,
    /// Involuntary context switches of the live threads.
    pub(crate) inv: u64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, earlier: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            vol: self.vol.saturating_sub(earlier.vol),
            inv: self.inv.saturating_sub(earlier.inv),
        }
    }
}

/// Context switches of threads that ended (see [`thread_exits`]).
static EXITED: [std::sync::atomic::AtomicU64; 2] = [const { std::sync::atomic::AtomicU64::new(0) }; 2];

/// The calling thread is about to end: its context switches are kept for
/// [`cpu`], which otherwise sees only live threads. Threads that start and
/// end inside a measurement (the calling threads of the blocking rows) call it.
fn thread_exits() {
    let (vol, inv) = switches(std::path::Path::new("/proc/thread-self/status"));
    EXITED[0].fetch_add(vol, std::sync::atomic::Ordering::Relaxed);
    EXITED[1].fetch_add(inv, std::sync::atomic::Ordering::Relaxed);
}

/// (voluntary, involuntary) context switches in one thread's status file.
fn switches(status: &std::path::Path) -> (u64, u64) {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    let (mut vol, mut inv) = (0, 0);
    for line in status.lines() {
        let count = |prefix: &str| line.strip_prefix(prefix).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = count("voluntary_ctxt_switches:") {
            vol += n;
        } else if let Some(n) = count("nonvoluntary_ctxt_switches:") {
            inv += n;
        }
    }
    (vol, inv)
}

/// This process's [`Usage`] now. The CPU time is the whole process's
/// (`/proc/self/stat`, dead threads included); the context switches are
/// summed over the threads alive now (`/proc/self/task/*/status`: Linux
/// keeps them per thread) and those that reported as they ended
/// ([`thread_exits`]: the blocking rows' calling threads). A library thread
/// that ends mid-run is not counted; the clients here keep theirs (tokio's
/// and smol's workers, std's job threads for 5 s after their last job).
pub(crate) fn cpu() -> Usage {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut vol = EXITED[0].load(std::sync::atomic::Ordering::Relaxed);
    let mut inv = EXITED[1].load(std::sync::atomic::Ordering::Relaxed);
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let (v, i) = switches(&task.path().join("status"));
        vol += v;
        inv += i;
    }
    // System calls are not counted here: `/proc/self/io` counts only the
    // `read`/`write` family, and clients differ in `send`/`recv` against
    // `writev`/`read` (strace or perf count them all; bench/vs.sh's notes).
    Usage { cpu: Duration::from_millis(ticks * 10), vol, inv }
}

fn peak_rss_kib() -> u64 {
    proc_status_kib("VmHWM:")
}

/// A KiB figure of this process from /proc (`VmHWM:` peak, `VmRSS:` now).
fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn summarize(mut lat: Vec<Duration>, wall: Duration, used: Usage, requests: usize) -> Sample {
    lat.sort();
    let pct = |p: f64| {
        if lat.is_empty() {
            0.0
        } else {
            lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6
        }
    };
    Sample {
        rps: requests as f64 / wall.as_secs_f64(),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_us: used.cpu.as_secs_f64() * 1e6 / requests.max(1) as f64,
        rss_kib: peak_rss_kib(),
        vol_k: used.vol as f64 * 1000.0 / requests.max(1) as f64,
        inv_k: used.inv as f64 * 1000.0 / requests.max(1) as f64,
    }
}

/// `one` `n` times in a row (after a 10 % warm-up), each timed.
fn sequential(n: usize, mut one: impl FnMut()) -> Sample {
    for _ in 0..n / 10 {
        one();
    }
    let (c0, t0) = (cpu(), Instant::now());
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        one();
        lat.push(t.elapsed());
    }
    summarize(lat, t0.elapsed(), cpu() - c0, n)
}

/// [`sequential`] inside one future: the calls run one after another on
/// the runtime that polls it.
async fn sequential_async<F, Fut>(n: usize, mut one: F) -> Sample
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..n / 10 {
        one().await;
    }
    let (c0, t0) = (cpu(), Instant::now());
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        one().await;
        lat.push(t.elapsed());
    }
    summarize(lat, t0.elapsed(), cpu() - c0, n)
}

/// The number of concurrent callers in scenarios 2 and 3.
pub const CONCURRENCY: usize = 64;

/// 64 tasks on a single-thread tokio runtime, each making `n / 64` calls in turn.
fn tokio_concurrent<F, Fut>(n: usize, make: F) -> Sample
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    tokio_concurrent_with(CONCURRENCY, n, make)
}

/// `width` tasks on a single-thread tokio runtime, each making `n / width`
/// calls in turn (after one warm-up call each).
pub(crate) fn tokio_concurrent_with<F, Fut>(width: usize, n: usize, make: F) -> Sample
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    on_runtime(&rt, width, n, make)
}

/// [`tokio_concurrent_with`] on a runtime the caller made (one whose tasks
/// already hold the client's connection).
pub(crate) fn on_runtime<F, Fut>(rt: &tokio::runtime::Runtime, width: usize, n: usize, make: F) -> Sample
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let make = std::rc::Rc::new(make);
    let per = n / width;
    // Warm-up: one call per task, so connections exist.
    rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        for _ in 0..width {
            local.spawn_local(make());
        }
        local.await;
    });
    let (c0, t0) = (cpu(), Instant::now());
    let lat = rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        let handles: Vec<_> = (0..width)
            .map(|_| {
                let make = std::rc::Rc::clone(&make);
                local.spawn_local(async move {
                    let mut lat = Vec::with_capacity(per);
                    for _ in 0..per {
                        let t = Instant::now();
                        make().await;
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        local
            .run_until(async {
                let mut all = Vec::new();
                for h in handles {
                    all.extend(h.await.expect("task"));
                }
                all
            })
            .await
    });
    summarize(lat, t0.elapsed(), cpu() - c0, per * width)
}

/// The same on smol: 64 tasks on a local executor on this thread.
fn smol_concurrent<F, Fut>(n: usize, make: F) -> Sample
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    smol_concurrent_with(CONCURRENCY, n, make)
}

/// `width` tasks on a smol local executor on this thread, each making
/// `n / width` calls in turn (after one warm-up call each).
pub(crate) fn smol_concurrent_with<F, Fut>(width: usize, n: usize, make: F) -> Sample
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let make = std::rc::Rc::new(make);
    let per = n / width;
    let ex = smol::LocalExecutor::new();
    smol::block_on(ex.run(async {
        let warm: Vec<_> = (0..width).map(|_| ex.spawn(make())).collect();
        for w in warm {
            w.await;
        }
    }));
    let (c0, t0) = (cpu(), Instant::now());
    let lat = smol::block_on(ex.run(async {
        let handles: Vec<_> = (0..width)
            .map(|_| {
                let make = std::rc::Rc::clone(&make);
                ex.spawn(async move {
                    let mut lat = Vec::with_capacity(per);
                    for _ in 0..per {
                        let t = Instant::now();
                        make().await;
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await);
        }
        all
    }));
    summarize(lat, t0.elapsed(), cpu() - c0, per * width)
}

/// 64 threads, each making `n / 64` blocking calls in turn.
fn thread_concurrent(n: usize, one: impl Fn() + Sync) -> Sample {
    thread_concurrent_with(CONCURRENCY, n, one)
}

/// `width` threads, each making `n / width` blocking calls in turn (after
/// one warm-up call each, on threads of their own).
pub(crate) fn thread_concurrent_with(width: usize, n: usize, one: impl Fn() + Sync) -> Sample {
    let per = n / width;
    std::thread::scope(|s| {
        for _ in 0..width {
            s.spawn(&one);
        }
    });
    let (c0, t0) = (cpu(), Instant::now());
    let lat = std::thread::scope(|s| {
        let handles: Vec<_> = (0..width)
            .map(|_| {
                s.spawn(|| {
                    let lat = (0..per)
                        .map(|_| {
                            let t = Instant::now();
                            one();
                            t.elapsed()
                        })
                        .collect::<Vec<_>>();
                    thread_exits();
                    lat
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("thread")).collect()
    });
    summarize(lat, t0.elapsed(), cpu() - c0, per * width)
}

fn raw_loop(port: u16, close: bool) -> impl FnMut() {
    let expected = response(close).len();
    let mut conn: Option<std::net::TcpStream> = None;
    let req = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes();
    let mut buf = vec![0u8; 4096];
    move || {
        let s = conn.get_or_insert_with(|| {
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            s
        });
        s.write_all(&req).expect("write");
        let mut got = 0;
        while got < expected {
            let n = s.read(&mut buf[got..]).expect("read");
            assert!(n > 0, "server closed early");
            got += n;
        }
        if close {
            conn = None;
        }
    }
}

/// A bare tokio read/write loop on one kept-alive connection.
async fn raw_tokio(port: u16, count: usize) {
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    raw_exchanges(s, port, count).await;
}

/// The same loop on smol's socket (through `compat`, which adds no copy or
/// zeroing for reads into initialized memory).
async fn raw_smol(port: u16, count: usize) {
    use tokio_util::compat::FuturesAsyncReadCompatExt;
    let s = smol::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    raw_exchanges(s.compat(), port, count).await;
}

/// `count` GETs written and their responses read, one after the other.
async fn raw_exchanges<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    port: u16,
    count: usize,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes();
    let expected = response(false).len();
    let mut buf = vec![0u8; 4096];
    for _ in 0..count {
        s.write_all(&req).await.expect("write");
        let mut got = 0;
        while got < expected {
            got += s.read(&mut buf[got..]).await.expect("read");
        }
    }
}

type Hyper = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

fn hyper(http2: bool) -> Hyper {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(http2)
        .build(hyper_util::client::legacy::connect::HttpConnector::new())
}

async fn hyper_get(c: &Hyper, uri: http::Uri) {
    use http_body_util::BodyExt;
    let r = c.get(uri).await.expect("hyper");
    assert_eq!(r.into_body().collect().await.expect("body").to_bytes().as_ref(), BODY);
}

fn reqwest_client(http2: bool) -> reqwest::Client {
    let b = reqwest::Client::builder();
    let b = if http2 { b.http2_prior_knowledge() } else { b };
    b.build().expect("reqwest")
}

async fn reqwest_get(c: &reqwest::Client, url: &str) {
    let r = c.get(url).send().await.expect("reqwest");
    assert_eq!(r.bytes().await.expect("body").as_ref(), BODY);
}

/// Idle connections ureq keeps per host in the concurrent scenarios: the 64
/// callers (its default is 3). hyper-util and reqwest keep any number; the
/// switchyard clients run with their defaults (an idle cap of 32 per host that
/// follows demand: under 64 steady callers it closes nothing).
const IDLE_PER_HOST: usize = CONCURRENCY;

fn switchyard_tokio(http2: bool) -> switchyard_tokio::Client {
    let b = switchyard_tokio::Client::builder();
    let b = if http2 { b.http_version(switchyard_tokio::HttpVersion::Http2Only) } else { b };
    b.build().expect("switchyard-tokio")
}

fn switchyard_smol(http2: bool) -> switchyard_smol::Client {
    let b = switchyard_smol::Client::builder();
    let b = if http2 { b.http_version(switchyard_smol::HttpVersion::Http2Only) } else { b };
    b.build().expect("switchyard-smol")
}

async fn switchyard_get<R: switchyard_async::Runtime>(c: &switchyard_async::Client<R>, url: &str) {
    let mut r = c.get(url).send().await.expect("switchyard");
    assert_eq!(r.body_mut().collect().await.expect("body").as_ref(), BODY);
}

fn std_get(c: &switchyard_std::Client, url: &str) {
    let mut r = c.get(url).send().expect("switchyard-std");
    assert_eq!(r.body_mut().collect().expect("body").as_ref(), BODY);
}

fn ureq_get(agent: &ureq::Agent, url: &str) {
    let mut r = agent.get(url).call().expect("ureq");
    assert_eq!(r.body_mut().read_to_vec().expect("body"), BODY);
}

/// Scenarios 1 and 4: sequential calls.
pub fn sequential_client(client: &str, port: u16, n: usize, close: bool) -> Option<Sample> {
    let url = format!("http://127.0.0.1:{port}/");
    let uri: http::Uri = url.parse().ok()?;
    Some(match client {
        "raw" => sequential(n, raw_loop(port, close)),
        "switchyard-tokio" => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let c = switchyard_tokio(false);
            sequential(n, || rt.block_on(switchyard_get(&c, &url)))
        }
        "switchyard-smol" => {
            let c = switchyard_smol(false);
            sequential(n, || smol::block_on(switchyard_get(&c, &url)))
        }
        // A smol program as most are written: one `smol::block_on` in `main`
        // around all its calls, the client on its default runtime (tasks on
        // smol's global executor). The row above runs each call in a
        // `block_on` of its own, as a blocking wrapper would.
        "switchyard-smol-main" => {
            let c = switchyard_smol(false);
            smol::block_on(sequential_async(n, || switchyard_get(&c, &url)))
        }
        // smol as a single-thread program runs: one executor, driven by the
        // thread that makes the calls (in one `block_on`), with the client's
        // tasks on it (`Smol::on`). The row above has the client's tasks on
        // smol's global executor thread and one `block_on` per call: every
        // call then wakes two other threads (the executor's and async-io's
        // reactor, which takes over between `block_on`s).
        "switchyard-smol-local" => {
            let ex = std::sync::Arc::new(smol::Executor::new());
            let c = switchyard_smol::Client::builder()
                .runtime(switchyard_smol::Smol::on(ex.clone()))
                .build()
                .expect("switchyard-smol");
            smol::block_on(ex.run(sequential_async(n, || switchyard_get(&c, &url))))
        }
        "switchyard-std" => {
            let c = switchyard_std::Client::new().ok()?;
            sequential(n, || std_get(&c, &url))
        }
        "hyper-util" => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let c = hyper(false);
            sequential(n, || rt.block_on(hyper_get(&c, uri.clone())))
        }
        "reqwest" => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let c = reqwest_client(false);
            sequential(n, || rt.block_on(reqwest_get(&c, &url)))
        }
        "ureq" => {
            let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
            sequential(n, || ureq_get(&agent, &url))
        }
        _ => return None,
    })
}

/// The process's resident memory now, KiB.
fn rss_kib() -> u64 {
    proc_status_kib("VmRSS:")
}

/// Scenario 8: `n` concurrent GETs, then the pool keeps the `n` connections
/// idle; the RSS growth per connection, as idle connections per MiB in `rps`
/// (higher is better). Every client keeps them all (switchyard with its idle
/// caps raised to `n`). Over HTTP/1.1 the server answers each call 300 ms late,
/// so each needs a connection of its own; over HTTP/2 (h2c prior knowledge)
/// each call names a host of its own (`h{i}.test`, all mapped to 127.0.0.1),
/// and each host gets its own connection.
pub fn idle_memory(client: &str, port: u16, n: usize, http2: bool) -> Option<Sample> {
    let hosts: Vec<String> =
        (0..n).map(|i| if http2 { format!("h{i}.test") } else { "127.0.0.1".to_owned() }).collect();
    let urls: Vec<String> = hosts.iter().map(|h| format!("http://{h}:{port}/")).collect();
    let socket = SocketAddr::from(([127, 0, 0, 1], port));
    let local = [IpAddr::from([127u8, 0, 0, 1])];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    let before = rss_kib();
    let t0 = Instant::now();
    let c0 = cpu();
    // The client stays alive (its connections idle) until measured.
    let _keep: Box<dyn std::any::Any> = match client {
        "switchyard-tokio" => {
            let mut b = switchyard_tokio::Client::builder().max_idle(n).max_idle_per_host(n);
            if http2 {
                b = b.http_version(switchyard_tokio::HttpVersion::Http2Only);
                for h in &hosts {
                    b = b.resolve(&format!("{h}:{port}"), local);
                }
            }
            let c = b.build().ok()?;
            rt.block_on(async {
                let calls: Vec<_> =
                    urls.iter().map(|u| tokio::spawn(call_tokio(c.clone(), u.clone()))).collect();
                for call in calls {
                    call.await.expect("call");
                }
                // On a loaded machine a connect can outlast the first
                // answers (300 ms): that call takes a connection released
                // meanwhile, and its own connect joins the pool idle when it
                // completes. Wait for those.
                let t = Instant::now();
                while c.stats().totals.idle < n && t.elapsed() < SETTLE {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
            assert_all_idle(&c.stats(), n);
            Box::new(c)
        }
        "switchyard-smol" => {
            let mut b = switchyard_smol::Client::builder().max_idle(n).max_idle_per_host(n);
            if http2 {
                b = b.http_version(switchyard_smol::HttpVersion::Http2Only);
                for h in &hosts {
                    b = b.resolve(&format!("{h}:{port}"), local);
                }
            }
            let c = b.build().ok()?;
            let ex = smol::LocalExecutor::new();
            smol::block_on(ex.run(async {
                let calls: Vec<_> = urls
                    .iter()
                    .map(|u| {
                        let (c, u) = (c.clone(), u.clone());
                        ex.spawn(async move { switchyard_get(&c, &u).await })
                    })
                    .collect();
                for call in calls {
                    call.await;
                }
                let t = Instant::now();
                while c.stats().totals.idle < n && t.elapsed() < SETTLE {
                    smol::Timer::after(Duration::from_millis(5)).await;
                }
            }));
            assert_all_idle(&c.stats(), n);
            Box::new(c)
        }
        "switchyard-std" => {
            // A thread per call (the blocking client's shape); on HTTP/2 each
            // idle connection keeps its reader thread, which is counted.
            let mut b = switchyard_std::Client::builder().max_idle(n).max_idle_per_host(n);
            if http2 {
                b = b.http_version(switchyard_std::HttpVersion::Http2Only);
                for h in &hosts {
                    b = b.resolve(&format!("{h}:{port}"), local);
                }
            }
            let c = b.build().ok()?;
            std::thread::scope(|s| {
                for u in &urls {
                    let c = c.clone();
                    std::thread::Builder::new()
                        .stack_size(64 * 1024)
                        .spawn_scoped(s, move || std_get(&c, u))
                        .expect("a caller thread");
                }
            });
            let t = Instant::now();
            while c.stats().totals.idle < n && t.elapsed() < SETTLE {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_all_idle(&c.stats(), n);
            Box::new(c)
        }
        "hyper-util" => {
            let http =
                hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(Fixed(vec![socket]));
            let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .http2_only(http2)
                    .build(http);
            rt.block_on(async {
                let calls: Vec<_> = urls
                    .iter()
                    .map(|u| {
                        let (c, uri): (_, http::Uri) = (c.clone(), u.parse().expect("uri"));
                        tokio::spawn(async move {
                            use http_body_util::BodyExt;
                            let r = c.get(uri).await.expect("hyper");
                            assert_eq!(
                                r.into_body().collect().await.expect("body").to_bytes().as_ref(),
                                BODY
                            );
                        })
                    })
                    .collect();
                for call in calls {
                    call.await.expect("call");
                }
            });
            Box::new(c)
        }
        "reqwest" => {
            let mut b = reqwest::Client::builder();
            if http2 {
                b = b.http2_prior_knowledge();
                for h in &hosts {
                    b = b.resolve(h, socket);
                }
            }
            let c = b.build().ok()?;
            rt.block_on(async {
                let calls: Vec<_> = urls
                    .iter()
                    .map(|u| {
                        let (c, u) = (c.clone(), u.clone());
                        tokio::spawn(async move { reqwest_get(&c, &u).await })
                    })
                    .collect();
                for call in calls {
                    call.await.expect("call");
                }
            });
            Box::new(c)
        }
        _ => return None,
    };
    let grown = rss_kib().saturating_sub(before).max(1);
    let wall = t0.elapsed();
    let used = cpu() - c0;
    Some(Sample {
        rps: n as f64 / (grown as f64 / 1024.0),
        p50_us: wall.as_secs_f64() * 1e6,
        p99_us: wall.as_secs_f64() * 1e6,
        cpu_us: used.cpu.as_secs_f64() * 1e6 / n as f64,
        rss_kib: peak_rss_kib(),
        vol_k: used.vol as f64 * 1000.0 / n as f64,
        inv_k: used.inv as f64 * 1000.0 / n as f64,
    })
}

/// How long scenario 8 waits for the connections to settle idle in the pool.
const SETTLE: Duration = Duration::from_secs(10);

/// Scenario 8's precondition: `n` calls made `n` connections, all now idle.
fn assert_all_idle(stats: &switchyard_core::PoolStats, n: usize) {
    assert!(
        stats.totals.idle == n && stats.created == n as u64,
        "scenario 8 needs {n} connections idle in the pool, one per call: {stats:?}"
    );
}

async fn call_tokio(c: switchyard_tokio::Client, url: String) {
    switchyard_get(&c, &url).await;
}

pub(crate) async fn switchyard_drain<R: switchyard_async::Runtime>(
    c: &switchyard_async::Client<R>,
    url: &str,
) -> usize {
    let mut r = c.get(url).send().await.expect("switchyard");
    let mut got = 0;
    while let Some(chunk) = r.body_mut().chunk().await.expect("body") {
        got += chunk.len();
    }
    got
}

/// Scenario 2 (HTTP/1.1 through the pool) and 3 (h2c, one connection): 64
/// concurrent callers.
pub fn concurrent_client(client: &str, port: u16, n: usize, http2: bool) -> Option<Sample> {
    let url: &'static str = Box::leak(format!("http://127.0.0.1:{port}/").into_boxed_str());
    let uri: http::Uri = url.parse().ok()?;
    Some(match client {
        "raw-tokio" if !http2 => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let per = n / CONCURRENCY;
            let (c0, t0) = (cpu(), Instant::now());
            rt.block_on(async {
                let tasks: Vec<_> = (0..CONCURRENCY).map(|_| tokio::spawn(raw_tokio(port, per))).collect();
                for t in tasks {
                    t.await.expect("task");
                }
            });
            // No per-request latencies: the loop is the limit, not a client.
            summarize(Vec::new(), t0.elapsed(), cpu() - c0, per * CONCURRENCY)
        }
        // The same loop on smol's own sockets and a local executor: what the
        // runtime itself allows, the ceiling of the `switchyard-smol` row.
        "raw-smol" if !http2 => {
            let per = n / CONCURRENCY;
            let ex = smol::LocalExecutor::new();
            let (c0, t0) = (cpu(), Instant::now());
            smol::block_on(ex.run(async {
                let tasks: Vec<_> = (0..CONCURRENCY).map(|_| ex.spawn(raw_smol(port, per))).collect();
                for t in tasks {
                    t.await;
                }
            }));
            summarize(Vec::new(), t0.elapsed(), cpu() - c0, per * CONCURRENCY)
        }
        "h2" if http2 => h2_limit(n, uri, SocketAddr::from(([127, 0, 0, 1], port)), None),
        "switchyard-tokio" => {
            let c = switchyard_tokio(http2);
            tokio_concurrent(n, move || {
                let c = c.clone();
                async move { switchyard_get(&c, url).await }
            })
        }
        "switchyard-smol" => {
            let c = switchyard_smol(http2);
            smol_concurrent(n, move || {
                let c = c.clone();
                async move { switchyard_get(&c, url).await }
            })
        }
        "switchyard-std" => {
            let b = switchyard_std::Client::builder();
            let b = if http2 { b.http_version(switchyard_std::HttpVersion::Http2Only) } else { b };
            let c = b.build().ok()?;
            thread_concurrent(n, || std_get(&c, url))
        }
        "hyper-util" => {
            let c = hyper(http2);
            tokio_concurrent(n, move || {
                let (c, u) = (c.clone(), uri.clone());
                async move { hyper_get(&c, u).await }
            })
        }
        "reqwest" => {
            let c = reqwest_client(http2);
            tokio_concurrent(n, move || {
                let c = c.clone();
                async move { reqwest_get(&c, url).await }
            })
        }
        "ureq" if !http2 => {
            let agent: ureq::Agent =
                ureq::Agent::config_builder().max_idle_connections_per_host(IDLE_PER_HOST).build().into();
            thread_concurrent(n, || ureq_get(&agent, url))
        }
        _ => return None,
    })
}

/// The HTTP/2 limit: the `h2` crate alone on one connection (over TLS when a
/// config is given), 64 streams at a time. The connection is made by the first
/// call, on the runtime that drives them all.
fn h2_limit(
    n: usize,
    uri: http::Uri,
    socket: SocketAddr,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Sample {
    h2_bare(CONCURRENCY, n, uri, socket, tls, None, (None, BODY.len()))
}

/// The `h2` crate alone on one connection, `width` streams at a time;
/// `windows` (stream, connection) replace h2's 65,535-byte defaults when
/// given. `exchange` is (`upload`, `expect`): each stream is a POST of
/// `upload` (a GET without one), and its response body `expect` bytes.
pub(crate) fn h2_bare(
    width: usize,
    n: usize,
    uri: http::Uri,
    socket: SocketAddr,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    windows: Option<(u32, u32)>,
    (upload, expect): (Option<bytes::Bytes>, usize),
) -> Sample {
    type Send = h2::client::SendRequest<bytes::Bytes>;
    let conn: std::rc::Rc<tokio::sync::OnceCell<Send>> = std::rc::Rc::default();
    tokio_concurrent_with(width, n, move || {
        let (conn, uri, tls, upload) = (std::rc::Rc::clone(&conn), uri.clone(), tls.clone(), upload.clone());
        async move {
            let send = conn
                .get_or_init(|| async {
                    let tcp = tokio::net::TcpStream::connect(socket).await.expect("connect");
                    tcp.set_nodelay(true).expect("nodelay");
                    let io: Box<dyn switchyard_async::AsyncIo> = match tls {
                        None => Box::new(tcp),
                        Some(config) => {
                            let host = uri.host().expect("host").to_owned();
                            let name = rustls::pki_types::ServerName::try_from(host).expect("name");
                            Box::new(
                                tokio_rustls::TlsConnector::from(config)
                                    .connect(name, tcp)
                                    .await
                                    .expect("tls"),
                            )
                        }
                    };
                    let mut builder = h2::client::Builder::new();
                    if let Some((stream, connection)) = windows {
                        builder.initial_window_size(stream).initial_connection_window_size(connection);
                    }
                    let (send, connection) = builder.handshake(io).await.expect("handshake");
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    send
                })
                .await
                .clone();
            let mut send = send.ready().await.expect("h2 ready");
            let resp = match upload {
                None => {
                    send.send_request(http::Request::get(uri).body(()).expect("request"), true)
                        .expect("send")
                        .0
                }
                Some(body) => {
                    let req = http::Request::post(uri).body(()).expect("request");
                    let (resp, mut stream) = send.send_request(req, false).expect("send");
                    // h2 holds the bytes and sends them as the windows allow.
                    stream.send_data(body, true).expect("send body");
                    resp
                }
            };
            let mut body = resp.await.expect("response").into_body();
            let mut got = 0;
            while let Some(chunk) = body.data().await {
                let chunk = chunk.expect("data");
                got += chunk.len();
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            assert_eq!(got, expect, "the whole body");
        }
    })
}

/// Scenario 5: time to the response head for a fresh client whose first route
/// (`[::1]:port`) never answers and whose second (`127.0.0.1:port`) does.
/// Returns the median over `rounds` fresh clients, as a sample whose `p50_us`
/// is that median (and `rps` unused).
pub fn happy_eyeballs(client: &str, port: u16, rounds: usize) -> Option<Sample> {
    let host = "dual.test";
    let url = format!("http://{host}:{port}/");
    let addrs = [IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]), IpAddr::from([127u8, 0, 0, 1])];
    let authority = format!("{host}:{port}");
    let mut lat = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    for _ in 0..rounds {
        let t = Instant::now();
        match client {
            // The ideal's second half: one request on the working route.
            "raw" => raw_head(port)?,
            "switchyard-tokio" => {
                let c = switchyard_tokio::Client::builder().resolve(&authority, addrs).build().ok()?;
                rt.block_on(async { c.get(&url).send().await.map(drop) }).ok()?;
            }
            "switchyard-smol" => {
                let c = switchyard_smol::Client::builder().resolve(&authority, addrs).build().ok()?;
                smol::block_on(async { c.get(&url).send().await.map(drop) }).ok()?;
            }
            "switchyard-std" => {
                let c = switchyard_std::Client::builder().resolve(&authority, addrs).build().ok()?;
                c.get(&url).send().ok()?;
            }
            "reqwest" => {
                let socket: Vec<SocketAddr> = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
                let c = reqwest::Client::builder().resolve_to_addrs(host, &socket).build().ok()?;
                rt.block_on(async { c.get(&url).send().await.map(drop) }).ok()?;
            }
            "hyper-util" => {
                let socket: Vec<SocketAddr> = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
                let mut connector =
                    hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(Fixed(socket));
                connector.set_happy_eyeballs_timeout(Some(Duration::from_millis(300)));
                let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
                    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                        .build(connector);
                let uri: http::Uri = url.parse().ok()?;
                rt.block_on(async { c.get(uri).await.map(drop) }).ok()?;
            }
            "ureq" => {
                let socket: Vec<SocketAddr> = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
                let config =
                    ureq::Agent::config_builder().timeout_connect(Some(UREQ_CONNECT_TIMEOUT)).build();
                let agent = ureq::Agent::with_parts(
                    config,
                    ureq::unversioned::transport::DefaultConnector::default(),
                    UreqFixed(socket),
                );
                agent.get(&url).call().ok()?;
            }
            _ => return None,
        }
        lat.push(t.elapsed());
    }
    Some(summarize(lat, Duration::from_secs(1), Usage::default(), 1))
}

/// Connects to 127.0.0.1, sends a GET, reads until the end of the response head.
fn raw_head(port: u16) -> Option<()> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_nodelay(true).ok()?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

/// ureq has no attempt delay: a black-holed first address costs its connect
/// timeout, set to this.
pub const UREQ_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// ureq's resolver interface (its `unversioned` API), answering fixed addresses.
#[derive(Debug)]
struct UreqFixed(Vec<SocketAddr>);

impl ureq::unversioned::resolver::Resolver for UreqFixed {
    fn resolve(
        &self,
        _uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let mut out = self.empty();
        for a in &self.0 {
            out.push(*a);
        }
        Ok(out)
    }
}

/// A resolver for hyper-util's connector that answers every name with fixed addresses.
#[derive(Clone)]
pub(crate) struct Fixed(pub(crate) Vec<SocketAddr>);

impl tower_service::Service<hyper_util::client::legacy::connect::dns::Name> for Fixed {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        std::future::ready(Ok(self.0.clone().into_iter()))
    }
}

/// The rustls config the TLS peers get: ring, the bench CA only, ALPN h2.
pub(crate) fn tls_config(ca: &[u8]) -> Option<rustls::ClientConfig> {
    tls_config_alpn(ca, b"h2")
}

/// The same, offering only `alpn`.
pub(crate) fn tls_config_alpn(ca: &[u8], alpn: &[u8]) -> Option<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(ca.to_vec())).ok()?;
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Some(config)
}

/// Scenario 3 over TLS: 64 concurrent streams on one HTTP/2 connection to
/// `h2.test` (mapped to 127.0.0.1), trusting the bench CA (DER at the path in
/// `SWITCHYARD_BENCH_CA`).
pub fn tls_client(client: &str, port: u16, n: usize) -> Option<Sample> {
    let ca = std::fs::read(std::env::var_os("SWITCHYARD_BENCH_CA")?).ok()?;
    let host = crate::server::TLS_HOST;
    let url: &'static str = Box::leak(format!("https://{host}:{port}/").into_boxed_str());
    let authority = format!("{host}:{port}");
    let local = [IpAddr::from([127u8, 0, 0, 1])];
    let socket = SocketAddr::from(([127, 0, 0, 1], port));
    Some(match client {
        "h2" => h2_limit(n, url.parse().ok()?, socket, Some(std::sync::Arc::new(tls_config(&ca)?))),
        "switchyard-tokio" => {
            let c = switchyard_tokio::Client::builder()
                .add_root_certificate(ca)
                .resolve(&authority, local)
                .http_version(switchyard_tokio::HttpVersion::Http2Only)
                .build()
                .ok()?;
            tokio_concurrent(n, move || {
                let c = c.clone();
                async move { switchyard_get(&c, url).await }
            })
        }
        "switchyard-smol" => {
            let c = switchyard_smol::Client::builder()
                .add_root_certificate(ca)
                .resolve(&authority, local)
                .http_version(switchyard_smol::HttpVersion::Http2Only)
                .build()
                .ok()?;
            smol_concurrent(n, move || {
                let c = c.clone();
                async move { switchyard_get(&c, url).await }
            })
        }
        "switchyard-std" => {
            let c = switchyard_std::Client::builder()
                .add_root_certificate(ca)
                .resolve(&authority, local)
                .http_version(switchyard_std::HttpVersion::Http2Only)
                .build()
                .ok()?;
            thread_concurrent(n, || std_get(&c, url))
        }
        "hyper-util" => {
            let mut http =
                hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(Fixed(vec![socket]));
            http.enforce_http(false);
            // hyper-rustls sets ALPN itself (from enable_http2).
            let mut config = tls_config(&ca)?;
            config.alpn_protocols.clear();
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(config)
                .https_only()
                .enable_http2()
                .wrap_connector(http);
            let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .http2_only(true)
                    .build(https);
            let uri: http::Uri = url.parse().ok()?;
            tokio_concurrent(n, move || {
                let (c, u) = (c.clone(), uri.clone());
                async move {
                    use http_body_util::BodyExt;
                    let r = c.get(u).await.expect("hyper");
                    assert_eq!(r.into_body().collect().await.expect("body").to_bytes().as_ref(), BODY);
                }
            })
        }
        "reqwest" => {
            let c = reqwest::Client::builder()
                .tls_backend_preconfigured(tls_config(&ca)?)
                .resolve(host, socket)
                .build()
                .ok()?;
            tokio_concurrent(n, move || {
                let c = c.clone();
                async move { reqwest_get(&c, url).await }
            })
        }
        _ => return None,
    })
}
