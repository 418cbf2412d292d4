//! [`Client`]: the user-facing API of both async adapters, generic over the
//! [`Runtime`] it runs on. switchyard-tokio and switchyard-smol name it for their
//! runtime (`switchyard_tokio::Client`, `switchyard_smol::Client`).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use switchyard_common::call::CallOwner;
use switchyard_common::engine::{CallPlan, EngineHost, H1Exchange};
use switchyard_common::redirect::Layers;
use switchyard_common::{ClientBuilder, Config, Error, FromConfig, Hub, IntoUri, SendAsync, Sender};
use switchyard_core::{CallId, PoolStats};
use tokio::sync::oneshot;

use crate::body::Body;
use crate::h1;
use crate::runtime::{within, BoxFuture, Runtime};
use crate::shared::{self, Lease, Settings, Shared};
use crate::ResponseBody;

impl<R: Runtime + Default> FromConfig for Client<R> {
    type Runtime = R;
    type Connecting = crate::Connecting;
    fn from_config(mut config: Config, runtime: R) -> Result<Self, Error> {
        // Alt-Svc's HTTP/3 alternatives are raced where QUIC is built in.
        config.http3 = cfg!(feature = "http3");
        let settings = Settings {
            read_timeout: config.read_timeout,
            driver: config.driver_config(),
            limits: config.limits,
            tls: config.tls_configs.clone(),
            http2: config.http2,
            tcp: (!config.tcp.is_default()).then(|| config.tcp.clone()),
            connector: config
                .connector::<Arc<dyn crate::Connect<crate::Connecting>>>()?
                .map(crate::ConnectorSlot),
        };
        let hub = Hub::new(
            switchyard_core::Pool::new(config.pool.clone()),
            Default::default(),
            config.listener.clone(),
        )
        .with_log_sites(R::log_sites());
        let shared = Shared::new(
            hub,
            Arc::new(runtime),
            Arc::clone(&config.resolver),
            config.async_resolver.clone(),
            settings,
        );
        let layers = config.layers;
        Ok(Client {
            inner: Arc::new(ClientInner {
                shared,
                config,
                timer_started: AtomicBool::new(false),
                closed: Arc::new(AtomicBool::new(false)),
            }),
            layers,
            runtime: PhantomData,
        })
    }
}

pub(crate) struct ClientInner {
    pub(crate) shared: Arc<Shared>,
    config: Config,
    timer_started: AtomicBool,
    closed: Arc<AtomicBool>,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // The last handle is gone: stop the timer, close idle connections; calls
        // still streaming bodies finish on their own.
        self.closed.store(true, Ordering::Release);
        self.shared.timer.notify_one();
        self.shared.input(|st, now| st.pool.shutdown(now));
    }
}

