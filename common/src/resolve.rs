//! DNS: the system resolver (`getaddrinfo`) by default, any blocking resolver
//! through [`Resolve`], any async one through [`AsyncResolve`] (the async
//! adapters only), with static overrides like curl's `--resolve`.
//!
//! Blocking resolvers run on the async runtime's blocking pool (tokio's
//! `spawn_blocking`, smol's `unblock`), never on an executor thread; the blocking
//! adapter runs them on a short-lived thread so a slow lookup never holds up other
//! calls. An [`AsyncResolve`] runs as a task on the runtime; one that answers A and
//! AAAA separately ([`AsyncResolve::per_family`], as the `hickory` feature's
//! resolver does) lets the connect race start on the first useful answer (RFC 8305
//! §3, see [`switchyard_core::dns`]).
//!
//! Whatever the resolver, the client's pool caches the answers (for their time to
//! live, or the configured default when the resolver gives none) and shares a
//! lookup in flight between calls.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use switchyard_core::Family;

/// Resolves host names. Implement it to plug in another resolver.
///
/// ```
/// use std::net::IpAddr;
/// # use switchyard_common::Resolve;
/// struct Fixed(Vec<IpAddr>);
/// impl Resolve for Fixed {
///     fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
///         Ok(self.0.clone())
///     }
/// }
/// let fixed = Fixed(vec!["127.0.0.1".parse().unwrap()]);
/// assert_eq!(fixed.resolve("example.test", 80).unwrap().len(), 1);
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a name, never an IP literal); `port` is the port
    /// the routes will dial, for resolvers that care. May block.
    ///
    /// # Errors
    /// The name does not resolve, or the lookup failed.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;

    /// Whether [`Resolve::resolve_family`] asks A and AAAA separately; the
    /// client then runs both lookups at once (each on a blocking thread) and
    /// feeds each answer to the race as it arrives. Default: `false`.
    /// [`SystemResolver`] says `true`.
    fn per_family(&self) -> bool {
        false
    }

    /// The addresses of one family (`Family::V6`: AAAA, `Family::V4`: A). An
    /// empty answer means the name has none of that family; an error fails only
    /// that family. Default: [`Resolve::resolve`], filtered. May block.
    ///
    /// # Errors
    /// The lookup failed.
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> io::Result<Vec<IpAddr>> {
        let mut all = self.resolve(host, port)?;
        all.retain(|ip| Family::of(ip) == family);
        Ok(all)
    }
}

impl<R: Resolve + ?Sized> Resolve for Arc<R> {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        (**self).resolve(host, port)
    }
    fn per_family(&self) -> bool {
        (**self).per_family()
    }
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> io::Result<Vec<IpAddr>> {
        (**self).resolve_family(host, port, family)
    }
}

/// The operating system's resolver: `getaddrinfo`, so the hosts file,
/// `nsswitch.conf` and `resolv.conf` apply as for any program.
///
/// It answers per family ([`Resolve::per_family`]): the client asks A
/// (`AF_INET`) and AAAA (`AF_INET6`) as two lookups at once, so a slow AAAA
/// answer holds IPv4 up no longer than the resolution delay (RFC 8305 §3,
/// 50 ms by default) instead of the whole lookup, as one `AF_UNSPEC` call
/// would. A family the name lacks is an empty answer; a name that does not
/// exist at all fails as the A lookup says ("Name or service not known").
///
/// ```
/// # use switchyard_common::{Resolve, SystemResolver};
/// # use switchyard_core::Family;
/// let v4 = SystemResolver.resolve_family("127.0.0.1", 80, Family::V4).unwrap();
/// assert_eq!(v4, vec![std::net::IpAddr::from([127, 0, 0, 1])]);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
    }

    fn per_family(&self) -> bool {
        true
    }

    fn resolve_family(&self, host: &str, _port: u16, family: Family) -> io::Result<Vec<IpAddr>> {
        use dns_lookup::{AddrFamily, AddrInfoHints, LookupErrorKind, SockType};
        let hints = AddrInfoHints {
            flags: 0,
            address: match family {
                Family::V4 => AddrFamily::Inet,
                Family::V6 => AddrFamily::Inet6,
            }
            .into(),
            socktype: SockType::Stream.into(),
            protocol: 0,
        };
        match dns_lookup::getaddrinfo(Some(host), None, Some(hints)) {
            Ok(found) => {
                let mut ips = Vec::new();
                for info in found {
                    let ip = info?.sockaddr.ip();
                    // One entry per address (the stream hint already drops the
                    // datagram and raw duplicates).
                    if Family::of(&ip) == family && !ips.contains(&ip) {
                        ips.push(ip);
                    }
                }
                Ok(ips)
            }
            // The name exists without addresses of this family.
            Err(e) if matches!(e.kind(), LookupErrorKind::NoData) => Ok(Vec::new()),
            // glibc says "no such name" for a family a hosts-file entry lacks:
            // for AAAA that is an empty answer; the A lookup keeps the error so
            // a name that does not exist fails in the resolver's words.
            Err(e) if matches!(e.kind(), LookupErrorKind::NoName) && family == Family::V6 => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A boxed, sendable future, as [`AsyncResolve`] returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What an [`AsyncResolve`] answers: the addresses and, when the resolver knows
/// it, how long they may be cached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The addresses, in the resolver's order. Empty: the name has none (of the
    /// family asked for).
    pub addresses: Vec<IpAddr>,
    /// The answer's time to live; `None`: the client's default
    /// (`dns_cache_ttl`, 60 s).
    pub ttl: Option<Duration>,
}

impl Resolved {
    /// Addresses without a time to live.
    #[must_use]
    pub fn new(addresses: Vec<IpAddr>) -> Resolved {
        Resolved { addresses, ttl: None }
    }

    /// With a time to live.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Resolved {
        self.ttl = Some(ttl);
        self
    }
}

