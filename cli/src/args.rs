//! Command-line arguments.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// switchyard: an HTTP client's connection layer, made visible.
#[derive(Parser, Debug)]
#[command(
    name = "switchyard",
    version,
    about,
    long_about = None,
    after_help = "`switchyard [FLAGS] URL...` is `switchyard get [FLAGS] URL...`: curl's flags (-H -X -d -I -i -L -f -s -m -w -k …) and exit codes; see `switchyard get --help`."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Fetch URLs as curl does (the default command), printing the body; -v
    /// shows the connection timeline.
    Get(Box<GetArgs>),
    /// A narrated tour on embedded loopback servers: Happy Eyeballs, reuse,
    /// coalescing, a per-host cap, a stale-connection retry, pool stats, the
    /// Manager's warm connections.
    Demo(DemoArgs),
    /// Keep warm connections to servers and print their readiness as it changes,
    /// until interrupted (or for --for).
    Warm(WarmArgs),
    /// Accept plain HTTP/1.1 and HTTP/2 (prior knowledge) on --listen and carry
    /// each request over the declared servers' warm connections: by the URL of
    /// an absolute-form request (`HTTP_PROXY=http://LISTEN`) or by `Host`.
    /// Undeclared hosts get 403. Stops on ctrl-c or SIGTERM, letting requests
    /// in flight finish (--grace).
    Gateway(GatewayArgs),
}

/// `switchyard gateway`.
#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// The local address to accept requests on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// A server to forward to, `http(s)://host[:port]`, with its warm minimum
    /// after `=` (default 1): `--server https://api.internal=2`. Repeatable.
    #[arg(long = "server", required = true, value_parser = parse_server)]
    pub servers: Vec<(String, usize)>,
    /// `HOST:PORT:ADDR[,ADDR]`: answer DNS for HOST:PORT with these addresses.
    #[arg(long, value_parser = parse_resolve)]
    pub resolve: Vec<Resolve>,
    /// Trust the CA certificates in this PEM file.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// Local connections accepted at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4096)]
    pub max_requests: usize,
    /// How long requests in flight may finish after ctrl-c or SIGTERM.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Close a local connection silent this long with no request in flight
    /// (before its first byte and between requests).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Answer 504 when an upstream response head takes longer than this.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub response_timeout: Duration,
    /// Serve the status page (`/.switchyard/status`) to any client, not only
    /// to loopback ones.
    #[arg(long)]
    pub status_for_anyone: bool,
    /// Stop after this long (e.g. 10s); default: until interrupted.
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// The access log as one JSON object per request.
    #[arg(long)]
    pub json: bool,
    /// Worker threads (nginx's `worker_processes`): each runs its own
    /// single-threaded runtime, listener (`SO_REUSEPORT`), Manager and
    /// upstream connections — a server's warm minimum is per thread — so no
    /// request is handed between threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// No access log (by default one line per request on stdout, as nginx's
    /// `access_log`; this is its `access_log off`).
    #[arg(long, conflicts_with = "json")]
    pub no_access_log: bool,
    /// Timeout for each upstream connect attempt (a tunnel's too).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// A proxy for the upstream connections (`http://[user:pass@]host:port`,
    /// `socks5://`, `socks5h://`); instead of the environment.
    #[arg(long, short = 'x')]
    pub proxy: Option<String>,
    /// Ignore the proxy environment variables, honoured by default.
    #[arg(long)]
    pub no_proxy_env: bool,
    /// Which resolver answers the upstreams' DNS.
    #[arg(long, value_enum, default_value_t = Dns::System)]
    pub dns: Dns,
    /// `ADDR:PORT` of a name server for `--dns hickory` (repeatable).
    #[arg(long = "dns-server")]
    pub dns_servers: Vec<std::net::SocketAddr>,
}

/// `URL[=MIN]`.
pub fn parse_server(s: &str) -> Result<(String, usize), String> {
    match s.rsplit_once('=') {
        Some((url, min)) if !url.is_empty() => {
            let min = min.parse().map_err(|_| format!("{min:?} is not a number of warm connections"))?;
            Ok((url.to_owned(), min))
        }
        _ => Ok((s.to_owned(), 1)),
    }
}

