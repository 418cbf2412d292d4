//! [`ClientBuilder`]: every knob of a switchyard client, with its default, shared
//! by all adapters. Each adapter's `Client` implements [`FromConfig`]; its
//! `ClientBuilder` is this builder for that client type.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use switchyard_core::{
    Address, Family, OutlierPolicy, PoolConfig, Protocol, Proxy, ResolverIdentity, RetryBudget,
    StreamLimitPolicy, TlsIdentity,
};

use crate::event::EventListener;
use crate::resolve::{Overrides, Resolve, SystemResolver};
use crate::tls::TlsSettings;
use crate::Error;

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
    /// HTTP/3 first (curl's `--http3`): for `https`, QUIC and TCP are raced
    /// per address — QUIC first, TCP one attempt delay (250 ms) later or at
    /// once when QUIC fails — and the first connected wins; a network where
    /// QUIC fails is remembered per address family, so later calls go
    /// straight to TCP for a while. `http` URLs use HTTP/1.1. Needs the
    /// adapter's `http3` feature (tokio, smol); without it QUIC attempts
    /// fail at once and TCP carries every call.
    Http3,
    /// HTTP/3 only (curl's `--http3-only`): QUIC over UDP to the origin, for
    /// `https` URLs; no fallback to TCP. An `http` URL, a proxy, a Unix
    /// socket or a connector hook is a typed error (QUIC goes to the origin
    /// itself). Needs the adapter's `http3` feature (tokio, smol).
    Http3Only,
}

/// Per-request options (stored in the request's extensions, so they also work
/// with a client's `send`; a request without them has the defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestOptions {
    /// A connection no one else will use (upgrades, tunnels).
    pub exclusive: bool,
    /// The caller vouches that this request may be sent twice (an idempotency key).
    pub retryable: bool,
    /// This call's timeout (the whole call, its response body included),
    /// instead of the client's.
    pub timeout: Option<Duration>,
    /// This call's bound until its response head, instead of the client's.
    pub head_timeout: Option<Duration>,
    /// This call's body timeout, instead of the client's.
    pub body_timeout: Option<Duration>,
}

/// A request's own Unix-domain socket (instead of the client's
/// `unix_socket`, or TCP): a request extension of its own, so the common call
/// carries nothing for it.
#[derive(Clone, Debug)]
pub struct UnixSocket(pub Arc<std::path::Path>);

/// A client's settings, as the builder collected and validated them.
/// Adapters read it in [`FromConfig::from_config`].
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// The core pool's settings.
    pub pool: PoolConfig,
    /// Bound on each read from a connection.
    pub read_timeout: Option<Duration>,
    /// Bound on each write to a connection.
    pub write_timeout: Option<Duration>,
    /// Bound on a whole call, its response body included.
    pub timeout: Option<Duration>,
    /// Bound on a call until its response head.
    pub head_timeout: Option<Duration>,
    /// Header fields every request gets unless it has its own (`User-Agent`
    /// among them, by default).
    pub default_headers: http::HeaderMap,
    /// Bound on reading a response body, from its head to its end.
    pub body_timeout: Option<Duration>,
    /// How long `Expect: 100-continue` waits before the body goes anyway.
    pub expect_continue_timeout: Duration,
    /// Which protocols calls may use.
    pub version: HttpVersion,
    /// Whether `http://` URLs are allowed.
    pub allow_cleartext: bool,
    /// Roots and client certificate.
    pub tls: TlsSettings,
    /// The rustls configs, built once with the client.
    pub tls_configs: crate::tls::TlsConfigs,
    /// The event listener, if any.
    pub listener: Option<Arc<dyn EventListener>>,
    /// The resolver, overrides applied.
    pub resolver: Arc<dyn Resolve>,
    /// The async resolver, overrides applied, when one was given (the async
    /// adapters use it instead of [`Config::resolver`]).
    pub async_resolver: Option<Arc<dyn crate::resolve::AsyncResolve>>,
    /// Every request goes to this Unix-domain socket (`ClientBuilder::unix_socket`).
    pub unix_socket: Option<std::path::PathBuf>,
    /// Socket options for TCP connections.
    pub tcp: crate::transport::TcpOptions,
    /// The adapter's connector hook, type-erased (the adapter's builder put
    /// in what it takes out).
    pub connector: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Whether the connector reaches hosts by name (Addresses skip DNS).
    pub connector_by_name: bool,
    /// Proxies, in order (when no selector chooses per URL).
    pub proxies: Vec<Proxy>,
    /// Chooses the proxies per URL (`proxy_selector`, `proxy_from_env`).
    pub selector: Option<Arc<dyn ProxySelector>>,
    /// HTTP/1.1 parsing limits.
    pub limits: switchyard_core::http1::Limits,
    /// HTTP/2 flow control.
    pub http2: Http2Settings,
    /// Redirects followed and bodies decoded (the async adapters).
    pub layers: crate::redirect::Layers,
    /// The Addresses built lately, found again by URI scheme and authority.
    addresses: Arc<AddressCache>,
    /// The adapter speaks HTTP/3 (its `http3` feature): with
    /// [`HttpVersion::Auto`], HTTP/3 alternatives learned from `Alt-Svc`
    /// fields are raced against TCP. Set by the adapter; default false.
    pub http3: bool,
    /// What `Alt-Svc` fields taught (used when `http3` is set).
    pub alt_svc: Arc<crate::alt_svc::AltSvcMemory>,
}

/// HTTP/2 flow-control windows: how much the server may send before the
/// client has read it, per stream and per connection (RFC 9113 §6.9). The
/// protocol's own default, 65,535 bytes, caps a download at one window per
/// round trip (about 650 KB/s at 100 ms); these are sized for throughput, as
/// Go's and OkHttp's are. Memory per stream is bounded by what the caller
/// leaves unread, at most the stream window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http2Settings {
    /// Per stream. Default: 16 MiB (OkHttp's; with 8 MiB a 256 MiB download
    /// from nginx over loopback took 1.4× as long).
    pub stream_window: u32,
    /// Per connection, shared by its streams. Default: 32 MiB.
    pub connection_window: u32,
    /// Start both windows at the protocol's 65,535 bytes and grow them to
    /// what the path carries (the bytes received in one PING round trip, a
    /// bandwidth-delay estimate, doubled while the window limits them), up
    /// to `stream_window` and `connection_window`. Default: off (both start
    /// at their full size, which costs nothing on a fast path; on with many
    /// slow-reading streams, where a full window each would buffer more).
    pub adaptive_window: bool,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings { stream_window: 16 << 20, connection_window: 32 << 20, adaptive_window: false }
    }
}

/// A proxy server: how a connection reaches the origin (scheme, host, port,
/// credentials) — what a [`ProxySelector`] returns. The adapters export it
/// under this name beside `Proxy`, the rule (reqwest's `Proxy`) that also
/// says which requests go through it.
pub type ProxyServer = Proxy;

/// Chooses the proxies for a request URL, in order (like OkHttp's
/// `ProxySelector`): an empty list goes direct. The route planner falls back
/// through the list and remembers failed proxy routes, as with a fixed list.
/// It returns [`ProxyServer`]s (a server: scheme, host, port, credentials),
/// not proxy *rules* (`Proxy::https(url)`, which also say which requests go
/// through). Any `Fn(&http::Uri) -> Vec<ProxyServer>` is one; so is
/// [`ProxyEnv`](crate::ProxyEnv).
///
/// ```
/// # use switchyard_common::{ProxySelector, ProxyServer};
/// let select = |uri: &http::Uri| -> Vec<ProxyServer> {
///     if uri.host() == Some("internal.test") { vec![] } else { vec![ProxyServer::http("10.0.0.1", 3128).unwrap()] }
/// };
/// assert!(select.select(&"http://internal.test/".parse().unwrap()).is_empty());
/// assert_eq!(select.select(&"http://example.com/".parse().unwrap()).len(), 1);
/// ```
pub trait ProxySelector: Send + Sync + 'static {
    /// The proxies for `uri`, in the order to try them.
    fn select(&self, uri: &http::Uri) -> Vec<ProxyServer>;

    /// The proxies and why, in words (the call's `proxy_select_end` event
    /// carries the reason). Default: [`ProxySelector::select`], no reason.
    fn select_explained(&self, uri: &http::Uri) -> (Vec<ProxyServer>, Option<String>) {
        (self.select(uri), None)
    }
}

impl<F: Fn(&http::Uri) -> Vec<ProxyServer> + Send + Sync + 'static> ProxySelector for F {
    fn select(&self, uri: &http::Uri) -> Vec<ProxyServer> {
        self(uri)
    }
}

impl ProxySelector for crate::ProxyEnv {
    fn select(&self, uri: &http::Uri) -> Vec<ProxyServer> {
        self.proxies_for(uri)
    }
    fn select_explained(&self, uri: &http::Uri) -> (Vec<ProxyServer>, Option<String>) {
        let (proxies, why) = self.explain(uri);
        (proxies, Some(why))
    }
}

/// The `User-Agent` a client sends unless told otherwise.
pub const DEFAULT_USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

