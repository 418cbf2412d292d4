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

pub use switchyard_async::gateway::{AccessRecord, STATUS_PATH};

impl Listen for Smol {
    type Listener = smol::net::TcpListener;
    type Conn = HyperIo<Compat<smol::net::TcpStream>>;

    fn accept(listener: &Self::Listener) -> Accepting<'_, Self::Conn> {
        Box::pin(async move {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            Ok(HyperIo::new(stream.compat()))
        })
    }

    fn local_port(listener: &Self::Listener) -> Option<u16> {
        listener.local_addr().ok().map(|a| a.port())
    }
}
