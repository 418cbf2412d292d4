//! The servers, each in its own process so it can be pinned and never competes
//! with the client for a runtime: a minimal single-thread tokio HTTP/1.1 server
//! writing a fixed response (keep-alive, or `Connection: close`), h2o for
//! HTTP/2 (h2c prior knowledge, one thread), and an `h2`-crate server as the
//! HTTP/2 fallback when h2o is not installed (it caps lower, so the report says
//! which one ran).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The body every server answers with.
pub const BODY: &[u8] = b"Hello, World!";

/// The fixed HTTP/1.1 response.
pub fn response(close: bool) -> Vec<u8> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n",
        BODY.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    [head.as_bytes(), BODY].concat()
}

/// How late [`Kind::Http1Slow`] answers.
pub const SLOW: Duration = Duration::from_millis(300);

/// Scenario 7's large body: 64 MiB.
pub const LARGE: usize = 64 << 20;

/// Scenario 7's medium body: 1 MiB.
pub const MEDIUM: usize = 1 << 20;

/// Scenario 7's response head for a body of `size` bytes.
pub fn sized_head(size: usize) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n")
}

/// Scenario 7's response: `size` bytes of body.
pub fn sized_response(size: usize) -> Vec<u8> {
    let mut r = sized_head(size).into_bytes();
    r.resize(r.len() + size, b'x');
    r
}

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// HTTP/1.1, keep-alive, every body this many bytes.
    Http1Sized(usize),
    /// HTTP/1.1, keep-alive, each answer [`SLOW`] late (so concurrent calls
    /// need a connection each).
    Http1Slow,
    /// HTTP/1.1, keep-alive.
    Http1,
    /// HTTP/1.1, every response `Connection: close`.
    Http1Close,
    /// HTTP/2 cleartext, prior knowledge.
    H2c,
}

/// The TLS setup for scenario 3 over TLS: a test CA, and a leaf for [`TLS_HOST`].
pub struct Tls {
    /// The CA certificate (DER), trusted by every client.
    pub ca: Vec<u8>,
    leaf: switchyard_tests::certs::Leaf,
}

/// The name the TLS server's certificate is for (clients map it to 127.0.0.1).
pub const TLS_HOST: &str = "h2.test";

impl Tls {
    /// The leaf's certificate chain and key as PEM files in `dir`: (cert, key).
    pub fn pem_files(&self, dir: &std::path::Path) -> Option<(PathBuf, PathBuf)> {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, &self.leaf.chain_pem).ok()?;
        std::fs::write(&key, &self.leaf.key_pem).ok()?;
        Some((cert, key))
    }

    /// A fresh CA and leaf.
    pub fn new() -> Tls {
        let ca = switchyard_tests::certs::TestCa::new();
        Tls { leaf: ca.leaf(&[TLS_HOST]), ca: ca.cert }
    }
}

/// A running server process; killed when dropped.
pub struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// What serves (for the report).
    pub name: &'static str,
    dir: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

fn wait_for(port: u16) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// `taskset -c CORE` in front of a command, when pinning.
pub fn command(program: &std::path::Path, pin: Option<usize>) -> Command {
    match pin {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(core.to_string()).arg(program);
            c
        }
        None => Command::new(program),
    }
}

impl Server {
    /// Starts a server of this kind, pinned to `pin` if given.
    pub fn start(kind: Kind, pin: Option<usize>) -> Server {
        if kind == Kind::H2c {
            if let Some(s) = Self::h2o(pin) {
                return s;
            }
        }
        let port = free_port();
        let exe = std::env::current_exe().expect("own path");
        let mut cmd = command(&exe, pin);
        let what = match kind {
            Kind::Http1 => "serve-h1",
            Kind::Http1Close => "serve-h1-close",
            Kind::Http1Sized(_) => "serve-h1-sized",
            Kind::Http1Slow => "serve-h1-slow",
            Kind::H2c => "serve-h2",
        };
        cmd.arg(what).arg(port.to_string()).stdout(Stdio::null());
        if let Kind::Http1Sized(size) = kind {
            cmd.arg(size.to_string());
        }
        let child = cmd.spawn().expect("server process");
        assert!(wait_for(port), "the {what} server did not start");
        let name = match kind {
            Kind::H2c => "h2 crate server (h2o not installed)",
            _ => "single-thread tokio server",
        };
        Server { child, port, name, dir: None }
    }

    /// h2o with TLS (ALPN h2), one thread, for [`TLS_HOST`]; `None` without h2o.
    pub fn h2o_tls(tls: &Tls) -> Option<Server> {
        Self::h2o_with(None, Some(tls), false)
    }

