//! [`Route`], one concrete way to reach an [`Address`]. The routes that failed
//! recently are in the route database ([`crate::route_db`]).

use std::fmt;
use std::net::SocketAddr;

use crate::address::{Address, Host, Proxy};

/// (Address, proxy, socket address): what a connect attempt dials.
///
/// For a direct route the socket address is one of the origin's resolved IPs;
/// through a proxy it is one of the proxy's, and the origin host is left for the
/// proxy (the `CONNECT` request, the absolute-form target or the SOCKS5 request).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Route {
    address: Address,
    /// `None` for [`Proxy::Direct`] (the common case costs nothing to clone);
    /// a proxy, shared. Either way a route stays small to move.
    proxy: Option<std::sync::Arc<Via>>,
    socket_addr: SocketAddr,
    /// QUIC over UDP (HTTP/3) rather than TCP.
    quic: bool,
}

/// A route's proxy, and the origin IP it is asked to reach when the client
/// resolved the origin (`socks5://`). Shared behind the route's one pointer,
/// so a route stays as small as a direct one (it is moved on every call).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Via {
    proxy: Proxy,
    target: Option<std::net::IpAddr>,
}

/// What [`Route::proxy`] lends for a direct route.
static DIRECT: Proxy = Proxy::Direct;

impl Route {
    /// A route to `address` through `proxy`, dialling `socket_addr`.
    #[must_use]
    pub fn new(address: Address, proxy: Proxy, socket_addr: SocketAddr) -> Route {
        let proxy = (proxy != Proxy::Direct).then(|| std::sync::Arc::new(Via { proxy, target: None }));
        let quic = address.is_quic();
        Route { address, proxy, socket_addr, quic }
    }
    /// The same route asking its proxy for `ip` instead of the origin's name
    /// (SOCKS5 with local resolution: each route carries one of the origin's
    /// resolved addresses, so the race tries them one per attempt).
    ///
    /// ```
    /// # use switchyard_core::{Address, Proxy, Route, Scheme};
    /// let a = Address::builder(Scheme::Http, "example.com", 80).build().unwrap();
    /// let socks = Proxy::socks5("10.0.0.9", 1080).unwrap();
    /// let r = Route::new(a, socks, "10.0.0.9:1080".parse().unwrap()).with_target("10.1.1.1".parse().unwrap());
    /// assert_eq!(r.target(), Some("10.1.1.1".parse().unwrap()));
    /// assert_eq!(r.to_string(), "example.com:80 at 10.1.1.1 via proxy 10.0.0.9:1080");
    /// ```
    /// Through a proxy only: a direct route dials the address itself, and
    /// is returned unchanged.
    #[must_use]
    pub fn with_target(mut self, ip: std::net::IpAddr) -> Route {
        if let Some(via) = &self.proxy {
            self.proxy = Some(std::sync::Arc::new(Via { proxy: via.proxy.clone(), target: Some(ip) }));
        }
        self
    }
    /// The origin address the proxy is asked to connect to, when the client
    /// resolved the origin's name itself (`socks5://`); `None`: the proxy gets
    /// the name (`socks5h://`, HTTP proxies) or there is no proxy.
    #[must_use]
    pub fn target(&self) -> Option<std::net::IpAddr> {
        self.proxy.as_ref().and_then(|via| via.target)
    }
    /// The Address this route serves.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.address
    }
    /// The proxy in use, [`Proxy::Direct`] for none.
    #[must_use]
    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_deref().map_or(&DIRECT, |via| &via.proxy)
    }
    /// The socket address to dial (for a Unix-socket Address, see
    /// [`Route::unix_socket`], an unspecified placeholder).
    #[must_use]
    pub fn socket_addr(&self) -> SocketAddr {
        self.socket_addr
    }
    /// The Unix-domain socket to connect to instead of
    /// [`Route::socket_addr`], when the Address names one.
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.address.unix_socket()
    }
    /// Whether the connection needs TLS with the origin.
    #[must_use]
    pub fn requires_tls(&self) -> bool {
        self.address.is_https() && !self.address.is_tunnel()
    }
    /// Whether this is a UDP route carrying QUIC (an HTTP/3 Address): its
    /// connect attempt is QUIC's handshake, which holds TLS too.
    ///
    /// ```
    /// # use switchyard_core::{Address, Protocol, Proxy, Route, Scheme};
    /// let a = Address::builder(Scheme::Https, "example.com", 443).protocols([Protocol::Http3]).build().unwrap();
    /// let r = Route::new(a, Proxy::Direct, "10.0.0.1:443".parse().unwrap());
    /// assert!(r.is_quic() && r.requires_tls());
    /// assert_eq!(r.to_string(), "example.com at 10.0.0.1:443 over QUIC");
    /// ```
    #[must_use]
    pub fn is_quic(&self) -> bool {
        self.quic
    }
    /// A direct QUIC route to `socket_addr` for an Address that offers
    /// HTTP/3 beside TCP ([`Address::offers_http3`]): the race tries it
    /// first and TCP one attempt delay later.
    ///
    /// ```
    /// # use switchyard_core::{Address, Protocol, Route, Scheme};
    /// let a = Address::builder(Scheme::Https, "example.com", 443)
    ///     .protocols([Protocol::Http3, Protocol::Http2, Protocol::Http1])
    ///     .build()
    ///     .unwrap();
    /// let r = Route::quic(a, "10.0.0.1:443".parse().unwrap());
    /// assert!(r.is_quic());
    /// assert_eq!(r.to_string(), "example.com at 10.0.0.1:443 over QUIC");
    /// ```
    #[must_use]
    pub fn quic(address: Address, socket_addr: SocketAddr) -> Route {
        Route { address, proxy: None, socket_addr, quic: true }
    }
    /// Whether an HTTP `CONNECT` tunnel must be opened through the proxy first.
    #[must_use]
    pub fn requires_tunnel(&self) -> bool {
        matches!(self.proxy(), Proxy::Http { .. }) && (self.address.is_https() || self.address.is_tunnel())
    }
    /// Whether a SOCKS5 handshake must run first.
    #[must_use]
    pub fn requires_socks5(&self) -> bool {
        matches!(self.proxy(), Proxy::Socks5 { .. })
    }
    /// Whether anything must run after TCP connects (SOCKS5, tunnel, TLS) before the
    /// connection can carry exchanges.
    #[must_use]
    pub fn requires_handshake(&self) -> bool {
        self.requires_tls() || self.requires_socks5() || self.requires_tunnel()
    }
    /// Whether requests use absolute-form targets (plain http through an HTTP proxy).
    #[must_use]
    pub fn uses_absolute_form(&self) -> bool {
        matches!(self.proxy(), Proxy::Http { .. }) && !self.address.is_https() && !self.address.is_tunnel()
    }
}

