//! `switchyard get`.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_common::{AsyncResolve, ClientBuilder, Error, EventLog, FromConfig, HttpVersion};
use switchyard_core::PoolStats;

use crate::args::{Dns, GetArgs, Runtime};
use crate::timeline;

/// A failure that ends the command, with the one line to print.
#[derive(Debug)]
pub struct Failed(pub String);

/// What one fetch of a `-n`/`-c` run returns: the status, the version and
/// the body's length (the body itself is not kept).
type Fetched = Result<(http::StatusCode, http::Version, u64), Error>;

/// The async resolver `--dns` asks for (`None`: the system resolver), built by
/// `make` for the adapter's runtime from the `--dns-server`s (empty: the
/// system's configuration).
fn async_dns<R: AsyncResolve>(
    args: &GetArgs,
    make: impl FnOnce(&[std::net::SocketAddr]) -> Result<R, Error>,
) -> Result<Option<R>, Failed> {
    match args.dns {
        Dns::System if args.dns_servers.is_empty() => Ok(None),
        Dns::System => Err(Failed("--dns-server needs --dns hickory".into())),
        Dns::Hickory => {
            make(&args.dns_servers).map(Some).map_err(|e| Failed(format!("--dns hickory: {e:#}")))
        }
    }
}

/// The client for any adapter, from the command line's settings.
fn client<C: FromConfig>(
    args: &GetArgs,
    log: &EventLog,
    dns: Option<impl AsyncResolve>,
) -> Result<C, Failed> {
    let mut b = ClientBuilder::<C>::new()
        .event_listener(log.clone())
        .connect_timeout(args.connect_timeout)
        .attempt_delay(args.attempt_delay)
        .dns_cache_ttl(args.dns_cache_ttl);
    if let Some(resolver) = dns {
        b = b.async_resolver(resolver);
    }
    if args.http1 {
        b = b.http_version(HttpVersion::Http1Only);
    } else if args.http2 || args.h2_prior_knowledge {
        b = b.http_version(HttpVersion::Http2Only);
    }
    if let Some(n) = args.max_per_host {
        b = b.max_connections_per_host(n);
    }
    if let Some(path) = &args.unix_socket {
        b = b.unix_socket(path);
    }
    if let Some(name) = &args.interface {
        b = b.interface(name);
    }
    if let Some(ip) = args.local_address {
        b = b.local_address(ip);
    }
    if let Some(idle) = args.keepalive_time {
        b = b.tcp_keepalive(idle);
    }
    if let Some(url) = &args.proxy {
        let proxy =
            switchyard_common::parse_proxy_url(url).map_err(|why| Failed(format!("--proxy: {why}")))?;
        b = b.proxies([proxy]);
    } else if args.no_proxy_env {
        b = b.no_proxy();
    } else {
        b = b.proxy_from_env();
    }
    for r in &args.resolve {
        b = b.resolve(&format!("{}:{}", r.host, r.port), r.addrs.iter().copied());
    }
    if let Some(path) = &args.cacert {
        use rustls::pki_types::pem::PemObject;
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| Failed(format!("cannot read --cacert {}: {e}", path.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| Failed(format!("bad PEM in --cacert {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Failed(format!("no certificates in --cacert {}", path.display())));
        }
        for c in certs {
            b = b.add_root_certificate(c.to_vec());
        }
    }
    b.build().map_err(|e| Failed(format!("{e:#}")))
}

/// Runs `switchyard get` on the runtime `--runtime` names.
pub fn run(args: GetArgs) -> Result<(), Failed> {
    let log = EventLog::default();
    match args.runtime {
        Runtime::Tokio => {
            // One fetch at a time: one thread, so the connection's task and the
            // body's reader never wake each other across cores (a large HTTP/2
            // download spends its time there otherwise). Runs of -n/-c use both.
            let one_at_a_time = args.requests == 1 && args.concurrency == 1;
            let rt = if one_at_a_time {
                tokio::runtime::Builder::new_current_thread().enable_all().build()
            } else {
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
            }
            .map_err(|e| Failed(format!("cannot start the tokio runtime: {e}")))?;
            let dns = async_dns(&args, |servers| {
                if servers.is_empty() {
                    switchyard_tokio::HickoryResolver::system()
                } else {
                    switchyard_tokio::HickoryResolver::with_servers(servers)
                }
            })?;
            let client: switchyard_tokio::Client = client(&args, &log, dns)?;
            let done = rt.block_on(run_async(client.into_generic(), log, args, |f| {
                let task = tokio::spawn(f);
                Box::pin(async move { task.await.map_err(|e| e.to_string())? })
            }));
            // A lookup still running on the blocking pool (a slow AAAA answer the
            // race did not wait for) must not hold the exit up.
            rt.shutdown_background();
            done
        }
        Runtime::Smol => {
            let dns = async_dns(&args, |servers| {
                if servers.is_empty() {
                    switchyard_smol::HickoryResolver::system()
                } else {
                    switchyard_smol::HickoryResolver::with_servers(servers)
                }
            })?;
            let client: switchyard_smol::Client = client(&args, &log, dns)?;
            smol::block_on(run_async(client.into_generic(), log, args, |f| Box::pin(smol::spawn(f))))
        }
        Runtime::Std => {
            if args.dns == Dns::Hickory {
                return Err(Failed(
                    "--dns hickory needs --runtime tokio or smol (switchyard-std resolves with the system)"
                        .into(),
                ));
            }
            let client: switchyard_std::Client = client(&args, &log, None::<Arc<dyn AsyncResolve>>)?;
            run_std(&client, &log, &args)
        }
    }
}

type Timed = Result<Duration, String>;
type Spawned = std::pin::Pin<Box<dyn std::future::Future<Output = Timed> + Send>>;

async fn run_async<R: switchyard_async::Runtime>(
    client: switchyard_async::Client<R>,
    log: EventLog,
    args: GetArgs,
    spawn: impl Fn(Spawned) -> Spawned,
) -> Result<(), Failed> {
    if args.requests == 1 && args.concurrency == 1 {
        for url in &args.urls {
            log.clear();
            let result = async {
                let mut response = client.get(url).send().await.map_err(Streamed::Call)?;
                let mut sink = Sink::open(&args, response.status(), response.version(), response.headers())?;
                while let Some(chunk) = response.body_mut().chunk().await.map_err(Streamed::Call)? {
                    sink.write(&chunk)?;
                }
                sink.finish()
            }
            .await;
            single(&log, &args, result)?;
        }
        return Ok(());
    }
    let total = args.requests * args.urls.len() as u64;
    let progress = Progress::new(total, &args);
    let limit =
        Arc::new(tokio::sync::Semaphore::new(usize::try_from(args.concurrency).unwrap_or(usize::MAX)));
    let mut tasks = Vec::new();
    for i in 0..total {
        let url = args.urls[usize::try_from(i).unwrap_or(0) % args.urls.len()].clone();
        let (client, limit, bar) = (client.clone(), Arc::clone(&limit), progress.bar.clone());
        tasks.push(spawn(Box::pin(async move {
            let _permit = limit.acquire_owned().await.ok();
            let t = Instant::now();
            let r = fetch_async(&client, &url).await;
            bar.inc(1);
            r.map(|_| t.elapsed()).map_err(|e| format!("{e:#}"))
        })));
        progress.tick();
    }
    let mut results = Vec::new();
    for t in tasks {
        progress.tick();
        results.push(t.await);
    }
    progress.done();
    let metrics = args
        .metrics
        .then(|| switchyard_common::metrics::prometheus_text(&client.stats_by_address(), &client.stats()));
    summary(total, results, &client.stats(), &log, &args, progress.started, metrics)
}

async fn fetch_async<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    url: &str,
) -> Fetched {
    let mut response = client.get(url).send().await?;
    // Read and dropped chunk by chunk: memory stays bounded.
    let mut bytes = 0;
    while let Some(chunk) = response.body_mut().chunk().await? {
        bytes += chunk.len() as u64;
    }
    Ok((response.status(), response.version(), bytes))
}

fn fetch_std(client: &switchyard_std::Client, url: &str) -> Fetched {
    let mut response = client.get(url).send()?;
    let mut bytes = 0;
    while let Some(chunk) = response.body_mut().chunk()? {
        bytes += chunk.len() as u64;
    }
    Ok((response.status(), response.version(), bytes))
}

/// The blocking client: `-c` threads share the requests.
fn run_std(client: &switchyard_std::Client, log: &EventLog, args: &GetArgs) -> Result<(), Failed> {
    if args.requests == 1 && args.concurrency == 1 {
        for url in &args.urls {
            log.clear();
            let result = (|| {
                let mut response = client.get(url).send().map_err(Streamed::Call)?;
                let mut sink = Sink::open(args, response.status(), response.version(), response.headers())?;
                while let Some(chunk) = response.body_mut().chunk().map_err(Streamed::Call)? {
                    sink.write(&chunk)?;
                }
                sink.finish()
            })();
            single(log, args, result)?;
        }
        return Ok(());
    }
    let total = args.requests * args.urls.len() as u64;
    let progress = Progress::new(total, args);
    let next = std::sync::atomic::AtomicU64::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..args.concurrency.min(total) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let url = &args.urls[usize::try_from(i).unwrap_or(0) % args.urls.len()];
                let t = Instant::now();
                let r = fetch_std(client, url).map(|_| t.elapsed()).map_err(|e| format!("{e:#}"));
                progress.bar.inc(1);
                results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(r);
            });
        }
        while next.load(std::sync::atomic::Ordering::Relaxed) < total {
            progress.tick();
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    progress.done();
    let results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let metrics = args
        .metrics
        .then(|| switchyard_common::metrics::prometheus_text(&client.stats_by_address(), &client.stats()));
    summary(total, results, &client.stats(), log, args, progress.started, metrics)
}

