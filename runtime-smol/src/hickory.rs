//! hickory-resolver on async-io: the runtime provider hickory needs (UDP and TCP
//! sockets, timers, a spawner), with no tokio. Background work (hickory's
//! connection tasks) goes to smol's global executor.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hickory_resolver::net::runtime::{DnsTcpStream, DnsUdpSocket, RuntimeProvider, Spawn, Time};
use smol::{Async, Timer};

/// hickory-resolver on smol: A and AAAA asked separately (the race starts on
/// the first useful answer, RFC 8305 §3), TTLs into the client's DNS cache,
/// hickory's own cache off. Needs the `hickory` feature.
///
/// ```no_run
/// # fn main() -> Result<(), switchyard_smol::Error> {
/// let client = switchyard_smol::Client::builder()
///     .async_resolver(switchyard_smol::HickoryResolver::system()?)
///     .build()?;
/// # drop(client); Ok(()) }
/// ```
pub type HickoryResolver = switchyard_async::switchyard_common::hickory::HickoryResolver<SmolProvider>;

/// What [`HickoryResolver::https_records`] finds: an origin's HTTPS records
/// (RFC 9460), for the core's `service_binding::endpoints`.
pub use switchyard_async::switchyard_common::hickory::HttpsRecords;

/// hickory's runtime provider for smol / async-io (see [`HickoryResolver`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolProvider;

/// Spawns hickory's background tasks on smol's global executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolSpawner;

impl Spawn for SmolSpawner {
    fn spawn_bg(&mut self, future: impl Future<Output = ()> + Send + 'static) {
        smol::spawn(future).detach();
    }
}

/// async-io's timers for hickory.
#[derive(Clone, Copy, Debug)]
pub struct SmolTime;

#[async_trait::async_trait]
impl Time for SmolTime {
    async fn delay_for(duration: Duration) {
        Timer::after(duration).await;
    }

    async fn timeout<F: 'static + Future + Send>(
        duration: Duration,
        future: F,
    ) -> Result<F::Output, io::Error> {
        smol::future::or(async { Ok(future.await) }, async {
            Timer::after(duration).await;
            Err(io::Error::new(io::ErrorKind::TimedOut, "DNS operation timed out"))
        })
        .await
    }
}

/// A UDP socket on async-io.
#[derive(Debug)]
pub struct SmolUdp(Async<UdpSocket>);

impl DnsUdpSocket for SmolUdp {
    type Time = SmolTime;

    fn poll_recv_from(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<(usize, SocketAddr)>> {
        loop {
            match self.0.get_ref().recv_from(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
            std::task::ready!(self.0.poll_readable(cx))?;
        }
    }

    fn poll_send_to(&self, cx: &mut Context<'_>, buf: &[u8], target: SocketAddr) -> Poll<io::Result<usize>> {
        loop {
            match self.0.get_ref().send_to(buf, target) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
            std::task::ready!(self.0.poll_writable(cx))?;
        }
    }
}

/// A TCP stream on async-io.
#[derive(Debug)]
pub struct SmolTcp(Async<TcpStream>);

impl DnsTcpStream for SmolTcp {
    type Time = SmolTime;
}

impl smol::io::AsyncRead for SmolTcp {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl smol::io::AsyncWrite for SmolTcp {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

impl RuntimeProvider for SmolProvider {
    type Handle = SmolSpawner;
    type Timer = SmolTime;
    type Udp = SmolUdp;
    type Tcp = SmolTcp;

    fn create_handle(&self) -> SmolSpawner {
        SmolSpawner
    }

    /// `bind_addr` (a source address for the query) is not supported: the
    /// system picks one.
    fn connect_tcp(
        &self,
        server: SocketAddr,
        _bind_addr: Option<SocketAddr>,
        timeout: Option<Duration>,
    ) -> Pin<Box<dyn Send + Future<Output = Result<SmolTcp, io::Error>>>> {
        Box::pin(async move {
            let wait = timeout.unwrap_or(Duration::from_secs(5));
            let stream = SmolTime::timeout(wait, Async::<TcpStream>::connect(server)).await??;
            stream.get_ref().set_nodelay(true)?;
            Ok(SmolTcp(stream))
        })
    }

    fn bind_udp(
        &self,
        local: SocketAddr,
        _server: SocketAddr,
    ) -> Pin<Box<dyn Send + Future<Output = Result<SmolUdp, io::Error>>>> {
        Box::pin(async move { Ok(SmolUdp(Async::<UdpSocket>::bind(local)?)) })
    }
}
