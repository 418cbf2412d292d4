//! [`ResponseBody`]: a response body streamed as `Bytes` chunks. Reading it to
//! the end returns the connection to the pool; dropping it early drains a little
//! in the background (HTTP/1.1: up to 64 KiB or 100 ms) or retires the
//! connection — it is never leaked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use switchyard_common::{BodyLedger, Collector, Error};
use switchyard_core::{CallId, ConnectionId};

use crate::h1::H1Body;
use crate::h2::H2Body;
use crate::shared::Shared;

/// A streaming response body. Read it with [`chunk`](ResponseBody::chunk) /
/// [`bytes`](ResponseBody::bytes) / [`text`](ResponseBody::text), or hand it
/// to the ecosystem: it is an [`http_body::Body`] (data frames, then the
/// trailers), a [`futures_core::Stream`] of `Result<Bytes, Error>`, and
/// [`into_reader`](ResponseBody::into_reader) gives an `AsyncRead` (tokio's
/// and futures-io's) for `tokio::io::copy` into a file.
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime>(client: switchyard_async::Client<R>) -> Result<(), switchyard_common::Error> {
/// let mut response = client.get("https://example.com/big").send().await?;
/// while let Some(chunk) = response.body_mut().chunk().await? {
///     println!("{} bytes", chunk.len());
/// }
/// // Or with http-body-util's `BodyExt::collect`:
/// use http_body_util::BodyExt;
/// let response = client.get("https://example.com/").send().await?;
/// let bytes = response.into_body().collect().await?.to_bytes();
/// # Ok(()) }
/// ```
pub struct ResponseBody {
    // Dropped first: the connection is released before the call ends.
    inner: Inner,
    pub(crate) ledger: BodyLedger,
    /// The trailers went out as the last `http_body` frame.
    trailers_given: bool,
}

enum Inner {
    Empty,
    H1(Box<H1Body>),
    H2(Box<H2Body>),
    #[cfg(feature = "http3")]
    H3(Box<crate::h3::H3Body>),
    /// A body decoded by a layer (the `decompression` feature).
    #[cfg(feature = "decompression")]
    Decoded(Box<Decoded>),
}

/// A decoded body: the layer's body over a [`ResponseBody`], the URL for its errors.
#[cfg(feature = "decompression")]
struct Decoded {
    body: Pin<Box<dyn http_body::Body<Data = Bytes, Error = crate::BoxError> + Send>>,
    uri: String,
    trailers: Option<http::HeaderMap>,
    done: bool,
}

#[cfg(feature = "decompression")]
impl Decoded {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Error>> {
        loop {
            if self.done {
                return Poll::Ready(Ok(None));
            }
            match std::task::ready!(http_body::Body::poll_frame(self.body.as_mut(), cx)) {
                None => self.done = true,
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => return Poll::Ready(Ok(Some(data))),
                    Err(frame) => self.trailers = frame.into_trailers().ok(),
                },
                Some(Err(e)) => {
                    self.done = true;
                    // The connection's own failure comes back as it was.
                    return Poll::Ready(Err(match e.downcast::<Error>() {
                        Ok(e) => *e,
                        Err(e) => Error::from(switchyard_common::ErrorKind::Decode(format!(
                            "the response body does not decode (Content-Encoding): {e}"
                        )))
                        .with_url(&self.uri),
                    }));
                }
            }
        }
    }
}

impl Inner {
    /// The next chunk of a connection's body, read in place.
    fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, switchyard_common::BodyError>> {
        match self {
            Inner::Empty => Poll::Ready(Ok(None)),
            Inner::H1(b) => b.poll_chunk(cx),
            Inner::H2(b) => b.poll_chunk(cx),
            #[cfg(feature = "http3")]
            Inner::H3(b) => b.poll_chunk(cx),
            #[cfg(feature = "decompression")]
            Inner::Decoded(_) => unreachable!("a decoded body is read by poll_chunk directly"),
        }
    }
}

impl Default for ResponseBody {
    /// An empty body (what tower-http's `TimeoutLayer` answers with).
    fn default() -> Self {
        ResponseBody::empty()
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").field("ledger", &self.ledger).finish_non_exhaustive()
    }
}

