//! DNS through the [`Resolve`] trait: the system resolver (`getaddrinfo`) by
//! default, with static overrides like curl's `--resolve`.
//!
//! Resolvers are blocking calls. The async adapters run them on their runtime's
//! blocking pool (tokio's `spawn_blocking`, smol's `unblock`), never on an executor
//! thread; the blocking adapter runs them on a short-lived thread so a slow lookup
//! never holds up other calls.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;

/// Resolves host names. Implement it to plug in another resolver.
///
/// ```
/// use std::net::IpAddr;
/// use switchyard_common::Resolve;
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
}

/// The operating system's resolver (`getaddrinfo` through the standard library).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
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
}