impl Config {
    /// Adds the default header fields the request does not have itself (a
    /// name the request sets, even once, keeps only the request's values).
    pub fn apply_default_headers(&self, headers: &mut http::HeaderMap) {
        if headers.is_empty() {
            // Most requests set nothing of their own: a copy of the defaults
            // is the same map without a lookup and a hash per field.
            headers.clone_from(&self.default_headers);
            return;
        }
        for name in self.default_headers.keys() {
            if !headers.contains_key(name) {
                for value in self.default_headers.get_all(name) {
                    headers.append(name.clone(), value.clone());
                }
            }
        }
    }

    /// The HTTP/1.1 connection driver's settings (timeouts and limits; the drain
    /// and early-response bounds keep the core's defaults).
    #[must_use]
    pub fn driver_config(&self) -> switchyard_core::http1::DriverConfig {
        switchyard_core::http1::DriverConfig {
            limits: self.limits,
            expect_continue_timeout: self.expect_continue_timeout,
            read_timeout: self.read_timeout,
            write_timeout: self.write_timeout,
            ..switchyard_core::http1::DriverConfig::default()
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("pool", &self.pool)
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("timeout", &self.timeout)
            .field("head_timeout", &self.head_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("version", &self.version)
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The connector hook the adapter's builder stored, as the adapter's
    /// type `T` (its slot type).
    ///
    /// # Errors
    /// A connector stored by another adapter's builder.
    pub fn connector<T: Clone + 'static>(&self) -> Result<Option<T>, Error> {
        match &self.connector {
            None => Ok(None),
            Some(any) => any
                .downcast_ref::<T>()
                .cloned()
                .map(Some)
                .ok_or_else(|| Error::config("the connector was set for another adapter")),
        }
    }

    /// The core's [`Address`] for a request URI under these settings: scheme,
    /// host and port from the URI; protocols from [`HttpVersion`]; `supports_http2`
    /// false narrows `Auto` to HTTP/1.1 (an adapter without HTTP/2).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidUrl`](crate::ErrorKind::InvalidUrl) for a relative URI, a bad scheme, host or port, a
    /// cleartext URL when cleartext is off, or HTTP/2 asked of an adapter without it.
    pub fn address(&self, uri: &http::Uri, supports_http2: bool) -> Result<Address, Error> {
        let h3 = self.h3_alternative(uri);
        if let Some(found) = self.addresses.find(uri, supports_http2, h3) {
            return Ok(found);
        }
        let address = self.build_address(uri, supports_http2, h3)?;
        self.addresses.keep(uri, supports_http2, h3, &address);
        Ok(address)
    }

    /// Whether this client races HTTP/3 alternatives it learns (from
    /// `Alt-Svc` and HTTPS records): the adapter speaks HTTP/3 and the
    /// version is [`HttpVersion::Auto`], over TCP's own transport.
    #[must_use]
    pub fn races_http3_alternatives(&self) -> bool {
        self.http3
            && self.version == HttpVersion::Auto
            && self.unix_socket.is_none()
            && !self.connector_by_name
    }

    /// The port of an HTTP/3 alternative `uri`'s origin advertised in an
    /// `Alt-Svc` field, when this client races it: the adapter speaks
    /// HTTP/3 and the version is [`HttpVersion::Auto`].
    fn h3_alternative(&self, uri: &http::Uri) -> Option<u16> {
        if self.races_http3_alternatives() {
            self.alt_svc.h3_port(uri)
        } else {
            None
        }
    }

    /// Learns the `Alt-Svc` fields of a response to `uri` (see
    /// [`AltSvcMemory`](crate::alt_svc::AltSvcMemory)), when this client races
    /// HTTP/3 alternatives and the response came directly, not through a proxy.
    pub fn learn_alt_svc(&self, uri: &http::Uri, headers: &http::HeaderMap) {
        if !self.races_http3_alternatives() || !headers.contains_key(http::header::ALT_SVC) {
            return;
        }
        if self.proxies_for(uri).0.iter().any(|p| *p != switchyard_core::Proxy::Direct) {
            return;
        }
        self.alt_svc.learn(uri, headers);
    }

    /// As [`Config::address`], to a Unix-domain socket (a request's own
    /// `unix_socket`; not kept in the Address cache).
    ///
    /// # Errors
    /// As [`Config::address`].
    pub fn address_via(
        &self,
        uri: &http::Uri,
        supports_http2: bool,
        unix: &std::path::Path,
    ) -> Result<Address, Error> {
        self.build_address_with(uri, supports_http2, Some(unix), None)
    }

    /// The proxies to try for `uri`, in order, and why (the selector's
    /// words), from the selector when there is one, else the configured list.
    #[must_use]
    pub fn proxies_for(&self, uri: &http::Uri) -> (Vec<Proxy>, Option<String>) {
        match &self.selector {
            Some(selector) => selector.select_explained(uri),
            None => (self.proxies.clone(), None),
        }
    }

    /// The [tunnel](switchyard_core::AddressBuilder::tunnel) Address for
    /// `uri`'s origin: raw byte streams to its host and port (a gateway's
    /// `CONNECT`), through this client's resolver, connector hook and proxy
    /// rules, never TLS. Cleartext rules do not apply: the bytes are the
    /// tunnel client's own.
    ///
    /// # Errors
    /// A URI without an `http(s)` scheme, a host or a valid port.
    pub fn tunnel_address(&self, uri: &http::Uri) -> Result<Address, Error> {
        let invalid = |error| Error::invalid_url(&uri.to_string(), Some(error));
        let mut builder = Address::from_uri(uri).map_err(invalid)?;
        if let Some(path) = self.unix_socket.as_deref() {
            builder = builder.unix_socket(path);
        } else if self.connector_by_name {
            builder = builder.without_dns();
        }
        builder
            .tunnel()
            .tls_identity(TlsIdentity(1))
            .resolver_identity(ResolverIdentity(1))
            .build()
            .map_err(invalid)
    }

    fn build_address(
        &self,
        uri: &http::Uri,
        supports_http2: bool,
        h3: Option<u16>,
    ) -> Result<Address, Error> {
        self.build_address_with(uri, supports_http2, self.unix_socket.as_deref(), h3)
    }

    fn build_address_with(
        &self,
        uri: &http::Uri,
        supports_http2: bool,
        unix: Option<&std::path::Path>,
        h3: Option<u16>,
    ) -> Result<Address, Error> {
        let invalid = |error| Error::invalid_url(&uri.to_string(), Some(error));
        let mut builder = Address::from_uri(uri).map_err(invalid)?;
        if let Some(path) = unix {
            builder = builder.unix_socket(path);
        } else if self.connector_by_name {
            builder = builder.without_dns();
        }
        let https = uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let protocols: &[Protocol] = match (self.version, https) {
            (HttpVersion::Auto, true) if h3.is_some() && supports_http2 => {
                &[Protocol::Http3, Protocol::Http2, Protocol::Http1]
            }
            (HttpVersion::Auto, true) if h3.is_some() => &[Protocol::Http3, Protocol::Http1],
            (HttpVersion::Auto, true) if supports_http2 => &[Protocol::Http2, Protocol::Http1],
            (HttpVersion::Http1Only | HttpVersion::Auto, _) => &[Protocol::Http1],
            (HttpVersion::Http2Only, true) => &[Protocol::Http2],
            (HttpVersion::Http2Only, false) => &[Protocol::H2PriorKnowledge],
            (HttpVersion::Http3Only, _) => &[Protocol::Http3],
            (HttpVersion::Http3, true) if supports_http2 => {
                &[Protocol::Http3, Protocol::Http2, Protocol::Http1]
            }
            (HttpVersion::Http3, true) => &[Protocol::Http3, Protocol::Http1],
            (HttpVersion::Http3, false) => &[Protocol::Http1],
        };
        if let Some(port) = h3 {
            builder = builder.http3_port(port);
        }
        builder
            .protocols(protocols.iter().copied())
            .cleartext_permitted(self.allow_cleartext)
            .tls_identity(TlsIdentity(1))
            .resolver_identity(ResolverIdentity(1))
            .build()
            .map_err(invalid)
    }
}

/// The last few Addresses a client built, most recent first, keyed by what
/// they are built from: the URI's scheme and authority (the rest of the key,
/// the client's settings, is fixed) and whether the adapter has HTTP/2.
/// Most clients talk to a few hosts, and finding an Address costs a fraction
/// of building one (parsing, normalizing, hashing); a call that reuses the
/// same `Address` also makes the pool's comparisons pointer checks.
#[derive(Default)]
struct AddressCache(std::sync::Mutex<Vec<AddressKey>>);

/// A kept Address and what it was built from.
struct AddressKey {
    https: bool,
    authority: http::uri::Authority,
    http2: bool,
    /// The HTTP/3 alternative's port it offers, if any.
    h3: Option<u16>,
    address: Address,
}

impl AddressCache {
    /// How many Addresses are kept.
    const KEPT: usize = 8;

    fn find(&self, uri: &http::Uri, http2: bool, h3: Option<u16>) -> Option<Address> {
        let (https, authority) = Self::key(uri)?;
        let kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // As written: another spelling of the same host builds its own.
        kept.iter()
            .find(|k| {
                k.https == https
                    && k.http2 == http2
                    && k.h3 == h3
                    && k.authority.as_str() == authority.as_str()
            })
            .map(|k| k.address.clone())
    }

    fn keep(&self, uri: &http::Uri, http2: bool, h3: Option<u16>, address: &Address) {
        let Some((https, authority)) = Self::key(uri) else { return };
        let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() == Self::KEPT {
            kept.pop();
        }
        kept.insert(
            0,
            AddressKey { https, authority: authority.clone(), http2, h3, address: address.clone() },
        );
    }

    /// Only `http` and `https` URIs are kept (anything else is an error to
    /// build each time).
    fn key(uri: &http::Uri) -> Option<(bool, &http::uri::Authority)> {
        let https = match uri.scheme_str()? {
            s if s.eq_ignore_ascii_case("https") => true,
            s if s.eq_ignore_ascii_case("http") => false,
            _ => return None,
        };
        Some((https, uri.authority()?))
    }
}

/// A client type a [`ClientBuilder`] can build.
pub trait FromConfig: Sized {
    /// Where the client runs its I/O (an executor handle, or `()` for blocking).
    type Runtime: Default;
    /// What the adapter's connector hook returns per route (a future of a
    /// byte stream, or a blocking socket): see [`ClientBuilder::connector`].
    type Connecting: 'static;
    /// Builds the client.
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) when the adapter cannot honour a setting.
    fn from_config(config: Config, runtime: Self::Runtime) -> Result<Self, Error>;
}

/// The clients that follow redirects and decode bodies (the async adapters'):
/// their builders have [`redirect`](ClientBuilder::redirect),
/// [`gzip`](ClientBuilder::gzip), [`deflate`](ClientBuilder::deflate) and
/// [`brotli`](ClientBuilder::brotli).
pub trait Layered: FromConfig {}

/// Builds a client. Every knob has a documented default.
///
/// ```
/// use std::time::Duration;
/// # use switchyard_common::{ClientBuilder, Config, Error, FromConfig};
/// // Any adapter's client; here a stand-in that keeps the validated settings.
/// struct Settings(Config);
/// impl FromConfig for Settings {
///     type Runtime = ();
///     type Connecting = ();
///     fn from_config(config: Config, (): ()) -> Result<Self, Error> { Ok(Settings(config)) }
/// }
/// let built = ClientBuilder::<Settings>::new()
///     .connect_timeout(Duration::from_secs(5))
///     .max_connections_per_host(8)
///     .idle_timeout(Duration::from_secs(30))
///     .resolve("api.internal:443", ["127.0.0.1".parse().unwrap()])
///     .build()
///     .unwrap();
/// assert_eq!(built.0.pool.max_connections_per_address, Some(8));
/// assert!(ClientBuilder::<Settings>::new().resolve("no port", []).build().is_err());
/// ```
#[must_use]
pub struct ClientBuilder<C: FromConfig> {
    state: BuilderState,
    runtime: C::Runtime,
    client: PhantomData<fn() -> C>,
}

/// What a builder has collected: every setting, and the first errors met.
pub(crate) struct BuilderState {
    pub pool: PoolConfig,
    pub read_timeout: Option<Duration>,
    pub write_timeout: Option<Duration>,
    pub timeout: Option<Duration>,
    pub head_timeout: Option<Duration>,
    pub body_timeout: Option<Duration>,
    pub default_headers: http::HeaderMap,
    pub expect_continue_timeout: Duration,
    pub version: HttpVersion,
    pub allow_cleartext: bool,
    pub tls: TlsSettings,
    pub listeners: Vec<Arc<dyn EventListener>>,
    pub resolver: Arc<dyn Resolve>,
    pub async_resolver: Option<Arc<dyn crate::resolve::AsyncResolve>>,
    pub unix_socket: Option<std::path::PathBuf>,
    pub tcp: crate::transport::TcpOptions,
    pub connector: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The connector reaches hosts by name: Addresses skip DNS.
    pub connector_by_name: bool,
    pub overrides: HashMap<(String, u16), Vec<IpAddr>>,
    pub proxies: Vec<crate::ProxyRule>,
    pub selector: Option<Arc<dyn ProxySelector>>,
    pub proxy_env: bool,
    pub limits: switchyard_core::http1::Limits,
    pub http2: Http2Settings,
    pub layers: crate::redirect::Layers,
    pub errors: Vec<String>,
}

impl Default for BuilderState {
    fn default() -> Self {
        BuilderState {
            // Idle HTTP/1.1 connections are probed every second, so a server's
            // close is seen (and counted) while they sit in the pool.
            // Jitter (lifetimes, warm backoff) differs per client and process.
            pool: PoolConfig {
                probe_interval: Some(Duration::from_secs(1)),
                seed: random_seed(),
                ..PoolConfig::default()
            },
            read_timeout: None,
            write_timeout: None,
            timeout: None,
            head_timeout: None,
            body_timeout: None,
            default_headers: {
                let mut h = http::HeaderMap::new();
                h.insert(http::header::USER_AGENT, http::HeaderValue::from_static(DEFAULT_USER_AGENT));
                h
            },
            expect_continue_timeout: Duration::from_secs(1),
            version: HttpVersion::Auto,
            allow_cleartext: true,
            tls: TlsSettings::default(),
            listeners: Vec::new(),
            resolver: Arc::new(SystemResolver),
            async_resolver: None,
            unix_socket: None,
            tcp: crate::transport::TcpOptions::default(),
            connector: None,
            connector_by_name: false,
            overrides: HashMap::new(),
            proxies: Vec::new(),
            selector: None,
            // As reqwest and curl: proxies from the environment unless told otherwise.
            proxy_env: true,
            limits: switchyard_core::http1::Limits::default(),
            http2: Http2Settings::default(),
            layers: crate::redirect::Layers::default(),
            errors: Vec::new(),
        }
    }
}

impl<C: FromConfig> Default for ClientBuilder<C> {
    fn default() -> Self {
        ClientBuilder { state: BuilderState::default(), runtime: C::Runtime::default(), client: PhantomData }
    }
}

impl<C: FromConfig> std::fmt::Debug for ClientBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder").field("pool", &self.state.pool).finish_non_exhaustive()
    }
}

