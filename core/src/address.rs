//! [`Address`], the pool key, and what it is made of: [`Scheme`], [`Host`],
//! [`Proxy`], [`Protocol`] and the identities of the TLS configuration and resolver.
//!
//! Two requests may share a connection only when their Addresses are equal
//! (coalescing, which ignores the host, is the pool's business). An Address is
//! validated when built, so a bad port, a forbidden cleartext URL or an
//! impossible protocol list is a typed [`AddressError`] before any I/O happens.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// `http` or `https`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Scheme {
    /// Cleartext HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// The port used when a URL names none: 80 or 443.
    #[must_use]
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
    /// `"http"` or `"https"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host: a DNS name (stored lower-case) or an IP literal (which skips DNS).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Host {
    /// A DNS name, ASCII, lower-case, without brackets.
    Domain(String),
    /// An IPv4 or IPv6 literal.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as written in a URL authority: a name, an IPv4 literal, or an
    /// IPv6 literal with or without brackets.
    ///
    /// ```
    /// # use switchyard_core::Host;
    /// use std::net::{IpAddr, Ipv6Addr};
    /// assert_eq!(Host::parse("Example.COM").unwrap(), Host::Domain("example.com".into()));
    /// assert_eq!(Host::parse("[::1]").unwrap(), Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    /// assert!(Host::parse("exa mple.com").is_err());
    /// ```
    pub fn parse(input: &str) -> Result<Host, AddressError> {
        let invalid = |reason: &'static str| AddressError::InvalidHost { host: input.to_owned(), reason };
        if input.is_empty() {
            return Err(AddressError::MissingHost);
        }
        if let Some(inner) = input.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or_else(|| invalid("unclosed '[' in IPv6 literal"))?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| invalid("not a valid IPv6 literal"));
        }
        if let Ok(ip) = input.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        if !input.is_ascii() {
            return Err(invalid("not ASCII; convert internationalised names to punycode first"));
        }
        if input.len() > 253 {
            return Err(invalid("longer than 253 characters"));
        }
        let name = input.strip_suffix('.').unwrap_or(input);
        if name.is_empty() {
            return Err(invalid("empty name"));
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(invalid("empty label"));
            }
            if label.len() > 63 {
                return Err(invalid("label longer than 63 characters"));
            }
            if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(invalid("only letters, digits, '-' and '_' may appear in a name"));
            }
        }
        Ok(Host::Domain(input.to_ascii_lowercase()))
    }

    /// The IP when this host is a literal.
    #[must_use]
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip(ip) => Some(*ip),
            Host::Domain(_) => None,
        }
    }
}

/// Writes the host as it appears in a URL: IPv6 literals bracketed.
impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Domain(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// A user name and password for a proxy: HTTP Basic `Proxy-Authorization`
/// (RFC 9110 §11.7.1, RFC 7617) for HTTP proxies, username/password
/// authentication (RFC 1929) for SOCKS5. They are part of the proxy's
/// identity (connections made with other credentials are never shared), and
/// they never show: `Debug` and `Display` print `***`.
///
/// ```
/// # use switchyard_core::{Proxy, ProxyCredentials};
/// let p = Proxy::http("10.0.0.1", 3128).unwrap().with_credentials(ProxyCredentials::new("ann", "s3cret"));
/// assert_eq!(p.to_string(), "http://10.0.0.1:3128");
/// assert!(!format!("{p:?}").contains("s3cret") && !format!("{p:?}").contains("ann"));
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProxyCredentials {
    user: String,
    password: String,
}

impl ProxyCredentials {
    /// Credentials from a user name and a password.
    #[must_use]
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> ProxyCredentials {
        ProxyCredentials { user: user.into(), password: password.into() }
    }
    /// The user name.
    #[must_use]
    pub fn user(&self) -> &str {
        &self.user
    }
    /// The password.
    #[must_use]
    pub fn password(&self) -> &str {
        &self.password
    }
    /// The `Proxy-Authorization` value: `Basic base64(user:password)`.
    #[must_use]
    pub fn basic(&self) -> String {
        format!("Basic {}", base64(format!("{}:{}", self.user, self.password).as_bytes()))
    }
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyCredentials(***)")
    }
}

/// Standard base64 with padding (RFC 4648 §4), for Basic credentials.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How a connection reaches the origin.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Proxy {
    /// Connect to the origin's own addresses.
    Direct,
    /// An HTTP proxy: `https` origins go through a `CONNECT` tunnel, `http` origins
    /// are sent to the proxy with absolute-form request targets.
    Http {
        /// The proxy's host; resolved by DNS when it is a name.
        host: Host,
        /// The proxy's port.
        port: u16,
        /// Basic credentials, sent on `CONNECT` and on absolute-form requests.
        credentials: Option<ProxyCredentials>,
    },
    /// A SOCKS5 proxy (RFC 1928).
    Socks5 {
        /// The proxy's host; resolved by DNS when it is a name.
        host: Host,
        /// The proxy's port.
        port: u16,
        /// Username/password (RFC 1929), offered alongside "no authentication".
        credentials: Option<ProxyCredentials>,
        /// `true` (`socks5h://`): the origin's name goes to the proxy, which
        /// resolves it (address type 3). `false` (`socks5://`, as curl): the
        /// client resolves the origin through its own resolver and DNS cache
        /// and asks the proxy for one address per attempt (types 1 and 4).
        remote_dns: bool,
    },
}

