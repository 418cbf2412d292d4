//! [hickory-resolver](https://docs.rs/hickory-resolver) as an
//! [`AsyncResolve`] (cargo feature `hickory` of the async adapters).
//!
//! It asks A and AAAA as separate queries, so the connect race starts on the
//! first useful answer (RFC 8305 §3; see [`switchyard_core::dns`]), and it reports
//! each answer's time to live to the client's DNS cache. hickory's own cache is
//! off: the client's pool caches (one cache, one set of rules, events that say so).
//!
//! The adapters name it for their runtime: `switchyard_tokio::HickoryResolver`
//! (hickory's tokio provider) and `switchyard_smol::HickoryResolver` (an
//! async-io provider, no tokio).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::lookup::Lookup;
use hickory_resolver::net::runtime::RuntimeProvider;
use hickory_resolver::net::{DnsError as HickoryDnsError, NetError, NoRecords};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::Resolver;
use switchyard_core::Family;

use crate::error::Error;
use crate::resolve::{AsyncResolve, BoxFuture, Resolved};

/// hickory-resolver behind the [`AsyncResolve`] trait, for the runtime
/// provider `P`. Cheap to clone.
#[derive(Clone)]
pub struct HickoryResolver<P: RuntimeProvider> {
    inner: Resolver<P>,
}

impl<P: RuntimeProvider> std::fmt::Debug for HickoryResolver<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HickoryResolver").finish_non_exhaustive()
    }
}

impl<P: RuntimeProvider + Default> HickoryResolver<P> {
    /// The system's configuration (`/etc/resolv.conf`: name servers, search
    /// domains, timeouts), with hickory's cache off.
    ///
    /// # Errors
    /// A configuration error when the system configuration cannot be read or
    /// names no server.
    pub fn system() -> Result<Self, Error> {
        let mut builder = Resolver::builder(P::default())
            .map_err(|e| Error::config(format!("hickory DNS: the system configuration: {e}")))?;
        builder.options_mut().cache_size = 0;
        let inner = builder.build().map_err(|e| Error::config(format!("hickory DNS: {e}")))?;
        Ok(HickoryResolver { inner })
    }

    /// These name servers only (UDP, then TCP for truncated answers), no search
    /// domains, no hosts file, 2 s per try and one retry, hickory's cache off.
    ///
    /// # Errors
    /// A configuration error when `servers` is empty.
    pub fn with_servers(servers: &[SocketAddr]) -> Result<Self, Error> {
        if servers.is_empty() {
            return Err(Error::config("hickory DNS: no name server given"));
        }
        let name_servers = servers
            .iter()
            .map(|server| {
                let mut udp = ConnectionConfig::udp();
                udp.port = server.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = server.port();
                NameServerConfig::new(server.ip(), true, vec![udp, tcp])
            })
            .collect();
        let mut opts = ResolverOpts::default();
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.timeout = Duration::from_secs(2);
        opts.attempts = 1;
        opts.ndots = 0;
        let inner =
            Resolver::builder_with_config(ResolverConfig::from_name_servers(name_servers), P::default())
                .with_options(opts)
                .build()
                .map_err(|e| Error::config(format!("hickory DNS: {e}")))?;
        Ok(HickoryResolver { inner })
    }
}

impl<P: RuntimeProvider> HickoryResolver<P> {
    /// Wraps a resolver built with hickory's own builder (turn its cache off:
    /// `options_mut().cache_size = 0`; the client caches).
    #[must_use]
    pub fn from_resolver(inner: Resolver<P>) -> Self {
        HickoryResolver { inner }
    }
}

pub use crate::resolve::HttpsRecords;

impl<P: RuntimeProvider> HickoryResolver<P> {
    /// Asks for `host`'s HTTPS records: where DNS says the origin is served
    /// and with which protocols (`alpn` `h3`: HTTP/3 from the first request).
    /// A name without any is an empty answer, not an error.
    ///
    /// # Errors
    /// The name does not exist (`NotFound`), the query timed out
    /// (`TimedOut`), or it failed otherwise; the text names the host.
    pub async fn https_records(&self, host: &str) -> io::Result<HttpsRecords> {
        use hickory_resolver::proto::rr::RecordType;
        match self.inner.lookup(host, RecordType::HTTPS).await {
            Ok(lookup) => Ok(https_records(&lookup)),
            Err(NetError::Dns(HickoryDnsError::NoRecordsFound(NoRecords { response_code, .. }))) => {
                if response_code == ResponseCode::NXDomain {
                    Err(io::Error::new(io::ErrorKind::NotFound, format!("{host}: no such name (NXDOMAIN)")))
                } else {
                    Ok(HttpsRecords::default())
                }
            }
            Err(NetError::Timeout) => {
                Err(io::Error::new(io::ErrorKind::TimedOut, format!("{host}: HTTPS query timed out")))
            }
            Err(e) => Err(io::Error::other(format!("{host}: HTTPS query failed: {e}"))),
        }
    }
}

