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
//! - **Admission** ([`admit`]): one pure function from a request's shape to what
//!   the gateway does with it (forward, tunnel, its status page) or the refusal:
//!   a `Via` loop (508), malformed framing (400), a transfer coding other than
//!   `chunked` (501), an expectation other than `100-continue` (417), two `Host`
//!   fields (400), then routing.
//! - **Failures**: no connection → 502 with the error's text; the call's deadline
//!   or the upstream response timeout → 504; a server the Manager reports down →
//!   503 with `Retry-After` from its backoff while another request probes it.

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use switchyard_core::Readiness;

use crate::manager::{find, Declared, ServerStatus};
use crate::Error;

/// The pseudonym a gateway's `Via` entries start with (RFC 9110 §7.6.3:
/// protocol version and a pseudonym); each gateway adds an identity of its own
/// ([`via_name`]), so that it recognises its own requests coming back (a loop).
pub const VIA_PREFIX: &str = "switchyard";

/// A gateway's own `Via` pseudonym: `switchyard-` and 8 hexadecimal digits,
/// different for every call (from the standard library's per-process random
/// hash keys), so two gateways chained on purpose do not mistake each other's
/// entries for a loop.
#[must_use]
pub fn via_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    format!("{VIA_PREFIX}-{:08x}", h.finish() as u32)
}

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

/// Who may read the gateway's status page ([`STATUS_PATH`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatusAccess {
    /// Clients connecting from a loopback address only (the default: the page
    /// lists the declared servers, an inventory a listener on `0.0.0.0` must
    /// not give to the network).
    #[default]
    Loopback,
    /// Any client that can reach the listener.
    Anyone,
    /// Nobody: the path is routed like any other.
    Off,
}

/// The path of the gateway's status page (`GET http://127.0.0.1:8080/.switchyard/status`):
/// one line per declared server, as `Manager::status()` prints it.
pub const STATUS_PATH: &str = "/.switchyard/status";

/// What the gateway knows of itself when it admits a request.
#[derive(Clone, Copy, Debug)]
pub struct Rules<'a> {
    /// The declared servers.
    pub declared: &'a [Declared],
    /// The port the gateway listens on.
    pub local_port: Option<u16>,
    /// This gateway's `Via` pseudonym ([`via_name`]).
    pub via_name: &'a str,
    /// Who may read the status page.
    pub status: StatusAccess,
}

/// An incoming request's shape: what admission looks at.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    /// Its method.
    pub method: &'a http::Method,
    /// Its target as it arrived.
    pub uri: &'a Uri,
    /// Its header fields.
    pub headers: &'a HeaderMap,
    /// Where it came from (`None`: unknown).
    pub peer: Option<std::net::IpAddr>,
}

/// What the gateway does with an admitted request.
#[derive(Debug)]
pub enum Admission<'a> {
    /// Forward it to this declared server, at this URI.
    Forward {
        /// The declared server.
        server: &'a Declared,
        /// The URI it goes to there.
        target: Uri,
    },
    /// `CONNECT`: a byte tunnel to this declared server.
    Tunnel(&'a Declared),
    /// Answer with the status page.
    StatusPage,
}

