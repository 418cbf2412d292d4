//! [`Client`]: the user-facing API of both async adapters, generic over the
//! [`Runtime`] it runs on. switchyard-tokio and switchyard-smol name it for their
//! runtime (`switchyard_tokio::Client`, `switchyard_smol::Client`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use switchyard_common::{ClientBuilder, Config, Error, FromConfig, Hub, RequestOptions};
use switchyard_core::http1::TargetForm;
use switchyard_core::pool::RequestFacts;
use switchyard_core::{AcquireOptions, CallId, FailureOutcome, PoolStats, Proxy};
use tokio::sync::oneshot;

use crate::body::Body;
use crate::driver::{self, Lease, Settings, Shared};
use crate::h1;
use crate::runtime::{within, Runtime};
use crate::ResponseBody;
use switchyard_common::exchange::Attempted;

impl<R: Runtime + Default> FromConfig for Client<R> {
    type Runtime = R;
    fn from_config(config: Config, runtime: R) -> Result<Self, Error> {
        let settings = Settings {
            read_timeout: config.read_timeout,
            driver: config.driver_config(),
            limits: config.limits,
            tls: config.tls_configs.clone(),
            handshake_timeout: config.pool.race.handshake_timeout,
        };
        let hub = Hub::new(
            switchyard_core::Pool::new(config.pool.clone()),
            Default::default(),
            config.listener.clone(),
        );
        let shared = Shared::new(hub, Arc::new(runtime), Arc::clone(&config.resolver), settings);
        Ok(Client {
            inner: Arc::new(ClientInner {
                shared,
                proxies: config.proxies.clone(),
                config,
                timer_started: AtomicBool::new(false),
                closed: Arc::new(AtomicBool::new(false)),
            }),
            runtime: PhantomData,
        })
    }
}

struct ClientInner {
    shared: Arc<Shared>,
    config: Config,
    proxies: Vec<Proxy>,
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
    inner: Arc<ClientInner>,
    runtime: PhantomData<fn() -> R>,
}

impl<R> Clone for Client<R> {
    fn clone(&self) -> Self {
        Client { inner: Arc::clone(&self.inner), runtime: PhantomData }
    }
}

impl<R> std::fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A request being built: [`Client::get`], [`Client::post`], …
#[must_use]
pub struct RequestBuilder<R> {
    client: Client<R>,
    request: Result<http::request::Builder, Error>,
    body: Body,
    options: RequestOptions,
}

