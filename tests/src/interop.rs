//! The interop suite: real servers and proxies a user meets, installed from
//! Debian packages (`nginx-light`, `nghttp2-server`, `h2o`, `squid`, `microsocks`),
//! each started by its test on loopback with an ephemeral port, a temporary
//! directory and a certificate made for the run, and stopped when the test
//! ends. Assertions come from the servers' own logs (nginx's `$connection` in
//! its access log, nghttpd's session ids, squid's access log), not only from
//! the client's stats.
//!
//! A missing binary skips its cases with a notice on stderr; with
//! `SWITCHYARD_INTEROP=require` (CI sets it) a missing binary fails the test.
//! Run it locally: `apt-get install nginx-light nghttp2-server h2o squid microsocks`,
//! then `cargo test -p switchyard-tokio --test conformance interop`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::certs::{Leaf, TestCa};
use crate::conformance::{Adapter, Config, Failure, Req, Resp, Version};

/// Whether a missing server binary fails the test (`SWITCHYARD_INTEROP=require`).
#[must_use]
pub fn required() -> bool {
    std::env::var("SWITCHYARD_INTEROP").is_ok_and(|v| v == "require")
}

/// The path of an installed program (`PATH`, then the sbin directories, where
/// Debian puts nginx and squid).
#[must_use]
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/lib/squid"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The program, or `None` after a printed notice (a panic when required).
#[allow(clippy::print_stderr)] // the notice is the point: a skip is never silent
pub fn need(program: &str, package: &str) -> Option<PathBuf> {
    let found = find(program);
    if found.is_none() {
        assert!(
            !required(),
            "{program} is not installed, and SWITCHYARD_INTEROP=require: apt-get install {package}"
        );
        eprintln!("interop: skipping, {program} is not installed (apt-get install {package})");
    }
    found
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// A directory for one server's files, removed when dropped. World-writable:
/// squid's workers run as the `proxy` user.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-interop-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777));
        }
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn write(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, contents).expect("write a scratch file");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666));
        }
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running server process, stopped (SIGTERM, then SIGKILL) when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &'static str, mut cmd: Command, scratch: &Scratch) -> Process {
        let log = scratch.path(&format!("{name}.out"));
        let out = std::fs::File::create(&log).expect("server output file");
        let err = out.try_clone().expect("server output file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Process { name, child, log }
    }

    /// Waits until `port` accepts connections; a server that exits or never
    /// listens fails the test with its output.
    fn wait_listening(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let output = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("{} did not listen on {port} (exit: {exited:?}):\n{output}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: &str) {
        let _ = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status();
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads a log until `ready` accepts its lines (servers write a request's
/// line just after answering it), or 3 s have passed.
fn read_log(path: &Path, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let lines: Vec<String> =
            std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect();
        if ready(&lines) || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bytes of the 1 MiB test file (not all one byte: a shifted or truncated
/// body shows).
fn big_body() -> Vec<u8> {
    (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect()
}

fn tls_files(scratch: &Scratch, leaf: &Leaf) -> (PathBuf, PathBuf) {
    (scratch.write("cert.pem", leaf.chain_pem.as_bytes()), scratch.write("key.pem", leaf.key_pem.as_bytes()))
}

// ------------------------------------------------------------------- nginx

/// nginx's settings for one test.
#[derive(Clone, Copy, Debug, Default)]
pub struct NginxOptions {
    /// `keepalive_requests` (nginx's default: 1000).
    pub keepalive_requests: Option<u32>,
    /// `keepalive_timeout` (nginx's default: 75 s).
    pub keepalive_timeout: Option<Duration>,
    /// `http2_max_concurrent_streams` (nginx's default: 128).
    pub max_concurrent_streams: Option<u32>,
}

/// One request as nginx logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NginxHit {
    /// nginx's connection serial number.
    pub connection: u64,
    /// The port it arrived on.
    pub port: u16,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub protocol: String,
    /// The method.
    pub method: String,
    /// The path.
    pub uri: String,
    /// The status sent.
    pub status: u16,
    /// Request bytes received (head and body).
    pub request_length: u64,
}

/// nginx on loopback: a TLS port (HTTP/1.1 and HTTP/2 by ALPN) and a
/// cleartext HTTP/1.1 port, serving `/hello` (`hello`), `/big` (1 MiB) and
/// `/echo` (answers with the request's body, up to 8 MiB; nginx's echo
/// module, which Debian's nginx-light includes).
pub struct Nginx {
    /// The TLS port.
    pub tls_port: u16,
    /// The cleartext port.
    pub plain_port: u16,
    /// The CA that signed its certificate (for `localhost` and 127.0.0.1).
    pub ca: TestCa,
    process: Process,
    scratch: Scratch,
}

impl Nginx {
    /// Starts nginx, or `None` if it is not installed (see [`required`]).
    #[must_use]
    #[allow(clippy::print_stderr)] // the notice is the point: a skip is never silent
    pub fn start(options: NginxOptions) -> Option<Nginx> {
        let bin = need("nginx", "nginx-light")?;
        let echo = Path::new("/usr/lib/nginx/modules/ngx_http_echo_module.so");
        assert!(echo.is_file() || !required(), "nginx's echo module is missing: apt-get install nginx-light");
        if !echo.is_file() {
            eprintln!(
                "interop: skipping, nginx's echo module is not installed (apt-get install nginx-light)"
            );
            return None;
        }
        let scratch = Scratch::new("nginx");
        let ca = TestCa::new();
        let (cert, key) = tls_files(&scratch, &ca.leaf(&["localhost", "127.0.0.1"]));
        std::fs::create_dir_all(scratch.path("www")).expect("docroot");
        scratch.write("www/hello", b"hello");
        scratch.write("www/big", &big_body());
        let (tls_port, plain_port) = (free_port(), free_port());
        let dir = scratch.0.display().to_string();
        let mut tuning = String::new();
        if let Some(n) = options.keepalive_requests {
            tuning += &format!("keepalive_requests {n};\n");
        }
        if let Some(t) = options.keepalive_timeout {
            tuning += &format!("keepalive_timeout {}ms;\n", t.as_millis());
        }
        if let Some(n) = options.max_concurrent_streams {
            tuning += &format!("http2_max_concurrent_streams {n};\n");
        }
        // As root, workers would switch to `nobody`, who cannot read the
        // scratch directory's key.
        let user = if is_root() { "user root;" } else { "" };
        let conf = format!(
            r#"{user}
load_module {echo};
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format interop '$connection $server_port $server_protocol $request_method $uri $status $request_length';
    access_log {dir}/access.log interop;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    default_type application/octet-stream;
    {tuning}
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        listen [::1]:{tls_port} ssl http2;
        listen unix:{dir}/tls.sock ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {dir}/www;
        {echo_location}
    }}
    server {{
        listen 127.0.0.1:{plain_port};
        listen [::1]:{plain_port};
        listen unix:{dir}/plain.sock;
        root {dir}/www;
        {echo_location}
    }}
}}
"#,
            cert = cert.display(),
            key = key.display(),
            echo = echo.display(),
            echo_location = "location = /echo { client_max_body_size 8m; client_body_buffer_size 8m; \
                             echo_read_request_body; echo_request_body; }",
        );
        let conf_path = scratch.write("nginx.conf", conf.as_bytes());
        let mut cmd = Command::new(bin);
        cmd.arg("-p").arg(&scratch.0).arg("-c").arg(&conf_path).arg("-e").arg(scratch.path("error.log"));
        let mut process = Process::spawn("nginx", cmd, &scratch);
        process.wait_listening(tls_port);
        process.wait_listening(plain_port);
        Some(Nginx { tls_port, plain_port, ca, process, scratch })
    }

    /// The Unix socket its cleartext server also listens on.
    #[must_use]
    pub fn unix_plain(&self) -> PathBuf {
        self.scratch.path("plain.sock")
    }

    /// The Unix socket its TLS (HTTP/2) server also listens on.
    #[must_use]
    pub fn unix_tls(&self) -> PathBuf {
        self.scratch.path("tls.sock")
    }

    /// `https://127.0.0.1:<tls port><path>`.
    #[must_use]
    pub fn https(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.tls_port)
    }

    /// `http://127.0.0.1:<plain port><path>`.
    #[must_use]
    pub fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.plain_port)
    }

    /// Reloads its configuration (SIGHUP): new workers, old ones finish
    /// their requests and close their connections.
    pub fn reload(&self) {
        self.process.signal("HUP");
    }

    /// The requests logged so far; waits up to 3 s for at least `expected`.
    #[must_use]
    pub fn hits(&self, expected: usize) -> Vec<NginxHit> {
        let lines = read_log(&self.scratch.path("access.log"), |l| l.len() >= expected);
        lines
            .iter()
            .map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                assert_eq!(f.len(), 7, "an access log line: {line}");
                NginxHit {
                    connection: f[0].parse().expect("$connection"),
                    // Empty for a Unix-socket listener.
                    port: f[1].parse().unwrap_or(0),
                    protocol: f[2].to_owned(),
                    method: f[3].to_owned(),
                    uri: f[4].to_owned(),
                    status: f[5].parse().expect("$status"),
                    request_length: f[6].parse().expect("$request_length"),
                }
            })
            .collect()
    }

    /// nginx's error log (for messages).
    #[must_use]
    pub fn errors(&self) -> String {
        let mut s = std::fs::read_to_string(self.scratch.path("error.log")).unwrap_or_default();
        s += &self.process.output();
        s
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn connections(hits: &[NginxHit]) -> usize {
    hits.iter().map(|h| h.connection).collect::<BTreeSet<_>>().len()
}

fn client_for(a: &dyn Adapter, ca: &TestCa, version: Version) -> Box<dyn crate::conformance::TestClient> {
    a.client(Config {
        root: Some(ca.cert.clone()),
        version,
        call_timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    })
}

fn expect_ok(results: &[Result<Resp, (Failure, String)>], what: &str) {
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} calls failed; first: {:?}",
        failed.len(),
        results.len(),
        failed.first()
    );
}