/// An HTTP client whose connection decisions come from `switchyard-core`, on the
/// runtime `R`. Cheap to clone; clones share the pool. Build one with
/// [`Client::builder`] (every knob: [`ClientBuilder`]).
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_common::Error> {
/// # type Client = switchyard_async::Client<MyRuntime>;
/// # #[derive(Default)] struct MyRuntime;
/// # impl switchyard_async::Runtime for MyRuntime {
/// #   fn spawn(&self, _: switchyard_async::BoxFuture<()>) -> Option<Box<dyn switchyard_async::Task>> { None }
/// #   fn sleep_until(&self, _: std::time::Instant) -> switchyard_async::BoxFuture<()> { Box::pin(std::future::pending()) }
/// #   fn connect(&self, _: std::net::SocketAddr) -> switchyard_async::BoxFuture<std::io::Result<switchyard_async::Io>> { Box::pin(std::future::pending()) }
/// #   fn unblock(&self, w: Box<dyn FnOnce() -> std::io::Result<Vec<std::net::IpAddr>> + Send>) -> switchyard_async::BoxFuture<std::io::Result<Vec<std::net::IpAddr>>> { Box::pin(async move { w() }) }
/// # }
/// let client = Client::builder().build()?;
/// // GET
/// let mut response = client.get("https://example.com/").send().await?;
/// println!("{} {}", response.status(), response.body_mut().text().await?);
/// // POST with a body
/// let response = client.post("https://example.com/items").body("{\"a\":1}").send().await?;
/// assert!(response.status().is_success());
/// // Pool statistics
/// let stats = client.stats();
/// println!("{} open, {} reused", stats.totals.open, stats.reused);
/// # Ok(()) }
/// ```
pub struct Client<R> {
    pub(crate) inner: Arc<ClientInner>,
    /// Redirects followed, bodies decoded (none by default).
    layers: Layers,
    runtime: PhantomData<fn() -> R>,
}

impl<R> Clone for Client<R> {
    fn clone(&self) -> Self {
        Client { inner: Arc::clone(&self.inner), layers: self.layers, runtime: PhantomData }
    }
}

impl<R> std::fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A request being built: [`Client::get`], [`Client::post`], …,
/// [`Client::request`]. Finish with `.send().await`. The first error (a bad
/// URL, a header that is not a valid name or value) is kept and returned by
/// `send`.
pub type RequestBuilder<R> = switchyard_common::RequestBuilder<Client<R>, switchyard_common::Async>;

impl<R: Runtime> Sender for Client<R> {
    type Body = Body;
}

impl<R: Runtime> SendAsync for Client<R> {
    type Response = crate::Response;
    #[inline]
    fn send_request(
        self,
        request: Result<http::Request<Body>, Error>,
    ) -> impl Future<Output = Result<crate::Response, Error>> + Send + 'static {
        self.send_unboxed(request)
    }
}

impl<R: Runtime> Client<R> {
    #[inline]
    fn send_unboxed(
        self,
        request: Result<http::Request<Body>, Error>,
    ) -> impl Future<Output = Result<crate::Response, Error>> + Send + 'static {
        if self.layers.any() {
            if let Ok(request) = request {
                let future = crate::redirect::layered(self.direct(), self.layers, request);
                return crate::redirect::SendFuture::Following { future };
            }
        }
        let span = match &request {
            Ok(r) => R::call_span(r.method(), r.uri()),
            Err(_) => tracing::Span::none(),
        };
        crate::redirect::SendFuture::Direct { future: self.send_in(request, span) }
    }
}

impl<R: Runtime + Default> switchyard_common::Layered for Client<R> {}

impl<R: Runtime + Default> Client<R> {
    /// A builder with every default.
    pub fn builder() -> ClientBuilder<Self> {
        ClientBuilder::new()
    }

    /// A client with every default.
    ///
    /// # Errors
    /// Never with the defaults, in practice (see [`ClientBuilder::build`]).
    pub fn new() -> Result<Self, Error> {
        Self::builder().build()
    }
}

