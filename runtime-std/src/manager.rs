//! The Manager, blocking: warm connections to a declared set of servers (see
//! [`switchyard_common::manager`]). A background thread keeps the pool's
//! clock (backoff retries, replacements) while no call is running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use switchyard_common::engine::EngineHost;
use switchyard_common::manager::{self, Declared, ServerStatus};
use switchyard_common::Error;
use switchyard_core::Readiness;

use crate::client::{Client, RequestBuilder};
use crate::shared::Shared;
use crate::Body;

/// Warm connections to a declared set of servers, blocking: each server's
/// minimum is connected at start and kept as connections close; failed
/// connects back off. Requests go through [`Manager::connection`].
///
/// ```no_run
/// # fn run() -> Result<(), switchyard_std::Error> {
/// let manager = switchyard_std::Manager::builder()
///     .server("http://cache.internal:8080", 2)
///     .build()?;
/// manager.ready()?; // every minimum open, or each server's error
/// let cache = manager.connection("cache.internal")?;
/// let response = cache.get("/items/1").send()?;
/// # drop(response); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Manager {
    client: Client,
    servers: Arc<Vec<Declared>>,
    ready_timeout: Duration,
    _keeper: Arc<Keeper>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("servers", &self.servers.len()).finish_non_exhaustive()
    }
}

/// Stops the clock thread when the last Manager handle goes.
struct Keeper {
    stop: Arc<AtomicBool>,
    shared: Weak<Shared>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(shared) = self.shared.upgrade() {
            shared.wake_clock();
        }
    }
}

/// Builds a [`Manager`] (`build()` returns one).
pub type ManagerBuilder = manager::ManagerBuilder<Client>;

impl manager::Managed for Client {
    type Manager = Manager;
    const SUPPORTS_HTTP2: bool = false;

    fn manage(client: Client, servers: Vec<Declared>, ready_timeout: Duration) -> Result<Manager, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = Arc::downgrade(&client.inner.shared);
        let weak_shared = Weak::clone(&weak);
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("switchyard-warm".into())
            .spawn(move || crate::shared::keep_clock(&weak, &flag))
            .map_err(|e| Error::config(format!("cannot start the Manager's clock thread: {e}")))?;
        let manager = Manager {
            client,
            servers: Arc::new(servers),
            ready_timeout,
            _keeper: Arc::new(Keeper { stop, shared: Weak::clone(&weak_shared) }),
        };
        let shared = &manager.client.inner.shared;
        for d in manager.servers.iter() {
            shared
                .input(|st, now| st.pool.warm(now, d.address.clone(), d.policy.clone()))
                .map_err(|m| Error::config(m.to_string()).with_url(&d.url))?;
        }
        Ok(manager)
    }
}

impl Manager {
    /// A builder with no server yet.
    #[must_use]
    pub fn builder() -> ManagerBuilder {
        ManagerBuilder::new()
    }

    /// Blocks until every server has its minimum open. Fails after the ready
    /// timeout with every server that is not ready, its readiness and last
    /// error ([`ErrorKind::NotReady`](crate::ErrorKind::NotReady)).
    ///
    /// # Errors
    /// Not every server was ready in time.
    pub fn ready(&self) -> Result<(), Error> {
        let start = std::time::Instant::now();
        // Readiness changes on connects the pool runs itself: looked at again
        // after each of the pool's inputs, never on a timer.
        let servers = &self.servers;
        self.client.inner.shared.wait_for(start + self.ready_timeout, |st, now| {
            manager::statuses(&st.pool, now, servers).iter().all(|s| s.readiness == Readiness::Ready)
        });
        let statuses = self.status();
        if statuses.iter().all(|s| s.readiness == Readiness::Ready) {
            return Ok(());
        }
        Err(manager::not_ready(&statuses, start.elapsed()))
    }

    /// Each server's readiness, connections and last error, in declaration order.
    #[must_use]
    pub fn status(&self) -> Vec<ServerStatus> {
        let shared = &self.client.inner.shared;
        shared.input(|st, now| manager::statuses(&st.pool, now, &self.servers))
    }

    /// The handle for one declared server (`host`, `host:port` or its URL).
    ///
    /// # Errors
    /// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared): not a server
    /// this manager was built with. No connection is opened.
    pub fn connection(&self, host: &str) -> Result<ServerHandle, Error> {
        let server = manager::find(&self.servers, host)?.clone();
        Ok(ServerHandle { client: self.client.clone(), server: Arc::new(server) })
    }

    /// The client underneath.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Stops re-warming at once, fails calls waiting for a connection, closes
    /// idle connections, lets calls in flight finish; waits (up to the ready
    /// timeout) for them.
    pub fn shutdown(&self) -> switchyard_common::ShutdownReport {
        self.client.shutdown(self.ready_timeout)
    }
}

/// Requests to one declared server ([`Manager::connection`]).
#[derive(Clone)]
pub struct ServerHandle {
    client: Client,
    server: Arc<Declared>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle").field("server", &self.server.url).finish()
    }
}

impl ServerHandle {
    /// The server's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// A request with `method` to `path` (or a URL to this server).
    pub fn request(&self, method: http::Method, path: &str) -> RequestBuilder {
        match manager::target(&self.server, path) {
            Ok(uri) => self.client.request(method, uri),
            Err(e) => RequestBuilder::failed(self.client.clone(), e),
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> RequestBuilder {
        self.request(http::Method::GET, path)
    }

    /// `POST path`.
    pub fn post(&self, path: &str) -> RequestBuilder {
        self.request(http::Method::POST, path)
    }

    /// Sends a request whose URI is this server's.
    ///
    /// # Errors
    /// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared) for a URI to
    /// another server; otherwise as [`Client::send`].
    pub fn send(&self, request: http::Request<Body>) -> Result<crate::Response, Error> {
        manager::check_target(&self.server, request.uri())?;
        self.client.send(request)
    }
}