fn ok(r: Result<Resp, (Failure, String)>, what: &str) -> Resp {
    r.unwrap_or_else(|(kind, msg)| panic!("{what}: call failed ({kind:?}): {msg}"))
}

/// The ways to reach nginx an adapter supports: (label, URL base, version,
/// protocol nginx logs).
fn nginx_modes(nginx: &Nginx, http2: bool) -> Vec<(&'static str, String, Version, &'static str)> {
    let mut modes = vec![
        ("TLS HTTP/1.1", nginx.https(""), Version::Http1, "HTTP/1.1"),
        ("cleartext HTTP/1.1", nginx.http(""), Version::Http1, "HTTP/1.1"),
    ];
    if http2 {
        modes.insert(1, ("TLS HTTP/2", nginx.https(""), Version::Auto, "HTTP/2.0"));
    }
    modes
}

/// GET, HEAD, a POST with a body, a 1 MiB download and a 1 MiB upload, over
/// TLS (HTTP/1.1, and HTTP/2 by ALPN) and cleartext; nginx's log confirms the
/// protocol, the bodies' arrival and one connection per client.
pub fn nginx_basics(a: &dyn Adapter, http2: bool) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let big = big_body();
    let mut logged = 0;
    for (label, base, version, protocol) in nginx_modes(&nginx, http2) {
        let client = client_for(a, &nginx.ca, version);
        let r = ok(client.send(Req::get(format!("{base}/hello"))), label);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{label}: GET");
        let head = Req { method: http::Method::HEAD, ..Req::get(format!("{base}/hello")) };
        let r = ok(client.send(head), label);
        assert_eq!((r.status, r.body.len()), (200, 0), "{label}: HEAD has no body");
        let small: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 13) as u8 + b'a').collect();
        let post =
            Req { method: http::Method::POST, body: small.clone(), ..Req::get(format!("{base}/echo")) };
        let r = ok(client.send(post), label);
        assert_eq!(r.status, 200, "{label}: POST");
        assert!(r.body == small, "{label}: nginx echoed the POST body ({} bytes)", r.body.len());
        let r = ok(client.send(Req::get(format!("{base}/big"))), label);
        assert_eq!(r.body.len(), big.len(), "{label}: 1 MiB body length");
        assert!(r.body == big, "{label}: 1 MiB body content");
        let upload =
            Req { method: http::Method::POST, body: big.clone(), ..Req::get(format!("{base}/echo")) };
        let r = ok(client.send(upload), label);
        assert!(
            r.status == 200 && r.body == big,
            "{label}: nginx echoed the 1 MiB upload ({} bytes)",
            r.body.len()
        );

        logged += 5;
        let hits = nginx.hits(logged);
        let mine = &hits[logged - 5..];
        assert!(mine.iter().all(|h| h.protocol == protocol), "{label}: nginx saw {mine:?}");
        let methods: Vec<&str> = mine.iter().map(|h| h.method.as_str()).collect();
        assert_eq!(methods, ["GET", "HEAD", "POST", "GET", "POST"], "{label}");
        assert!(mine[2].request_length >= 64 * 1024, "{label}: the POST body arrived: {:?}", mine[2]);
        assert!(mine[4].request_length >= 1024 * 1024, "{label}: the upload arrived: {:?}", mine[4]);
        assert_eq!(connections(mine), 1, "{label}: one connection for sequential calls: {mine:?}");
    }
}