impl<R: Runtime> Client<R> {
    /// A GET request. The URL may be a `&str`, a `String` or an `http::Uri`
    /// ([`IntoUri`](switchyard_common::IntoUri)).
    pub fn get(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::GET, uri)
    }
    /// A POST request.
    pub fn post(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::POST, uri)
    }
    /// A PUT request.
    pub fn put(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::PUT, uri)
    }
    /// A PATCH request.
    pub fn patch(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::PATCH, uri)
    }
    /// A DELETE request.
    pub fn delete(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::DELETE, uri)
    }
    /// A HEAD request.
    pub fn head(&self, uri: impl IntoUri) -> RequestBuilder<R> {
        self.request(http::Method::HEAD, uri)
    }
    /// A request with any method.
    pub fn request(&self, method: http::Method, uri: impl IntoUri) -> RequestBuilder<R> {
        RequestBuilder::new(self.clone(), method, uri)
    }

    /// reqwest's name for [`send`](Self::send).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn execute<B: Into<Body>>(
        &self,
        request: http::Request<B>,
    ) -> impl Future<Output = Result<crate::Response, Error>> + Send + 'static {
        self.send(request)
    }

    /// This client as a `tower::Service<http::Request<Body>>` of one
    /// request type, so `ServiceExt::ready` and layers infer without
    /// naming the body type (the client itself is a `Service` for every
    /// `http_body::Body`). Shares the pool.
    ///
    /// ```ignore
    /// let mut service = tower::ServiceBuilder::new()
    ///     .layer(tower_http::timeout::TimeoutLayer::new(Duration::from_secs(5)))
    ///     .service(client.service());
    /// let response = service.ready().await?.call(request).await?;
    /// ```
    #[must_use]
    pub fn service(&self) -> ClientService<R> {
        ClientService { client: self.clone() }
    }

    /// This client without its layers (each hop of a followed redirect is a
    /// call of its own).
    fn direct(&self) -> ClientService<R> {
        let mut client = self.clone();
        client.layers = Layers::default();
        ClientService { client }
    }

    /// The pool's counts and counters.
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.inner.shared.lock_state().pool.stats()
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

    /// The route a connection of this client's pool goes over (its peer's
    /// address: [`Route::socket_addr`](switchyard_core::Route::socket_addr);
    /// a proxy's, through one), while the pool holds it: pass a response's
    /// `connection_id()`. `None` once the connection has closed.
    #[must_use]
    pub fn connection_route(&self, id: switchyard_core::ConnectionId) -> Option<switchyard_core::Route> {
        self.inner.shared.lock_state().pool.connection(id).map(|c| c.route().clone())
    }

    /// A connection's local address (its socket's own end: curl's
    /// `local_ip` and `local_port`) while the pool holds it: pass a
    /// response's `connection_id()`. `None` once it closed, over a Unix
    /// socket, or for a stream a connector hook made.
    #[must_use]
    pub fn connection_local_addr(&self, id: switchyard_core::ConnectionId) -> Option<std::net::SocketAddr> {
        self.inner.shared.lock_state().pool.local_addr(id)
    }

    /// Every server's gauges and counters, in the order of their names
    /// (Prometheus text: the `metrics` module's
    /// [`prometheus_text`](switchyard_common::metrics::prometheus_text)).
    #[must_use]
    pub fn stats_by_address(&self) -> Vec<switchyard_core::AddressMetrics> {
        self.inner.shared.lock_state().pool.stats_by_address()
    }

    /// Shuts the client down gracefully within `grace`: new calls are
    /// refused at once ([`Error::is_shutdown`]), idle connections close,
    /// calls in flight finish (bodies included) until the deadline. Returns
    /// what was still running then
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
    pub async fn shutdown(&self, grace: std::time::Duration) -> switchyard_common::ShutdownReport {
        let shared = &self.inner.shared;
        shared.input(|st, now| st.pool.shutdown(now));
        let deadline = std::time::Instant::now() + grace;
        if shared.wait_for(deadline, |st, _| st.pool.stats().calls == 0).await {
            return switchyard_common::ShutdownReport::default();
        }
        shared.input(|st, now| switchyard_common::ShutdownReport {
            in_flight: st.pool.stats().calls,
            aborted: st.pool.abort_in_use(now),
        })
    }

    pub(crate) fn ensure_timer(&self) {
        if !self.inner.timer_started.swap(true, Ordering::AcqRel) {
            let shared = &self.inner.shared;
            let timer = shared::timer_task(
                Arc::downgrade(shared),
                Arc::clone(&shared.timer),
                Arc::clone(&self.inner.closed),
            );
            if shared.rt.spawn(Box::pin(timer)).is_none() {
                // Not inside the runtime: try again on the next call.
                self.inner.timer_started.store(false, Ordering::Release);
            }
        }
    }

    /// Sends a request; the URI must be absolute (`http://` or `https://`).
    /// Retries follow the core's decisions (BEHAVIOUR §6): never a silent replay
    /// of a request that may have been processed.
    ///
    /// Each call is a `tracing` span named `call` (under the adapter's crate name) with
    /// the method, the URI without userinfo, the call id and, once known, the
    /// status; the call's end (or failure) is an event in it.
    pub fn send<B: Into<Body>>(
        &self,
        request: http::Request<B>,
    ) -> impl Future<Output = Result<crate::Response, Error>> + Send + 'static {
        self.clone().send_request(Ok(request.map(Into::into)))
    }

    /// [`Client::send`] inside `span` (an adapter's own, under its crate's
    /// target), as one future that owns what it needs: a call's state is
    /// built in place, never copied through layers of futures. A request
    /// that failed to build fails the future at once, untraced.
    pub(crate) fn send_in(
        self,
        request: Result<http::Request<Body>, Error>,
        span: tracing::Span,
    ) -> impl Future<Output = Result<http::Response<ResponseBody>, Error>> + Send + 'static {
        use tokio_util::either::Either;
        use tracing::Instrument as _;
        // The request's parts go into the call's future as they are (no
        // copy of the whole request kept beside them).
        match request {
            Ok(request) => {
                let (parts, body) = request.into_parts();
                Either::Left(self.send_inner(parts, body, span.clone()).instrument(span))
            }
            Err(e) => Either::Right(std::future::ready(Err(e))),
        }
    }

    /// The call's future. Its state is what lives across its waits, so it
    /// stays in the allocator's small-object cache (glibc's: at most 1 KiB):
    /// the plan is built and given to the pool in [`Client::start`], outside
    /// it.
    // Not an `async fn`: that would copy its arguments into locals kept
    // beside themselves in the state (+ ~300 bytes, past the cache's limit).
    #[allow(clippy::manual_async_fn)]
    fn send_inner(
        self,
        mut parts: http::request::Parts,
        mut body: Body,
        span: tracing::Span,
    ) -> impl Future<Output = Result<http::Response<ResponseBody>, Error>> + Send + 'static {
        // A block, not an `async fn`: its arguments are kept once in the
        // future's state, not copied into locals beside themselves.
        async move {
            self.ensure_timer();
            let shared = Arc::clone(&self.inner.shared);
            // As given (credentials and all): errors show it redacted.
            let original = parts.uri.clone();
            let Started { call, rx, owner, timeout, adopted } = match self.start(&shared, &mut parts, &body) {
                Ok(started) => started,
                Err(e) => {
                    let result = Err(e.with_url(&original.to_string()));
                    R::call_traced(&span, &result);
                    return result;
                }
            };
            if shared.async_resolver.is_some() && self.inner.config.races_http3_alternatives() {
                self.ask_service_bindings(&shared, &parts.uri);
            }
            let mut guard = CallGuard { shared: Arc::clone(&shared), call, armed: true };
            let facts = owner.facts();
            // Boxed: the exchange's state is built once on the heap, not moved
            // through this future and the timeout's.
            let run = {
                let run = run_call(&shared, &owner, (rx, adopted), &parts, &mut body);
                // Within glibc's per-thread cache of small blocks (requests
                // up to 1 032 bytes), like the call's own future (a test).
                debug_assert!(std::mem::size_of_val(&run) <= 1024, "{}", std::mem::size_of_val(&run));
                Box::pin(run)
            };
            let result = match timeout {
                Some(t) => within(&*shared.rt, t, run).await.unwrap_or_else(|| {
                    // The core says where the call stood (connecting, or in its
                    // exchange, which it ends as a timeout) and so the phase.
                    let stood = shared.input(|st, now| st.pool.call_timed_out(now, call, facts));
                    Err(Error::call_timeout(stood))
                }),
                None => run.await,
            };
            guard.armed = false;
            let result = match result {
                Ok(mut response) => {
                    self.inner.config.learn_alt_svc(&parts.uri, response.headers());
                    // The call ends with its body (`call_end` then).
                    response.body_mut().set_owner(Arc::clone(&shared), call, &original);
                    Ok(response)
                }
                Err(e) => {
                    let e = e.with_url(&original.to_string());
                    shared.call_failed(call, &e);
                    Err(e)
                }
            };
            R::call_traced(&span, &result);
            result
        }
    }

    /// Asks DNS for `uri`'s HTTPS records in the background, when it is
    /// time to (once per name; see `switchyard_common::alt_svc`): an `h3`
    /// endpoint on the name makes the next connections race QUIC. The call
    /// does not wait for the answer.
    fn ask_service_bindings(&self, shared: &Arc<Shared>, uri: &http::Uri) {
        let Some(resolver) = shared.async_resolver.as_ref() else { return };
        let memory = &self.inner.config.alt_svc;
        let Some(host) = memory.should_ask(uri) else { return };
        let Some(lookup) = resolver.service_bindings(&host) else {
            memory.cannot_ask(&host);
            return;
        };
        let memory = Arc::clone(memory);
        let learn = Box::pin(async move {
            let answer = lookup.await;
            memory.learn_records(&host, answer);
        });
        if shared.rt.spawn(learn).is_none() {
            tracing::debug!("no executor for an HTTPS-record query");
        }
    }

    /// Plans the call and gives it to the pool: what the call's future
    /// needs of it afterwards.
    fn start(
        &self,
        shared: &Arc<Shared>,
        parts: &mut http::request::Parts,
        body: &Body,
    ) -> Result<Started, Error> {
        let mut plan = CallPlan::new(&self.inner.config, parts, true, body.is_replayable())?;
        let (tx, rx) = oneshot::channel();
        // The connect attempts this acquisition starts (if nothing idle
        // serves it) are this call's to drive (`adopt`).
        let (call, adopted) = crate::adopt::adopting(|| shared.start_call(parts, &mut plan, tx));
        Ok(Started { call, rx, owner: CallOwner::new(call, &plan), timeout: plan.timeout, adopted })
    }
}

