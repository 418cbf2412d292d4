//! The Manager's incoming half (the `gateway` feature): local programs talk plain
//! HTTP to a listener, and each request rides the declared servers' warm, pooled
//! connections. hyper's server accepts HTTP/1.1 (keep-alive) and HTTP/2 with prior
//! knowledge; the decisions (routing, forwarded fields, failure statuses) are
//! [`switchyard_common::gateway`](switchyard_async::switchyard_common::gateway)'s.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = switchyard_tokio::Manager::builder().server("https://api.internal", 2).build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // `curl -x http://127.0.0.1:8080 http://api.internal/v1/items` goes out over TLS.
//! manager.serve(listener).await?;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use switchyard_async::switchyard_common::gateway::{self, Refusal};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::{Body, BoxError, ConnectionId, Manager, ResponseExt};

type GatewayBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// One answered request, as the access log sees it.
#[derive(Clone, Debug)]
pub struct AccessRecord {
    /// The request method.
    pub method: http::Method,
    /// The request target as it arrived (absolute or origin form).
    pub target: String,
    /// The declared server it went to, if it was routed.
    pub server: Option<String>,
    /// The status answered.
    pub status: StatusCode,
    /// The response's `Content-Length`, when it has one.
    pub response_length: Option<u64>,
    /// From the request's arrival to the response head.
    pub head_time: Duration,
    /// The upstream connection that carried it.
    pub connection: Option<ConnectionId>,
    /// The gateway's own answer (a refusal or a failure), in words.
    pub refused: Option<String>,
}

impl AccessRecord {
    /// The record as one JSON object (for `--json` logs).
    #[must_use]
    pub fn to_json(&self) -> String {
        fn text(s: &str) -> String {
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        let opt = |s: Option<String>| s.map_or_else(|| "null".to_owned(), |s| text(&s));
        format!(
            "{{\"method\":{},\"target\":{},\"server\":{},\"status\":{},\"response_length\":{},\"head_ms\":{:.3},\"connection\":{},\"refused\":{}}}",
            text(self.method.as_str()),
            text(&self.target),
            opt(self.server.clone()),
            self.status.as_u16(),
            self.response_length.map_or_else(|| "null".to_owned(), |n| n.to_string()),
            self.head_time.as_secs_f64() * 1000.0,
            opt(self.connection.map(|c| c.to_string())),
            opt(self.refused.clone()),
        )
    }
}

/// One line per request: `GET http://api.test/x -> 200 (1.2 ms, conn 3)`.
impl std::fmt::Display for AccessRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {}", self.method, self.target, self.status.as_u16())?;
        write!(f, " ({:.1} ms", self.head_time.as_secs_f64() * 1000.0)?;
        if let Some(c) = self.connection {
            write!(f, ", conn {c}")?;
        }
        f.write_str(")")?;
        if let Some(why) = &self.refused {
            write!(f, ": {why}")?;
        }
        Ok(())
    }
}

type Log = Arc<dyn Fn(&AccessRecord) + Send + Sync>;

/// A gateway over a [`Manager`]'s servers ([`Manager::gateway`]): limits, the
/// shutdown grace, an access log. Serve with [`Gateway::serve`] or
/// [`Gateway::serve_until`].
#[must_use]
pub struct Gateway {
    manager: Manager,
    max_connections: usize,
    max_requests: usize,
    grace: Duration,
    log: Option<Log>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("max_connections", &self.max_connections)
            .field("max_requests", &self.max_requests)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A gateway over this Manager's servers, with every default: 1,024 local
    /// connections and 4,096 requests at once, 10 s of shutdown grace, no log.
    pub fn gateway(&self) -> Gateway {
        Gateway {
            manager: self.clone(),
            max_connections: 1024,
            max_requests: 4096,
            grace: gateway::DEFAULT_SHUTDOWN_GRACE,
            log: None,
        }
    }

    /// Serves the gateway with every default on `listener` until an error
    /// stops accepting (see [`Gateway::serve_until`] for a shutdown signal).
    ///
    /// # Errors
    /// The listener failed (other than the transient errors of `accept`).
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        self.gateway().serve(listener).await
    }
}

impl Gateway {
    /// At most `n` local connections at once; more wait in the listener's
    /// backlog (accepting pauses). Default 1,024.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
    /// At most `n` requests in flight at once; more wait for a slot. Default 4,096.
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n.max(1);
        self
    }
    /// How long requests in flight may finish after shutdown begins. Default 10 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
    /// Calls `log` once per request, when its response head is answered.
    pub fn access_log(mut self, log: impl Fn(&AccessRecord) + Send + Sync + 'static) -> Self {
        self.log = Some(Arc::new(log));
        self
    }

    /// Serves until an error stops accepting.
    ///
    /// # Errors
    /// As [`Manager::serve`].
    pub async fn serve(self, listener: TcpListener) -> std::io::Result<()> {
        self.serve_until(listener, std::future::pending()).await
    }

    /// Serves until `shutdown` completes: then stops accepting, lets requests in
    /// flight finish for up to the grace, and closes the local connections
    /// (idle keep-alive ones at once). The Manager is left running.
    ///
    /// # Errors
    /// As [`Manager::serve`].
    pub async fn serve_until(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let connections = Arc::new(Semaphore::new(self.max_connections));
        let state = Arc::new(State {
            local_port: listener.local_addr().ok().map(|a| a.port()),
            manager: self.manager,
            requests: Semaphore::new(self.max_requests),
            log: self.log,
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().keep_alive(true).timer(hyper_util::rt::TokioTimer::new());
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                p = Arc::clone(&connections).acquire_owned() => p.map_err(std::io::Error::other)?,
                () = &mut shutdown => break,
            };
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // Out of descriptors, a connection reset before accept: go on.
                    Err(e) if is_transient(&e) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
                () = &mut shutdown => break,
            };
            let _ = stream.set_nodelay(true);
            let state = Arc::clone(&state);
            let service = hyper::service::service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(state.handle(request).await) }
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                let _ = connection.await;
                drop(permit);
            });
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(self.grace) => {}
        }
        Ok(())
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(e.kind(), K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock)
        || e.raw_os_error().is_some_and(|c| c == 23 || c == 24) // ENFILE, EMFILE
}