impl Proxy {
    /// An HTTP proxy at `host:port`.
    ///
    /// ```
    /// # use switchyard_core::Proxy;
    /// assert_eq!(Proxy::http("10.0.0.1", 3128).unwrap().to_string(), "http://10.0.0.1:3128");
    /// assert!(Proxy::http("10.0.0.1", 0).is_err());
    /// ```
    pub fn http(host: &str, port: u32) -> Result<Proxy, AddressError> {
        let (host, port) = host_and_port(host, port)?;
        Ok(Proxy::Http { host, port, credentials: None })
    }

    /// A SOCKS5 proxy at `host:port` that is given addresses: the client
    /// resolves the origin's name (`socks5://`, as curl and the proxy
    /// environment variables mean it).
    ///
    /// ```
    /// # use switchyard_core::Proxy;
    /// let p = Proxy::socks5("127.0.0.1", 1080).unwrap();
    /// assert_eq!(p.to_string(), "socks5://127.0.0.1:1080");
    /// assert!(p.resolves_origin_locally());
    /// ```
    pub fn socks5(host: &str, port: u32) -> Result<Proxy, AddressError> {
        let (host, port) = host_and_port(host, port)?;
        Ok(Proxy::Socks5 { host, port, credentials: None, remote_dns: false })
    }

    /// A SOCKS5 proxy at `host:port` that resolves the origin's name itself
    /// (`socks5h://`): the name goes to the proxy unresolved.
    ///
    /// ```
    /// # use switchyard_core::Proxy;
    /// let p = Proxy::socks5h("127.0.0.1", 1080).unwrap();
    /// assert_eq!(p.to_string(), "socks5h://127.0.0.1:1080");
    /// assert!(!p.resolves_origin_locally());
    /// ```
    pub fn socks5h(host: &str, port: u32) -> Result<Proxy, AddressError> {
        let (host, port) = host_and_port(host, port)?;
        Ok(Proxy::Socks5 { host, port, credentials: None, remote_dns: true })
    }

    /// Whether the client resolves the origin's name for this proxy (a
    /// `socks5://` proxy); direct connections and the other proxies say `false`.
    #[must_use]
    pub fn resolves_origin_locally(&self) -> bool {
        matches!(self, Proxy::Socks5 { remote_dns: false, .. })
    }

    /// The proxy's own host and port, `None` for [`Proxy::Direct`].
    #[must_use]
    pub fn endpoint(&self) -> Option<(&Host, u16)> {
        match self {
            Proxy::Direct => None,
            Proxy::Http { host, port, .. } | Proxy::Socks5 { host, port, .. } => Some((host, *port)),
        }
    }

    /// The same proxy with these credentials ([`Proxy::Direct`] has none).
    #[must_use]
    pub fn with_credentials(self, credentials: ProxyCredentials) -> Proxy {
        match self {
            Proxy::Direct => Proxy::Direct,
            Proxy::Http { host, port, .. } => Proxy::Http { host, port, credentials: Some(credentials) },
            Proxy::Socks5 { host, port, remote_dns, .. } => {
                Proxy::Socks5 { host, port, credentials: Some(credentials), remote_dns }
            }
        }
    }

    /// The proxy's credentials, if any.
    #[must_use]
    pub fn credentials(&self) -> Option<&ProxyCredentials> {
        match self {
            Proxy::Direct => None,
            Proxy::Http { credentials, .. } | Proxy::Socks5 { credentials, .. } => credentials.as_ref(),
        }
    }
}

/// The proxy's URL, never its credentials.
impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, host, port) = match self {
            Proxy::Direct => return f.write_str("DIRECT"),
            Proxy::Http { host, port, .. } => ("http", host, port),
            Proxy::Socks5 { host, port, remote_dns: false, .. } => ("socks5", host, port),
            Proxy::Socks5 { host, port, remote_dns: true, .. } => ("socks5h", host, port),
        };
        write!(f, "{scheme}://{host}:{port}")
    }
}

/// An application protocol a connection may speak.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Protocol {
    /// HTTP/1.1 (ALPN `http/1.1`, or cleartext).
    Http1,
    /// HTTP/2 negotiated by ALPN `h2` over TLS.
    Http2,
    /// HTTP/2 over cleartext without negotiation ("prior knowledge", RFC 9113 §3.3).
    H2PriorKnowledge,
    /// HTTP/3 (RFC 9114): QUIC over UDP to the origin itself, ALPN `h3`
    /// inside QUIC's TLS. Alone, every route is a QUIC route; beside TCP's
    /// protocols, each address gets a QUIC route tried first and a TCP route
    /// one attempt delay later (the first connected wins).
    Http3,
}

