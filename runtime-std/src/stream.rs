//! A connection's byte stream: a socket (TCP, or a Unix-domain socket), or
//! rustls over one; the TLS handshake; and the idle-connection probe (a
//! non-blocking peek before reuse).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use switchyard_common::tls;
use switchyard_core::http1::Peek;
use switchyard_core::{ConnectError, Host, Protocol, TlsFacts, TlsFailure};

/// A connected socket: TCP, or a Unix-domain stream socket. What a
/// connector hook ([`ClientBuilder::connector`](crate::ClientBuilder::connector))
/// returns on the blocking adapter; TLS and HTTP/1.1 run on top of it.
#[derive(Debug)]
pub enum Sock {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix-domain stream socket (a vsock bridge, `UnixStream::pair`).
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixStream),
}

impl From<TcpStream> for Sock {
    fn from(s: TcpStream) -> Sock {
        Sock::Tcp(s)
    }
}

#[cfg(unix)]
impl From<std::os::unix::net::UnixStream> for Sock {
    fn from(s: std::os::unix::net::UnixStream) -> Sock {
        Sock::Unix(s)
    }
}

/// Calls `$f` on whichever socket `$sock` holds.
macro_rules! on_sock {
    ($sock:expr, $s:ident => $f:expr) => {
        match $sock {
            Sock::Tcp($s) => $f,
            #[cfg(unix)]
            Sock::Unix($s) => $f,
        }
    };
}

impl Sock {
    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        on_sock!(self, s => s.set_read_timeout(d))
    }
    pub(crate) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        on_sock!(self, s => s.set_write_timeout(d))
    }
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        on_sock!(self, s => s.set_nonblocking(on))
    }
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        on_sock!(self, s => s.shutdown(how))
    }
    pub(crate) fn try_clone(&self) -> io::Result<Sock> {
        match self {
            Sock::Tcp(s) => s.try_clone().map(Sock::Tcp),
            #[cfg(unix)]
            Sock::Unix(s) => s.try_clone().map(Sock::Unix),
        }
    }
    /// One byte, left in the socket (`MSG_PEEK`).
    fn peek(&self, one: &mut [u8; 1]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.peek(one),
            // The standard library's Unix `peek` is not stable: socket2's.
            #[cfg(unix)]
            Sock::Unix(s) => {
                let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1];
                socket2::SockRef::from(s).peek(&mut buf)
            }
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        on_sock!(self, s => s.read(buf))
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        on_sock!(self, s => s.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        on_sock!(self, s => s.flush())
    }
}

/// A socket, or TLS over one.
pub(crate) enum Stream {
    Tcp(Sock),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Sock>>),
}

impl Stream {
    /// The TCP socket's own address (`None` over a Unix socket).
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        let sock = match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &t.sock,
        };
        match sock {
            Sock::Tcp(t) => t.local_addr().ok(),
            #[cfg(unix)]
            Sock::Unix(_) => None,
        }
    }

    /// Whether TLS holds records not yet written to the socket.
    pub(crate) fn wants_flush(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.conn.wants_write())
    }

    /// The socket underneath.
    pub(crate) fn tcp(&self) -> &Sock {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            // A peer that closes without close_notify is an error here (rustls
            // reports a possible truncation), as in the async adapters.
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The TLS handshake on `tcp` for `host`, bounded by the socket's timeouts:
/// the negotiated protocol and the verified certificate's facts.
pub(crate) fn handshake(
    mut tcp: Sock,
    config: Arc<rustls::ClientConfig>,
    host: &Host,
    (verification, peer): (switchyard_common::tls::Verification, Option<std::net::IpAddr>),
) -> Result<(Stream, Option<Protocol>, TlsFacts), ConnectError> {
    let name = tls::server_name(host)?;
    let mut conn = rustls::ClientConnection::new(config, name)
        .map_err(|e| ConnectError::Tls { kind: TlsFailure::Protocol, message: e.to_string() })?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| tls::tls_error(&e))?;
    }
    let (alpn, facts) = tls::negotiated(&conn, verification, peer);
    Ok((Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))), alpn, facts))
}

