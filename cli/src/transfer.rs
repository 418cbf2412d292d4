//! One URL's transfer: its hops (one call each, several with `-L`), what
//! each answered, and how it ended.

use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode, Version};
use switchyard_core::{CallId, ConnectionId, Source};

use crate::exit::Failed;

/// One answered hop.
#[derive(Debug, Clone)]
pub struct HopDone {
    /// The call (listeners' id).
    pub call: Option<CallId>,
    /// The method sent.
    pub method: Method,
    /// The URL asked for.
    pub url: String,
    /// The status.
    pub status: StatusCode,
    /// The HTTP version.
    pub version: Version,
    /// The response headers.
    pub headers: HeaderMap,
    /// The head's bytes as received (HTTP/1.1), for `-i` / `-I`.
    pub raw: Option<switchyard_core::http1::RawHead>,
    /// The header fields sent (the client adds `Host` and its
    /// `User-Agent`), for `-w`'s `size_request` and `referer`.
    pub request_headers: HeaderMap,
    /// Request body bytes sent.
    pub request_body: u64,
    /// The peer's address (a proxy's, through one); `None` over a Unix socket
    /// or once the connection closed.
    pub peer: Option<SocketAddr>,
    /// The connection that carried it.
    pub connection: Option<ConnectionId>,
    /// That connection's own address (curl's `local_ip`, `local_port`).
    pub local: Option<SocketAddr>,
    /// How the pool found that connection.
    pub source: Option<Source>,
    /// Body bytes read (0 for a body not read: -I, -f on an error, a
    /// redirect's drained body counts).
    pub bytes: u64,
    /// Where it redirected to, when followed.
    pub redirect: Option<String>,
}

/// One URL's transfer.
#[derive(Debug)]
pub struct Transfer {
    /// The URL given.
    pub url: String,
    /// The hops answered, in order.
    pub hops: Vec<HopDone>,
    /// The call that failed, when one did (before its answer).
    pub failed_call: Option<CallId>,
    /// When it started.
    pub started: std::time::Instant,
    /// How long it took.
    pub elapsed: Duration,
    /// How it ended.
    pub result: Result<(), Failed>,
    /// Its place among the command's URLs (from 0; curl's `urlnum`).
    pub index: usize,
    /// The file its body went to, as named (curl's `filename_effective`).
    pub filename: Option<String>,
}

impl Transfer {
    /// A transfer of `url` starting now.
    #[must_use]
    pub fn start(url: &str) -> Transfer {
        Transfer {
            url: url.to_owned(),
            hops: Vec::new(),
            failed_call: None,
            started: std::time::Instant::now(),
            elapsed: Duration::ZERO,
            result: Ok(()),
            index: 0,
            filename: None,
        }
    }

    /// Ends it with `result`.
    #[must_use]
    pub fn end(mut self, result: Result<(), Failed>) -> Transfer {
        self.elapsed = self.started.elapsed();
        self.result = result;
        self
    }

    /// The last hop answered.
    #[must_use]
    pub fn last(&self) -> Option<&HopDone> {
        self.hops.last()
    }

    /// Every call it made, in order (a failed last one included).
    #[must_use]
    pub fn calls(&self) -> Vec<CallId> {
        self.hops.iter().filter_map(|h| h.call).chain(self.failed_call).collect()
    }
}

/// `HTTP/1.1`, `HTTP/2` (curl's words for a status line).
#[must_use]
pub fn version_words(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// The status line: `HTTP/2 200 OK`.
#[must_use]
pub fn status_line(v: Version, s: StatusCode) -> String {
    match s.canonical_reason() {
        Some(reason) => format!("{} {} {reason}", version_words(v), s.as_u16()),
        None => format!("{} {}", version_words(v), s.as_u16()),
    }
}

/// A response head as curl's `-i` prints it: on HTTP/1.1 the bytes as the
/// server sent them (its case, its reason phrase), on HTTP/2 and later
/// `HTTP/2 200 ` (curl prints no reason phrase there) and the fields in the
/// lower case they arrive in; CRLF line ends and the blank line.
#[must_use]
pub fn head_text(done: &HopDone) -> Vec<u8> {
    if let Some(raw) = &done.raw {
        // The informational heads first (a 100 Continue), as curl prints them.
        let mut text: Vec<u8> = raw.interim().iter().flat_map(|h| h.iter().copied()).collect();
        text.extend_from_slice(raw.as_bytes());
        return text;
    }
    let mut text = if done.version >= Version::HTTP_2 {
        format!("{} {} \r\n", version_words(done.version), done.status.as_u16())
    } else {
        format!("{}\r\n", status_line(done.version, done.status))
    };
    for (name, value) in &done.headers {
        text.push_str(&format!("{name}: {}\r\n", String::from_utf8_lossy(value.as_bytes())));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// The lower-case name of a source (`new`, `pooled`, `shared`, `coalesced`).
#[must_use]
pub fn source_words(s: Source) -> &'static str {
    match s {
        Source::New => "new",
        Source::Pooled => "pooled",
        Source::Shared => "shared",
        Source::Coalesced => "coalesced",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_as_curl() {
        assert_eq!(status_line(Version::HTTP_2, StatusCode::OK), "HTTP/2 200 OK");
        assert_eq!(status_line(Version::HTTP_11, StatusCode::NOT_FOUND), "HTTP/1.1 404 Not Found");
        assert_eq!(status_line(Version::HTTP_10, StatusCode::from_u16(599).unwrap()), "HTTP/1.0 599");
    }
}