/// `switchyard warm`.
#[derive(Args, Debug)]
pub struct WarmArgs {
    /// Servers to keep warm (`http(s)://host[:port]`).
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Warm connections per server.
    #[arg(long, default_value_t = 1)]
    pub min: usize,
    /// Stop after this long (e.g. 10s); default: until interrupted.
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// How long a server may fail with no connection before it is `down`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub down_after: Duration,
    /// `HOST:PORT:ADDR[,ADDR]`: answer DNS for HOST:PORT with these addresses.
    #[arg(long, value_parser = parse_resolve)]
    pub resolve: Vec<Resolve>,
    /// Trust the CA certificates in this PEM file.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// One JSON object per readiness change.
    #[arg(long)]
    pub json: bool,
}

/// Which runtime adapter performs the I/O.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// switchyard-tokio.
    Tokio,
    /// switchyard-smol.
    Smol,
    /// switchyard-std (blocking threads, no async runtime).
    Std,
}

/// Which resolver answers DNS.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dns {
    /// The operating system's (`getaddrinfo`, on a blocking thread).
    #[default]
    System,
    /// hickory-resolver: A and AAAA asked separately, so IPv6 attempts start as
    /// soon as AAAA answers (RFC 8305 §3); TTLs kept. Async runtimes only.
    Hickory,
}

