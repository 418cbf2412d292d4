//! The Manager on an async runtime: warm connections to a declared set of
//! servers (see [`switchyard_common::manager`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use switchyard_common::engine::EngineHost;
use switchyard_common::manager::{self, Declared, ServerStatus};
use switchyard_common::{ClientBuilder, Error};
use switchyard_core::Readiness;

use crate::client::{Client, RequestBuilder};
use crate::runtime::Runtime;
use crate::Body;

/// Warm connections to a declared set of servers, for services that talk to a
/// fixed set of backends: each server's minimum is connected at start (DNS,
/// TCP, TLS paid before the first request) and kept as connections close;
/// failed connects back off. Requests go through [`Manager::connection`].
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime + Default>() -> Result<(), switchyard_async::Error> {
/// # type Manager<R> = switchyard_async::Manager<R>;
/// // switchyard_tokio::Manager / switchyard_smol::Manager name it for their runtime.
/// let manager = Manager::<R>::builder()
///     .server("https://api.internal:8443", 2)
///     .server("http://cache.internal:8080", 1)
///     .client(|c| c.timeout(std::time::Duration::from_secs(5)))
///     .build()?;
/// manager.ready().await?; // every minimum open, or each server's error
/// let api = manager.connection("api.internal")?;
/// let response = api.get("/v1/items").send().await?;
/// # drop(response); Ok(()) }
/// ```
pub struct Manager<R: Runtime> {
    client: Client<R>,
    servers: Arc<Vec<Declared>>,
    ready_timeout: Duration,
}

impl<R: Runtime> Clone for Manager<R> {
    fn clone(&self) -> Self {
        Manager {
            client: self.client.clone(),
            servers: Arc::clone(&self.servers),
            ready_timeout: self.ready_timeout,
        }
    }
}

impl<R: Runtime> std::fmt::Debug for Manager<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("servers", &self.servers.len()).finish_non_exhaustive()
    }
}

/// Builds a [`Manager`]: servers, minimums, the client settings they share.
pub struct ManagerBuilder<R: Runtime + Default> {
    inner: manager::ManagerBuilder<Client<R>>,
    _runtime: PhantomData<R>,
}

impl<R: Runtime + Default> std::fmt::Debug for ManagerBuilder<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<R: Runtime + Default> ManagerBuilder<R> {
    /// Declares a server (`scheme://host[:port]`) with at least `min_warm`
    /// connections open.
    #[must_use]
    pub fn server(self, url: &str, min_warm: usize) -> Self {
        ManagerBuilder { inner: self.inner.server(url, min_warm), _runtime: PhantomData }
    }

    /// Declares a server with a whole policy (an HTTP/2 minimum in concurrent
    /// streams, its own backoff, proxies).
    #[must_use]
    pub fn server_with(self, url: &str, policy: switchyard_core::WarmPolicy) -> Self {
        ManagerBuilder { inner: self.inner.server_with(url, policy), _runtime: PhantomData }
    }

    /// The client settings every server's connections use.
    #[must_use]
    pub fn client(self, settings: impl FnOnce(ClientBuilder<Client<R>>) -> ClientBuilder<Client<R>>) -> Self {
        ManagerBuilder { inner: self.inner.client(settings), _runtime: PhantomData }
    }

    /// Backoff for failed connects. Default: 1 s, ×1.6, ±20 %, at most 120 s.
    #[must_use]
    pub fn backoff(self, backoff: switchyard_core::Backoff) -> Self {
        ManagerBuilder { inner: self.inner.backoff(backoff), _runtime: PhantomData }
    }

    /// How long [`Manager::ready`] waits, and how long a server may fail with no
    /// connection open before it is `down`. Default: 30 s.
    #[must_use]
    pub fn ready_timeout(self, timeout: Duration) -> Self {
        ManagerBuilder { inner: self.inner.ready_timeout(timeout), _runtime: PhantomData }
    }

    /// Builds the client and starts warming every server. Call it within the
    /// runtime (the connects are its tasks).
    ///
    /// # Errors
    /// A configuration error: no server, a server URL with a path or declared
    /// twice, or a client setting's error.
    pub fn build(self) -> Result<Manager<R>, Error> {
        let (client, servers, ready_timeout) = self.inner.finish(true)?;
        let manager = Manager { client, servers: Arc::new(servers), ready_timeout };
        manager.declare()?;
        Ok(manager)
    }
}

impl<R: Runtime + Default> Manager<R> {
    /// A builder with no server yet.
    #[must_use]
    pub fn builder() -> ManagerBuilder<R> {
        ManagerBuilder { inner: manager::ManagerBuilder::new(), _runtime: PhantomData }
    }
}

impl<R: Runtime> Manager<R> {
    fn declare(&self) -> Result<(), Error> {
        let shared = &self.client.inner.shared;
        for d in self.servers.iter() {
            shared
                .input(|st, now| st.pool.warm(now, d.address.clone(), d.policy.clone()))
                .map_err(|m| Error::config(m.to_string()).with_url(&d.url))?;
        }
        self.client.ensure_timer();
        Ok(())
    }