/// Asks an idle connection's socket what it holds, without blocking (the
/// server may have closed it, or sent something, while it sat in the pool);
/// the core judges the answer (`http1::Conn::check`).
pub(crate) fn peek(stream: &mut Stream) -> Peek {
    let tcp = stream.tcp();
    if tcp.set_nonblocking(true).is_err() {
        return Peek::Error;
    }
    let mut one = [0u8; 1];
    let peeked = tcp.peek(&mut one);
    let verdict = match peeked {
        Ok(0) => Peek::Eof,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Peek::Quiet,
        Err(_) => Peek::Error,
        Ok(_) => match stream {
            Stream::Tcp(_) => Peek::Data,
            // TLS records arrived: a late session ticket is harmless; a
            // close_notify or application data is not.
            Stream::Tls(s) => tls_records(s),
        },
    };
    if stream.tcp().set_nonblocking(false).is_err() {
        return Peek::Error;
    }
    verdict
}

fn tls_records(s: &mut rustls::StreamOwned<rustls::ClientConnection, Sock>) -> Peek {
    loop {
        match s.conn.read_tls(&mut s.sock) {
            Ok(0) => return Peek::Eof,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => return Peek::Error,
        }
    }
    match s.conn.process_new_packets() {
        Ok(state) if state.peer_has_closed() => Peek::Eof,
        Ok(state) if state.plaintext_bytes_to_read() > 0 => Peek::Data,
        Ok(_) => Peek::Quiet,
        Err(_) => Peek::Error,
    }
}

/// Reads what has already arrived, without waiting: `Ok(None)` when nothing
/// has, `Ok(Some(0))` when the peer closed, else the bytes now in `scratch`.
/// For TLS, records are taken from the socket and decrypted directly (the
/// stream's own `read` would first try to send buffered records, and fail
/// while the peer is not reading).
pub(crate) fn read_available(stream: &mut Stream, scratch: &mut [u8]) -> io::Result<Option<usize>> {
    stream.tcp().set_nonblocking(true)?;
    let result = match stream {
        Stream::Tcp(s) => match s.read(scratch) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        },
        Stream::Tls(s) => tls_available(s, scratch),
    };
    stream.tcp().set_nonblocking(false)?;
    result
}

fn tls_available(
    s: &mut rustls::StreamOwned<rustls::ClientConnection, Sock>,
    scratch: &mut [u8],
) -> io::Result<Option<usize>> {
    let mut closed = false;
    while s.conn.wants_read() {
        match s.conn.read_tls(&mut s.sock) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {
                s.conn.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    match s.conn.reader().read(scratch) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && closed => Ok(Some(0)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads what arrives, waiting as the socket's read timeout allows. For TLS,
/// records are read from the socket and decrypted directly: the stream's own
/// `read` would first try to send buffered records, and fail on a connection
/// the peer already closed for writing — losing a response it sent first.
pub(crate) fn read_direct(stream: &mut Stream, scratch: &mut [u8]) -> io::Result<usize> {
    let s = match stream {
        Stream::Tcp(s) => return s.read(scratch),
        Stream::Tls(s) => s,
    };
    loop {
        match s.conn.reader().read(scratch) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let _ = s.conn.read_tls(&mut s.sock)?;
        s.conn.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
}

/// Socket timeouts, set only when they change (each set is a system call).
#[derive(Debug, Default)]
pub(crate) struct Timeouts {
    read: Option<Option<Duration>>,
    write: Option<Option<Duration>>,
}

impl Timeouts {
    /// A stream's timeouts as every path hands it over: no receive timeout
    /// (a fresh socket, or the handshakes' reset), the send timeout unknown
    /// (a plain connect leaves its own bound there: see `dial::connected`).
    pub(crate) fn fresh() -> Timeouts {
        Timeouts { read: Some(None), write: None }
    }
    pub(crate) fn read(&mut self, tcp: &Sock, d: Option<Duration>) -> io::Result<()> {
        Self::set(&mut self.read, d, |d| tcp.set_read_timeout(d))
    }
    pub(crate) fn write(&mut self, tcp: &Sock, d: Option<Duration>) -> io::Result<()> {
        Self::set(&mut self.write, d, |d| tcp.set_write_timeout(d))
    }
    /// Sets `d` (at least 1 ms: zero means "none" to the OS) unless it is set.
    fn set(
        slot: &mut Option<Option<Duration>>,
        d: Option<Duration>,
        apply: impl FnOnce(Option<Duration>) -> io::Result<()>,
    ) -> io::Result<()> {
        let d = d.map(|d| d.max(Duration::from_millis(1)));
        if *slot != Some(d) {
            apply(d)?;
            *slot = Some(d);
        }
        Ok(())
    }
}