/// A raw tunnel's far side, from the pool ([`Client::open_tunnel`]).
#[cfg(feature = "gateway")]
pub(crate) struct Tunnelled {
    /// The stream.
    pub(crate) io: crate::Upgraded,
    /// The connection it was, as listeners saw it.
    pub(crate) connection: switchyard_core::ConnectionId,
    /// Its route (the socket address, or the proxy it went through).
    pub(crate) route: Option<switchyard_core::Route>,
}

#[cfg(feature = "gateway")]
impl<R: Runtime> Client<R> {
    /// A raw byte stream to `origin`'s host and port for a tunnel (a
    /// gateway's `CONNECT`), acquired from the pool as an exclusive
    /// connection of a [tunnel Address](switchyard_common::Config::tunnel_address):
    /// routes planned and raced (Happy Eyeballs), remembered when they fail,
    /// through the connector hook, socket options and proxy rules like every
    /// connection, never TLS. Listeners see it as a call with `CONNECT` and a
    /// connection that closes at once for "exclusive use" (the stream is the
    /// caller's). Bounded by the pool's connect timeout and `timeout`.
    pub(crate) async fn open_tunnel(
        &self,
        origin: &http::Uri,
        timeout: Option<std::time::Duration>,
    ) -> Result<Tunnelled, Error> {
        self.ensure_timer();
        let shared = Arc::clone(&self.inner.shared);
        let about = |e: Error| e.with_url(&origin.to_string());
        let mut plan = CallPlan::tunnel(&self.inner.config, origin, timeout).map_err(about)?;
        let target = origin.authority().map_or_else(String::new, ToString::to_string);
        let parts = http::Request::connect(target)
            .body(())
            .map_err(|e| about(Error::invalid_request(e.to_string())))?;
        let (parts, ()) = parts.into_parts();
        let (tx, mut rx) = oneshot::channel();
        let call = shared.start_call(&parts, &mut plan, tx);
        let owner = CallOwner::new(call, &plan);
        let mut guard = CallGuard { shared: Arc::clone(&shared), call, armed: true };
        let run = async {
            loop {
                let lease = match rx.await {
                    Ok(Ok(lease)) => lease,
                    Ok(Err(e)) => return Err(Error::connect(e)),
                    Err(_) => return Err(Error::connect(switchyard_core::AcquireError::Shutdown)),
                };
                match lease {
                    Lease::H1 { connection, conn: Some(conn), .. } => {
                        let route =
                            shared.lock_state().pool.connection(connection).map(|c| c.route().clone());
                        // Out of the pool for good: the stream is the caller's.
                        shared.release(call, connection, Err(switchyard_core::CloseReason::Exclusive));
                        let io = crate::Upgraded::new(conn.wire.into_io(), conn.conn.into_buffered());
                        return Ok(Tunnelled { io, connection, route });
                    }
                    Lease::H1 { conn: None, .. } | Lease::H2 { .. } => {
                        // Gone before it was handed over (or, impossibly, a
                        // shared connection): the pool plans another.
                        let failure = switchyard_common::exchange::stale(
                            "the tunnel's connection closed before it was handed over",
                            owner.facts(),
                        );
                        let switchyard_common::exchange::Attempted::Failed(failure) = failure else {
                            unreachable!("a stale connection is a failure the pool decides on")
                        };
                        let (tx, next) = oneshot::channel();
                        owner.after_failure(shared.exchange_failed(call, failure, tx))?;
                        rx = next;
                    }
                }
            }
        };
        let result = match plan.timeout {
            Some(t) => within(&*shared.rt, t, run).await.unwrap_or_else(|| {
                let stood = shared.input(|st, now| st.pool.call_timed_out(now, call, owner.facts()));
                Err(Error::call_timeout(stood))
            }),
            None => run.await,
        };
        guard.armed = false;
        match result {
            Ok(tunnel) => {
                // The call is over once the stream is handed out.
                shared.hub.untrace_call(call);
                let at = shared.hub.now();
                shared.hub.emit(move |l| l.call_end(call, at));
                Ok(tunnel)
            }
            Err(e) => {
                let e = about(e);
                shared.call_failed(call, &e);
                Err(e)
            }
        }
    }
}