/// The gateway's admission rules, in order: a `Via` loop (508), `CONNECT`
/// ([`tunnel`]), the framing a strict server must reject (400: `Transfer-Encoding`
/// with `Content-Length`, conflicting or malformed lengths, two `Host` fields),
/// a transfer coding other than `chunked` (501: forwarded, it would arrive
/// decoded of its chunking only), an expectation other than `100-continue`
/// (417; `100-continue` is answered by the gateway as it reads the body and
/// never forwarded), the status page (origin form, a host that is not a declared
/// server, as [`StatusAccess`] allows), then [`route`].
///
/// ```
/// use http::{HeaderMap, Method, StatusCode};
/// # use switchyard_common::gateway::{admit, Rules, Shape, StatusAccess};
///
/// let rules = Rules { declared: &[], local_port: Some(8080), via_name: "switchyard-1", status: StatusAccess::Loopback };
/// let mut headers = HeaderMap::new();
/// headers.insert("via", "1.1 switchyard-1".parse().unwrap());
/// let uri = "http://api.test/".parse().unwrap();
/// let shape = Shape { method: &Method::GET, uri: &uri, headers: &headers, peer: None };
/// assert_eq!(admit(&rules, &shape).unwrap_err().status, StatusCode::LOOP_DETECTED);
/// ```
///
/// # Errors
/// The [`Refusal`] to answer with.
pub fn admit<'a>(rules: &Rules<'a>, shape: &Shape<'_>) -> Result<Admission<'a>, Refusal> {
    let headers = shape.headers;
    if via_names(headers).any(|name| name.eq_ignore_ascii_case(rules.via_name)) {
        return Err(Refusal::new(
            StatusCode::LOOP_DETECTED,
            format!("gateway: this request has passed {} before (Via): a loop", rules.via_name),
        ));
    }
    if shape.method == http::Method::CONNECT {
        return tunnel(rules.declared, shape.uri).map(Admission::Tunnel);
    }
    framing(headers)?;
    for value in headers.get_all(header::EXPECT) {
        if !value.as_bytes().trim_ascii().eq_ignore_ascii_case(b"100-continue") {
            return Err(Refusal::new(
                StatusCode::EXPECTATION_FAILED,
                format!(
                    "gateway: cannot meet the expectation {:?}",
                    String::from_utf8_lossy(value.as_bytes())
                ),
            ));
        }
    }
    match route(rules.declared, shape.method, shape.uri, headers, rules.local_port) {
        Ok((server, target)) => Ok(Admission::Forward { server, target }),
        Err(refusal)
            if refusal.status == StatusCode::FORBIDDEN
                && shape.uri.authority().is_none()
                && shape.uri.path() == STATUS_PATH =>
        {
            let loopback = shape.peer.is_some_and(|ip| ip.to_canonical().is_loopback());
            match rules.status {
                StatusAccess::Anyone => Ok(Admission::StatusPage),
                StatusAccess::Loopback if loopback => Ok(Admission::StatusPage),
                StatusAccess::Loopback => Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "gateway: the status page answers loopback clients only",
                )),
                StatusAccess::Off => Err(refusal),
            }
        }
        Err(refusal) => Err(refusal),
    }
}

/// The `received-by` of every `Via` entry (`1.1 name (comment)` → `name`).
fn via_names(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|entry| entry.split_ascii_whitespace().nth(1))
}

