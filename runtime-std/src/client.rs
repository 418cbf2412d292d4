//! [`Client`]: the blocking user-facing API, the same shape as the async
//! adapters' without `.await`.

use std::sync::mpsc;
use std::sync::Arc;

use switchyard_common::call::CallOwner;
use switchyard_common::engine::{CallPlan, EngineHost, H1Exchange};
use switchyard_common::{Config, Error, FromConfig, Hub, IntoUri, SendBlocking, Sender};
use switchyard_core::{AcquireError, CallId, PoolStats};

use crate::body::Body;
use crate::shared::{Lease, Msg, Settings, Shared};
use crate::{h1, ResponseBody};

impl FromConfig for Client {
    type Runtime = ();
    type Connecting = crate::Connecting;
    fn from_config(config: Config, (): ()) -> Result<Self, Error> {
        if config.async_resolver.is_some() {
            return Err(Error::config(
                "async_resolver: switchyard-std resolves with a blocking `Resolve` (use `resolver`); async resolvers need an async adapter",
            ));
        }
        let settings = Settings {
            driver: config.driver_config(),
            connect_timeout: config.pool.race.connect_timeout,
            handshake_timeout: config.pool.race.handshake_timeout,
            tls: config.tls_configs.clone(),
            tcp: config.tcp.clone(),
            connector: config
                .connector::<Arc<dyn crate::Connect<crate::Connecting>>>()?
                .map(crate::ConnectorSlot),
            http2: config.http2,
        };
        let hub = Hub::new(
            switchyard_core::Pool::new(config.pool.clone()),
            Default::default(),
            config.listener.clone(),
        )
        .with_log_sites(&LOG_SITES);
        let shared = Shared::new(hub, Arc::clone(&config.resolver), settings);
        Ok(Client { inner: Arc::new(ClientInner { shared, config }) })
    }
}

pub(crate) struct ClientInner {
    pub(crate) shared: Arc<Shared>,
    config: Config,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // The last handle is gone: close idle connections; calls still reading
        // bodies finish on their own.
        self.shared.input(|st, now| st.pool.shutdown(now));
    }
}

/// A blocking HTTP/1.1 and HTTP/2 client whose connection decisions come
/// from the core every adapter shares. Cheap to clone; clones share the pool;
/// usable from many threads at once.
///
/// ```no_run
/// # fn run() -> Result<(), switchyard_std::Error> {
/// let client = switchyard_std::Client::builder().build()?;
/// let mut response = client.get("https://example.com/").send()?;
/// println!("{} {}", response.status(), response.body_mut().text()?);
/// let response = client.post("https://example.com/items").body("{\"a\":1}").send()?;
/// assert!(response.status().is_success());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A request being built: [`Client::get`], [`Client::post`], …,
/// [`Client::request`]. Finish with `.send()`. The first error (a bad URL, a
/// header that is not a valid name or value) is kept and returned by `send`.
pub type RequestBuilder = switchyard_common::RequestBuilder<Client, switchyard_common::Blocking>;

/// Where the client's `debug` events go: this crate's name, as its call spans.
static LOG_SITES: switchyard_common::LogSites = switchyard_common::log_sites!("switchyard_std");

/// Builds a [`Client`]; every knob has a documented default.
///
/// Following redirects and decoding compressed bodies (`redirect`, `gzip`,
/// `deflate`, `brotli`) are the async adapters' (tower layers): rustdoc
/// lists those methods below under `impl<C: Layered>`, but they do not apply
/// here — this client is not `Layered`, and calling one does not compile.
/// Follow a redirect by reading `Location` from the 3xx response.
pub type ClientBuilder = switchyard_common::ClientBuilder<Client>;

impl Sender for Client {
    type Body = Body;
}

impl SendBlocking for Client {
    type Response = crate::Response;
    #[inline]
    fn send_request(&self, request: http::Request<Body>) -> Result<crate::Response, Error> {
        self.send(request)
    }
}

impl Client {
    /// A builder with every default.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    /// A client with every default.
    ///
    /// # Errors
    /// Never with the defaults, in practice (see [`ClientBuilder::build`]).
    pub fn new() -> Result<Client, Error> {
        Client::builder().build()
    }