struct State {
    local_port: Option<u16>,
    manager: Manager,
    requests: Semaphore,
    log: Option<Log>,
}

impl State {
    async fn handle(&self, request: Request<Incoming>) -> Response<GatewayBody> {
        let start = Instant::now();
        let _slot = self.requests.acquire().await;
        let (mut parts, body) = request.into_parts();
        let mut record = AccessRecord {
            method: parts.method.clone(),
            target: parts.uri.to_string(),
            server: None,
            status: StatusCode::OK,
            response_length: None,
            head_time: Duration::ZERO,
            connection: None,
            refused: None,
        };
        let response = match self.forward(&mut parts, body, &mut record).await {
            Ok(response) => response,
            Err(refusal) => {
                record.refused = Some(refusal.reason.clone());
                refuse(refusal)
            }
        };
        record.status = response.status();
        record.response_length = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        record.head_time = start.elapsed();
        if let Some(log) = &self.log {
            log(&record);
        }
        response
    }

    async fn forward(
        &self,
        parts: &mut http::request::Parts,
        body: Incoming,
        record: &mut AccessRecord,
    ) -> Result<Response<GatewayBody>, Refusal> {
        smuggling_shapes(&parts.headers)?;
        let servers = self.manager.inner.__servers();
        let routed = gateway::route(servers, &parts.method, &parts.uri, &parts.headers, self.local_port);
        let (server, target) = match routed {
            Ok(routed) => routed,
            // The status page, for a request to the gateway itself (a host no
            // server was declared for).
            Err(refusal) if refusal.status == StatusCode::FORBIDDEN && parts.uri.path() == STATUS_PATH => {
                return Ok(self.status_page());
            }
            Err(refusal) => return Err(refusal),
        };
        record.server = Some(server.url.clone());
        if let Some(refusal) = self.manager.inner.__status_of(server).as_ref().and_then(gateway::down) {
            return Err(refusal);
        }
        let incoming_version = parts.version;
        gateway::forward_request_headers(&mut parts.headers, incoming_version);
        let mut upstream = Request::new(if hyper::body::Body::is_end_stream(&body) {
            Body::empty()
        } else {
            Body::wrap(body)
        });
        *upstream.method_mut() = parts.method.clone();
        *upstream.uri_mut() = target;
        *upstream.headers_mut() = std::mem::take(&mut parts.headers);
        let response = self.manager.client().send(upstream).await.map_err(|e| gateway::failure(&e))?;
        record.connection = response.connection_id();
        let (mut head, body) = response.into_parts();
        let upstream_version = head.version;
        gateway::forward_response_headers(&mut head.headers, upstream_version);
        head.version = http::Version::HTTP_11;
        Ok(Response::from_parts(head, body.map_err(BoxError::from).boxed_unsync()))
    }
}

/// The path of the gateway's status page (`GET http://127.0.0.1:8080/.switchyard/status`):
/// one line per declared server, as `Manager::status()` prints it.
pub const STATUS_PATH: &str = "/.switchyard/status";

impl State {
    fn status_page(&self) -> Response<GatewayBody> {
        let mut text = String::new();
        for status in self.manager.status() {
            text.push_str(&status.to_string());
            text.push('\n');
        }
        let mut response =
            Response::new(Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        response
    }
}

/// Requests a strict server must reject (RFC 9112 §6.3): `Content-Length`
/// values that disagree or do not parse, and (on HTTP/2, where hyper's HTTP/1.1
/// rule does not apply) `Transfer-Encoding` with `Content-Length`. hyper's
/// HTTP/1.1 server refuses most malformed heads itself (invalid bytes, oversized
/// heads, conflicting lengths) and, for `Transfer-Encoding` with
/// `Content-Length`, drops the length and reads the body as chunked (RFC 9112
/// §6.3's rule for an intermediary that forwards); the gateway re-frames what it
/// forwards, so the upstream never sees the length that was claimed.
fn smuggling_shapes(headers: &http::HeaderMap) -> Result<(), Refusal> {
    let bad = |why: &str| Refusal {
        status: StatusCode::BAD_REQUEST,
        reason: format!("gateway: {why}"),
        retry_after: None,
    };
    if headers.contains_key(header::TRANSFER_ENCODING) && headers.contains_key(header::CONTENT_LENGTH) {
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

fn refuse(refusal: Refusal) -> Response<GatewayBody> {
    let mut body = refusal.reason;
    body.push('\n');
    let mut response =
        Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = refusal.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if let Some(secs) = refusal.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if refusal.status == StatusCode::BAD_REQUEST {
        // A malformed request leaves the connection's framing in doubt.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