impl ResponseBody {
    fn with(inner: Inner, ended: bool) -> ResponseBody {
        ResponseBody { inner, ledger: BodyLedger::new(ended), trailers_given: false }
    }
    pub(crate) fn h1(body: H1Body) -> ResponseBody {
        ResponseBody::with(Inner::H1(Box::new(body)), false)
    }
    pub(crate) fn h2(body: H2Body) -> ResponseBody {
        ResponseBody::with(Inner::H2(Box::new(body)), false)
    }
    #[cfg(feature = "http3")]
    pub(crate) fn h3(body: crate::h3::H3Body) -> ResponseBody {
        ResponseBody::with(Inner::H3(Box::new(body)), false)
    }
    pub(crate) fn set_owner(&mut self, shared: Arc<Shared>, call: CallId, uri: &http::Uri) {
        self.ledger.own(shared, call, uri);
    }

    /// `body` (a layer's, over a [`ResponseBody`]) as a [`ResponseBody`].
    #[cfg(feature = "decompression")]
    pub(crate) fn decoded<B>(body: B, uri: &http::Uri) -> ResponseBody
    where
        B: http_body::Body<Data = Bytes, Error = crate::BoxError> + Send + 'static,
    {
        let body = Box::pin(body);
        let shown = switchyard_common::redact(&uri.to_string());
        let mut decoded = ResponseBody::with(
            Inner::Decoded(Box::new(Decoded { body, uri: shown, trailers: None, done: false })),
            false,
        );
        decoded.ledger.set_uri(uri);
        decoded
    }

    /// An empty body (for responses built by hand).
    #[must_use]
    pub fn empty() -> ResponseBody {
        ResponseBody::with(Inner::Empty, true)
    }

