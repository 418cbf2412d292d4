//! The gateway's decisions, runtime-neutral: which declared server an incoming
//! request is for, what its forwarded head looks like, and which status a failure
//! becomes. The adapters' `Manager::serve` accepts the connections (hyper's
//! server) and calls these.
//!
//! - **Routing**: an absolute-form target (`GET http://api.test/x`, what a client
//!   configured with `HTTP_PROXY` sends) goes by its authority; an origin-form one
//!   (`GET /x`) by its `Host`. Either must name a declared server (`host`,
//!   `host:port`); an `http://` URL for a server declared `https://` goes out over
//!   TLS. Anything else is refused with 403 naming the host: never an open proxy.
//! - **Forwarding** (RFC 9110 §7.6): hop-by-hop fields (`Connection` and the fields
//!   it names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`, `Proxy-Authorization`, `Proxy-Authenticate`)
//!   are removed both ways; `Via` gets this hop; `Host` becomes the server's.
//! - **Failures**: no connection → 502 with the error's text; the call's deadline
//!   → 504; a server the Manager reports down → 503 at once, with `Retry-After`
//!   from its backoff.

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use switchyard_core::Readiness;

use crate::manager::{find, Declared, ServerStatus};
use crate::Error;

/// This hop's `Via` entry (RFC 9110 §7.6.3: protocol version and a pseudonym).
const VIA_NAME: &str = "switchyard";

/// Fields that belong to one connection, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Why an incoming request is answered by the gateway itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status to answer with.
    pub status: StatusCode,
    /// The text body, one line.
    pub reason: String,
    /// `Retry-After`, in seconds (503 while a server is down).
    pub retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, reason: impl Into<String>) -> Refusal {
        Refusal { status, reason: reason.into(), retry_after: None }
    }
}

/// The declared server an incoming request goes to, and the URI it goes to there.
/// `local_port` is the gateway's own port: a host name with it (`api.test:8080`,
/// when `api.test` resolves to the gateway) means the host; an IP address with it
/// is the gateway itself.
///
/// # Errors
/// A [`Refusal`]: 400 without a usable host, 403 for a host no server was
/// declared for, 405 for `CONNECT` (see [`tunnel`]).
pub fn route<'a>(
    declared: &'a [Declared],
    method: &http::Method,
    uri: &Uri,
    headers: &HeaderMap,
    local_port: Option<u16>,
) -> Result<(&'a Declared, Uri), Refusal> {
    if method == http::Method::CONNECT {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "gateway: CONNECT is a tunnel, not a request",
        ));
    }
    let host = match uri.authority() {
        Some(authority) => authority.as_str().to_owned(),
        None => headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, "gateway: the request names no host"))?
            .to_owned(),
    };
    if host.contains('@') {
        return Err(Refusal::new(StatusCode::BAD_REQUEST, "gateway: user info in the request target"));
    }
    let bare = match (host.rsplit_once(':'), local_port) {
        // A name that resolves to the gateway; an address with the gateway's
        // port is the gateway itself.
        (Some((name, port)), Some(local))
            if !name.is_empty()
                && port.parse() == Ok(local)
                && name.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_err() =>
        {
            name
        }
        _ => host.as_str(),
    };
    let server = find(declared, &host).or_else(|_| find(declared, bare)).map_err(|_| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            format!("gateway: {host} is not a server this gateway forwards to"),
        )
    })?;
    let path = uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
    let path = if path.starts_with('/') { path } else { "/" };
    let target = format!("{}{path}", server.url.trim_end_matches('/'));
    let target = target
        .parse::<Uri>()
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, format!("gateway: bad request target: {e}")))?;
    Ok((server, target))
}

/// The declared server a `CONNECT host:port` tunnel goes to: the authority
/// must name a declared server's host and its port exactly (a tunnel to any
/// other port of a declared host would make the gateway an open relay to it).
///
/// # Errors
/// A [`Refusal`]: 400 for a target that is not `host:port`, 403 for anything
/// not declared.
pub fn tunnel<'a>(declared: &'a [Declared], target: &Uri) -> Result<&'a Declared, Refusal> {
    let Some(authority) = target.authority().filter(|_| {
        target.scheme().is_none()
            && target.path_and_query().is_none_or(|p| p.as_str().is_empty() || p.as_str() == "/")
    }) else {
        return Err(Refusal::new(StatusCode::BAD_REQUEST, "gateway: a CONNECT target is host:port"));
    };
    let (Some(port), host) = (authority.port_u16(), authority.host()) else {
        return Err(Refusal::new(StatusCode::BAD_REQUEST, "gateway: a CONNECT target is host:port"));
    };
    let wanted = host.trim_matches(['[', ']']).to_ascii_lowercase();
    declared
        .iter()
        .find(|d| {
            d.address.port() == port
                && d.uri.host().is_some_and(|h| h.trim_matches(['[', ']']).eq_ignore_ascii_case(&wanted))
        })
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::FORBIDDEN,
                format!("gateway: {authority} is not a server this gateway tunnels to"),
            )
        })
}

