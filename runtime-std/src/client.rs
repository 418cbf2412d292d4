//! [`Client`]: the blocking user-facing API, the same shape as the async
//! adapters' without `.await`.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use switchyard_common::exchange::Attempted;
use switchyard_common::{ClientBuilder, Config, Error, FromConfig, HttpVersion, Hub, RequestOptions};
use switchyard_core::http1::TargetForm;
use switchyard_core::pool::RequestFacts;
use switchyard_core::{AcquireError, AcquireOptions, CallId, FailureOutcome, PoolStats};

use crate::body::Body;
use crate::driver::{Lease, Msg, Settings, Shared};
use crate::{h1, ResponseBody};

impl FromConfig for Client {
    type Runtime = ();
    fn from_config(config: Config, (): ()) -> Result<Self, Error> {
        if config.version == HttpVersion::Http2Only {
            return Err(Error::Config(
                "switchyard-std speaks HTTP/1.1 only; HTTP/2 needs an async adapter".into(),
            ));
        }
        let settings = Settings {
            driver: config.driver_config(),
            connect_timeout: config.pool.race.connect_timeout,
            handshake_timeout: config.pool.race.handshake_timeout,
            tls: config.tls_configs.clone(),
        };
        let hub = Hub::new(
            switchyard_core::Pool::new(config.pool.clone()),
            Default::default(),
            config.listener.clone(),
        );
        let shared = Shared::new(hub, Arc::clone(&config.resolver), settings);
        Ok(Client { inner: Arc::new(ClientInner { shared, config }) })
    }
}

struct ClientInner {
    shared: Arc<Shared>,
    config: Config,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // The last handle is gone: close idle connections; calls still reading
        // bodies finish on their own.
        self.shared.input(|st, now| st.pool.shutdown(now));
    }
}

/// A blocking HTTP/1.1 client whose connection decisions come from
/// `switchyard-core`. Cheap to clone; clones share the pool; usable from many
/// threads at once.
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
    inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A request being built: [`Client::get`], [`Client::post`], …
#[must_use]
pub struct RequestBuilder {
    client: Client,
    request: Result<http::request::Builder, Error>,
    body: Body,
    options: RequestOptions,
}

impl RequestBuilder {
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
    /// Sends the request and waits for the response head.
    ///
    /// # Errors
    /// See [`Client::send`].
    pub fn send(self) -> Result<http::Response<ResponseBody>, Error> {
        let builder = self.request?;
        let mut request = builder.body(self.body).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        request.extensions_mut().insert(self.options);
        self.client.send(request)
    }
}

impl Client {
    /// A builder with every default.
    pub fn builder() -> ClientBuilder<Client> {
        ClientBuilder::new()
    }

    /// A client with every default.
    ///
    /// # Errors
    /// Never with the defaults, in practice (see [`ClientBuilder::build`]).
    pub fn new() -> Result<Client, Error> {
        Client::builder().build()
    }

    fn request(&self, method: http::Method, uri: &str) -> RequestBuilder {
        RequestBuilder {
            client: self.clone(),
            request: Ok(http::Request::builder().method(method).uri(uri)),
            body: Body::empty(),
            options: RequestOptions::default(),
        }
    }
    /// A GET request.
    pub fn get(&self, uri: &str) -> RequestBuilder {
        self.request(http::Method::GET, uri)
    }
    /// A POST request.
    pub fn post(&self, uri: &str) -> RequestBuilder {
        self.request(http::Method::POST, uri)
    }
    /// A PUT request.
    pub fn put(&self, uri: &str) -> RequestBuilder {
        self.request(http::Method::PUT, uri)
    }
    /// A DELETE request.
    pub fn delete(&self, uri: &str) -> RequestBuilder {
        self.request(http::Method::DELETE, uri)
    }
    /// A HEAD request.
    pub fn head(&self, uri: &str) -> RequestBuilder {
        self.request(http::Method::HEAD, uri)
    }