/// Resolves host names without blocking a thread: for the async adapters
/// (`switchyard-tokio`, `switchyard-smol`). Implement [`AsyncResolve::resolve`];
/// a resolver that can ask for A and AAAA separately also implements
/// [`AsyncResolve::resolve_family`] and says so with [`AsyncResolve::per_family`],
/// so that IPv6 attempts start as soon as AAAA answers.
///
/// A lookup that never completes holds only its own task: the call is bounded by
/// its timeouts. Name a failure in the error: its text reaches the call's error
/// ("lookup failed: …").
///
/// ```
/// use std::net::IpAddr;
/// use std::time::Duration;
/// # use switchyard_common::{AsyncResolve, BoxFuture, Resolved};
/// struct Fixed(Vec<IpAddr>);
/// impl AsyncResolve for Fixed {
///     fn resolve(&self, _host: &str, _port: u16) -> BoxFuture<std::io::Result<Resolved>> {
///         let ips = self.0.clone();
///         Box::pin(async move { Ok(Resolved::new(ips).with_ttl(Duration::from_secs(30))) })
///     }
/// }
/// let fixed = Fixed(vec!["127.0.0.1".parse().unwrap()]);
/// assert!(!fixed.per_family());
/// ```
pub trait AsyncResolve: Send + Sync + 'static {
    /// Every address of `host` (a name, never an IP literal); `port` is the port
    /// the routes will dial, for resolvers that care.
    ///
    /// # Errors
    /// The name does not resolve, or the lookup failed.
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<io::Result<Resolved>>;

    /// Whether [`AsyncResolve::resolve_family`] asks A and AAAA separately; the
    /// client then starts both at once and feeds each answer to the race as it
    /// arrives. Default: `false` ([`AsyncResolve::resolve`] is used alone).
    fn per_family(&self) -> bool {
        false
    }

    /// The addresses of one family (`Family::V6`: AAAA, `Family::V4`: A). An
    /// empty answer means the name has none of that family; an error fails only
    /// that family. Default: [`AsyncResolve::resolve`], filtered.
    ///
    /// # Errors
    /// The lookup failed.
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> BoxFuture<io::Result<Resolved>> {
        let all = self.resolve(host, port);
        Box::pin(async move {
            let mut answer = all.await?;
            answer.addresses.retain(|ip| Family::of(ip) == family);
            Ok(answer)
        })
    }

    /// `host`'s HTTPS records (RFC 9460), for resolvers that can ask for
    /// them: a client with HTTP/3 asks once per name (in the background, the
    /// first call does not wait) and races QUIC against TCP on the next
    /// connections when a record offers `h3` on the origin's own name.
    /// Default: `None` (this resolver cannot).
    fn service_bindings(&self, _host: &str) -> Option<BoxFuture<io::Result<HttpsRecords>>> {
        None
    }
}

/// An origin's HTTPS records (RFC 9460) with their time to live; the core's
/// [`service_binding::endpoints`](switchyard_core::service_binding::endpoints)
/// turns them into endpoints in the order to try them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpsRecords {
    /// The records, in the answer's order.
    pub records: Vec<switchyard_core::service_binding::ServiceBinding>,
    /// The shortest time to live among them (`None`: no records).
    pub ttl: Option<std::time::Duration>,
}

impl<R: AsyncResolve + ?Sized> AsyncResolve for Arc<R> {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<io::Result<Resolved>> {
        (**self).resolve(host, port)
    }
    fn per_family(&self) -> bool {
        (**self).per_family()
    }
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> BoxFuture<io::Result<Resolved>> {
        (**self).resolve_family(host, port, family)
    }
}

/// Static answers for `host:port` pairs before an async resolver.
pub(crate) struct AsyncOverrides {
    pub(crate) map: HashMap<(String, u16), Vec<IpAddr>>,
    pub(crate) fallback: Arc<dyn AsyncResolve>,
}

impl AsyncResolve for AsyncOverrides {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<io::Result<Resolved>> {
        match self.map.get(&(host.to_ascii_lowercase(), port)) {
            Some(ips) => {
                let ips = ips.clone();
                Box::pin(async move { Ok(Resolved::new(ips)) })
            }
            None => self.fallback.resolve(host, port),
        }
    }
    fn per_family(&self) -> bool {
        self.fallback.per_family()
    }
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> BoxFuture<io::Result<Resolved>> {
        match self.map.get(&(host.to_ascii_lowercase(), port)) {
            Some(ips) => {
                let ips: Vec<IpAddr> = ips.iter().copied().filter(|ip| Family::of(ip) == family).collect();
                Box::pin(async move { Ok(Resolved::new(ips)) })
            }
            None => self.fallback.resolve_family(host, port, family),
        }
    }
}

/// Static answers for `host:port` pairs, falling back to another resolver.
pub(crate) struct Overrides {
    pub(crate) map: HashMap<(String, u16), Vec<IpAddr>>,
    pub(crate) fallback: Arc<dyn Resolve>,
}

impl Resolve for Overrides {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        match self.map.get(&(host.to_ascii_lowercase(), port)) {
            Some(ips) => Ok(ips.clone()),
            None => self.fallback.resolve(host, port),
        }
    }
    fn per_family(&self) -> bool {
        self.fallback.per_family()
    }
    fn resolve_family(&self, host: &str, port: u16, family: Family) -> io::Result<Vec<IpAddr>> {
        match self.map.get(&(host.to_ascii_lowercase(), port)) {
            Some(ips) => Ok(ips.iter().copied().filter(|ip| Family::of(ip) == family).collect()),
            None => self.fallback.resolve_family(host, port, family),
        }
    }
}