/// `example.com at 1.2.3.4:443`; `1.2.3.4:443` when the host is that IP;
/// `example.com via proxy 10.0.0.1:3128`, with the origin port added when it
/// differs from the socket's (`example.com:8443 via proxy 10.0.0.1:3128`).
///
/// ```
/// # use switchyard_core::{Address, Proxy, Route, Scheme};
/// let a = Address::builder(Scheme::Https, "example.com", 443).build().unwrap();
/// let direct = Route::new(a.clone(), Proxy::Direct, "[2001:db8::1]:443".parse().unwrap());
/// assert_eq!(direct.to_string(), "example.com at [2001:db8::1]:443");
/// let proxy = Proxy::http("10.0.0.1", 3128).unwrap();
/// let via = Route::new(a, proxy, "10.0.0.1:3128".parse().unwrap());
/// assert_eq!(via.to_string(), "example.com:443 via proxy 10.0.0.1:3128");
/// ```
impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = self.address.host();
        if let Some(path) = self.address.unix_socket() {
            return write!(f, "{host}:{} via unix:{}", self.address.port(), path.display());
        }
        if self.address.skips_dns() {
            return write!(f, "{host}:{} via the connector", self.address.port());
        }
        let same_host = host.ip() == Some(self.socket_addr.ip());
        write!(f, "{host}")?;
        if same_host || self.address.port() != self.socket_addr.port() {
            write!(f, ":{}", self.address.port())?;
        }
        if let Some(ip) = self.target().filter(|ip| host.ip() != Some(*ip)) {
            write!(f, " at {ip}")?;
        }
        if !same_host {
            let via = match self.proxy() {
                Proxy::Direct => " at ",
                _ => " via proxy ",
            };
            write!(f, "{via}{}", self.socket_addr)?;
        }
        if self.is_quic() {
            f.write_str(" over QUIC")?;
        }
        Ok(())
    }
}

