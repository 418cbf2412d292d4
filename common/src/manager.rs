//! The Manager's adapter-neutral half: declaring servers, finding one by host,
//! their status, and the builder every adapter's `Manager::builder()` returns.
//!
//! A Manager owns a client whose pool keeps a minimum of warm connections to
//! each declared server (the core's [`switchyard_core::pool::warm`]): connections
//! open at start, before any request, and are replaced when they close; failed
//! connects back off (1 s, ×1.6, ±20 % jitter, at most 120 s). Requests go
//! through [`Manager::connection`]-style handles that only reach their server;
//! a host the Manager was not built with is an [`ErrorKind::NotDeclared`]
//! error, never a new connection.
//!
//! [`Manager::connection`]: https://docs.rs/switchyard-tokio/latest/switchyard_tokio/type.Manager.html
//! [`ErrorKind::NotDeclared`]: crate::ErrorKind::NotDeclared

use std::time::Duration;

use switchyard_core::{Address, Backoff, Instant, Pool, Readiness, WarmPolicy};

use crate::config::{BuilderState, ClientBuilder, FromConfig};
use crate::error::Error;
use crate::request::IntoUri;

/// A server the Manager keeps warm.
#[derive(Clone, Debug)]
pub struct Declared {
    /// `scheme://host:port` as declared.
    pub url: String,
    /// Its URI.
    pub uri: http::Uri,
    /// Its pool key.
    pub address: Address,
    /// Its warm policy.
    pub policy: WarmPolicy,
}

/// One server's state, as `Manager::status()` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStatus {
    /// The server's URL as declared.
    pub url: String,
    /// Where it stands.
    pub readiness: Readiness,
    /// Connections its minimum wants now.
    pub wanted: usize,
    /// Open connections taking new requests that proved usable (HTTP/2: the
    /// server's SETTINGS arrived; HTTP/1.1: an exchange or a probe passed).
    pub open: usize,
    /// Of those, idle.
    pub idle: usize,
    /// Of those, carrying requests.
    pub in_use: usize,
    /// Connections open but still on probation (not yet usable).
    pub proving: usize,
    /// Connects in flight.
    pub connecting: usize,
    /// Failed connects (refused, timed out, or connections the server ended
    /// before they proved usable) since the last success.
    pub failures: u32,
    /// The last connect failure, in words.
    pub last_error: Option<String>,
    /// How long until the next connect, while backing off.
    pub next_retry_in: Option<Duration>,
}

impl std::fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({}/{} open", self.url, self.readiness, self.open, self.wanted)?;
        if self.in_use > 0 {
            write!(f, ", {} in use", self.in_use)?;
        }
        if self.proving > 0 {
            write!(f, ", {} proving", self.proving)?;
        }
        if self.connecting > 0 {
            write!(f, ", {} connecting", self.connecting)?;
        }
        f.write_str(")")?;
        if let Some(retry) = self.next_retry_in {
            write!(f, ", retry in {} ms", retry.as_millis())?;
        }
        if let Some(e) = &self.last_error {
            write!(f, ", last error: {e}")?;
        }
        Ok(())
    }
}

/// The statuses of `declared` at `now`, in declaration order.
#[must_use]
pub fn statuses(pool: &Pool, now: Instant, declared: &[Declared]) -> Vec<ServerStatus> {
    declared
        .iter()
        .map(|d| {
            let s = pool.warm_status(now, &d.address);
            ServerStatus {
                url: d.url.clone(),
                readiness: s.as_ref().map_or(Readiness::ShutDown, |s| s.readiness),
                wanted: s.as_ref().map_or(0, |s| s.wanted),
                open: s.as_ref().map_or(0, |s| s.open),
                idle: s.as_ref().map_or(0, |s| s.idle),
                in_use: s.as_ref().map_or(0, |s| s.in_use),
                proving: s.as_ref().map_or(0, |s| s.proving),
                connecting: s.as_ref().map_or(0, |s| s.connecting),
                failures: s.as_ref().map_or(0, |s| s.failures),
                last_error: s.as_ref().and_then(|s| s.last_error.clone()),
                next_retry_in: s.as_ref().and_then(|s| s.next_retry).map(|t| t - now),
            }
        })
        .collect()
}