/// 16 callers: HTTP/1.1 uses at most 16 connections; HTTP/2 uses one.
pub fn nginx_connection_counts(a: &dyn Adapter, http2: bool) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let mut logged = 0;
    for (label, base, version, _) in nginx_modes(&nginx, http2) {
        let client = client_for(a, &nginx.ca, version);
        let results = client.send_loops(16, 20, Req::get(format!("{base}/hello")));
        expect_ok(&results, label);
        logged += results.len();
        let hits = nginx.hits(logged);
        let n = connections(&hits[logged - results.len()..]);
        let most = if version == Version::Http1 { 16 } else { 1 };
        assert!((1..=most).contains(&n), "{label}: {n} connections for 16 callers (at most {most})");
        // Every attempt's events are complete, kept attempts included (issue 28).
        crate::conformance::eventually(&format!("{label}: attempts done"), Duration::from_secs(10), || {
            client.stats().totals.connecting == 0
        });
        let events = client.events();
        let count = |name: &str| events.iter().filter(|(_, n, _)| *n == name).count();
        assert_eq!(count("secure_connect_start"), count("secure_connect_end"), "{label}");
        assert_eq!(count("connect_start"), count("connect_end") + count("connect_failed"), "{label}");
    }
}

/// nginx reloaded 5 times during 1,200 requests from 16 callers: every
/// request succeeds (old workers close their connections; requests in flight
/// on them finish or are retried as the rules allow).
pub fn nginx_reload_under_load(a: &dyn Adapter, http2: bool) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let nginx = Arc::new(nginx);
    for (label, base, version, _) in nginx_modes(&nginx, http2) {
        if base.starts_with("http:") {
            continue; // TLS HTTP/1.1 and HTTP/2 are the interesting cases
        }
        let client = client_for(a, &nginx.ca, version);
        let stop = Arc::new(AtomicBool::new(false));
        let reloader = {
            let (nginx, stop) = (Arc::clone(&nginx), Arc::clone(&stop));
            std::thread::spawn(move || {
                for _ in 0..5 {
                    std::thread::sleep(Duration::from_millis(150));
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    nginx.reload();
                }
            })
        };
        let results = client.send_loops(16, 75, Req::get(format!("{base}/hello")));
        stop.store(true, Ordering::Relaxed);
        reloader.join().expect("reloader");
        expect_ok(&results, &format!("{label} with reloads"));
    }
}

/// GOAWAY churn at high concurrency (issue: an egress proxy lost half its
/// requests here): `keepalive_requests 5` (HTTP/2: GOAWAY after 5 streams;
/// HTTP/1.1: `Connection: close` every 5th response) and a reload every
/// 250 ms, 128 callers × 40 idempotent GETs over TLS: every request
/// succeeds. A GOAWAY's unprocessed streams were never sent, so they go
/// to a fresh connection whatever the retry count or budget says.
pub fn nginx_goaway_churn(a: &dyn Adapter, http2: bool) {
    let options = NginxOptions { keepalive_requests: Some(5), ..NginxOptions::default() };
    let Some(nginx) = Nginx::start(options) else { return };
    let nginx = Arc::new(nginx);
    for (label, base, version, _) in nginx_modes(&nginx, http2) {
        if base.starts_with("http:") {
            continue;
        }
        let client = client_for(a, &nginx.ca, version);
        let stop = Arc::new(AtomicBool::new(false));
        let reloader = {
            let (nginx, stop) = (Arc::clone(&nginx), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    nginx.reload();
                }
            })
        };
        let results = client.send_loops(128, 40, Req::get(format!("{base}/hello")));
        stop.store(true, Ordering::Relaxed);
        reloader.join().expect("reloader");
        expect_ok(&results, &format!("{label}, keepalive_requests 5 and a reload every 250 ms"));
    }
}

/// `keepalive_requests 10` (HTTP/1.1: `Connection: close` every 10th
/// response; HTTP/2: GOAWAY every 10 streams) under 16 callers: every request
/// succeeds, and nginx's log shows the connections it recycled.
pub fn nginx_keepalive_requests(a: &dyn Adapter, http2: bool) {
    let options = NginxOptions { keepalive_requests: Some(10), ..NginxOptions::default() };
    let Some(nginx) = Nginx::start(options) else { return };
    let mut logged = 0;
    for (label, base, version, _) in nginx_modes(&nginx, http2) {
        let client = client_for(a, &nginx.ca, version);
        let results = client.send_loops(16, 50, Req::get(format!("{base}/hello")));
        expect_ok(&results, &format!("{label}, keepalive_requests 10"));
        logged += results.len();
        let hits = nginx.hits(logged);
        let mine = &hits[logged - results.len()..];
        let n = connections(mine);
        assert!(
            n >= mine.len() / 10,
            "{label}: nginx closed a connection every 10 requests, yet {n} connections"
        );
    }
}

