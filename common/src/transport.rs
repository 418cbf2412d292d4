//! How a connection's bytes travel: TCP with the client's socket options
//! ([`TcpOptions`]: local address, interface, keep-alive), a Unix-domain
//! socket (an Address that names one), or a stream an embedder opens itself
//! ([`Connect`], the connector hook). Proxies, TLS, HTTP/1.1 and HTTP/2 run on
//! top of any of them unchanged, and the pool and the race treat them alike.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use switchyard_core::Route;

/// TCP keep-alive probes (`SO_KEEPALIVE`): after `idle` without traffic the
/// system sends a probe every `interval`, and gives the connection up after
/// `retries` unanswered ones. `interval` and `retries` are left to the system
/// (Linux: 75 s, 9) when `None`, and where the platform cannot set them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpKeepalive {
    /// Idle time before the first probe (`TCP_KEEPIDLE`).
    pub idle: Duration,
    /// Between probes (`TCP_KEEPINTVL`).
    pub interval: Option<Duration>,
    /// Unanswered probes before the connection is dropped (`TCP_KEEPCNT`).
    pub retries: Option<u32>,
}

/// Socket options for every TCP connection a client opens (to origins and
/// to proxies). `TCP_NODELAY` is always on. Default: none of these, which
/// keeps the runtime's own connect (the fast path).
///
/// ```
/// # use switchyard_common::transport::TcpOptions;
/// assert!(TcpOptions::default().is_default());
/// let bound = TcpOptions { local_address: Some([127, 0, 0, 1].into()), ..TcpOptions::default() };
/// assert!(!bound.is_default());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// The local IP to bind before connecting (`bind(2)`, port chosen by the
    /// system). A route of the other family fails with a typed connect error
    /// naming both, and the race moves to the next route.
    pub local_address: Option<IpAddr>,
    /// The network interface to send through (`SO_BINDTODEVICE`, Linux and
    /// Android only; elsewhere the build fails with a config error). Often
    /// needs `CAP_NET_RAW`.
    pub interface: Option<String>,
    /// TCP keep-alive, off by default.
    pub keepalive: Option<TcpKeepalive>,
    /// `TCP_USER_TIMEOUT` (Linux and Android): how long sent data may stay
    /// unacknowledged before the system drops the connection, so a peer
    /// that vanished mid-write is found in that time rather than after the
    /// system's retransmissions (about 15 minutes). Off by default.
    pub user_timeout: Option<Duration>,
}

impl TcpOptions {
    /// Whether nothing is set (the runtime's plain connect will do).
    #[must_use]
    pub fn is_default(&self) -> bool {
        *self == TcpOptions::default()
    }

    /// The keep-alive settings, turned on (idle 60 s) if they were off.
    pub fn keepalive_mut(&mut self) -> &mut TcpKeepalive {
        self.keepalive.get_or_insert(TcpKeepalive {
            idle: Duration::from_secs(60),
            interval: None,
            retries: None,
        })
    }

    /// Checks what the platform can honour (called when the client is built).
    ///
    /// # Errors
    /// An interface on a platform without `SO_BINDTODEVICE`, or an empty one.
    pub fn check(&self) -> Result<(), String> {
        if let Some(name) = &self.interface {
            if name.is_empty() || name.len() >= 16 || name.contains('\0') {
                return Err(format!("interface {name:?}: not an interface name (1 to 15 bytes)"));
            }
            if !cfg!(any(target_os = "linux", target_os = "android")) {
                return Err(format!(
                    "interface {name:?}: binding to an interface needs Linux (SO_BINDTODEVICE)"
                ));
            }
        }
        if let Some(t) = self.user_timeout {
            if t.is_zero() || t.as_millis() > u128::from(u32::MAX) {
                return Err("tcp_user_timeout: must be longer than zero and under 49 days".into());
            }
            if !cfg!(any(target_os = "linux", target_os = "android")) {
                return Err("tcp_user_timeout: TCP_USER_TIMEOUT needs Linux".into());
            }
        }
        if let Some(k) = self.keepalive {
            if k.idle.is_zero() || k.interval.is_some_and(|i| i.is_zero()) || k.retries == Some(0) {
                return Err("tcp_keepalive: idle, interval and retries must be positive".into());
            }
        }
        Ok(())
    }

    /// A socket for `addr` with these options set and bound, not yet
    /// connected (blocking mode; an async runtime makes it non-blocking).
    ///
    /// # Errors
    /// The system refused the socket or an option; a local address of the
    /// other family than `addr` (the message names both).
    pub fn socket(&self, addr: SocketAddr) -> io::Result<socket2::Socket> {
        self.socket_of(addr, socket2::Type::STREAM)
    }