/// The framing rules (RFC 9112 §6.1, §6.3; RFC 9110 §7.2).
fn framing(headers: &HeaderMap) -> Result<(), Refusal> {
    let bad = |why: &str| Refusal::new(StatusCode::BAD_REQUEST, format!("gateway: {why}"));
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        return Err(bad("two Host fields"));
    }
    let codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty());
    let mut any_coding = false;
    for coding in codings {
        any_coding = true;
        if !coding.eq_ignore_ascii_case(b"chunked") {
            return Err(Refusal::new(
                StatusCode::NOT_IMPLEMENTED,
                format!(
                    "gateway: transfer coding {:?} is not supported (only chunked)",
                    String::from_utf8_lossy(coding)
                ),
            ));
        }
    }
    if any_coding && headers.contains_key(header::CONTENT_LENGTH) {
        return Err(bad("Transfer-Encoding together with Content-Length"));
    }
    let mut lengths = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii);
    if let Some(first) = lengths.next() {
        if !first.iter().all(u8::is_ascii_digit) || first.is_empty() || lengths.any(|l| l != first) {
            return Err(bad("conflicting or malformed Content-Length"));
        }
    }
    Ok(())
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
        Some(authority) => authority.as_str(),
        None => headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, "gateway: the request names no host"))?,
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
        _ => host,
    };
    let server = find(declared, host).or_else(|_| find(declared, bare)).map_err(|_| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            format!("gateway: {host} is not a server this gateway forwards to"),
        )
    })?;
    // The server's scheme and authority with the request's path and query,
    // reusing both as they are (no string built and parsed again).
    let path = match uri.path_and_query() {
        Some(pq) if pq.as_str().starts_with('/') => pq.clone(),
        _ => http::uri::PathAndQuery::from_static("/"),
    };
    let mut parts = http::uri::Parts::default();
    parts.scheme = server.uri.scheme().cloned();
    parts.authority = server.uri.authority().cloned();
    parts.path_and_query = Some(path);
    let target = Uri::from_parts(parts)
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
    // One pass over the names first: most messages carry none of them, and
    // each removal by name is a hashed lookup (eleven per request and
    // response, most of them for nothing).
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    // Then only the names the message carries: the hop-by-hop ones and those
    // `Connection` names (its tokens are compared in place; `close` and
    // `keep-alive` name no field most of the time).
    let named = |name: &HeaderName| {
        headers.get_all(header::CONNECTION).iter().any(|v| {
            v.as_bytes()
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(name.as_str().as_bytes()))
        })
    };
    let doomed: Vec<HeaderName> =
        headers.keys().filter(|name| HOP_BY_HOP.contains(name) || named(name)).cloned().collect();
    for name in &doomed {
        headers.remove(name);
    }
}

/// This hop's `Via` entries (RFC 9110 §7.6.3), made once per gateway: one for
/// each protocol version a message may arrive with.
///
/// ```
/// # use switchyard_common::gateway::Via;
/// let via = Via::new("switchyard-1a2b3c4d").unwrap();
/// assert_eq!(via.value(http::Version::HTTP_2), "2 switchyard-1a2b3c4d");
/// assert!(Via::new("two words").is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Via {
    name: String,
    /// HTTP/1.0, HTTP/1.1, HTTP/2.
    values: [HeaderValue; 3],
}

impl Via {
    /// The entries for pseudonym `name`; `None` unless it is a token (RFC 9110 §5.6.2).
    #[must_use]
    pub fn new(name: &str) -> Option<Via> {
        let token = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return None;
        }
        let value = |protocol: &str| HeaderValue::from_str(&format!("{protocol} {name}")).ok();
        Some(Via { name: name.to_owned(), values: [value("1.0")?, value("1.1")?, value("2")?] })
    }

    /// The pseudonym.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry for a message that arrived as `version`.
    #[must_use]
    pub fn value(&self, version: http::Version) -> &HeaderValue {
        match version {
            http::Version::HTTP_10 => &self.values[0],
            http::Version::HTTP_2 => &self.values[2],
            _ => &self.values[1],
        }
    }
}

/// Adds this hop to `Via`, for a message that arrived as `version`.
pub fn add_via(headers: &mut HeaderMap, version: http::Version, via: &Via) {
    headers.append(header::VIA, via.value(version).clone());
}

/// The forwarded request head's fields: hop-by-hop removed, `Host` dropped
/// (the client sets the server's own), `Expect: 100-continue` dropped (the
/// gateway's server answers it as the body is read; forwarded, a server that
/// never answers it would cost the client's wait for every upload), `Via` added.
pub fn forward_request_headers(headers: &mut HeaderMap, version: http::Version, via: &Via) {
    strip_hop_by_hop(headers);
    headers.remove(header::HOST);
    if headers.keys().any(|name| name == header::EXPECT) {
        headers.remove(header::EXPECT);
    }
    add_via(headers, version, via);
}

