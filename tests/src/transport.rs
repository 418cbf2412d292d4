//! Transports for the tests: a firecracker-style vsock bridge on a Unix
//! socket (the host side of a guest's vsock: `CONNECT <port>\n` picks the
//! guest port, `OK <n>\n` accepts, then bytes flow), and a TCP listener that
//! reports each connection's peer address (for `local_address`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

/// The host side of a vsock device: a Unix socket that forwards `CONNECT
/// <port>` to the TCP server the port maps to. Ports with no mapping are
/// refused the way firecracker refuses them (the socket closes, no `OK`).
pub struct VsockBridge {
    /// The Unix socket's path.
    pub path: PathBuf,
    /// Every handshake line received, in order (`CONNECT 52`).
    handshakes: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for VsockBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VsockBridge").field("path", &self.path).finish_non_exhaustive()
    }
}

impl VsockBridge {
    /// A bridge at `path` where guest port `port` is the TCP server `target`.
    ///
    /// # Panics
    /// When the socket cannot be bound.
    #[must_use]
    pub fn start(path: &Path, port: u32, target: SocketAddr) -> VsockBridge {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("bind the vsock bridge");
        let handshakes: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = Arc::clone(&handshakes);
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let seen = Arc::clone(&seen);
                thread::spawn(move || {
                    let _ = bridge(client, port, target, &seen);
                });
            }
        });
        VsockBridge { path: path.to_owned(), handshakes }
    }

    /// The handshake lines so far.
    ///
    /// # Panics
    /// When the lock is poisoned.
    #[must_use]
    pub fn handshakes(&self) -> Vec<String> {
        self.handshakes.lock().expect("lock").clone()
    }
}

impl Drop for VsockBridge {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn bridge(
    client: UnixStream,
    port: u32,
    target: SocketAddr,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_owned();
    seen.lock().map(|mut s| s.push(line.clone())).ok();
    if line != format!("CONNECT {port}") {
        return Ok(()); // refused: closed without an answer
    }
    let upstream = TcpStream::connect(target)?;
    let mut client = client;
    // Firecracker answers with the host-side port it allocated.
    client.write_all(b"OK 1073741824\n")?;
    // Nothing past the line may be lost: the reader's buffer goes first.
    let buffered = reader.buffer().to_vec();
    let mut up = upstream.try_clone()?;
    up.write_all(&buffered)?;
    let (mut from_client, mut to_client) = (reader.into_inner(), upstream);
    let back = client.try_clone()?;
    let t = thread::spawn(move || {
        let mut back = back;
        let _ = std::io::copy(&mut to_client, &mut back);
        let _ = back.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut from_client, &mut up);
    let _ = up.shutdown(std::net::Shutdown::Write);
    let _ = t.join();
    Ok(())
}

/// A TCP listener answering every request with `200 ok` (keep-alive) and
/// recording each connection's peer address.
pub struct PeerRecorder {
    /// Where it listens.
    pub addr: SocketAddr,
    peers: Arc<Mutex<Vec<SocketAddr>>>,
}

impl std::fmt::Debug for PeerRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerRecorder").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl PeerRecorder {
    /// Listens on `ip:0`.
    ///
    /// # Panics
    /// When it cannot bind.
    #[must_use]
    pub fn start(ip: std::net::IpAddr) -> PeerRecorder {
        let listener = TcpListener::bind((ip, 0)).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let peers: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let p = Arc::clone(&peers);
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                if let Ok(peer) = conn.peer_addr() {
                    p.lock().map(|mut v| v.push(peer)).ok();
                }
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut head = Vec::new();
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                        while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                            head.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if conn.write_all(reply).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        PeerRecorder { addr, peers }
    }

    /// The peer address of each connection so far.
    ///
    /// # Panics
    /// When the lock is poisoned.
    #[must_use]
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.peers.lock().expect("lock").clone()
    }
}