    /// Starts a non-blocking connect to `addr` with these options: the
    /// socket (non-blocking) and whether it is connected already.
    ///
    /// A peer on this host usually is by the time `connect` returns (the
    /// handshake runs within the call), and then an async runtime need not
    /// wait for the socket's first readiness: asking costs one system call
    /// (`getpeername`) where waiting costs a reactor round trip, a wake-up and
    /// `SO_ERROR`; to a remote peer it is one system call beside a network
    /// round trip. When not connected yet, wait until the socket is writable,
    /// then take its error ([`socket2::Socket::take_error`]).
    ///
    /// # Errors
    /// As [`TcpOptions::socket`], and a connect refused at once.
    ///
    /// ```
    /// # use switchyard_common::transport::TcpOptions;
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let (socket, connected) = TcpOptions::default().start_connect(listener.local_addr().unwrap()).unwrap();
    /// // On loopback the handshake is over before connect returns (Linux).
    /// # #[cfg(target_os = "linux")]
    /// assert!(connected);
    /// # let _ = (socket, connected);
    /// ```
    pub fn start_connect(&self, addr: SocketAddr) -> io::Result<(socket2::Socket, bool)> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let socket = self.socket_of(addr, socket2::Type::STREAM.nonblocking())?;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let socket = {
            let socket = self.socket(addr)?;
            socket.set_nonblocking(true)?;
            socket
        };
        match socket.connect(&addr.into()) {
            Ok(()) => Ok((socket, true)),
            Err(e) if connect_pending(&e) => {
                let connected = socket.peer_addr().is_ok();
                Ok((socket, connected))
            }
            Err(e) => Err(e),
        }
    }

    fn socket_of(&self, addr: SocketAddr, ty: socket2::Type) -> io::Result<socket2::Socket> {
        use socket2::{Domain, Protocol, Socket};
        let socket = Socket::new(Domain::for_address(addr), ty, Some(Protocol::TCP))?;
        socket.set_tcp_nodelay(true)?;
        if let Some(k) = self.keepalive {
            let mut params = socket2::TcpKeepalive::new().with_time(k.idle);
            #[cfg(any(
                target_os = "linux",
                target_os = "android",
                target_os = "macos",
                target_os = "windows"
            ))]
            if let Some(interval) = k.interval {
                params = params.with_interval(interval);
            }
            #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
            if let Some(retries) = k.retries {
                params = params.with_retries(retries);
            }
            socket.set_tcp_keepalive(&params)?;
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(t) = self.user_timeout {
            socket.set_tcp_user_timeout(Some(t))?;
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(name) = &self.interface {
            socket.bind_device(Some(name.as_bytes())).map_err(|e| {
                io::Error::new(e.kind(), format!("binding to interface {name:?} failed: {e}"))
            })?;
        }
        if let Some(ip) = self.local_address {
            if ip.is_ipv4() != addr.is_ipv4() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("local address {ip} cannot reach {addr} (another address family)"),
                ));
            }
            socket.bind(&SocketAddr::new(ip, 0).into()).map_err(|e| {
                io::Error::new(e.kind(), format!("binding to local address {ip} failed: {e}"))
            })?;
        }
        Ok(socket)
    }

    /// A blocking connect with these options, within `limit`.
    ///
    /// # Errors
    /// As [`TcpOptions::socket`], and the connect's own failure or timeout.
    pub fn connect_timeout(&self, addr: SocketAddr, limit: Duration) -> io::Result<std::net::TcpStream> {
        let socket = self.socket(addr)?;
        socket.connect_timeout(&addr.into(), limit)?;
        Ok(socket.into())
    }
}

/// Whether a non-blocking connect's error means "under way".
fn connect_pending(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::WouldBlock
    }
}

/// The connector hook: opens the byte stream for a route instead of the
/// client's own TCP connect (or Unix-socket connect). Whatever a route needs
/// on top — the SOCKS5 or `CONNECT` handshake, TLS, then HTTP/1.1 or HTTP/2 —
/// runs on the stream it returns, and the pool, the race (each route is one
/// attempt, raced as any other) and the events are unchanged.
///
/// `T` is what the adapter needs back: `switchyard_tokio::Connecting` and
/// `switchyard_smol::Connecting` (a boxed future of a boxed async stream).
/// The connect timeout bounds the returned future like a TCP connect.
///
/// A connector that writes a preamble first (a vsock bridge's `CONNECT
/// <port>`, a PROXY protocol header) does it inside `connect`. See the
/// adapters' docs for a firecracker-style vsock example.
pub trait Connect<T>: Send + Sync + 'static {
    /// Opens the stream `route` dials: [`Route::socket_addr`], or
    /// [`Route::unix_socket`] for an Address that names one, or anything
    /// the embedder decides from the route's Address.
    fn connect(&self, route: &Route) -> T;

    /// Whether routes need the host's addresses (DNS, proxies, one route per
    /// address raced as usual). `false`: the connector reaches the host by
    /// its name (a vsock bridge, an in-memory pipe): no lookup, no proxy,
    /// one route whose socket address is a placeholder. Default: `true`
    /// (closures too; [`by_name`] wraps one that needs no DNS).
    fn uses_dns(&self) -> bool {
        true
    }
}

