//! The gateway on tokio (the `gateway` feature): [`Manager::gateway`](crate::Manager::gateway)
//! serves a `tokio::net::TcpListener`; each accepted connection is hyper's
//! `TokioIo` (reads land in hyper's buffer with no copy).

use hyper_util::rt::TokioIo;
use switchyard_async::gateway::{Accepting, Listen};

use crate::Tokio;

/// A gateway over a [`Manager`](crate::Manager)'s servers: limits, the shutdown
/// grace, an access log; `serve` / `serve_until` a `tokio::net::TcpListener`.
pub type Gateway = switchyard_async::gateway::Gateway<Tokio>;

pub use switchyard_async::gateway::{AccessRecord, STATUS_PATH};

impl Listen for Tokio {
    type Listener = tokio::net::TcpListener;
    type Conn = TokioIo<tokio::net::TcpStream>;

    fn accept(listener: &Self::Listener) -> Accepting<'_, Self::Conn> {
        Box::pin(async move {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok(TokioIo::new(stream))
        })
    }

    fn local_port(listener: &Self::Listener) -> Option<u16> {
        listener.local_addr().ok().map(|a| a.port())
    }
}