/// A call given to the pool ([`Client::start`]).
struct Started {
    call: CallId,
    rx: oneshot::Receiver<Result<Lease, switchyard_core::AcquireError>>,
    owner: CallOwner,
    timeout: Option<std::time::Duration>,
    /// Connect attempts the call drives itself until it is answered.
    adopted: Option<crate::adopt::Collected>,
}

/// A client is a [`tower_service::Service`], so tower and tower-http
/// middleware (timeouts, retries, redirects, decompression, tracing) stack on
/// top of it. The request body may be any [`http_body::Body`]; this crate's
/// [`Body`] passes through as it is (a buffer stays replayable for the core's
/// retries), any other body is streamed once ([`Body::wrap`]). Always ready:
/// the pool applies its own limits and waits.
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime>(client: switchyard_async::Client<R>) -> Result<(), switchyard_common::Error> {
/// use tower_service::Service;
/// let mut service = client.clone();
/// let request = http::Request::get("https://example.com/").body(switchyard_async::Body::empty()).unwrap();
/// let response = service.call(request).await?;
/// # Ok(()) }
/// ```
impl<R, B> tower_service::Service<http::Request<B>> for Client<R>
where
    R: Runtime,
    B: http_body::Body + Send + 'static,
    B::Error: Into<crate::body::BoxError>,
{
    type Response = http::Response<ResponseBody>;
    type Error = Error;
    type Future = BoxFuture<Result<http::Response<ResponseBody>, Error>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Body::from_any(body));
        let future = self.clone().send_request(Ok(request));
        Box::pin(async move { future.await.map(crate::Response::into_http) })
    }
}