    /// [`Server::h2o_tls`], also serving `/large.bin` ([`LARGE`] bytes) and
    /// `/medium.bin` ([`MEDIUM`]) for scenario 7 (HTTP/1.1 or HTTP/2 by ALPN).
    pub fn h2o_tls_files(tls: &Tls) -> Option<Server> {
        Self::h2o_with(None, Some(tls), true)
    }

    /// The TLS upload server ([`serve_tls`], this program's `serve-tls PORT
    /// DIR`) with [`TLS_HOST`]'s certificate, for scenario 7's TLS uploads.
    pub fn tls_uploads(tls: &Tls) -> Server {
        let dir = scratch("tls-up");
        std::fs::write(dir.join("cert.pem"), &tls.leaf.chain_pem).expect("cert.pem");
        std::fs::write(dir.join("key.pem"), &tls.leaf.key_pem).expect("key.pem");
        let port = free_port();
        let exe = std::env::current_exe().expect("own path");
        let child = Command::new(exe)
            .arg("serve-tls")
            .arg(port.to_string())
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("server process");
        assert!(wait_for(port), "the serve-tls server did not start");
        Server {
            child,
            port,
            name: "single-thread tokio server, TLS (ALPN picks HTTP/1.1 or h2 per row)",
            dir: Some(dir),
        }
    }

    /// h2o, one thread, h2c prior knowledge on 127.0.0.1, serving `/` as BODY.
    fn h2o(pin: Option<usize>) -> Option<Server> {
        Self::h2o_with(pin, None, false)
    }

    fn h2o_with(pin: Option<usize>, tls: Option<&Tls>, files: bool) -> Option<Server> {
        let h2o = which("h2o")?;
        let dir = scratch(if tls.is_some() { "h2o-tls" } else { "h2o" });
        let port = free_port();
        h2o_config(&dir, port, tls, files).ok()?;
        let child = command(&h2o, pin)
            .arg("-c")
            .arg(dir.join("h2o.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let name = match (tls.is_some(), files) {
            (true, false) => "h2o (1 thread, TLS, ALPN h2)",
            (true, true) => "h2o (1 thread, TLS, files; ALPN picks HTTP/1.1 or h2 per row)",
            _ => "h2o (1 thread, h2c)",
        };
        let mut server = Server { child, port, name, dir: Some(dir) };
        if !wait_for(port) {
            let _ = server.child.kill();
            server.dir.take();
            return None;
        }
        Some(server)
    }
}

/// Writes h2o's configuration and its files into `dir`: one thread on
/// 127.0.0.1:`port` (TLS with [`TLS_HOST`]'s certificate when `tls`), serving
/// `/` as [`BODY`] (and scenario 7's files when `files`).
fn h2o_config(dir: &std::path::Path, port: u16, tls: Option<&Tls>, files: bool) -> std::io::Result<()> {
    std::fs::write(dir.join("index.html"), BODY)?;
    if files {
        std::fs::write(dir.join("large.bin"), vec![b'x'; LARGE])?;
        std::fs::write(dir.join("medium.bin"), vec![b'x'; MEDIUM])?;
    }
    let ssl = match tls {
        Some(t) => {
            std::fs::write(dir.join("cert.pem"), &t.leaf.chain_pem)?;
            std::fs::write(dir.join("key.pem"), &t.leaf.key_pem)?;
            format!(
                "  ssl:\n    certificate-file: {d}/cert.pem\n    key-file: {d}/key.pem\n",
                d = dir.display()
            )
        }
        None => String::new(),
    };
    let conf = format!(
        "listen:\n  host: 127.0.0.1\n  port: {port}\n{ssl}num-threads: 1\nuser: root\n\
         pid-file: {d}/h2o.pid\nerror-log: {d}/error.log\n\
         hosts:\n  default:\n    paths:\n      \"/\":\n        file.dir: {d}\n",
        d = dir.display()
    );
    std::fs::write(dir.join("h2o.conf"), conf)
}

/// This program's `serve-h2o PORT [CA_FILE]`: becomes scenario 3's h2o (one
/// thread) on `port`, the server the harness uses, for the pinned scripts
/// (`bench/vs.sh`): h2c, or with `ca` TLS for [`TLS_HOST`] under a new test CA
/// whose certificate (DER) it writes there (the clients' `SWITCHYARD_BENCH_CA`).
/// Returns only when h2o is missing or cannot start.
pub fn serve_h2o(port: u16, ca: Option<&std::path::Path>) {
    use std::os::unix::process::CommandExt;
    let Some(h2o) = which("h2o") else {
        eprintln!("serve-h2o: h2o is not installed");
        std::process::exit(2);
    };
    let dir = scratch("h2o-serve");
    let tls = ca.map(|path| {
        let tls = Tls::new();
        std::fs::write(path, &tls.ca).expect("the CA file");
        tls
    });
    h2o_config(&dir, port, tls.as_ref(), false).expect("h2o configuration");
    let err = Command::new(h2o).arg("-c").arg(dir.join("h2o.conf")).exec();
    eprintln!("serve-h2o: {err}");
    std::process::exit(2);
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(program))
        .find(|p| p.is_file())
}