impl<C: FromConfig> ClientBuilder<C> {
    /// A builder with every default.
    pub fn new() -> Self {
        Self::default()
    }
    /// Where the client runs (an executor or runtime handle; see the adapter).
    /// Default: the adapter's default.
    pub fn runtime(mut self, runtime: C::Runtime) -> Self {
        self.runtime = runtime;
        self
    }
    /// Bound on reaching the origin, per attempt: the TCP connect and, through
    /// a proxy, its tunnel (SOCKS5, or `CONNECT` for an https origin), from
    /// the attempt's start. A proxy that never answers fails the attempt
    /// after this (or after the handshake timeout from TCP's end, if that
    /// ends first), with a tunnel timeout; TLS is bounded by
    /// [`handshake_timeout`](Self::handshake_timeout). Either is a timeout
    /// of the connect phase (`Error::is_timeout`) when every attempt ran out.
    /// Default: 10 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.state.pool.race.connect_timeout = d;
        self
    }
    /// Sends every request to this Unix-domain socket instead of over TCP
    /// (curl's `--unix-socket`): no DNS, no proxy; the URL's host still
    /// goes in `Host` (and in TLS for `https://`). HTTP/1.1, or HTTP/2 with
    /// prior knowledge (`http_version(Http2Only)`) or over TLS. Connections
    /// are pooled per socket path. A request's own `unix_socket` wins.
    /// Unix only: elsewhere a connect fails with a typed error.
    pub fn unix_socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.state.unix_socket = Some(path.into());
        self
    }
    /// Binds every TCP connection to this local IP before connecting (a
    /// multi-homed host's source address). A route of the other family
    /// fails as a connect error naming both; the race moves on. Default: the
    /// system's choice.
    pub fn local_address(mut self, ip: impl Into<IpAddr>) -> Self {
        self.state.tcp.local_address = Some(ip.into());
        self
    }
    /// Sends every TCP connection through this network interface
    /// (`SO_BINDTODEVICE`; Linux and Android, elsewhere a config error at
    /// build; binding usually needs `CAP_NET_RAW`).
    pub fn interface(mut self, name: impl Into<String>) -> Self {
        self.state.tcp.interface = Some(name.into());
        self
    }
    /// TCP keep-alive on every connection: a probe after `idle` without
    /// traffic (with the system's interval and count unless set with
    /// [`tcp_keepalive_interval`](Self::tcp_keepalive_interval) and
    /// [`tcp_keepalive_retries`](Self::tcp_keepalive_retries)). A dead peer is
    /// then found by the system even on an idle pooled connection.
    /// Default: off.
    pub fn tcp_keepalive(mut self, idle: Duration) -> Self {
        self.state.tcp.keepalive_mut().idle = idle;
        self
    }
    /// Time between TCP keep-alive probes (turns keep-alive on, idle 60 s,
    /// unless [`tcp_keepalive`](Self::tcp_keepalive) set it).
    pub fn tcp_keepalive_interval(mut self, interval: Duration) -> Self {
        self.state.tcp.keepalive_mut().interval = Some(interval);
        self
    }
    /// Unanswered TCP keep-alive probes before the system drops the
    /// connection (turns keep-alive on, idle 60 s, unless set).
    pub fn tcp_keepalive_retries(mut self, retries: u32) -> Self {
        self.state.tcp.keepalive_mut().retries = Some(retries);
        self
    }
    /// `TCP_USER_TIMEOUT` on every connection (Linux): sent data
    /// unacknowledged this long drops the connection, so a peer that
    /// vanished while a request or body was being written is found in
    /// that time, not after the system's ~15 minutes of retransmissions.
    /// Pairs with [`tcp_keepalive`](Self::tcp_keepalive) for idle
    /// connections and [`http2_ping_interval`](Self::http2_ping_interval)
    /// for HTTP/2. Default: off (the system's behaviour).
    pub fn tcp_user_timeout(mut self, timeout: Duration) -> Self {
        self.state.tcp.user_timeout = Some(timeout);
        self
    }
    /// HTTP/2 keep-alive: every HTTP/2 connection, idle or busy, sends a
    /// PING this often; one whose PONG does not come within
    /// [`http2_ping_timeout`](Self::http2_ping_timeout) takes no new
    /// streams and, idle, closes. A peer gone silently (a NAT that dropped
    /// the mapping, a host that lost power) is found within interval +
    /// timeout instead of at the next call's timeout (golang/go#31643).
    /// At least 10 s (gRPC clients' floor, so a server enforcing gRPC's
    /// keep-alive policy is not pinged faster than it allows; gRPC's own
    /// servers allow one PING per 5 minutes by default): less is a
    /// configuration error. Default: off (as hyper and Go).
    pub fn http2_ping_interval(mut self, interval: Duration) -> Self {
        self.state.pool.ping_interval = Some(interval);
        self
    }
    /// How long a PING waits for its PONG, for keep-alive
    /// ([`http2_ping_interval`](Self::http2_ping_interval)) and for a
    /// stalled read. Default: 1 s.
    pub fn http2_ping_timeout(mut self, timeout: Duration) -> Self {
        self.state.pool.pong_timeout = timeout;
        self
    }
    /// Whether names with pooled connections are looked up again as
    /// their cached answers expire, draining connections to addresses
    /// the answers no longer give (a blue/green switch, a scaled-in
    /// instance): they take no new exchanges and close once idle, and new
    /// calls go to the new addresses. An address must be absent from
    /// every answer for a grace period first
    /// ([`dns_drain_grace`](Self::dns_drain_grace)), so names that rotate
    /// through many addresses keep their connections. At most one round
    /// a second, 16 names a round, each name once per time to live (the
    /// cache's 60 s default). Needs the DNS cache. Default: on (no HTTP
    /// client library drains on DNS changes; Envoy does, with a max
    /// connection age).
    pub fn dns_refresh(mut self, refresh: bool) -> Self {
        self.state.pool.dns_refresh = refresh;
        self
    }
    /// How long an address must be missing from every DNS answer for
    /// its name before connections to it drain
    /// ([`dns_refresh`](Self::dns_refresh)): the longer of this and three
    /// times the answer's time to live. Services that answer each query
    /// with one or a few of many addresses (object stores, CDNs, cloud
    /// load balancers) name every serving address again within it.
    /// Default: 60 s.
    pub fn dns_drain_grace(mut self, grace: Duration) -> Self {
        self.state.pool.dns_drain_grace = grace;
        self
    }
    /// Bound on each handshake after TCP: a proxy's (SOCKS5, or `CONNECT`
    /// for an https origin) from TCP's end — with
    /// [`connect_timeout`](Self::connect_timeout) from the attempt's start,
    /// whichever ends first — and the winner's TLS handshake from the
    /// tunnel's end; for HTTP/2, also how long a new connection may take to
    /// send its first SETTINGS. Default: 10 s.
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.state.pool.race.handshake_timeout = d;
        self
    }
    /// Happy Eyeballs: time between connect attempts while earlier ones are in
    /// flight. Default: 250 ms.
    pub fn attempt_delay(mut self, d: Duration) -> Self {
        self.state.pool.race.attempt_delay = d;
        self
    }
    /// Which address family goes first when both are present. Default: IPv6.
    pub fn preferred_family(mut self, family: Family) -> Self {
        self.state.pool.race.plan.preferred_family = family;
        self
    }
    /// Idle connections older than this are closed. Default: 90 s. Zero is a
    /// configuration error (to keep no idle connection: `max_idle_per_host(0)`).
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.state.pool.keep_alive = d;
        self
    }
    /// Connections older than this take no new exchanges: an HTTP/1.1
    /// connection closes when its exchange ends, an HTTP/2 one opens no new
    /// stream and closes after its last. Each connection's lifetime is
    /// moved by up to ±10 % (seeded; [`max_lifetime_jitter`](Self::max_lifetime_jitter))
    /// so connections opened together retire apart, and new ones reach the
    /// instances a scaled-out service added since. Default: none (as
    /// reqwest, hyper-util and Go; Envoy's `max_connection_duration`).
    pub fn max_lifetime(mut self, d: Duration) -> Self {
        self.state.pool.max_lifetime = Some(d);
        self
    }
    /// Bounds every host's retries to a share of its recent calls (a
    /// retry of a stream a GOAWAY left unprocessed is not charged: that is
    /// a server rotating connections, as nginx's `keepalive_requests`
    /// does), so a failing server sees a bounded multiple of the
    /// load rather than every call times its retry limit; past it a
    /// failure that would have been retried fails with "retry budget
    /// exhausted" ([`Error::is_retry_budget_exhausted`]). Default: 20 % of
    /// the host's calls in the last 10 s plus 10 per second (Finagle's
    /// default budget; Envoy's `retry_budget` is the same idea in a
    /// proxy). `None`: only the per-call limits ([`max_retries`](Self::max_retries)) apply.
    ///
    /// [`Error::is_retry_budget_exhausted`]: crate::Error::is_retry_budget_exhausted
    pub fn retry_budget(mut self, budget: Option<RetryBudget>) -> Self {
        self.state.pool.retry_budget = budget;
        self
    }
    /// Outlier ejection per route: a route (one IP address, or one
    /// proxy) whose connects or exchanges fail this many times in a
    /// row is ejected: planned after every other route of its host for
    /// a backoff (10 s, doubling with each ejection in a row, at most
    /// 300 s, ±20 %), its pooled connections take no new call when
    /// the host has another route, and then one attempt tries it
    /// (half-open): a success restores it, a failure ejects it again.
    /// A host whose every route is ejected still gets a try. A reused
    /// connection failing before any response byte (the stale
    /// keep-alive race) does not count; a completed exchange ends the
    /// streak. Default: 5 (Envoy's `consecutive_gateway_failure`; no
    /// HTTP client library ejects); 0 turns it off.
    pub fn eject_after_failures(mut self, n: u32) -> Self {
        self.state.pool.outliers.consecutive_failures = n;
        self
    }
    /// Whether a 5xx answer counts toward a route's ejection
    /// ([`eject_after_failures`](Self::eject_after_failures)). Default:
    /// off, as the status is the application's and one failing endpoint
    /// would eject a healthy server; on for a fleet of identical
    /// replicas behind one name (Envoy's `consecutive_5xx`).
    pub fn eject_on_server_errors(mut self, on: bool) -> Self {
        self.state.pool.outliers.server_errors = on;
        self
    }
    /// The whole ejection policy at once, the backoff included (see
    /// [`eject_after_failures`](Self::eject_after_failures)).
    pub fn outlier_policy(mut self, policy: OutlierPolicy) -> Self {
        self.state.pool.outliers = policy;
        self
    }
    /// Seeds the pool's jitter (connections' lifetimes, warm reconnect
    /// backoff), so a test or a simulation sees the same instants each
    /// run. Default: a random seed per client.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.state.pool.seed = seed;
        self
    }
    /// How far each connection's [`max_lifetime`](Self::max_lifetime) is
    /// moved, as a share of it, either way: `0.1` is ±10 %. Default: 0.1;
    /// `0.0` retires every connection exactly at the max lifetime. Outside
    /// `[0, 1]` is a configuration error.
    pub fn max_lifetime_jitter(mut self, share: f64) -> Self {
        self.state.pool.max_lifetime_jitter = share;
        self
    }
    /// Open plus connecting connections per host (Address). Default: unlimited.
    pub fn max_connections_per_host(mut self, n: usize) -> Self {
        self.state.pool.max_connections_per_address = Some(n);
        self
    }
    /// Open plus connecting connections in total. Default: unlimited.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.state.pool.max_connections_total = Some(n);
        self
    }
    /// Idle connections kept per host. Default: 32. Zero: none is kept (each
    /// connection closes when its exchange ends).
    pub fn max_idle_per_host(mut self, n: usize) -> Self {
        self.state.pool.max_idle_per_address = n;
        self
    }
    /// Idle connections kept in total, across hosts; past it the least recently
    /// used one closes. Default: 100. When a connect fails for lack of file
    /// descriptors, or the total connection cap is reached, the least recently
    /// used idle connection is closed to make room, whatever this cap.
    pub fn max_idle(mut self, n: usize) -> Self {
        self.state.pool.max_idle_total = Some(n);
        self
    }
    /// How often idle HTTP/1.1 connections are probed for a server's close
    /// (`None`: only before reuse, which always happens). Default: 1 s. A zero
    /// interval is a configuration error.
    pub fn idle_probe_interval(mut self, every: Option<Duration>) -> Self {
        if every.is_some_and(|d| d.is_zero()) {
            self.state.errors.push("idle_probe_interval must be longer than zero (None disables it)".into());
        }
        self.state.pool.probe_interval = every;
        self
    }
    /// How long a call may wait for pool capacity. Default: 30 s. Zero: fail at
    /// once when no capacity is free.
    pub fn pool_timeout(mut self, d: Duration) -> Self {
        self.state.pool.acquire_timeout = d;
        self
    }
    /// Bound on each read from a connection. Default: none.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.state.read_timeout = Some(d);
        self
    }
    /// Bound on each write to a connection. Default: none.
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.state.write_timeout = Some(d);
        self
    }
    /// Bound on a whole call, from `send` to the end of its response body
    /// (as reqwest's `timeout`): waiting for a connection, the exchange, and
    /// reading the body. Past it the call fails with a timeout whose
    /// [`phase`](crate::Error::timeout_phase) says where it was; a body past it
    /// fails and its connection is closed (HTTP/1.1) or its stream reset
    /// (HTTP/2). Per request: `RequestBuilder::timeout`. Default: none.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.state.timeout = Some(d);
        self
    }
    /// Bound on a call until its response head only (the body is then bound
    /// by [`timeout`](Self::timeout) and [`body_timeout`](Self::body_timeout),
    /// if set). Per request: `RequestBuilder::head_timeout`. Default: none.
    pub fn head_timeout(mut self, d: Duration) -> Self {
        self.state.head_timeout = Some(d);
        self
    }
    /// Header fields every request gets unless it sets the same name itself.
    /// Adds to the defaults (`User-Agent`); a name given here replaces its
    /// default.
    pub fn default_headers(mut self, headers: crate::__http::HeaderMap) -> Self {
        let mut last = None;
        for (name, value) in headers {
            let name = match name {
                Some(n) => {
                    self.state.default_headers.remove(&n);
                    last = Some(n.clone());
                    n
                }
                None => match &last {
                    Some(n) => n.clone(),
                    None => continue,
                },
            };
            self.state.default_headers.append(name, value);
        }
        self
    }
    /// The `User-Agent` sent unless a request has its own. Default:
    /// `switchyard/<version>`. An empty string sends none.
    pub fn user_agent(mut self, agent: &str) -> Self {
        if agent.is_empty() {
            self.state.default_headers.remove(crate::__http::header::USER_AGENT);
            return self;
        }
        match crate::__http::HeaderValue::try_from(agent) {
            Ok(v) => {
                self.state.default_headers.insert(crate::__http::header::USER_AGENT, v);
            }
            Err(_) => self.state.errors.push(format!("user_agent {agent:?} is not a valid header value")),
        }
        self
    }
    /// Bound on reading each response body, from its head to its end (HTTP/1.1
    /// and HTTP/2): past it, the body fails with a timeout and its connection is
    /// closed (HTTP/1.1) or its stream reset (HTTP/2). [`timeout`](Self::timeout)
    /// bounds the whole call as well; whichever ends first applies.
    /// Per request: `RequestBuilder::body_timeout`. Default: none.
    pub fn body_timeout(mut self, d: Duration) -> Self {
        self.state.body_timeout = Some(d);
        self
    }
    /// How long a request with `Expect: 100-continue` waits before sending its
    /// body anyway. Default: 1 s. Zero: send the body without waiting.
    pub fn expect_continue_timeout(mut self, d: Duration) -> Self {
        self.state.expect_continue_timeout = d;
        self
    }
    /// HTTP/2 at the peer's stream limit: open another connection (default) or wait.
    pub fn http2_stream_limit_policy(mut self, policy: StreamLimitPolicy) -> Self {
        self.state.pool.stream_limit_policy = policy;
        self
    }
    /// HTTP/2: how much a server may send on one stream before the caller
    /// reads it (the stream's flow-control window, RFC 9113 §6.9). Larger
    /// windows carry large bodies at full speed over long round trips.
    /// Default: 16 MiB (the protocol's own, 65,535 bytes, caps a download at
    /// one window per round trip). At most 2^31 − 1.
    ///
    /// It is also what one body nobody reads may hold in memory: a stalled
    /// reader holds its own stream's window and nothing of the
    /// connection's (connection credit goes back as data arrives), so the
    /// other streams on the connection keep flowing; the memory bound is
    /// streams × this window.
    pub fn http2_stream_window(mut self, bytes: u32) -> Self {
        self.state.http2.stream_window = bytes;
        self
    }
    /// HTTP/2: the connection's flow-control window, shared by its streams:
    /// what may be in flight on the connection at once (credit returns as
    /// data arrives, read or not). Default: 32 MiB. At most 2^31 − 1.
    pub fn http2_connection_window(mut self, bytes: u32) -> Self {
        self.state.http2.connection_window = bytes;
        self
    }
    /// HTTP/2: start the flow-control windows at the protocol's 65,535
    /// bytes and grow them, per connection, to the bytes the path carries
    /// in one PING round trip (doubling while the window is the limit,
    /// or while the server has to wait for credit as data flows), up to [`http2_stream_window`](Self::http2_stream_window) and
    /// [`http2_connection_window`](Self::http2_connection_window). At most
    /// one PING is out at a time, and none once the windows are full size
    /// or while data does not flow. Default: off (full-size windows from
    /// the start).
    pub fn http2_adaptive_window(mut self, adaptive: bool) -> Self {
        self.state.http2.adaptive_window = adaptive;
        self
    }
    /// Which protocols to use. Default: [`HttpVersion::Auto`].
    pub fn http_version(mut self, version: HttpVersion) -> Self {
        self.state.version = version;
        self
    }
    /// Whether `http://` URLs are allowed. Default: yes.
    pub fn allow_cleartext(mut self, allow: bool) -> Self {
        self.state.allow_cleartext = allow;
        self
    }
    /// Trusts this root certificate (DER) in addition to the built-in roots.
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.state.tls.extra_roots.push(CertificateDer::from(der.into()));
        self
    }
    /// Trusts every certificate in this PEM text (one or more `CERTIFICATE`
    /// blocks) in addition to the built-in roots. A text with no certificate,
    /// or a block that does not decode, is a configuration error that says
    /// "root certificate".
    pub fn add_root_certificate_pem(mut self, pem: &str) -> Self {
        use rustls::pki_types::pem::PemObject;
        let mut found = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            match cert {
                Ok(c) => {
                    found += 1;
                    self.state.tls.extra_roots.push(c.into_owned());
                }
                Err(e) => {
                    self.state.errors.push(format!("root certificate: the PEM does not decode ({e})"));
                    return self;
                }
            }
        }
        if found == 0 {
            self.state.errors.push("root certificate: no CERTIFICATE block in the PEM".into());
        }
        self
    }
    /// Presents this client identity from PEM: the certificate chain (leaf
    /// first) and its private key (PKCS#8, PKCS#1 or SEC1). A PEM that does
    /// not decode is a configuration error that says "client identity".
    pub fn client_identity_pem(mut self, chain_pem: &str, key_pem: &str) -> Self {
        use rustls::pki_types::pem::PemObject;
        let chain: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(chain_pem.as_bytes()).collect();
        match (chain, PrivateKeyDer::from_pem_slice(key_pem.as_bytes())) {
            (Ok(chain), Ok(key)) if !chain.is_empty() => {
                self.state.tls.client_auth = Some((chain, Arc::new(key)));
            }
            (Ok(_), Ok(_)) => {
                self.state.errors.push("client identity: no CERTIFICATE block in the chain PEM".into())
            }
            (Err(e), _) => {
                self.state.errors.push(format!("client identity: the certificate PEM does not decode ({e})"))
            }
            (_, Err(e)) => {
                self.state.errors.push(format!("client identity: the private key PEM does not decode ({e})"))
            }
        }
        self
    }
    /// Uses this rustls config for every TLS connection: its roots, verifier,
    /// client identity and protocol versions (ALPN is still set per
    /// connection by the client). It replaces the root and client-identity
    /// settings: combining it with them is a configuration error.
    ///
    /// Its verifier is the caller's, and what it checks is unknown to
    /// switchyard (it may accept anything, or pin a key per host), so a
    /// connection made with it is never coalesced onto for another host
    /// unless [`tls_config_coalescing`](Self::tls_config_coalescing) vouches
    /// for it.
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> Self {
        self.state.tls.prepared = Some(Arc::new(config));
        self
    }
    /// Vouches that the [`tls_config`](Self::tls_config) verifier checks that
    /// the certificate covers the host name, as switchyard's own does: its
    /// HTTP/2 connections may then carry requests for other hosts the
    /// certificate covers (coalescing, BEHAVIOUR §5). Default: off.
    pub fn tls_config_coalescing(mut self, allow: bool) -> Self {
        self.state.tls.prepared_coalesces = allow;
        self
    }
    /// **Development only: accepts any server certificate**, for any name —
    /// no verification at all (the handshake's signatures are still checked).
    /// Building such a client logs a warning (`tracing`, target `switchyard`);
    /// its connections are never coalesced (an unverified certificate proves no
    /// name), and every event about them says "certificate NOT verified"
    /// (`Event::unverified_tls`). Default: off.
    pub fn danger_accept_invalid_certificates(mut self, accept: bool) -> Self {
        self.state.tls.accept_invalid_certificates = accept;
        self
    }
    /// Whether the built-in (webpki) roots are trusted. Default: yes. Turning them
    /// off without adding a root is a configuration error, never "trust anything".
    pub fn built_in_roots(mut self, enabled: bool) -> Self {
        self.state.tls.built_in_roots = enabled;
        self
    }
    /// Presents this client certificate chain (DER, leaf first) and key (PKCS#8 DER).
    pub fn client_certificate(mut self, chain: Vec<Vec<u8>>, pkcs8_key: Vec<u8>) -> Self {
        let chain = chain.into_iter().map(CertificateDer::from).collect();
        let key = PrivateKeyDer::Pkcs8(pkcs8_key.into());
        self.state.tls.client_auth = Some((chain, Arc::new(key)));
        self
    }
    /// Adds a listener that receives every event. Several may be added; each
    /// hears every event, in the order they were added. Default: none.
    pub fn event_listener(mut self, listener: impl EventListener) -> Self {
        self.state.listeners.push(Arc::new(listener));
        self
    }
    /// Resolves host names with a blocking resolver (run off the executor).
    /// Default: the system resolver. Replaces an async resolver set before.
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.state.resolver = Arc::new(resolver);
        self.state.async_resolver = None;
        self
    }
    /// How long a DNS answer without a time to live (the system resolver's)
    /// is cached. Default: 60 s. Answers with one are kept for it, at most 1 h.
    pub fn dns_cache_ttl(mut self, ttl: ::std::time::Duration) -> Self {
        self.state.pool.dns_cache.default_ttl = ttl;
        self
    }
    /// How long a failed lookup (no such name, no addresses, a resolver error;
    /// not a timeout) is cached. Default: 5 s.
    pub fn dns_negative_ttl(mut self, ttl: ::std::time::Duration) -> Self {
        self.state.pool.dns_cache.negative_ttl = ttl;
        self
    }
    /// Names the DNS cache keeps, least recently used evicted first; `0` turns
    /// the cache off (a lookup in flight is still shared). Default: 256.
    pub fn dns_cache_capacity(mut self, names: usize) -> Self {
        self.state.pool.dns_cache.capacity = names;
        self
    }
    /// With a resolver that answers A and AAAA separately: how long an A
    /// answer that comes first waits for AAAA before attempts start with IPv4
    /// alone (RFC 8305 §3). Default: 50 ms.
    pub fn resolution_delay(mut self, delay: ::std::time::Duration) -> Self {
        self.state.pool.race.plan.resolution_delay = delay;
        self
    }
    /// Answers DNS for `host:port` with these addresses (like curl's `--resolve`).
    pub fn resolve(mut self, host_port: &str, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        match host_port.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?))) {
            Some((h, p)) => {
                let host = h.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
                self.state.overrides.insert((host, p), addrs.into_iter().collect());
            }
            None => self.state.errors.push(format!("resolve override {host_port:?} is not host:port")),
        }
        self
    }
    /// Sends calls through these proxies, in order (HTTP proxies: `CONNECT` for
    /// https, absolute-form for http, with Basic `Proxy-Authorization` when the
    /// proxy has credentials; SOCKS5 with username/password when it has
    /// them, the origin's name resolved by the proxy). A proxy listed twice is
    /// used once, at its first place (the route planner drops duplicates).
    /// Replaces `proxy_selector` and the environment's proxies (an empty list
    /// is [`no_proxy`](Self::no_proxy)). Default: the environment's
    /// ([`proxy_from_env`](Self::proxy_from_env)).
    ///
    /// Each item is a proxy server (used for every request) or a
    /// proxy rule for some URLs (the adapter's `Proxy`: `Proxy::https(url)?`);
    /// for each request, every rule that applies is tried in order.
    pub fn proxies<P: Into<crate::ProxyRule>>(mut self, proxies: impl IntoIterator<Item = P>) -> Self {
        self.state.selector = None;
        self.state.proxy_env = false;
        self.state.proxies = proxies.into_iter().map(Into::into).collect();
        self
    }
    /// Chooses the proxies per request URL (a function or a
    /// [`ProxySelector`](crate::ProxySelector)); an empty list goes direct.
    /// Replaces `proxies` and `proxy_from_env` (the last call wins).
    pub fn proxy_selector(mut self, selector: impl crate::ProxySelector) -> Self {
        self.state.selector = Some(Arc::new(selector));
        self.state.proxy_env = false;
        self
    }
    /// Proxies from the environment, read when the client is built:
    /// `http_proxy`/`HTTP_PROXY`, `https_proxy`/`HTTPS_PROXY`,
    /// `all_proxy`/`ALL_PROXY`, `no_proxy`/`NO_PROXY`, in curl's precedence,
    /// with credentials from the proxy URL (`http://user:pass@proxy:3128`)
    /// and `socks5://` / `socks5h://` schemes
    /// ([`ProxyEnv`](crate::ProxyEnv) has the rules). A malformed variable
    /// makes `build` fail with an error naming it. Replaces `proxies` and
    /// `proxy_selector` (the last call wins). **Default: on**, as in reqwest
    /// and curl; [`no_proxy`](Self::no_proxy) turns it off.
    pub fn proxy_from_env(mut self) -> Self {
        self.state.proxy_env = true;
        self.state.selector = None;
        self.state.proxies.clear();
        self
    }
    /// Every call goes direct: no proxy, and none from the environment
    /// (`HTTP_PROXY` and the rest are not read). Replaces `proxies`,
    /// `proxy_selector` and `proxy_from_env`.
    pub fn no_proxy(mut self) -> Self {
        self.state.proxy_env = false;
        self.state.selector = None;
        self.state.proxies.clear();
        self
    }
    /// One more proxy rule after those given before (reqwest's habit:
    /// `.proxy(Proxy::https("http://proxy:3128")?)`; a proxy server is a
    /// rule for every request; see [`proxies`](Self::proxies) for how
    /// proxies are used). The first call replaces the environment's proxies.
    pub fn proxy(mut self, proxy: impl Into<crate::ProxyRule>) -> Self {
        self.state.selector = None;
        self.state.proxy_env = false;
        self.state.proxies.push(proxy.into());
        self
    }
    /// reqwest's name for
    /// [`danger_accept_invalid_certificates`](Self::danger_accept_invalid_certificates).
    pub fn danger_accept_invalid_certs(self, accept: bool) -> Self {
        self.danger_accept_invalid_certificates(accept)
    }
    /// reqwest's name for [`idle_timeout`](Self::idle_timeout). `None`
    /// (reqwest: keep idle connections forever) is a configuration error
    /// here: an idle connection is always closed in the end; give a duration.
    pub fn pool_idle_timeout(mut self, d: impl Into<Option<Duration>>) -> Self {
        match d.into() {
            Some(d) => self.idle_timeout(d),
            None => {
                self.state.errors.push(
                    "pool_idle_timeout(None): idle connections are always closed in the end; give a duration"
                        .into(),
                );
                self
            }
        }
    }
    /// reqwest's name for [`max_idle_per_host`](Self::max_idle_per_host).
    pub fn pool_max_idle_per_host(self, n: usize) -> Self {
        self.max_idle_per_host(n)
    }
    /// Largest response head accepted, and largest trailer section (HTTP/1.1:
    /// bytes as received; HTTP/2: the header block on the wire, and the
    /// decoded header list as RFC 9113 counts it). Over it the call (or, for
    /// trailers, the body) fails with an error that names the limit.
    /// Default: 64 KiB.
    pub fn max_response_head_size(mut self, bytes: usize) -> Self {
        self.state.limits.max_head_size = bytes;
        self
    }
    /// Keep each HTTP/1.1 response head's bytes as they arrived, as a
    /// [`RawHead`](switchyard_core::http1::RawHead) in the response's
    /// extensions: header names in the server's case and its reason phrase,
    /// for printing a head as the server wrote it (curl's `-i`). HTTP/2 heads
    /// have no such bytes (HPACK), so none is kept for them. Costs a copy of
    /// each head. Default: off.
    pub fn keep_raw_head(mut self, keep: bool) -> Self {
        self.state.limits.keep_raw_head = keep;
        self
    }
    /// Retries per call (BEHAVIOUR §6). Default: 3. Zero: never retry (retries
    /// after GOAWAY are not counted: `PoolConfig::max_free_retries` bounds them).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.state.pool.max_retries = n;
        self
    }

    /// Resolves host names with an async resolver (async adapters only; the
    /// blocking adapter refuses it at build). Replaces a resolver set before.
    pub fn async_resolver(mut self, resolver: impl crate::resolve::AsyncResolve) -> Self {
        self.state.async_resolver = Some(Arc::new(resolver));
        self
    }

    /// Opens every connection's byte stream with `connector` instead of a
    /// TCP (or Unix-socket) connect: the connector hook. The route's proxy
    /// handshake, TLS and HTTP run on top of what it returns (an async
    /// adapter's connector returns a future of a stream, the blocking
    /// adapter's a socket); pooling, the race and events are unchanged, and
    /// the connect timeout bounds it. A connector made with
    /// [`by_name`](crate::transport::by_name) reaches hosts by name (no DNS,
    /// one route per host). Each adapter's crate docs show one (a
    /// Firecracker vsock). Replaces a connector set before.
    pub fn connector(mut self, connector: impl crate::transport::Connect<C::Connecting>) -> Self {
        self.state.connector_by_name = !connector.uses_dns();
        let hook: Arc<dyn crate::transport::Connect<C::Connecting>> = Arc::new(connector);
        self.state.connector = Some(Arc::new(hook));
        self
    }

    /// Validates the settings and builds the client. Needs no runtime.
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config): a malformed `resolve` override, unusable TLS roots or
    /// client certificate, a setting out of range, or one the adapter cannot honour.
    pub fn build(self) -> Result<C, Error> {
        C::from_config(self.state.finish()?, self.runtime)
    }
}

