//! What every adapter's test harness shares, now that all adapters build from
//! the same [`ClientBuilder`] and fail with the same [`Error`]: applying the
//! suite's [`Config`], a hermetic resolver, classifying errors, and turning an
//! [`EventLog`] into [`EventRow`]s.

use std::collections::BTreeMap;
use std::net::IpAddr;

use switchyard_common::{ClientBuilder, Error, EventLog, FromConfig, HttpVersion, Resolve};
use switchyard_core::{StreamLimitPolicy, TlsFailure};

use crate::conformance::{Config, EventRow, Failure, Version};

/// Only the names the test configured; anything else does not exist.
#[derive(Debug, Clone, Default)]
pub struct Hermetic(pub BTreeMap<String, Vec<IpAddr>>);

impl Resolve for Hermetic {
    fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.0
            .get(host)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such host {host}")))
    }
}

/// A builder for any adapter's client with the suite's settings applied and
/// events recorded into `log`.
pub fn builder<C: FromConfig>(config: Config, log: &EventLog) -> ClientBuilder<C> {
    let mut b = ClientBuilder::<C>::new()
        .event_listener(log.clone())
        .attempt_delay(config.attempt_delay)
        .connect_timeout(config.connect_timeout)
        .idle_timeout(config.idle_timeout)
        .resolver(Hermetic(config.hosts.clone()))
        .handshake_timeout(config.handshake_timeout)
        .expect_continue_timeout(config.expect_continue_timeout)
        .http_version(match config.version {
            Version::Auto => HttpVersion::Auto,
            Version::Http1 => HttpVersion::Http1Only,
            Version::Http2 => HttpVersion::Http2Only,
        });
    if let Some(path) = config.unix_socket {
        b = b.unix_socket(path);
    }
    if let Some(ip) = config.tcp.local_address {
        b = b.local_address(ip);
    }
    if let Some(name) = config.tcp.interface {
        b = b.interface(name);
    }
    if let Some(k) = config.tcp.keepalive {
        b = b.tcp_keepalive(k.idle);
        if let Some(i) = k.interval {
            b = b.tcp_keepalive_interval(i);
        }
        if let Some(n) = k.retries {
            b = b.tcp_keepalive_retries(n);
        }
    }
    if let Some(r) = config.resolver {
        b = b.resolver(r.0);
    }
    if let Some(r) = config.async_resolver {
        b = b.async_resolver(r.0);
    }
    if let Some(d) = config.dns_cache_ttl {
        b = b.dns_cache_ttl(d);
    }
    if let Some(d) = config.dns_drain_grace {
        b = b.dns_drain_grace(d);
    }
    if let Some((stream, connection)) = config.http2_windows {
        b = b.http2_stream_window(stream).http2_connection_window(connection);
    }
    if let Some(n) = config.dns_cache_capacity {
        b = b.dns_cache_capacity(n);
    }
    if let Some(d) = config.resolution_delay {
        b = b.resolution_delay(d);
    }
    if let Some(n) = config.max_idle_per_host {
        b = b.max_idle_per_host(n);
    }
    if let Some((prepared, vouched)) = config.tls_config {
        b = b.tls_config(rustls::ClientConfig::clone(&prepared.0)).tls_config_coalescing(vouched);
    }
    if let Some(d) = config.ping_interval {
        b = b.http2_ping_interval(d);
    }
    if let Some(policy) = config.outliers {
        b = b.outlier_policy(policy);
    }
    if let Some(budget) = config.retry_budget {
        b = b.retry_budget(budget);
    }
    if let Some((d, jitter)) = config.max_lifetime {
        b = b.max_lifetime(d).max_lifetime_jitter(jitter);
    }
    if let Some(n) = config.max_per_host {
        b = b.max_connections_per_host(n);
    }
    if let Some(d) = config.read_timeout {
        b = b.read_timeout(d);
    }
    if let Some(d) = config.write_timeout {
        b = b.write_timeout(d);
    }
    if let Some(d) = config.head_timeout {
        b = b.head_timeout(d);
    }
    if let Some(d) = config.call_timeout {
        b = b.timeout(d);
    }
    if let Some(d) = config.body_timeout {
        b = b.body_timeout(d);
    }
    if config.wait_for_streams {
        b = b.http2_stream_limit_policy(StreamLimitPolicy::Wait);
    }
    if let Some(root) = config.root {
        b = b.add_root_certificate(root);
    }
    if !config.proxies.is_empty() {
        b = b.proxies(config.proxies);
    }
    if let Some(vars) = config.proxy_env {
        let env = switchyard_common::ProxyEnv::from_vars(|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .expect("the suite's proxy variables parse");
        b = b.proxy_selector(env);
    }
    b
}

/// The suite's classification of a client error.
#[must_use]
pub fn classify(e: &Error) -> Failure {
    // Through the public predicates only: what a user can match on.
    use switchyard_common::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidUrl(_) => return Failure::InvalidUrl,
        ErrorKind::Connect(_) if !e.is_timeout() => {
            return match e.tls_failure() {
                Some(TlsFailure::Hostname) => Failure::TlsHostname,
                Some(_) => Failure::TlsCertificate,
                None if e.is_dns() => Failure::Dns,
                None => Failure::Connect,
            }
        }
        _ => {}
    }
    if e.is_timeout() {
        return Failure::Timeout;
    }
    if e.is_shutdown() {
        return Failure::Shutdown;
    }
    match e.kind() {
        ErrorKind::Exchange(_) => Failure::Exchange(e.may_have_been_sent()),
        _ if e.is_body() => Failure::Body,
        _ => Failure::Other,
    }
}