impl Protocol {
    /// The ALPN protocol id, for the protocols that are negotiated by ALPN.
    #[must_use]
    pub fn alpn_id(self) -> Option<&'static [u8]> {
        match self {
            Protocol::Http1 => Some(b"http/1.1"),
            Protocol::Http2 => Some(b"h2"),
            Protocol::H2PriorKnowledge => None,
            Protocol::Http3 => Some(b"h3"),
        }
    }
    /// Whether connections speaking it may be shared with other hosts their
    /// certificate covers (BEHAVIOUR §5): HTTP/2 and HTTP/3, over TLS.
    #[must_use]
    pub fn is_coalescable(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Http3)
    }
    /// Whether this protocol carries many exchanges at once.
    #[must_use]
    pub fn is_multiplexed(self) -> bool {
        !matches!(self, Protocol::Http1)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Http1 => "http/1.1",
            Protocol::Http2 => "h2",
            Protocol::H2PriorKnowledge => "h2c (prior knowledge)",
            Protocol::Http3 => "h3",
        })
    }
}

/// Identity of a TLS configuration (roots, client certificate, verifier, pins,
/// ALPN list), chosen by the adapter: two Addresses with different TLS identities
/// never share a connection.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct TlsIdentity(pub u64);

/// Identity of the DNS resolver in use, chosen by the adapter.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ResolverIdentity(pub u64);

/// A bad URL or configuration, found before any I/O.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AddressError {
    /// The text is not a URL at all.
    Malformed {
        /// What the URL parser said.
        reason: String,
    },
    /// The URL has no scheme (`example.com/x` rather than `https://example.com/x`).
    MissingScheme,
    /// The URL's scheme is neither `http` nor `https`.
    UnsupportedScheme {
        /// The scheme as given.
        scheme: String,
    },
    /// The URL has no host.
    MissingHost,
    /// The host is not a valid name or IP literal.
    InvalidHost {
        /// The host as given.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The port is outside 1..=65535 or not a number.
    InvalidPort {
        /// The host the port belongs to.
        host: String,
        /// The port as given.
        port: String,
    },
    /// An `http` URL while cleartext traffic is not permitted.
    CleartextNotPermitted {
        /// The host of the refused URL.
        host: String,
    },
    /// HTTP/2 prior knowledge is cleartext-only; it cannot be used with `https`.
    H2PriorKnowledgeWithHttps {
        /// The host of the refused URL.
        host: String,
    },
    /// HTTP/2 prior knowledge was combined with other protocols.
    H2PriorKnowledgeNotAlone,
    /// HTTP/3 asked where it cannot run: it needs `https`, and when it is
    /// the only protocol, a direct route (QUIC goes to the origin itself: no
    /// proxy, no Unix socket, no connector hook). Beside TCP's protocols,
    /// routes through a proxy are simply TCP routes.
    Http3Unusable {
        /// The host of the refused URL.
        host: String,
        /// What rules it out.
        reason: &'static str,
    },
    /// A cleartext Address needs HTTP/1.1 or HTTP/2 prior knowledge (there is no
    /// ALPN without TLS).
    NoCleartextProtocol {
        /// The host of the refused URL.
        host: String,
    },
    /// The protocol list is empty.
    NoProtocols,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Malformed { reason } => write!(f, "not a URL: {reason}"),
            AddressError::MissingScheme => {
                f.write_str("the URL has no scheme (expected http:// or https://)")
            }
            AddressError::UnsupportedScheme { scheme } => {
                write!(f, "unsupported URL scheme {scheme:?} (expected http or https)")
            }
            AddressError::MissingHost => f.write_str("URL has no host"),
            AddressError::InvalidHost { host, reason } => {
                write!(f, "invalid host {host:?}: {reason}")
            }
            AddressError::InvalidPort { host, port } => {
                write!(f, "invalid port {port:?} for host {host} (expected 1..=65535)")
            }
            AddressError::CleartextNotPermitted { host } => {
                write!(f, "cleartext not permitted: http://{host} (use https or allow cleartext)")
            }
            AddressError::H2PriorKnowledgeWithHttps { host } => {
                write!(f, "h2 prior knowledge is cleartext-only and cannot be used with https://{host}")
            }
            AddressError::H2PriorKnowledgeNotAlone => {
                f.write_str("h2 prior knowledge cannot be combined with other protocols")
            }
            AddressError::Http3Unusable { host, reason } => {
                write!(f, "HTTP/3 cannot be used for {host}: {reason}")
            }
            AddressError::NoCleartextProtocol { host } => {
                write!(f, "http://{host} needs http/1.1 or h2 prior knowledge among the protocols")
            }
            AddressError::NoProtocols => f.write_str("the protocol list is empty"),
        }
    }
}

