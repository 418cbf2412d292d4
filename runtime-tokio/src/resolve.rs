//! DNS through the [`Resolve`] trait: the system resolver by default (off the
//! async threads), with static overrides like curl's `--resolve`.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

/// The future a resolver returns.
pub type Resolving = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Resolves host names. Implement it to plug in another resolver.
///
/// ```
/// use std::net::IpAddr;
/// use switchyard_tokio::{Resolve, Resolving};
/// struct Fixed(Vec<IpAddr>);
/// impl Resolve for Fixed {
///     fn resolve(&self, _host: &str, _port: u16) -> Resolving {
///         let ips = self.0.clone();
///         Box::pin(async move { Ok(ips) })
///     }
/// }
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a name, never an IP literal); `port` is the port
    /// the routes will dial, for resolvers that care.
    fn resolve(&self, host: &str, port: u16) -> Resolving;
}

/// The operating system's resolver (`getaddrinfo`), run on tokio's blocking pool.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Resolving {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Static answers for `host:port` pairs, falling back to another resolver.
pub(crate) struct Overrides {
    pub(crate) map: HashMap<(String, u16), Vec<IpAddr>>,
    pub(crate) fallback: Arc<dyn Resolve>,
}

impl Resolve for Overrides {
    fn resolve(&self, host: &str, port: u16) -> Resolving {
        match self.map.get(&(host.to_ascii_lowercase(), port)) {
            Some(ips) => {
                let ips = ips.clone();
                Box::pin(async move { Ok(ips) })
            }
            None => self.fallback.resolve(host, port),
        }
    }
}
