//! [`Client`] and [`ClientBuilder`]: the user-facing API.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use switchyard_core::http1::TargetForm;
use switchyard_core::pool::RequestFacts;
use switchyard_core::{
    AcquireOptions, Address, CallId, FailureOutcome, Family, PoolConfig, PoolStats, Protocol, Proxy,
    ResolverIdentity, StreamLimitPolicy, TlsIdentity,
};
use tokio::sync::oneshot;

use crate::body::Body;
use crate::driver::{self, Lease, Settings, Shared};
use crate::event::EventListener;
use crate::h1::{self, Attempted};
use crate::resolve::{Overrides, Resolve, SystemResolver};
use crate::tls::TlsSettings;
use crate::{Error, ResponseBody};

/// Which protocols calls may use.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum HttpVersion {
    /// `https`: HTTP/2 or HTTP/1.1 by ALPN; `http`: HTTP/1.1. Default.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Http1Only,
    /// HTTP/2 only: ALPN `h2` over TLS, prior knowledge over cleartext.
    Http2Only,
}

/// Per-request options, set with [`RequestBuilder`] (stored in the request's
/// extensions, so they also work with [`Client::send`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestOptions {
    /// A connection no one else will use (upgrades, tunnels).
    pub exclusive: bool,
    /// The caller vouches that this request may be sent twice (an idempotency key).
    pub retryable: bool,
    /// This call's timeout, instead of the client's.
    pub timeout: Option<Duration>,
}

/// Builds a [`Client`]. Every knob has a documented default.
///
/// ```
/// use std::time::Duration;
/// let client = switchyard_tokio::Client::builder()
///     .connect_timeout(Duration::from_secs(5))
///     .max_connections_per_host(8)
///     .idle_timeout(Duration::from_secs(30))
///     .resolve("api.internal:443", ["127.0.0.1".parse().unwrap()])
///     .build()
///     .unwrap();
/// # drop(client);
/// ```
#[must_use]
pub struct ClientBuilder {
    pool: PoolConfig,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    timeout: Option<Duration>,
    expect_continue_timeout: Duration,
    version: HttpVersion,
    allow_cleartext: bool,
    tls: TlsSettings,
    listener: Option<Arc<dyn EventListener>>,
    resolver: Arc<dyn Resolve>,
    overrides: HashMap<(String, u16), Vec<IpAddr>>,
    proxies: Vec<Proxy>,
    limits: switchyard_core::http1::Limits,
    errors: Vec<String>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            pool: PoolConfig::default(),
            read_timeout: None,
            write_timeout: None,
            timeout: None,
            expect_continue_timeout: Duration::from_secs(1),
            version: HttpVersion::Auto,
            allow_cleartext: true,
            tls: TlsSettings::default(),
            listener: None,
            resolver: Arc::new(SystemResolver),
            overrides: HashMap::new(),
            proxies: Vec::new(),
            limits: switchyard_core::http1::Limits::default(),
            errors: Vec::new(),
        }
    }
}

