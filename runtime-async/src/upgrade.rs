//! [`Upgraded`]: a connection after `101 Switching Protocols` (WebSocket and
//! other upgrades), or a gateway's raw tunnel — a byte stream that no longer
//! speaks HTTP and belongs to its one caller.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::runtime::Io;

/// A connection taken out of the pool for another protocol: after a `101
/// Switching Protocols` answer ([`ResponseBody::upgrade`](crate::ResponseBody::upgrade)),
/// or the far side of a tunnel. Reads give first the bytes that arrived
/// behind the response head, then the socket's. It is an `AsyncRead` +
/// `AsyncWrite` for tokio and for futures-io (smol, async-std); dropping it
/// closes the connection. The pool has already counted it closed (reason
/// "exclusive use"): it never carries another request.
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime>(client: switchyard_async::Client<R>) -> Result<(), Box<dyn std::error::Error>> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// let response = client
///     .get("http://localhost:8080/chat")
///     .header("connection", "upgrade")
///     .header("upgrade", "websocket")
///     .header("sec-websocket-version", "13")
///     .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
///     .send()
///     .await?;
/// let mut socket = response.into_body().upgrade()?;
/// socket.write_all(b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58").await?; // a masked "Hello"
/// let mut frame = [0u8; 7];
/// socket.read_exact(&mut frame).await?;
/// # Ok(()) }
/// ```
pub struct Upgraded {
    io: Io,
    /// Bytes read past the response head, handed out before the socket's.
    early: BytesMut,
}

impl std::fmt::Debug for Upgraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgraded").field("early", &self.early.len()).finish_non_exhaustive()
    }
}

impl Upgraded {
    pub(crate) fn new(io: Io, early: BytesMut) -> Upgraded {
        Upgraded { io, early }
    }

    /// The bytes that arrived behind the response head and are not read yet.
    #[must_use]
    pub fn buffered(&self) -> &[u8] {
        &self.early
    }

    /// The stream underneath and the bytes still buffered ahead of it.
    #[must_use]
    pub fn into_parts(self) -> (Io, BytesMut) {
        (self.io, self.early)
    }

    fn poll_into(&mut self, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
        if !self.early.is_empty() {
            let n = out.len().min(self.early.len());
            out[..n].copy_from_slice(&self.early[..n]);
            self.early.advance(n);
            return Poll::Ready(Ok(n));
        }
        let mut buf = ReadBuf::new(out);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.early.is_empty() {
            let n = buf.remaining().min(this.early.len());
            buf.put_slice(&this.early[..n]);
            this.early.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl futures_io::AsyncRead for Upgraded {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_into(cx, buf)
    }
}

impl futures_io::AsyncWrite for Upgraded {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