impl<T, F: Fn(&Route) -> T + Send + Sync + 'static> Connect<T> for F {
    fn connect(&self, route: &Route) -> T {
        self(route)
    }
}

/// A connector closure that reaches hosts by name: no DNS for its routes
/// ([`Connect::uses_dns`] is `false`).
///
/// ```
/// # use switchyard_common::transport::{by_name, Connect};
/// # use switchyard_core::Route;
/// let hook = by_name(|_route: &Route| ());
/// assert!(!hook.uses_dns());
/// ```
pub fn by_name<T, F: Fn(&Route) -> T + Send + Sync + 'static>(connect: F) -> ByName<F> {
    ByName(connect)
}

/// See [`by_name`].
#[derive(Clone, Copy, Debug)]
pub struct ByName<F>(pub F);

impl<T, F: Fn(&Route) -> T + Send + Sync + 'static> Connect<T> for ByName<F> {
    fn connect(&self, route: &Route) -> T {
        (self.0)(route)
    }
    fn uses_dns(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three ways a non-blocking connect starts: over already (a
    /// listener on loopback), refused (a closed port), or under way (a
    /// listener whose backlog is full drops the SYN: TOOLING.md's dead route).
    #[test]
    fn a_connect_starts_connected_refused_or_under_way() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (socket, connected) =
            TcpOptions::default().start_connect(listener.local_addr().unwrap()).unwrap();
        assert!(socket.tcp_nodelay().unwrap(), "the options are set");
        #[cfg(target_os = "linux")]
        assert!(connected, "on loopback the handshake is over when connect returns");
        if connected {
            assert_eq!(socket.peer_addr().unwrap().as_socket(), Some(listener.local_addr().unwrap()));
        }

        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        match TcpOptions::default().start_connect(closed) {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
            Ok((socket, connected)) => {
                assert!(!connected, "a refused connect is never connected");
                let refused = (0..100).find_map(|_| {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    socket.take_error().unwrap()
                });
                assert_eq!(refused.map(|e| e.kind()), Some(io::ErrorKind::ConnectionRefused));
            }
        }

        let full = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        full.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
        full.listen(0).unwrap();
        let addr = full.local_addr().unwrap().as_socket().unwrap();
        let mut held = Vec::new();
        let pending = loop {
            let (socket, connected) = TcpOptions::default().start_connect(addr).unwrap();
            if !connected {
                break socket;
            }
            held.push(socket);
            assert!(held.len() < 16, "the backlog never filled");
        };
        assert!(pending.peer_addr().is_err(), "under way: no peer yet");
        assert!(pending.take_error().unwrap().is_none(), "and no error");
    }

    #[test]
    fn the_socket_carries_every_option() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let options = TcpOptions {
            local_address: Some([127, 0, 0, 1].into()),
            interface: None,
            keepalive: Some(TcpKeepalive {
                idle: Duration::from_secs(42),
                interval: Some(Duration::from_secs(7)),
                retries: Some(4),
            }),
            user_timeout: Some(Duration::from_millis(9_500)),
        };
        let stream = options.connect_timeout(addr, Duration::from_secs(5)).unwrap();
        let sock = socket2::SockRef::from(&stream);
        assert!(sock.tcp_nodelay().unwrap());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(42));
        #[cfg(target_os = "linux")]
        {
            assert_eq!(sock.tcp_keepalive_interval().unwrap(), Duration::from_secs(7));
            assert_eq!(sock.tcp_keepalive_retries().unwrap(), 4);
            assert_eq!(sock.tcp_user_timeout().unwrap(), Some(Duration::from_millis(9_500)));
        }
        assert_eq!(stream.local_addr().unwrap().ip(), std::net::IpAddr::from([127, 0, 0, 1]));
    }

    #[test]
    fn bad_options_are_config_errors() {
        let named = |n: &str| TcpOptions { interface: Some(n.into()), ..TcpOptions::default() };
        assert!(named("").check().is_err());
        assert!(named("a-very-long-interface-name").check().is_err());
        let zero = TcpOptions {
            keepalive: Some(TcpKeepalive { idle: Duration::ZERO, interval: None, retries: None }),
            ..TcpOptions::default()
        };
        assert!(zero.check().unwrap_err().contains("positive"));
        assert!(TcpOptions::default().check().is_ok());
    }
}