/// The protocol an HTTP/1.1 request asks to switch to (WebSocket and the
/// like): its one `Upgrade` field, when `Connection` names `upgrade`. The
/// gateway passes such a request through on a connection of its own and, on
/// `101`, joins the two connections byte for byte. `None` for HTTP/2 (no
/// `Upgrade` there), for an `Upgrade` that `Connection` does not name (then
/// it is an ordinary hop-by-hop field, removed), and for several `Upgrade`
/// fields.
#[must_use]
pub fn upgrade_asked(headers: &HeaderMap, version: http::Version) -> Option<HeaderValue> {
    if version != http::Version::HTTP_11 {
        return None;
    }
    let named = headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| v.as_bytes().split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade")));
    let mut upgrade = headers.get_all(header::UPGRADE).iter();
    match (named, upgrade.next(), upgrade.next()) {
        (true, Some(value), None) if !value.as_bytes().trim_ascii().is_empty() => Some(value.clone()),
        _ => None,
    }
}

/// Puts back the fields of a protocol switch (`Connection: upgrade` and
/// `Upgrade: protocol`) on a head whose hop-by-hop fields were removed.
pub fn switch_fields(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol);
}

/// The answered response head's fields: hop-by-hop removed, `Via` added.
pub fn forward_response_headers(headers: &mut HeaderMap, version: http::Version, via: &Via) {
    strip_hop_by_hop(headers);
    add_via(headers, version, via);
}

/// The listen backlog the gateway asks for: more than any kernel grants, so
/// the system's maximum applies (Linux caps it at `net.core.somaxconn`, 4 096
/// by default since 5.4). The standard library and mio ask for 128, and a
/// burst of new connections past that stalls for the SYN retry (1 s).
pub const LISTEN_BACKLOG: i32 = 65_535;

/// A TCP listener on `addr` with the system's maximum backlog
/// ([`LISTEN_BACKLOG`]) and `SO_REUSEADDR` (a restarted gateway binds its port
/// at once), in non-blocking mode, for an adapter to wrap.
///
/// # Errors
/// The socket cannot be created, bound or put to listen.
pub fn listener(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    listen(addr, false)
}

/// As [`listener`], with `SO_REUSEPORT`: several listeners on the same address
/// and port, one per thread (each with its own runtime, Manager and upstream
/// connections, as each nginx worker has its own), the kernel spreading new
/// connections over them. Bind the first on the port asked for (or 0), the
/// others on the port it got.
///
/// ```
/// # use switchyard_common::gateway::shared_listener;
/// let first = shared_listener("127.0.0.1:0".parse().unwrap()).unwrap();
/// let second = shared_listener(first.local_addr().unwrap()).unwrap();
/// assert_eq!(first.local_addr().unwrap(), second.local_addr().unwrap());
/// ```
///
/// # Errors
/// As [`listener`]; `Unsupported` where the system has no `SO_REUSEPORT`
/// (Windows, Solaris).
pub fn shared_listener(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    listen(addr, true)
}