/// A 503 while `status` says the server is down (no connection open, connects
/// failing past the down threshold), with `Retry-After` from its backoff.
#[must_use]
pub fn down(status: &ServerStatus) -> Option<Refusal> {
    if status.readiness != Readiness::Down || status.open > 0 {
        return None;
    }
    let mut refusal = Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "gateway: {} is down ({})",
            status.url,
            status.last_error.as_deref().unwrap_or("its connects are failing")
        ),
    );
    refusal.retry_after = Some(status.next_retry_in.map_or(1, |d| d.as_secs_f64().ceil().max(1.0) as u64));
    Some(refusal)
}

/// The status a failed upstream call becomes: 504 for a timeout, 503 when the
/// servers are not ready, 502 otherwise.
#[must_use]
pub fn failure(error: &Error) -> Refusal {
    let status = if error.is_timeout() {
        StatusCode::GATEWAY_TIMEOUT
    } else if matches!(error.kind(), crate::ErrorKind::NotReady(_)) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_GATEWAY
    };
    Refusal::new(status, format!("gateway: {error}"))
}

/// Removes the hop-by-hop fields, those `Connection` names included.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Adds this hop to `Via`, for a message that arrived as `version`.
pub fn add_via(headers: &mut HeaderMap, version: http::Version) {
    let protocol = match version {
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        _ => "1.1",
    };
    if let Ok(value) = HeaderValue::from_str(&format!("{protocol} {VIA_NAME}")) {
        headers.append(header::VIA, value);
    }
}

/// The forwarded request head's fields: hop-by-hop removed, `Host` dropped
/// (the client sets the server's own), `Via` added.
pub fn forward_request_headers(headers: &mut HeaderMap, version: http::Version) {
    strip_hop_by_hop(headers);
    headers.remove(header::HOST);
    add_via(headers, version);
}

/// The answered response head's fields: hop-by-hop removed, `Via` added.
pub fn forward_response_headers(headers: &mut HeaderMap, version: http::Version) {
    strip_hop_by_hop(headers);
    add_via(headers, version);
}