    /// A GET request. The URL may be a `&str`, a `String` or an `http::Uri`
    /// ([`IntoUri`](switchyard_common::IntoUri)).
    pub fn get(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::GET, uri)
    }
    /// A POST request.
    pub fn post(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::POST, uri)
    }
    /// A PUT request.
    pub fn put(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::PUT, uri)
    }
    /// A PATCH request.
    pub fn patch(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::PATCH, uri)
    }
    /// A DELETE request.
    pub fn delete(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::DELETE, uri)
    }
    /// A HEAD request.
    pub fn head(&self, uri: impl IntoUri) -> RequestBuilder {
        self.request(http::Method::HEAD, uri)
    }
    /// A request with any method.
    pub fn request(&self, method: http::Method, uri: impl IntoUri) -> RequestBuilder {
        RequestBuilder::new(self.clone(), method, uri)
    }

    /// The route a connection of this client's pool goes over (its peer's
    /// address: [`Route::socket_addr`](switchyard_core::Route::socket_addr);
    /// a proxy's, through one), while the pool holds it: pass a response's
    /// `connection_id()`. `None` once the connection has closed.
    #[must_use]
    pub fn connection_route(&self, id: switchyard_core::ConnectionId) -> Option<switchyard_core::Route> {
        self.inner.shared.input(|st, _| st.pool.connection(id).map(|c| c.route().clone()))
    }

    /// A connection's local address (its socket's own end: curl's
    /// `local_ip` and `local_port`) while the pool holds it: pass a
    /// response's `connection_id()`. `None` once it closed, over a Unix
    /// socket, or for a stream a connector hook made.
    #[must_use]
    pub fn connection_local_addr(&self, id: switchyard_core::ConnectionId) -> Option<std::net::SocketAddr> {
        self.inner.shared.input(|st, _| st.pool.local_addr(id))
    }

    /// Every server's gauges and counters, in the order of their names
    /// (Prometheus text: the `metrics` module's
    /// [`prometheus_text`](switchyard_common::metrics::prometheus_text)).
    #[must_use]
    pub fn stats_by_address(&self) -> Vec<switchyard_core::AddressMetrics> {
        self.inner.shared.input(|st, _| st.pool.stats_by_address())
    }

    /// Shuts the client down gracefully within `grace`, blocking: new calls
    /// are refused at once ([`Error::is_shutdown`]), idle connections
    /// close, calls in flight finish (bodies included) until the deadline.
    /// Returns what was still running then
    /// ([`ShutdownReport`](switchyard_common::ShutdownReport)).
    ///
    /// At the deadline:
    /// - an **HTTP/2** connection still carrying streams is ended: each call
    ///   on it fails with [`Error::is_shutdown`] true, whether it waited for
    ///   its head or was reading its body (never retried; its route is not
    ///   held against the server);
    /// - an **HTTP/1.1** exchange is *not* interrupted: it runs to its end
    ///   (bounded by the call's own timeouts), then its connection closes.
    ///   The report counts it in `in_flight`. Bound it with a call timeout
    ///   if the process must stop at the deadline.
    ///
    /// Clones share the pool: every clone is shut down.
    pub fn shutdown(&self, grace: std::time::Duration) -> switchyard_common::ShutdownReport {
        let shared = &self.inner.shared;
        shared.input(|st, now| st.pool.shutdown(now));
        let deadline = std::time::Instant::now() + grace;
        if shared.wait_for(deadline, |st, _| st.pool.stats().calls == 0) {
            return switchyard_common::ShutdownReport::default();
        }
        shared.input(|st, now| switchyard_common::ShutdownReport {
            in_flight: st.pool.stats().calls,
            aborted: st.pool.abort_in_use(now),
        })
    }

    /// The pool's counts and counters (due timers fire first, so idle
    /// connections past their keep-alive are already closed).
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.inner.shared.input(|st, _| st.pool.stats())
    }

    /// reqwest's name for [`send`](Self::send).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn execute<B: Into<Body>>(&self, request: http::Request<B>) -> Result<crate::Response, Error> {
        self.send(request)
    }

    /// Closes every idle connection, and what would become idle without a
    /// call: connects kept for the pool after their call took another
    /// connection are cancelled, and a connection still draining the body
    /// of a dropped response closes when the drain ends (instead of joining
    /// the pool). Connections carrying live calls are left alone; so after
    /// dropped calls, one `evict_idle` leaves nothing open once the drains
    /// (bounded) end.
    pub fn evict_idle(&self) {
        self.inner.shared.input(|st, now| st.pool.evict_all(now));
    }

    /// Sends a request; the URI must be absolute (`http://` or `https://`).
    /// Retries follow the core's decisions (BEHAVIOUR §6): never a silent replay
    /// of a request that may have been processed.
    ///
    /// # Errors
    /// [`Error`] says what failed and where: the URL, DNS, every connect attempt,
    /// TLS, the pool's wait, the exchange (and whether the request may have been
    /// sent), or the call's timeout.
    ///
    /// Each call is a `tracing` span named `call` (target `switchyard_std`) with
    /// the method, the URI without userinfo, the call id and, once known, the
    /// status; the call's end (or failure) is an event in it.
    pub fn send<B: Into<Body>>(&self, request: http::Request<B>) -> Result<crate::Response, Error> {
        let (parts, body) = request.into_parts();
        let span = switchyard_common::call_span!("switchyard_std", &parts.method, &parts.uri);
        let result = span.in_scope(|| self.send_inner(parts, body.into()));
        switchyard_common::call_traced!("switchyard_std", &span, &result);
        result.map(crate::Response::from)
    }

    fn send_inner(
        &self,
        mut parts: http::request::Parts,
        mut body: Body,
    ) -> Result<http::Response<ResponseBody>, Error> {
        let shared = Arc::clone(&self.inner.shared);
        let uri = parts.uri.clone();
        let mut plan = CallPlan::new(&self.inner.config, &mut parts, true, body.is_replayable())
            .map_err(|e| e.with_url(&uri.to_string()))?;
        let (tx, rx) = mpsc::channel();
        let call = crate::dial::on_caller(|| shared.start_call(&parts, &mut plan, tx));
        let owner = CallOwner::new(call, &plan);
        match run_call(&shared, &owner, rx, &parts, &mut body) {
            Ok(mut response) => {
                // The call ends with its body (`call_end` then).
                response.body_mut().set_owner(Arc::clone(&shared), call, &uri);
                Ok(response)
            }
            Err(e) => {
                let e = e.with_url(&uri.to_string());
                shared.call_failed(call, &e);
                Err(e)
            }
        }
    }
}