/// The error `ready()` fails with: every server not ready, its readiness and
/// its last error.
#[must_use]
pub fn not_ready(statuses: &[ServerStatus], waited: Duration) -> Error {
    let lines: Vec<String> =
        statuses.iter().filter(|s| s.readiness != Readiness::Ready).map(ToString::to_string).collect();
    Error::from(crate::ErrorKind::NotReady(format!("after {} ms: {}", waited.as_millis(), lines.join("; "))))
}

/// The declared server `host` names: `host`, `host:port` or a URL. A host
/// alone must name one server.
///
/// # Errors
/// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared) when none (or, for
/// a bare host, more than one) matches.
pub fn find<'a>(declared: &'a [Declared], host: &str) -> Result<&'a Declared, Error> {
    let mut found = declared.iter().filter(|d| names(d, host));
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one),
        _ => Err(Error::from(crate::ErrorKind::NotDeclared { host: host.to_owned(), handle: None })),
    }
}

/// Whether `host` (a URL, `host:port`, or a host alone; any case, IPv6 with
/// or without brackets) names `d`. Compared in place: the gateway asks this
/// for every request.
fn names(d: &Declared, host: &str) -> bool {
    let wanted = host.trim();
    let wanted = wanted.trim_end_matches('/');
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let bare = d.uri.host().unwrap_or_default().trim_matches(['[', ']']);
    if same(wanted, &d.url)
        || d.uri.authority().is_some_and(|a| same(wanted, a.as_str()))
        || same(wanted, bare)
        || same(wanted.trim_matches(['[', ']']), bare)
    {
        return true;
    }
    // `host:port`, the port as the Address has it (the scheme's default
    // included), the host bare (an IPv6 literal without brackets).
    wanted.rsplit_once(':').is_some_and(|(name, port)| {
        let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !port.starts_with('0');
        same(name, bare) && digits && port.parse::<u16>().is_ok_and(|p| p == d.address.port())
    })
}

/// Whether a request URI goes to `server` (same scheme, host and port).
///
/// # Errors
/// [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared) naming the URI's
/// authority when it goes elsewhere.
pub fn check_target(server: &Declared, uri: &http::Uri) -> Result<(), Error> {
    let same = Address::from_uri(uri).ok().and_then(|b| b.build().ok()).is_some_and(|a| {
        a.scheme() == server.address.scheme()
            && a.host() == server.address.host()
            && a.port() == server.address.port()
    });
    if same {
        Ok(())
    } else {
        let host = uri.authority().map_or_else(|| uri.to_string(), |a| a.to_string());
        Err(Error::from(crate::ErrorKind::NotDeclared { host, handle: Some(server.url.clone()) }))
    }
}

/// `path` (a path, or a URL to this server) as a full URI on `server`.
///
/// # Errors
/// A URL to another server is [`ErrorKind::NotDeclared`](crate::ErrorKind::NotDeclared);
/// one that does not parse is an invalid URL.
pub fn target(server: &Declared, path: &str) -> Result<http::Uri, Error> {
    if path.starts_with('/') || path.is_empty() {
        let full = format!("{}{}", server.url, if path.is_empty() { "/" } else { path });
        return full.into_uri();
    }
    let uri = path.into_uri()?;
    check_target(server, &uri)?;
    Ok(uri)
}

/// Builds any adapter's Manager: its servers, their minimums and backoff, the
/// client settings they share (every [`ClientBuilder`] knob), and how long
/// `ready()` waits.
pub struct ManagerBuilder<C: FromConfig> {
    client: ClientBuilder<C>,
    servers: Vec<(String, WarmPolicy)>,
    backoff: Backoff,
    ready_timeout: Duration,
    errors: Vec<String>,
}

impl<C: FromConfig> Default for ManagerBuilder<C> {
    fn default() -> Self {
        ManagerBuilder {
            client: ClientBuilder::new(),
            servers: Vec::new(),
            backoff: Backoff::default(),
            ready_timeout: Duration::from_secs(30),
            errors: Vec::new(),
        }
    }
}

impl<C: FromConfig> std::fmt::Debug for ManagerBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerBuilder").field("servers", &self.servers.len()).finish_non_exhaustive()
    }
}

impl<C: FromConfig> ManagerBuilder<C> {
    /// A builder with no server.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a server (`scheme://host[:port]`) with at least `min_warm`
    /// connections open.
    #[must_use]
    pub fn server(mut self, url: &str, min_warm: usize) -> Self {
        self.servers
            .push((url.to_owned(), WarmPolicy { min_connections: min_warm, ..WarmPolicy::default() }));
        self
    }

