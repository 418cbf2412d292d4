//! `switchyard get` (the default command): curl's habits, with the
//! connection timeline.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_common::{AsyncResolve, ClientBuilder, Error, EventLog, FromConfig, HttpVersion};
use switchyard_core::{CallId, ConnectionId, PoolStats, Route, Source};

use crate::args::{Dns, GetArgs, Runtime};
pub use crate::exit::Failed;
use crate::exit::{self};
use crate::record::Recorder;
use crate::redirect::{self, Hop, Next};
use crate::request::Spec;
use crate::timeline;
use crate::transfer::{status_line, HopDone, Transfer};

/// What every transfer of the command shares: the arguments, the request,
/// the event log (timelines, `--json`) and the phase recorder (`-w`, HAR).
struct Ctx {
    args: GetArgs,
    spec: Spec,
    log: EventLog,
    recorder: Recorder,
}

/// The async resolver `--dns` asks for (`None`: the system resolver), built by
/// `make` for the adapter's runtime from the `--dns-server`s (empty: the
/// system's configuration).
fn async_dns<R: AsyncResolve>(
    args: &GetArgs,
    make: impl FnOnce(&[std::net::SocketAddr]) -> Result<R, Error>,
) -> Result<Option<R>, Failed> {
    match args.dns {
        Dns::System if args.dns_servers.is_empty() => Ok(None),
        Dns::System => Err(Failed::config("--dns-server needs --dns hickory")),
        Dns::Hickory => {
            make(&args.dns_servers).map(Some).map_err(|e| Failed::config(format!("--dns hickory: {e:#}")))
        }
    }
}