fn listen(addr: std::net::SocketAddr, shared: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    #[cfg(not(windows))]
    socket.set_reuse_address(true)?;
    if shared {
        #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))))]
        socket.set_reuse_port(true)?;
        #[cfg(not(all(
            unix,
            not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
        )))]
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "SO_REUSEPORT is not available here",
        ));
    }
    if addr.is_ipv6() {
        // `[::]` takes IPv6 only, as the standard library's listener does on
        // Linux by default; bind `0.0.0.0` for IPv4.
        let _ = socket.set_only_v6(true);
    }
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// How long a local connection may stay silent with no request in flight
/// (before its first byte, and between requests) before the gateway closes
/// it, by default: nginx's `client_header_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the gateway waits for an upstream response head (and, once it
/// streams, for each next piece of its body) before answering 504, by default:
/// nginx's `proxy_read_timeout`.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

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

    #[test]
    fn a_host_names_a_declared_server_in_every_spelling_and_only_one() {
        let servers = declared(&[
            "https://api.test",
            "http://Mixed.Test:8080",
            "http://[::1]:9000",
            "http://dup.test:1",
            "http://dup.test:2",
        ]);
        let url = |h: &str| crate::manager::find(&servers, h).map(|d| d.url.as_str()).map_err(|_| ());
        for (asked, expect) in [
            ("https://api.test", Ok("https://api.test")),
            ("HTTPS://API.TEST/", Ok("https://api.test")),
            ("api.test", Ok("https://api.test")),
            ("api.test:443", Ok("https://api.test")),
            (" api.test:443 ", Ok("https://api.test")),
            ("api.test:0443", Err(())),
            ("api.test:+443", Err(())),
            ("api.test:80", Err(())),
            ("mixed.test:8080", Ok("http://Mixed.Test:8080")),
            ("MIXED.TEST", Ok("http://Mixed.Test:8080")),
            ("mixed.test:80", Err(())),
            ("[::1]:9000", Ok("http://[::1]:9000")),
            ("::1:9000", Ok("http://[::1]:9000")),
            ("[::1]", Ok("http://[::1]:9000")),
            ("::1", Ok("http://[::1]:9000")),
            ("dup.test", Err(())),
            ("dup.test:2", Ok("http://dup.test:2")),
            ("other.test", Err(())),
            ("", Err(())),
        ] {
            assert_eq!(url(asked), expect, "{asked:?}");
        }
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
            ("expect", "100-continue"),
            ("x-kept", "yes"),
            ("via", "1.1 upstream-proxy"),
        ] {
            h.append(HeaderName::from_static(n), v.parse().unwrap());
        }
        forward_request_headers(&mut h, http::Version::HTTP_11, &Via::new("switchyard").unwrap());
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["via", "x-kept"]);
        let via: Vec<_> = h.get_all("via").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(via, ["1.1 upstream-proxy", "1.1 switchyard"]);
    }

    #[test]
    fn an_upgrade_is_asked_by_connection_and_one_upgrade_field() {
        let asked = |fields: &[(&'static str, &'static str)], version| {
            let mut h = HeaderMap::new();
            for (n, v) in fields {
                h.append(HeaderName::from_static(n), v.parse().unwrap());
            }
            upgrade_asked(&h, version).map(|v| v.to_str().unwrap().to_owned())
        };
        let h11 = http::Version::HTTP_11;
        let ws = [("connection", "Upgrade"), ("upgrade", "websocket")];
        assert_eq!(asked(&ws, h11).as_deref(), Some("websocket"));
        assert_eq!(
            asked(&[("connection", "keep-alive, upgrade"), ("upgrade", "h2c")], h11).as_deref(),
            Some("h2c")
        );
        assert_eq!(
            asked(&[("connection", "x, Upgrade "), ("connection", "y"), ("upgrade", "a/1")], h11).as_deref(),
            Some("a/1")
        );
        // Not named by Connection: an ordinary hop-by-hop field.
        assert_eq!(asked(&[("upgrade", "websocket")], h11), None);
        assert_eq!(asked(&[("connection", "upgraded"), ("upgrade", "websocket")], h11), None);
        // Two Upgrade fields, an empty one, or no Upgrade at all.
        assert_eq!(asked(&[("connection", "upgrade"), ("upgrade", "a"), ("upgrade", "b")], h11), None);
        assert_eq!(asked(&[("connection", "upgrade"), ("upgrade", " ")], h11), None);
        assert_eq!(asked(&[("connection", "upgrade")], h11), None);
        // HTTP/2 and HTTP/1.0 have no protocol switch.
        assert_eq!(asked(&ws, http::Version::HTTP_2), None);
        assert_eq!(asked(&ws, http::Version::HTTP_10), None);
        let mut h = HeaderMap::new();
        switch_fields(&mut h, HeaderValue::from_static("websocket"));
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["upgrade"], "websocket");
    }

    #[test]
    fn fields_named_by_connection_go_in_any_case_and_spelling() {
        let strip = |fields: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (n, v) in fields {
                h.append(HeaderName::from_static(n), v.parse().unwrap());
            }
            strip_hop_by_hop(&mut h);
            let mut names: Vec<String> = h.keys().map(|n| n.as_str().to_owned()).collect();
            names.sort_unstable();
            names
        };
        // Two Connection fields, odd spacing and case, an empty token.
        assert_eq!(
            strip(&[
                ("connection", " X-One ,, close"),
                ("connection", "x-TWO"),
                ("x-one", "1"),
                ("x-two", "2"),
                ("x-three", "3"),
            ]),
            ["x-three"]
        );
        // Connection naming nothing present, or only `close`.
        assert_eq!(strip(&[("connection", "close"), ("x-a", "1")]), ["x-a"]);
        // No hop-by-hop field at all: nothing touched.
        assert_eq!(strip(&[("x-a", "1"), ("x-b", "2")]), ["x-a", "x-b"]);
        // A hop-by-hop field without Connection still goes.
        assert_eq!(strip(&[("keep-alive", "timeout=5"), ("te", "trailers"), ("x-a", "1")]), ["x-a"]);
        // A field whose name only starts like a named one stays.
        assert_eq!(strip(&[("connection", "x-on"), ("x-one", "1")]), ["x-one"]);
    }

    #[test]
    fn via_names_differ_between_gateways() {
        let (a, b) = (via_name(), via_name());
        assert!(a.starts_with("switchyard-") && a.len() == "switchyard-".len() + 8, "{a}");
        assert_ne!(a, b, "two gateways in one process");
    }

    /// Every admission rule, by table: request shape → what the gateway does.
    #[test]
    fn admission_by_table() {
        let servers = declared(&["https://api.test:8443", "http://10.0.0.7:8080"]);
        let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let remote: std::net::IpAddr = "10.1.2.3".parse().unwrap();
        // (method, target, fields, peer, status access) → Ok(what) / Err(status)
        type Row<'a> = (
            &'a str,
            &'a str,
            &'a [(&'a str, &'a str)],
            std::net::IpAddr,
            StatusAccess,
            Result<&'a str, u16>,
        );
        let rows: &[Row<'_>] = &[
            (
                "GET",
                "http://api.test/x",
                &[],
                remote,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/x"),
            ),
            (
                "GET",
                "/y",
                &[("host", "10.0.0.7:8080")],
                remote,
                StatusAccess::Loopback,
                Ok("forward http://10.0.0.7:8080/y"),
            ),
            ("GET", "http://evil.test/", &[], loopback, StatusAccess::Anyone, Err(403)),
            // Via: our own name is a loop, anyone else's is a hop.
            (
                "GET",
                "http://api.test/",
                &[("via", "1.1 other, 1.1 switchyard-abc (x)")],
                remote,
                StatusAccess::Loopback,
                Err(508),
            ),
            (
                "GET",
                "http://api.test/",
                &[("via", "1.1 SWITCHYARD-ABC")],
                remote,
                StatusAccess::Loopback,
                Err(508),
            ),
            (
                "GET",
                "http://api.test/",
                &[("via", "1.1 switchyard-def, 2 proxy")],
                remote,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/"),
            ),
            (
                "CONNECT",
                "api.test:8443",
                &[],
                remote,
                StatusAccess::Loopback,
                Ok("tunnel https://api.test:8443"),
            ),
            ("CONNECT", "api.test:22", &[], remote, StatusAccess::Loopback, Err(403)),
            (
                "CONNECT",
                "api.test:8443",
                &[("via", "1.1 switchyard-abc")],
                remote,
                StatusAccess::Loopback,
                Err(508),
            ),
            // Framing.
            (
                "POST",
                "http://api.test/",
                &[("transfer-encoding", "chunked"), ("content-length", "3")],
                remote,
                StatusAccess::Loopback,
                Err(400),
            ),
            (
                "POST",
                "http://api.test/",
                &[("content-length", "3"), ("content-length", "4")],
                remote,
                StatusAccess::Loopback,
                Err(400),
            ),
            (
                "POST",
                "http://api.test/",
                &[("content-length", "3, 3")],
                remote,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/"),
            ),
            (
                "POST",
                "http://api.test/",
                &[("content-length", "-1")],
                remote,
                StatusAccess::Loopback,
                Err(400),
            ),
            (
                "POST",
                "http://api.test/",
                &[("transfer-encoding", "gzip, chunked")],
                remote,
                StatusAccess::Loopback,
                Err(501),
            ),
            (
                "POST",
                "http://api.test/",
                &[("transfer-encoding", "gzip"), ("transfer-encoding", "chunked")],
                remote,
                StatusAccess::Loopback,
                Err(501),
            ),
            (
                "POST",
                "http://api.test/",
                &[("transfer-encoding", "Chunked")],
                remote,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/"),
            ),
            (
                "GET",
                "/",
                &[("host", "api.test"), ("host", "api.test")],
                remote,
                StatusAccess::Loopback,
                Err(400),
            ),
            (
                "GET",
                "/",
                &[("host", "api.test"), ("host", "evil.test")],
                remote,
                StatusAccess::Loopback,
                Err(400),
            ),
            // Expectations.
            (
                "POST",
                "http://api.test/",
                &[("expect", "100-Continue")],
                remote,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/"),
            ),
            (
                "POST",
                "http://api.test/",
                &[("expect", "something-else")],
                remote,
                StatusAccess::Loopback,
                Err(417),
            ),
            // The status page: origin form, loopback peers by default.
            (
                "GET",
                STATUS_PATH,
                &[("host", "127.0.0.1:3000")],
                loopback,
                StatusAccess::Loopback,
                Ok("status"),
            ),
            ("GET", STATUS_PATH, &[("host", "localhost:3000")], mapped, StatusAccess::Loopback, Ok("status")),
            ("GET", STATUS_PATH, &[("host", "127.0.0.1:3000")], remote, StatusAccess::Loopback, Err(403)),
            ("GET", STATUS_PATH, &[("host", "127.0.0.1:3000")], remote, StatusAccess::Anyone, Ok("status")),
            ("GET", STATUS_PATH, &[("host", "127.0.0.1:3000")], loopback, StatusAccess::Off, Err(403)),
            // Never for an absolute-form target naming a host not declared.
            (
                "GET",
                "http://undeclared.test/.switchyard/status",
                &[],
                loopback,
                StatusAccess::Anyone,
                Err(403),
            ),
            // A declared server's own path of that name is the server's.
            (
                "GET",
                "http://api.test/.switchyard/status",
                &[],
                loopback,
                StatusAccess::Loopback,
                Ok("forward https://api.test:8443/.switchyard/status"),
            ),
        ];
        for (method, target, fields, peer, status, want) in rows {
            let rules = Rules {
                declared: &servers,
                local_port: Some(3000),
                via_name: "switchyard-abc",
                status: *status,
            };
            let method: http::Method = method.parse().unwrap();
            let uri: Uri = target.parse().unwrap();
            let mut headers = HeaderMap::new();
            for (n, v) in *fields {
                headers.append(HeaderName::from_static(n), v.parse().unwrap());
            }
            let shape = Shape { method: &method, uri: &uri, headers: &headers, peer: Some(*peer) };
            let got = match admit(&rules, &shape) {
                Ok(Admission::Forward { target, .. }) => Ok(format!("forward {target}")),
                Ok(Admission::Tunnel(server)) => Ok(format!("tunnel {}", server.url)),
                Ok(Admission::StatusPage) => Ok("status".to_owned()),
                Err(refusal) => {
                    assert!(refusal.reason.starts_with("gateway: "), "{}", refusal.reason);
                    Err(refusal.status.as_u16())
                }
            };
            assert_eq!(got, want.map(str::to_owned), "{method} {target} {fields:?} from {peer} ({status:?})");
        }
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
