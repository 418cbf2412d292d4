//! [`ResponseBody`]: a response body read in `Bytes` chunks or through
//! [`std::io::Read`]. Reading it to the end returns the connection to the pool;
//! dropping it early drains a little (up to 64 KiB or 100 ms) or closes the
//! connection — it is never leaked.

use std::io;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use switchyard_common::{BodyLedger, Collector, Error};
use switchyard_core::CallId;

use crate::h1::H1Body;
use crate::h2::H2Body;

/// The protocol's body reader.
enum Inner {
    H1(H1Body),
    H2(H2Body),
}

impl Inner {
    fn chunk(&mut self) -> Result<Option<Bytes>, switchyard_common::BodyError> {
        match self {
            Inner::H1(b) => b.chunk(),
            Inner::H2(b) => b.chunk(),
        }
    }
    fn finish(&mut self) {
        match self {
            Inner::H1(b) => b.0.finish(),
            Inner::H2(b) => b.finish(),
        }
    }
    fn trailers(&self) -> Option<&http::HeaderMap> {
        match self {
            Inner::H1(b) => b.0.trailers.as_ref(),
            Inner::H2(b) => b.trailers.as_ref(),
        }
    }
    fn is_done(&self) -> bool {
        match self {
            Inner::H1(b) => b.0.is_done(),
            Inner::H2(b) => b.is_done(),
        }
    }
}
use crate::shared::Shared;

/// A streaming response body.
///
/// ```no_run
/// # fn run(client: switchyard_std::Client) -> Result<(), switchyard_std::Error> {
/// let mut response = client.get("https://example.com/big").send()?;
/// while let Some(chunk) = response.body_mut().chunk()? {
///     println!("{} bytes", chunk.len());
/// }
/// // Or as a reader:
/// let mut response = client.get("https://example.com/big").send()?;
/// std::io::copy(response.body_mut(), &mut std::io::sink()).unwrap();
/// # Ok(()) }
/// ```
pub struct ResponseBody {
    // Dropped first: the connection is released before the call ends.
    inner: Option<Box<Inner>>,
    ledger: BodyLedger,
    /// What `Read` has not handed out yet of the last chunk.
    pending: Bytes,
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
    pub(crate) fn h1(body: H1Body) -> ResponseBody {
        ResponseBody {
            inner: Some(Box::new(Inner::H1(body))),
            ledger: BodyLedger::new(false),
            pending: Bytes::new(),
        }
    }
    pub(crate) fn h2(body: H2Body) -> ResponseBody {
        ResponseBody {
            inner: Some(Box::new(Inner::H2(body))),
            ledger: BodyLedger::new(false),
            pending: Bytes::new(),
        }
    }
    pub(crate) fn set_owner(&mut self, shared: Arc<Shared>, call: CallId, uri: &http::Uri) {
        self.ledger.own(shared, call, uri);
    }

    /// An empty body (for responses built by hand).
    #[must_use]
    pub fn empty() -> ResponseBody {
        ResponseBody { inner: None, ledger: BodyLedger::new(true), pending: Bytes::new() }
    }