impl<C: Layered> ClientBuilder<C> {
    /// Follows redirects by `policy` (the `redirect` feature; reqwest's
    /// habit). **Default: not followed**, with or without the feature: a 3xx
    /// is the answer. Each hop is a call of its own on the same pool; past
    /// the limit the call fails (`ErrorKind::Redirect`); `Response::url` is
    /// the final URL. The rules (303 → GET, credentials dropped across
    /// origins, a body resent on 307/308 when it is a buffer) are in the
    /// adapter's `redirect` module.
    ///
    /// ```ignore
    /// let client = Client::builder().redirect(redirect::Policy::limited(5)).build()?;
    /// ```
    #[cfg(feature = "redirect")]
    pub fn redirect(mut self, policy: crate::redirect::Policy) -> Self {
        self.state.layers.redirects = policy.max_hops();
        self
    }
    /// Without the `redirect` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "redirect"))]
    #[doc(hidden)]
    pub fn redirect<P: crate::__private::NeedsRedirectFeature>(self, _policy: P) -> Self {
        self
    }

    /// Asks for gzip bodies (`Accept-Encoding`) and decodes them (the
    /// `decompression` feature, tower-http's `Decompression`; reqwest's
    /// habit). **Default: off**, with or without the feature. A decoded
    /// response loses its `Content-Encoding` and `Content-Length`; a body
    /// that does not decode is `ErrorKind::Decode`. A request that sets its
    /// own `Accept-Encoding` is left as it is.
    #[cfg(feature = "decompression")]
    pub fn gzip(self, on: bool) -> Self {
        self.decoding(crate::redirect::Layers::GZIP, on)
    }
    /// Asks for and decodes deflate bodies, as [`gzip`](Self::gzip).
    #[cfg(feature = "decompression")]
    pub fn deflate(self, on: bool) -> Self {
        self.decoding(crate::redirect::Layers::DEFLATE, on)
    }
    /// Asks for and decodes brotli (`br`) bodies, as [`gzip`](Self::gzip).
    #[cfg(feature = "decompression")]
    pub fn brotli(self, on: bool) -> Self {
        self.decoding(crate::redirect::Layers::BROTLI, on)
    }
    #[cfg(feature = "decompression")]
    fn decoding(mut self, encoding: u8, on: bool) -> Self {
        self.state.layers = self.state.layers.decoding(encoding, on);
        self
    }
    /// Without the `decompression` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "decompression"))]
    #[doc(hidden)]
    pub fn gzip<B: crate::__private::NeedsDecompressionFeature>(self, _on: B) -> Self {
        self
    }
    /// Without the `decompression` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "decompression"))]
    #[doc(hidden)]
    pub fn deflate<B: crate::__private::NeedsDecompressionFeature>(self, _on: B) -> Self {
        self
    }
    /// Without the `decompression` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "decompression"))]
    #[doc(hidden)]
    pub fn brotli<B: crate::__private::NeedsDecompressionFeature>(self, _on: B) -> Self {
        self
    }
}

