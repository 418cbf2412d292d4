//! Proxies as users configure them: proxy URLs (`http://user:pass@host:3128`,
//! `socks5://`, `socks5h://`) and the environment (`http_proxy`,
//! `https_proxy`, `all_proxy`, `no_proxy`, in curl's precedence), as a
//! per-URL choice ([`ProxyEnv::proxies_for`]).
//!
//! The rules, curl's unless said otherwise:
//! - `http://` URLs use `http_proxy`, then `HTTP_PROXY` — unless
//!   `REQUEST_METHOD` is set (a CGI program, where `HTTP_PROXY` can come from
//!   a request's `Proxy:` header: "httpoxy"; curl never reads the uppercase
//!   form). `https://` URLs use `https_proxy`, then `HTTPS_PROXY`. Either
//!   falls back to `all_proxy`, then `ALL_PROXY`. Lowercase wins.
//! - `no_proxy` (then `NO_PROXY`): comma-separated; `*` alone means no proxy
//!   for any host; a name matches itself and its subdomains (`example.com`
//!   and `.example.com` both match `example.com` and `a.example.com`); an IP
//!   literal (IPv6 with or without brackets) matches that address; a CIDR
//!   range (`10.0.0.0/8`, `fd00::/8`) matches the addresses in it; a
//!   `:port` suffix limits an entry to that port.
//! - A proxy URL without a scheme is `http://`; without a port, port 1080.
//!   `socks5h://` lets the proxy resolve the origin's name (the name goes
//!   in the request, address type 3); `socks5://` resolves it here, through
//!   the client's resolver and DNS cache, and asks the proxy for one address
//!   per attempt (types 1 and 4; the race moves to the next address when the
//!   proxy cannot reach one).
//! - A `no_proxy` entry or a host with a trailing dot (`example.com.`)
//!   matches as without it.
//!   `https://` proxies (TLS to the proxy) are not supported: a typed error.
//! - A variable that is set but malformed is a configuration error naming
//!   the variable — never silently ignored. An empty variable is unset.
//!
//! ```
//! # use switchyard_common::ProxyEnv;
//! let env = ProxyEnv::from_vars(|name| match name {
//!     "https_proxy" => Some("http://ann:s%40cret@proxy.internal:3128".into()),
//!     "no_proxy" => Some("localhost,.internal,10.0.0.0/8".into()),
//!     _ => None,
//! })
//! .unwrap();
//! let via = env.proxies_for(&"https://example.com/".parse().unwrap());
//! assert_eq!(via.len(), 1);
//! assert_eq!(via[0].to_string(), "http://proxy.internal:3128"); // credentials never shown
//! assert_eq!(via[0].credentials().unwrap().password(), "s@cret");
//! assert!(env.proxies_for(&"https://api.internal/".parse().unwrap()).is_empty());
//! assert!(env.proxies_for(&"https://10.1.2.3/".parse().unwrap()).is_empty());
//! assert!(env.proxies_for(&"http://example.com/".parse().unwrap()).is_empty()); // no http_proxy
//! ```

use std::net::IpAddr;

use percent_encoding::percent_decode_str;
use switchyard_core::{Host, Proxy, ProxyCredentials};

use crate::Error;

/// Parses a proxy URL: `[scheme://][user[:password]@]host[:port]`, scheme
/// `http` (the default), `socks5` or `socks5h`; port 1080 by default; the
/// user and password percent-decoded.
///
/// ```
/// let p = switchyard_common::parse_proxy_url("socks5h://127.0.0.1:1080").unwrap();
/// assert_eq!(p.to_string(), "socks5h://127.0.0.1:1080");
/// assert!(switchyard_common::parse_proxy_url("https://proxy:443").is_err());
/// ```
///
/// # Errors
/// What is wrong with it, in words (never repeating a password).
pub fn parse_proxy_url(url: &str) -> Result<Proxy, String> {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("http".to_owned(), url),
    };
    let rest = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) =
        split_host_port(hostport).ok_or_else(|| format!("{:?} is not host[:port]", redact_userinfo(url)))?;
    if host.is_empty() {
        return Err(format!("{:?} has no host", redact_userinfo(url)));
    }
    let port = match port {
        None => 1080,
        Some(p) => {
            p.parse::<u32>().map_err(|_| format!("invalid port {p:?} in {:?}", redact_userinfo(url)))?
        }
    };
    let proxy = match scheme.as_str() {
        "http" => Proxy::http(host, port),
        "socks5" => Proxy::socks5(host, port),
        "socks5h" => Proxy::socks5h(host, port),
        "https" => return Err("HTTPS proxies (TLS to the proxy) are not supported; use http://".into()),
        other => {
            return Err(format!("unsupported proxy scheme {other:?} (expected http, socks5 or socks5h)"))
        }
    }
    .map_err(|e| format!("{e}"))?;
    Ok(match userinfo {
        None => proxy,
        Some(u) => {
            let (user, password) = u.split_once(':').unwrap_or((u, ""));
            let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
            proxy.with_credentials(ProxyCredentials::new(decode(user), decode(password)))
        }
    })
}