impl std::error::Error for AddressError {}

fn host_and_port(host: &str, port: u32) -> Result<(Host, u16), AddressError> {
    let parsed = Host::parse(host)?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok((parsed, p)),
        _ => Err(AddressError::InvalidPort { host: parsed.to_string(), port: port.to_string() }),
    }
}

/// Everything that must match for two requests to share a connection.
///
/// Cheap to clone (shared, immutable). Built with [`Address::builder`] or
/// [`Address::from_uri`], which validate every field.
///
/// ```
/// # use switchyard_core::{Address, Protocol};
/// let uri: http::Uri = "https://Example.com:8443/path".parse().unwrap();
/// let address = Address::from_uri(&uri).unwrap().build().unwrap();
/// assert_eq!(address.to_string(), "https://example.com:8443");
/// assert_eq!(address.protocols(), &[Protocol::Http2, Protocol::Http1]);
///
/// let plain: http::Uri = "http://example.com/".parse().unwrap();
/// let err = Address::from_uri(&plain).unwrap().cleartext_permitted(false).build().unwrap_err();
/// assert_eq!(err.to_string(), "cleartext not permitted: http://example.com (use https or allow cleartext)");
/// ```
#[derive(Clone)]
pub struct Address(Arc<(AddressInner, u64)>);

#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct AddressInner {
    scheme: Scheme,
    host: Host,
    port: u16,
    proxy: Option<Proxy>,
    tls: Option<TlsIdentity>,
    protocols: Vec<Protocol>,
    resolver: ResolverIdentity,
    /// A Unix-domain socket to connect to instead of the host's addresses.
    unix: Option<std::path::PathBuf>,
    /// The transport reaches the host by itself: no DNS (a connector hook).
    no_dns: bool,
    /// Connections are raw byte streams for a tunnel (no TLS, no HTTP).
    tunnel: bool,
    /// The UDP port QUIC is tried on, when HTTP/3 is offered beside TCP.
    http3_port: Option<u16>,
}

// The pool looks Addresses up on every acquire and release: the hash is computed
// once, when the Address is built.
impl PartialEq for Address {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.0 .1 == other.0 .1 && self.0 .0 == other.0 .0)
    }
}
impl Eq for Address {}
impl std::hash::Hash for Address {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0 .1);
    }
}
impl PartialOrd for Address {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Address {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0 .0.cmp(&other.0 .0)
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.0 .0;
        f.debug_struct("Address")
            .field("url", &format_args!("{self}"))
            .field("proxy", &a.proxy)
            .field("tls", &a.tls)
            .field("protocols", &a.protocols)
            .field("resolver", &a.resolver)
            .finish()
    }
}

/// `scheme://host:port`, IPv6 bracketed.
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.0 .0;
        write!(f, "{}://{}:{}", a.scheme, a.host, a.port)?;
        if let Some(path) = &a.unix {
            write!(f, " (unix:{})", path.display())?;
        }
        if a.tunnel {
            f.write_str(" (tunnel)")?;
        }
        Ok(())
    }
}

impl Address {
    /// Starts an Address for `scheme://host:port`. The port is taken as `u32` so that
    /// an out-of-range value from configuration is a typed error, not a silent
    /// truncation.
    pub fn builder(scheme: Scheme, host: &str, port: u32) -> AddressBuilder {
        AddressBuilder {
            scheme,
            host: host.to_owned(),
            port: port.to_string(),
            port_value: Some(port),
            proxy: None,
            tls: TlsIdentity::default(),
            protocols: None,
            resolver: ResolverIdentity::default(),
            cleartext_permitted: true,
            unix: None,
            no_dns: false,
            tunnel: false,
            http3_port: None,
        }
    }