impl<C: FromConfig> ClientBuilder<C> {
    /// The collected settings (for builders that wrap this one).
    pub(crate) fn state_mut(&mut self) -> &mut BuilderState {
        &mut self.state
    }

    /// Builds the client and returns the configuration it was built from.
    pub(crate) fn build_with_config(self) -> Result<(C, Config), Error> {
        let config = self.state.finish()?;
        let copy = config.clone();
        Ok((C::from_config(config, self.runtime)?, copy))
    }
}

impl BuilderState {
    /// The settings that cannot mean anything at zero (or below a floor) are
    /// configuration errors naming the setting. Zero is meaningful, and
    /// documented, for: `max_idle_per_host` / `max_idle` (keep no idle
    /// connection), `pool_timeout` (fail at once when no capacity is free),
    /// `expect_continue_timeout` (send the body without waiting), `max_retries`
    /// (never retry).
    fn check(&self) -> Result<(), String> {
        let p = &self.pool;
        let positive = [
            ("connect_timeout", Some(p.race.connect_timeout)),
            ("handshake_timeout", Some(p.race.handshake_timeout)),
            ("idle_timeout", Some(p.keep_alive)),
            ("max_lifetime", p.max_lifetime),
            ("read_timeout", self.read_timeout),
            ("write_timeout", self.write_timeout),
            ("timeout", self.timeout),
            ("head_timeout", self.head_timeout),
            ("body_timeout", self.body_timeout),
        ];
        for (name, value) in positive {
            if value.is_some_and(|d| d.is_zero()) {
                let hint = if name == "idle_timeout" {
                    " (to keep no idle connection: max_idle_per_host(0))"
                } else {
                    ""
                };
                return Err(format!("{name} must be longer than zero{hint}"));
            }
        }
        if p.ping_interval.is_some_and(|i| i < Duration::from_secs(10)) {
            return Err(format!(
                "http2_ping_interval must be at least 10 s (gRPC clients' floor), not {:?}",
                p.ping_interval.unwrap_or_default()
            ));
        }
        if p.pong_timeout.is_zero() {
            return Err("http2_ping_timeout must be longer than zero".into());
        }
        if !(0.0..=1.0).contains(&p.max_lifetime_jitter) {
            return Err(format!("max_lifetime_jitter must be within 0 and 1, not {}", p.max_lifetime_jitter));
        }
        let b = &p.outliers.backoff;
        if b.initial.is_zero()
            || b.max < b.initial
            || !(b.multiplier.is_finite() && b.multiplier >= 1.0)
            || !(0.0..=1.0).contains(&b.jitter)
        {
            return Err(format!(
                "outlier_policy's backoff must have an initial delay above zero, a max at least as long, \
                 a multiplier of at least 1 and a jitter within 0 and 1, not {b:?}"
            ));
        }
        // RFC 8305 §5: never below 10 ms.
        if p.race.attempt_delay < Duration::from_millis(10) {
            return Err(format!(
                "attempt_delay must be at least 10 ms (RFC 8305 §5), not {:?}",
                p.race.attempt_delay
            ));
        }
        for (name, cap) in [
            ("max_connections_per_host", p.max_connections_per_address),
            ("max_connections", p.max_connections_total),
        ] {
            if cap == Some(0) {
                return Err(format!("{name} must be at least 1 (no call could ever connect)"));
            }
        }
        if self.limits.max_head_size == 0 {
            return Err("max_response_head_size must be at least 1 byte".into());
        }
        // RFC 9113 §6.9.1: at most 2^31 − 1; zero would stall every stream.
        for (name, window) in [
            ("http2_stream_window", self.http2.stream_window),
            ("http2_connection_window", self.http2.connection_window),
        ] {
            if window == 0 || window > (1 << 31) - 1 {
                return Err(format!("{name} must be between 1 and 2^31 - 1 bytes, not {window}"));
            }
        }
        Ok(())
    }