    /// The next chunk, as a poll (what the trait impls build on): `None` at
    /// the end (the connection is released then).
    ///
    /// # Errors
    /// [`ErrorKind::Body`](switchyard_common::ErrorKind::Body): the connection
    /// failed, timed out, or broke the framing.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Error>> {
        #[cfg(feature = "decompression")]
        if let Inner::Decoded(d) = &mut self.inner {
            return d.poll_chunk(cx);
        }
        if self.ledger.is_ended() {
            return Poll::Ready(Ok(None));
        }
        let next = std::task::ready!(self.inner.poll_chunk(cx));
        let inner = &mut self.inner;
        Poll::Ready(self.ledger.settle(next, || match inner {
            Inner::H1(b) => b.0.finish(),
            Inner::H2(b) => b.finish(),
            #[cfg(feature = "http3")]
            Inner::H3(b) => b.finish(),
            #[cfg(feature = "decompression")]
            Inner::Decoded(_) => {}
            Inner::Empty => {}
        }))
    }

    /// The next chunk, or `None` at the end (the connection is released then).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// Reads the whole body.
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn bytes(&mut self) -> Result<Bytes, Error> {
        let mut all = Collector::default();
        while let Some(chunk) = self.chunk().await? {
            all.push(chunk);
        }
        Ok(all.finish())
    }

    /// Reads the whole body (the same as [`ResponseBody::bytes`]).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn collect(&mut self) -> Result<Bytes, Error> {
        self.bytes().await
    }

    /// Reads the whole body as text (invalid UTF-8 replaced).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn text(&mut self) -> Result<String, Error> {
        let bytes = self.bytes().await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads the whole body as JSON (feature `json`).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`], or [`ErrorKind::Decode`](switchyard_common::ErrorKind::Decode)
    /// when the body is not that JSON.
    #[cfg(feature = "json")]
    pub async fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, Error> {
        let bytes = self.bytes().await?;
        switchyard_common::decode_json(&bytes).map_err(|e| self.ledger.about(e))
    }

    /// The body as an `AsyncRead` (tokio's and futures-io's), for
    /// `tokio::io::copy` into a file and the like. Errors come out as
    /// `io::Error`s whose inner error is the switchyard [`Error`].
    #[must_use]
    pub fn into_reader(self) -> BodyReader {
        BodyReader { body: self, pending: Bytes::new() }
    }

    /// Takes the connection over after `101 Switching Protocols` (a request
    /// with an `Upgrade` field goes on an HTTP/1.1 connection of its own for
    /// this): the [`Upgraded`](crate::Upgraded) stream, with any bytes that
    /// arrived behind the head. The call ends here (`call_end`), and the
    /// pool counts the connection closed ("exclusive use").
    /// [`ResponseExt::upgrade`] checks the status first.
    ///
    /// # Errors
    /// [`ErrorKind::Upgrade`](switchyard_common::ErrorKind::Upgrade): the
    /// response did not switch protocols (not a `101`, over HTTP/2, or a body
    /// already read); the body is dropped (drained or closed as usual).
    pub fn upgrade(mut self) -> Result<crate::Upgraded, Error> {
        let why = match &mut self.inner {
            Inner::H1(b) => match b.take_upgraded() {
                Some(upgraded) => {
                    // The call ends with the switch: the body had no bytes.
                    let _ = self.ledger.settle(Ok(None), || {});
                    return Ok(upgraded);
                }
                None if self.ledger.is_ended() || b.0.is_done() => "its body was already read",
                None => "the server did not switch protocols (no 101 Switching Protocols)",
            },
            Inner::H2(_) => "it came over HTTP/2, which has no protocol switch",
            #[cfg(feature = "http3")]
            Inner::H3(_) => "it came over HTTP/3, which has no protocol switch",
            #[cfg(feature = "decompression")]
            Inner::Decoded(_) => "its body is being decoded (Content-Encoding)",
            Inner::Empty => "it was not received on a connection",
        };
        Err(self.ledger.about(Error::from(switchyard_common::ErrorKind::Upgrade(why.into()))))
    }

    /// Trailer fields, once the body has ended (chunked HTTP/1.1 or HTTP/2).
    #[must_use]
    pub fn trailers(&self) -> Option<&http::HeaderMap> {
        match &self.inner {
            Inner::H1(b) => b.0.trailers.as_ref(),
            Inner::H2(b) => b.trailers.as_ref(),
            #[cfg(feature = "http3")]
            Inner::H3(b) => b.trailers.as_ref(),
            #[cfg(feature = "decompression")]
            Inner::Decoded(d) => d.trailers.as_ref(),
            Inner::Empty => None,
        }
    }

    /// Whether the body has been read to the end (its connection released).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.ledger.is_ended()
            || match &self.inner {
                Inner::Empty => true,
                Inner::H1(b) => b.0.is_done(),
                Inner::H2(b) => b.is_done(),
                #[cfg(feature = "http3")]
                Inner::H3(b) => b.is_done(),
                #[cfg(feature = "decompression")]
                Inner::Decoded(d) => d.done,
            }
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        match this.poll_chunk(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(Some(chunk))) => Poll::Ready(Some(Ok(http_body::Frame::data(chunk)))),
            Poll::Ready(Ok(None)) => {
                if this.trailers_given {
                    return Poll::Ready(None);
                }
                this.trailers_given = true;
                Poll::Ready(this.trailers().cloned().map(|t| Ok(http_body::Frame::trailers(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        #[cfg(feature = "decompression")]
        if let Inner::Decoded(d) = &self.inner {
            return d.done && (self.trailers_given || d.trailers.is_none());
        }
        self.ledger.is_ended() && (self.trailers_given || self.trailers().is_none())
    }
}

impl futures_core::Stream for ResponseBody {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx).map(Result::transpose)
    }
}

/// A [`ResponseBody`] as an `AsyncRead` (tokio's and futures-io's):
/// [`ResponseBody::into_reader`].
#[derive(Debug)]
pub struct BodyReader {
    body: ResponseBody,
    /// What the last chunk still holds.
    pending: Bytes,
}

impl BodyReader {
    /// Copies what it can into `out`; `Ok(0)` at the end.
    fn poll_into(&mut self, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<std::io::Result<usize>> {
        if out.is_empty() {
            return Poll::Ready(Ok(0));
        }
        while self.pending.is_empty() {
            match self.body.poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(std::io::Error::other(e))),
                Poll::Ready(Ok(None)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(Some(chunk))) => self.pending = chunk,
            }
        }
        let n = out.len().min(self.pending.len());
        out[..n].copy_from_slice(&self.pending.split_to(n));
        Poll::Ready(Ok(n))
    }

    /// The body back (with whatever was not read yet, unless a chunk was
    /// half read).
    #[must_use]
    pub fn into_inner(self) -> ResponseBody {
        self.body
    }
}

impl tokio::io::AsyncRead for BodyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = std::task::ready!(this.poll_into(cx, buf.initialize_unfilled()))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl futures_io::AsyncRead for BodyReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        self.get_mut().poll_into(cx, buf)
    }
}

/// What a response offers beyond `http::Response`: the body read whole
/// (`text`, `bytes`, `json` with the `json` feature), `error_for_status`, and
/// the call's ids. `use switchyard_tokio::ResponseExt;` (or smol's).
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime>(client: switchyard_async::Client<R>) -> Result<(), switchyard_common::Error> {
/// # use switchyard_async::ResponseExt;
/// // use switchyard_tokio::ResponseExt; (or smol's)
/// let text = client.get("https://example.com/").send().await?.error_for_status()?.text().await?;
/// # Ok(()) }
/// ```
pub trait ResponseExt: Sized {
    /// The response, unless its status is a client (4xx) or server (5xx)
    /// error: then an [`ErrorKind::Status`](switchyard_common::ErrorKind::Status)
    /// error naming the URL (the body is dropped, its connection drained or
    /// closed).
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    fn error_for_status(self) -> Result<Self, Error>;
    /// As [`error_for_status`](Self::error_for_status), by reference (the
    /// response stays usable either way).
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    fn error_for_status_ref(&self) -> Result<&Self, Error>;
    /// Without the `json` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "json"))]
    #[doc(hidden)]
    fn json<T: switchyard_common::__private::NeedsJsonFeature + Send>(
        self,
    ) -> impl Future<Output = Result<T, Error>> + Send {
        drop(self);
        std::future::ready(Err(Error::config("the json feature is off")))
    }
    /// The whole body as text (invalid UTF-8 replaced).
    fn text(self) -> impl Future<Output = Result<String, Error>> + Send;
    /// The whole body.
    fn bytes(self) -> impl Future<Output = Result<Bytes, Error>> + Send;
    /// The whole body as JSON (feature `json`).
    #[cfg(feature = "json")]
    fn json<T: serde::de::DeserializeOwned + Send>(self) -> impl Future<Output = Result<T, Error>> + Send;
    /// Takes the connection over after `101 Switching Protocols`
    /// (WebSocket and other upgrades; see [`ResponseBody::upgrade`]).
    ///
    /// # Errors
    /// [`ErrorKind::Upgrade`](switchyard_common::ErrorKind::Upgrade) naming
    /// the status when it is not `101`.
    fn upgrade(self) -> Result<crate::Upgraded, Error>;
    /// The URL this response answers: the request's, or after followed
    /// redirects the last hop's. A response built by hand has none: `/`.
    fn url(&self) -> &http::Uri;
    /// The call's id, as listeners see it (`None` for a response built by hand).
    fn call_id(&self) -> Option<CallId>;
    /// The id of the connection that carried it.
    fn connection_id(&self) -> Option<ConnectionId>;
    /// How the pool found that connection: `New` (connected for this call),
    /// `Pooled`, `Shared` (an HTTP/2 connection with other streams) or
    /// `Coalesced` (an HTTP/2 connection to another name).
    fn connection_source(&self) -> Option<switchyard_core::Source>;
}