    /// Starts an Address from a URI's scheme and authority (path and query are
    /// ignored). The port is checked here rather than trusting the URI type, which
    /// treats an unparsable port as absent.
    pub fn from_uri(uri: &http::Uri) -> Result<AddressBuilder, AddressError> {
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            Some(s) => return Err(AddressError::UnsupportedScheme { scheme: s.to_owned() }),
            None => return Err(AddressError::MissingScheme),
        };
        let authority = uri.authority().ok_or(AddressError::MissingHost)?;
        // Strip userinfo; it never identifies a connection.
        let hostport = authority.as_str().rsplit_once('@').map_or(authority.as_str(), |(_, hp)| hp);
        let (host, port) = split_host_port(hostport);
        let mut builder = Address::builder(scheme, host, 0);
        match port {
            None => builder.port_value = Some(u32::from(scheme.default_port())),
            Some(p) => {
                builder.port = p.to_owned();
                builder.port_value = if p.is_empty() {
                    Some(u32::from(scheme.default_port()))
                } else if p.bytes().all(|b| b.is_ascii_digit()) {
                    p.parse::<u32>().ok()
                } else {
                    None
                };
            }
        }
        Ok(builder)
    }

    /// `http` or `https`.
    #[must_use]
    pub fn scheme(&self) -> Scheme {
        self.0 .0.scheme
    }
    /// The origin host.
    #[must_use]
    pub fn host(&self) -> &Host {
        &self.0 .0.host
    }
    /// The origin port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.0 .0.port
    }
    /// The explicit proxy, or `None` when the client's proxy selector decides.
    #[must_use]
    pub fn proxy(&self) -> Option<&Proxy> {
        self.0 .0.proxy.as_ref()
    }
    /// The TLS configuration identity, for `https` Addresses.
    #[must_use]
    pub fn tls_identity(&self) -> Option<TlsIdentity> {
        self.0 .0.tls
    }
    /// The allowed protocols, in preference order.
    #[must_use]
    pub fn protocols(&self) -> &[Protocol] {
        &self.0 .0.protocols
    }
    /// The resolver identity.
    #[must_use]
    pub fn resolver_identity(&self) -> ResolverIdentity {
        self.0 .0.resolver
    }
    /// The Unix-domain socket connections go to, instead of the host's
    /// addresses (see [`AddressBuilder::unix_socket`]).
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.0 .0.unix.as_deref()
    }
    /// Whether routes skip DNS: a Unix socket, or a transport that reaches
    /// the host by name ([`AddressBuilder::without_dns`]).
    #[must_use]
    pub fn skips_dns(&self) -> bool {
        self.0 .0.no_dns || self.0 .0.unix.is_some()
    }
    /// Whether the URL's scheme is `https` (connections then need TLS,
    /// unless the Address is a [tunnel](AddressBuilder::tunnel)).
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.0 .0.scheme == Scheme::Https
    }
    /// Whether connections are raw byte streams for a tunnel
    /// ([`AddressBuilder::tunnel`]).
    #[must_use]
    pub fn is_tunnel(&self) -> bool {
        self.0 .0.tunnel
    }
    /// The protocol a cleartext connection speaks without negotiation.
    #[must_use]
    pub fn cleartext_protocol(&self) -> Protocol {
        if self.0 .0.protocols.contains(&Protocol::H2PriorKnowledge) {
            Protocol::H2PriorKnowledge
        } else {
            Protocol::Http1
        }
    }
    /// Whether connections to this Address are only QUIC connections
    /// speaking HTTP/3 ([`Protocol::Http3`] alone): every route is a UDP route.
    #[must_use]
    pub fn is_quic(&self) -> bool {
        self.0 .0.protocols == [Protocol::Http3]
    }
    /// Whether HTTP/3 is offered beside TCP's protocols: the race tries QUIC
    /// first, on [`Address::http3_port`], and TCP after it.
    #[must_use]
    pub fn offers_http3(&self) -> bool {
        self.0 .0.protocols.len() > 1 && self.0 .0.protocols.contains(&Protocol::Http3)
    }
    /// The UDP port of QUIC routes, when HTTP/3 is offered (alone, the
    /// Address's own port; beside TCP, the port an `Alt-Svc` field or an
    /// HTTPS record advertised, else the Address's port).
    #[must_use]
    pub fn http3_port(&self) -> Option<u16> {
        let a = &self.0 .0;
        a.protocols.contains(&Protocol::Http3).then(|| a.http3_port.unwrap_or(a.port))
    }
    /// The protocols offered over TCP (ALPN's list): all but HTTP/3.
    #[must_use]
    pub fn tcp_protocols(&self) -> &[Protocol] {
        match self.0 .0.protocols.split_first() {
            Some((Protocol::Http3, rest)) => rest,
            _ => &self.0 .0.protocols,
        }
    }
    /// Whether every field but the host is equal: the first condition for
    /// coalescing (BEHAVIOUR §5).
    #[must_use]
    pub fn equal_except_host(&self, other: &Address) -> bool {
        let (a, b) = (&self.0 .0, &other.0 .0);
        a.scheme == b.scheme
            && a.port == b.port
            && a.proxy == b.proxy
            && a.tls == b.tls
            && a.protocols == b.protocols
            && a.resolver == b.resolver
            && !a.tunnel
            && !b.tunnel
            // A Unix socket is its own server: never coalesced.
            && !self.skips_dns()
            && !other.skips_dns()
    }
}

/// Builds a validated [`Address`]; see [`Address::builder`] and [`Address::from_uri`].
#[derive(Clone, Debug)]
#[must_use]
pub struct AddressBuilder {
    scheme: Scheme,
    host: String,
    port: String,
    port_value: Option<u32>,
    proxy: Option<Proxy>,
    tls: TlsIdentity,
    protocols: Option<Vec<Protocol>>,
    resolver: ResolverIdentity,
    cleartext_permitted: bool,
    unix: Option<std::path::PathBuf>,
    no_dns: bool,
    tunnel: bool,
    http3_port: Option<u16>,
}