    /// Validates the settings into a [`Config`] (what `build` does before
    /// the adapter builds its client).
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config): a malformed `resolve`
    /// override, unusable TLS roots or client certificate, a setting out of range.
    pub(crate) fn finish(mut self) -> Result<Config, Error> {
        if let Some(e) = self.errors.first() {
            return Err(Error::config(e.clone()));
        }
        self.check().map_err(Error::config)?;
        self.tcp.check().map_err(Error::config)?;
        let tls = &self.tls;
        if tls.prepared.is_some()
            && (!tls.extra_roots.is_empty() || tls.client_auth.is_some() || !tls.built_in_roots)
        {
            return Err(Error::config(
                "tls_config replaces the roots and the client identity: set them on the rustls ClientConfig",
            ));
        }
        if tls.accept_invalid_certificates {
            tracing::warn!(
                target: "switchyard",
                "danger_accept_invalid_certificates: TLS certificates are NOT verified; any server can impersonate any host"
            );
        }
        // TLS settings are validated, and every config built, now rather than
        // on the first https call (and never under the pool's lock).
        let tls_configs = crate::tls::TlsConfigs::build(&self.tls).map_err(Error::config)?;
        // The environment is read now; a malformed variable fails the build.
        let selector = if self.proxy_env {
            let env = crate::ProxyEnv::from_env()?;
            // No proxy variable set: nothing to ask per call.
            (!env.is_empty()).then(|| Arc::new(env) as Arc<dyn ProxySelector>)
        } else if self.proxies.iter().all(crate::ProxyRule::is_unconditional) {
            self.selector
        } else {
            // Rules for some URLs only: chosen per request.
            let rules = std::mem::take(&mut self.proxies);
            Some(Arc::new(crate::proxy_rule::Rules(rules)) as Arc<dyn ProxySelector>)
        };
        let proxies = self.proxies.into_iter().map(crate::ProxyRule::into_server).collect();
        let async_resolver = match self.async_resolver {
            Some(r) if !self.overrides.is_empty() => {
                Some(Arc::new(crate::resolve::AsyncOverrides { map: self.overrides.clone(), fallback: r })
                    as Arc<dyn crate::resolve::AsyncResolve>)
            }
            other => other,
        };
        let resolver: Arc<dyn Resolve> = if self.overrides.is_empty() {
            self.resolver
        } else {
            Arc::new(Overrides { map: self.overrides, fallback: self.resolver })
        };
        let config = Config {
            pool: self.pool,
            read_timeout: self.read_timeout,
            write_timeout: self.write_timeout,
            timeout: self.timeout,
            head_timeout: self.head_timeout,
            body_timeout: self.body_timeout,
            default_headers: self.default_headers,
            expect_continue_timeout: self.expect_continue_timeout,
            version: self.version,
            allow_cleartext: self.allow_cleartext,
            tls: self.tls,
            tls_configs,
            listener: crate::event::fan_out(self.listeners),
            resolver,
            async_resolver,
            unix_socket: self.unix_socket,
            tcp: self.tcp,
            connector: self.connector,
            connector_by_name: self.connector_by_name,
            proxies,
            selector,
            limits: self.limits,
            http2: self.http2,
            layers: self.layers,
            addresses: Arc::default(),
            http3: false,
            alt_svc: Arc::default(),
        };
        Ok(config)
    }
}

