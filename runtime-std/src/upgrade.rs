//! [`Upgraded`]: a connection after `101 Switching Protocols` (WebSocket and
//! other upgrades), taken out of the pool for its one caller, as a blocking
//! `Read` + `Write`.

use std::io::{self, Read, Write};
use std::time::Duration;

use bytes::{Buf, BytesMut};

use crate::stream::Stream;

/// A connection taken over after a `101 Switching Protocols` answer
/// ([`ResponseBody::upgrade`](crate::ResponseBody::upgrade)). Reads give
/// first the bytes that arrived behind the response head, then the socket's;
/// it is a blocking [`Read`] + [`Write`] (TLS included when the connection
/// had it), with no timeouts until you set them. Dropping it closes the
/// connection; the pool has already counted it closed ("exclusive use").
///
/// ```no_run
/// # fn run(client: switchyard_std::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::io::{Read, Write};
/// use switchyard_std::ResponseExt;
/// let response = client
///     .get("http://localhost:8080/chat")
///     .header("connection", "upgrade")
///     .header("upgrade", "websocket")
///     .header("sec-websocket-version", "13")
///     .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
///     .send()?;
/// let mut socket = response.upgrade()?;
/// socket.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
/// socket.write_all(b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58")?; // a masked "Hello"
/// let mut frame = [0u8; 7];
/// socket.read_exact(&mut frame)?;
/// # Ok(()) }
/// ```
pub struct Upgraded {
    stream: Stream,
    /// Bytes read past the response head, handed out before the socket's.
    early: BytesMut,
}

impl std::fmt::Debug for Upgraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgraded").field("early", &self.early.len()).finish_non_exhaustive()
    }
}

impl Upgraded {
    /// The stream, its socket's timeouts cleared (the exchange's were
    /// bounded by the call's deadlines; the new protocol sets its own).
    pub(crate) fn new(stream: Stream, early: BytesMut) -> Upgraded {
        let _ = stream.tcp().set_nonblocking(false);
        let _ = stream.tcp().set_read_timeout(None);
        let _ = stream.tcp().set_write_timeout(None);
        Upgraded { stream, early }
    }

    /// The bytes that arrived behind the response head and are not read yet.
    #[must_use]
    pub fn buffered(&self) -> &[u8] {
        &self.early
    }

    /// Bounds each read (`None`: wait as long as it takes, the default).
    ///
    /// # Errors
    /// The socket refused the option (a zero duration is refused).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.tcp().set_read_timeout(timeout)
    }

    /// Bounds each write (`None`: wait as long as it takes, the default).
    ///
    /// # Errors
    /// The socket refused the option (a zero duration is refused).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.tcp().set_write_timeout(timeout)
    }
}

impl Read for Upgraded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.early.is_empty() {
            let n = buf.len().min(self.early.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.advance(n);
            return Ok(n);
        }
        self.stream.read(buf)
    }
}

impl Write for Upgraded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}