/// `keepalive_timeout` 300 ms with idle pauses just under, at and over it:
/// every request succeeds (a connection nginx closed is noticed or retried).
pub fn nginx_keepalive_timeout(a: &dyn Adapter, http2: bool) {
    let options =
        NginxOptions { keepalive_timeout: Some(Duration::from_millis(300)), ..NginxOptions::default() };
    let Some(nginx) = Nginx::start(options) else { return };
    for (label, base, version, _) in nginx_modes(&nginx, http2) {
        let client = client_for(a, &nginx.ca, version);
        ok(client.send(Req::get(format!("{base}/hello"))), label);
        for pause in [250, 280, 295, 300, 305, 320, 350] {
            std::thread::sleep(Duration::from_millis(pause));
            let r = client.send(Req::get(format!("{base}/hello")));
            ok(r, &format!("{label}, after {pause} ms idle (keepalive_timeout 300 ms)"));
        }
    }
}

/// nginx with `http2_max_concurrent_streams 2` and 16 callers: every request
/// succeeds, on at most ceil(16 / 2) + 1 connections (nginx's log).
pub fn nginx_low_stream_limit(a: &dyn Adapter) {
    let options = NginxOptions { max_concurrent_streams: Some(2), ..NginxOptions::default() };
    let Some(nginx) = Nginx::start(options) else { return };
    let client = client_for(a, &nginx.ca, Version::Http2);
    let results = client.send_loops(16, 40, Req::get(nginx.https("/hello")));
    expect_ok(&results, "http2_max_concurrent_streams 2");
    let hits = nginx.hits(results.len());
    let n = connections(&hits);
    assert!(n <= 16 / 2 + 1, "{n} connections for 16 callers at 2 streams each: {}", nginx.errors());
}

/// HTTP/2 with prior knowledge to nginx's cleartext HTTP/1.1 port (nginx
/// answers `PRI * HTTP/2.0` with a 400 and closes): every call fails the same
/// typed way, 20 times out of 20.
pub fn nginx_prior_knowledge_to_http1(a: &dyn Adapter) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let client = client_for(a, &nginx.ca, Version::Http2);
    for i in 0..20 {
        let (kind, message) =
            client.send(Req::get(nginx.http("/hello"))).expect_err("nginx's port is HTTP/1.1");
        assert_eq!(kind, Failure::Exchange(true), "call {i}: {message}");
        assert!(message.contains("did not answer as an HTTP/2 server"), "call {i}: {message}");
    }
}

// ------------------------------------------------------------------ nghttpd

/// nghttpd (nghttp2's server) on loopback, verbose: its log names every
/// session (`[id=N]`) and every frame it sends.
pub struct Nghttpd {
    /// Its port.
    pub port: u16,
    /// The CA that signed its certificate (TLS only).
    pub ca: TestCa,
    process: Process,
    _scratch: Scratch,
}

impl Nghttpd {
    /// Starts nghttpd over TLS, or cleartext (h2c, prior knowledge), with a
    /// stream limit; `None` if it is not installed.
    #[must_use]
    pub fn start(tls: bool, max_concurrent_streams: Option<u32>) -> Option<Nghttpd> {
        let bin = need("nghttpd", "nghttp2-server")?;
        let scratch = Scratch::new("nghttpd");
        let ca = TestCa::new();
        std::fs::create_dir_all(scratch.path("www")).expect("docroot");
        scratch.write("www/hello", b"hello");
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.arg("-v").arg("-a").arg("127.0.0.1").arg("-d").arg(scratch.path("www"));
        if let Some(n) = max_concurrent_streams {
            cmd.arg(format!("--max-concurrent-streams={n}"));
        }
        if tls {
            let (cert, key) = tls_files(&scratch, &ca.leaf(&["localhost", "127.0.0.1"]));
            cmd.arg(port.to_string()).arg(key).arg(cert);
        } else {
            cmd.arg("--no-tls").arg(port.to_string());
        }
        let mut process = Process::spawn("nghttpd", cmd, &scratch);
        process.wait_listening(port);
        Some(Nghttpd { port, ca, process, _scratch: scratch })
    }