impl ResponseExt for http::Response<ResponseBody> {
    fn error_for_status(self) -> Result<Self, Error> {
        self.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    fn error_for_status_ref(&self) -> Result<&Self, Error> {
        self.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    async fn text(mut self) -> Result<String, Error> {
        self.body_mut().text().await
    }
    async fn bytes(mut self) -> Result<Bytes, Error> {
        self.body_mut().bytes().await
    }
    #[cfg(feature = "json")]
    async fn json<T: serde::de::DeserializeOwned + Send>(mut self) -> Result<T, Error> {
        self.body_mut().json().await
    }
    fn upgrade(self) -> Result<crate::Upgraded, Error> {
        self.body().ledger.check_switched(self.status())?;
        self.into_body().upgrade()
    }
    fn url(&self) -> &http::Uri {
        static NONE: std::sync::OnceLock<http::Uri> = std::sync::OnceLock::new();
        self.body().ledger.uri().unwrap_or_else(|| NONE.get_or_init(|| http::Uri::from_static("/")))
    }
    fn call_id(&self) -> Option<CallId> {
        self.extensions().get::<CallId>().copied()
    }
    fn connection_id(&self) -> Option<ConnectionId> {
        self.extensions().get::<switchyard_common::Carrier>().map(|c| c.connection)
    }
    fn connection_source(&self) -> Option<switchyard_core::Source> {
        self.extensions().get::<switchyard_common::Carrier>().map(|c| c.source)
    }
}

/// A response, as `send` returns it: the status and head fields, and the
/// body read as a whole ([`text`](Response::text), [`bytes`](Response::bytes),
/// [`json`](Response::json)) or chunk by chunk ([`chunk`](Response::chunk),
/// [`bytes_stream`](Response::bytes_stream), [`into_reader`](Response::into_reader)).
/// reqwest's methods, with no trait to import. [`into_http`](Response::into_http)
/// (or `From`) gives the `http::Response` underneath, for the `http` ecosystem.
///
/// ```no_run
/// # async fn run(client: switchyard_async::Client<impl switchyard_async::Runtime>) -> Result<(), switchyard_common::Error> {
/// let response = client.get("https://example.com/").send().await?.error_for_status()?;
/// println!("{} from {}", response.status(), response.url());
/// let text = response.text().await?;
/// # drop(text); Ok(()) }
/// ```
pub struct Response {
    inner: http::Response<ResponseBody>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("url", &switchyard_common::redacted(self.url()))
            .field("status", &self.status())
            .field("version", &self.version())
            .field("headers", self.headers())
            .finish_non_exhaustive()
    }
}

impl From<http::Response<ResponseBody>> for Response {
    #[inline]
    fn from(inner: http::Response<ResponseBody>) -> Response {
        Response { inner }
    }
}

impl From<Response> for http::Response<ResponseBody> {
    fn from(response: Response) -> http::Response<ResponseBody> {
        response.inner
    }
}

impl Response {
    /// The status code.
    #[must_use]
    pub fn status(&self) -> http::StatusCode {
        self.inner.status()
    }
    /// The HTTP version it came over.
    #[must_use]
    pub fn version(&self) -> http::Version {
        self.inner.version()
    }
    /// The head's fields.
    #[must_use]
    pub fn headers(&self) -> &http::HeaderMap {
        self.inner.headers()
    }
    /// The head's fields, to change.
    pub fn headers_mut(&mut self) -> &mut http::HeaderMap {
        self.inner.headers_mut()
    }
    /// The `Content-Length` the server declared, if any (a decoded body's is
    /// removed: its length is not known in advance).
    #[must_use]
    pub fn content_length(&self) -> Option<u64> {
        self.inner.headers().get(http::header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
    }
    /// The URL this response answers: the request's, or after followed
    /// redirects the last hop's (a response built by hand: `/`).
    #[must_use]
    pub fn url(&self) -> &http::Uri {
        ResponseExt::url(&self.inner)
    }
    /// The extensions (what layers attached to the response).
    #[must_use]
    pub fn extensions(&self) -> &http::Extensions {
        self.inner.extensions()
    }
    /// The extensions, to change.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        self.inner.extensions_mut()
    }
    /// The body.
    #[must_use]
    pub fn body(&self) -> &ResponseBody {
        self.inner.body()
    }
    /// The body, to read in place (`body_mut().chunk().await`).
    pub fn body_mut(&mut self) -> &mut ResponseBody {
        self.inner.body_mut()
    }
    /// The body alone.
    #[must_use]
    pub fn into_body(self) -> ResponseBody {
        self.inner.into_body()
    }
    /// The head and the body.
    #[must_use]
    pub fn into_parts(self) -> (http::response::Parts, ResponseBody) {
        self.inner.into_parts()
    }
    /// The `http::Response` underneath.
    #[must_use]
    pub fn into_http(self) -> http::Response<ResponseBody> {
        self.inner
    }
    /// The response, unless its status is a client (4xx) or server (5xx)
    /// error: then an [`ErrorKind::Status`](switchyard_common::ErrorKind::Status)
    /// error naming the URL (the body is dropped, its connection drained or
    /// closed).
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    pub fn error_for_status(self) -> Result<Response, Error> {
        self.inner.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    /// As [`error_for_status`](Self::error_for_status), by reference (the
    /// response stays usable either way).
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    pub fn error_for_status_ref(&self) -> Result<&Response, Error> {
        self.inner.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    /// The next chunk of the body, or `None` at the end (the connection is
    /// released then).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        self.inner.body_mut().chunk().await
    }
    /// The whole body.
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn bytes(mut self) -> Result<Bytes, Error> {
        self.inner.body_mut().bytes().await
    }
    /// The whole body as text (invalid UTF-8 replaced).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`].
    pub async fn text(mut self) -> Result<String, Error> {
        self.inner.body_mut().text().await
    }
    /// The whole body as JSON (feature `json`).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`], or [`ErrorKind::Decode`](switchyard_common::ErrorKind::Decode)
    /// when the body is not that JSON.
    #[cfg(feature = "json")]
    pub async fn json<T: serde::de::DeserializeOwned>(mut self) -> Result<T, Error> {
        self.inner.body_mut().json().await
    }
    /// Without the `json` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "json"))]
    #[doc(hidden)]
    pub async fn json<T: switchyard_common::__private::NeedsJsonFeature>(self) -> Result<T, Error> {
        drop(self);
        Err(Error::config("the json feature is off"))
    }
    /// Copies the rest of the body into a tokio writer, in writes of up to
    /// 1 MiB, and flushes it (see [`ResponseBody::copy_to`]): the fast way
    /// into a `tokio::fs::File`.
    ///
    /// ```no_run
    /// # async fn run(client: switchyard_async::Client<impl switchyard_async::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut response = client.get("http://127.0.0.1:8080/big.iso").send().await?;
    /// let mut file = tokio::fs::File::create("big.iso").await?;
    /// response.copy_to(&mut file).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ResponseBody::copy_to`].
    pub async fn copy_to<W>(&mut self, out: &mut W) -> Result<u64, Error>
    where
        W: tokio::io::AsyncWrite + Unpin + ?Sized,
    {
        self.inner.body_mut().copy_to(out).await
    }
    /// [`copy_to`](Response::copy_to) for a futures-io writer
    /// (`async_fs::File` with smol or async-std).
    ///
    /// # Errors
    /// As [`ResponseBody::copy_to`].
    pub async fn copy_to_futures<W>(&mut self, out: &mut W) -> Result<u64, Error>
    where
        W: futures_io::AsyncWrite + Unpin + ?Sized,
    {
        self.inner.body_mut().copy_to_futures(out).await
    }
    /// Saves the rest of the body into the file at `path`, on any runtime
    /// (see [`ResponseBody::save_to`]).
    ///
    /// # Errors
    /// As [`ResponseBody::save_to`].
    pub async fn save_to(&mut self, path: impl AsRef<std::path::Path>) -> Result<u64, Error> {
        self.inner.body_mut().save_to(path).await
    }
    /// The body as a `Stream` of `Result<Bytes, Error>` (reqwest's
    /// `bytes_stream`; the body itself is that stream).
    #[must_use]
    pub fn bytes_stream(self) -> ResponseBody {
        self.inner.into_body()
    }
    /// The body as an `AsyncRead` (tokio's and futures-io's); see
    /// [`ResponseBody::into_reader`].
    #[must_use]
    pub fn into_reader(self) -> BodyReader {
        self.inner.into_body().into_reader()
    }
    /// Takes the connection over after `101 Switching Protocols`
    /// (WebSocket and other upgrades; see [`ResponseBody::upgrade`]).
    ///
    /// # Errors
    /// [`ErrorKind::Upgrade`](switchyard_common::ErrorKind::Upgrade) naming
    /// the status when it is not `101`.
    pub fn upgrade(self) -> Result<crate::Upgraded, Error> {
        ResponseExt::upgrade(self.inner)
    }
    /// The call's id, as listeners see it (`None` for a response built by hand).
    #[must_use]
    pub fn call_id(&self) -> Option<CallId> {
        ResponseExt::call_id(&self.inner)
    }
    /// The id of the connection that carried it.
    #[must_use]
    pub fn connection_id(&self) -> Option<ConnectionId> {
        ResponseExt::connection_id(&self.inner)
    }
    /// How the pool found that connection: `New` (connected for this call),
    /// `Pooled`, `Shared` (an HTTP/2 connection with other streams) or
    /// `Coalesced` (an HTTP/2 connection to another name).
    #[must_use]
    pub fn connection_source(&self) -> Option<switchyard_core::Source> {
        ResponseExt::connection_source(&self.inner)
    }
}

/// For code written against the trait (the inherent methods come first).
impl ResponseExt for Response {
    fn error_for_status(self) -> Result<Self, Error> {
        Response::error_for_status(self)
    }
    fn error_for_status_ref(&self) -> Result<&Self, Error> {
        Response::error_for_status_ref(self)
    }
    async fn text(self) -> Result<String, Error> {
        Response::text(self).await
    }
    async fn bytes(self) -> Result<Bytes, Error> {
        Response::bytes(self).await
    }
    #[cfg(feature = "json")]
    async fn json<T: serde::de::DeserializeOwned + Send>(self) -> Result<T, Error> {
        Response::json(self).await
    }
    fn upgrade(self) -> Result<crate::Upgraded, Error> {
        Response::upgrade(self)
    }
    fn url(&self) -> &http::Uri {
        Response::url(self)
    }
    fn call_id(&self) -> Option<CallId> {
        Response::call_id(self)
    }
    fn connection_id(&self) -> Option<ConnectionId> {
        Response::connection_id(self)
    }
    fn connection_source(&self) -> Option<switchyard_core::Source> {
        Response::connection_source(self)
    }
}