/// `switchyard get` (also `switchyard URL…`: `get` is the default command).
#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub struct GetArgs {
    /// URLs to fetch (http:// or https://; without a scheme, http:// as
    /// curl assumes). Every URL is tried; the exit code is the first
    /// failure's.
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Print the connection timeline (to stderr): every hop of a redirect, and
    /// with -n/-c the first call and every call that opened a connection.
    #[arg(short, long)]
    pub verbose: bool,
    /// Write the body to this file instead of stdout (`-o -`: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Send each URL this many times, then print a summary.
    #[arg(short = 'n', long = "requests", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// Run this many requests at a time.
    #[arg(short = 'c', long = "concurrency", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: u64,
    /// Add a request header, `Name: value` (repeatable). `Name:` with nothing
    /// after the colon removes a header switchyard would send (User-Agent,
    /// Accept: */* by default, as curl). `Name;` sends it empty.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// The request method (default GET; POST with -d; HEAD with -I).
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    pub method: Option<String>,
    /// Send this body, as curl's -d: `@FILE` reads a file (CR and LF removed),
    /// `@-` reads stdin; several are joined with `&`. Makes the request a POST
    /// with `Content-Type: application/x-www-form-urlencoded` unless -X / -H
    /// say otherwise. (curl's `--json BODY` is not this tool's `--json`, which
    /// switches the output to JSON.)
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    pub data: Vec<String>,
    /// Send this body exactly as given (`@FILE` and `@-` kept byte for byte).
    #[arg(long = "data-binary", value_name = "DATA")]
    pub data_binary: Vec<String>,
    /// Send HEAD and print the response head to stdout.
    #[arg(short = 'I', long = "head")]
    pub head: bool,
    /// Print the response head (status line and headers) to stdout before the
    /// body; with -L, every hop's.
    #[arg(short = 'i', long = "include")]
    pub include: bool,
    /// Print no status line and no error message on stderr (see -S).
    #[arg(short = 's', long = "silent")]
    pub silent: bool,
    /// With -s: still print error messages.
    #[arg(short = 'S', long = "show-error")]
    pub show_error: bool,
    /// Fail with exit code 22 on an HTTP status of 400 or more (the body is
    /// not printed).
    #[arg(short = 'f', long = "fail")]
    pub fail: bool,
    /// The most time the whole transfer may take, redirects included (e.g.
    /// 10s, 500ms; a bare number is seconds).
    #[arg(short = 'm', long = "max-time", value_parser = parse_duration)]
    pub max_time: Option<Duration>,
    /// After each transfer, print this on stdout with its `%{variable}`s
    /// filled in: http_code, http_version, remote_ip, remote_port,
    /// num_connects, num_redirects, url_effective, time_namelookup,
    /// time_connect, time_appconnect, time_starttransfer, time_total,
    /// size_download, and switchyard's connection_id, connection_source (new,
    /// pooled, shared, coalesced) and attempts; `\n`, `\t`, `\r` and `%%`
    /// as curl. Times are seconds from the start of the transfer.
    #[arg(short = 'w', long = "write-out", value_name = "FORMAT")]
    pub write_out: Option<String>,
    /// Follow redirects (3xx with a Location), each hop a call on the same
    /// pool: a same-origin hop reuses the connection. 301, 302 and 303 turn a
    /// POST into a GET; 307 and 308 keep the method and body. Authorization,
    /// Cookie and Proxy-Authorization are dropped on a hop to another origin.
    #[arg(short = 'L', long = "location")]
    pub location: bool,
    /// With -L: the most redirects followed (exit 47 past it).
    #[arg(long = "max-redirs", default_value_t = 50)]
    pub max_redirs: u32,
    /// Accept any server certificate (`danger_accept_invalid_certificates`):
    /// a warning is printed on stderr every time.
    #[arg(short = 'k', long = "insecure")]
    pub insecure: bool,
    /// Write the calls as an HTTP Archive (HAR 1.2) to FILE, for browser
    /// devtools and HAR viewers: every hop, and with -n/-c every call.
    #[arg(long, value_name = "FILE")]
    pub har: Option<PathBuf>,
    /// `HOST:PORT:ADDR[,ADDR]`: answer DNS for HOST:PORT with these addresses.
    #[arg(long, value_parser = parse_resolve)]
    pub resolve: Vec<Resolve>,
    /// Trust the CA certificates in this PEM file.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// HTTP/1.1 only.
    #[arg(long = "http1.1", conflicts_with_all = ["http2", "h2_prior_knowledge"])]
    pub http1: bool,
    /// HTTP/2 where it is negotiated: ALPN over TLS (falling back to HTTP/1.1
    /// if the server does not offer h2); an http:// URL uses HTTP/1.1 (no h2c
    /// upgrade: see --http2-prior-knowledge).
    #[arg(long, conflicts_with = "h2_prior_knowledge")]
    pub http2: bool,
    /// HTTP/2 without negotiation (h2c on http://; h2 only over TLS).
    #[arg(long = "http2-prior-knowledge", alias = "h2-prior-knowledge")]
    pub h2_prior_knowledge: bool,
    /// Bound on each TCP connect (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Happy Eyeballs delay between connect attempts.
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub attempt_delay: Duration,
    /// Connections per host.
    #[arg(long)]
    pub max_per_host: Option<usize>,
    /// A proxy for every URL (`http://[user:pass@]host:port`, `socks5://`,
    /// `socks5h://`); instead of the environment.
    #[arg(long, short = 'x')]
    pub proxy: Option<String>,
    /// Ignore the proxy environment variables (`http_proxy`, `https_proxy`,
    /// `all_proxy`, `no_proxy`), which are honoured by default, as curl does.
    #[arg(long)]
    pub no_proxy_env: bool,
    /// Which runtime performs the I/O.
    #[arg(long, value_enum, default_value_t = Runtime::Tokio)]
    pub runtime: Runtime,
    /// Which resolver answers DNS (`hickory` needs `--runtime tokio` or `smol`).
    #[arg(long, value_enum, default_value_t = Dns::System)]
    pub dns: Dns,
    /// `ADDR:PORT` of a name server for `--dns hickory` (repeatable); default:
    /// the servers in /etc/resolv.conf.
    #[arg(long = "dns-server")]
    pub dns_servers: Vec<std::net::SocketAddr>,
    /// How long DNS answers without a TTL (the system resolver's) are cached.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub dns_cache_ttl: Duration,
    /// Connect to this Unix-domain socket instead of over TCP (curl's flag):
    /// no DNS, no proxy; the URL's host goes in `Host` (and TLS for https).
    #[arg(long = "unix-socket", value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Send through this network interface (`SO_BINDTODEVICE`, Linux; usually
    /// needs root or CAP_NET_RAW).
    #[arg(long, value_name = "NAME")]
    pub interface: Option<String>,
    /// Bind each TCP connection to this local IP first.
    #[arg(long = "local-address", value_name = "IP")]
    pub local_address: Option<std::net::IpAddr>,
    /// TCP keep-alive: probe after this idle time (curl's --keepalive-time, in
    /// seconds, or a duration such as 30s).
    #[arg(long = "keepalive-time", value_parser = parse_duration)]
    pub keepalive_time: Option<Duration>,
    /// With -n/-c: after the summary, print the pool's metrics per server in
    /// Prometheus text on stdout (OpenTelemetry's names:
    /// http_client_open_connections{state}, connections created and closed
    /// by reason, retries, …).
    #[arg(long)]
    pub metrics: bool,
    /// Machine-readable output: one JSON object per event (and a summary) on
    /// stdout; the body goes only to --output.
    #[arg(long)]
    pub json: bool,
}