impl AddressBuilder {
    /// The UDP port QUIC is tried on when HTTP/3 is offered beside TCP (an
    /// `Alt-Svc` field's or an HTTPS record's port). Default: the Address's.
    pub fn http3_port(mut self, port: u16) -> Self {
        self.http3_port = Some(port);
        self
    }
    /// Connects to this Unix-domain socket instead of the host's addresses
    /// (no DNS, no proxy; the host still names the server in `Host` and, for
    /// `https`, in TLS). The path is part of the Address: connections to
    /// another socket, or over TCP, are other connections.
    ///
    /// ```
    /// # use switchyard_core::{Address, Scheme};
    /// let a = Address::builder(Scheme::Http, "localhost", 80)
    ///     .unix_socket("/run/docker.sock")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(a.unix_socket(), Some(std::path::Path::new("/run/docker.sock")));
    /// assert_eq!(a.to_string(), "http://localhost:80 (unix:/run/docker.sock)");
    /// let tcp = Address::builder(Scheme::Http, "localhost", 80).build().unwrap();
    /// assert_ne!(a, tcp);
    /// ```
    pub fn unix_socket(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.unix = Some(path.into());
        self
    }
    /// The transport reaches the host by itself (a connector hook that opens
    /// streams by name, such as a vsock bridge): no DNS, no proxy, one route
    /// whose socket address is a placeholder. Never coalesced.
    ///
    /// ```
    /// # use switchyard_core::{Address, Scheme};
    /// let a = Address::builder(Scheme::Http, "guest.vm", 80).without_dns().build().unwrap();
    /// assert!(a.skips_dns());
    /// ```
    pub fn without_dns(mut self) -> Self {
        self.no_dns = true;
        self
    }
    /// Connections to this Address are raw byte streams for a tunnel (the
    /// far side of a `CONNECT` a gateway accepted): TCP to the host's
    /// addresses — raced, remembered, through the connector hook and a
    /// SOCKS5 proxy like every route — but no TLS even for `https` (the
    /// tunnel's client brings its own) and no HTTP; through an HTTP proxy
    /// they are `CONNECT` tunnels. The protocol list is `[http/1.1]` (the
    /// engine's stand-in for "bytes"); cleartext rules do not apply. A
    /// tunnel Address is its own pool: its connections are handed out once
    /// ([exclusive](crate::AcquireOptions::exclusive)) and never coalesced.
    ///
    /// ```
    /// # use switchyard_core::{Address, Scheme};
    /// let a = Address::builder(Scheme::Https, "api.test", 8443).tunnel().build().unwrap();
    /// assert!(a.is_tunnel() && a.is_https());
    /// assert_eq!(a.to_string(), "https://api.test:8443 (tunnel)");
    /// ```
    pub fn tunnel(mut self) -> Self {
        self.tunnel = true;
        self
    }
    /// Uses this proxy for the Address instead of the client's proxy selector.
    /// Default: none (the selector decides).
    pub fn proxy(mut self, proxy: Proxy) -> Self {
        self.proxy = Some(proxy);
        self
    }
    /// The allowed protocols in preference order. Default: `[h2, http/1.1]` for
    /// `https`, `[http/1.1]` for `http`.
    pub fn protocols(mut self, protocols: impl IntoIterator<Item = Protocol>) -> Self {
        let mut list: Vec<Protocol> = Vec::new();
        for p in protocols {
            if !list.contains(&p) {
                list.push(p);
            }
        }
        self.protocols = Some(list);
        self
    }
    /// The TLS configuration identity (ignored for `http`). Default: `TlsIdentity(0)`.
    pub fn tls_identity(mut self, identity: TlsIdentity) -> Self {
        self.tls = identity;
        self
    }
    /// The resolver identity. Default: `ResolverIdentity(0)`.
    pub fn resolver_identity(mut self, identity: ResolverIdentity) -> Self {
        self.resolver = identity;
        self
    }
    /// Whether `http` is allowed. Default: `true`.
    pub fn cleartext_permitted(mut self, permitted: bool) -> Self {
        self.cleartext_permitted = permitted;
        self
    }