    /// Waits until every server has its minimum open. Fails after the ready
    /// timeout with every server that is not ready, its readiness and last
    /// error ([`ErrorKind::NotReady`](crate::ErrorKind::NotReady)).
    ///
    /// # Errors
    /// Not every server was ready in time.
    pub async fn ready(&self) -> Result<(), Error> {
        let start = std::time::Instant::now();
        self.client.ensure_timer();
        // Readiness changes on connects the pool runs itself: looked at again
        // after each of the pool's inputs, never on a timer.
        let servers = &self.servers;
        let shared = &self.client.inner.shared;
        shared
            .wait_for(start + self.ready_timeout, |st, now| {
                manager::statuses(&st.pool, now, servers).iter().all(|s| s.readiness == Readiness::Ready)
            })
            .await;
        let statuses = self.status();
        if statuses.iter().all(|s| s.readiness == Readiness::Ready) {
            return Ok(());
        }
        Err(manager::not_ready(&statuses, start.elapsed()))
    }

    /// Each server's readiness, connections (open, idle, in use, connecting)
    /// and last error, in declaration order.
    #[must_use]
    pub fn status(&self) -> Vec<ServerStatus> {
        let shared = &self.client.inner.shared;
        shared.input(|st, now| manager::statuses(&st.pool, now, &self.servers))
    }

    /// The handle for one declared server (`host`, `host:port` or its URL):
    /// requests through it use that server's warm connections.
    ///
    /// # Errors
    /// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared): not a server
    /// this manager was built with. No connection is opened.
    pub fn connection(&self, host: &str) -> Result<ServerHandle<R>, Error> {
        let server = manager::find(&self.servers, host)?.clone();
        Ok(ServerHandle { client: self.client.clone(), server: Arc::new(server) })
    }

    /// The client underneath (its stats, its listeners' events).
    #[must_use]
    pub fn client(&self) -> &Client<R> {
        &self.client
    }

    /// The declared servers (for the adapters' gateways).
    #[cfg(feature = "gateway")]
    #[must_use]
    pub(crate) fn servers(&self) -> &[Declared] {
        &self.servers
    }

    /// Whether a declared server is reported down (for the adapters'
    /// gateways: the per-request check, with no status built).
    #[cfg(feature = "gateway")]
    #[must_use]
    pub(crate) fn is_down(&self, server: &Declared) -> bool {
        let shared = &self.client.inner.shared;
        let now = shared.hub.now();
        shared.lock_state().pool.warm_is_down(now, &server.address)
    }

    /// One declared server's status (for the adapters' gateways).
    #[cfg(feature = "gateway")]
    #[must_use]
    pub(crate) fn status_of(&self, server: &Declared) -> Option<ServerStatus> {
        let shared = &self.client.inner.shared;
        shared.input(|st, now| manager::statuses(&st.pool, now, std::slice::from_ref(server))).pop()
    }

    /// Stops re-warming at once, fails calls waiting for a connection, closes
    /// idle connections, and lets calls in flight finish (their connections
    /// close then), for up to the ready timeout: the client's graceful
    /// shutdown ([`Client::shutdown`]).
    pub async fn shutdown(&self) -> switchyard_common::ShutdownReport {
        self.client.shutdown(self.ready_timeout).await
    }
}

/// Requests to one declared server ([`Manager::connection`]): paths, or URLs
/// to that server only.
pub struct ServerHandle<R: Runtime> {
    client: Client<R>,
    server: Arc<Declared>,
}

impl<R: Runtime> Clone for ServerHandle<R> {
    fn clone(&self) -> Self {
        ServerHandle { client: self.client.clone(), server: Arc::clone(&self.server) }
    }
}

impl<R: Runtime> std::fmt::Debug for ServerHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle").field("server", &self.server.url).finish()
    }
}

impl<R: Runtime> ServerHandle<R> {
    /// The server's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// A request with `method` to `path` (or a URL to this server; a URL to
    /// another is an [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared)
    /// at `send`).
    pub fn request(&self, method: http::Method, path: &str) -> RequestBuilder<R> {
        match manager::target(&self.server, path) {
            Ok(uri) => self.client.request(method, uri),
            Err(e) => RequestBuilder::failed(self.client.clone(), e),
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> RequestBuilder<R> {
        self.request(http::Method::GET, path)
    }

    /// `POST path`.
    pub fn post(&self, path: &str) -> RequestBuilder<R> {
        self.request(http::Method::POST, path)
    }

    /// Sends a request whose URI is this server's.
    ///
    /// # Errors
    /// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared) for a URI to
    /// another server; otherwise as [`Client::send`].
    pub async fn send(&self, request: http::Request<Body>) -> Result<crate::Response, Error> {
        manager::check_target(&self.server, request.uri())?;
        self.client.send(request).await
    }
}