impl<R: Runtime> RequestBuilder<R> {
    /// Adds a header field.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.request = self.request.map(|b| b.header(name, value));
        self
    }
    /// Sets the body.
    pub fn body(mut self, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self
    }
    /// Asks for a connection no one else will use.
    pub fn exclusive(mut self) -> Self {
        self.options.exclusive = true;
        self
    }
    /// Marks a non-idempotent request as safe to send twice.
    pub fn retryable(mut self) -> Self {
        self.options.retryable = true;
        self
    }
    /// This call's timeout (until the response head).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.options.timeout = Some(d);
        self
    }
    /// This call's body timeout: the response body must end within `d` of its head.
    pub fn body_timeout(mut self, d: Duration) -> Self {
        self.options.body_timeout = Some(d);
        self
    }
    /// Sends the request.
    pub async fn send(self) -> Result<http::Response<ResponseBody>, Error> {
        let builder = self.request?;
        let mut request = builder.body(self.body).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        request.extensions_mut().insert(self.options);
        self.client.send(request).await
    }
}

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
    fn request(&self, method: http::Method, uri: &str) -> RequestBuilder<R> {
        RequestBuilder {
            client: self.clone(),
            request: Ok(http::Request::builder().method(method).uri(uri)),
            body: Body::empty(),
            options: RequestOptions::default(),
        }
    }
    /// A GET request.
    pub fn get(&self, uri: &str) -> RequestBuilder<R> {
        self.request(http::Method::GET, uri)
    }
    /// A POST request.
    pub fn post(&self, uri: &str) -> RequestBuilder<R> {
        self.request(http::Method::POST, uri)
    }
    /// A PUT request.
    pub fn put(&self, uri: &str) -> RequestBuilder<R> {
        self.request(http::Method::PUT, uri)
    }
    /// A DELETE request.
    pub fn delete(&self, uri: &str) -> RequestBuilder<R> {
        self.request(http::Method::DELETE, uri)
    }
    /// A HEAD request.
    pub fn head(&self, uri: &str) -> RequestBuilder<R> {
        self.request(http::Method::HEAD, uri)
    }

    /// The pool's counts and counters.
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.inner.shared.lock_state().pool.stats()
    }

    /// Closes every idle connection.
    pub fn evict_idle(&self) {
        self.inner.shared.input(|st, now| st.pool.evict_all(now));
    }

    fn ensure_timer(&self) {
        if !self.inner.timer_started.swap(true, Ordering::AcqRel) {
            let shared = &self.inner.shared;
            let timer = driver::timer_task(
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
    pub async fn send(&self, request: http::Request<Body>) -> Result<http::Response<ResponseBody>, Error> {
        self.ensure_timer();
        let shared = Arc::clone(&self.inner.shared);
        let (mut parts, mut body) = request.into_parts();
        let options = parts.extensions.remove::<RequestOptions>().unwrap_or_default();
        // Credentials in the URL become `Authorization: Basic`, never Host or
        // `:authority`, and never appear in events, logs or errors.
        switchyard_common::take_userinfo(&mut parts)?;
        let address = self.inner.config.address(&parts.uri, true)?;
        let timeout = options.timeout.or(self.inner.config.timeout);
        let facts = RequestFacts::new(&parts.method, options.retryable, body.is_replayable());
        let acquire = AcquireOptions {
            exclusive: options.exclusive,
            require_multiplexed: false,
            deadline: timeout.map(|t| shared.now() + t),
            proxies: self.inner.proxies.clone(),
        };
        let (tx, rx) = oneshot::channel();
        // The request head for `call_start`, copied only when someone listens.
        let call_parts = shared.hub.is_listening().then(|| parts.clone());
        let call = shared.input(|st, now| {
            let id = st.pool.acquire(now, address, acquire);
            st.io.engine.wait(id, tx);
            // Queued before the acquisition's own events, so listeners hear it first.
            if let Some(head) = call_parts {
                shared.hub.queue_note(st, move |l| l.call_start(id, &head, now));
            }
            id
        });
        let mut guard = CallGuard { shared: Arc::clone(&shared), call, armed: true };
        let limits = CallLimits {
            deadline: timeout.map(|t| std::time::Instant::now() + t),
            body_timeout: options.body_timeout.or(self.inner.config.body_timeout),
        };
        let run = run_call(&shared, call, rx, &parts, &mut body, facts, limits);
        let result = match timeout {
            Some(t) => within(&*shared.rt, t, run).await.unwrap_or(Err(Error::Timeout)),
            None => run.await,
        };
        match result {
            Ok(mut response) => {
                guard.armed = false;
                // The call ends with its body (`call_end` then).
                response.body_mut().set_owner(Arc::clone(&shared), call);
                Ok(response)
            }
            Err(e) => {
                drop(guard); // ends the call in the pool if it is still there
                let (at, err) = (shared.now(), e.clone());
                shared.emit(move |l| l.call_failed(call, &err, at));
                Err(e)
            }
        }
    }
}

/// Ends a call in the pool if its future is dropped (timeout, cancellation).
struct CallGuard {
    shared: Arc<Shared>,
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

/// A call's time bounds, as the exchanges apply them.
#[derive(Clone, Copy)]
pub(crate) struct CallLimits {
    /// Until the response head.
    pub(crate) deadline: Option<std::time::Instant>,
    /// The response body, from its head.
    pub(crate) body_timeout: Option<Duration>,
}

async fn run_call(
    shared: &Arc<Shared>,
    call: CallId,
    mut rx: oneshot::Receiver<Result<Lease, switchyard_core::AcquireError>>,
    parts: &http::request::Parts,
    body: &mut Body,
    facts: RequestFacts,
    limits: CallLimits,
) -> Result<http::Response<ResponseBody>, Error> {
    loop {
        let lease = match rx.await {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => return Err(Error::Connect(e)),
            Err(_) => return Err(Error::Connect(switchyard_core::AcquireError::Shutdown)),
        };
        let attempt = match lease {
            Lease::H1 { connection, conn } => {
                let form = {
                    let st = shared.lock_state();
                    let absolute =
                        st.pool.connection(connection).is_some_and(|c| c.route().uses_absolute_form());
                    if absolute {
                        TargetForm::Absolute
                    } else {
                        TargetForm::Origin
                    }
                };
                let req = h1::Request {
                    parts,
                    body,
                    form,
                    facts,
                    deadline: limits.deadline,
                    body_timeout: limits.body_timeout,
                };
                h1::exchange(shared, call, connection, conn, req).await
            }
            Lease::H2 { connection, handle } => {
                let req = crate::h2::Request { parts, body, facts, limits };
                crate::h2::exchange(shared, call, connection, handle, req).await
            }
        };
        let failure = match attempt {
            Ok(response) => return Ok(response),
            Err(Attempted::Fatal(e)) => return Err(e),
            // The call's deadline passed during the exchange: the call timed out
            // (its guard ends it in the pool), whatever the exchange's own error.
            Err(Attempted::Failed(_)) if limits.deadline.is_some_and(|d| std::time::Instant::now() >= d) => {
                return Err(Error::Timeout)
            }
            Err(Attempted::Failed(f)) => f,
        };
        let (tx, next) = oneshot::channel();
        let outcome = shared.input(|st, now| {
            st.io.engine.wait(call, tx);
            let outcome = st.pool.exchange_failed(now, call, failure);
            if !matches!(outcome, Ok(FailureOutcome::Retrying(_))) {
                st.io.engine.stop_waiting(call);
            }
            outcome
        });
        match outcome {
            Ok(FailureOutcome::Retrying(reason)) => {
                tracing::debug!(%call, ?reason, "retrying");
                rx = next;
            }
            Ok(FailureOutcome::Failed(e)) => return Err(Error::Exchange(Box::new(e))),
            Err(misuse) => return Err(Error::InvalidRequest(format!("internal: {misuse}"))),
        }
    }
}