    /// The next chunk, or `None` at the end (the connection is released then).
    ///
    /// # Errors
    /// [`ErrorKind::Body`](switchyard_common::ErrorKind::Body): the connection failed, timed out, or broke the framing.
    pub fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        if !self.pending.is_empty() {
            return Ok(Some(std::mem::take(&mut self.pending)));
        }
        if self.ledger.is_ended() {
            return Ok(None);
        }
        let next = self.inner.as_mut().map_or(Ok(None), |b| b.chunk());
        let inner = &mut self.inner;
        self.ledger.settle(next, || inner.as_mut().map_or((), |b| b.finish()))
    }

    /// Reads the whole body.
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn bytes(&mut self) -> Result<Bytes, Error> {
        let mut all = Collector::default();
        while let Some(chunk) = self.chunk()? {
            all.push(chunk);
        }
        Ok(all.finish())
    }

    /// Reads the whole body (the same as [`ResponseBody::bytes`]).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn collect(&mut self) -> Result<Bytes, Error> {
        self.bytes()
    }

    /// Reads the whole body as text (invalid UTF-8 replaced).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn text(&mut self) -> Result<String, Error> {
        let bytes = self.bytes()?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads the whole body as JSON (feature `json`).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`], or [`ErrorKind::Decode`](switchyard_common::ErrorKind::Decode).
    #[cfg(feature = "json")]
    pub fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, Error> {
        let bytes = self.bytes()?;
        switchyard_common::decode_json(&bytes).map_err(|e| self.ledger.about(e))
    }

    /// Trailer fields, once the body has ended (chunked HTTP/1.1).
    #[must_use]
    pub fn trailers(&self) -> Option<&http::HeaderMap> {
        self.inner.as_ref().and_then(|b| b.trailers())
    }

    /// Whether the body has been read to the end (its connection released).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.pending.is_empty() && (self.ledger.is_ended() || self.inner.as_ref().is_none_or(|b| b.is_done()))
    }
}

impl ResponseBody {
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
        let why = match self.inner.as_deref_mut() {
            Some(Inner::H1(b)) => match b.take_upgraded() {
                Some(upgraded) => {
                    // The call ends with the switch: the body had no bytes.
                    let _ = self.ledger.settle(Ok(None), || {});
                    return Ok(upgraded);
                }
                None if self.ledger.is_ended() || b.0.is_done() => "its body was already read",
                None => "the server did not switch protocols (no 101 Switching Protocols)",
            },
            Some(Inner::H2(_)) => "it came over HTTP/2, which has no protocol switch",
            None => "it was not received on a connection",
        };
        Err(self.ledger.about(Error::from(switchyard_common::ErrorKind::Upgrade(why.into()))))
    }
}

impl io::Read for ResponseBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() {
            match self.chunk() {
                Ok(Some(chunk)) => self.pending = chunk,
                Ok(None) => return Ok(0),
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.advance(n);
        Ok(n)
    }
}

/// What a response offers beyond `http::Response`: the body read whole
/// (`text`, `bytes`, `json` with the `json` feature), `error_for_status`, and
/// the call's ids. `use switchyard_std::ResponseExt;`
///
/// ```no_run
/// # fn run(client: switchyard_std::Client) -> Result<(), switchyard_std::Error> {
/// use switchyard_std::ResponseExt;
/// let text = client.get("https://example.com/").send()?.error_for_status()?.text()?;
/// # Ok(()) }
/// ```
pub trait ResponseExt: Sized {
    /// The response, unless its status is a client (4xx) or server (5xx)
    /// error: then an [`ErrorKind::Status`](switchyard_common::ErrorKind::Status)
    /// error naming the URL.
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
    fn json<T: switchyard_common::__private::NeedsJsonFeature>(self) -> Result<T, Error> {
        drop(self);
        Err(Error::config("the json feature is off"))
    }
    /// The whole body as text (invalid UTF-8 replaced).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    fn text(self) -> Result<String, Error>;
    /// The whole body.
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    fn bytes(self) -> Result<Bytes, Error>;
    /// The whole body as JSON (feature `json`).
    ///
    /// # Errors
    /// As [`ResponseBody::json`].
    #[cfg(feature = "json")]
    fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, Error>;
    /// Takes the connection over after `101 Switching Protocols`
    /// (WebSocket and other upgrades; see [`ResponseBody::upgrade`]).
    ///
    /// # Errors
    /// [`ErrorKind::Upgrade`](switchyard_common::ErrorKind::Upgrade) naming
    /// the status when it is not `101`.
    fn upgrade(self) -> Result<crate::Upgraded, Error>;
    /// The URL this response answers (a response built by hand: `/`).
    fn url(&self) -> &http::Uri;
    /// The call's id, as listeners see it (`None` for a response built by hand).
    fn call_id(&self) -> Option<CallId>;
    /// The id of the connection that carried it.
    fn connection_id(&self) -> Option<switchyard_core::ConnectionId>;
    /// How the pool found that connection: `New` (connected for this call) or
    /// `Pooled`.
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
    fn text(mut self) -> Result<String, Error> {
        self.body_mut().text()
    }
    fn bytes(mut self) -> Result<Bytes, Error> {
        self.body_mut().bytes()
    }
    #[cfg(feature = "json")]
    fn json<T: serde::de::DeserializeOwned>(mut self) -> Result<T, Error> {
        self.body_mut().json()
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
    fn connection_id(&self) -> Option<switchyard_core::ConnectionId> {
        self.extensions().get::<switchyard_common::Carrier>().map(|c| c.connection)
    }
    fn connection_source(&self) -> Option<switchyard_core::Source> {
        self.extensions().get::<switchyard_common::Carrier>().map(|c| c.source)
    }
}

/// A response, as `send` returns it: the status and head fields, and the
/// body read as a whole ([`text`](Response::text), [`bytes`](Response::bytes),
/// [`json`](Response::json)), chunk by chunk ([`chunk`](Response::chunk)) or
/// through [`std::io::Read`] (the response itself reads its body). reqwest's
/// blocking methods, with no trait to import. [`into_http`](Response::into_http)
/// (or `From`) gives the `http::Response` underneath.
///
/// ```no_run
/// # fn run(client: switchyard_std::Client) -> Result<(), switchyard_std::Error> {
/// let response = client.get("https://example.com/").send()?.error_for_status()?;
/// println!("{} from {}", response.status(), response.url());
/// let text = response.text()?;
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

impl io::Read for Response {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.body_mut().read(buf)
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
    /// The `Content-Length` the server declared, if any.
    #[must_use]
    pub fn content_length(&self) -> Option<u64> {
        self.inner.headers().get(http::header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
    }
    /// The URL this response answers (a response built by hand: `/`).
    #[must_use]
    pub fn url(&self) -> &http::Uri {
        ResponseExt::url(&self.inner)
    }
    /// The extensions.
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
    /// The body, to read in place.
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
    /// error naming the URL.
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    pub fn error_for_status(self) -> Result<Response, Error> {
        self.inner.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    /// As [`error_for_status`](Self::error_for_status), by reference.
    ///
    /// # Errors
    /// A 4xx or 5xx status.
    pub fn error_for_status_ref(&self) -> Result<&Response, Error> {
        self.inner.body().ledger.check_status(self.status())?;
        Ok(self)
    }
    /// The next chunk of the body, or `None` at the end.
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        self.inner.body_mut().chunk()
    }
    /// The whole body.
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn bytes(mut self) -> Result<Bytes, Error> {
        self.inner.body_mut().bytes()
    }
    /// The whole body as text (invalid UTF-8 replaced).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn text(mut self) -> Result<String, Error> {
        self.inner.body_mut().text()
    }
    /// The whole body as JSON (feature `json`).
    ///
    /// # Errors
    /// As [`ResponseBody::json`].
    #[cfg(feature = "json")]
    pub fn json<T: serde::de::DeserializeOwned>(mut self) -> Result<T, Error> {
        self.inner.body_mut().json()
    }
    /// Without the `json` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "json"))]
    #[doc(hidden)]
    pub fn json<T: switchyard_common::__private::NeedsJsonFeature>(self) -> Result<T, Error> {
        drop(self);
        Err(Error::config("the json feature is off"))
    }
    /// Copies the rest of the body into `out` (a file, a socket, a
    /// `Vec<u8>`) and returns how many bytes were written; each chunk is
    /// written as it arrives, with no buffer of its own in between (a
    /// `std::fs::File` takes chunks as they come at full speed: each write
    /// is one system call).
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`]; the writer's failure is a
    /// [`BodyError::Sink`](switchyard_common::BodyError::Sink) (drop the
    /// response then: its connection closes).
    pub fn copy_to<W: io::Write + ?Sized>(&mut self, out: &mut W) -> Result<u64, Error> {
        let mut written = 0;
        while let Some(chunk) = self.chunk()? {
            out.write_all(&chunk).map_err(|e| self.sink_failed(e))?;
            written += chunk.len() as u64;
        }
        out.flush().map_err(|e| self.sink_failed(e))?;
        Ok(written)
    }
    /// Saves the rest of the body into the file at `path` (created, or
    /// truncated if it exists) and returns how many bytes were written. The
    /// file is written by a thread of its own while the body keeps arriving
    /// (the network never waits on the disk unless the disk is the slower).
    /// When the body fails midway the file holds what arrived (as `curl -o`
    /// leaves it).
    ///
    /// ```no_run
    /// let client = switchyard_std::Client::new()?;
    /// let mut response = client.get("http://127.0.0.1:8080/big.iso").send()?.error_for_status()?;
    /// let bytes = response.save_to("big.iso")?;
    /// println!("{bytes} bytes saved");
    /// # Ok::<(), switchyard_std::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`copy_to`](Response::copy_to); the file's failure (it cannot be
    /// created, the disk is full) is a
    /// [`BodyError::Sink`](switchyard_common::BodyError::Sink) naming the path.
    pub fn save_to(&mut self, path: impl AsRef<std::path::Path>) -> Result<u64, Error> {
        let path = path.as_ref().to_owned();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(16);
        let writer = std::thread::Builder::new().name("switchyard-save".into()).spawn(move || {
            use std::io::Write;
            let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
            let mut file = std::fs::File::create(&path).map_err(named)?;
            let mut written = 0u64;
            for bytes in rx {
                file.write_all(&bytes).map_err(named)?;
                written += bytes.len() as u64;
            }
            Ok::<u64, io::Error>(written)
        });
        let writer = writer.map_err(|e| self.sink_failed(e))?;
        // Chunks gathered into writes of up to 1 MiB: one hand-off per
        // batch, not per chunk.
        let mut batch = bytes::BytesMut::new();
        let mut outcome = Ok(());
        loop {
            let (chunk, end) = match self.chunk() {
                Ok(Some(chunk)) => (Some(chunk), false),
                Ok(None) => (None, true),
                Err(e) => {
                    outcome = Err(e);
                    (None, true)
                }
            };
            if let Some(chunk) = chunk {
                batch.extend_from_slice(&chunk);
            }
            // The writer gone: its failure comes back below.
            if (end || batch.len() >= 1 << 20)
                && !batch.is_empty()
                && tx.send(batch.split().freeze()).is_err()
            {
                break;
            }
            if end {
                break;
            }
        }
        drop(tx);
        let saved = writer.join().unwrap_or_else(|_| Err(io::Error::other("the file writer panicked")));
        outcome?;
        saved.map_err(|e| self.sink_failed(e))
    }
    fn sink_failed(&self, e: io::Error) -> Error {
        let e =
            Error::from(switchyard_common::ErrorKind::Body(switchyard_common::BodyError::Sink(Arc::new(e))));
        self.inner.body().ledger.about(e)
    }
    /// Takes the connection over after `101 Switching Protocols`
    /// (see [`ResponseBody::upgrade`]).
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
    pub fn connection_id(&self) -> Option<switchyard_core::ConnectionId> {
        ResponseExt::connection_id(&self.inner)
    }
    /// How the pool found that connection: `New` or `Pooled`.
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
    fn text(self) -> Result<String, Error> {
        Response::text(self)
    }
    fn bytes(self) -> Result<Bytes, Error> {
        Response::bytes(self)
    }
    #[cfg(feature = "json")]
    fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, Error> {
        Response::json(self)
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
    fn connection_id(&self) -> Option<switchyard_core::ConnectionId> {
        Response::connection_id(self)
    }
    fn connection_source(&self) -> Option<switchyard_core::Source> {
        Response::connection_source(self)
    }
}