    /// Sessions that carried a request (each TCP connection is one session;
    /// the readiness probe's connection carried none).
    #[must_use]
    pub fn sessions(&self) -> usize {
        let out = self.process.output();
        out.lines()
            .filter(|l| l.contains(" recv (stream_id=") && l.contains(":method:"))
            .filter_map(|l| l.strip_prefix("[id=")?.split(']').next())
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Streams it refused (REFUSED_STREAM sent).
    #[must_use]
    pub fn refused(&self) -> usize {
        let out = self.process.output();
        let lines: Vec<&str> = out.lines().collect();
        lines
            .windows(2)
            .filter(|w| w[0].contains("send RST_STREAM") && w[1].contains("REFUSED_STREAM"))
            .count()
    }
}

/// One call to `url` (`/hello`, answered over HTTP/2), then 80 from 8 callers.
fn hello_over_http2(client: &dyn crate::conformance::TestClient, url: &str) {
    let r = ok(client.send(Req::get(url)), url);
    assert_eq!(
        (r.status, r.version, r.body.as_slice()),
        (200, http::Version::HTTP_2, &b"hello"[..]),
        "{url}"
    );
    let results = client.send_loops(8, 10, Req::get(url));
    expect_ok(&results, url);
}

/// nghttpd: HTTP/2 over TLS and h2c with prior knowledge.
pub fn nghttpd_tls_and_h2c(a: &dyn Adapter) {
    for tls in [true, false] {
        let Some(server) = Nghttpd::start(tls, None) else { return };
        let client = client_for(a, &server.ca, Version::Http2);
        let url = if tls {
            format!("https://127.0.0.1:{}/hello", server.port)
        } else {
            format!("http://127.0.0.1:{}/hello", server.port)
        };
        hello_over_http2(&*client, &url);
        assert_eq!(server.sessions(), 1, "{url}: one HTTP/2 connection");
    }
}

/// nghttpd with `--max-concurrent-streams=3` and 16 callers: every request
/// succeeds, nghttpd refuses nothing, on at most ceil(16 / 3) + 1 connections
/// (its own session count).
pub fn nghttpd_low_stream_limit(a: &dyn Adapter) {
    let Some(server) = Nghttpd::start(true, Some(3)) else { return };
    let client = client_for(a, &server.ca, Version::Http2);
    let results = client.send_loops(16, 25, Req::get(format!("https://127.0.0.1:{}/hello", server.port)));
    expect_ok(&results, "nghttpd --max-concurrent-streams=3");
    let (sessions, refused) = (server.sessions(), server.refused());
    assert_eq!(refused, 0, "nghttpd refused {refused} streams");
    assert!(sessions <= 16usize.div_ceil(3) + 1, "{sessions} connections for 16 callers at 3 streams each");
}

// ---------------------------------------------------------------------- h2o

/// h2o on loopback: HTTP/2 over TLS (ALPN) and with prior knowledge on a
/// cleartext port, serving `/hello` and a 1 MiB `/big` from a docroot. Its
/// access log names each request's connection (`%{connection-id}x`) and
/// protocol.
pub struct H2o {
    /// The cleartext port (h2c with prior knowledge, or HTTP/1.1).
    pub plain: u16,
    /// The TLS port.
    pub tls: u16,
    /// The CA that signed its certificate.
    pub ca: TestCa,
    scratch: Scratch,
    _process: Process,
}

/// One request as h2o logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2oHit {
    /// h2o's connection id.
    pub connection: u64,
    /// The protocol (`HTTP/2`, `HTTP/1.1`).
    pub protocol: String,
    /// The status it answered.
    pub status: u16,
    /// The request line.
    pub request: String,
}

impl H2o {
    /// Starts h2o, or `None` if it is not installed (see [`required`]).
    #[must_use]
    pub fn start() -> Option<H2o> {
        let bin = need("h2o", "h2o")?;
        let scratch = Scratch::new("h2o");
        let ca = TestCa::new();
        std::fs::create_dir_all(scratch.path("www")).expect("docroot");
        scratch.write("www/hello", b"hello");
        scratch.write("www/big", &big_body());
        let (cert, key) = tls_files(&scratch, &ca.leaf(&["localhost", "127.0.0.1"]));
        let (plain, tls) = (free_port(), free_port());
        let dir = scratch.0.display();
        let conf = format!(
            "error-log: {dir}/error.log
access-log:
  path: {dir}/access.log
  format: \"%{{connection-id}}x %H %s %r\"
listen:
  host: 127.0.0.1
  port: {plain}
listen:
  host: 127.0.0.1
  port: {tls}
  ssl:
    certificate-file: {cert}
    key-file: {key}
hosts:
  default:
    paths:
      /:
        file.dir: {dir}/www
",
            cert = cert.display(),
            key = key.display(),
        );
        let conf_path = scratch.write("h2o.conf", conf.as_bytes());
        let mut cmd = Command::new(bin);
        cmd.arg("-c").arg(conf_path);
        let mut process = Process::spawn("h2o", cmd, &scratch);
        process.wait_listening(plain);
        process.wait_listening(tls);
        Some(H2o { plain, tls, ca, scratch, _process: process })
    }

    /// The requests h2o logged, once at least `expected` are there (the
    /// readiness probes logged none: they sent no request).
    #[must_use]
    pub fn hits(&self, expected: usize) -> Vec<H2oHit> {
        read_log(&self.scratch.path("access.log"), |lines| lines.len() >= expected)
            .iter()
            .filter_map(|l| {
                let mut it = l.splitn(4, ' ');
                let connection = it.next()?.parse().ok()?;
                let protocol = it.next()?.to_owned();
                let status = it.next()?.parse().ok()?;
                Some(H2oHit { connection, protocol, status, request: it.next()?.to_owned() })
            })
            .collect()
    }
}

/// h2o: HTTP/2 over TLS (ALPN) and h2c with prior knowledge. One call, 80
/// from 8 callers, and a 1 MiB body: every answer
/// whole, all on one connection per mode, HTTP/2 in h2o's own log.
pub fn h2o_tls_and_h2c(a: &dyn Adapter) {
    let Some(server) = H2o::start() else { return };
    let big = big_body();
    let mut logged = 0;
    for tls in [true, false] {
        let client = client_for(a, &server.ca, Version::Http2);
        let base = if tls {
            format!("https://127.0.0.1:{}", server.tls)
        } else {
            format!("http://127.0.0.1:{}", server.plain)
        };
        let url = format!("{base}/hello");
        hello_over_http2(&*client, &url);
        let r = ok(client.send(Req::get(format!("{base}/big"))), &base);
        assert!(r.body == big, "{base}/big: the whole 1 MiB ({} bytes)", r.body.len());
        logged += 82;
        let hits = server.hits(logged);
        let mine = &hits[logged - 82..];
        assert_eq!(mine.len(), 82, "{base}: h2o logged {} of 82 requests", mine.len());
        assert!(mine.iter().all(|h| h.protocol == "HTTP/2" && h.status == 200), "{base}: {mine:?}");
        let connections: BTreeSet<u64> = mine.iter().map(|h| h.connection).collect();
        assert_eq!(connections.len(), 1, "{base}: one HTTP/2 connection, h2o saw {connections:?}");
    }
}

// -------------------------------------------------------------------- squid

/// squid as a forward proxy on loopback.
pub struct Squid {
    /// Its port.
    pub port: u16,
    process: Process,
    scratch: Scratch,
}

impl Squid {
    /// Starts squid (no cache, loopback clients only); `None` if it is not
    /// installed.
    #[must_use]
    pub fn start() -> Option<Squid> {
        Squid::launch(None)
    }

