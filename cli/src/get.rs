//! `switchyard get` (the default command): curl's habits, with the
//! connection timeline.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_common::{AsyncResolve, ClientBuilder, Error, EventLog, FromConfig, HttpVersion};
use switchyard_core::{CallId, ConnectionId, PoolStats, Route, Source};

use crate::args::{Dns, GetArgs, OutputTo, Runtime};
use crate::cookie::Jar;
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
    /// The cookie engine (`-b FILE`, `-c FILE`).
    jar: Option<std::sync::Mutex<Jar>>,
    /// `-n`: the netrc file's text.
    netrc: Option<String>,
    /// `-D FILE`: where heads are dumped (`-D -` goes through the output).
    dump: std::sync::Mutex<Option<std::fs::File>>,
}

/// One URL to fetch, and where its body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The URL (glob expanded, -G's query and -T's name added).
    pub url: String,
    /// Where the body goes.
    pub output: Out,
    /// Its place among the command's URLs, from 0.
    pub index: usize,
}

/// Where a body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// stdout (or nowhere with --json-events).
    Stdout,
    /// A file.
    File(std::path::PathBuf),
}

/// Sleeps on the transfer's runtime (--retry's waits).
type Sleep<'s> =
    &'s (dyn Fn(Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Sync);

/// The URLs to fetch with their outputs: every URL argument and --url in
/// order, globs expanded (unless -g), each paired with its -o / -O.
///
/// # Errors
/// No URL (exit 2), a bad glob (3), -O on a URL with no file name (23).
pub fn jobs(args: &GetArgs, spec: &Spec) -> Result<Vec<Job>, Failed> {
    let urls: Vec<&String> = args.urls.iter().chain(&args.more_urls).collect();
    if urls.is_empty() {
        return Err(Failed::config("no URL specified"));
    }
    if args.outputs.len() > urls.len() && !args.silent {
        eprintln!("Warning: Got more output options than URLs");
    }
    let place = |name: String| {
        let path = std::path::PathBuf::from(name);
        match &args.output_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path,
        }
    };
    let mut jobs = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let expanded = if args.globoff {
            vec![crate::glob::Expanded { url: (*url).clone(), values: Vec::new() }]
        } else {
            crate::glob::expand(url).map_err(|why| {
                Failed::with_code(exit::MALFORMED_URL, format!("({}) {url}: {why}", exit::MALFORMED_URL))
            })?
        };
        let slot = args.outputs.get(i).cloned().or(args.remote_name_all.then_some(OutputTo::RemoteName));
        for e in expanded {
            let mut url = spec.url_for(&with_default_scheme(&e.url));
            if !args.path_as_is {
                url = without_dot_segments(&url);
            }
            let output = match &slot {
                None => Out::Stdout,
                Some(OutputTo::File(f)) if f == "-" => Out::Stdout,
                Some(OutputTo::File(f)) => Out::File(place(crate::glob::output_name(f, &e.values))),
                Some(OutputTo::RemoteName) => Out::File(place(remote_name(&url)?)),
            };
            jobs.push(Job { url, output, index: jobs.len() });
        }
    }
    Ok(jobs)
}

/// `url` with `.` and `..` segments of its path merged away (RFC 3986
/// §5.2.4), as curl sends it unless --path-as-is.
#[must_use]
pub fn without_dot_segments(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some(slash) = rest.find('/') else { return url.to_owned() };
    let (authority, target) = rest.split_at(slash);
    let end = target.find(['?', '#']).unwrap_or(target.len());
    let (path, tail) = target.split_at(end);
    if !path.split('/').any(|s| s == "." || s == "..") {
        return url.to_owned();
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            other => out.push(other),
        }
    }
    format!("{scheme}://{authority}/{}{tail}", out.join("/"))
}

/// -O's file name: the URL path's last segment.
fn remote_name(url: &str) -> Result<String, Failed> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let name = path.split_once('/').map_or("", |(_, p)| p).rsplit('/').next().unwrap_or_default();
    if name.is_empty() {
        return Err(Failed::with_code(
            exit::WRITE,
            format!(
                "({}) {url}: Remote file name has no length (-O needs a URL that ends in a file name)",
                exit::WRITE
            ),
        ));
    }
    Ok(name.to_owned())
}

/// Whether curl's `--proto` list (`=https`, `-all,https`, `+http`,
/// `-http`, `all`) lets `url`'s scheme through; curl's exit 1 when not.
fn protocol_allowed(list: &str, url: &str, flag: &str) -> Result<(), Failed> {
    let scheme = url.split_once("://").map_or("http", |(s, _)| s).to_ascii_lowercase();
    let all = ["http", "https"];
    let mut allowed: Vec<&str> = all.to_vec();
    for item in list.split(',').map(str::trim) {
        let (op, name) = match item.chars().next() {
            Some(c @ ('=' | '+' | '-')) => (c, &item[1..]),
            _ => ('+', item),
        };
        if op == '=' {
            allowed.clear();
        }
        let names: Vec<&str> = if name == "all" { all.to_vec() } else { vec![name] };
        for n in names {
            if op == '-' {
                allowed.retain(|a| !a.eq_ignore_ascii_case(n));
            } else if !allowed.iter().any(|a| a.eq_ignore_ascii_case(n)) {
                allowed.push(n);
            }
        }
    }
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(&scheme)) {
        Ok(())
    } else {
        Err(Failed::with_code(
            exit::GENERIC,
            format!(
                "({}) {}: Protocol \"{scheme}\" disabled ({flag} {list})",
                exit::GENERIC,
                switchyard_common::redact(url)
            ),
        ))
    }
}

