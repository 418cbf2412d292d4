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
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Runtime {
    /// switchyard-tokio.
    #[default]
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
///
/// The flags are curl's, with curl's meaning; the ones of switchyard's own
/// (`--requests`, `--concurrency`, `--json-events`, …) have names curl does
/// not use.
#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub struct GetArgs {
    /// URLs to fetch (http:// or https://; without a scheme, http:// as
    /// curl assumes). `{a,b}` and `[1-9]` ranges are expanded (see -g).
    /// Every URL is tried; the exit code is the last one's, as curl's.
    pub urls: Vec<String>,
    /// Another URL to fetch (curl's --url; repeatable).
    #[arg(long = "url", value_name = "URL")]
    pub more_urls: Vec<String>,
    /// Do not expand `{}` and `[]` in URLs (curl's --globoff).
    #[arg(short = 'g', long = "globoff")]
    pub globoff: bool,
    /// Read more arguments from this file, curl's config format: one option
    /// per line, `--flag value`, `flag = "value"` or `flag value`; `#`
    /// comments; `-` reads stdin. Expanded before the rest is parsed.
    #[arg(short = 'K', long = "config", value_name = "FILE")]
    pub config: Vec<String>,
    /// Print the connection timeline (to stderr): every hop of a redirect, and
    /// with --requests/--concurrency the first call and every call that opened
    /// a connection.
    #[arg(short, long)]
    pub verbose: bool,
    /// Write the body to this file instead of stdout (`-o -`: stdout). One
    /// per URL, in order, as curl; `#1`, `#2` are the glob's values.
    #[arg(short, long, value_name = "FILE")]
    pub output: Vec<String>,
    /// Write the body to a file named as the URL's last path segment (curl's
    /// -O; one per URL, in order with -o).
    #[arg(short = 'O', long = "remote-name", action = clap::ArgAction::Count)]
    pub remote_name: u8,
    /// -O for every URL.
    #[arg(long = "remote-name-all")]
    pub remote_name_all: bool,
    /// The directory -o and -O write into.
    #[arg(long = "output-dir", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Create the directories -o and -O name.
    #[arg(long = "create-dirs")]
    pub create_dirs: bool,
    /// Write the response heads (every hop's) to this file (`-`: stdout).
    #[arg(short = 'D', long = "dump-header", value_name = "FILE")]
    pub dump_header: Option<String>,
    /// Send each URL this many times, then print a summary (switchyard's; curl
    /// has no such flag).
    #[arg(long = "requests", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// Run this many requests at a time (switchyard's).
    #[arg(long = "concurrency", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: u64,
    /// Add a request header, `Name: value` (repeatable; `@FILE` reads one per
    /// line). `Name:` with nothing after the colon removes a header switchyard
    /// would send (User-Agent, Accept: */*, Host is not removable). `Name;`
    /// sends it empty.
    #[arg(short = 'H', long = "header", value_name = "HEADER", allow_hyphen_values = true)]
    pub headers: Vec<String>,
    /// The User-Agent to send.
    #[arg(short = 'A', long = "user-agent", value_name = "NAME")]
    pub user_agent: Option<String>,
    /// The Referer to send (`URL;auto`: also on each redirect, the URL it
    /// came from; `;auto` alone: only there).
    #[arg(short = 'e', long = "referer", value_name = "URL")]
    pub referer: Option<String>,
    /// `USER:PASSWORD` for Basic authentication (`USER` alone: an empty
    /// password is not assumed — give it; switchyard does not prompt).
    #[arg(short = 'u', long = "user", value_name = "USER:PASSWORD")]
    pub user: Option<String>,
    /// Basic authentication (the default for -u).
    #[arg(long = "basic")]
    pub basic: bool,
    /// Digest authentication: not supported (an error says so).
    #[arg(long = "digest", hide = true)]
    pub digest: bool,
    /// NTLM authentication: not supported (an error says so).
    #[arg(long = "ntlm", hide = true)]
    pub ntlm: bool,
    /// Negotiate (SPNEGO) authentication: not supported (an error says so).
    #[arg(long = "negotiate", hide = true)]
    pub negotiate: bool,
    /// Read credentials for the URL's host from ~/.netrc.
    #[arg(short = 'n', long = "netrc")]
    pub netrc: bool,
    /// --netrc, but no error when the file is missing.
    #[arg(long = "netrc-optional")]
    pub netrc_optional: bool,
    /// --netrc with this file.
    #[arg(long = "netrc-file", value_name = "FILE")]
    pub netrc_file: Option<PathBuf>,
    /// Cookies to send: `NAME=VALUE[; NAME=VALUE]`, or a file of them (curl's
    /// cookie-jar format or `Set-Cookie` lines), which also turns on the
    /// cookie engine (cookies set by a redirect are sent on the next hop).
    #[arg(short = 'b', long = "cookie", value_name = "DATA|FILE")]
    pub cookie: Vec<String>,
    /// Write every cookie known at the end to this file in curl's format
    /// (`-`: stdout); turns on the cookie engine.
    #[arg(short = 'c', long = "cookie-jar", value_name = "FILE")]
    pub cookie_jar: Option<String>,
    /// The request method (default GET; POST with -d; HEAD with -I; PUT with
    /// -T). Kept on every hop of -L, as curl.
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    pub method: Option<String>,
    /// Send this body, as curl's -d: `@FILE` reads a file (CR and LF removed),
    /// `@-` reads stdin; several are joined with `&`. Makes the request a POST
    /// with `Content-Type: application/x-www-form-urlencoded` unless -X / -H
    /// say otherwise.
    #[arg(
        short = 'd',
        long = "data",
        visible_alias = "data-ascii",
        value_name = "DATA",
        allow_hyphen_values = true
    )]
    pub data: Vec<String>,
    /// Send this body exactly as given (`@FILE` and `@-` kept byte for byte).
    #[arg(long = "data-binary", value_name = "DATA", allow_hyphen_values = true)]
    pub data_binary: Vec<String>,
    /// As -d, with no `@` meaning (a leading `@` is sent).
    #[arg(long = "data-raw", value_name = "DATA", allow_hyphen_values = true)]
    pub data_raw: Vec<String>,
    /// As -d, URL-encoded: `content`, `=content`, `name=content`, `@file`,
    /// `name@file` (curl's forms).
    #[arg(long = "data-urlencode", value_name = "DATA", allow_hyphen_values = true)]
    pub data_urlencode: Vec<String>,
    /// A JSON body (curl's --json): as --data-binary, with `Content-Type` and
    /// `Accept` of `application/json` unless -H gives them; several are
    /// joined as they are.
    #[arg(long = "json", value_name = "DATA", allow_hyphen_values = true)]
    pub json_body: Vec<String>,
    /// Put the -d data in the URL's query and send GET (HEAD with -I).
    #[arg(short = 'G', long = "get")]
    pub get: bool,
    /// A multipart/form-data part: `name=value`, `name=@file` (uploaded as a
    /// file), `name=<file` (its text as the value); `;type=`, `;filename=`.
    #[arg(short = 'F', long = "form", value_name = "NAME=CONTENT", allow_hyphen_values = true)]
    pub form: Vec<String>,
    /// As -F, the value taken literally (no `@` or `<`).
    #[arg(long = "form-string", value_name = "NAME=STRING")]
    pub form_string: Vec<String>,
    /// Upload this file with PUT (`-`: stdin); a URL ending in `/` gets the
    /// file's name appended.
    #[arg(short = 'T', long = "upload-file", value_name = "FILE")]
    pub upload_file: Option<String>,
    /// Send HEAD and print the response head to stdout.
    #[arg(short = 'I', long = "head")]
    pub head: bool,
    /// Print the response head (as the server sent it) to stdout before the
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
    /// As -f, but the body is still written.
    #[arg(long = "fail-with-body", conflicts_with = "fail")]
    pub fail_with_body: bool,
    /// The most time the whole transfer may take, redirects included (e.g.
    /// 10s, 500ms; a bare number is seconds).
    #[arg(short = 'm', long = "max-time", value_parser = parse_duration)]
    pub max_time: Option<Duration>,
    /// Retry a transfer that failed transiently (a timeout, a refused
    /// connection with --retry-connrefused, HTTP 408, 429, 500, 502, 503,
    /// 504) this many times, curl's way: after `Retry-After`, else 1 s
    /// doubling up to 10 minutes.
    #[arg(long = "retry", value_name = "NUM", default_value_t = 0)]
    pub retry: u32,
    /// With --retry: wait this long between tries instead.
    #[arg(long = "retry-delay", value_parser = parse_duration)]
    pub retry_delay: Option<Duration>,
    /// With --retry: no retry starts after this long.
    #[arg(long = "retry-max-time", value_parser = parse_duration)]
    pub retry_max_time: Option<Duration>,
    /// With --retry: a refused connection is transient too.
    #[arg(long = "retry-connrefused")]
    pub retry_connrefused: bool,
    /// With --retry: every failure is retried.
    #[arg(long = "retry-all-errors")]
    pub retry_all_errors: bool,
    /// Resume at this byte offset (`-`: the size of the -o file).
    #[arg(short = 'C', long = "continue-at", value_name = "OFFSET", allow_hyphen_values = true)]
    pub continue_at: Option<String>,
    /// Read the body at most this fast (bytes per second; K, M, G suffixes).
    #[arg(long = "limit-rate", value_parser = parse_rate)]
    pub limit_rate: Option<u64>,
    /// After each transfer, print this on stdout with its `%{variable}`s
    /// filled in, every variable curl 7.88 has (`%{json}` all of them,
    /// `%header{name}` a response header, `%{stderr}` / `%{stdout}` switch
    /// where the rest goes) and switchyard's connection_id,
    /// connection_source (new, pooled, shared, coalesced) and attempts;
    /// `@FILE` reads the format from a file. Times are seconds from the start
    /// of the transfer.
    #[arg(short = 'w', long = "write-out", value_name = "FORMAT", allow_hyphen_values = true)]
    pub write_out: Option<String>,
    /// Follow redirects (3xx with a Location), each hop a call on the same
    /// pool: a same-origin hop reuses the connection. 301, 302 and 303 turn a
    /// POST into a GET (an -X method is kept, without the body); 307 and 308
    /// keep the method and body. Authorization and Cookie headers given are
    /// dropped on a hop to another host.
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
    /// devtools and HAR viewers: every hop, and with --requests every call.
    #[arg(long, value_name = "FILE")]
    pub har: Option<PathBuf>,
    /// `HOST:PORT:ADDR[,ADDR]`: answer DNS for HOST:PORT with these addresses.
    #[arg(long, value_parser = parse_resolve)]
    pub resolve: Vec<Resolve>,
    /// Trust the CA certificates in this PEM file.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// Resolve names to IPv4 addresses only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Resolve names to IPv6 addresses only.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Ask for a compressed body (`Accept-Encoding: deflate, gzip, br`) and
    /// decode it.
    #[arg(long = "compressed")]
    pub compressed: bool,
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
    /// HTTP/3 first, as curl's --http3: for https://, QUIC and TCP are raced
    /// per address (QUIC first, TCP 250 ms later or at once when QUIC fails;
    /// the first connected wins), so a network that drops UDP still gets an
    /// answer over TCP. http:// URLs use HTTP/1.1.
    #[arg(long, conflicts_with_all = ["http1", "http2", "h2_prior_knowledge", "http3_only"])]
    pub http3: bool,
    /// HTTP/3 only, as curl's --http3-only: QUIC over UDP, no fallback to TCP
    /// (https:// URLs only).
    #[arg(long = "http3-only", conflicts_with_all = ["http1", "http2", "h2_prior_knowledge"])]
    pub http3_only: bool,
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
    /// `USER:PASSWORD` for the proxy.
    #[arg(short = 'U', long = "proxy-user", value_name = "USER:PASSWORD")]
    pub proxy_user: Option<String>,
    /// A SOCKS5 proxy, `HOST:PORT`; names resolved here.
    #[arg(long = "socks5", value_name = "HOST:PORT")]
    pub socks5: Option<String>,
    /// A SOCKS5 proxy, `HOST:PORT`; names resolved by the proxy.
    #[arg(long = "socks5-hostname", value_name = "HOST:PORT")]
    pub socks5_hostname: Option<String>,
    /// Hosts that are reached without the proxy (comma-separated, curl's
    /// `no_proxy` syntax; `*`: every host).
    #[arg(long = "noproxy", value_name = "LIST")]
    pub noproxy: Option<String>,
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
    /// Send from this interface name (`SO_BINDTODEVICE`, Linux; usually
    /// needs root or CAP_NET_RAW) or this local IP address, as curl.
    #[arg(long, value_name = "NAME|IP")]
    pub interface: Option<String>,
    /// Bind each TCP connection to this local IP first.
    #[arg(long = "local-address", value_name = "IP")]
    pub local_address: Option<std::net::IpAddr>,
    /// TCP keep-alive: probe after this idle time (curl's --keepalive-time, in
    /// seconds, or a duration such as 30s).
    #[arg(long = "keepalive-time", value_parser = parse_duration)]
    pub keepalive_time: Option<Duration>,
    /// With --requests: after the summary, print the pool's metrics per
    /// server in Prometheus text on stdout (OpenTelemetry's names:
    /// http_client_open_connections{state}, connections created and closed
    /// by reason, retries, …).
    #[arg(long)]
    pub metrics: bool,
    /// Ask for this byte range (`0-99`, `100-`, `-50`: curl's -r).
    #[arg(short = 'r', long = "range", value_name = "RANGE", allow_hyphen_values = true)]
    pub range: Option<String>,
    /// As -L, and credentials given (`-u`, `Authorization`, `Cookie`) go to
    /// every host the redirects lead to.
    #[arg(long = "location-trusted")]
    pub location_trusted: bool,
    /// Keep a POST a POST after a 301 (curl's --post301).
    #[arg(long = "post301")]
    pub post301: bool,
    /// Keep a POST a POST after a 302.
    #[arg(long = "post302")]
    pub post302: bool,
    /// Keep a POST a POST after a 303.
    #[arg(long = "post303")]
    pub post303: bool,
    /// With -b FILE: leave out the file's session cookies (no expiry).
    #[arg(short = 'j', long = "junk-session-cookies")]
    pub junk_session_cookies: bool,
    /// Fail with exit 63 when the body is larger than this (K, M, G
    /// suffixes): at once when its Content-Length says so, else when it
    /// passes it.
    #[arg(long = "max-filesize", value_parser = parse_rate)]
    pub max_filesize: Option<u64>,
    /// Give -o / -O files the server's Last-Modified time.
    #[arg(short = 'R', long = "remote-time")]
    pub remote_time: bool,
    /// How long a body with `Expect: 100-continue` waits for the server's
    /// 100 before it is sent anyway (seconds).
    #[arg(long = "expect100-timeout", value_parser = parse_duration)]
    pub expect100_timeout: Option<Duration>,
    /// A client certificate chain (PEM) for TLS (`FILE`; a key in the same
    /// file, or --key).
    #[arg(short = 'E', long = "cert", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long = "key", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Trust the CA certificates in the PEM files of this directory.
    #[arg(long = "capath", value_name = "DIR")]
    pub capath: Option<PathBuf>,
    /// Happy Eyeballs: how long the first address family goes alone (ms).
    #[arg(long = "happy-eyeballs-timeout-ms", value_name = "MS")]
    pub happy_eyeballs_timeout_ms: Option<u64>,
    /// The schemes allowed (curl's syntax: `=https`, `-all,https`, `+http`).
    #[arg(long = "proto", value_name = "PROTOCOLS", allow_hyphen_values = true)]
    pub proto: Option<String>,
    /// The schemes a redirect may go to (the same syntax).
    #[arg(long = "proto-redir", value_name = "PROTOCOLS", allow_hyphen_values = true)]
    pub proto_redir: Option<String>,
    /// Send `Authorization: Bearer TOKEN`.
    #[arg(long = "oauth2-bearer", value_name = "TOKEN")]
    pub oauth2_bearer: Option<String>,
    /// With several URLs: stop at the first that fails.
    #[arg(long = "fail-early")]
    pub fail_early: bool,
    /// Send the URL's path as given (switchyard never merges `/../`).
    #[arg(long = "path-as-is")]
    pub path_as_is: bool,
    /// curl's progress meter switches: switchyard draws no curl meter, so
    /// these change nothing (`-#`, `--progress-bar`, `--no-progress-meter`,
    /// `-q`).
    #[arg(short = '#', long = "progress-bar")]
    pub progress_bar: bool,
    /// See `--progress-bar`.
    #[arg(long = "no-progress-meter")]
    pub no_progress_meter: bool,
    /// Do not read ~/.curlrc (switchyard never does).
    #[arg(short = 'q', long = "disable")]
    pub disable: bool,
    /// TCP_NODELAY is always on; accepted as curl's no-op.
    #[arg(long = "tcp-nodelay")]
    pub tcp_nodelay: bool,
    /// TCP keep-alive is off unless --keepalive-time; accepted.
    #[arg(long = "no-keepalive")]
    pub no_keepalive: bool,
    /// HTTP/1.0: not spoken (an error says so).
    #[arg(short = '0', long = "http1.0", hide = true)]
    pub http1_0: bool,
    /// Machine-readable output (switchyard's): one JSON object per event (and
    /// a result or summary) on stdout; the body goes only to -o.
    #[arg(long = "json-events")]
    pub json: bool,
    /// Where each URL's body goes, from -o / -O in their order (filled in
    /// from the parsed command line, not a flag).
    #[arg(skip)]
    pub outputs: Vec<OutputTo>,
    /// The body parts in the order given (-d, --data-*, --json), filled in
    /// from the parsed command line.
    #[arg(skip)]
    pub data_in_order: Vec<(DataKind, String)>,
}