    /// Declares a server with a whole policy (an HTTP/2 minimum in concurrent
    /// streams, its own backoff, proxies). Its `down_after` is the Manager's
    /// ready timeout unless set otherwise.
    #[must_use]
    pub fn server_with(mut self, url: &str, policy: WarmPolicy) -> Self {
        self.servers.push((url.to_owned(), policy));
        self
    }

    /// The client settings every server's connections use (timeouts, TLS
    /// roots, resolver, listeners, limits, …).
    #[must_use]
    pub fn client(mut self, settings: impl FnOnce(ClientBuilder<C>) -> ClientBuilder<C>) -> Self {
        self.client = settings(self.client);
        self
    }

    /// Backoff for failed connects. Default: 1 s, ×1.6, ±20 %, at most 120 s.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long `ready()` waits for every minimum, and how long a server may
    /// fail to connect with no connection open before it is `down`.
    /// Default: 30 s.
    #[must_use]
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        if timeout.is_zero() {
            self.errors.push("ready_timeout must be above zero".into());
        }
        self.ready_timeout = timeout;
        self
    }

    /// Builds the client and the declarations (for an adapter's `build`).
    /// `supports_http2`: whether the adapter can speak HTTP/2.
    ///
    /// # Errors
    /// A configuration error: no server, a URL that is not `http(s)://host[:port]`,
    /// a server declared twice, or any client setting's error.
    pub fn finish(self, supports_http2: bool) -> Result<(C, Vec<Declared>, Duration), Error> {
        if let Some(e) = self.errors.first() {
            return Err(Error::config(e.clone()));
        }
        if self.servers.is_empty() {
            return Err(Error::config("a Manager needs at least one server (ManagerBuilder::server)"));
        }
        let mut client = self.client;
        let total: usize = self.servers.iter().map(|(_, p)| p.min_connections).sum();
        let most = self.servers.iter().map(|(_, p)| p.min_connections).max().unwrap_or(0);
        {
            let state: &mut BuilderState = client.state_mut();
            // Warm connections wait idle: the idle caps must hold them.
            state.pool.max_idle_per_address = state.pool.max_idle_per_address.max(most);
            if let Some(t) = state.pool.max_idle_total.as_mut() {
                *t = (*t).max(total);
            }
        }
        let (client_built, config) = client.build_with_config()?;
        let mut declared: Vec<Declared> = Vec::new();
        for (url, mut policy) in self.servers {
            let uri = url.as_str().into_uri()?;
            if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
                return Err(Error::config(format!(
                    "server {url:?}: a server is scheme://host[:port], without a path"
                )));
            }
            let address = config.address(&uri, supports_http2).map_err(|e| e.with_url(&url))?;
            if declared.iter().any(|d| d.address == address) {
                return Err(Error::config(format!("server {url:?} is declared twice")));
            }
            if policy.proxies.is_empty() {
                policy.proxies = match &config.selector {
                    Some(selector) => selector.select(&uri),
                    None => config.proxies.clone(),
                };
            }
            if policy.backoff == Backoff::default() {
                policy.backoff = self.backoff;
            }
            if policy.down_after == WarmPolicy::default().down_after {
                policy.down_after = self.ready_timeout;
            }
            let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
            let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
            declared.push(Declared { url: format!("{scheme}://{authority}"), uri, address, policy });
        }
        Ok((client_built, declared, self.ready_timeout))
    }
}

/// A client type a Manager can be made of (what [`ManagerBuilder::build`]
/// returns for it).
pub trait Managed: FromConfig + Sized {
    /// The adapter's Manager.
    type Manager;
    /// Whether the adapter speaks HTTP/2.
    const SUPPORTS_HTTP2: bool;
    /// Makes the Manager and starts warming.
    ///
    /// # Errors
    /// The adapter cannot start warming (a declaration the pool refuses).
    fn manage(client: Self, servers: Vec<Declared>, ready_timeout: Duration) -> Result<Self::Manager, Error>;
}

impl<C: Managed> ManagerBuilder<C> {
    /// Builds the client and starts warming every server.
    ///
    /// # Errors
    /// A configuration error: no server, a server URL with a path or declared
    /// twice, or a client setting's error.
    pub fn build(self) -> Result<C::Manager, Error> {
        let (client, servers, ready_timeout) = self.finish(C::SUPPORTS_HTTP2)?;
        C::manage(client, servers, ready_timeout)
    }
}