/// Waits for the pool's answer. While waiting, one waiting call keeps the
/// core's clock: it sleeps only until the next deadline and fires the due
/// timers (the race's stagger and timeouts, acquire timeouts, eviction).
fn wait_for_lease(
    shared: &Arc<Shared>,
    call: CallId,
    rx: &mpsc::Receiver<Msg>,
    deadline: Option<std::time::Instant>,
) -> Result<Lease, Error> {
    let answer = loop {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            break Err(Error::connect_timeout_at(shared.hub.lock().pool.connect_stage(call)));
        }
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let sleep = match (shared.plan_sleep(call), left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let msg = match sleep {
            Some(d) => rx.recv_timeout(d),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok(Msg::Answer(Ok(lease))) => break Ok(lease),
            Ok(Msg::Answer(Err(e))) => break Err(Error::connect(e)),
            // Fire whatever is due, then plan again.
            Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => shared.input(|_, _| {}),
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(Error::connect(AcquireError::Shutdown)),
        }
    };
    shared.stop_waiting(call);
    answer
}

fn run_call(
    shared: &Arc<Shared>,
    owner: &CallOwner,
    rx: mpsc::Receiver<Msg>,
    parts: &http::request::Parts,
    body: &mut Body,
) -> Result<http::Response<ResponseBody>, Error> {
    let (call, mut rx) = (owner.call(), rx);
    loop {
        let answered = match wait_for_lease(shared, call, &rx, owner.deadline())? {
            Lease::H1 { connection, source, conn } => {
                let target = owner.h1_target(&shared.hub.lock().pool, connection, parts);
                let request = owner.h1_call(&target, body.len());
                let attempt = H1Exchange::start(shared, call, (connection, source), conn, &request)
                    .and_then(|exchange| h1::exchange(exchange, body));
                owner.answered(attempt, target.via())
            }
            Lease::H2 { connection, handle } => {
                let limits = owner.stream_limits(
                    |t| shared.hub.from_std(t),
                    shared.settings.driver.read_timeout,
                    shared.settings.driver.write_timeout,
                );
                let req = crate::h2::Request { parts, body, facts: owner.facts(), limits };
                let attempt = crate::h2::exchange(shared, call, connection, handle, req);
                owner.answered(attempt, None)
            }
        };
        let failure = match answered {
            Ok(done) => return done,
            Err(failure) => failure,
        };
        // The pool hears every failure first (route memory, the connection's
        // verdict); its verdict says whether the call's deadline passed.
        let (tx, next) = mpsc::channel();
        owner.after_failure(shared.exchange_failed(call, failure, tx))?;
        rx = next;
    }
}