/// Builds the routes for a list of resolved IPs (or one literal) through `proxy`.
pub(crate) fn routes_for(
    address: &Address,
    proxy: &Proxy,
    ips: &[std::net::IpAddr],
    port: u16,
) -> Vec<Route> {
    let tcp = |ip: &std::net::IpAddr| Route::new(address.clone(), proxy.clone(), SocketAddr::new(*ip, port));
    match address.http3_port() {
        // HTTP/3 raced with TCP: per address, QUIC first, then TCP (the race
        // starts TCP one attempt delay after QUIC, or at once when QUIC fails).
        // Never through a proxy: QUIC goes to the origin itself.
        Some(quic_port) if *proxy == Proxy::Direct && !address.is_quic() => ips
            .iter()
            .flat_map(|ip| [Route::quic(address.clone(), SocketAddr::new(*ip, quic_port)), tcp(ip)])
            .collect(),
        _ => ips.iter().map(tcp).collect(),
    }
}

/// Routes through a SOCKS5 proxy that takes addresses (`socks5://`): one per
/// origin address (in planning order), each dialling the proxy (its addresses
/// in turn: the origin's first address through every proxy address, then the
/// next).
pub(crate) fn socks_routes(
    address: &Address,
    proxy: &Proxy,
    proxy_ips: &[std::net::IpAddr],
    origin_ips: &[std::net::IpAddr],
) -> Vec<Route> {
    let port = proxy.endpoint().map_or(1080, |(_, p)| p);
    origin_ips
        .iter()
        .flat_map(|target| {
            proxy_ips.iter().map(move |ip| {
                Route::new(address.clone(), proxy.clone(), SocketAddr::new(*ip, port)).with_target(*target)
            })
        })
        .collect()
}

/// The host DNS must resolve for `proxy` (the proxy's own, or the origin's when
/// direct) and the port routes dial.
pub(crate) fn dial_target<'a>(address: &'a Address, proxy: &'a Proxy) -> (&'a Host, u16) {
    proxy.endpoint().unwrap_or_else(|| (address.host(), address.port()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::address::Scheme;

    /// A route for tests (the route database's too).
    pub(crate) fn route(host: &str, port: u32, proxy: Proxy, sock: &str) -> Route {
        let a = Address::builder(Scheme::Https, host, port).build().unwrap();
        Route::new(a, proxy, sock.parse().unwrap())
    }

    #[test]
    fn display_formats() {
        assert_eq!(
            route("example.com", 443, Proxy::Direct, "1.2.3.4:443").to_string(),
            "example.com at 1.2.3.4:443"
        );
        assert_eq!(route("1.2.3.4", 443, Proxy::Direct, "1.2.3.4:443").to_string(), "1.2.3.4:443");
        assert_eq!(route("::1", 443, Proxy::Direct, "[::1]:443").to_string(), "[::1]:443");
        let proxy = Proxy::http("10.0.0.1", 3128).unwrap();
        assert_eq!(
            route("example.com", 3128, proxy.clone(), "10.0.0.1:3128").to_string(),
            "example.com via proxy 10.0.0.1:3128"
        );
        assert_eq!(
            route("example.com", 8443, proxy, "10.0.0.1:3128").to_string(),
            "example.com:8443 via proxy 10.0.0.1:3128"
        );
        let socks = Proxy::socks5("::1", 1080).unwrap();
        assert_eq!(
            route("example.com", 1080, socks, "[::1]:1080").to_string(),
            "example.com via proxy [::1]:1080"
        );
    }

    #[test]
    fn handshake_requirements() {
        let direct = route("example.com", 443, Proxy::Direct, "1.2.3.4:443");
        assert!(direct.requires_tls() && !direct.requires_tunnel());
        let p = Proxy::http("10.0.0.1", 3128).unwrap();
        let tunnel = route("example.com", 443, p.clone(), "10.0.0.1:3128");
        assert!(tunnel.requires_tunnel() && tunnel.requires_handshake());
        let a = Address::builder(Scheme::Http, "example.com", 80).build().unwrap();
        let plain = Route::new(a.clone(), p, "10.0.0.1:3128".parse().unwrap());
        assert!(plain.uses_absolute_form() && !plain.requires_handshake());
        let socks = Route::new(a, Proxy::socks5("10.0.0.2", 1080).unwrap(), "10.0.0.2:1080".parse().unwrap());
        assert!(socks.requires_socks5() && socks.requires_handshake());
    }
}