/// An error as the suite reports it.
#[must_use]
pub fn failure(e: &Error) -> (Failure, String) {
    (classify(e), format!("{e:#}"))
}

/// The log's events as rows, calls by number.
#[must_use]
pub fn rows(log: &EventLog) -> Vec<EventRow> {
    log.events()
        .into_iter()
        .map(|e| {
            let call = e.call.map(|c| format!("{c}").trim_start_matches("call#").parse().unwrap_or(0));
            (call, e.name, e.detail)
        })
        .collect()
}

/// How a test drives an async adapter: block on a future, spawn one.
pub trait Executor: Send + Sync + 'static {
    /// Runs `f` to completion on this thread.
    fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> T;
    /// Runs `f` concurrently; the returned future yields its output.
    fn spawn<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
}

/// Any async adapter's client as the suite's [`TestClient`](crate::conformance::TestClient).
pub struct AsyncTestClient<R, E> {
    /// The client.
    pub client: switchyard_async::Client<R>,
    /// Its events.
    pub log: EventLog,
    /// How the test drives it.
    pub exec: E,
}

/// One request, whole body read, as the suite sees it.
///
/// # Errors
/// The call failed, classified.
/// The request builder for `req` (method, URL, options, headers).
fn request<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    req: &crate::conformance::Req,
) -> switchyard_async::RequestBuilder<R> {
    let mut builder = match req.method.as_str() {
        "POST" => client.post(&req.url),
        "PUT" => client.put(&req.url),
        "DELETE" => client.delete(&req.url),
        "HEAD" => client.head(&req.url),
        _ => client.get(&req.url),
    };
    if req.exclusive {
        builder = builder.exclusive();
    }
    for (n, v) in &req.headers {
        builder = builder.header(n, v);
    }
    builder
}

/// Sends `req` and reads its whole body.
pub async fn send<R: switchyard_async::Runtime>(
    client: &switchyard_async::Client<R>,
    req: crate::conformance::Req,
) -> Result<crate::conformance::Resp, (Failure, String)> {
    let builder = request(client, &req);
    let result = async {
        let body = if req.streamed {
            switchyard_async::Body::from_reader(std::io::Cursor::new(req.body), None)
        } else {
            switchyard_async::Body::from(req.body)
        };
        let mut response = builder.body(body).send().await?;
        let body = response.body_mut().collect().await?;
        Ok::<_, Error>(crate::conformance::Resp {
            status: response.status().as_u16(),
            version: response.version(),
            body: body.to_vec(),
        })
    }
    .await;
    result.map_err(|e| failure(&e))
}

impl<R: switchyard_async::Runtime, E: Executor> crate::conformance::TestClient for AsyncTestClient<R, E> {
    fn send(&self, req: crate::conformance::Req) -> Result<crate::conformance::Resp, (Failure, String)> {
        self.exec.block_on(send(&self.client, req))
    }
    fn hold(&self, req: crate::conformance::Req) -> Result<(u16, Box<dyn std::any::Any>), (Failure, String)> {
        let builder = request(&self.client, &req);
        let response = self.exec.block_on(builder.body(req.body).send()).map_err(|e| failure(&e))?;
        Ok((response.status().as_u16(), Box::new(response)))
    }
    fn send_all(
        &self,
        reqs: Vec<crate::conformance::Req>,
    ) -> Vec<Result<crate::conformance::Resp, (Failure, String)>> {
        let tasks: Vec<_> = reqs
            .into_iter()
            .map(|r| {
                let c = self.client.clone();
                self.exec.spawn(async move { send(&c, r).await })
            })
            .collect();
        self.exec.block_on(async {
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        })
    }
    /// Each caller is a task on the runtime, looping.
    fn send_loops(
        &self,
        callers: usize,
        each: usize,
        req: crate::conformance::Req,
    ) -> Vec<Result<crate::conformance::Resp, (Failure, String)>> {
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (c, r) = (self.client.clone(), req.clone());
                self.exec.spawn(async move {
                    let mut out = Vec::with_capacity(each);
                    for _ in 0..each {
                        out.push(send(&c, r.clone()).await);
                    }
                    out
                })
            })
            .collect();
        self.exec.block_on(async {
            let mut out = Vec::new();
            for t in tasks {
                out.extend(t.await);
            }
            out
        })
    }
    fn stats(&self) -> switchyard_core::PoolStats {
        self.client.stats()
    }
    fn events(&self) -> Vec<EventRow> {
        rows(&self.log)
    }
    fn clear_events(&self) {
        self.log.clear();
    }
    fn evict(&self) {
        self.exec.block_on(async { self.client.evict_idle() });
    }
    fn addresses(&self) -> usize {
        self.client.stats_by_address().len()
    }
    fn shutdown(&self, grace: std::time::Duration) -> switchyard_common::ShutdownReport {
        self.exec.block_on(self.client.shutdown(grace))
    }
}
