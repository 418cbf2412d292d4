//! The gateway on tokio (the `gateway` feature): [`Manager::gateway`](crate::Manager::gateway)
//! serves a `tokio::net::TcpListener`; each accepted connection is hyper's
//! `TokioIo` (reads land in hyper's buffer with no copy).

use hyper_util::rt::TokioIo;
use switchyard_async::gateway::{Accepting, Listen};

use crate::Tokio;

/// A gateway over a [`Manager`](crate::Manager)'s servers: limits, the shutdown
/// grace, an access log; `serve` / `serve_until` a `tokio::net::TcpListener`.
pub type Gateway = switchyard_async::gateway::Gateway<Tokio>;

pub use switchyard_async::gateway::{listener, shared_listener, AccessRecord, StatusAccess, STATUS_PATH};

/// A listener for the gateway on `addr`, with the system's maximum backlog
/// (`tokio::net::TcpListener::bind` asks for 128: a burst of new connections
/// past that waits a second for the SYN retry). Call it inside the runtime.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// let listener = switchyard_tokio::gateway::bind("127.0.0.1:8080".parse().unwrap())?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    <Tokio as Listen>::bind(addr)
}

impl Listen for Tokio {
    type Listener = tokio::net::TcpListener;
    type Conn = TokioIo<tokio::net::TcpStream>;

    fn accept(listener: &Self::Listener) -> Accepting<'_, (Self::Conn, Option<std::net::SocketAddr>)> {
        Box::pin(async move {
            let (stream, peer) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok((TokioIo::new(stream), Some(peer)))
        })
    }

    fn bind(addr: std::net::SocketAddr) -> std::io::Result<Self::Listener> {
        tokio::net::TcpListener::from_std(switchyard_async::gateway::listener(addr)?)
    }

    fn local_port(listener: &Self::Listener) -> Option<u16> {
        listener.local_addr().ok().map(|a| a.port())
    }
}