/// The client for any adapter, from the command line's settings.
fn client<C: FromConfig>(ctx: &Ctx, dns: Option<impl AsyncResolve>) -> Result<C, Failed> {
    let args = &ctx.args;
    let mut b = ClientBuilder::<C>::new()
        .event_listener(ctx.log.clone())
        .event_listener(ctx.recorder.clone())
        .connect_timeout(args.connect_timeout)
        .attempt_delay(args.attempt_delay)
        .dns_cache_ttl(args.dns_cache_ttl);
    if let Some(resolver) = dns {
        b = b.async_resolver(resolver);
    }
    if ctx.spec.no_user_agent {
        b = b.user_agent("");
    }
    // --http2 is the default: HTTP/2 by ALPN over TLS, HTTP/1.1 on http://.
    if args.http1 {
        b = b.http_version(HttpVersion::Http1Only);
    } else if args.h2_prior_knowledge {
        b = b.http_version(HttpVersion::Http2Only);
    }
    if args.insecure {
        b = b.danger_accept_invalid_certificates(true);
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
        let proxy = switchyard_common::parse_proxy_url(url)
            .map_err(|why| Failed::config(format!("--proxy: {why}")))?;
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
            .map_err(|e| Failed::config(format!("cannot read --cacert {}: {e}", path.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| Failed::config(format!("bad PEM in --cacert {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Failed::config(format!("no certificates in --cacert {}", path.display())));
        }
        for c in certs {
            b = b.add_root_certificate(c.to_vec());
        }
    }
    b.build().map_err(|e| Failed::with_code(exit::code(&e), format!("{e:#}")))
}

/// Runs `switchyard get` on the runtime `--runtime` names. A transfer's
/// failure is printed as it happens; the error returned then has an empty
/// message and the first failure's exit code.
///
/// # Errors
/// A bad option, or the first failed transfer.
pub fn run(mut args: GetArgs) -> Result<(), Failed> {
    // curl's default scheme: `localhost:8080/health` is http://localhost:8080/health.
    for url in &mut args.urls {
        *url = with_default_scheme(url);
    }
    if args.output.as_deref() == Some(std::path::Path::new("-")) {
        // `-o -`: stdout, as curl.
        args.output = None;
    }
    let spec = Spec::from_args(&args)?;
    if args.insecure {
        eprintln!(
            "switchyard: warning: --insecure: server certificates are NOT verified; anyone on the path can read and change this traffic"
        );
    }
    let ctx = Arc::new(Ctx { args, spec, log: EventLog::default(), recorder: Recorder::default() });
    let args = &ctx.args;
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
            .map_err(|e| Failed::new(format!("cannot start the tokio runtime: {e}")))?;
            let dns = async_dns(args, |servers| {
                if servers.is_empty() {
                    switchyard_tokio::HickoryResolver::system()
                } else {
                    switchyard_tokio::HickoryResolver::with_servers(servers)
                }
            })?;
            let client: switchyard_tokio::Client = client(&ctx, dns)?;
            let done = rt.block_on(run_async(client, Arc::clone(&ctx), |f| {
                let task = tokio::spawn(f);
                Box::pin(async move { task.await.map_err(|e| e.to_string())? })
            }));
            // A lookup still running on the blocking pool (a slow AAAA answer the
            // race did not wait for) must not hold the exit up.
            rt.shutdown_background();
            done
        }
        Runtime::Smol => {
            let dns = async_dns(args, |servers| {
                if servers.is_empty() {
                    switchyard_smol::HickoryResolver::system()
                } else {
                    switchyard_smol::HickoryResolver::with_servers(servers)
                }
            })?;
            let client: switchyard_smol::Client = client(&ctx, dns)?;
            smol::block_on(run_async(client, Arc::clone(&ctx), |f| Box::pin(smol::spawn(f))))
        }
        Runtime::Std => {
            if args.dns == Dns::Hickory {
                return Err(Failed::config(
                    "--dns hickory needs --runtime tokio or smol (switchyard-std resolves with the system)",
                ));
            }
            let client: switchyard_std::Client = client(&ctx, None::<Arc<dyn AsyncResolve>>)?;
            run_std(&client, &ctx)
        }
    }
}

/// `url` with `http://` in front when it names no scheme (curl's guess for a
/// URL without one; switchyard speaks only http and https).
#[must_use]
pub fn with_default_scheme(url: &str) -> String {
    if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    }
}

/// The rest of the transfer's time under `--max-time`.
impl Ctx {
    fn remaining(&self, t: &Transfer, url: &str) -> Result<Option<Duration>, Failed> {
        let Some(max) = self.args.max_time else { return Ok(None) };
        match max.checked_sub(t.started.elapsed()) {
            Some(left) if !left.is_zero() => Ok(Some(left)),
            _ => Err(Failed::with_code(
                exit::TIMEOUT,
                format!(
                    "({}) {}: --max-time {} ms passed",
                    exit::TIMEOUT,
                    switchyard_common::redact(url),
                    max.as_millis()
                ),
            )),
        }
    }

    /// -v: what the version flags mean for `url`.
    fn announce(&self, url: &str) {
        let args = &self.args;
        let cleartext = url.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        if args.verbose && !args.json && args.http2 && cleartext {
            eprintln!(
                "  --http2 on an http:// URL: HTTP/1.1 (no h2c upgrade; --http2-prior-knowledge sends HTTP/2 in the clear)"
            );
        }
    }

    /// The first hop of `url`.
    fn first_hop(&self, url: &str) -> Hop {
        Hop {
            method: self.spec.method.clone(),
            url: url.to_owned(),
            headers: self.spec.headers.clone(),
            body: self.spec.body.clone(),
        }
    }

    /// An answered hop, as the transfer keeps it.
    #[allow(clippy::too_many_arguments)]
    fn answered(
        hop: &Hop,
        head: &http::response::Parts,
        call: Option<CallId>,
        connection: Option<ConnectionId>,
        source: Option<Source>,
        route: impl Fn(ConnectionId) -> Option<Route>,
    ) -> HopDone {
        let peer = connection.and_then(route).filter(|r| r.unix_socket().is_none()).map(|r| r.socket_addr());
        HopDone {
            call,
            method: hop.method.clone(),
            url: hop.url.clone(),
            status: head.status,
            version: head.version,
            headers: head.headers.clone(),
            peer,
            connection,
            source,
            bytes: 0,
            redirect: None,
        }
    }

    /// Where the answer leads: another hop (with -L), or nowhere.
    fn next_hop(&self, hop: &Hop, done: &mut HopDone, t: &Transfer) -> Result<Option<Hop>, Failed> {
        if !self.args.location {
            return Ok(None);
        }
        match redirect::next(hop, done.status, &done.headers) {
            Ok(Next::Answer) => Ok(None),
            Ok(Next::Follow(next)) => {
                let followed = t.hops.len() as u64;
                if followed >= u64::from(self.args.max_redirs) {
                    return Err(Failed::with_code(
                        exit::TOO_MANY_REDIRECTS,
                        format!(
                            "({}) {}: more than {} redirects (--max-redirs)",
                            exit::TOO_MANY_REDIRECTS,
                            switchyard_common::redact(&t.url),
                            self.args.max_redirs
                        ),
                    ));
                }
                done.redirect = Some(next.url.clone());
                Ok(Some(next))
            }
            Err(why) => Err(Failed::new(format!(
                "({}) {}: {why}",
                exit::GENERIC,
                switchyard_common::redact(&hop.url)
            ))),
        }
    }

    /// A redirect followed: its head with -i, its timeline with -v.
    fn followed(&self, print: bool, done: &HopDone, sink: &mut Option<Sink>) -> Result<(), Failed> {
        if !print {
            return Ok(());
        }
        if self.args.include {
            open(sink, &self.args)?.head(done)?;
        }
        self.timeline(done.call);
        if self.args.verbose && !self.args.json {
            eprintln!(
                "  {} -> following to {}",
                status_line(done.version, done.status),
                switchyard_common::redact(done.redirect.as_deref().unwrap_or(""))
            );
        }
        Ok(())
    }

    /// The answer: -f's verdict, then its head (stderr, or the output with
    /// -i / -I); whether its body is to be read.
    fn answer(&self, print: bool, done: &HopDone, sink: &mut Option<Sink>) -> Result<bool, Failed> {
        let args = &self.args;
        if args.fail && done.status.as_u16() >= 400 {
            return Err(Failed::with_code(
                exit::HTTP_STATUS,
                format!(
                    "({}) {}: the server answered {}",
                    exit::HTTP_STATUS,
                    switchyard_common::redact(&done.url),
                    status_line(done.version, done.status)
                ),
            ));
        }
        if print {
            if args.include || args.head {
                open(sink, args)?.head(done)?;
            } else if !args.silent && !args.json {
                eprintln!("{}", status_line(done.version, done.status));
            }
            if !args.head && done.method != http::Method::HEAD {
                open(sink, args)?;
            }
        }
        Ok(done.method != http::Method::HEAD)
    }

    /// -v: one call's timeline.
    fn timeline(&self, call: Option<CallId>) {
        if let (true, false, Some(call)) = (self.args.verbose, self.args.json, call) {
            eprint!("{}", timeline::render(&self.log.events(), call));
        }
    }

    /// The call a failed hop made (the last one started), for its timeline.
    fn last_call(&self) -> Option<CallId> {
        self.log.events().iter().rev().find(|e| e.name == "call_start").and_then(|e| e.call)
    }

    /// Prints a transfer's failure (unless -s without -S).
    fn report(&self, f: &Failed) {
        if !self.args.silent || self.args.show_error {
            eprintln!("switchyard: {}", f.text(self.args.verbose));
        }
    }

    /// A single transfer's end: --json's events and result, -w, the error.
    fn finish(&self, t: &Transfer) {
        let args = &self.args;
        if let Err(f) = &t.result {
            if t.failed_call.is_some() {
                self.timeline(t.failed_call);
            }
            if !args.json {
                self.report(f);
            }
        }
        let vars =
            (args.json || args.write_out.is_some()).then(|| crate::write_out::variables(t, &self.recorder));
        let mut out = std::io::stdout().lock();
        if args.json {
            for e in &self.log.events() {
                let _ = writeln!(out, "{}", timeline::json(e));
            }
            let mut result: serde_json::Map<String, serde_json::Value> =
                vars.iter().flatten().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            result.insert("url".into(), serde_json::json!(switchyard_common::redact(&t.url)));
            if let Err(f) = &t.result {
                result.insert(
                    "error".into(),
                    serde_json::json!({"exit_code": f.code, "message": f.text(true)}),
                );
            }
            let _ = writeln!(out, "{}", serde_json::json!({ "result": result }));
        }
        if let (Some(format), Some(vars)) = (&args.write_out, &vars) {
            for name in crate::write_out::unknown(format, vars) {
                eprintln!("switchyard: unknown --write-out variable: '{name}'");
            }
            let _ = write!(out, "{}", crate::write_out::render(format, vars, t.last().map(|h| &h.headers)));
        }
        let _ = out.flush();
    }

    /// --har: every call recorded.
    fn write_har(&self, transfers: &[Transfer]) -> Result<(), Failed> {
        let Some(path) = &self.args.har else { return Ok(()) };
        let archive = crate::har::archive(transfers, &self.recorder);
        let text = serde_json::to_string_pretty(&archive).unwrap_or_default();
        std::fs::write(path, text + "\n").map_err(|e| {
            Failed::with_code(exit::WRITE, format!("cannot write --har {}: {e}", path.display()))
        })
    }
}

/// Opens the transfer's output on first use.
fn open<'s>(sink: &'s mut Option<Sink>, args: &GetArgs) -> Result<&'s mut Sink, Failed> {
    if sink.is_none() {
        *sink = Some(Sink::open(args)?);
    }
    sink.as_mut().ok_or_else(|| Failed::new("no output"))
}