/// `url` with any userinfo shown as `***` (for errors).
fn redact_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if rest.contains('@') => {
            let after = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            format!("{scheme}://***@{after}")
        }
        None if url.contains('@') => format!("***@{}", url.rsplit_once('@').map_or(url, |(_, h)| h)),
        _ => url.to_owned(),
    }
}

/// `host[:port]`, IPv6 in brackets.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((host, Some(p))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match s.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 literal.
        Some((h, _)) if h.contains(':') => Some((s, None)),
        Some((h, p)) => Some((h, Some(p))),
        None => Some((s, None)),
    }
}

/// One `no_proxy` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A name and its subdomains.
    Name(String, Option<u16>),
    /// One address.
    Ip(IpAddr, Option<u16>),
    /// A range of addresses.
    Cidr(IpAddr, u8),
}

/// The hosts that go direct (`no_proxy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoProxy {
    all: bool,
    entries: Vec<Entry>,
}

impl NoProxy {
    /// reqwest's constructor: the list in `value` (as [`NoProxy::parse`]),
    /// `None` when it is empty or malformed.
    ///
    /// ```
    /// # use switchyard_common::NoProxy;
    /// assert!(NoProxy::from_string("localhost, 10.0.0.0/8").is_some());
    /// assert!(NoProxy::from_string(" ").is_none());
    /// ```
    #[must_use]
    pub fn from_string(value: &str) -> Option<NoProxy> {
        NoProxy::parse(value).ok().filter(|n| n.all || !n.entries.is_empty())
    }

    /// Parses a `no_proxy` value (see the [module docs](self)).
    ///
    /// # Errors
    /// An entry that cannot be a name, an address, or a range.
    pub fn parse(value: &str) -> Result<NoProxy, String> {
        let mut out = NoProxy::default();
        for raw in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if raw == "*" {
                out.all = true;
                continue;
            }
            if let Some((net, bits)) = raw.split_once('/') {
                let ip: IpAddr = net
                    .trim_matches(['[', ']'])
                    .parse()
                    .map_err(|_| format!("{raw:?}: {net:?} is not an IP address"))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits: u8 = bits
                    .parse()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| format!("{raw:?}: the prefix length must be 0..={max}"))?;
                out.entries.push(Entry::Cidr(ip, bits));
                continue;
            }
            let (host, port) = split_host_port(raw).ok_or_else(|| format!("{raw:?} is not host[:port]"))?;
            let port = match port {
                Some(p) => Some(p.parse::<u16>().map_err(|_| format!("{raw:?}: invalid port {p:?}"))?),
                None => None,
            };
            if let Ok(ip) = host.parse::<IpAddr>() {
                out.entries.push(Entry::Ip(ip, port));
                continue;
            }
            // A trailing dot (a fully qualified name) is ignored, as curl does.
            let name = host.trim_start_matches("*.").trim_start_matches('.');
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
                return Err(format!("{raw:?} is not a host name, an IP address or a range"));
            }
            out.entries.push(Entry::Name(name, port));
        }
        Ok(out)
    }

    /// Whether `host:port` goes direct.
    #[must_use]
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        self.matching(host, port).is_some()
    }

    /// The entry that matches `host:port`, as written (`*` for all), if any.
    #[must_use]
    pub fn matching(&self, host: &Host, port: u16) -> Option<String> {
        if self.all {
            return Some("*".to_owned());
        }
        let port_ok = |p: &Option<u16>| p.is_none_or(|p| p == port);
        let with_port = |s: String, p: &Option<u16>| match p {
            Some(p) => format!("{s}:{p}"),
            None => s,
        };
        // `example.com.` (fully qualified) is `example.com`.
        let name_of = match host {
            Host::Domain(h) => Some(h.strip_suffix('.').unwrap_or(h)),
            Host::Ip(_) => None,
        };
        self.entries.iter().find_map(|e| match (e, host) {
            (Entry::Name(name, p), Host::Domain(_))
                if port_ok(p)
                    && name_of.is_some_and(|h| {
                        h == name || h.strip_suffix(name.as_str()).is_some_and(|rest| rest.ends_with('.'))
                    }) =>
            {
                Some(with_port(name.clone(), p))
            }
            (Entry::Ip(ip, p), Host::Ip(h)) if port_ok(p) && ip == h => Some(with_port(ip.to_string(), p)),
            (Entry::Cidr(net, bits), Host::Ip(h)) if in_range(*h, *net, *bits) => {
                Some(format!("{net}/{bits}"))
            }
            _ => None,
        })
    }
}

