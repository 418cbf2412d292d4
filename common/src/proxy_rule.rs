//! Proxy rules: which requests go through which proxy server.
//!
//! A [`ProxyRule`] (exported by the adapters as `Proxy`, reqwest's name)
//! pairs a proxy server with the requests it is for: `http://` URLs
//! ([`ProxyRule::http`]), `https://` URLs ([`ProxyRule::https`]) or both
//! ([`ProxyRule::all`]), minus the hosts of an optional [`NoProxy`] list.
//! A client given several rules tries, for each request, every rule that
//! applies, in the order given: the route planner falls back from one proxy
//! to the next (reqwest uses only the first that applies).
//!
//! ```
//! # use switchyard_common::{NoProxy, ProxyRule};
//! let rule = ProxyRule::https("http://ann:s3cret@10.0.0.1:3128")
//!     .unwrap()
//!     .no_proxy(NoProxy::from_string("internal.test"));
//! assert!(rule.applies_to(&"https://example.com/".parse().unwrap()));
//! assert!(!rule.applies_to(&"http://example.com/".parse().unwrap()));
//! assert!(!rule.applies_to(&"https://api.internal.test/".parse().unwrap()));
//! assert_eq!(rule.server().credentials().map(|c| c.user()), Some("ann"));
//! ```

use switchyard_core::{Host, Proxy, ProxyCredentials};

use crate::proxy_env::{parse_proxy_url, NoProxy};
use crate::Error;

/// Which request URLs a rule is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Http,
    Https,
    All,
}

/// A proxy server and the requests that go through it (see the
/// [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRule {
    server: Proxy,
    scope: Scope,
    no_proxy: Option<NoProxy>,
}

impl ProxyRule {
    /// `http://` requests go through the proxy at `url`
    /// (`http://[user:password@]host[:port]`, `socks5://…` or `socks5h://…`;
    /// no scheme means `http://`; no port means 1080, as curl).
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) when `url` is not a
    /// proxy URL (the message names what is wrong, never the password).
    pub fn http(url: impl AsRef<str>) -> Result<ProxyRule, Error> {
        ProxyRule::parse(url.as_ref(), Scope::Http)
    }

    /// `https://` requests go through the proxy at `url` (a `CONNECT` tunnel
    /// for an HTTP proxy); `url` as in [`ProxyRule::http`].
    ///
    /// # Errors
    /// As [`ProxyRule::http`].
    pub fn https(url: impl AsRef<str>) -> Result<ProxyRule, Error> {
        ProxyRule::parse(url.as_ref(), Scope::Https)
    }

    /// Every request goes through the proxy at `url`; `url` as in
    /// [`ProxyRule::http`].
    ///
    /// # Errors
    /// As [`ProxyRule::http`].
    pub fn all(url: impl AsRef<str>) -> Result<ProxyRule, Error> {
        ProxyRule::parse(url.as_ref(), Scope::All)
    }

    fn parse(url: &str, scope: Scope) -> Result<ProxyRule, Error> {
        let server = parse_proxy_url(url).map_err(|why| Error::config(format!("proxy URL: {why}")))?;
        Ok(ProxyRule { server, scope, no_proxy: None })
    }

    /// The same rule with Basic credentials for the proxy (replacing any from
    /// the URL); SOCKS5 proxies get them as username/password (RFC 1929).
    #[must_use]
    pub fn basic_auth(mut self, user: &str, password: &str) -> ProxyRule {
        self.server = self.server.with_credentials(ProxyCredentials::new(user, password));
        self
    }

    /// The same rule, except for the hosts `no_proxy` lists (they go direct,
    /// or through a later rule); `None` removes the exceptions.
    #[must_use]
    pub fn no_proxy(mut self, no_proxy: impl Into<Option<NoProxy>>) -> ProxyRule {
        self.no_proxy = no_proxy.into();
        self
    }

    /// The proxy server.
    #[must_use]
    pub fn server(&self) -> &Proxy {
        &self.server
    }

    /// Whether a request to `uri` goes through this rule's proxy.
    #[must_use]
    pub fn applies_to(&self, uri: &http::Uri) -> bool {
        self.why_not(uri).is_none()
    }

    /// Why the rule does not apply to `uri`, in words; `None` when it does.
    fn why_not(&self, uri: &http::Uri) -> Option<String> {
        let https = uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        match (self.scope, https) {
            (Scope::Http, true) => return Some("for http URLs".to_owned()),
            (Scope::Https, false) => return Some("for https URLs".to_owned()),
            _ => {}
        }
        let no_proxy = self.no_proxy.as_ref()?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = uri.host().map(|h| h.trim_matches(['[', ']'])).and_then(|h| Host::parse(h).ok())?;
        no_proxy.matching(&host, port).map(|entry| format!("no_proxy matches {entry}"))
    }

    /// Whether the rule applies to every request (no scheme, no exceptions).
    pub(crate) fn is_unconditional(&self) -> bool {
        self.scope == Scope::All && self.no_proxy.is_none()
    }

    pub(crate) fn into_server(self) -> Proxy {
        self.server
    }
}