impl ClientBuilder {
    /// Bound on each TCP connect attempt. Default: 10 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.pool.race.connect_timeout = d;
        self
    }
    /// Bound on the winner's handshakes (TLS, proxy). Default: 10 s.
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.pool.race.handshake_timeout = d;
        self
    }
    /// Happy Eyeballs: time between connect attempts while earlier ones are in
    /// flight. Default: 250 ms.
    pub fn attempt_delay(mut self, d: Duration) -> Self {
        self.pool.race.attempt_delay = d;
        self
    }
    /// Which address family goes first when both are present. Default: IPv6.
    pub fn preferred_family(mut self, family: Family) -> Self {
        self.pool.race.plan.preferred_family = family;
        self
    }
    /// Idle connections older than this are closed. Default: 90 s.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.pool.keep_alive = d;
        self
    }
    /// Connections older than this take no new exchanges. Default: none.
    pub fn max_lifetime(mut self, d: Duration) -> Self {
        self.pool.max_lifetime = Some(d);
        self
    }
    /// Open plus connecting connections per host (Address). Default: unlimited.
    pub fn max_connections_per_host(mut self, n: usize) -> Self {
        self.pool.max_connections_per_address = Some(n);
        self
    }
    /// Open plus connecting connections in total. Default: unlimited.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.pool.max_connections_total = Some(n);
        self
    }
    /// Idle connections kept per host. Default: 32.
    pub fn max_idle_per_host(mut self, n: usize) -> Self {
        self.pool.max_idle_per_address = n;
        self
    }
    /// Idle connections kept in total. Default: unlimited.
    pub fn max_idle(mut self, n: usize) -> Self {
        self.pool.max_idle_total = Some(n);
        self
    }
    /// How long a call may wait for pool capacity. Default: 30 s.
    pub fn pool_timeout(mut self, d: Duration) -> Self {
        self.pool.acquire_timeout = d;
        self
    }
    /// Bound on each read from a connection. Default: none.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.read_timeout = Some(d);
        self
    }
    /// Bound on each write to a connection. Default: none.
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.write_timeout = Some(d);
        self
    }
    /// Bound on a whole call, until the response head. Default: none.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
    /// How long a request with `Expect: 100-continue` waits before sending its
    /// body anyway. Default: 1 s.
    pub fn expect_continue_timeout(mut self, d: Duration) -> Self {
        self.expect_continue_timeout = d;
        self
    }
    /// HTTP/2 at the peer's stream limit: open another connection (default) or wait.
    pub fn http2_stream_limit_policy(mut self, policy: StreamLimitPolicy) -> Self {
        self.pool.stream_limit_policy = policy;
        self
    }
    /// Which protocols to use. Default: [`HttpVersion::Auto`].
    pub fn http_version(mut self, version: HttpVersion) -> Self {
        self.version = version;
        self
    }
    /// Whether `http://` URLs are allowed. Default: yes.
    pub fn allow_cleartext(mut self, allow: bool) -> Self {
        self.allow_cleartext = allow;
        self
    }
    /// Trusts this root certificate (DER) in addition to the built-in roots.
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.tls.extra_roots.push(CertificateDer::from(der.into()));
        self
    }
    /// Whether the built-in (webpki) roots are trusted. Default: yes. Turning them
    /// off without adding a root is a configuration error, never "trust anything".
    pub fn built_in_roots(mut self, enabled: bool) -> Self {
        self.tls.built_in_roots = enabled;
        self
    }
    /// Presents this client certificate chain (DER, leaf first) and key (PKCS#8 DER).
    pub fn client_certificate(mut self, chain: Vec<Vec<u8>>, pkcs8_key: Vec<u8>) -> Self {
        let chain = chain.into_iter().map(CertificateDer::from).collect();
        let key = PrivateKeyDer::Pkcs8(pkcs8_key.into());
        self.tls.client_auth = Some((chain, Arc::new(key)));
        self
    }
    /// Receives every event. Default: none.
    pub fn event_listener(mut self, listener: impl EventListener) -> Self {
        self.listener = Some(Arc::new(listener));
        self
    }
    /// Resolves host names. Default: the system resolver.
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }
    /// Answers DNS for `host:port` with these addresses (like curl's `--resolve`).
    pub fn resolve(mut self, host_port: &str, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        match host_port.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?))) {
            Some((h, p)) => {
                let host = h.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
                self.overrides.insert((host, p), addrs.into_iter().collect());
            }
            None => self.errors.push(format!("resolve override {host_port:?} is not host:port")),
        }
        self
    }
    /// Sends calls through these proxies, in order (HTTP proxies: `CONNECT` for
    /// https, absolute-form for http; SOCKS5 without authentication, the origin's
    /// name resolved by the proxy). Default: direct.
    pub fn proxies(mut self, proxies: impl IntoIterator<Item = Proxy>) -> Self {
        self.proxies = proxies.into_iter().collect();
        self
    }
    /// Largest response head accepted. Default: 64 KiB.
    pub fn max_response_head_size(mut self, bytes: usize) -> Self {
        self.limits.max_head_size = bytes;
        self
    }
    /// Retries per call (BEHAVIOUR §6). Default: 3.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.pool.max_retries = n;
        self
    }

    /// Builds the client. Needs no runtime; the first call must run inside tokio.
    pub fn build(self) -> Result<Client, Error> {
        if let Some(e) = self.errors.first() {
            return Err(Error::Config(e.clone()));
        }
        // Validate TLS settings now rather than on the first https call.
        crate::tls::client_config(&self.tls, &[Protocol::Http1]).map_err(Error::Config)?;
        let resolver: Arc<dyn Resolve> = if self.overrides.is_empty() {
            self.resolver
        } else {
            Arc::new(Overrides { map: self.overrides, fallback: self.resolver })
        };
        let settings = Settings {
            read_timeout: self.read_timeout,
            write_timeout: self.write_timeout,
            expect_continue_timeout: self.expect_continue_timeout,
            limits: self.limits,
            tls: self.tls,
        };
        let shared = Shared::new(switchyard_core::Pool::new(self.pool), self.listener, resolver, settings);
        Ok(Client {
            inner: Arc::new(ClientInner {
                shared,
                timeout: self.timeout,
                version: self.version,
                allow_cleartext: self.allow_cleartext,
                proxies: self.proxies,
                timer_started: AtomicBool::new(false),
                closed: Arc::new(AtomicBool::new(false)),
            }),
        })
    }
}