/// The HTTP/1.1 server process: answer every request head with the response.
pub fn serve_h1(port: u16, close: bool) {
    serve_h1_with(port, response(close), close, None);
}

/// The HTTP/1.1 server process, answering every request with `reply`
/// (`delay` after reading it, if given).
pub fn serve_h1_with(port: u16, reply: Vec<u8>, close: bool, delay: Option<Duration>) {
    let reply = bytes::Bytes::from(reply);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            let Ok((s, _)) = listener.accept().await else { continue };
            let _ = s.set_nodelay(true);
            tokio::spawn(h1_connection(s, reply.clone(), close, delay));
        }
    });
}

/// One HTTP/1.1 connection: each complete request head is answered with
/// `reply` after its body (by `Content-Length`) is read and dropped.
async fn h1_connection<S>(mut s: S, reply: bytes::Bytes, close: bool, delay: Option<Duration>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    let mut have = 0;
    loop {
        match s.read(&mut buf[have..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => have += n,
        }
        // Answer each complete head (after its body, which is read and
        // dropped); keep any partial one.
        while let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
            let mut skip = content_length(&buf[..end]);
            let here = skip.min(have - end - 4);
            skip -= here;
            buf.copy_within(end + 4 + here..have, 0);
            have -= end + 4 + here;
            while skip > 0 {
                match s.read(&mut buf[..skip.min(64 * 1024)]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => skip -= n,
                }
            }
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            if s.write_all(&reply).await.is_err() || s.flush().await.is_err() || close {
                return;
            }
        }
    }
}

/// The upload server for scenario 7's TLS rows, one tokio thread: TLS with
/// ALPN `h2` or `http/1.1` (certificate and key from `dir`'s `cert.pem` and
/// `key.pem`). Every request body is read and dropped, and answered with
/// [`BODY`]; HTTP/2 grants switchyard's default windows (16 / 32 MiB) so the
/// server's window is never the limit.
pub fn serve_tls(port: u16, dir: &std::path::Path) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .expect("cert.pem")
        .collect::<Result<_, _>>()
        .expect("cert.pem");
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).expect("key.pem");
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("tls config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let reply = bytes::Bytes::from(response(false));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            let Ok((s, _)) = listener.accept().await else { continue };
            let _ = s.set_nodelay(true);
            let (acceptor, reply) = (acceptor.clone(), reply.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    h2_connection(tls, Some((16 << 20, 32 << 20))).await;
                } else {
                    h1_connection(tls, reply, false, None).await;
                }
            });
        }
    });
}

/// A request head's `Content-Length` (0 without one).
fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The HTTP/2 fallback server process (h2 crate, h2c prior knowledge).
pub fn serve_h2(port: u16) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            let Ok((s, _)) = listener.accept().await else { continue };
            let _ = s.set_nodelay(true);
            tokio::spawn(h2_connection(s, None));
        }
    });
}

/// One HTTP/2 server connection (the `h2` crate): every request's body is
/// read and dropped, then answered with [`BODY`]. `windows` (stream,
/// connection) replace h2's 65,535-byte defaults when given.
async fn h2_connection<S>(s: S, windows: Option<(u32, u32)>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = h2::server::Builder::new();
    if let Some((stream, connection)) = windows {
        builder.initial_window_size(stream).initial_connection_window_size(connection);
    }
    let Ok(mut conn) = builder.handshake::<_, bytes::Bytes>(s).await else { return };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let mut body = req.into_body();
        let ended = body.is_end_stream();
        let answer = async move {
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            let response = http::Response::builder().status(200).body(()).expect("response");
            if let Ok(mut send) = respond.send_response(response, false) {
                let _ = send.send_data(bytes::Bytes::from_static(BODY), true);
            }
        };
        // A body still coming is read on a task of its own while this loop
        // drives the connection.
        if ended {
            answer.await;
        } else {
            tokio::spawn(answer);
        }
    }
}

/// Whether `program` is on the PATH.
pub fn has(program: &str) -> bool {
    which(program).is_some()
}