    /// The pool's counts and counters (due timers fire first, so idle
    /// connections past their keep-alive are already closed).
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.inner.shared.input(|st, _| st.pool.stats())
    }

    /// Closes every idle connection.
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
    pub fn send(&self, request: http::Request<Body>) -> Result<http::Response<ResponseBody>, Error> {
        let shared = Arc::clone(&self.inner.shared);
        let (mut parts, mut body) = request.into_parts();
        let options = parts.extensions.remove::<RequestOptions>().unwrap_or_default();
        // Credentials in the URL become `Authorization: Basic`, never Host or
        // `:authority`, and never appear in events, logs or errors.
        switchyard_common::take_userinfo(&mut parts)?;
        let address = self.inner.config.address(&parts.uri, false)?;
        let timeout = options.timeout.or(self.inner.config.timeout);
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let facts = RequestFacts::new(&parts.method, options.retryable, body.is_replayable());
        let acquire = AcquireOptions {
            exclusive: options.exclusive,
            require_multiplexed: false,
            deadline: timeout.map(|t| shared.now() + t),
            proxies: self.inner.config.proxies.clone(),
        };
        let (tx, rx) = mpsc::channel();
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
        let body_timeout = options.body_timeout.or(self.inner.config.body_timeout);
        match run_call(&shared, call, rx, &parts, &mut body, facts, (deadline, body_timeout)) {
            Ok(mut response) => {
                // The call ends with its body (`call_end` then).
                response.body_mut().set_owner(Arc::clone(&shared), call);
                Ok(response)
            }
            Err(e) => {
                shared.input(|st, now| {
                    st.io.engine.stop_waiting(call);
                    st.pool.cancel(now, call);
                });
                let (at, err) = (shared.now(), e.clone());
                shared.emit(move |l| l.call_failed(call, &err, at));
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
            break Err(Error::Timeout);
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
            Ok(Msg::Answer(Err(e))) => break Err(Error::Connect(e)),
            // Fire whatever is due, then plan again.
            Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => shared.input(|_, _| {}),
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(Error::Connect(AcquireError::Shutdown)),
        }
    };
    shared.stop_waiting(call);
    answer
}

fn run_call(
    shared: &Arc<Shared>,
    call: CallId,
    rx: mpsc::Receiver<Msg>,
    parts: &http::request::Parts,
    body: &mut Body,
    facts: RequestFacts,
    (deadline, body_timeout): (Option<std::time::Instant>, Option<Duration>),
) -> Result<http::Response<ResponseBody>, Error> {
    let mut rx = rx;
    loop {
        let (connection, conn) = match wait_for_lease(shared, call, &rx, deadline)? {
            Lease::H1 { connection, conn } => (connection, conn),
            Lease::H2 { handle, .. } => match handle {},
        };
        let absolute = {
            let st = shared.hub.lock();
            st.pool.connection(connection).is_some_and(|c| c.route().uses_absolute_form())
        };
        let form = if absolute { TargetForm::Absolute } else { TargetForm::Origin };
        let req = h1::Request { parts, body, form, facts, deadline, body_timeout };
        let failure = match h1::exchange(shared, call, connection, conn, req) {
            Ok(response) => return Ok(response),
            Err(Attempted::Fatal(e)) => return Err(e),
            Err(Attempted::Failed(f)) => f,
        };
        let timed_out = deadline.is_some_and(|d| std::time::Instant::now() >= d);
        let (tx, next) = mpsc::channel();
        let outcome = shared.input(|st, now| {
            st.io.engine.wait(call, tx);
            let outcome = st.pool.exchange_failed(now, call, failure);
            if !matches!(outcome, Ok(FailureOutcome::Retrying(_))) {
                st.io.engine.stop_waiting(call);
            }
            outcome
        });
        match outcome {
            Ok(FailureOutcome::Retrying(_)) if timed_out => return Err(Error::Timeout),
            Ok(FailureOutcome::Retrying(reason)) => {
                tracing::debug!(%call, ?reason, "retrying");
                rx = next;
            }
            Ok(FailureOutcome::Failed(_)) if timed_out => return Err(Error::Timeout),
            Ok(FailureOutcome::Failed(e)) => return Err(Error::Exchange(Box::new(e))),
            Err(misuse) => return Err(Error::InvalidRequest(format!("internal: {misuse}"))),
        }
    }
}