/// A [`Client`] as a `tower::Service<http::Request<Body>>` (see
/// [`Client::service`]). Cheap to clone.
#[derive(Debug)]
pub struct ClientService<R> {
    client: Client<R>,
}

impl<R> Clone for ClientService<R> {
    fn clone(&self) -> Self {
        ClientService { client: self.client.clone() }
    }
}

impl<R: Runtime> tower_service::Service<http::Request<Body>> for ClientService<R> {
    type Response = http::Response<ResponseBody>;
    type Error = Error;
    type Future = BoxFuture<Result<http::Response<ResponseBody>, Error>>;
    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let future = self.client.clone().send_request(Ok(request));
        Box::pin(async move { future.await.map(crate::Response::into_http) })
    }
}

/// Ends a call in the pool if its future is dropped (timeout, cancellation).
struct CallGuard {
    pub(crate) shared: Arc<Shared>,
    call: CallId,
    armed: bool,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.armed {
            let call = self.call;
            self.shared.input(|st, now| {
                st.io.engine.stop_waiting(call);
                st.pool.cancel(now, call);
            });
        }
    }
}

/// Lets every other ready task of the runtime run once before going on.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// Where a call's connection (or the reason it has none) comes.
type Answer = oneshot::Receiver<Result<Lease, switchyard_core::AcquireError>>;

