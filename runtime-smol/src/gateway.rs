//! The gateway on smol (the `gateway` feature): [`Manager::gateway`](crate::Manager::gateway)
//! serves a `smol::net::TcpListener`. hyper runs on smol's executor and
//! async-io's timers; accepted sockets reach hyper through `compat` and a
//! scratch buffer (one copy per read: this project writes no `unsafe`).

use switchyard_async::gateway::{Accepting, HyperIo, Listen};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};

use crate::Smol;

/// A gateway over a [`Manager`](crate::Manager)'s servers: limits, the shutdown
/// grace, an access log; `serve` / `serve_until` a `smol::net::TcpListener`.
pub type Gateway = switchyard_async::gateway::Gateway<Smol>;

pub use switchyard_async::gateway::{listener, shared_listener, AccessRecord, StatusAccess, STATUS_PATH};

/// A listener for the gateway on `addr`, with the system's maximum backlog
/// (`smol::net::TcpListener::bind` asks for 128: a burst of new connections
/// past that waits a second for the SYN retry).
///
/// ```no_run
/// let listener = switchyard_smol::gateway::bind("127.0.0.1:8080".parse().unwrap())?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<smol::net::TcpListener> {
    <Smol as Listen>::bind(addr)
}

impl Listen for Smol {
    type Listener = smol::net::TcpListener;
    type Conn = HyperIo<Compat<smol::net::TcpStream>>;

    fn accept(listener: &Self::Listener) -> Accepting<'_, (Self::Conn, Option<std::net::SocketAddr>)> {
        Box::pin(async move {
            let (stream, peer) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok((HyperIo::new(stream.compat()), Some(peer)))
        })
    }

    fn bind(addr: std::net::SocketAddr) -> std::io::Result<Self::Listener> {
        smol::net::TcpListener::try_from(switchyard_async::gateway::listener(addr)?)
    }

    fn local_port(listener: &Self::Listener) -> Option<u16> {
        listener.local_addr().ok().map(|a| a.port())
    }
}
