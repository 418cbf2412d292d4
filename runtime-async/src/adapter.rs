//! [`adapter_types!`](crate::adapter_types): the user-facing types of an
//! async adapter — `Client`, `ClientBuilder`, `RequestBuilder` — as real
//! types of the adapter's crate, so every method renders on its own docs
//! page (no type alias whose methods live elsewhere). Each wraps this crate's
//! generic [`Client`](crate::Client) for the adapter's runtime.

/// Defines `Client`, `ClientBuilder` and `RequestBuilder` for the runtime
/// `$rt` (a [`Runtime`](crate::Runtime) + `Default`), in the calling crate.
/// `$name` is the runtime's name for the docs.
#[macro_export]
macro_rules! adapter_types {
    ($rt:ty, $name:literal) => {
        #[doc = concat!("An HTTP client on ", $name, ". Cheap to clone; clones share the pool.")]
        /// Build one with [`Client::builder`]; every knob is on [`ClientBuilder`].
        /// It is a `tower::Service<http::Request<B>>` for any `http_body::Body`
        /// `B`, and derefs to the engine's generic client
        /// (`switchyard_async::Client`) for code written over every runtime.
        #[derive(Clone)]
        pub struct Client {
            inner: $crate::Client<$rt>,
            /// Redirects followed, bodies decoded (none by default).
            layers: $crate::redirect::Layers,
        }

        impl ::std::fmt::Debug for Client {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct("Client").finish_non_exhaustive()
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
            pub fn new() -> ::std::result::Result<Client, $crate::Error> {
                ClientBuilder::new().build()
            }

            $crate::switchyard_common::request_methods!(RequestBuilder);

            /// Sends a request; the URI must be absolute (`http://` or
            /// `https://`). Retries follow the core's decisions (BEHAVIOUR §6):
            /// never a silent replay of a request that may have been
            /// processed. Each call is a `tracing` span `call` under this
            /// crate's name as its target (method, URI without userinfo, call
            /// id, status).
            ///
            /// # Errors
            /// [`Error`]($crate::Error) says what failed and for which URL.
            pub fn send<B: Into<$crate::Body>>(
                &self,
                request: $crate::__http::Request<B>,
            ) -> impl ::std::future::Future<
                Output = ::std::result::Result<$crate::Response, $crate::Error>,
            > + Send
                   + 'static {
                let request = request.map(Into::into);
                if self.layers.any() {
                    let future = $crate::redirect::layered(self.direct(), self.layers, request);
                    return $crate::redirect::SendFuture::Following { future };
                }
                let span = $crate::switchyard_common::call_span!(module_path!(), request.method(), request.uri());
                $crate::redirect::SendFuture::Direct { future: self.inner.send_in(Ok(request), span) }
            }

            /// This client without its layers (each hop of a followed redirect
            /// is a call of its own).
            fn direct(&self) -> ClientService {
                ClientService { client: Client { inner: self.inner.clone(), layers: Default::default() } }
            }

            /// reqwest's name for [`send`](Self::send).
            ///
            /// # Errors
            /// As [`send`](Self::send).
            pub fn execute<B: Into<$crate::Body>>(
                &self,
                request: $crate::__http::Request<B>,
            ) -> impl ::std::future::Future<
                Output = ::std::result::Result<$crate::Response, $crate::Error>,
            > + Send
                   + 'static {
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
            pub fn service(&self) -> ClientService {
                ClientService { client: self.clone() }
            }

            /// The pool's counts and counters.
            #[must_use]
            pub fn stats(&self) -> $crate::PoolStats {
                self.inner.stats()
            }

            /// Closes every idle connection, and what would become idle without a
            /// call: connects kept for the pool after their call took another
            /// connection are cancelled, and a connection still draining the body
            /// of a dropped response closes when the drain ends (instead of joining
            /// the pool). Connections carrying live calls are left alone; so after
            /// dropped calls, one `evict_idle` leaves nothing open once the drains
            /// (bounded) end.
            pub fn evict_idle(&self) {
                self.inner.evict_idle();
            }

            /// The engine's generic client underneath (for code written over
            /// every runtime).
            #[must_use]
            pub fn into_generic(self) -> $crate::Client<$rt> {
                self.inner
            }
        }

        impl ::std::ops::Deref for Client {
            type Target = $crate::Client<$rt>;
            fn deref(&self) -> &$crate::Client<$rt> {
                &self.inner
            }
        }

        impl From<Client> for $crate::Client<$rt> {
            fn from(c: Client) -> $crate::Client<$rt> {
                c.inner
            }
        }

        impl $crate::switchyard_common::FromConfig for Client {
            type Runtime = $rt;
            fn from_config(
                config: $crate::switchyard_common::Config,
                runtime: $rt,
            ) -> ::std::result::Result<Self, $crate::Error> {
                <$crate::Client<$rt> as $crate::switchyard_common::FromConfig>::from_config(config, runtime)
                    .map(|inner| Client { inner, layers: Default::default() })
            }
        }

        impl<B> $crate::__tower_service::Service<$crate::__http::Request<B>> for Client
        where
            B: $crate::__http_body::Body + Send + 'static,
            B::Error: Into<$crate::BoxError>,
        {
            type Response = $crate::__http::Response<$crate::ResponseBody>;
            type Error = $crate::Error;
            type Future = $crate::BoxFuture<::std::result::Result<Self::Response, $crate::Error>>;
            fn poll_ready(
                &mut self,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::result::Result<(), $crate::Error>> {
                $crate::__tower_service::Service::<$crate::__http::Request<B>>::poll_ready(&mut self.inner, cx)
            }
            fn call(&mut self, request: $crate::__http::Request<B>) -> Self::Future {
                let client = self.clone();
                let (parts, body) = request.into_parts();
                let request = $crate::__http::Request::from_parts(parts, $crate::Body::__from_any(body));
                let future = client.send(request);
                Box::pin(async move { future.await.map($crate::Response::into_http) })
            }
        }

        /// Warm connections to a declared set of servers: each server's minimum
        /// is connected before the first request and kept as connections close
        /// (with backoff after failures); requests go through a server's
        /// [`ServerHandle`]. Cheap to clone; clones share the pool.
        ///
        /// ```no_run
        #[doc = concat!("# async fn run() -> Result<(), switchyard_", $name, "::Error> {")]
        #[doc = concat!("let manager = switchyard_", $name, "::Manager::builder()")]
        ///     .server("https://api.internal:8443", 2)
        ///     .build()?;
        /// manager.ready().await?;
        /// let response = manager.connection("api.internal")?.get("/health").send().await?;
        /// # drop(response); Ok(()) }
        /// ```
        #[derive(Clone)]
        pub struct Manager {
            inner: $crate::Manager<$rt>,
            client: Client,
        }

        impl ::std::fmt::Debug for Manager {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.inner.fmt(f)
            }
        }

        impl Manager {
            /// A builder with no server yet.
            pub fn builder() -> ManagerBuilder {
                ManagerBuilder { inner: $crate::Manager::<$rt>::builder() }
            }

            /// Waits until every server has its minimum open. Fails after the
            /// ready timeout with every server that is not ready, its readiness
            /// and last error ([`ErrorKind::NotReady`]($crate::ErrorKind::NotReady)).
            ///
            /// # Errors
            /// Not every server was ready in time.
            pub async fn ready(&self) -> ::std::result::Result<(), $crate::Error> {
                self.inner.ready().await
            }

            /// Each server's readiness, connections (open, idle, in use,
            /// connecting) and last error, in declaration order.
            #[must_use]
            pub fn status(&self) -> Vec<$crate::ServerStatus> {
                self.inner.status()
            }

            /// The handle for one declared server (`host`, `host:port` or its
            /// URL): requests through it use that server's warm connections.
            ///
            /// # Errors
            /// [`ErrorKind::NotDeclared`]($crate::ErrorKind::NotDeclared): not a
            /// server this manager was built with. No connection is opened.
            pub fn connection(&self, host: &str) -> ::std::result::Result<ServerHandle, $crate::Error> {
                let inner = self.inner.connection(host)?;
                Ok(ServerHandle { inner, client: self.client.clone() })
            }

            /// The client underneath (its stats, its listeners' events).
            #[must_use]
            pub fn client(&self) -> &Client {
                &self.client
            }

            /// Stops re-warming at once, fails calls waiting for a connection,
            /// closes idle connections, and lets calls in flight finish (their
            /// connections close then). Waits (up to the ready timeout) for them.
            pub async fn shutdown(&self) -> $crate::ShutdownReport {
                self.inner.shutdown().await
            }

            /// The engine's generic Manager underneath (for code written over
            /// every runtime).
            #[must_use]
            pub fn into_generic(self) -> $crate::Manager<$rt> {
                self.inner
            }

            /// A gateway over this Manager's servers (the `gateway` feature):
            /// local programs send plain HTTP/1.1 or HTTP/2 to a listener and
            /// each request rides the declared servers' warm connections.
            /// Defaults: 1,024 local connections and 4,096 requests at once,
            /// silent local connections closed after 60 s, 504 after 60 s
            /// without an upstream head, 10 s of shutdown grace, the status
            /// page for loopback clients, no access log.
            ///
            /// ```no_run
            /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
            #[doc = concat!("let manager = switchyard_", $name, "::Manager::builder().server(\"https://api.internal\", 2).build()?;")]
            #[doc = concat!("let listener = switchyard_", $name, "::gateway::bind(\"127.0.0.1:8080\".parse()?)?;")]
            /// // `curl -x http://127.0.0.1:8080 http://api.internal/v1/items` goes out over TLS.
            /// manager.gateway().access_log(|r| eprintln!("{r}")).serve(listener).await?;
            /// # Ok(()) }
            /// ```
            #[cfg(feature = "gateway")]
            #[cfg_attr(docsrs, doc(cfg(feature = "gateway")))]
            pub fn gateway(&self) -> $crate::gateway::Gateway<$rt> {
                self.inner.gateway()
            }

            /// Serves [`Manager::gateway`] with every default on `listener`
            /// until an error stops accepting (`gateway().serve_until` takes a
            /// shutdown signal).
            ///
            /// # Errors
            /// The listener failed (other than the transient errors of `accept`).
            #[cfg(feature = "gateway")]
            #[cfg_attr(docsrs, doc(cfg(feature = "gateway")))]
            pub async fn serve(
                &self,
                listener: <$rt as $crate::gateway::Listen>::Listener,
            ) -> ::std::io::Result<()> {
                self.inner.gateway().serve(listener).await
            }
        }

        /// Builds a [`Manager`]: servers, minimums, the client settings they share.
        #[must_use]
        pub struct ManagerBuilder {
            inner: $crate::ManagerBuilder<$rt>,
        }

        impl ::std::fmt::Debug for ManagerBuilder {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.inner.fmt(f)
            }
        }

        impl ManagerBuilder {
            /// Declares a server (`scheme://host[:port]`) with at least
            /// `min_warm` connections open.
            pub fn server(self, url: &str, min_warm: usize) -> Self {
                ManagerBuilder { inner: self.inner.server(url, min_warm) }
            }

            /// Declares a server with a whole policy (an HTTP/2 minimum in
            /// concurrent streams, its own backoff, proxies).
            pub fn server_with(self, url: &str, policy: $crate::WarmPolicy) -> Self {
                ManagerBuilder { inner: self.inner.server_with(url, policy) }
            }

            /// The client settings every server's connections use (every
            /// [`ClientBuilder`] knob).
            pub fn client(self, settings: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Self {
                ManagerBuilder {
                    inner: self.inner.client(|mut generic| {
                        let ours = ClientBuilder {
                            state: ::std::mem::take(generic.state_mut()),
                            runtime: Default::default(),
                            // A Manager's calls go unlayered.
                            layers: Default::default(),
                        };
                        let ours = settings(ours);
                        *generic.state_mut() = ours.state;
                        generic.runtime(ours.runtime)
                    }),
                }
            }

            /// Backoff for failed connects. Default: 1 s, ×1.6, ±20 %, at most 120 s.
            pub fn backoff(self, backoff: $crate::Backoff) -> Self {
                ManagerBuilder { inner: self.inner.backoff(backoff) }
            }

            /// How long [`Manager::ready`] waits, and how long a server may fail
            /// with no connection open before it is `down`. Default: 30 s.
            pub fn ready_timeout(self, timeout: ::std::time::Duration) -> Self {
                ManagerBuilder { inner: self.inner.ready_timeout(timeout) }
            }

            /// Builds the client and starts warming every server. Call it within
            /// the runtime (the connects are its tasks).
            ///
            /// # Errors
            /// A configuration error: no server, a server URL with a path or
            /// declared twice, or a client setting's error.
            pub fn build(self) -> ::std::result::Result<Manager, $crate::Error> {
                let inner = self.inner.build()?;
                let client = Client { inner: inner.client().clone(), layers: Default::default() };
                Ok(Manager { inner, client })
            }
        }

        /// Requests to one declared server ([`Manager::connection`]): paths, or
        /// URLs to that server only.
        #[derive(Clone)]
        pub struct ServerHandle {
            inner: $crate::ServerHandle<$rt>,
            client: Client,
        }

        impl ::std::fmt::Debug for ServerHandle {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.inner.fmt(f)
            }
        }

        impl ServerHandle {
            /// The server's URL.
            #[must_use]
            pub fn url(&self) -> &str {
                self.inner.url()
            }

            /// A request with `method` to `path` (or a URL to this server; a URL
            /// to another is an [`ErrorKind::NotDeclared`]($crate::ErrorKind::NotDeclared)
            /// at `send`).
            pub fn request(&self, method: $crate::__http::Method, path: &str) -> RequestBuilder {
                match self.inner.__target(path) {
                    Ok(uri) => RequestBuilder::new(self.client.clone(), method, uri),
                    Err(e) => RequestBuilder {
                        client: self.client.clone(),
                        request: Err(e),
                        body: Default::default(),
                        options: Default::default(),
                    },
                }
            }

            /// `GET path`.
            pub fn get(&self, path: &str) -> RequestBuilder {
                self.request($crate::__http::Method::GET, path)
            }

            /// `POST path`.
            pub fn post(&self, path: &str) -> RequestBuilder {
                self.request($crate::__http::Method::POST, path)
            }

            /// Sends a request whose URI is this server's.
            ///
            /// # Errors
            /// [`ErrorKind::NotDeclared`]($crate::ErrorKind::NotDeclared) for a
            /// URI to another server; otherwise as [`Client::send`].
            pub async fn send(
                &self,
                request: $crate::__http::Request<$crate::Body>,
            ) -> ::std::result::Result<$crate::Response, $crate::Error> {
                self.inner.send(request).await
            }
        }

        /// What a program imports to read responses as reqwest's do:
        /// `use <adapter>::prelude::*;` brings the response methods (`text`,
        /// `bytes`, `json`, `error_for_status`, …) into scope.
        pub mod prelude {
            pub use $crate::ResponseExt as _;
        }

        /// A [`Client`] as a `tower::Service<http::Request<Body>>` (see
        /// [`Client::service`]). Cheap to clone.
        #[derive(Clone, Debug)]
        pub struct ClientService {
            client: Client,
        }

        impl $crate::__tower_service::Service<$crate::__http::Request<$crate::Body>> for ClientService {
            type Response = $crate::__http::Response<$crate::ResponseBody>;
            type Error = $crate::Error;
            type Future = $crate::BoxFuture<::std::result::Result<Self::Response, $crate::Error>>;
            fn poll_ready(
                &mut self,
                _: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::result::Result<(), $crate::Error>> {
                ::std::task::Poll::Ready(Ok(()))
            }
            fn call(&mut self, request: $crate::__http::Request<$crate::Body>) -> Self::Future {
                let future = self.client.send(request);
                Box::pin(async move { future.await.map($crate::Response::into_http) })
            }
        }

        /// Builds a [`Client`]; every knob has a documented default.
        #[must_use]
        pub struct ClientBuilder {
            state: $crate::switchyard_common::BuilderState,
            runtime: $rt,
            layers: $crate::redirect::Layers,
        }

        impl Default for ClientBuilder {
            fn default() -> Self {
                ClientBuilder { state: Default::default(), runtime: Default::default(), layers: Default::default() }
            }
        }

        impl ::std::fmt::Debug for ClientBuilder {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct("ClientBuilder").field("pool", &self.state.pool).finish_non_exhaustive()
            }
        }

        impl ClientBuilder {
            /// A builder with every default.
            pub fn new() -> Self {
                Self::default()
            }
            #[doc = concat!("Where the client runs (see the ", $name, " runtime type). Default: its default.")]
            pub fn runtime(mut self, runtime: $rt) -> Self {
                self.runtime = runtime;
                self
            }
            $crate::switchyard_common::__client_builder_methods!();

            /// Resolves host names with an async resolver, run as a task on the
            /// runtime (no blocking thread). One that answers A and AAAA
            /// separately ([`AsyncResolve::per_family`]($crate::AsyncResolve::per_family))
            /// lets IPv6 attempts start as soon as AAAA answers (RFC 8305 §3).
            /// Replaces a resolver set before; `resolve` overrides still come
            /// first. Default: the system resolver, on the blocking pool.
            pub fn async_resolver(mut self, resolver: impl $crate::AsyncResolve) -> Self {
                self.state.async_resolver = Some(::std::sync::Arc::new(resolver));
                self
            }

            /// Opens every connection's byte stream with `connector` instead of
            /// a TCP (or Unix-socket) connect: the connector hook. The route's
            /// proxy handshake, TLS and HTTP run on top of the stream it
            /// returns; pooling, the race and events are unchanged, and the
            /// connect timeout bounds it. See [`Connect`]($crate::Connect) and
            #[doc = concat!("the crate docs' firecracker vsock example.")]
            ///
            /// ```
            #[doc = concat!("use switchyard_", $name, "::{Connecting, Route};")]
            /// // Every route to an in-memory pipe (a test double, say).
            /// let connector = |route: &Route| -> Connecting {
            ///     let _ = route.address();
            ///     Box::pin(async { Err(std::io::ErrorKind::ConnectionRefused.into()) })
            /// };
            #[doc = concat!("let client = switchyard_", $name, "::Client::builder().connector(connector).build().unwrap();")]
            /// ```
            pub fn connector(mut self, connector: impl $crate::Connect<$crate::Connecting>) -> Self {
                self.state.connector_by_name = !connector.uses_dns();
                let slot = $crate::ConnectorSlot(::std::sync::Arc::new(connector));
                self.state.connector = Some(::std::sync::Arc::new(slot));
                self
            }

            /// Validates the settings and builds the client. Needs no runtime.
            ///
            /// # Errors
            /// [`ErrorKind::Config`](crate::ErrorKind::Config): a malformed `resolve` override,
            /// unusable TLS roots or client identity, a setting out of range.
            pub fn build(self) -> ::std::result::Result<Client, $crate::Error> {
                let config = self.state.finish()?;
                let client = <Client as $crate::switchyard_common::FromConfig>::from_config(config, self.runtime)?;
                Ok(Client { layers: self.layers, ..client })
            }

            /// Follows redirects by `policy` (the `redirect` feature; reqwest's
            /// habit). **Default: not followed**, with or without the feature: a
            /// 3xx is the answer. See [`redirect`](crate::redirect) for the
            /// rules (same pool, credentials dropped across origins, 303 → GET).
            ///
            /// ```ignore
            /// let client = Client::builder().redirect(redirect::Policy::limited(5)).build()?;
            /// ```
            #[cfg(feature = "redirect")]
            pub fn redirect(mut self, policy: $crate::redirect::Policy) -> Self {
                self.layers.redirects = policy.max_hops();
                self
            }

            /// Asks for gzip bodies (`Accept-Encoding`) and decodes them (the
            /// `decompression` feature, tower-http's `Decompression`; reqwest's
            /// habit). **Default: off**, with or without the feature. A decoded
            /// response loses its `Content-Encoding` and `Content-Length`; a body
            /// that does not decode is `ErrorKind::Decode`. A request that sets
            /// its own `Accept-Encoding` is left as it is.
            #[cfg(feature = "decompression")]
            pub fn gzip(mut self, on: bool) -> Self {
                self.layers = self.layers.decoding($crate::redirect::Layers::GZIP, on);
                self
            }

            /// Asks for and decodes deflate bodies, as [`gzip`](Self::gzip).
            #[cfg(feature = "decompression")]
            pub fn deflate(mut self, on: bool) -> Self {
                self.layers = self.layers.decoding($crate::redirect::Layers::DEFLATE, on);
                self
            }

            /// Asks for and decodes brotli (`br`) bodies, as [`gzip`](Self::gzip).
            #[cfg(feature = "decompression")]
            pub fn brotli(mut self, on: bool) -> Self {
                self.layers = self.layers.decoding($crate::redirect::Layers::BROTLI, on);
                self
            }
        }

        /// A request being built: [`Client::get`], [`Client::post`], …,
        /// [`Client::request`]. Finish with `.send().await`. The first error
        /// (a bad URL, a header that is not a valid name or value) is kept
        /// and returned by `send`.
        #[must_use]
        pub struct RequestBuilder {
            client: Client,
            request: ::std::result::Result<$crate::__http::Request<()>, $crate::Error>,
            body: $crate::Body,
            options: $crate::RequestOptions,
        }

        impl ::std::fmt::Debug for RequestBuilder {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct("RequestBuilder").field("options", &self.options).finish_non_exhaustive()
            }
        }

        impl RequestBuilder {
            $crate::switchyard_common::__request_builder_methods!(Client, $crate::Body);

            /// Sends the request.
            ///
            /// # Errors
            /// The first error met while building, or how the call failed.
            pub fn send(
                self,
            ) -> impl ::std::future::Future<
                Output = ::std::result::Result<$crate::Response, $crate::Error>,
            > + Send
                   + 'static {
                let client = self.client.clone();
                let request = self.build();
                if client.layers.any() {
                    if let Ok(request) = request {
                        let future = $crate::redirect::layered(client.direct(), client.layers, request);
                        return $crate::redirect::SendFuture::Following { future };
                    }
                }
                let span = match &request {
                    Ok(r) => $crate::switchyard_common::call_span!(module_path!(), r.method(), r.uri()),
                    Err(_) => $crate::switchyard_common::__tracing::Span::none(),
                };
                $crate::redirect::SendFuture::Direct { future: client.inner.send_in(request, span) }
            }
        }
    };
}