    /// Starts squid requiring Basic proxy credentials `user:password`
    /// (`basic_ncsa_auth` over an `htpasswd` file); `None` if squid or
    /// `htpasswd` (apache2-utils) is not installed.
    #[must_use]
    pub fn start_with_auth(user: &str, password: &str) -> Option<Squid> {
        Squid::launch(Some((user, password)))
    }

    fn launch(auth: Option<(&str, &str)>) -> Option<Squid> {
        let bin = need("squid", "squid")?;
        let scratch = Scratch::new("squid");
        let port = free_port();
        let dir = scratch.0.display().to_string();
        for log in ["access.log", "cache.log"] {
            scratch.write(log, b"");
        }
        let conf = format!(
            "http_port 127.0.0.1:{port}
pid_filename {dir}/squid.pid
access_log stdio:{dir}/access.log
cache_log {dir}/cache.log
cache_store_log none
coredump_dir {dir}
cache deny all
netdb_filename none
pinger_enable off
shutdown_lifetime 0 seconds
acl local src 127.0.0.1/32 ::1
"
        );
        let mut conf = conf;
        match auth {
            None => conf.push_str("http_access allow local\nhttp_access deny all\n"),
            Some((user, password)) => {
                let helper = need("basic_ncsa_auth", "squid")?;
                let htpasswd = need("htpasswd", "apache2-utils")?;
                let file = scratch.path("passwd");
                let made = Command::new(htpasswd)
                    .args(["-c", "-b", "-m"])
                    .arg(&file)
                    .args([user, password])
                    .output();
                assert!(
                    made.is_ok_and(|o| o.status.success()),
                    "htpasswd could not write {}",
                    file.display()
                );
                conf.push_str(&format!(
                    "auth_param basic program {} {}\nauth_param basic realm switchyard\n\
                     acl authed proxy_auth REQUIRED\nhttp_access allow local authed\nhttp_access deny all\n",
                    helper.display(),
                    file.display()
                ));
            }
        }
        let conf_path = scratch.write("squid.conf", conf.as_bytes());
        let mut cmd = Command::new(bin);
        cmd.arg("-N").arg("-f").arg(conf_path);
        let mut process = Process::spawn("squid", cmd, &scratch);
        process.wait_listening(port);
        Some(Squid { port, process, scratch })
    }

    /// squid's access log: `(method, URL)` per request.
    #[must_use]
    pub fn requests(&self, expected: usize) -> Vec<(String, String)> {
        read_log(&self.scratch.path("access.log"), |l| l.len() >= expected)
            .iter()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((f.get(5)?.to_string(), f.get(6)?.to_string()))
            })
            .collect()
    }

    /// Its own log (for messages).
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path("cache.log")).unwrap_or_default() + &self.process.output()
    }
}

/// Through squid: `http://` in absolute form and `https://` through a
/// CONNECT tunnel, to nginx; squid's access log shows both.
pub fn squid_forward_proxy(a: &dyn Adapter) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let Some(squid) = Squid::start() else { return };
    let proxy = switchyard_core::Proxy::http("127.0.0.1", u32::from(squid.port)).expect("proxy");
    let client =
        a.client(Config { root: Some(nginx.ca.cert.clone()), proxies: vec![proxy], ..Config::default() });
    for url in [nginx.http("/hello"), nginx.https("/hello"), nginx.http("/big")] {
        let r = client.send(Req::get(url.clone()));
        let r = r.unwrap_or_else(|e| panic!("{url} through squid: {e:?}\n{}", squid.log()));
        assert_eq!(r.status, 200, "{url}");
    }
    // The CONNECT tunnel is logged when it closes: close the client's connections.
    drop(client);
    let seen = squid.requests(4);
    let expect = [
        ("GET".to_owned(), nginx.http("/hello")),
        ("CONNECT".to_owned(), format!("127.0.0.1:{}", nginx.tls_port)),
        ("GET".to_owned(), nginx.http("/big")),
    ];
    for e in &expect {
        assert!(seen.contains(e), "squid logged {seen:?}, not {e:?}");
    }
    let hits = nginx.hits(3);
    assert_eq!(hits.len(), 3, "nginx saw the three requests: {hits:?}");
}

// --------------------------------------------------------------- microsocks

/// microsocks (a SOCKS5 server) on loopback, without authentication.
pub struct Microsocks {
    /// Its port.
    pub port: u16,
    process: Process,
    _scratch: Scratch,
}

impl Microsocks {
    /// Starts microsocks; `None` if it is not installed.
    #[must_use]
    pub fn start() -> Option<Microsocks> {
        Microsocks::launch(None)
    }

    /// Starts microsocks requiring username/password (`-u`, `-P`).
    #[must_use]
    pub fn start_with_auth(user: &str, password: &str) -> Option<Microsocks> {
        Microsocks::launch(Some((user, password)))
    }

    fn launch(auth: Option<(&str, &str)>) -> Option<Microsocks> {
        let bin = need("microsocks", "microsocks")?;
        let scratch = Scratch::new("microsocks");
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.arg("-i").arg("127.0.0.1").arg("-p").arg(port.to_string());
        if let Some((user, password)) = auth {
            cmd.arg("-u").arg(user).arg("-P").arg(password);
        }
        let mut process = Process::spawn("microsocks", cmd, &scratch);
        process.wait_listening(port);
        Some(Microsocks { port, process, _scratch: scratch })
    }

    /// What it logged (one line per client, naming where it connected).
    #[must_use]
    pub fn log(&self) -> String {
        self.process.output()
    }
}

