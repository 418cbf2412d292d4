//! How a command ends: an exit code (curl's, for the same failures) and the
//! words to print, short by default, the whole chain with `-v`.

use std::fmt::Write as _;

use switchyard_common::{BodyError, Error, ErrorKind};
use switchyard_core::pool::ExchangeFailureKind;
use switchyard_core::{AcquireError, ConnectError, Failure, TlsFailure};

/// Success.
pub const OK: u8 = 0;
/// Unsupported URL scheme, or a failure with no closer code.
pub const GENERIC: u8 = 1;
/// A bad option or configuration.
pub const CONFIG: u8 = 2;
/// A malformed URL.
pub const MALFORMED_URL: u8 = 3;
/// The proxy's name did not resolve.
pub const PROXY_DNS: u8 = 5;
/// The host's name did not resolve.
pub const DNS: u8 = 6;
/// No connection (refused, unreachable).
pub const CONNECT: u8 = 7;
/// The answer is not valid HTTP.
pub const WEIRD_REPLY: u8 = 8;
/// The body ended before its announced length.
pub const PARTIAL: u8 = 18;
/// `-f` and a status of 400 or more.
pub const HTTP_STATUS: u8 = 22;
/// The output could not be written.
pub const WRITE: u8 = 23;
/// A `-d @FILE` could not be read.
pub const READ: u8 = 26;
/// A timeout.
pub const TIMEOUT: u8 = 28;
/// `--max-filesize` exceeded.
pub const FILESIZE: u8 = 63;
/// `-C`: the server does not resume (answered the whole body).
pub const RANGE: u8 = 33;
/// The TLS handshake failed.
pub const TLS: u8 = 35;
/// More redirects than `--max-redirs`.
pub const TOO_MANY_REDIRECTS: u8 = 47;
/// The server closed without answering.
pub const EMPTY_REPLY: u8 = 52;
/// Sending or receiving failed (or a proxy refused).
pub const RECV: u8 = 56;
/// The certificate is not trusted, or not for the host.
pub const CERTIFICATE: u8 = 60;
/// An HTTP/2 stream was reset.
pub const HTTP2_STREAM: u8 = 92;
/// A proxy handshake failed.
pub const PROXY: u8 = 97;

/// A failure that ends the command (or one URL of it): its exit code, the
/// line to print, and with `-v` the whole cause chain instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The exit code.
    pub code: u8,
    /// One line: what failed, the URL once, the cause once.
    pub message: String,
    /// The whole chain, printed with `-v` (else the message).
    pub detail: Option<String>,
    /// The status an HTTP proxy answered a `CONNECT` with, when it refused
    /// (`-w %{http_connect}`).
    pub http_connect: Option<u16>,
}

impl Failed {
    /// A failure with the generic exit code (1).
    #[must_use]
    pub fn new(message: impl Into<String>) -> Failed {
        Failed { code: GENERIC, message: message.into(), detail: None, http_connect: None }
    }
    /// A bad option or configuration (exit 2).
    #[must_use]
    pub fn config(message: impl Into<String>) -> Failed {
        Failed { code: CONFIG, message: message.into(), detail: None, http_connect: None }
    }
    /// A failure with this exit code.
    #[must_use]
    pub fn with_code(code: u8, message: impl Into<String>) -> Failed {
        Failed { code, message: message.into(), detail: None, http_connect: None }
    }
    /// A call's failure, for `url`: curl's exit code for it, a short line,
    /// and the whole chain as the detail.
    #[must_use]
    pub fn call(url: &str, e: &Error) -> Failed {
        let url = switchyard_common::redact(url);
        Failed {
            code: code(e),
            message: format!("({}) {url}: {}", code(e), short(e)),
            detail: Some(format!("({}) {e:#}", code(e))),
            http_connect: connect_status(e),
        }
    }
    /// What to print: the detail with `-v`, else the message.
    #[must_use]
    pub fn text(&self, verbose: bool) -> &str {
        match (&self.detail, verbose) {
            (Some(d), true) => d,
            _ => &self.message,
        }
    }
}

/// An HTTP/2 framing-layer problem (curl's CURLE_HTTP2): a server that allows no streams.
pub const HTTP2: u8 = 16;