/// The HTTPS records of a lookup in the core's terms.
fn https_records(lookup: &Lookup) -> HttpsRecords {
    use hickory_resolver::proto::rr::rdata::svcb::SvcParamValue as V;
    use switchyard_core::service_binding::{ServiceBinding, SvcParam};
    let mut out = HttpsRecords::default();
    for record in lookup.answers() {
        let RData::HTTPS(https) = &record.data else { continue };
        let svcb = &https.0;
        let params = svcb
            .svc_params
            .iter()
            .map(|(key, value)| match value {
                V::Mandatory(m) => SvcParam::Mandatory(m.0.iter().map(|k| u16::from(*k)).collect()),
                V::Alpn(a) => SvcParam::Alpn(a.0.iter().map(|id| id.as_bytes().to_vec()).collect()),
                V::NoDefaultAlpn => SvcParam::NoDefaultAlpn,
                V::Port(p) => SvcParam::Port(*p),
                V::Ipv4Hint(h) => SvcParam::Ipv4Hint(h.0.iter().map(|a| a.0).collect()),
                V::Ipv6Hint(h) => SvcParam::Ipv6Hint(h.0.iter().map(|a| a.0).collect()),
                V::EchConfigList(_) | V::Unknown(_) => SvcParam::Other(u16::from(*key)),
            })
            .collect();
        out.records.push(ServiceBinding {
            priority: svcb.svc_priority,
            target: svcb.target_name.to_ascii(),
            params,
        });
        out.ttl = Some(out.ttl.map_or(Duration::from_secs(u64::from(record.ttl)), |t: Duration| {
            t.min(Duration::from_secs(u64::from(record.ttl)))
        }));
    }
    out
}

/// The addresses of a lookup and the shortest time to live among them.
fn resolved(lookup: &Lookup) -> Resolved {
    let mut addresses = Vec::new();
    let mut ttl: Option<u32> = None;
    for record in lookup.answers() {
        let ip = match &record.data {
            RData::A(a) => IpAddr::V4(a.0),
            RData::AAAA(a) => IpAddr::V6(a.0),
            _ => continue, // CNAMEs on the way
        };
        addresses.push(ip);
        ttl = Some(ttl.map_or(record.ttl, |t| t.min(record.ttl)));
    }
    Resolved { addresses, ttl: ttl.map(|t| Duration::from_secs(u64::from(t))) }
}

/// hickory's failure as what the core understands: "no records of this type" is
/// an empty answer (the other family may have some), a missing name is
/// `NotFound`, a timeout is `TimedOut`; the text says which.
fn outcome(result: Result<Lookup, NetError>, host: &str, family: Family) -> io::Result<Resolved> {
    let kind = if family == Family::V6 { "AAAA" } else { "A" };
    match result {
        Ok(lookup) => Ok(resolved(&lookup)),
        Err(NetError::Dns(HickoryDnsError::NoRecordsFound(NoRecords { response_code, .. }))) => {
            if response_code == ResponseCode::NXDomain {
                Err(io::Error::new(io::ErrorKind::NotFound, format!("{host}: no such name (NXDOMAIN)")))
            } else {
                Ok(Resolved::default())
            }
        }
        Err(NetError::Timeout) => {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("{host}: {kind} query timed out")))
        }
        Err(e) => Err(io::Error::other(format!("{host}: {kind} query failed: {e}"))),
    }
}

impl<P: RuntimeProvider> AsyncResolve for HickoryResolver<P> {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<io::Result<Resolved>> {
        let (v6, v4) =
            (self.resolve_family(host, port, Family::V6), self.resolve_family(host, port, Family::V4));
        Box::pin(async move {
            let (v6, v4) = (v6.await, v4.await);
            match (v6, v4) {
                (Ok(a), Ok(b)) => {
                    let ttl = match (a.ttl, b.ttl) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                    Ok(Resolved { addresses: a.addresses.into_iter().chain(b.addresses).collect(), ttl })
                }
                (Ok(a), Err(_)) | (Err(_), Ok(a)) if !a.addresses.is_empty() => Ok(a),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        })
    }

    fn per_family(&self) -> bool {
        true
    }

    fn service_bindings(&self, host: &str) -> Option<BoxFuture<io::Result<HttpsRecords>>> {
        let me = self.clone();
        let host = host.to_owned();
        Some(Box::pin(async move { me.https_records(&host).await }))
    }

    fn resolve_family(&self, host: &str, _port: u16, family: Family) -> BoxFuture<io::Result<Resolved>> {
        let resolver = self.inner.clone();
        let host = host.to_owned();
        Box::pin(async move {
            let result = match family {
                Family::V6 => resolver.ipv6_lookup(host.as_str()).await,
                Family::V4 => resolver.ipv4_lookup(host.as_str()).await,
            };
            outcome(result, &host, family)
        })
    }
}