/// nginx listening on Unix sockets (issue 33): cleartext HTTP/1.1 calls
/// share one pooled connection (nginx's `$connection` says so), the URL's
/// host as `Host`; TLS with the URL's host as SNI, HTTP/2 by ALPN where the
/// adapter has it, concurrent calls multiplexed on one connection.
pub fn nginx_over_unix_sockets(a: &dyn Adapter, http2: bool) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let client = a.client(Config { unix_socket: Some(nginx.unix_plain()), ..Config::default() });
    for _ in 0..3 {
        let r = client.send(Req::get("http://localhost/hello")).expect("over nginx's Unix socket");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }
    let hits = nginx.hits(3);
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert!(
        hits.iter().all(|h| h.connection == hits[0].connection && h.port == 0),
        "one connection: {hits:?}"
    );

    let client = a.client(Config {
        unix_socket: Some(nginx.unix_tls()),
        root: Some(nginx.ca.cert.clone()),
        ..Config::default()
    });
    for r in client.send_all(vec![Req::get("https://localhost/hello"); 4]) {
        let r = r.expect("TLS over nginx's Unix socket");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        let want = if http2 { http::Version::HTTP_2 } else { http::Version::HTTP_11 };
        assert_eq!(r.version, want);
    }
    let hits = nginx.hits(7);
    let tls: Vec<&NginxHit> = hits[3..].iter().collect();
    if http2 {
        assert!(tls.iter().all(|h| h.protocol == "HTTP/2.0" && h.connection == tls[0].connection), "{tls:?}");
    }
}

/// Through microsocks, as `socks5h://`: an origin named `localhost` (resolved
/// by the proxy) and an IP literal (nothing to resolve), over cleartext and
/// TLS. As `socks5://`: the client resolves a name only it knows and
/// microsocks's log shows the address it was asked for, never the name.
pub fn microsocks_socks5(a: &dyn Adapter) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let Some(socks) = Microsocks::start() else { return };
    let local = switchyard_core::Proxy::socks5("127.0.0.1", u32::from(socks.port)).expect("proxy");
    let client = a.client(Config {
        root: Some(nginx.ca.cert.clone()),
        proxies: vec![local],
        hosts: BTreeMap::from([("only-here.test".to_owned(), vec!["127.0.0.1".parse().expect("ip")])]),
        ..Config::default()
    });
    // nginx's certificate names localhost: the TLS case goes to `localhost`,
    // which only the client's resolver knows here (the hermetic one).
    let client_tls = a.client(Config {
        root: Some(nginx.ca.cert.clone()),
        proxies: vec![switchyard_core::Proxy::socks5("127.0.0.1", u32::from(socks.port)).expect("proxy")],
        hosts: BTreeMap::from([("localhost".to_owned(), vec!["127.0.0.1".parse().expect("ip")])]),
        ..Config::default()
    });
    let plain = format!("http://only-here.test:{}/hello", nginx.plain_port);
    let r =
        client.send(Req::get(plain.clone())).unwrap_or_else(|e| panic!("{plain}: {e:?}\n{}", socks.log()));
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{plain}");
    let tls = format!("https://localhost:{}/hello", nginx.tls_port);
    let r =
        client_tls.send(Req::get(tls.clone())).unwrap_or_else(|e| panic!("{tls}: {e:?}\n{}", socks.log()));
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{tls}");
    let log = socks.log();
    assert!(!log.contains("only-here.test"), "socks5:// sent the name: {log}");
    for port in [nginx.plain_port, nginx.tls_port] {
        assert!(log.contains(&format!("127.0.0.1:{port}")), "asked for the address: {log}");
    }

    let proxy = switchyard_core::Proxy::socks5h("127.0.0.1", u32::from(socks.port)).expect("proxy");
    // The hermetic resolver knows no names: `localhost` must reach the proxy unresolved.
    let client =
        a.client(Config { root: Some(nginx.ca.cert.clone()), proxies: vec![proxy], ..Config::default() });
    let urls = [
        format!("http://localhost:{}/hello", nginx.plain_port),
        format!("https://localhost:{}/hello", nginx.tls_port),
        nginx.http("/hello"),
        nginx.https("/hello"),
    ];
    for url in &urls {
        let r = client.send(Req::get(url.clone()));
        let r = r.unwrap_or_else(|e| panic!("{url} through microsocks: {e:?}\n{}", socks.log()));
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{url}");
    }
    let hits = nginx.hits(urls.len() + 2);
    assert_eq!(hits.len(), urls.len() + 2, "nginx saw every request: {hits:?}");
    let log = socks.log();
    assert!(log.contains(&format!("localhost:{}", nginx.plain_port)), "socks5h:// sent the name: {log}");
}

/// The credentials cases against real proxies (issue 19): squid requiring
/// Basic credentials (via `basic_ncsa_auth`) — `CONNECT` and absolute form
/// with them; a typed error naming the proxy without them or with wrong
/// ones (squid answers 407) — and microsocks with `-u`/`-P` the same way.
/// No credential shows in an error or an event.
pub fn proxy_credentials_against_squid_and_microsocks(a: &dyn Adapter) {
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let Some(squid) = Squid::start_with_auth("ann", "squid-pw-1") else { return };
    let Some(socks) = Microsocks::start_with_auth("bob", "socks-pw-2") else { return };
    let creds = |u: &str, p: &str| switchyard_core::ProxyCredentials::new(u, p);
    let http = |c: Option<switchyard_core::ProxyCredentials>| {
        let p = switchyard_core::Proxy::http("127.0.0.1", u32::from(squid.port)).expect("proxy");
        c.map_or(p.clone(), |c| p.with_credentials(c))
    };
    let socks5 = |c: Option<switchyard_core::ProxyCredentials>| {
        let p = switchyard_core::Proxy::socks5("127.0.0.1", u32::from(socks.port)).expect("proxy");
        c.map_or(p.clone(), |c| p.with_credentials(c))
    };
    let urls = [nginx.http("/hello"), nginx.https("/hello")];
    for proxy in [http(Some(creds("ann", "squid-pw-1"))), socks5(Some(creds("bob", "socks-pw-2")))] {
        let client = a.client(Config {
            root: Some(nginx.ca.cert.clone()),
            proxies: vec![proxy.clone()],
            ..Config::default()
        });
        for url in &urls {
            let r = client.send(Req::get(url.clone()));
            let r =
                r.unwrap_or_else(|e| panic!("{url} via {proxy}: {e:?}\n{}\n{}", squid.log(), socks.log()));
            assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{url} via {proxy}");
        }
    }
    let refused = [
        (http(None), "requires authentication"),
        (http(Some(creds("ann", "wrong-pw-3"))), "refused the credentials"),
        (socks5(None), "requires authentication"),
        (socks5(Some(creds("bob", "wrong-pw-3"))), "refused the credentials"),
    ];
    for (proxy, want) in refused {
        let client = a.client(Config {
            root: Some(nginx.ca.cert.clone()),
            proxies: vec![proxy.clone()],
            ..Config::default()
        });
        for url in &urls {
            let (_, text) = client.send(Req::get(url.clone())).expect_err("the proxy wants credentials");
            assert!(text.contains(want) && text.contains(&proxy.to_string()), "{url} via {proxy}: {text}");
            for secret in ["wrong-pw-3", "squid-pw-1", "socks-pw-2"] {
                assert!(!text.contains(secret), "{text}");
                assert!(client.events().iter().all(|e| !e.2.contains(secret)));
            }
        }
    }
}