struct ClientInner {
    shared: Arc<Shared>,
    timeout: Option<Duration>,
    version: HttpVersion,
    allow_cleartext: bool,
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

/// An HTTP client whose connection decisions come from `switchyard-core`. Cheap
/// to clone; clones share the pool.
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_tokio::Error> {
/// let client = switchyard_tokio::Client::builder().build()?;
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
    /// This call's timeout.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.options.timeout = Some(d);
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

impl Client {
    /// A builder with every default.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client with every default.
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
            tokio::spawn(driver::timer_task(
                Arc::downgrade(shared),
                Arc::clone(&shared.timer),
                Arc::clone(&self.inner.closed),
            ));
        }
    }

    fn address(&self, uri: &http::Uri) -> Result<Address, Error> {
        let invalid = |error| Error::InvalidUrl { url: uri.to_string(), error };
        let builder = Address::from_uri(uri).map_err(invalid)?;
        let https = uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let protocols: &[Protocol] = match (self.inner.version, https) {
            (HttpVersion::Auto, true) => &[Protocol::Http2, Protocol::Http1],
            (HttpVersion::Http1Only, _) | (HttpVersion::Auto, false) => &[Protocol::Http1],
            (HttpVersion::Http2Only, true) => &[Protocol::Http2],
            (HttpVersion::Http2Only, false) => &[Protocol::H2PriorKnowledge],
        };
        builder
            .protocols(protocols.iter().copied())
            .cleartext_permitted(self.inner.allow_cleartext)
            .tls_identity(TlsIdentity(1))
            .resolver_identity(ResolverIdentity(1))
            .build()
            .map_err(invalid)
    }

    /// Sends a request; the URI must be absolute (`http://` or `https://`).
    /// Retries follow the core's decisions (BEHAVIOUR §6): never a silent replay
    /// of a request that may have been processed.
    pub async fn send(&self, request: http::Request<Body>) -> Result<http::Response<ResponseBody>, Error> {
        self.ensure_timer();
        let shared = Arc::clone(&self.inner.shared);
        let (mut parts, mut body) = request.into_parts();
        let options = parts.extensions.remove::<RequestOptions>().unwrap_or_default();
        let address = self.address(&parts.uri)?;
        let timeout = options.timeout.or(self.inner.timeout);
        let facts = RequestFacts::new(&parts.method, options.retryable, body.is_replayable());
        let acquire = AcquireOptions {
            exclusive: options.exclusive,
            require_multiplexed: false,
            deadline: timeout.map(|t| shared.now() + t),
            proxies: self.inner.proxies.clone(),
        };
        let (tx, rx) = oneshot::channel();
        let call_parts = parts.clone();
        let call = shared.input(|st, now| {
            let id = st.pool.acquire(now, address, acquire);
            st.waiters.insert(id, tx);
            // Queued before the acquisition's own events, so listeners hear it first.
            shared.queue_note(st, move |l| l.call_start(id, &call_parts, now));
            id
        });
        let mut guard = CallGuard { shared: Arc::clone(&shared), call, armed: true };
        let run = run_call(&shared, call, rx, &parts, &mut body, facts);
        let result = match timeout {
            Some(t) => tokio::time::timeout(t, run).await.unwrap_or(Err(Error::Timeout)),
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
                st.waiters.remove(&call);
                st.pool.cancel(now, call);
            });
        }
    }
}

async fn run_call(
    shared: &Arc<Shared>,
    call: CallId,
    mut rx: oneshot::Receiver<Result<Lease, switchyard_core::AcquireError>>,
    parts: &http::request::Parts,
    body: &mut Body,
    facts: RequestFacts,
) -> Result<http::Response<ResponseBody>, Error> {
    loop {
        let lease = match rx.await {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => return Err(Error::Connect(e)),
            Err(_) => return Err(Error::Connect(switchyard_core::AcquireError::Shutdown)),
        };
        let attempt = match lease {
            Lease::H1 { connection, source, .. } => {
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
                let req = h1::Request { parts, body, form, facts };
                h1::exchange(shared, call, connection, source, req).await
            }
            Lease::H2 { connection, handle } => {
                crate::h2::exchange(shared, call, connection, handle, parts, body, facts).await
            }
        };
        let failure = match attempt {
            Ok(response) => return Ok(response),
            Err(Attempted::Fatal(e)) => return Err(e),
            Err(Attempted::Failed(f)) => f,
        };
        let (tx, next) = oneshot::channel();
        let outcome = shared.input(|st, now| {
            st.waiters.insert(call, tx);
            let outcome = st.pool.exchange_failed(now, call, failure);
            if !matches!(outcome, Ok(FailureOutcome::Retrying(_))) {
                st.waiters.remove(&call);
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