/// The status of a refused `CONNECT` (407 included), if that is how `e`
/// failed.
fn connect_status(e: &Error) -> Option<u16> {
    let ErrorKind::Connect(AcquireError::Connect(race)) = e.kind() else { return None };
    race.failures.iter().find_map(|f| match f {
        Failure::Connect { error: ConnectError::TunnelRefused { status, .. }, .. } => Some(status.as_u16()),
        Failure::Connect { error: ConnectError::ProxyAuth { proxy, .. }, .. }
            if proxy.starts_with("http") =>
        {
            Some(407)
        }
        _ => None,
    })
}

/// curl's exit code for a call's failure.
#[must_use]
pub fn code(e: &Error) -> u8 {
    match e.kind() {
        ErrorKind::InvalidUrl(Some(switchyard_core::AddressError::UnsupportedScheme { .. })) => GENERIC,
        ErrorKind::InvalidUrl(_) => MALFORMED_URL,
        ErrorKind::InvalidRequest(_) | ErrorKind::Config(_) => CONFIG,
        ErrorKind::ProxyAuth { .. } => RECV,
        ErrorKind::Timeout(_) => TIMEOUT,
        ErrorKind::Status(_) => HTTP_STATUS,
        ErrorKind::Connect(AcquireError::Timeout { .. }) => TIMEOUT,
        ErrorKind::Connect(AcquireError::Connect(race)) => {
            if e.is_timeout() {
                return TIMEOUT;
            }
            if e.is_dns() {
                // A name other than the URL's that failed is a proxy's.
                let proxy = race
                    .failures
                    .iter()
                    .any(|f| matches!(f, Failure::Dns { host, .. } if host != race.address.host()));
                return if proxy { PROXY_DNS } else { DNS };
            }
            match e.tls_failure() {
                Some(TlsFailure::Protocol) => return TLS,
                Some(_) => return CERTIFICATE,
                None => {}
            }
            if e.is_proxy_auth() {
                return RECV;
            }
            // An HTTP proxy that answers CONNECT with a refusal is curl's
            // "CONNECT tunnel failed" (56); a broken handshake is 97.
            let refused = race
                .failures
                .iter()
                .any(|f| matches!(f, Failure::Connect { error: ConnectError::TunnelRefused { .. }, .. }));
            if refused {
                return RECV;
            }
            let proxy_failed = race
                .failures
                .iter()
                .any(|f| matches!(f, Failure::Connect { error: ConnectError::Proxy { .. }, .. }));
            if proxy_failed {
                PROXY
            } else {
                CONNECT
            }
        }
        ErrorKind::Connect(AcquireError::NoStreams { .. }) => HTTP2,
        ErrorKind::Connect(_) => CONNECT,
        ErrorKind::Exchange(x) => match &x.kind {
            ExchangeFailureKind::Timeout => TIMEOUT,
            ExchangeFailureKind::Io { kind: std::io::ErrorKind::UnexpectedEof, .. } => EMPTY_REPLY,
            ExchangeFailureKind::Io { .. }
            | ExchangeFailureKind::Misdirected
            | ExchangeFailureKind::Shutdown => RECV,
            // An answer that is not HTTP at all is curl's "HTTP/0.9 not
            // allowed" (1); a broken HTTP head is its "weird reply" (8).
            ExchangeFailureKind::Protocol { message } if message.starts_with("not an HTTP/1.x response") => {
                GENERIC
            }
            ExchangeFailureKind::Protocol { .. } => WEIRD_REPLY,
            _ => HTTP2_STREAM,
        },
        ErrorKind::Body(BodyError::Timeout) => TIMEOUT,
        ErrorKind::Body(BodyError::Http1(switchyard_core::http1::Http1Error::TruncatedBody { .. })) => {
            PARTIAL
        }
        ErrorKind::Body(BodyError::Http1(_)) => WEIRD_REPLY,
        ErrorKind::Body(BodyError::Http2(_)) => HTTP2_STREAM,
        ErrorKind::Body(_) => RECV,
        _ => GENERIC,
    }
}