/// The exit codes, as curl's for the same failures (`--help`'s last lines).
pub const EXIT_CODES: &str = "\
Exit codes (curl's, for the same failures):
   0  success
   1  unsupported URL scheme, or another failure
   2  bad option or configuration (also clap's usage errors)
   3  malformed URL
   5  could not resolve the proxy's name
   6  could not resolve the host's name
   7  could not connect (refused, unreachable)
   8  the server's answer is not valid HTTP
  16  an HTTP/2 server allowed no streams (MAX_CONCURRENT_STREAMS 0)
  18  the body ended before its announced length
  22  HTTP status 400 or more, with -f/--fail
  23  cannot write the output (-o, stdout)
  26  cannot read a -d @FILE / --data-binary @FILE
  28  a timeout (--max-time, --connect-timeout, a read)
  35  TLS handshake failed
  47  more redirects than --max-redirs
  52  the server closed the connection without answering
  56  the connection failed while sending or receiving, or a proxy refused
  60  the server's certificate is not trusted (or not for this host)
  92  an HTTP/2 stream was reset
  97  a proxy handshake failed";

/// `switchyard demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// One JSON object per step on stdout, for scripts and CI.
    #[arg(long)]
    pub json: bool,
}

/// A `--resolve` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolve {
    /// The host.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The addresses.
    pub addrs: Vec<IpAddr>,
}

/// Parses `HOST:PORT:ADDR[,ADDR]` (IPv6 addresses may be bracketed).
pub fn parse_resolve(s: &str) -> Result<Resolve, String> {
    let mut parts = s.splitn(3, ':');
    let (Some(host), Some(port), Some(addrs)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("expected HOST:PORT:ADDR[,ADDR], got {s:?}"));
    };
    if host.is_empty() {
        return Err(format!("no host in {s:?}"));
    }
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?} in {s:?}"))?;
    let addrs = addrs
        .split(',')
        .map(|a| {
            let a = a.trim().trim_start_matches('[').trim_end_matches(']');
            a.parse::<IpAddr>().map_err(|_| format!("bad address {a:?} in {s:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Resolve { host: host.to_ascii_lowercase(), port, addrs })
}

/// Parses `250ms`, `10s`, `1.5s`, `2m`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("bad duration unit {unit:?} in {s:?} (use ms, s or m)")),
    };
    if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The command line with `get` put in front of the arguments when they do
/// not start with a subcommand or a help/version flag: `switchyard -sI URL`
/// is `switchyard get -sI URL`, as curl is called.
///
/// ```
/// use switchyard_cli::args::with_default_command;
/// let argv = |a: &[&str]| with_default_command(a.iter().map(std::ffi::OsString::from)).into_iter()
///     .map(|s| s.into_string().unwrap()).collect::<Vec<_>>();
/// assert_eq!(argv(&["switchyard", "-k", "https://a/"]), ["switchyard", "get", "-k", "https://a/"]);
/// assert_eq!(argv(&["switchyard", "demo"]), ["switchyard", "demo"]);
/// assert_eq!(argv(&["switchyard", "--help"]), ["switchyard", "--help"]);
/// ```
pub fn with_default_command(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.into_iter().collect();
    let known = ["get", "demo", "warm", "gateway", "help", "-h", "--help", "-V", "--version"];
    if let Some(first) = args.get(1) {
        if !known.iter().any(|k| first.as_os_str() == *k) {
            args.insert(1, "get".into());
        }
    }
    args
}