/// dnsmasq serving fixed records on loopback (UDP and TCP), reading no system
/// file, logging every query.
pub struct Dnsmasq {
    /// Where it listens.
    pub addr: SocketAddr,
    process: Process,
    _scratch: Scratch,
}

impl Dnsmasq {
    /// Starts dnsmasq answering `records` (`name,ip[,ip…][,ttl]`, as its
    /// `--host-record`); other names under `.test` are NXDOMAIN. `None` if it is
    /// not installed.
    #[must_use]
    pub fn start(records: &[&str]) -> Option<Dnsmasq> {
        let bin = need("dnsmasq", "dnsmasq-base")?;
        let scratch = Scratch::new("dnsmasq");
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll"])
            .args(["--pid-file=", "--bind-interfaces", "--listen-address=127.0.0.1", "--local=/test/"])
            .args(["--log-queries", "--log-facility=-", "--user=root"])
            .arg(format!("--port={port}"));
        for r in records {
            cmd.arg(format!("--host-record={r}"));
        }
        let mut process = Process::spawn("dnsmasq", cmd, &scratch);
        process.wait_listening(port);
        Some(Dnsmasq { addr: SocketAddr::from(([127, 0, 0, 1], port)), process, _scratch: scratch })
    }

    /// Queries it logged for `name` of type `kind` (`A`, `AAAA`).
    #[must_use]
    pub fn queries(&self, name: &str, kind: &str) -> usize {
        let needle = format!("query[{kind}] {name} ");
        self.process.output().lines().filter(|l| l.contains(&needle)).count()
    }

    /// Its log.
    #[must_use]
    pub fn log(&self) -> String {
        self.process.output()
    }
}

/// hickory (the adapter's `HickoryResolver`, made by `hickory`) against
/// dnsmasq: A and AAAA asked once each, the answer cached for the calls after,
/// NXDOMAIN a DNS failure naming the host.
pub fn hickory_against_dnsmasq(
    a: &dyn Adapter,
    hickory: &dyn Fn(SocketAddr) -> crate::conformance::Plugged<dyn switchyard_common::AsyncResolve>,
) {
    let Some(dns) = Dnsmasq::start(&["web.test,127.0.0.1,::1,300"]) else { return };
    let server = crate::server::TestServer::start(crate::server::ServerOptions::default());
    let client = a.client(Config { async_resolver: Some(hickory(dns.addr)), ..Config::default() });
    let url = format!("http://web.test:{}/hello", server.port());
    for _ in 0..3 {
        client.evict();
        let r = client.send(Req::get(url.clone()));
        let r = r.unwrap_or_else(|e| panic!("{url} via dnsmasq: {e:?}\n{}", dns.log()));
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }
    let wait = Instant::now() + Duration::from_secs(10);
    while dns.queries("web.test", "AAAA") == 0 && Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        (dns.queries("web.test", "A"), dns.queries("web.test", "AAAA")),
        (1, 1),
        "one query per family, then the cache (TTL 300 s):\n{}",
        dns.log()
    );
    let stats = client.stats();
    assert_eq!((stats.dns_lookups, stats.dns_cache_hits), (1, 2));
    let (kind, msg) =
        client.send(Req::get(format!("http://other.test:{}/", server.port()))).expect_err("NXDOMAIN");
    assert_eq!(kind, Failure::Dns, "{msg}");
    assert!(msg.contains("other.test") && msg.contains("NXDOMAIN"), "{msg}");
}

/// The interop suite for an adapter: `interop_suite!(MyAdapter)`, or
/// `interop_suite!(MyAdapter, without_http2)`.
#[macro_export]
macro_rules! interop_suite {
    ($adapter:expr) => {
        mod interop {
            use super::*;
            $crate::interop_suite!(@h2 $adapter, true;
                nginx_basics, nginx_connection_counts, nginx_reload_under_load,
                nginx_keepalive_requests, nginx_keepalive_timeout, nginx_over_unix_sockets, nginx_goaway_churn);
            $crate::interop_suite!(@plain $adapter;
                nginx_low_stream_limit, nginx_prior_knowledge_to_http1, nghttpd_tls_and_h2c, nghttpd_low_stream_limit,
                h2o_tls_and_h2c, squid_forward_proxy, microsocks_socks5, proxy_credentials_against_squid_and_microsocks);
        }
    };
    ($adapter:expr, without_http2) => {
        mod interop {
            use super::*;
            $crate::interop_suite!(@h2 $adapter, false;
                nginx_basics, nginx_connection_counts, nginx_reload_under_load,
                nginx_keepalive_requests, nginx_keepalive_timeout, nginx_over_unix_sockets, nginx_goaway_churn);
            $crate::interop_suite!(@plain $adapter; squid_forward_proxy, microsocks_socks5,
                proxy_credentials_against_squid_and_microsocks);
        }
    };
    (@h2 $adapter:expr, $http2:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::interop::$name(&$adapter, $http2);
            }
        )*
    };
    (@plain $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::interop::$name(&$adapter);
            }
        )*
    };
}