/// Where one URL's body is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTo {
    /// `-o FILE` (`-`: stdout).
    File(String),
    /// `-O`: the URL's last path segment.
    RemoteName,
}

/// Which body flag gave a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataKind {
    /// `-d` / `--data-ascii`.
    Ascii,
    /// `--data-binary`.
    Binary,
    /// `--data-raw`.
    Raw,
    /// `--data-urlencode`.
    UrlEncode,
    /// `--json`.
    Json,
}

impl GetArgs {
    /// Fills in what needs the order of the flags on the command line
    /// ([`outputs`](Self::outputs), [`data_in_order`](Self::data_in_order)),
    /// from clap's matches for `get`.
    pub fn order_from(&mut self, matches: &clap::ArgMatches) {
        // Only what the command line gave (a default has an index too).
        let at = |id: &str| -> Vec<usize> {
            if matches.value_source(id) != Some(clap::parser::ValueSource::CommandLine) {
                return Vec::new();
            }
            matches.indices_of(id).map(Iterator::collect).unwrap_or_default()
        };
        let mut outputs: Vec<(usize, OutputTo)> = at("output")
            .into_iter()
            .zip(self.output.iter())
            .map(|(i, o)| (i, OutputTo::File(o.clone())))
            .collect();
        outputs.extend(
            at("remote_name")
                .into_iter()
                .take(usize::from(self.remote_name))
                .map(|i| (i, OutputTo::RemoteName)),
        );
        outputs.sort_by_key(|(i, _)| *i);
        self.outputs = outputs.into_iter().map(|(_, o)| o).collect();
        let mut data: Vec<(usize, DataKind, String)> = Vec::new();
        for (id, kind, values) in [
            ("data", DataKind::Ascii, &self.data),
            ("data_binary", DataKind::Binary, &self.data_binary),
            ("data_raw", DataKind::Raw, &self.data_raw),
            ("data_urlencode", DataKind::UrlEncode, &self.data_urlencode),
            ("json_body", DataKind::Json, &self.json_body),
        ] {
            data.extend(at(id).into_iter().zip(values.iter()).map(|(i, v)| (i, kind, v.clone())));
        }
        data.sort_by_key(|(i, _, _)| *i);
        self.data_in_order = data.into_iter().map(|(_, k, v)| (k, v)).collect();
    }
}