/// A proxy server for every request.
impl From<Proxy> for ProxyRule {
    fn from(server: Proxy) -> ProxyRule {
        ProxyRule { server, scope: Scope::All, no_proxy: None }
    }
}

/// The rules of a client, as its proxy selector.
#[derive(Debug)]
pub(crate) struct Rules(pub(crate) Vec<ProxyRule>);

impl crate::ProxySelector for Rules {
    fn select(&self, uri: &http::Uri) -> Vec<crate::ProxyServer> {
        self.0.iter().filter(|r| r.applies_to(uri)).map(|r| r.server.clone()).collect()
    }

    fn select_explained(&self, uri: &http::Uri) -> (Vec<crate::ProxyServer>, Option<String>) {
        let mut chosen = Vec::new();
        let mut why = Vec::new();
        for (i, rule) in self.0.iter().enumerate() {
            match rule.why_not(uri) {
                None => chosen.push(rule.server.clone()),
                Some(reason) => why.push(format!("proxy rule {} ({}) skipped: {reason}", i + 1, rule.server)),
            }
        }
        let why = if why.is_empty() { "from the client's proxy rules".to_owned() } else { why.join("; ") };
        (chosen, Some(why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProxySelector;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn scopes_pick_the_requests() {
        let rules = Rules(vec![
            ProxyRule::http("10.0.0.1:3128").unwrap(),
            ProxyRule::https("http://10.0.0.2:3128").unwrap(),
            ProxyRule::all("socks5h://10.0.0.3:1080").unwrap(),
        ]);
        let names = |u: &str| rules.select(&uri(u)).iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names("http://a.test/"), ["http://10.0.0.1:3128", "socks5h://10.0.0.3:1080"]);
        assert_eq!(names("https://a.test/"), ["http://10.0.0.2:3128", "socks5h://10.0.0.3:1080"]);
        let (_, why) = rules.select_explained(&uri("https://a.test/"));
        assert_eq!(why.as_deref(), Some("proxy rule 1 (http://10.0.0.1:3128) skipped: for http URLs"));
    }

    #[test]
    fn exceptions_and_credentials() {
        let rule = ProxyRule::all("http://u%40x:p%3Aw@proxy.test:8080/ignored")
            .unwrap()
            .no_proxy(NoProxy::from_string("10.0.0.0/8, .internal.test:8443"));
        let creds = rule.server().credentials().unwrap();
        assert_eq!((creds.user(), creds.password()), ("u@x", "p:w"));
        assert!(!rule.applies_to(&uri("http://10.1.2.3/")));
        assert!(!rule.applies_to(&uri("https://a.internal.test:8443/")));
        assert!(rule.applies_to(&uri("https://a.internal.test/")));
        let rule = rule.basic_auth("ann", "pw").no_proxy(None);
        assert_eq!(rule.server().credentials().unwrap().user(), "ann");
        assert!(rule.applies_to(&uri("http://10.1.2.3/")) && rule.is_unconditional());
    }

    #[test]
    fn bad_urls_are_config_errors_without_the_password() {
        for (url, says) in [
            ("ftp://p.test:21", "unsupported proxy scheme"),
            ("http://ann:s3cret@:3128", "has no host"),
            ("http://p.test:99999", "port"),
            ("https://p.test:443", "HTTPS proxies"),
        ] {
            let e = ProxyRule::http(url).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e.kind(), crate::ErrorKind::Config(_)), "{url}: {e:?}");
            assert!(text.contains(says) && !text.contains("s3cret"), "{url}: {text}");
        }
    }
}