    /// Validates and builds the Address.
    pub fn build(self) -> Result<Address, AddressError> {
        let host = Host::parse(&self.host)?;
        let port = match self.port_value.map(u16::try_from) {
            Some(Ok(p)) if p != 0 => p,
            _ => return Err(AddressError::InvalidPort { host: host.to_string(), port: self.port }),
        };
        let name = || host.to_string();
        let protocols = match self.protocols {
            _ if self.tunnel => vec![Protocol::Http1],
            Some(list) => list,
            None => match self.scheme {
                Scheme::Https => vec![Protocol::Http2, Protocol::Http1],
                Scheme::Http => vec![Protocol::Http1],
            },
        };
        if protocols.is_empty() {
            return Err(AddressError::NoProtocols);
        }
        if protocols.contains(&Protocol::H2PriorKnowledge) {
            if self.scheme == Scheme::Https {
                return Err(AddressError::H2PriorKnowledgeWithHttps { host: name() });
            }
            if protocols.len() > 1 {
                return Err(AddressError::H2PriorKnowledgeNotAlone);
            }
        }
        let mut protocols = protocols;
        if protocols.contains(&Protocol::Http3) {
            let unusable = |reason| Err(AddressError::Http3Unusable { host: name(), reason });
            if self.scheme != Scheme::Https {
                return unusable("it needs https");
            }
        }
        if protocols.contains(&Protocol::Http3) && protocols.len() > 1 {
            // Beside TCP's protocols: QUIC first, the TCP list (ALPN's) after.
            protocols.retain(|p| *p != Protocol::Http3);
            protocols.insert(0, Protocol::Http3);
        } else if protocols.contains(&Protocol::Http3) {
            let unusable = |reason| Err(AddressError::Http3Unusable { host: name(), reason });
            if self.tunnel {
                return unusable("a tunnel carries raw bytes over TCP");
            }
            if self.proxy.as_ref().is_some_and(|p| *p != Proxy::Direct) {
                return unusable("QUIC goes to the origin itself, never through a proxy");
            }
            if self.unix.is_some() || self.no_dns {
                return unusable(
                    "QUIC needs UDP to the origin's addresses (no Unix socket or connector hook)",
                );
            }
        }
        if self.scheme == Scheme::Http && !self.tunnel {
            if !self.cleartext_permitted {
                return Err(AddressError::CleartextNotPermitted { host: name() });
            }
            if !protocols.iter().any(|p| matches!(p, Protocol::Http1 | Protocol::H2PriorKnowledge)) {
                return Err(AddressError::NoCleartextProtocol { host: name() });
            }
        }
        let tls = (self.scheme == Scheme::Https).then_some(self.tls);
        let protocols_offer_h3 = protocols.contains(&Protocol::Http3);
        let inner = AddressInner {
            scheme: self.scheme,
            host,
            port,
            proxy: self.proxy,
            tls,
            protocols,
            resolver: self.resolver,
            unix: self.unix,
            no_dns: self.no_dns,
            tunnel: self.tunnel,
            http3_port: self.http3_port.filter(|_| protocols_offer_h3),
        };
        // A fixed-key hasher: the same Address hashes the same in every process.
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&inner, &mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        Ok(Address(Arc::new((inner, hash))))
    }
}