async fn run_call(
    shared: &Arc<Shared>,
    owner: &CallOwner,
    (mut rx, adopted): (Answer, Option<crate::adopt::Collected>),
    parts: &http::request::Parts,
    body: &mut Body,
) -> Result<http::Response<ResponseBody>, Error> {
    let call = owner.call();
    let mut adoptions = crate::adopt::Adoptions::new(shared, adopted);
    loop {
        let answer = match adoptions.as_deref_mut() {
            None => (&mut rx).await,
            Some(adoptions) => crate::adopt::wait(&mut rx, adoptions).await,
        };
        let lease = match answer {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => return Err(Error::connect(e)),
            Err(_) => return Err(Error::connect(switchyard_core::AcquireError::Shutdown)),
        };
        let answered = match lease {
            Lease::H1 { connection, source, conn } => {
                // In a block of its own: the target (its head, its proxy) is
                // not kept across the exchange, which encodes the head at its
                // start; kept, it would size every call's state.
                let (started, via) = {
                    let (target, concurrent) = {
                        let st = shared.lock_state();
                        (owner.h1_target(&st.pool, connection, parts), st.pool.in_use() > 1)
                    };
                    if concurrent {
                        // Other calls are in flight: this request goes out
                        // after the tasks the runtime woke with it have run,
                        // beside their requests, so a server that sleeps
                        // between requests wakes once for the lot rather than
                        // once each (on loopback that wake-up was 12 % of the
                        // client's time). A lone call writes at once.
                        yield_once().await;
                    }
                    let request = owner.h1_call(&target, body.len());
                    let started = H1Exchange::start(shared, call, (connection, source), conn, &request);
                    (started, target.into_via())
                };
                let attempt = match started {
                    Ok(exchange) => h1::exchange(exchange, body).await,
                    Err(e) => Err(e),
                };
                owner.answered(attempt, via.as_ref())
            }
            Lease::H2 { connection, handle } => {
                let limits = owner.stream_limits(
                    |t| shared.hub.from_std(t),
                    shared.settings.read_timeout,
                    shared.settings.driver.write_timeout,
                );
                match handle {
                    crate::connect::Mux::H2(handle) => {
                        let req = crate::h2::Request { parts, body, facts: owner.facts(), limits };
                        // Boxed: the HTTP/2 exchange's state is the larger of the
                        // two; inline it would size every call's state (HTTP/1.1's
                        // too) past the allocator's small-object cache.
                        let exchange = Box::pin(crate::h2::exchange(shared, call, connection, handle, req));
                        owner.answered(exchange.await, None)
                    }
                    #[cfg(feature = "http3")]
                    crate::connect::Mux::H3(handle) => {
                        let req = crate::h3::Request { parts, body, facts: owner.facts(), limits };
                        let exchange = Box::pin(crate::h3::exchange(shared, call, connection, handle, req));
                        owner.answered(exchange.await, None)
                    }
                }
            }
        };
        let failure = match answered {
            Ok(done) => return done,
            Err(failure) => failure,
        };
        // The pool hears every failure first (route memory, the connection's
        // verdict); its verdict says whether the call's deadline passed.
        let (tx, next) = oneshot::channel();
        // A retry's new attempts are this call's to drive too.
        let (outcome, more) = crate::adopt::adopting(|| shared.exchange_failed(call, failure, tx));
        crate::adopt::Adoptions::extend(&mut adoptions, shared, more);
        owner.after_failure(outcome)?;
        rx = next;
    }
}