/// Parses curl's rates: `100`, `200K`, `1.5M`, `1G` (bytes per second).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (number, unit) = s.split_at(s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len()));
    let n: f64 = number.parse().map_err(|_| format!("bad rate {s:?}"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("bad rate unit {unit:?} in {s:?} (K, M or G)")),
    };
    let rate = n * scale;
    if !(1.0..1e15).contains(&rate) {
        return Err(format!("rate {s:?} out of range"));
    }
    Ok(rate as u64)
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

/// The command line as switchyard reads it: `get` in front when no
/// subcommand is named ([`with_default_command`]), `-K` config files
/// expanded, clap's parse, and what needs the flags' order filled in
/// ([`GetArgs::order_from`]).
///
/// # Errors
/// A config file that cannot be read or parsed (exit 2). Clap's own usage
/// errors, `--help` and `--version` print and exit as clap does.
pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Cli, crate::exit::Failed> {
    use clap::{CommandFactory, FromArgMatches};
    let argv = with_default_command(args);
    let command = Cli::command();
    let get = command.find_subcommand("get").cloned().unwrap_or_default();
    let takes_value = |long: &str| {
        get.get_arguments()
            .find(|a| a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long)))
            .map(|a| a.get_action().takes_values())
    };
    let short_to_long = |c: char| {
        get.get_arguments().find(|a| a.get_short() == Some(c)).and_then(|a| a.get_long()).map(str::to_owned)
    };
    let is_get = argv.get(1).is_some_and(|a| a == "get");
    let argv = if is_get {
        crate::config::expand(argv, &takes_value, &short_to_long).map_err(|why| {
            // A file that cannot be read is curl's 26; a bad line is a usage error.
            let code = if why.starts_with("cannot read") { crate::exit::READ } else { crate::exit::CONFIG };
            crate::exit::Failed::with_code(code, why)
        })?
    } else {
        argv
    };
    let matches = command.get_matches_from(argv);
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| crate::exit::Failed::config(e.to_string()))?;
    if let (Command::Get(args), Some(m)) = (&mut cli.command, matches.subcommand_matches("get")) {
        args.order_from(m);
    }
    Ok(cli)
}