/// The first failure's exit code, as the command's error (already printed).
fn first_failure<'t>(transfers: impl IntoIterator<Item = &'t Transfer>) -> Result<(), Failed> {
    match transfers.into_iter().find_map(|t| t.result.as_ref().err()) {
        Some(f) => Err(Failed::with_code(f.code, String::new())),
        None => Ok(()),
    }
}

type Spawned = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Transfer, String>> + Send>>;

/// One URL's transfer on an async client: each hop a call, redirects
/// followed with -L; `print`: the head, body and timelines go out (a
/// single fetch), else the body is only counted (-n/-c).
async fn transfer_async<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    ctx: &Ctx,
    url: &str,
    print: bool,
) -> Transfer {
    let mut t = Transfer::start(url);
    let mut hop = ctx.first_hop(url);
    let mut sink = None;
    let result = loop {
        let timeout = match ctx.remaining(&t, &hop.url) {
            Ok(d) => d,
            Err(f) => break Err(f),
        };
        let mut request = client.request(hop.method.clone(), hop.url.as_str()).headers(hop.headers.clone());
        if let Some(body) = &hop.body {
            request = request.body(body.clone());
        }
        if let Some(d) = timeout {
            request = request.timeout(d);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                t.failed_call = ctx.last_call();
                break Err(Failed::call(&hop.url, &e));
            }
        };
        let (call, connection, source) =
            (response.call_id(), response.connection_id(), response.connection_source());
        let (head, mut body) = response.into_parts();
        let mut done = Ctx::answered(&hop, &head, call, connection, source, |id| client.connection_route(id));
        match ctx.next_hop(&hop, &mut done, &t) {
            Err(f) => {
                t.hops.push(done);
                break Err(f);
            }
            Ok(Some(next)) => {
                // The redirect's body is read to its end, so its connection
                // goes back to the pool for a same-origin hop.
                while let Ok(Some(chunk)) = body.chunk().await {
                    done.bytes += chunk.len() as u64;
                }
                let shown = ctx.followed(print, &done, &mut sink);
                t.hops.push(done);
                if let Err(f) = shown {
                    break Err(f);
                }
                hop = next;
            }
            Ok(None) => {
                let read = async {
                    if !ctx.answer(print, &done, &mut sink)? {
                        return Ok(());
                    }
                    while let Some(chunk) = body.chunk().await.map_err(|e| Failed::call(&hop.url, &e))? {
                        done.bytes += chunk.len() as u64;
                        if let Some(s) = &mut sink {
                            s.write(&chunk)?;
                        }
                    }
                    Ok(())
                }
                .await;
                let read = read.and_then(|()| sink.take().map_or(Ok(()), Sink::finish));
                if print {
                    ctx.timeline(done.call);
                }
                t.hops.push(done);
                break read;
            }
        }
    };
    t.end(result)
}