fn in_range(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The proxy settings of an environment, per URL: see the [module docs](self).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    http: Option<Proxy>,
    https: Option<Proxy>,
    /// The variables `http` and `https` came from.
    http_from: &'static str,
    https_from: &'static str,
    /// The variable `no_proxy` came from.
    no_proxy_from: &'static str,
    no_proxy: NoProxy,
}

impl ProxyEnv {
    /// Reads the process environment.
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) naming the first
    /// malformed variable.
    pub fn from_env() -> Result<ProxyEnv, Error> {
        ProxyEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get` (for tests and embedders).
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) naming the first
    /// malformed variable.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<ProxyEnv, Error> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        // Every variable that is set is parsed (a malformed one is an error even
        // when another takes precedence); the first set one, in order, applies.
        let first = |names: &[&'static str]| -> Result<Option<(Proxy, &'static str)>, Error> {
            let mut chosen = None;
            for name in names {
                if let Some(value) = var(name) {
                    let proxy = parse_proxy_url(&value)
                        .map_err(|why| Error::config(format!("environment variable {name}: {why}")))?;
                    chosen = chosen.or(Some((proxy, *name)));
                }
            }
            Ok(chosen)
        };
        let cgi = get("REQUEST_METHOD").is_some();
        let http_names: &[&'static str] = if cgi { &["http_proxy"] } else { &["http_proxy", "HTTP_PROXY"] };
        let all = first(&["all_proxy", "ALL_PROXY"])?;
        let http = first(http_names)?.or_else(|| all.clone());
        let https = first(&["https_proxy", "HTTPS_PROXY"])?.or(all);
        let mut no_proxy = None;
        for name in ["no_proxy", "NO_PROXY"] {
            if let Some(value) = var(name) {
                let parsed = NoProxy::parse(&value)
                    .map_err(|why| Error::config(format!("environment variable {name}: {why}")))?;
                no_proxy = no_proxy.or(Some((parsed, name)));
            }
        }
        let (no_proxy, no_proxy_from) = no_proxy.unwrap_or_default();
        let (http, http_from) = http.map_or((None, ""), |(p, n)| (Some(p), n));
        let (https, https_from) = https.map_or((None, ""), |(p, n)| (Some(p), n));
        Ok(ProxyEnv { http, https, http_from, https_from, no_proxy_from, no_proxy })
    }

    /// The proxies for `uri`: none (direct) when `no_proxy` matches or no
    /// variable applies.
    #[must_use]
    pub fn proxies_for(&self, uri: &http::Uri) -> Vec<crate::ProxyServer> {
        self.explain(uri).0
    }

    /// The proxies for `uri` and why, in words for events and logs:
    /// `"no_proxy matches example.com"`, `"from https_proxy"`, `"no proxy
    /// variable for http URLs"`.
    ///
    /// ```
    /// # use switchyard_common::ProxyEnv;
    /// let env = ProxyEnv::from_vars(|name| match name {
    ///     "https_proxy" => Some("http://10.0.0.1:3128".into()),
    ///     "no_proxy" => Some("internal.test".into()),
    ///     _ => None,
    /// })
    /// .unwrap();
    /// let (proxies, why) = env.explain(&"https://api.internal.test/".parse().unwrap());
    /// assert!(proxies.is_empty());
    /// assert_eq!(why, "no_proxy matches internal.test");
    /// let (proxies, why) = env.explain(&"https://example.com/".parse().unwrap());
    /// assert_eq!((proxies.len(), why.as_str()), (1, "from https_proxy"));
    /// ```
    #[must_use]
    pub fn explain(&self, uri: &http::Uri) -> (Vec<crate::ProxyServer>, String) {
        let https = uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let (proxy, from) = if https { (&self.https, self.https_from) } else { (&self.http, self.http_from) };
        let Some(proxy) = proxy else {
            let scheme = if https { "https" } else { "http" };
            return (Vec::new(), format!("no proxy variable for {scheme} URLs"));
        };
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = uri.host().map(|h| h.trim_matches(['[', ']'])).and_then(|h| Host::parse(h).ok());
        match host.and_then(|h| self.no_proxy.matching(&h, port)) {
            Some(entry) => (Vec::new(), format!("{} matches {entry}", self.no_proxy_from)),
            None => (vec![proxy.clone()], format!("from {from}")),
        }
    }

    /// Whether any proxy variable was set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.http.is_none() && self.https.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<ProxyEnv, Error> {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        ProxyEnv::from_vars(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn explain_says_why() {
        let env = env(&[
            ("HTTPS_PROXY", "http://10.0.0.1:3128"),
            ("ALL_PROXY", "socks5://10.0.0.2:1080"),
            ("NO_PROXY", "internal.test, 10.0.0.0/8, ::1, *.skip.test:8443"),
        ])
        .unwrap();
        let why = |url: &str| env.explain(&url.parse().unwrap());
        assert_eq!(
            why("https://example.com/"),
            (vec![env.https.clone().unwrap()], "from HTTPS_PROXY".to_owned())
        );
        assert_eq!(why("http://example.com/").1, "from ALL_PROXY");
        assert_eq!(why("https://a.internal.test/").1, "NO_PROXY matches internal.test");
        assert_eq!(why("http://10.1.2.3/").1, "NO_PROXY matches 10.0.0.0/8");
        assert_eq!(why("http://[::1]/").1, "NO_PROXY matches ::1");
        assert!(
            why("https://a.skip.test:8443/").1.starts_with("NO_PROXY matches "),
            "{:?}",
            why("https://a.skip.test:8443/")
        );
        let star = super::ProxyEnv::from_vars(|n| match n {
            "http_proxy" => Some("10.0.0.1:3128".into()),
            "no_proxy" => Some("*".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            star.explain(&"http://x.test/".parse().unwrap()),
            (vec![], "no_proxy matches *".to_owned())
        );
        let none = env_none();
        assert_eq!(none.explain(&"https://x.test/".parse().unwrap()).1, "no proxy variable for https URLs");
    }

    fn env_none() -> ProxyEnv {
        ProxyEnv::from_vars(|_| None).unwrap()
    }

    fn via(env: &ProxyEnv, url: &str) -> Vec<String> {
        env.proxies_for(&url.parse().unwrap()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn precedence_follows_curl() {
        let e = env(&[("http_proxy", "lower:1"), ("HTTP_PROXY", "upper:2"), ("ALL_PROXY", "all:3")]).unwrap();
        assert_eq!(via(&e, "http://a.test/"), ["http://lower:1"]);
        assert_eq!(via(&e, "https://a.test/"), ["http://all:3"], "https falls back to all_proxy");
        let e = env(&[("HTTP_PROXY", "upper:2")]).unwrap();
        assert_eq!(via(&e, "http://a.test/"), ["http://upper:2"]);
        let cgi = env(&[("HTTP_PROXY", "injected:2"), ("REQUEST_METHOD", "GET")]).unwrap();
        assert!(via(&cgi, "http://a.test/").is_empty(), "httpoxy: HTTP_PROXY is ignored under CGI");
        let e = env(&[("https_proxy", "socks5h://s:1080"), ("HTTPS_PROXY", "x:1"), ("all_proxy", "y:2")])
            .unwrap();
        assert_eq!(via(&e, "https://a.test/"), ["socks5h://s:1080"]);
        assert_eq!(via(&e, "http://a.test/"), ["http://y:2"]);
        let e = env(&[("http_proxy", ""), ("HTTP_PROXY", "z:9")]).unwrap();
        assert_eq!(via(&e, "http://a.test/"), ["http://z:9"], "an empty variable is unset");
        assert!(env(&[]).unwrap().is_empty());
    }

    #[test]
    fn no_proxy_ignores_trailing_dots_on_entries_and_hosts() {
        let e =
            env(&[("all_proxy", "p:3128"), ("no_proxy", "www.example.com.,.corp.test.,plain.test")]).unwrap();
        for direct in [
            "http://www.example.com/",
            "http://www.example.com./",
            "http://a.corp.test/",
            "http://corp.test./",
            "http://plain.test./",
            "http://x.plain.test./",
        ] {
            assert!(via(&e, direct).is_empty(), "{direct} goes direct");
        }
        for proxied in ["http://example.com/", "http://www.example.com.evil.test/", "http://test./"] {
            assert_eq!(via(&e, proxied), ["http://p:3128"], "{proxied} is proxied");
        }
        assert!(NoProxy::parse(".").is_err(), "a dot alone names nothing");
    }

    #[test]
    fn socks5_resolves_locally_and_socks5h_remotely() {
        let local = parse_proxy_url("socks5://127.0.0.1:1080").unwrap();
        let remote = parse_proxy_url("socks5h://127.0.0.1:1080").unwrap();
        assert!(local.resolves_origin_locally() && !remote.resolves_origin_locally());
        assert_eq!(
            (local.to_string(), remote.to_string()),
            ("socks5://127.0.0.1:1080".into(), "socks5h://127.0.0.1:1080".into())
        );
        assert_ne!(local, remote, "different proxies: connections through one are not the other's");
    }

    #[test]
    fn no_proxy_matches_names_suffixes_ips_ranges_and_ports() {
        let e = env(&[
            ("all_proxy", "p:3128"),
            ("no_proxy", "example.com, .internal,10.0.0.0/8, 192.168.1.7 ,[::1],fd00::/8,svc.local:8080"),
        ])
        .unwrap();
        for direct in [
            "http://example.com/",
            "https://a.b.example.com/",
            "http://db.internal/",
            "http://internal/",
            "http://10.200.0.1/",
            "http://192.168.1.7/",
            "http://[::1]:8000/",
            "http://[fd00::5]/",
            "http://svc.local:8080/",
        ] {
            assert!(via(&e, direct).is_empty(), "{direct} goes direct");
        }
        for proxied in [
            "http://notexample.com/",
            "http://example.com.evil.test/",
            "http://11.0.0.1/",
            "http://192.168.1.8/",
            "http://[::2]/",
            "http://svc.local:9090/",
            "http://svc.local/",
        ] {
            assert_eq!(via(&e, proxied), ["http://p:3128"], "{proxied} is proxied");
        }
        let star = env(&[("all_proxy", "p:3128"), ("NO_PROXY", "*")]).unwrap();
        assert!(via(&star, "https://anything.test/").is_empty());
    }

    #[test]
    fn malformed_variables_are_errors_naming_the_variable() {
        for (name, value, why) in [
            ("https_proxy", "https://p:443", "not supported"),
            ("http_proxy", "ftp://p:21", "unsupported proxy scheme"),
            ("ALL_PROXY", "p:notaport", "invalid port"),
            ("no_proxy", "10.0.0.0/40", "prefix length"),
            ("NO_PROXY", "bad host!", "not a host name"),
            ("http_proxy", "http://:3128", "no host"),
        ] {
            let e = env(&[(name, value), ("all_proxy", "ok:1")]).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("environment variable {name}")) && text.contains(why), "{text}");
        }
        let e = env(&[("http_proxy", "http://ann:hunter2@p:notaport")]).unwrap_err();
        assert!(!e.to_string().contains("hunter2") && !e.to_string().contains("ann"), "{e}");
    }

    #[test]
    fn proxy_urls_carry_credentials_that_never_show() {
        let p = parse_proxy_url("http://ann%40corp:p%3Ass@proxy.test").unwrap();
        assert_eq!(p.to_string(), "http://proxy.test:1080");
        let c = p.credentials().unwrap();
        assert_eq!((c.user(), c.password()), ("ann@corp", "p:ss"));
        assert!(!format!("{p:?}").contains("p:ss"));
        let p = parse_proxy_url("socks5://bob:pw@[::1]:1081").unwrap();
        assert_eq!(p.to_string(), "socks5://[::1]:1081");
        assert_eq!(parse_proxy_url("10.0.0.1:3128").unwrap().to_string(), "http://10.0.0.1:3128");
    }
}
