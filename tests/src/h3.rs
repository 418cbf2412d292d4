//! HTTP/3 against a real server: aioquic's (PyPI `aioquic`), started by the
//! test on loopback UDP with a certificate from the test CA, and a blocking
//! pump of `switchyard_common::h3::H3Conn` over a `std::net::UdpSocket` — the
//! loop any adapter runs (send what `poll_transmit` gives, wait for a datagram
//! or `poll_timeout`, feed it). A missing aioquic skips with a notice, and
//! fails with `SWITCHYARD_INTEROP=require` (CI installs it).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use switchyard_common::h3::{H3Config, H3Conn, H3Event, H3Failure, ResponseEvent};

use crate::certs::TestCa;
use crate::interop::required;

/// A server process and its scratch directory (its certificate and key,
/// made for the run by a CA of its own), both gone when dropped.
struct Process {
    child: Option<Child>,
    ca: TestCa,
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Process {
    /// The scratch directory, with a certificate for `localhost`, 127.0.0.1
    /// and `h3.test` and its key written there.
    fn prepare(name: &str) -> Process {
        let ca = TestCa::new();
        let leaf = ca.leaf(&["localhost", "127.0.0.1", "h3.test"]);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-{name}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, &leaf.chain_pem).expect("write the certificate");
        std::fs::write(&key, &leaf.key_pem).expect("write the key");
        Process { child: None, ca, dir, cert, key }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP/3 server on 127.0.0.1 for the tests: aioquic's
/// ([`H3Server::aioquic`]) or ngtcp2's ([`H3Server::ngtcp2`]); killed when dropped.
pub struct H3Server {
    process: Process,
    /// Its UDP port.
    pub port: u16,
}

impl H3Server {
    /// Starts the server, or `None` after a notice when python3 or aioquic
    /// is missing (a panic when required).
    #[allow(clippy::print_stderr)] // a skip is never silent
    #[must_use]
    pub fn aioquic() -> Option<H3Server> {
        Self::aioquic_with(&[])
    }

    #[allow(clippy::print_stderr)] // a skip is never silent
    fn aioquic_with(args: &[String]) -> Option<H3Server> {
        let present = Command::new("python3")
            .args(["-c", "import aioquic"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !present {
            assert!(
                !required(),
                "aioquic is not installed, and SWITCHYARD_INTEROP=require: pip install aioquic"
            );
            eprintln!("interop: skipping, aioquic is not installed (pip install aioquic)");
            return None;
        }
        let mut process = Process::prepare("aioquic");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/h3_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&process.cert)
            .arg(&process.key)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the aioquic server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("its first line");
        let port = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the aioquic server did not start: {line:?}"));
        process.child = Some(child);
        Some(H3Server { process, port })
    }

    /// ngtcp2's example HTTP/3 server (`gtlsserver`, Debian's
    /// `ngtcp2-server`: ngtcp2 and nghttp3 over GnuTLS) with `extra` options
    /// (`--max-streams-bidi=4`, `--tx-loss=0.1`, …) serving `files` (name,
    /// contents) from a directory made for the run, or `None` after a notice
    /// when it is not installed (a panic when required). Returns once a QUIC
    /// handshake with it succeeded.
    #[must_use]
    pub fn ngtcp2(extra: &[&str], files: &[(&str, &[u8])]) -> Option<H3Server> {
        let program = crate::interop::need("gtlsserver", "ngtcp2-server")?;
        let mut process = Process::prepare("ngtcp2");
        let htdocs = process.dir.join("htdocs");
        std::fs::create_dir_all(&htdocs).expect("the served directory");
        for (name, contents) in files {
            std::fs::write(htdocs.join(name), contents).expect("a served file");
        }
        let port =
            UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).expect("a free UDP port").port();
        let child = Command::new(program)
            .args(["-q", "-d"])
            .arg(&htdocs)
            .args(extra)
            .arg("127.0.0.1")
            .arg(port.to_string())
            .arg(&process.key)
            .arg(&process.cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gtlsserver");
        process.child = Some(child);
        let server = H3Server { process, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if Pump::connect(server.addr(), "localhost", &server.tls(), Duration::from_millis(500)).is_ok() {
                return Some(server);
            }
            assert!(Instant::now() < deadline, "gtlsserver did not answer a QUIC handshake on port {port}");
        }
    }

    /// aioquic's server on this UDP port (beside a TCP server on the same
    /// port number, for the QUIC-or-TCP race).
    #[must_use]
    pub fn aioquic_on(port: u16) -> Option<H3Server> {
        Self::aioquic_with(&[port.to_string()])
    }

    /// A certificate for `names` from the CA this server's own comes from
    /// (for a TCP server beside it, trusted by the same clients).
    #[must_use]
    pub fn leaf(&self, names: &[&str]) -> crate::certs::Leaf {
        self.process.ca.leaf(names)
    }

    /// The CA certificate (PEM) this server's certificate chains to.
    #[must_use]
    pub fn ca_pem(&self) -> String {
        self.process.ca.cert_pem.clone()
    }

    /// The CA certificate (DER) this server's certificate chains to.
    #[must_use]
    pub fn ca_cert(&self) -> Vec<u8> {
        self.process.ca.cert.clone()
    }

    /// The server's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A TLS configuration that trusts the server's CA.
    #[must_use]
    pub fn tls(&self) -> rustls::ClientConfig {
        trusting(&self.process.ca)
    }
}

/// TLS 1.3 with the test CA as the only root.
fn trusting(ca: &TestCa) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.clone().into()).expect("the test CA");
    rustls::ClientConfig::builder_with_provider(switchyard_common::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// One response as the pump collected it.
#[derive(Debug, Default)]
pub struct Answer {
    /// The final head.
    pub head: Option<http::Response<()>>,
    /// The body.
    pub body: Vec<u8>,
    /// Trailers, if any.
    pub trailers: Option<http::HeaderMap>,
    /// The failure, if it failed.
    pub failure: Option<H3Failure>,
    /// Whether `End` came.
    pub complete: bool,
}

/// A blocking HTTP/3 connection: one UDP socket and an [`H3Conn`].
#[derive(Debug)]
pub struct Pump {
    /// The connection.
    pub conn: H3Conn,
    socket: UdpSocket,
    /// Every event seen, in order (for assertions on the order).
    pub log: Vec<String>,
}

impl Pump {
    /// Connects to `addr` as `name`, pumping until the handshake is over or
    /// `within` passes.
    ///
    /// # Errors
    /// The connection could not start, failed, or was not up in time: the
    /// reason in words.
    pub fn connect(
        addr: SocketAddr,
        name: &str,
        tls: &rustls::ClientConfig,
        within: Duration,
    ) -> Result<Pump, String> {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        socket.connect(addr).map_err(|e| e.to_string())?;
        let conn = H3Conn::connect(Instant::now(), addr, name, tls, H3Config::default())
            .map_err(|e| e.to_string())?;
        let mut pump = Pump { conn, socket, log: Vec::new() };
        let deadline = Instant::now() + within;
        while !pump.conn.is_connected() {
            if let Some(closed) = pump.log.iter().find(|l| l.starts_with("closed")) {
                return Err(closed.clone());
            }
            if Instant::now() >= deadline {
                return Err("no handshake in time".to_owned());
            }
            pump.turn(deadline, &mut |_| {});
        }
        Ok(pump)
    }

    /// One round: everything to send sent, one datagram or timeout waited
    /// for (until `deadline` at most), every event handed to `on_event`.
    pub fn turn(&mut self, deadline: Instant, on_event: &mut dyn FnMut(H3Event)) {
        let mut buf = Vec::with_capacity(1500);
        while let Some(n) = self.conn.poll_transmit(Instant::now(), &mut buf) {
            let _ = self.socket.send(&buf[..n]);
        }
        self.drain(on_event);
        let now = Instant::now();
        let until = self.conn.poll_timeout().map_or(deadline, |t| t.min(deadline));
        let wait = until.saturating_duration_since(now).max(Duration::from_millis(1));
        self.socket.set_read_timeout(Some(wait)).expect("a read timeout");
        let mut datagram = [0u8; 65_536];
        match self.socket.recv(&mut datagram) {
            Ok(n) => {
                self.conn.handle_datagram(Instant::now(), self.conn.remote(), BytesMut::from(&datagram[..n]))
            }
            Err(_) => self.conn.handle_timeout(Instant::now()),
        }
        self.drain(on_event);
    }

    fn drain(&mut self, on_event: &mut dyn FnMut(H3Event)) {
        while let Some(event) = self.conn.poll_event() {
            self.log.push(match &event {
                H3Event::Connected => "connected".to_owned(),
                H3Event::Settings(_) => "settings".to_owned(),
                H3Event::Response { stream, event } => format!("{stream}: {}", describe(event)),
                H3Event::Failed { stream, failure } => format!("{stream}: failed: {failure}"),
                H3Event::GoAway(id) => format!("goaway {id}"),
                H3Event::Closed(why) => format!("closed: {why}"),
                H3Event::StreamsAvailable => "streams available".to_owned(),
                H3Event::Writable { stream } => format!("{stream}: writable"),
            });
            // What the owner takes it has consumed: the stream reads on.
            let taken = match &event {
                H3Event::Response { stream, event: ResponseEvent::Data(d) } => Some((*stream, d.len())),
                _ => None,
            };
            on_event(event);
            if let Some((stream, n)) = taken {
                self.conn.consumed(Instant::now(), stream, n);
            }
        }
    }

    /// Sends each request (parts and whole body) at once on this connection
    /// and pumps until every one is answered or failed, or `within` passes.
    ///
    /// # Panics
    /// A request could not open.
    pub fn fetch_all(
        &mut self,
        requests: Vec<(http::request::Parts, Bytes)>,
        within: Duration,
    ) -> Vec<Answer> {
        let ids: Vec<u64> = requests
            .iter()
            .map(|(parts, body)| self.conn.open(Instant::now(), parts, body.clone()).expect("open a request"))
            .collect();
        let mut answers: Vec<Answer> = ids.iter().map(|_| Answer::default()).collect();
        let deadline = Instant::now() + within;
        let done = |a: &[Answer]| a.iter().all(|a| a.complete || a.failure.is_some());
        while !done(&answers) && Instant::now() < deadline {
            let ids = ids.clone();
            let answers_ref = &mut answers;
            self.turn(deadline, &mut |event| {
                let stream = match &event {
                    H3Event::Response { stream, .. } | H3Event::Failed { stream, .. } => *stream,
                    _ => return,
                };
                let Some(i) = ids.iter().position(|id| *id == stream) else { return };
                let a = &mut answers_ref[i];
                match event {
                    H3Event::Response { event: ResponseEvent::Head(h), .. } => a.head = Some(h),
                    H3Event::Response { event: ResponseEvent::Data(d), .. } => a.body.extend_from_slice(&d),
                    H3Event::Response { event: ResponseEvent::Trailers(t), .. } => a.trailers = Some(t),
                    H3Event::Response { event: ResponseEvent::End, .. } => a.complete = true,
                    H3Event::Failed { failure, .. } => a.failure = Some(failure),
                    _ => {}
                }
            });
        }
        answers
    }
}

fn describe(event: &ResponseEvent) -> String {
    match event {
        ResponseEvent::Head(h) => format!("head {}", h.status().as_u16()),
        ResponseEvent::Data(d) => format!("data {}", d.len()),
        ResponseEvent::Trailers(t) => format!("trailers {}", t.len()),
        ResponseEvent::End => "end".to_owned(),
    }
}

/// A request's parts for `method` and `url`.
#[must_use]
pub fn request(method: &str, url: &str) -> http::request::Parts {
    http::Request::builder().method(method).uri(url).body(()).expect("a request").into_parts().0
}