async fn run_async<R: switchyard_async::Runtime>(
    client: switchyard_async::Client<R>,
    ctx: Arc<Ctx>,
    spawn: impl Fn(Spawned) -> Spawned,
) -> Result<(), Failed> {
    let args = &ctx.args;
    if args.requests == 1 && args.concurrency == 1 {
        let mut transfers = Vec::new();
        for url in &args.urls {
            ctx.log.clear();
            ctx.announce(url);
            let t = transfer_async(&client, &ctx, url, true).await;
            ctx.finish(&t);
            transfers.push(t);
        }
        ctx.write_har(&transfers)?;
        return first_failure(&transfers);
    }
    let total = args.requests * args.urls.len() as u64;
    let progress = Progress::new(total, args);
    let limit =
        Arc::new(tokio::sync::Semaphore::new(usize::try_from(args.concurrency).unwrap_or(usize::MAX)));
    let mut tasks = Vec::new();
    for i in 0..total {
        let url = args.urls[usize::try_from(i).unwrap_or(0) % args.urls.len()].clone();
        let (client, limit, bar, ctx) =
            (client.clone(), Arc::clone(&limit), progress.bar.clone(), Arc::clone(&ctx));
        tasks.push(spawn(Box::pin(async move {
            let _permit = limit.acquire_owned().await.ok();
            let t = transfer_async(&client, &ctx, &url, false).await;
            bar.inc(1);
            Ok(t)
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
    summary(&ctx, total, results, &client.stats(), progress.started, metrics)
}

/// One URL's transfer on the blocking client (as [`transfer_async`]).
fn transfer_std(client: &switchyard_std::Client, ctx: &Ctx, url: &str, print: bool) -> Transfer {
    let mut t = Transfer::start(url);
    let mut hop = ctx.first_hop(url);
    let mut sink = None;
    let result = loop {
        let timeout = match ctx.remaining(&t, &hop.url) {
            Ok(d) => d,
            Err(f) => break Err(f),
        };
        let mut request = client.request(hop.method.clone(), hop.url.as_str()).headers(hop.headers.clone());
        if let Some(body) = &hop.body {
            request = request.body(body.clone());
        }
        if let Some(d) = timeout {
            request = request.timeout(d);
        }
        let response = match request.send() {
            Ok(r) => r,
            Err(e) => {
                t.failed_call = ctx.last_call();
                break Err(Failed::call(&hop.url, &e));
            }
        };
        let (call, connection, source) =
            (response.call_id(), response.connection_id(), response.connection_source());
        let (head, mut body) = response.into_parts();
        let mut done = Ctx::answered(&hop, &head, call, connection, source, |id| client.connection_route(id));
        match ctx.next_hop(&hop, &mut done, &t) {
            Err(f) => {
                t.hops.push(done);
                break Err(f);
            }
            Ok(Some(next)) => {
                while let Ok(Some(chunk)) = body.chunk() {
                    done.bytes += chunk.len() as u64;
                }
                let shown = ctx.followed(print, &done, &mut sink);
                t.hops.push(done);
                if let Err(f) = shown {
                    break Err(f);
                }
                hop = next;
            }
            Ok(None) => {
                let read = (|| {
                    if !ctx.answer(print, &done, &mut sink)? {
                        return Ok(());
                    }
                    while let Some(chunk) = body.chunk().map_err(|e| Failed::call(&hop.url, &e))? {
                        done.bytes += chunk.len() as u64;
                        if let Some(s) = &mut sink {
                            s.write(&chunk)?;
                        }
                    }
                    Ok(())
                })();
                let read = read.and_then(|()| sink.take().map_or(Ok(()), Sink::finish));
                if print {
                    ctx.timeline(done.call);
                }
                t.hops.push(done);
                break read;
            }
        }
    };
    t.end(result)
}

/// The blocking client: `-c` threads share the requests.
fn run_std(client: &switchyard_std::Client, ctx: &Ctx) -> Result<(), Failed> {
    let args = &ctx.args;
    if args.requests == 1 && args.concurrency == 1 {
        let mut transfers = Vec::new();
        for url in &args.urls {
            ctx.log.clear();
            ctx.announce(url);
            let t = transfer_std(client, ctx, url, true);
            ctx.finish(&t);
            transfers.push(t);
        }
        ctx.write_har(&transfers)?;
        return first_failure(&transfers);
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
                let t = transfer_std(client, ctx, url, false);
                progress.bar.inc(1);
                results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Ok(t));
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
    summary(ctx, total, results, &client.stats(), progress.started, metrics)
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

/// Where one transfer's output goes as it arrives: `-o FILE`, stdout, or
/// nowhere (`--json` without `-o`). Memory stays bounded whatever the body's
/// size; a long download to a file shows a progress line when stderr is a
/// terminal.
struct Sink {
    out: Option<Box<dyn Write + Send>>,
    what: String,
    progress: Option<indicatif::ProgressBar>,
    started: Instant,
}

impl Sink {
    fn open(args: &GetArgs) -> Result<Sink, Failed> {
        let cannot = |what: &str, e: std::io::Error| {
            Failed::with_code(exit::WRITE, format!("({}) cannot write {what}: {e}", exit::WRITE))
        };
        let (out, what): (Option<Box<dyn Write + Send>>, String) = match &args.output {
            Some(path) => {
                let file = std::fs::File::create(path).map_err(|e| cannot(&path.display().to_string(), e))?;
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
            let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bytes}/{total_bytes} {binary_bytes_per_sec} {elapsed} {wide_bar}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Ok(Sink { out, what, progress, started: Instant::now() })
    }

    fn failed(&self, e: &std::io::Error) -> Failed {
        Failed::with_code(exit::WRITE, format!("({}) cannot write {}: {e}", exit::WRITE, self.what))
    }

    /// A response head, as curl's -i prints it (CRLF line ends).
    fn head(&mut self, done: &HopDone) -> Result<(), Failed> {
        let mut text = format!("{}\r\n", status_line(done.version, done.status));
        for (name, value) in &done.headers {
            text.push_str(&format!("{name}: {}\r\n", String::from_utf8_lossy(value.as_bytes())));
        }
        text.push_str("\r\n");
        if let Some(bar) = &self.progress {
            if let Some(n) = done
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
            {
                bar.set_length(n);
            }
        }
        match &mut self.out {
            Some(out) => out.write_all(text.as_bytes()).map_err(|e| self.failed(&e)),
            None => Ok(()),
        }
    }

    fn write(&mut self, chunk: &[u8]) -> Result<(), Failed> {
        if let Some(out) = &mut self.out {
            if let Err(e) = out.write_all(chunk) {
                return Err(self.failed(&e));
            }
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

    fn finish(mut self) -> Result<(), Failed> {
        if let Some(bar) = self.progress.take() {
            bar.finish_and_clear();
        }
        if let Some(out) = &mut self.out {
            if let Err(e) = out.flush() {
                return Err(self.failed(&e));
            }
        }
        Ok(())
    }
}

/// Prints the -n/-c run's end: with -v the timelines of the first call and
/// of every call that opened a connection, -w per transfer, the summary
/// (with --json, every event first), --metrics, --har.
fn summary(
    ctx: &Ctx,
    total: u64,
    results: Vec<Result<Transfer, String>>,
    stats: &PoolStats,
    started: Instant,
    metrics: Option<String>,
) -> Result<(), Failed> {
    let args = &ctx.args;
    let mut latencies = Vec::new();
    let mut errors: Vec<Failed> = Vec::new();
    let mut transfers = Vec::new();
    for r in results {
        match r {
            Ok(t) => {
                match &t.result {
                    Ok(()) => latencies.push(t.elapsed),
                    Err(f) => errors.push(f.clone()),
                }
                transfers.push(t);
            }
            Err(e) => errors.push(Failed::new(format!("a task failed: {e}"))),
        }
    }
    if args.verbose && !args.json {
        let events = ctx.log.events();
        for (i, (call, record)) in ctx.recorder.all().into_iter().enumerate() {
            let opened = record.connection.is_some_and(|(_, s)| s == Source::New);
            if i == 0 || opened {
                eprintln!("{call}{}:", if opened { " (opened a connection)" } else { "" });
                eprint!("{}", timeline::render(&events, call));
            }
        }
    }
    if let Some(format) = &args.write_out {
        let mut out = std::io::stdout().lock();
        for (i, t) in transfers.iter().enumerate() {
            let vars = crate::write_out::variables(t, &ctx.recorder);
            if i == 0 {
                for name in crate::write_out::unknown(format, &vars) {
                    eprintln!("switchyard: unknown --write-out variable: '{name}'");
                }
            }
            let _ = write!(out, "{}", crate::write_out::render(format, &vars, t.last().map(|h| &h.headers)));
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
        for e in ctx.log.events() {
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
    ctx.write_har(&transfers)?;
    match errors.first() {
        Some(first) => {
            let f = Failed::with_code(
                first.code,
                format!("{} of {total} requests failed; first: {}", errors.len(), first.text(args.verbose)),
            );
            ctx.report(&f);
            Err(Failed::with_code(first.code, String::new()))
        }
        None => Ok(()),
    }
}