/// The cause in a few words, without the URL (the caller names it once).
#[must_use]
pub fn short(e: &Error) -> String {
    match e.kind() {
        ErrorKind::Connect(AcquireError::Connect(race)) if !race.failures.is_empty() => {
            // Each distinct cause once: "cannot connect to 127.0.0.1:1:
            // connection refused"; several routes that failed alike are named
            // together.
            let mut causes: Vec<(String, Vec<String>)> = Vec::new();
            for f in &race.failures {
                let (place, why) = match f {
                    Failure::Dns { host, error, .. } => (format!("cannot resolve {host}"), dns_words(error)),
                    Failure::Connect { route, error, .. } => (route_words(route), connect_words(error)),
                };
                match causes.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, places)) if !places.contains(&place) => places.push(place),
                    Some(_) => {}
                    None => causes.push((why, vec![place])),
                }
            }
            let mut out = String::new();
            for (i, (why, places)) in causes.iter().enumerate() {
                if i > 0 {
                    out.push_str("; ");
                }
                let _ = write!(out, "{}: {why}", places.join(", "));
            }
            if race.timed_out() && !out.contains("timed out") {
                out.push_str(" (timed out)");
            }
            out
        }
        ErrorKind::Connect(AcquireError::Timeout { waited, .. }) => {
            format!("timed out after {} ms waiting for a connection", waited.as_millis())
        }
        ErrorKind::Timeout(phase) => format!("timed out {phase} the server"),
        ErrorKind::Status(s) => format!("the server answered {s}"),
        ErrorKind::InvalidUrl(Some(cause)) => cause.to_string(),
        ErrorKind::InvalidUrl(None) => "invalid URL".into(),
        ErrorKind::Exchange(x) => {
            if matches!(&x.kind, ExchangeFailureKind::Protocol { message } if message.contains("did not answer as an HTTP/2 server"))
            {
                // The frame-level cause is for -v.
                return "the server did not answer as an HTTP/2 server: it may speak only HTTP/1.1 \
                        (drop --http2-prior-knowledge; --http2 asks by ALPN over TLS)"
                    .into();
            }
            let mut s = x.kind.to_string();
            if x.may_have_been_sent {
                s.push_str(" (the request may have been sent)");
            }
            s
        }
        _ => deepest(e),
    }
}

/// The innermost cause's words (the whole chain is for `-v`).
fn deepest(e: &Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Where a connect attempt went: "cannot connect to 127.0.0.1:1", or through
/// its proxy.
fn route_words(route: &switchyard_core::Route) -> String {
    match route.unix_socket() {
        Some(path) => format!("cannot connect to {}", path.display()),
        None => format!("cannot connect to {route}"),
    }
}

fn dns_words(e: &switchyard_core::DnsError) -> String {
    match e {
        switchyard_core::DnsError::NoAddresses => "no addresses".into(),
        switchyard_core::DnsError::Timeout => "the lookup timed out".into(),
        switchyard_core::DnsError::Failed { message } => {
            // getaddrinfo's words, without the adapter's prefix.
            let m = message.strip_prefix("failed to lookup address information: ").unwrap_or(message);
            lowercase_first(m)
        }
        other => other.to_string(),
    }
}

fn connect_words(e: &ConnectError) -> String {
    match e {
        ConnectError::Io { message, .. } => {
            // "Connection refused (os error 111)" -> "connection refused".
            let m = message.split(" (os error").next().unwrap_or(message);
            lowercase_first(m)
        }
        ConnectError::ConnectTimeout { after } => format!("timed out after {} ms", after.as_millis()),
        ConnectError::HandshakeTimeout { after } => {
            format!("the handshake timed out after {} ms", after.as_millis())
        }
        other => other.to_string(),
    }
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_to_curls_codes() {
        let url = |u: &str| Error::invalid_url(u, None);
        assert_eq!(code(&url("x")), MALFORMED_URL);
        let scheme = Error::invalid_url(
            "ftp://x/",
            Some(switchyard_core::AddressError::UnsupportedScheme { scheme: "ftp".into() }),
        );
        assert_eq!(code(&scheme), GENERIC);
        assert_eq!(code(&Error::config("bad")), CONFIG);
        assert_eq!(code(&Error::from(ErrorKind::Status(http::StatusCode::NOT_FOUND))), HTTP_STATUS);
        assert_eq!(
            code(&Error::from(ErrorKind::Timeout(switchyard_common::TimeoutPhase::ResponseHead))),
            TIMEOUT
        );
        assert_eq!(code(&Error::from(ErrorKind::Body(BodyError::Timeout))), TIMEOUT);
        assert_eq!(code(&Error::from(ErrorKind::Body(BodyError::Http2("reset".into())))), HTTP2_STREAM);
    }

    #[test]
    fn verbose_text_is_the_chain() {
        let f = Failed::call("http://a:b@h/", &Error::config("bad thing"));
        assert_eq!(f.code, CONFIG);
        assert!(f.message.starts_with("(2) http://a:***@h/: "), "{}", f.message);
        assert!(!f.message.contains("a:b"));
        assert!(f.text(true).contains("bad thing"));
        assert_eq!(Failed::new("x").text(true), "x");
    }
}