/// A resolver that answers with one address family only (-4, -6).
struct OneFamily(switchyard_common::SystemResolver, switchyard_core::Family);

impl switchyard_common::Resolve for OneFamily {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<std::net::IpAddr>> {
        let mut all = self.0.resolve(host, port)?;
        all.retain(|ip| switchyard_core::Family::of(ip) == self.1);
        if all.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{host} has no {} address",
                    if self.1 == switchyard_core::Family::V4 { "IPv4" } else { "IPv6" }
                ),
            ));
        }
        Ok(all)
    }
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
    builder(ctx, dns)?.build().map_err(|e| Failed::with_code(exit::code(&e), format!("{e:#}")))
}

/// An async client: [`client`]'s settings and --compressed's decoding.
fn async_client<C: FromConfig + switchyard_common::Layered>(
    ctx: &Ctx,
    dns: Option<impl AsyncResolve>,
) -> Result<C, Failed> {
    let mut b = builder::<C>(ctx, dns)?;
    if ctx.args.compressed {
        b = b.gzip(true).deflate(true).brotli(true);
    }
    b.build().map_err(|e| Failed::with_code(exit::code(&e), format!("{e:#}")))
}

/// The builder with the command line's settings.
fn builder<C: FromConfig>(ctx: &Ctx, dns: Option<impl AsyncResolve>) -> Result<ClientBuilder<C>, Failed> {
    let args = &ctx.args;
    let mut b = ClientBuilder::<C>::new()
        .event_listener(ctx.log.clone())
        .event_listener(ctx.recorder.clone())
        .connect_timeout(args.connect_timeout)
        .attempt_delay(args.attempt_delay)
        .dns_cache_ttl(args.dns_cache_ttl)
        // -i / -I print heads as the server wrote them.
        .keep_raw_head(args.include || args.head || args.dump_header.is_some() || args.write_out.is_some());
    if let Some(resolver) = dns {
        b = b.async_resolver(resolver);
    }
    if args.ipv4 || args.ipv6 {
        let family = if args.ipv4 { switchyard_core::Family::V4 } else { switchyard_core::Family::V6 };
        b = b.resolver(OneFamily(switchyard_common::SystemResolver, family));
    }
    if ctx.spec.no_user_agent {
        b = b.user_agent("");
    }
    // --http2 is the default: HTTP/2 by ALPN over TLS, HTTP/1.1 on http://.
    if args.http1 {
        b = b.http_version(HttpVersion::Http1Only);
    } else if args.h2_prior_knowledge {
        b = b.http_version(HttpVersion::Http2Only);
    } else if args.http3 {
        b = b.http_version(HttpVersion::Http3);
    } else if args.http3_only {
        b = b.http_version(HttpVersion::Http3Only);
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
        // curl's --interface takes an interface's name or a local address.
        match name.trim_start_matches("host!").trim_start_matches("if!").parse::<std::net::IpAddr>() {
            Ok(ip) => b = b.local_address(ip),
            Err(_) => b = b.interface(name.trim_start_matches("if!")),
        }
    }
    if let Some(ip) = args.local_address {
        b = b.local_address(ip);
    }
    if let Some(idle) = args.keepalive_time {
        b = b.tcp_keepalive(idle);
    }
    let proxy_url = match (&args.proxy, &args.socks5, &args.socks5_hostname) {
        (Some(url), _, _) => Some(url.clone()),
        (None, Some(hp), _) => Some(format!("socks5://{hp}")),
        (None, None, Some(hp)) => Some(format!("socks5h://{hp}")),
        _ => None,
    };
    let proxy_url = match (&proxy_url, &args.proxy_user) {
        (Some(url), Some(user)) => {
            let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            let (u, p) = user.split_once(':').unwrap_or((user, ""));
            Some(format!(
                "{scheme}://{}:{}@{rest}",
                crate::form::urlencode(u.as_bytes()),
                crate::form::urlencode(p.as_bytes())
            ))
        }
        _ => proxy_url,
    };
    if let Some(url) = proxy_url.filter(|_| args.noproxy.as_deref() != Some("*")) {
        let proxy = switchyard_common::parse_proxy_url(&url)
            .map_err(|why| Failed::config(format!("--proxy: {why}")))?;
        let mut rule = switchyard_common::ProxyRule::from(proxy);
        if let Some(list) = &args.noproxy {
            rule = rule.no_proxy(switchyard_common::NoProxy::from_string(list));
        }
        b = b.proxies([rule]);
    } else if args.no_proxy_env || args.noproxy.as_deref() == Some("*") {
        b = b.no_proxy();
    } else {
        b = b.proxy_from_env();
    }
    for r in &args.resolve {
        b = b.resolve(&format!("{}:{}", r.host, r.port), r.addrs.iter().copied());
    }
    if let Some(d) = args.expect100_timeout {
        b = b.expect_continue_timeout(d);
    }
    if let Some(ms) = args.happy_eyeballs_timeout_ms {
        b = b.attempt_delay(Duration::from_millis(ms));
    }
    if let Some(cert) = &args.cert {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| {
                Failed::with_code(exit::READ, format!("({}) cannot read {}: {e}", exit::READ, p.display()))
            })
        };
        let chain = read(cert)?;
        let key = match &args.key {
            Some(k) => read(k)?,
            None => chain.clone(),
        };
        b = b.client_identity_pem(&chain, &key);
    }
    if let Some(dir) = &args.capath {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Failed::config(format!("cannot read --capath {}: {e}", dir.display())))?;
        let mut found = 0;
        for entry in entries.flatten() {
            use rustls::pki_types::pem::PemObject;
            let Ok(iter) = rustls::pki_types::CertificateDer::pem_file_iter(entry.path()) else { continue };
            for c in iter.flatten() {
                b = b.add_root_certificate(c.to_vec());
                found += 1;
            }
        }
        if found == 0 {
            return Err(Failed::config(format!("no certificates in --capath {}", dir.display())));
        }
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
    Ok(b)
}