/// Splits `host[:port]`, honouring IPv6 brackets.
fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        match s.find(']') {
            Some(end) => {
                let rest = &s[end + 1..];
                (&s[..=end], rest.strip_prefix(':'))
            }
            None => (s, None),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Result<Address, AddressError> {
        let uri: http::Uri = s.parse().expect("test URIs parse");
        Address::from_uri(&uri)?.build()
    }

    #[test]
    fn defaults_ports_and_lowercases() {
        let a = uri("HTTPS://WWW.Example.COM/x").unwrap();
        assert_eq!(a.port(), 443);
        assert_eq!(a.host(), &Host::Domain("www.example.com".into()));
        assert_eq!(a.tls_identity(), Some(TlsIdentity(0)));
        let b = uri("http://example.com").unwrap();
        assert_eq!(b.port(), 80);
        assert_eq!(b.tls_identity(), None);
        assert_eq!(b.protocols(), &[Protocol::Http1]);
    }

    #[test]
    fn port_range_errors_name_host_and_port() {
        for (input, port) in [
            ("http://example.com:0/", "0"),
            ("http://example.com:65536/", "65536"),
            ("http://example.com:99999999999/", "99999999999"),
        ] {
            match uri(input) {
                Err(AddressError::InvalidPort { host, port: p }) => {
                    assert_eq!(host, "example.com");
                    assert_eq!(p, port);
                }
                other => panic!("{input}: {other:?}"),
            }
        }
        let e = Address::builder(Scheme::Https, "::1", 70_000).build().unwrap_err();
        assert_eq!(e.to_string(), "invalid port \"70000\" for host [::1] (expected 1..=65535)");
        assert_eq!(uri("http://example.com:65535/").unwrap().port(), 65535);
        assert_eq!(uri("http://example.com:/").unwrap().port(), 80);
    }

    #[test]
    fn scheme_and_host_errors() {
        assert_eq!(uri("ftp://example.com/"), Err(AddressError::UnsupportedScheme { scheme: "ftp".into() }));
        assert!(matches!(
            Address::builder(Scheme::Http, "a..b", 80).build(),
            Err(AddressError::InvalidHost { .. })
        ));
        assert!(matches!(
            Address::builder(Scheme::Http, "bücher.de", 80).build(),
            Err(AddressError::InvalidHost { .. })
        ));
        assert_eq!(Address::builder(Scheme::Http, "", 80).build(), Err(AddressError::MissingHost));
        assert!(matches!(
            Address::builder(Scheme::Http, "[::1", 80).build(),
            Err(AddressError::InvalidHost { .. })
        ));
    }

    #[test]
    fn ipv6_hosts() {
        let a = uri("https://[2001:db8::1]:8443/").unwrap();
        assert_eq!(a.host().ip(), Some("2001:db8::1".parse().unwrap()));
        assert_eq!(a.to_string(), "https://[2001:db8::1]:8443");
    }

    #[test]
    fn protocol_rules() {
        let b = || Address::builder(Scheme::Http, "example.com", 80);
        assert_eq!(
            Address::builder(Scheme::Https, "example.com", 443)
                .protocols([Protocol::H2PriorKnowledge])
                .build(),
            Err(AddressError::H2PriorKnowledgeWithHttps { host: "example.com".into() })
        );
        assert_eq!(
            b().protocols([Protocol::H2PriorKnowledge, Protocol::Http1]).build(),
            Err(AddressError::H2PriorKnowledgeNotAlone)
        );
        assert_eq!(
            b().protocols([Protocol::Http2]).build(),
            Err(AddressError::NoCleartextProtocol { host: "example.com".into() })
        );
        assert_eq!(b().protocols([]).build(), Err(AddressError::NoProtocols));
        let h2c = b().protocols([Protocol::H2PriorKnowledge]).build().unwrap();
        assert_eq!(h2c.cleartext_protocol(), Protocol::H2PriorKnowledge);
        assert_eq!(
            b().cleartext_permitted(false).build(),
            Err(AddressError::CleartextNotPermitted { host: "example.com".into() })
        );
    }

    #[test]
    fn equality_is_the_pool_key() {
        let a = uri("https://example.com/a").unwrap();
        let b = uri("https://EXAMPLE.com:443/b").unwrap();
        assert_eq!(a, b);
        let other_tls = Address::from_uri(&"https://example.com/".parse().unwrap())
            .unwrap()
            .tls_identity(TlsIdentity(7))
            .build()
            .unwrap();
        assert_ne!(a, other_tls);
        let c = uri("https://other.example/").unwrap();
        assert!(a.equal_except_host(&c));
        assert!(!a.equal_except_host(&other_tls));
    }

    #[test]
    fn http3_alone_needs_https_and_the_origin_itself() {
        let h3 = |scheme, f: fn(AddressBuilder) -> AddressBuilder| {
            f(Address::builder(scheme, "example.com", 443).protocols([Protocol::Http3])).build()
        };
        let a = h3(Scheme::Https, |b| b).unwrap();
        assert!(a.is_quic() && !a.offers_http3());
        assert_eq!(a.http3_port(), Some(443));
        let refused = |r: Result<Address, AddressError>| match r {
            Err(AddressError::Http3Unusable { reason, .. }) => reason,
            other => panic!("expected Http3Unusable, got {other:?}"),
        };
        assert_eq!(refused(h3(Scheme::Http, |b| b)), "it needs https");
        let proxied = refused(h3(Scheme::Https, |b| b.proxy(Proxy::http("10.0.0.1", 3128).unwrap())));
        assert!(proxied.contains("proxy"), "{proxied}");
        assert!(refused(h3(Scheme::Https, |b| b.unix_socket("/tmp/s"))).contains("Unix socket"));
        assert!(refused(h3(Scheme::Https, AddressBuilder::without_dns)).contains("connector"));
    }

    #[test]
    fn http3_beside_tcp_goes_first_and_keeps_the_alpn_list_after_it() {
        let a = Address::builder(Scheme::Https, "example.com", 443)
            .protocols([Protocol::Http2, Protocol::Http3, Protocol::Http1])
            .http3_port(8443)
            .build()
            .unwrap();
        assert!(a.offers_http3() && !a.is_quic());
        assert_eq!(a.protocols(), [Protocol::Http3, Protocol::Http2, Protocol::Http1]);
        assert_eq!(a.tcp_protocols(), [Protocol::Http2, Protocol::Http1]);
        assert_eq!(a.http3_port(), Some(8443));
        // Through a proxy it stays valid: its routes there are TCP routes.
        let proxied = Address::builder(Scheme::Https, "example.com", 443)
            .protocols([Protocol::Http3, Protocol::Http1])
            .proxy(Proxy::http("10.0.0.1", 3128).unwrap())
            .build();
        assert!(proxied.is_ok());
        // An advertised port is part of the identity (another pool key).
        let other_port = Address::builder(Scheme::Https, "example.com", 443)
            .protocols([Protocol::Http3, Protocol::Http2, Protocol::Http1])
            .build()
            .unwrap();
        assert_ne!(a, other_port);
        // Without HTTP/3, a port for it is ignored.
        let plain = Address::builder(Scheme::Https, "example.com", 443).http3_port(8443).build().unwrap();
        assert_eq!(plain, Address::builder(Scheme::Https, "example.com", 443).build().unwrap());
        assert_eq!(plain.http3_port(), None);
    }

    #[test]
    fn userinfo_is_ignored() {
        let a = uri("http://user:pw@example.com:8080/").unwrap();
        assert_eq!(a.to_string(), "http://example.com:8080");
    }
}