/// A seed that differs per client and per process.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in adapter: building it only validates.
    #[derive(Debug)]
    struct Built;
    impl FromConfig for Built {
        type Runtime = ();
        type Connecting = ();
        fn from_config(_: Config, (): ()) -> Result<Self, Error> {
            Ok(Built)
        }
    }

    fn error(b: ClientBuilder<Built>) -> String {
        match b.build() {
            Err(e) => match e.kind() {
                crate::ErrorKind::Config(why) => why.clone(),
                _ => panic!("expected a configuration error, got {e:?}"),
            },
            Ok(_) => panic!("expected a configuration error"),
        }
    }

    /// A stand-in adapter that keeps the settings.
    struct Kept(Config);
    impl FromConfig for Kept {
        type Runtime = ();
        type Connecting = ();
        fn from_config(config: Config, (): ()) -> Result<Self, Error> {
            Ok(Kept(config))
        }
    }

    #[test]
    fn a_kept_address_is_the_one_a_fresh_build_gives() {
        let Ok(Kept(config)) = ClientBuilder::<Kept>::new().build() else { panic!("builds") };
        let mut uris: Vec<String> = [
            "http://a.test:1/x",
            "http://a.test:1/y?q=1",
            "https://a.test:1/",
            "HTTP://A.test:1/",
            "http://user:secret@a.test:1/",
            "http://[::1]:8080/",
            "http://127.0.0.1/",
            "https://b.test/",
        ]
        .map(String::from)
        .to_vec();
        // More hosts than are kept: the oldest are built again.
        uris.extend((0..12).map(|i| format!("http://h{i}.test/")));
        for _round in 0..3 {
            for u in &uris {
                let uri: http::Uri = u.parse().unwrap();
                for http2 in [false, true] {
                    let kept = config.address(&uri, http2).unwrap();
                    let fresh = config.build_address(&uri, http2, None).unwrap();
                    assert_eq!(kept, fresh, "{u} (http2 {http2})");
                    assert_eq!(kept.protocols(), fresh.protocols(), "{u} (http2 {http2})");
                }
            }
        }
        assert!(config.addresses.0.lock().unwrap().len() <= AddressCache::KEPT);
        let https: http::Uri = "https://a.test:1/".parse().unwrap();
        let http: http::Uri = "http://a.test:1/".parse().unwrap();
        assert_ne!(config.address(&https, true).unwrap(), config.address(&http, true).unwrap());
        assert_ne!(
            config.address(&https, true).unwrap().protocols(),
            config.address(&https, false).unwrap().protocols(),
            "HTTP/2 support is part of the key"
        );
        // Errors are not kept: each asks again.
        for bad in ["ftp://a.test/", "/relative", "http://a.test:99999/"] {
            let Ok(uri) = bad.parse::<http::Uri>() else { continue };
            assert!(config.address(&uri, false).is_err(), "{bad}");
            assert!(config.address(&uri, false).is_err(), "{bad}, again");
        }
    }

    fn outliers(f: impl FnOnce(&mut switchyard_core::Backoff)) -> switchyard_core::OutlierPolicy {
        let mut p = switchyard_core::OutlierPolicy::default();
        f(&mut p.backoff);
        p
    }

    #[test]
    fn meaningless_settings_are_typed_errors_naming_the_setting() {
        let zero = Duration::ZERO;
        let b = ClientBuilder::<Built>::new;
        let cases: Vec<(ClientBuilder<Built>, &str)> = vec![
            (b().connect_timeout(zero), "connect_timeout"),
            (b().handshake_timeout(zero), "handshake_timeout"),
            (b().idle_timeout(zero), "idle_timeout"),
            (b().max_lifetime(zero), "max_lifetime"),
            (b().max_lifetime_jitter(1.5), "max_lifetime_jitter"),
            (b().http2_ping_interval(Duration::from_secs(5)), "http2_ping_interval"),
            (b().http2_ping_timeout(zero), "http2_ping_timeout"),
            (b().tcp_user_timeout(zero), "tcp_user_timeout"),
            (b().max_lifetime_jitter(f64::NAN), "max_lifetime_jitter"),
            (b().outlier_policy(outliers(|b| b.initial = zero)), "outlier_policy"),
            (b().outlier_policy(outliers(|b| b.multiplier = f64::NAN)), "outlier_policy"),
            (b().outlier_policy(outliers(|b| b.multiplier = 0.5)), "outlier_policy"),
            (b().outlier_policy(outliers(|b| b.jitter = -0.1)), "outlier_policy"),
            (b().outlier_policy(outliers(|b| b.max = Duration::from_secs(1))), "outlier_policy"),
            (b().read_timeout(zero), "read_timeout"),
            (b().write_timeout(zero), "write_timeout"),
            (b().timeout(zero), "timeout"),
            (b().head_timeout(zero), "head_timeout"),
            (b().user_agent("bad\nagent"), "user_agent"),
            (b().body_timeout(zero), "body_timeout"),
            (b().attempt_delay(Duration::from_millis(5)), "attempt_delay"),
            (b().max_connections_per_host(0), "max_connections_per_host"),
            (b().max_connections(0), "max_connections"),
            (b().max_response_head_size(0), "max_response_head_size"),
            (b().http2_stream_window(0), "http2_stream_window"),
            (b().http2_connection_window(1 << 31), "http2_connection_window"),
            (b().idle_probe_interval(Some(zero)), "idle_probe_interval"),
            (b().add_root_certificate_pem("not pem"), "root certificate"),
            (
                b().add_root_certificate_pem("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
                "root certificate",
            ),
            (b().add_root_certificate(b"not DER".to_vec()), "root certificate"),
            (
                b().client_identity_pem("", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
                "client identity",
            ),
        ];
        for (builder, name) in cases {
            let e = error(builder);
            assert!(e.starts_with(name), "{name}: {e}");
        }
    }

    #[test]
    fn zero_is_meaningful_for_these() {
        let zero = Duration::ZERO;
        let b = ClientBuilder::<Built>::new;
        for builder in [
            b().max_idle_per_host(0),
            b().max_idle(0),
            b().pool_timeout(zero),
            b().expect_continue_timeout(zero),
            b().max_retries(0),
            b().attempt_delay(Duration::from_millis(10)),
        ] {
            assert!(builder.build().is_ok());
        }
    }
}