/// How long an in-flight request may still run after shutdown begins, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::{Address, WarmPolicy};

    fn declared(urls: &[&str]) -> Vec<Declared> {
        urls.iter()
            .map(|url| {
                let uri: Uri = url.parse().unwrap();
                Declared {
                    url: (*url).to_owned(),
                    address: Address::from_uri(&uri).unwrap().build().unwrap(),
                    uri,
                    policy: WarmPolicy::default(),
                }
            })
            .collect()
    }

    fn host(h: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::HOST, h.parse().unwrap());
        m
    }

    #[test]
    fn routes_by_authority_or_host_and_refuses_the_rest() {
        let servers = declared(&["https://api.test:8443", "http://10.0.0.7:8080"]);
        let get = http::Method::GET;
        // Absolute form: an http:// URL for an https server goes out over TLS.
        let (s, to) =
            route(&servers, &get, &"http://api.test:8443/a?b=1".parse().unwrap(), &HeaderMap::new(), None)
                .unwrap();
        assert_eq!(
            (s.url.as_str(), to.to_string().as_str()),
            ("https://api.test:8443", "https://api.test:8443/a?b=1")
        );
        let (_, to) =
            route(&servers, &get, &"http://api.test/x".parse().unwrap(), &HeaderMap::new(), None).unwrap();
        assert_eq!(to, "https://api.test:8443/x");
        // Origin form: by Host.
        let (s, to) = route(&servers, &get, &"/y".parse().unwrap(), &host("10.0.0.7:8080"), None).unwrap();
        assert_eq!(
            (s.url.as_str(), to.to_string().as_str()),
            ("http://10.0.0.7:8080", "http://10.0.0.7:8080/y")
        );
        // Undeclared: 403 naming the host, whichever form.
        for (uri, headers) in [
            ("http://evil.test/", HeaderMap::new()),
            ("/", host("evil.test:443")),
            ("http://api.test:9999/", HeaderMap::new()),
        ] {
            let r = route(&servers, &get, &uri.parse().unwrap(), &headers, Some(3000)).unwrap_err();
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
            assert!(r.reason.contains("evil.test") || r.reason.contains("9999"), "{}", r.reason);
        }
        assert_eq!(
            route(&servers, &get, &"/".parse().unwrap(), &HeaderMap::new(), None).unwrap_err().status,
            400
        );
        // The gateway's own port in Host means the host itself.
        let (s, _) =
            route(&servers, &get, &"/".parse().unwrap(), &host("api.test:3000"), Some(3000)).unwrap();
        assert_eq!(s.url, "https://api.test:8443");
        let gateway_itself = route(&servers, &get, &"/".parse().unwrap(), &host("10.0.0.7:3000"), Some(3000));
        assert_eq!(gateway_itself.unwrap_err().status, StatusCode::FORBIDDEN, "an address is never stripped");
        let elsewhere = route(&servers, &get, &"/".parse().unwrap(), &host("api.test:3001"), Some(3000));
        assert_eq!(elsewhere.unwrap_err().status, StatusCode::FORBIDDEN);
        let connect = route(
            &servers,
            &http::Method::CONNECT,
            &"api.test:8443".parse().unwrap(),
            &HeaderMap::new(),
            None,
        );
        assert_eq!(connect.unwrap_err().status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn tunnels_go_to_a_declared_host_and_port_only() {
        let servers = declared(&["https://api.test:8443", "http://10.0.0.7:8080", "https://[::1]:9443"]);
        let to =
            |t: &str| tunnel(&servers, &t.parse().unwrap()).map(|d| d.url.as_str()).map_err(|r| r.status);
        assert_eq!(to("api.test:8443"), Ok("https://api.test:8443"));
        assert_eq!(to("API.test:8443"), Ok("https://api.test:8443"));
        assert_eq!(to("10.0.0.7:8080"), Ok("http://10.0.0.7:8080"));
        assert_eq!(to("[::1]:9443"), Ok("https://[::1]:9443"));
        assert_eq!(to("api.test:22"), Err(StatusCode::FORBIDDEN), "another port of a declared host");
        assert_eq!(to("evil.test:8443"), Err(StatusCode::FORBIDDEN));
        assert_eq!(to("api.test"), Err(StatusCode::BAD_REQUEST), "no port");
        assert_eq!(to("http://api.test:8443/x"), Err(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn hop_by_hop_fields_go_and_via_comes() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic abc"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("host", "localhost:3000"),
            ("x-kept", "yes"),
            ("via", "1.1 upstream-proxy"),
        ] {
            h.append(HeaderName::from_static(n), v.parse().unwrap());
        }
        forward_request_headers(&mut h, http::Version::HTTP_11);
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["via", "x-kept"]);
        let via: Vec<_> = h.get_all("via").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(via, ["1.1 upstream-proxy", "1.1 switchyard"]);
    }

    #[test]
    fn failures_become_statuses() {
        let t = failure(&Error::timeout(crate::TimeoutPhase::ResponseHead));
        assert_eq!(t.status, StatusCode::GATEWAY_TIMEOUT);
        let c = failure(&Error::config("x"));
        assert_eq!(c.status, StatusCode::BAD_GATEWAY);
        assert!(c.reason.starts_with("gateway: "), "{}", c.reason);
        let mut s = ServerStatus {
            url: "https://api.test:8443".into(),
            readiness: Readiness::Down,
            wanted: 1,
            open: 0,
            idle: 0,
            in_use: 0,
            proving: 0,
            connecting: 0,
            failures: 4,
            last_error: Some("connection refused".into()),
            next_retry_in: Some(Duration::from_millis(2300)),
        };
        let d = down(&s).unwrap();
        assert_eq!((d.status, d.retry_after), (StatusCode::SERVICE_UNAVAILABLE, Some(3)));
        assert!(d.reason.contains("connection refused"), "{}", d.reason);
        s.readiness = Readiness::Degraded;
        assert!(down(&s).is_none());
    }
}