/// Runs `switchyard get` on the runtime `--runtime` names. A transfer's
/// failure is printed as it happens; the error returned then has an empty
/// message and the first failure's exit code.
///
/// # Errors
/// A bad option, or the first failed transfer.
pub fn run(args: GetArgs) -> Result<(), Failed> {
    let spec = Spec::from_args(&args)?;
    let jobs = jobs(&args, &spec)?;
    if let Some(list) = &args.proto {
        if let Some(refused) = jobs.iter().find_map(|j| protocol_allowed(list, &j.url, "--proto").err()) {
            return Err(refused);
        }
    }
    if args.compressed && args.runtime == Runtime::Std {
        return Err(Failed::config(
            "--compressed needs --runtime tokio or smol (switchyard-std does not decode bodies)",
        ));
    }
    if (args.http3 || args.http3_only) && args.runtime == Runtime::Std {
        return Err(Failed::config(
            "--http3 and --http3-only need --runtime tokio or smol (switchyard-std has no QUIC yet)",
        ));
    }
    if (args.ipv4 || args.ipv6) && args.dns == Dns::Hickory {
        return Err(Failed::config("-4/-6 work with the system resolver; with --dns hickory, use --resolve"));
    }
    if args.continue_at.as_deref() == Some("-") && jobs.iter().any(|j| j.output == Out::Stdout) {
        return Err(Failed::config("-C - needs -o FILE or -O (the size of the file is where it resumes)"));
    }
    if args.insecure {
        eprintln!(
            "switchyard: warning: --insecure: server certificates are NOT verified; anyone on the path can read and change this traffic"
        );
    }
    // The cookie engine: -b FILE reads a jar (a missing file is an empty
    // jar, as curl), -c writes one.
    let jar_files: Vec<&String> = args.cookie.iter().filter(|c| !c.contains('=')).collect();
    let jar = (!jar_files.is_empty() || args.cookie_jar.is_some()).then(|| {
        let mut text = String::new();
        for f in jar_files {
            if let Ok(t) = std::fs::read_to_string(f) {
                text.push_str(&t);
                text.push('\n');
            }
        }
        let host = jobs
            .first()
            .and_then(|j| url::Url::parse(&j.url).ok())
            .and_then(|u| u.host_str().map(str::to_owned));
        let mut jar = Jar::read(&text, &host.unwrap_or_default());
        if args.junk_session_cookies {
            jar.drop_session_cookies();
        }
        std::sync::Mutex::new(jar)
    });
    let netrc = if args.netrc || args.netrc_optional || args.netrc_file.is_some() {
        let path = args.netrc_file.clone().unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".netrc")
        });
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(_) if args.netrc_optional => None,
            Err(e) => {
                return Err(Failed::with_code(
                    exit::READ,
                    format!("({}) cannot read the netrc file {}: {e}", exit::READ, path.display()),
                ))
            }
        }
    } else {
        None
    };
    let dump = match args.dump_header.as_deref() {
        Some(f) if f != "-" => Some(std::fs::File::create(f).map_err(|e| {
            Failed::with_code(exit::WRITE, format!("({}) cannot write -D {f}: {e}", exit::WRITE))
        })?),
        _ => None,
    };
    let ctx = Arc::new(Ctx {
        args,
        spec,
        log: EventLog::default(),
        recorder: Recorder::default(),
        jar,
        netrc,
        dump: std::sync::Mutex::new(dump),
    });
    let result = run_on_runtime(&ctx, &jobs);
    ctx.write_jar()?;
    result
}