/// A progress bar, shown on a terminal only for runs longer than a second.
struct Progress {
    bar: indicatif::ProgressBar,
    show: bool,
    started: Instant,
}

impl Progress {
    fn new(total: u64, args: &GetArgs) -> Progress {
        Progress {
            bar: indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::hidden(),
            ),
            show: std::io::stderr().is_terminal() && !args.json,
            started: Instant::now(),
        }
    }
    fn tick(&self) {
        if self.show && self.started.elapsed() > Duration::from_secs(1) && self.bar.is_hidden() {
            self.bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }
    fn done(&self) {
        self.bar.finish_and_clear();
    }
}

/// How a streamed fetch failed: the call, or writing its body out.
enum Streamed {
    Call(Error),
    Write(Failed),
}

impl From<Failed> for Streamed {
    fn from(f: Failed) -> Streamed {
        Streamed::Write(f)
    }
}

/// Where one fetch's body goes as it arrives: `-o FILE`, stdout, or nowhere
/// (`--json` without `-o`). Memory stays bounded whatever the body's size;
/// a long download to a file shows a progress line when stderr is a terminal.
struct Sink {
    out: Option<Box<dyn Write>>,
    what: String,
    progress: Option<indicatif::ProgressBar>,
    started: Instant,
}

impl Sink {
    /// Says the status (stderr, unless `--json`) and opens the output.
    fn open(
        args: &GetArgs,
        status: http::StatusCode,
        version: http::Version,
        headers: &http::HeaderMap,
    ) -> Result<Sink, Failed> {
        if !args.json {
            eprintln!("{version:?} {status}");
        }
        let (out, what): (Option<Box<dyn Write>>, String) = match &args.output {
            Some(path) => {
                let file = std::fs::File::create(path)
                    .map_err(|e| Failed(format!("cannot write {}: {e}", path.display())))?;
                (
                    Some(Box::new(std::io::BufWriter::with_capacity(256 * 1024, file))),
                    path.display().to_string(),
                )
            }
            None if !args.json => (
                Some(Box::new(std::io::BufWriter::with_capacity(256 * 1024, std::io::stdout()))),
                "stdout".into(),
            ),
            None => (None, String::new()),
        };
        let progress = (args.output.is_some() && std::io::stderr().is_terminal()).then(|| {
            let length = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let bar =
                indicatif::ProgressBar::with_draw_target(length, indicatif::ProgressDrawTarget::hidden());
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bytes}/{total_bytes} {binary_bytes_per_sec} {elapsed} {wide_bar}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Ok(Sink { out, what, progress, started: Instant::now() })
    }

    fn write(&mut self, chunk: &[u8]) -> Result<(), Failed> {
        if let Some(out) = &mut self.out {
            out.write_all(chunk).map_err(|e| Failed(format!("cannot write {}: {e}", self.what)))?;
        }
        if let Some(bar) = &self.progress {
            bar.inc(chunk.len() as u64);
            // Shown only for downloads that take longer than a second.
            if bar.is_hidden() && self.started.elapsed() > Duration::from_secs(1) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), Streamed> {
        if let Some(bar) = self.progress.take() {
            bar.finish_and_clear();
        }
        if let Some(out) = &mut self.out {
            out.flush().map_err(|e| Failed(format!("cannot write {}: {e}", self.what)))?;
        }
        Ok(())
    }
}

/// Ends one streamed fetch: its timeline (-v / --json) and its error, if any.
fn single(log: &EventLog, args: &GetArgs, result: Result<(), Streamed>) -> Result<(), Failed> {
    let events = log.events();
    if args.json {
        let mut out = std::io::stdout().lock();
        for e in &events {
            let _ = writeln!(out, "{}", timeline::json(e));
        }
    }
    let call = events.iter().find(|e| e.name == "call_start").and_then(|e| e.call);
    if args.verbose && !args.json {
        if let Some(call) = call {
            eprint!("{}", timeline::render(&events, call));
        }
    }
    match result {
        Ok(()) => Ok(()),
        Err(Streamed::Call(e)) => Err(Failed(format!("{e:#}"))),
        Err(Streamed::Write(f)) => Err(f),
    }
}

/// Prints the -n/-c summary (and, with --json, every event first).
fn summary(
    total: u64,
    results: Vec<Timed>,
    stats: &PoolStats,
    log: &EventLog,
    args: &GetArgs,
    started: Instant,
    metrics: Option<String>,
) -> Result<(), Failed> {
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(d) => latencies.push(d),
            Err(e) => errors.push(e),
        }
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let closed: serde_json::Map<String, serde_json::Value> =
        stats.closed.iter().map(|(r, n)| (r.to_string(), serde_json::json!(n))).collect();
    let summary = serde_json::json!({
        "requests": total,
        "succeeded": latencies.len(),
        "failed": errors.len(),
        "connections_opened": stats.created,
        "tcp_connects": stats.tcp_connects,
        "tls_handshakes": stats.tls_handshakes,
        "connections_used": stats.used,
        "connects_wasted": stats.wasted,
        "joined_idle": stats.joined_idle,
        "reused": stats.reused,
        "coalesced": stats.coalesced,
        "closed": closed,
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99)},
        "wall_ms": started.elapsed().as_secs_f64() * 1000.0,
    });
    if args.json {
        let mut out = std::io::stdout().lock();
        for e in log.events() {
            let _ = writeln!(out, "{}", timeline::json(&e));
        }
        let _ = writeln!(out, "{}", serde_json::json!({ "summary": summary }));
    } else {
        eprintln!(
            "{} requests: {} ok, {} failed in {:.0} ms\nconnects: {} TCP, {} TLS handshakes, {} wasted (thrown away after TCP)\nconnections: {} opened ({} carried requests, {} joined the pool idle), {} reused, {} coalesced\nclosed: {}\nlatency: p50 {:.2} ms, p99 {:.2} ms",
            total,
            latencies.len(),
            errors.len(),
            started.elapsed().as_secs_f64() * 1000.0,
            stats.tcp_connects,
            stats.tls_handshakes,
            stats.wasted,
            stats.created,
            stats.used,
            stats.joined_idle,
            stats.reused,
            stats.coalesced,
            if stats.closed.is_empty() {
                "none".to_owned()
            } else {
                stats.closed.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
            },
            pct(0.5),
            pct(0.99),
        );
    }
    if let Some(text) = metrics {
        // After the summary, on stdout: `switchyard get --metrics … > pool.prom`.
        print!("{text}");
    }
    match errors.first() {
        Some(first) => Err(Failed(format!("{} of {total} requests failed; first: {first}", errors.len()))),
        None => Ok(()),
    }
}