fn run_on_runtime(ctx: &Arc<Ctx>, jobs: &[Job]) -> Result<(), Failed> {
    let args = &ctx.args;
    match args.runtime {
        Runtime::Tokio => {
            // One fetch at a time: one thread, so the connection's task and the
            // body's reader never wake each other across cores (a large HTTP/2
            // download spends its time there otherwise). --concurrency uses both.
            let one_at_a_time = args.concurrency == 1;
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
            let client: switchyard_tokio::Client = async_client(ctx, dns)?;
            let sleep = |d: Duration| -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
                Box::pin(tokio::time::sleep(d))
            };
            let done = rt.block_on(run_async(
                client,
                Arc::clone(ctx),
                jobs,
                |f| {
                    let task = tokio::spawn(f);
                    Box::pin(async move { task.await.map_err(|e| e.to_string())? })
                },
                &sleep,
            ));
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
            let client: switchyard_smol::Client = async_client(ctx, dns)?;
            let sleep = |d: Duration| -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
                Box::pin(async move {
                    smol::Timer::after(d).await;
                })
            };
            smol::block_on(run_async(client, Arc::clone(ctx), jobs, |f| Box::pin(smol::spawn(f)), &sleep))
        }
        Runtime::Std => {
            if args.dns == Dns::Hickory {
                return Err(Failed::config(
                    "--dns hickory needs --runtime tokio or smol (switchyard-std resolves with the system)",
                ));
            }
            let client: switchyard_std::Client = client(ctx, None::<Arc<dyn AsyncResolve>>)?;
            run_std(&client, ctx, jobs)
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
    fn first_hop(&self, url: &str, offset: u64) -> Hop {
        let mut headers = self.spec.headers.clone();
        if offset > 0 {
            if let Ok(range) = http::HeaderValue::from_str(&format!("bytes={offset}-")) {
                headers.insert(http::header::RANGE, range);
            }
        }
        Hop {
            method: self.spec.method.clone(),
            url: url.to_owned(),
            headers,
            body: self.spec.body.clone(),
            method_forced: self.spec.method_forced,
            posts_data: self.spec.posts_data,
        }
    }

    /// The headers `hop` is sent with: its own, the jar's cookies for its
    /// URL, and -n's credentials for its host.
    fn hop_headers(&self, hop: &Hop) -> http::HeaderMap {
        let mut headers = hop.headers.clone();
        let parsed = url::Url::parse(&hop.url).ok();
        let Some(u) = parsed else { return headers };
        let host = u.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        if let Some(jar) = &self.jar {
            let jar = jar.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(cookies) = jar.header(host, u.path(), u.scheme() == "https") {
                let value = match headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok()) {
                    Some(given) => format!("{given}; {cookies}"),
                    None => cookies,
                };
                if let Ok(v) = http::HeaderValue::from_str(&value) {
                    headers.insert(http::header::COOKIE, v);
                }
            }
        }
        if let Some(text) = &self.netrc {
            if !self.spec.has_user && !headers.contains_key(http::header::AUTHORIZATION) {
                if let Some((login, password)) = crate::netrc::lookup(text, host) {
                    if let Ok(v) =
                        http::HeaderValue::from_str(&crate::request::basic(&format!("{login}:{password}")))
                    {
                        headers.insert(http::header::AUTHORIZATION, v);
                    }
                }
            }
        }
        headers
    }

    /// A head arrived for `done`: the jar learns its cookies; -D dumps it.
    fn saw_head(&self, done: &HopDone, sink: &mut Option<Sink>) -> Result<(), Failed> {
        if let Some(jar) = &self.jar {
            if let Ok(u) = url::Url::parse(&done.url) {
                let mut jar = jar.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let host = u.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
                for v in done.headers.get_all(http::header::SET_COOKIE) {
                    jar.set(&String::from_utf8_lossy(v.as_bytes()), host, u.path(), u.scheme() == "https");
                }
            }
        }
        match self.args.dump_header.as_deref() {
            Some("-") => {
                // -D -: stdout, wherever the body goes.
                if let Some(s) = sink.as_mut() {
                    s.flush_stdout()?;
                }
                let mut out = std::io::stdout().lock();
                out.write_all(&crate::transfer::head_text(done)).and_then(|()| out.flush()).map_err(|e| {
                    Failed::with_code(exit::WRITE, format!("({}) cannot write stdout: {e}", exit::WRITE))
                })?;
            }
            Some(path) => {
                let mut dump = self.dump.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(f) = dump.as_mut() {
                    f.write_all(&crate::transfer::head_text(done)).map_err(|e| {
                        Failed::with_code(
                            exit::WRITE,
                            format!("({}) cannot write -D {path}: {e}", exit::WRITE),
                        )
                    })?;
                }
            }
            None => {}
        }
        Ok(())
    }

    /// -c: the jar, written at the end.
    fn write_jar(&self) -> Result<(), Failed> {
        let (Some(path), Some(jar)) = (&self.args.cookie_jar, &self.jar) else { return Ok(()) };
        let text = jar.lock().unwrap_or_else(std::sync::PoisonError::into_inner).write();
        if path == "-" {
            print!("{text}");
            return Ok(());
        }
        std::fs::write(path, text).map_err(|e| {
            Failed::with_code(
                exit::WRITE,
                format!("({}) cannot write the cookie jar {path}: {e}", exit::WRITE),
            )
        })
    }

    /// --retry: how long to wait before trying `t` again, or `None` (not
    /// transient, no retries left, --retry-max-time passed).
    fn retry_wait(
        &self,
        t: &Transfer,
        left: u32,
        started: Instant,
        backoff: &mut Duration,
    ) -> Option<Duration> {
        let args = &self.args;
        if left == 0 {
            return None;
        }
        let status = t.last().map(|h| h.status.as_u16());
        let http_transient = matches!(status, Some(408 | 429 | 500 | 502 | 503 | 504));
        let why = match &t.result {
            _ if http_transient => "HTTP error",
            Err(f) if f.code == exit::TIMEOUT || f.code == exit::DNS || f.code == exit::PROXY_DNS => {
                "timeout"
            }
            Err(f) if f.code == exit::CONNECT && args.retry_connrefused => "connection refused",
            Err(_) if args.retry_all_errors => "error",
            _ => return None,
        };
        if args.retry_max_time.is_some_and(|max| started.elapsed() >= max) {
            return None;
        }
        let retry_after = t
            .last()
            .and_then(|h| h.headers.get(http::header::RETRY_AFTER))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        let wait = match (args.retry_delay, retry_after) {
            (Some(d), _) => d,
            (None, Some(after)) => after,
            (None, None) => {
                let w = *backoff;
                *backoff = (*backoff * 2).min(Duration::from_secs(600));
                w
            }
        };
        let wait = match args.retry_max_time {
            Some(max) => wait.min(max.saturating_sub(started.elapsed())),
            None => wait,
        };
        if !args.silent || args.show_error {
            eprintln!(
                "Warning: Problem : {why}. Will retry in {} seconds. {left} retries left.",
                wait.as_secs()
            );
        }
        Some(wait)
    }

    /// The resume offset for `job` (-C).
    fn offset(&self, job: &Job) -> Result<u64, Failed> {
        match self.args.continue_at.as_deref() {
            None => Ok(0),
            Some("-") => Ok(match &job.output {
                Out::File(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
                Out::Stdout => 0,
            }),
            Some(n) => {
                n.parse().map_err(|_| Failed::config(format!("-C {n:?}: expected a byte offset or -")))
            }
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
            raw: head.extensions.get::<switchyard_core::http1::RawHead>().cloned(),
            request_headers: hop.headers.clone(),
            request_body: hop.body.as_ref().map_or(0, |b| b.len() as u64),
            peer,
            local: None,
            connection,
            source,
            bytes: 0,
            redirect: None,
        }
    }

    /// Where the answer leads: another hop (with -L), or nowhere.
    fn next_hop(&self, hop: &Hop, done: &mut HopDone, t: &Transfer) -> Result<Option<Hop>, Failed> {
        let args = &self.args;
        if !args.location && !args.location_trusted {
            return Ok(None);
        }
        let rules = redirect::Rules {
            keep_credentials: args.location_trusted,
            keep_post: [args.post301, args.post302, args.post303],
        };
        match redirect::next_with(hop, done.status, &done.headers, rules) {
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
                if let Some(list) = &self.args.proto_redir {
                    protocol_allowed(list, &next.url, "--proto-redir")?;
                }
                done.redirect = Some(next.url.clone());
                let mut next = next;
                if self.spec.referer_auto {
                    if let Ok(v) = http::HeaderValue::from_str(&hop.url) {
                        next.headers.insert(http::header::REFERER, v);
                    }
                }
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
    fn followed(
        &self,
        print: bool,
        done: &HopDone,
        sink: &mut Option<Sink>,
        job: &Job,
    ) -> Result<(), Failed> {
        if !print {
            return Ok(());
        }
        if self.args.include || self.args.head {
            open(sink, &self.args, job)?.head(done)?;
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
    fn answer(
        &self,
        print: bool,
        done: &HopDone,
        sink: &mut Option<Sink>,
        job: &Job,
    ) -> Result<bool, Failed> {
        let args = &self.args;
        if args.fail && done.status.as_u16() >= 400 {
            return Err(self.status_failed(done));
        }
        if print {
            if args.include || args.head {
                open(sink, args, job)?.head(done)?;
            } else if !args.silent && !args.json && args.dump_header.is_none() {
                eprintln!("{}", status_line(done.version, done.status));
            }
            if !args.head && done.method != http::Method::HEAD {
                open(sink, args, job)?;
            }
        }
        Ok(done.method != http::Method::HEAD)
    }

    /// -f's and --fail-with-body's failure for `done`'s status.
    fn status_failed(&self, done: &HopDone) -> Failed {
        Failed::with_code(
            exit::HTTP_STATUS,
            format!(
                "({}) {}: The requested URL returned error: {}",
                exit::HTTP_STATUS,
                switchyard_common::redact(&done.url),
                done.status.as_u16()
            ),
        )
    }

    /// After the body: --fail-with-body's verdict, and -C's check that the
    /// server resumed (206) rather than sent the whole body again.
    fn after_body(&self, done: &HopDone, job: &Job) -> Result<(), Failed> {
        if self.args.fail_with_body && done.status.as_u16() >= 400 {
            return Err(self.status_failed(done));
        }
        if let (true, Out::File(path)) = (self.args.remote_time, &job.output) {
            // -R: the file gets the server's Last-Modified time.
            let modified = done
                .headers
                .get(http::header::LAST_MODIFIED)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| httpdate::parse_http_date(v).ok());
            if let Some(time) = modified {
                let _ = std::fs::File::options().write(true).open(path).and_then(|f| f.set_modified(time));
            }
        }
        Ok(())
    }

    /// --max-filesize: `bytes` of the body (announced or read) are too many.
    fn too_large(&self, done: &HopDone, bytes: u64) -> Result<(), Failed> {
        match self.args.max_filesize {
            Some(max) if bytes > max => Err(Failed::with_code(
                exit::FILESIZE,
                format!(
                    "({}) {}: Maximum file size exceeded (--max-filesize {max})",
                    exit::FILESIZE,
                    switchyard_common::redact(&done.url)
                ),
            )),
            _ => Ok(()),
        }
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
        let _ = out.flush();
        drop(out);
        if let (Some(format), Some(vars)) = (&args.write_out, &vars) {
            let format = crate::write_out::format_text(format);
            for name in crate::write_out::unknown(&format, vars) {
                eprintln!("switchyard: unknown --write-out variable: '{name}'");
            }
            crate::write_out::write(&format, vars, t.last().map(|h| &h.headers));
        }
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
fn open<'s>(sink: &'s mut Option<Sink>, args: &GetArgs, job: &Job) -> Result<&'s mut Sink, Failed> {
    if sink.is_none() {
        *sink = Some(Sink::open(args, job, false)?);
    }
    sink.as_mut().ok_or_else(|| Failed::new("no output"))
}

impl Transfer {
    /// `job`'s transfer, starting now, and where it resumes (-C); `None`
    /// when that is already its failure (the transfer ended with it).
    fn of(job: &Job, ctx: &Ctx) -> (Transfer, Option<u64>) {
        let mut t = Transfer::start(&job.url);
        t.index = job.index;
        t.filename = match &job.output {
            Out::File(path) => Some(path.display().to_string()),
            Out::Stdout => None,
        };
        match ctx.offset(job) {
            Ok(o) => (t, Some(o)),
            Err(f) => (t.end(Err(f)), None),
        }
    }
}

/// The last transfer's exit code (curl's rule for several URLs), as the
/// command's error (already printed).
fn last_result<'t>(transfers: impl IntoIterator<Item = &'t Transfer>) -> Result<(), Failed> {
    match transfers.into_iter().last().and_then(|t| t.result.as_ref().err()) {
        Some(f) => Err(Failed::with_code(f.code, String::new())),
        None => Ok(()),
    }
}

type Spawned = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Transfer, String>> + Send>>;

/// What a hop's answer leads to, decided the same way on every client.
enum Step {
    /// Follow the redirect: drain the body, then this hop.
    Follow(Hop),
    /// The answer: read its body (when `true`) into the sink.
    Read(bool),
    /// The transfer ends with this.
    End(Result<(), Failed>),
}

impl Ctx {
    /// The request for `hop`, on any client.
    fn timeout_for(&self, t: &Transfer, hop: &Hop) -> Result<Option<Duration>, Failed> {
        self.remaining(t, &hop.url)
    }

    /// Decides what an answered hop leads to (and prints heads, -D, the
    /// jar), the shared half of both transfer loops.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        hop: &Hop,
        done: &mut HopDone,
        t: &Transfer,
        sink: &mut Option<Sink>,
        job: &Job,
        print: bool,
        offset: u64,
    ) -> Step {
        if let Err(f) = self.saw_head(done, sink) {
            return Step::End(Err(f));
        }
        match self.next_hop(hop, done, t) {
            Err(f) => Step::End(Err(f)),
            Ok(Some(next)) => match self.followed(print, done, sink, job) {
                Ok(()) => Step::Follow(next),
                Err(f) => Step::End(Err(f)),
            },
            Ok(None) => {
                if offset > 0 && sink.is_none() && print {
                    match done.status.as_u16() {
                        206 => match Sink::open(&self.args, job, true) {
                            Ok(s) => *sink = Some(s),
                            Err(f) => return Step::End(Err(f)),
                        },
                        200 => {
                            return Step::End(Err(Failed::with_code(
                                exit::RANGE,
                                format!(
                                "({}) {}: HTTP server doesn't seem to support byte ranges. Cannot resume.",
                                exit::RANGE,
                                switchyard_common::redact(&done.url)
                            ),
                            )))
                        }
                        _ => {}
                    }
                }
                let announced = done
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if let Err(f) = self.too_large(done, announced.unwrap_or(0)) {
                    return Step::End(Err(f));
                }
                match self.answer(print, done, sink, job) {
                    Ok(read) => Step::Read(read),
                    Err(f) => Step::End(Err(f)),
                }
            }
        }
    }
}

/// One URL's transfer on an async client: each hop a call, redirects
/// followed with -L; `print`: the head, body and timelines go out (a
/// single fetch), else the body is only counted (--requests).
async fn transfer_async<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    ctx: &Ctx,
    job: &Job,
    print: bool,
) -> Transfer {
    let (t, offset) = Transfer::of(job, ctx);
    let Some(offset) = offset else { return t };
    let mut t = t;
    let mut hop = ctx.first_hop(&job.url, offset);
    let mut sink = None;
    let result = loop {
        let timeout = match ctx.timeout_for(&t, &hop) {
            Ok(d) => d,
            Err(f) => break Err(f),
        };
        let sent = ctx.hop_headers(&hop);
        let mut request = client.request(hop.method.clone(), hop.url.as_str()).headers(sent.clone());
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
        done.request_headers = sent;
        done.local = connection.and_then(|id| client.connection_local_addr(id));
        match ctx.step(&hop, &mut done, &t, &mut sink, job, print, offset) {
            Step::End(r) => {
                t.hops.push(done);
                break r;
            }
            Step::Follow(next) => {
                // The redirect's body is read to its end, so its connection
                // goes back to the pool for a same-origin hop.
                while let Ok(Some(chunk)) = body.chunk().await {
                    done.bytes += chunk.len() as u64;
                }
                t.hops.push(done);
                hop = next;
            }
            Step::Read(read) => {
                let read = async {
                    if !read {
                        return Ok(());
                    }
                    while let Some(chunk) = body.chunk().await.map_err(|e| Failed::call(&hop.url, &e))? {
                        done.bytes += chunk.len() as u64;
                        ctx.too_large(&done, done.bytes)?;
                        if let Some(s) = &mut sink {
                            s.write(&chunk)?;
                        }
                    }
                    Ok(())
                }
                .await;
                let read = read
                    .and_then(|()| sink.take().map_or(Ok(()), Sink::finish))
                    .and_then(|()| ctx.after_body(&done, job));
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

/// [`transfer_async`], again after --retry's wait while the failure is
/// transient and retries are left.
async fn transfer_async_retrying<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    ctx: &Ctx,
    job: &Job,
    print: bool,
    sleep: Sleep<'_>,
) -> Transfer {
    let started = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut left = ctx.args.retry;
    loop {
        let t = transfer_async(client, ctx, job, print).await;
        match ctx.retry_wait(&t, left, started, &mut backoff) {
            Some(wait) => {
                left -= 1;
                sleep(wait).await;
            }
            None => return t,
        }
    }
}

async fn run_async<R: switchyard_async::Runtime>(
    client: switchyard_async::Client<R>,
    ctx: Arc<Ctx>,
    jobs: &[Job],
    spawn: impl Fn(Spawned) -> Spawned,
    sleep: Sleep<'_>,
) -> Result<(), Failed> {
    let args = &ctx.args;
    if args.requests == 1 && args.concurrency == 1 {
        let mut transfers = Vec::new();
        for job in jobs {
            ctx.log.clear();
            ctx.announce(&job.url);
            let t = transfer_async_retrying(&client, &ctx, job, true, sleep).await;
            ctx.finish(&t);
            let failed = t.result.is_err();
            transfers.push(t);
            if failed && args.fail_early {
                break;
            }
        }
        ctx.write_har(&transfers)?;
        return last_result(&transfers);
    }
    let total = args.requests * jobs.len() as u64;
    let progress = Progress::new(total, args);
    if args.concurrency == 1 {
        // One at a time: each call in turn on this task, as a list of URLs
        // runs (no task, permit or wake-up per request).
        let mut results = Vec::new();
        for i in 0..total {
            let job = &jobs[usize::try_from(i).unwrap_or(0) % jobs.len()];
            results.push(Ok(transfer_async(&client, &ctx, job, false).await));
            progress.bar.inc(1);
            progress.tick();
        }
        progress.done();
        let metrics = args.metrics.then(|| {
            switchyard_common::metrics::prometheus_text(&client.stats_by_address(), &client.stats())
        });
        return summary(&ctx, total, results, &client.stats(), progress.started, metrics);
    }
    let limit =
        Arc::new(tokio::sync::Semaphore::new(usize::try_from(args.concurrency).unwrap_or(usize::MAX)));
    let mut tasks = Vec::new();
    for i in 0..total {
        let job = jobs[usize::try_from(i).unwrap_or(0) % jobs.len()].clone();
        let (client, limit, bar, ctx) =
            (client.clone(), Arc::clone(&limit), progress.bar.clone(), Arc::clone(&ctx));
        tasks.push(spawn(Box::pin(async move {
            let _permit = limit.acquire_owned().await.ok();
            let t = transfer_async(&client, &ctx, &job, false).await;
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
fn transfer_std(client: &switchyard_std::Client, ctx: &Ctx, job: &Job, print: bool) -> Transfer {
    let (t, offset) = Transfer::of(job, ctx);
    let Some(offset) = offset else { return t };
    let mut t = t;
    let mut hop = ctx.first_hop(&job.url, offset);
    let mut sink = None;
    let result = loop {
        let timeout = match ctx.timeout_for(&t, &hop) {
            Ok(d) => d,
            Err(f) => break Err(f),
        };
        let sent = ctx.hop_headers(&hop);
        let mut request = client.request(hop.method.clone(), hop.url.as_str()).headers(sent.clone());
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
        done.request_headers = sent;
        done.local = connection.and_then(|id| client.connection_local_addr(id));
        match ctx.step(&hop, &mut done, &t, &mut sink, job, print, offset) {
            Step::End(r) => {
                t.hops.push(done);
                break r;
            }
            Step::Follow(next) => {
                while let Ok(Some(chunk)) = body.chunk() {
                    done.bytes += chunk.len() as u64;
                }
                t.hops.push(done);
                hop = next;
            }
            Step::Read(read) => {
                let read = (|| {
                    if !read {
                        return Ok(());
                    }
                    while let Some(chunk) = body.chunk().map_err(|e| Failed::call(&hop.url, &e))? {
                        done.bytes += chunk.len() as u64;
                        ctx.too_large(&done, done.bytes)?;
                        if let Some(s) = &mut sink {
                            s.write(&chunk)?;
                        }
                    }
                    Ok(())
                })();
                let read = read
                    .and_then(|()| sink.take().map_or(Ok(()), Sink::finish))
                    .and_then(|()| ctx.after_body(&done, job));
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

/// [`transfer_std`] with --retry.
fn transfer_std_retrying(client: &switchyard_std::Client, ctx: &Ctx, job: &Job, print: bool) -> Transfer {
    let started = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut left = ctx.args.retry;
    loop {
        let t = transfer_std(client, ctx, job, print);
        match ctx.retry_wait(&t, left, started, &mut backoff) {
            Some(wait) => {
                left -= 1;
                std::thread::sleep(wait);
            }
            None => return t,
        }
    }
}

/// The blocking client: --concurrency threads share the requests.
fn run_std(client: &switchyard_std::Client, ctx: &Ctx, jobs: &[Job]) -> Result<(), Failed> {
    let args = &ctx.args;
    if args.requests == 1 && args.concurrency == 1 {
        let mut transfers = Vec::new();
        for job in jobs {
            ctx.log.clear();
            ctx.announce(&job.url);
            let t = transfer_std_retrying(client, ctx, job, true);
            ctx.finish(&t);
            let failed = t.result.is_err();
            transfers.push(t);
            if failed && args.fail_early {
                break;
            }
        }
        ctx.write_har(&transfers)?;
        return last_result(&transfers);
    }
    let total = args.requests * jobs.len() as u64;
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
                let job = &jobs[usize::try_from(i).unwrap_or(0) % jobs.len()];
                let t = transfer_std(client, ctx, job, false);
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
    /// --limit-rate, bytes per second.
    rate: Option<u64>,
    /// Bytes written so far (for --limit-rate).
    written: u64,
}

impl Sink {
    /// The output `job` names (`append`: -C resumes a file).
    fn open(args: &GetArgs, job: &Job, append: bool) -> Result<Sink, Failed> {
        let cannot = |what: &str, e: std::io::Error| {
            Failed::with_code(exit::WRITE, format!("({}) cannot write {what}: {e}", exit::WRITE))
        };
        let to_file = matches!(job.output, Out::File(_));
        let (out, what): (Option<Box<dyn Write + Send>>, String) = match &job.output {
            Out::File(path) => {
                if args.create_dirs {
                    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                        std::fs::create_dir_all(parent)
                            .map_err(|e| cannot(&parent.display().to_string(), e))?;
                    }
                }
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .append(append)
                    .truncate(!append)
                    .open(path)
                    .map_err(|e| cannot(&path.display().to_string(), e))?;
                (
                    Some(Box::new(std::io::BufWriter::with_capacity(256 * 1024, file))),
                    path.display().to_string(),
                )
            }
            Out::Stdout if !args.json => (
                Some(Box::new(std::io::BufWriter::with_capacity(256 * 1024, std::io::stdout()))),
                "stdout".into(),
            ),
            Out::Stdout => (None, String::new()),
        };
        let progress = (to_file && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bytes}/{total_bytes} {binary_bytes_per_sec} {elapsed} {wide_bar}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Ok(Sink { out, what, progress, started: Instant::now(), rate: args.limit_rate, written: 0 })
    }

    fn failed(&self, e: &std::io::Error) -> Failed {
        Failed::with_code(exit::WRITE, format!("({}) cannot write {}: {e}", exit::WRITE, self.what))
    }

    /// A response head, as curl's -i prints it (CRLF line ends).
    fn head(&mut self, done: &HopDone) -> Result<(), Failed> {
        let text = crate::transfer::head_text(done);
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
            Some(out) => out.write_all(&text).map_err(|e| self.failed(&e)),
            None => Ok(()),
        }
    }

    /// Flushes what is buffered for stdout (before something else is
    /// written there).
    fn flush_stdout(&mut self) -> Result<(), Failed> {
        if self.what == "stdout" {
            if let Some(out) = &mut self.out {
                out.flush().map_err(|e| self.failed(&e))?;
            }
        }
        Ok(())
    }

    fn write(&mut self, chunk: &[u8]) -> Result<(), Failed> {
        if let Some(rate) = self.rate {
            // --limit-rate: never ahead of `rate` bytes per second (the socket's
            // buffers and TCP's window hold the rest back meanwhile).
            self.written += chunk.len() as u64;
            let due = Duration::from_secs_f64(self.written as f64 / rate as f64);
            if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
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
        let format = crate::write_out::format_text(format);
        for (i, t) in transfers.iter().enumerate() {
            let vars = crate::write_out::variables(t, &ctx.recorder);
            if i == 0 {
                for name in crate::write_out::unknown(&format, &vars) {
                    eprintln!("switchyard: unknown --write-out variable: '{name}'");
                }
            }
            crate::write_out::write(&format, &vars, t.last().map(|h| &h.headers));
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

#[cfg(test)]
mod tests {
    use super::without_dot_segments as merged;

    #[test]
    fn dot_segments_merge_as_rfc_3986_says() {
        assert_eq!(merged("http://a/x/../seen"), "http://a/seen");
        assert_eq!(merged("http://a/b/c/./../../g?q=/../#f"), "http://a/g?q=/../#f");
        assert_eq!(merged("http://a/b/.."), "http://a/");
        assert_eq!(merged("http://a/b/."), "http://a/b/");
        assert_eq!(merged("http://a/../../x"), "http://a/x");
        assert_eq!(merged("http://a/plain/path"), "http://a/plain/path");
        assert_eq!(merged("http://a"), "http://a");
        assert_eq!(merged("http://a/..x/y.."), "http://a/..x/y..");
    }
}
