//! The request and response surface every adapter shares, written once: the
//! request builder ([`RequestBuilder`], generic over how a client sends), what a
//! request body is ([`BodyKind`]), and what every response body does around its
//! chunks ([`BodyLedger`]: counting, ending the call for listeners exactly once;
//! [`Collector`]: gathering a whole body without copying a single chunk).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use switchyard_core::{CallId, Instant};

use crate::{BodyError, Error, RequestOptions};

/// A client a [`RequestBuilder`] builds requests for: its request body type.
/// It sends them as [`SendAsync`] (the async adapters) or [`SendBlocking`].
pub trait Sender: Clone {
    /// The adapter's request body.
    type Body: Default;
}

/// An async client's send: a future of the response.
pub trait SendAsync: Sender + 'static {
    /// What a call answers.
    type Response;
    /// Sends `request`, or fails at once with its building error.
    fn send_request(
        self,
        request: Result<http::Request<Self::Body>, Error>,
    ) -> impl std::future::Future<Output = Result<Self::Response, Error>> + Send + 'static;
}

/// A blocking client's send: the response, once its head has arrived.
pub trait SendBlocking: Sender {
    /// What a call answers.
    type Response;
    /// Sends `request`.
    ///
    /// # Errors
    /// How the call failed.
    fn send_request(&self, request: http::Request<Self::Body>) -> Result<Self::Response, Error>;
}

/// A [`RequestBuilder`] whose `send` returns a future ([`SendAsync`]).
#[derive(Debug)]
pub enum Async {}

/// A [`RequestBuilder`] whose `send` blocks ([`SendBlocking`]).
#[derive(Debug)]
pub enum Blocking {}

/// Anything a request's URL can be given as: `&str`, `String`, `&String`,
/// [`http::Uri`] (and `&Uri`). Like `TryInto<Uri>`, except that a URL that
/// does not parse, or has no scheme, is an
/// [`ErrorKind::InvalidUrl`](crate::ErrorKind::InvalidUrl) that names it.
///
/// ```
/// # use switchyard_common::IntoUri;
/// assert_eq!("https://example.com/x".into_uri().unwrap().path(), "/x");
/// let e = "example.com/x".into_uri().unwrap_err();
/// assert_eq!(format!("{e:#}"), "invalid URL \"example.com/x\": the URL has no scheme (expected http:// or https://)");
/// ```
pub trait IntoUri {
    /// The URL as an [`http::Uri`].
    ///
    /// # Errors
    /// An invalid-URL error naming the URL (any password redacted).
    fn into_uri(self) -> Result<http::Uri, Error>;
}

impl IntoUri for &str {
    fn into_uri(self) -> Result<http::Uri, Error> {
        use switchyard_core::AddressError;
        // `example.com:8080` parses as an authority, `example.com/x` not at
        // all, `/x` as a path: none is a URL a client can call.
        if !self.contains("://") {
            return Err(Error::invalid_url(self, Some(AddressError::MissingScheme)));
        }
        let uri = http::Uri::try_from(self)
            .map_err(|e| Error::invalid_url(self, Some(AddressError::Malformed { reason: e.to_string() })))?;
        if uri.scheme().is_none() {
            return Err(Error::invalid_url(self, Some(AddressError::MissingScheme)));
        }
        Ok(uri)
    }
}

impl IntoUri for String {
    fn into_uri(self) -> Result<http::Uri, Error> {
        self.as_str().into_uri()
    }
}

impl IntoUri for &String {
    fn into_uri(self) -> Result<http::Uri, Error> {
        self.as_str().into_uri()
    }
}

impl IntoUri for http::Uri {
    fn into_uri(self) -> Result<http::Uri, Error> {
        Ok(self)
    }
}

impl IntoUri for &http::Uri {
    fn into_uri(self) -> Result<http::Uri, Error> {
        Ok(self.clone())
    }
}

/// A request being built: from a client's `get`, `post`, …, `request`.
/// Finish with [`RequestBuilder::send`]. The first error (a bad URL, a header
/// that is not a valid name or value) is kept and returned by `send`, so a
/// chain of calls needs no `?` until the end.
///
/// ```
/// # use switchyard_common::{Blocking, RequestBuilder, SendBlocking, Sender, Error};
/// # #[derive(Clone)] struct Echo;
/// # impl Sender for Echo { type Body = (); }
/// # impl SendBlocking for Echo { type Response = http::Request<()>;
/// #   fn send_request(&self, r: http::Request<()>) -> Result<Self::Response, Error> { Ok(r) } }
/// let request = RequestBuilder::<_, Blocking>::new(Echo, http::Method::POST, "https://example.com/")
///     .header(http::header::CONTENT_TYPE, "text/plain")
///     .header("x-trace", "abc")
///     .send()
///     .unwrap();
/// assert_eq!(request.headers()["content-type"], "text/plain");
/// ```
#[must_use]
pub struct RequestBuilder<C: Sender, M> {
    client: C,
    request: Result<http::Request<()>, Error>,
    body: C::Body,
    options: RequestOptions,
    mode: PhantomData<fn() -> M>,
}

impl<C: Sender, M> std::fmt::Debug for RequestBuilder<C, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("RequestBuilder");
        if let Ok(r) = &self.request {
            d.field("method", r.method()).field("uri", &crate::redacted(r.uri()));
        }
        d.field("options", &self.options).finish_non_exhaustive()
    }
}

/// A header that could not be made (for the request builders).
fn header_error(e: impl Into<http::Error>) -> Error {
    Error::invalid_request(format!("invalid header: {}", e.into()))
}

impl<C: Sender, M> RequestBuilder<C, M> {
    /// A `method` request to `uri` on `client`.
    pub fn new(client: C, method: http::Method, uri: impl crate::IntoUri) -> Self {
        let request = uri.into_uri().map(|uri| {
            let mut r = http::Request::new(());
            *r.method_mut() = method;
            *r.uri_mut() = uri;
            r
        });
        Self {
            client,
            request,
            body: C::Body::default(),
            options: crate::RequestOptions::default(),
            mode: PhantomData,
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut http::Request<()>) -> Result<(), crate::Error>) -> Self {
        if let Ok(r) = &mut self.request {
            if let Err(e) = f(r) {
                self.request = Err(e);
            }
        }
        self
    }

    /// Adds a header field (appended: a name given twice is sent twice).
    /// Takes what `http` converts: `&str`, `String`, `HeaderName` constants
    /// such as `http::header::CONTENT_TYPE`, `HeaderValue`, …
    pub fn header<K, V>(self, name: K, value: V) -> Self
    where
        http::HeaderName: TryFrom<K>,
        <http::HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        http::HeaderValue: TryFrom<V>,
        <http::HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.edit(|r| {
            let name = http::HeaderName::try_from(name).map_err(header_error)?;
            let value = http::HeaderValue::try_from(value).map_err(header_error)?;
            r.headers_mut().append(name, value);
            Ok(())
        })
    }

    /// Adds every field of `headers` (appended, as [`RequestBuilder::header`]).
    pub fn headers(self, headers: http::HeaderMap) -> Self {
        self.edit(|r| {
            let mut last = None;
            for (name, value) in headers {
                if let Some(n) = name {
                    last = Some(n);
                }
                if let Some(n) = &last {
                    r.headers_mut().append(n.clone(), value);
                }
            }
            Ok(())
        })
    }

    /// `Authorization: Bearer <token>` (marked sensitive: never logged).
    pub fn bearer_auth(self, token: impl std::fmt::Display) -> Self {
        self.edit(|r| {
            let mut value = http::HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|_| crate::Error::invalid_request("the bearer token cannot form a header value"))?;
            value.set_sensitive(true);
            r.headers_mut().insert(http::header::AUTHORIZATION, value);
            Ok(())
        })
    }

    /// `Authorization: Basic …` from a user name and an optional password
    /// (marked sensitive: never logged).
    pub fn basic_auth(self, user: impl std::fmt::Display, password: Option<impl std::fmt::Display>) -> Self {
        use crate::__private::base64::Engine as _;
        self.edit(|r| {
            let plain = match password {
                Some(p) => format!("{user}:{p}"),
                None => format!("{user}:"),
            };
            let encoded = crate::__private::base64::engine::general_purpose::STANDARD.encode(plain);
            let mut value = http::HeaderValue::try_from(format!("Basic {encoded}"))
                .map_err(|_| crate::Error::invalid_request("the credentials cannot form a header value"))?;
            value.set_sensitive(true);
            r.headers_mut().insert(http::header::AUTHORIZATION, value);
            Ok(())
        })
    }

    /// Appends `query` to the URL's query string, form-encoded (feature
    /// `query`): a struct, a map, or a slice of pairs.
    ///
    /// # Errors (at `send`)
    /// A value serde cannot encode as a query string.
    #[cfg(feature = "query")]
    pub fn query<T: crate::__private::serde::Serialize + ?Sized>(self, query: &T) -> Self {
        self.edit(|r| {
            let encoded = crate::__private::serde_urlencoded::to_string(query)
                .map_err(|e| crate::Error::invalid_request(format!("the query cannot be encoded: {e}")))?;
            if encoded.is_empty() {
                return Ok(());
            }
            let uri = r.uri().clone();
            let mut parts = uri.into_parts();
            let pq = parts.path_and_query.as_ref().map_or("/", |pq| pq.as_str());
            let joined = if pq.contains('?') { format!("{pq}&{encoded}") } else { format!("{pq}?{encoded}") };
            parts.path_and_query =
                Some(joined.parse().map_err(|e| {
                    crate::Error::invalid_request(format!("the query cannot be encoded: {e}"))
                })?);
            *r.uri_mut() = http::Uri::from_parts(parts)
                .map_err(|e| crate::Error::invalid_request(format!("the query cannot be encoded: {e}")))?;
            Ok(())
        })
    }

    /// Without the `query` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "query"))]
    #[doc(hidden)]
    pub fn query<T: crate::__private::NeedsQueryFeature + ?Sized>(self, query: &T) -> Self {
        let _ = query;
        self
    }

    /// Without the `json` feature: a compile error saying to turn it on.
    #[cfg(not(feature = "json"))]
    #[doc(hidden)]
    pub fn json<T: crate::__private::NeedsJsonFeature + ?Sized>(self, value: &T) -> Self {
        let _ = value;
        self
    }

    /// Sends `value` as JSON (feature `json`): the body, and
    /// `Content-Type: application/json` unless one is set.
    ///
    /// # Errors (at `send`)
    /// A value serde_json cannot serialize.
    #[cfg(feature = "json")]
    pub fn json<T: crate::__private::serde::Serialize + ?Sized>(mut self, value: &T) -> Self
    where
        C::Body: From<Vec<u8>>,
    {
        match crate::__private::serde_json::to_vec(value) {
            Ok(bytes) => {
                self.body = C::Body::from(bytes);
                self.edit(|r| {
                    r.headers_mut()
                        .entry(http::header::CONTENT_TYPE)
                        .or_insert(http::HeaderValue::from_static("application/json"));
                    Ok(())
                })
            }
            Err(e) => {
                self.request =
                    Err(crate::Error::invalid_request(format!("the JSON body cannot be serialized: {e}")));
                self
            }
        }
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<C::Body>) -> Self {
        self.body = body.into();
        self
    }
    /// Asks for a connection no one else will use.
    pub fn exclusive(mut self) -> Self {
        self.options.exclusive = true;
        self
    }
    /// Sends this request to a Unix-domain socket (instead of the
    /// client's `unix_socket`, or TCP); see the client builder's
    /// `unix_socket`. Connections are pooled per socket path.
    pub fn unix_socket(mut self, path: impl AsRef<crate::__private::Path>) -> Self {
        if let Ok(request) = &mut self.request {
            let path = crate::__private::Arc::from(path.as_ref());
            request.extensions_mut().insert(crate::UnixSocket(path));
        }
        self
    }
    /// Marks a non-idempotent request as safe to send twice.
    pub fn retryable(mut self) -> Self {
        self.options.retryable = true;
        self
    }
    /// This call's timeout: the whole call, its response body included
    /// (instead of the client's `timeout`).
    pub fn timeout(mut self, d: crate::__private::Duration) -> Self {
        self.options.timeout = Some(d);
        self
    }
    /// This call's bound until its response head (instead of the client's
    /// `head_timeout`).
    pub fn head_timeout(mut self, d: crate::__private::Duration) -> Self {
        self.options.head_timeout = Some(d);
        self
    }
    /// This call's body timeout: the response body must end within `d` of its head.
    pub fn body_timeout(mut self, d: crate::__private::Duration) -> Self {
        self.options.body_timeout = Some(d);
        self
    }
    /// The request as built so far, with its body (for `send` on a client or
    /// a tower service).
    ///
    /// # Errors
    /// The first error met while building (a bad URL or header).
    pub fn build(self) -> Result<http::Request<C::Body>, crate::Error> {
        self.finish().1
    }

    /// A builder that fails with `error` when sent (a server handle refusing
    /// a URL to another server, say).
    pub fn failed(client: C, error: Error) -> Self {
        RequestBuilder {
            client,
            request: Err(error),
            body: C::Body::default(),
            options: RequestOptions::default(),
            mode: PhantomData,
        }
    }

    /// The client and the request as built so far.
    #[inline]
    fn finish(self) -> (C, Result<http::Request<C::Body>, Error>) {
        let RequestBuilder { client, request, body, options, .. } = self;
        let request = request.map(|request| {
            let (mut parts, ()) = request.into_parts();
            // The defaults travel as no extension at all: inserting one costs
            // the request its extension map (three allocations), and the
            // engine reads a missing one as the defaults.
            if options != RequestOptions::default() {
                parts.extensions.insert(options);
            }
            http::Request::from_parts(parts, body)
        });
        (client, request)
    }
}

impl<C: SendAsync> RequestBuilder<C, Async> {
    /// Sends the request: `.send().await`.
    ///
    /// # Errors
    /// The first error met while building, or how the call failed.
    pub fn send(self) -> impl std::future::Future<Output = Result<C::Response, Error>> + Send + 'static {
        let (client, request) = self.finish();
        client.send_request(request)
    }
}

impl<C: SendBlocking> RequestBuilder<C, Blocking> {
    /// Sends the request and waits for the response head.
    ///
    /// # Errors
    /// The first error met while building, or how the call failed.
    pub fn send(self) -> Result<C::Response, Error> {
        let (client, request) = self.finish();
        client.send_request(request?)
    }
}

/// What a request body is, whatever the adapter streams it from (`S`): none,
/// a buffer (replayable, so a retry may send it again), or a stream (sent once,
/// chunked, never replayed).
#[derive(Debug, Default)]
pub enum BodyKind<S> {
    /// No body.
    #[default]
    Empty,
    /// A buffer.
    Full(Bytes),
    /// A stream of unknown length.
    Stream(S),
}

impl<S> BodyKind<S> {
    /// A buffer (empty: no body).
    pub fn full(b: Bytes) -> Self {
        if b.is_empty() {
            BodyKind::Empty
        } else {
            BodyKind::Full(b)
        }
    }
    /// The length, when known in advance.
    pub fn len(&self) -> Option<u64> {
        match self {
            BodyKind::Empty => Some(0),
            BodyKind::Full(b) => Some(b.len() as u64),
            BodyKind::Stream(_) => None,
        }
    }
    /// Whether it is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
    /// Whether it can be sent again on a retry.
    pub fn is_replayable(&self) -> bool {
        !matches!(self, BodyKind::Stream(_))
    }
}

/// Where a response body tells listeners how its call ended.
pub trait Notes: Send + Sync {
    /// The client's clock.
    fn now(&self) -> Instant;
    /// Delivers one listener call, in order.
    fn note(&self, note: crate::Note);
    /// Whether anyone listens (when not, notes are not even built).
    fn listening(&self) -> bool;
    /// Returns once every note queued so far has reached the listener (see
    /// [`Hub::flush`](crate::Hub::flush)).
    fn flush(&self);
    /// Whether calls' `tracing` spans are kept ([`Hub::trace_call`](crate::Hub::trace_call)).
    fn tracing_calls(&self) -> bool {
        false
    }
    /// The call is over (its span is no longer kept).
    fn call_over(&self, call: CallId) {
        let _ = call;
    }
    /// Where the call's `debug` events go (the adapter's target).
    fn log_sites(&self) -> &'static crate::LogSites {
        &crate::LogSites::DEFAULT
    }
}

impl<T: crate::engine::EngineHost> Notes for T {
    fn flush(&self) {
        self.hub().flush();
    }
    fn now(&self) -> Instant {
        self.hub().now()
    }
    fn note(&self, note: crate::Note) {
        self.hub().emit(note);
    }
    fn listening(&self) -> bool {
        self.hub().is_listening()
    }
    fn tracing_calls(&self) -> bool {
        self.hub().is_tracing_calls()
    }
    fn call_over(&self, call: CallId) {
        self.hub().untrace_call(call);
    }
    fn log_sites(&self) -> &'static crate::LogSites {
        self.hub().log_sites()
    }
}

/// What every response body does around its chunks: counts them, and ends its
/// call for listeners exactly once — `response_body_end` then `call_end` at the
/// end, `call_failed` on a failure, `call_end` when dropped early (declare it
/// after the field holding the connection, so the connection is released
/// first).
pub struct BodyLedger {
    received: u64,
    ended: bool,
    owner: Option<(Arc<dyn Notes>, CallId)>,
    /// The request's URL, for the body's errors.
    uri: Option<http::Uri>,
    /// The call's `tracing` span (the one current when `send` returned).
    span: tracing::Span,
    /// Where its end is logged.
    sites: &'static crate::LogSites,
}

impl std::fmt::Debug for BodyLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyLedger").field("received", &self.received).field("ended", &self.ended).finish()
    }
}

impl BodyLedger {
    /// A body still to be read (`ended: false`) or one with nothing to read.
    #[must_use]
    pub fn new(ended: bool) -> BodyLedger {
        BodyLedger {
            received: 0,
            ended,
            owner: None,
            uri: None,
            span: tracing::Span::none(),
            sites: &crate::LogSites::DEFAULT,
        }
    }

    /// The body ends `call`: its end is the call's end (for listeners: with
    /// none, there is nothing to tell). A body still to be read tells
    /// `response_body_start` now. Called as `send` returns: every event of the
    /// call so far has reached the listener when this returns.
    pub fn own(&mut self, notes: Arc<dyn Notes>, call: CallId, uri: &http::Uri) {
        self.uri = Some(uri.clone());
        self.span = tracing::Span::current();
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            // Only read when `debug` may be logged (its end's event).
            self.sites = notes.log_sites();
        }
        if notes.listening() {
            if !self.ended {
                let at = notes.now();
                notes.note(Box::new(move |l| l.response_body_start(call, at)));
            }
            notes.flush();
            self.owner = Some((notes, call));
        } else if notes.tracing_calls() {
            // No listener, but the call's span is kept until the body ends.
            self.owner = Some((notes, call));
        }
    }

    /// The URL whose response this body is (the last hop's, after redirects);
    /// `None` for a body built by hand.
    #[must_use]
    pub fn uri(&self) -> Option<&http::Uri> {
        self.uri.as_ref()
    }

    /// Sets the URL this body answers (a layer's body over a connection's).
    pub fn set_uri(&mut self, uri: &http::Uri) {
        self.uri = Some(uri.clone());
    }

    /// `e`, about this body's request URL (when known).
    #[must_use]
    pub fn about(&self, e: Error) -> Error {
        match &self.uri {
            Some(uri) => e.with_url(&uri.to_string()),
            None => e,
        }
    }

    /// `error_for_status`: an [`ErrorKind::Status`](crate::ErrorKind::Status)
    /// error naming this body's URL for a client (4xx) or server (5xx) error.
    ///
    /// # Errors
    /// A 4xx or 5xx `status`.
    pub fn check_status(&self, status: http::StatusCode) -> Result<(), Error> {
        if status.is_client_error() || status.is_server_error() {
            return Err(self.about(Error::status(status)));
        }
        Ok(())
    }

    /// `upgrade()`'s first check: an [`ErrorKind::Upgrade`](crate::ErrorKind::Upgrade)
    /// error naming the status and this body's URL unless it is `101
    /// Switching Protocols`.
    ///
    /// # Errors
    /// Any status but 101.
    pub fn check_switched(&self, status: http::StatusCode) -> Result<(), Error> {
        if status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Ok(());
        }
        let why = format!("the server answered {status}, not 101 Switching Protocols");
        Err(self.about(Error::from(crate::ErrorKind::Upgrade(why))))
    }

    /// Whether the body has ended (read to its end, or failed).
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Accounts for the next answer of the body underneath; `release` gives
    /// its connection back at the end (after `response_body_end`, before
    /// `call_end`).
    ///
    /// # Errors
    /// [`ErrorKind::Body`](crate::ErrorKind::Body) when the body failed.
    pub fn settle(
        &mut self,
        next: Result<Option<Bytes>, BodyError>,
        release: impl FnOnce(),
    ) -> Result<Option<Bytes>, Error> {
        match next {
            Ok(Some(b)) => {
                self.received += b.len() as u64;
                Ok(Some(b))
            }
            Ok(None) => {
                self.ended = true;
                if let Some((notes, call)) = &self.owner {
                    let (at, call, n) = (notes.now(), *call, self.received);
                    notes.note(Box::new(move |l| l.response_body_end(call, n, at)));
                }
                release();
                (self.sites.call_end)(&self.span, self.received);
                if let Some((notes, call)) = self.owner.take() {
                    notes.call_over(call);
                    let at = notes.now();
                    notes.note(Box::new(move |l| l.call_end(call, at)));
                    // Every event of the call is heard before its end is handed out.
                    notes.flush();
                }
                Ok(None)
            }
            Err(e) => {
                self.ended = true;
                let mut e = Error::body(e);
                if let Some(uri) = &self.uri {
                    e = e.with_url(&uri.to_string());
                }
                if let Some((notes, call)) = self.owner.take() {
                    notes.call_over(call);
                    let (at, err) = (notes.now(), e.clone());
                    notes.note(Box::new(move |l| l.call_failed(call, &err, at)));
                    notes.flush();
                }
                Err(e)
            }
        }
    }
}

impl Drop for BodyLedger {
    /// Dropped before the end: the call is over either way.
    fn drop(&mut self) {
        if let Some((notes, call)) = self.owner.take() {
            // A body whose end was known without a last poll (its length
            // reached) ends here: its span hears the end all the same.
            (self.sites.call_end)(&self.span, self.received);
            notes.call_over(call);
            let at = notes.now();
            notes.note(Box::new(move |l| l.call_end(call, at)));
        }
    }
}

/// Gathers a whole body: a body of one chunk is returned as it is, without a
/// copy.
#[derive(Debug, Default)]
pub struct Collector {
    single: Option<Bytes>,
    all: BytesMut,
}

impl Collector {
    /// Adds the next chunk.
    pub fn push(&mut self, chunk: Bytes) {
        match self.single.take() {
            None if self.all.is_empty() => self.single = Some(chunk),
            Some(first) => {
                self.all.extend_from_slice(&first);
                self.all.extend_from_slice(&chunk);
            }
            None => self.all.extend_from_slice(&chunk),
        }
    }

    /// Everything pushed, in order.
    #[must_use]
    pub fn finish(self) -> Bytes {
        self.single.unwrap_or_else(|| self.all.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_chunk_is_not_copied_and_several_are_joined() {
        let one = Bytes::from_static(b"abc");
        let mut c = Collector::default();
        c.push(one.clone());
        assert_eq!(c.finish().as_ptr(), one.as_ptr());
        let mut c = Collector::default();
        for part in ["a", "bc", "", "d"] {
            c.push(Bytes::from(part));
        }
        assert_eq!(c.finish(), Bytes::from_static(b"abcd"));
        assert_eq!(Collector::default().finish(), Bytes::new());
    }

    #[test]
    fn body_kinds_know_their_length_and_replayability() {
        let k: BodyKind<()> = BodyKind::full(Bytes::new());
        assert!(matches!(k, BodyKind::Empty) && k.is_empty() && k.is_replayable());
        let k: BodyKind<()> = BodyKind::full(Bytes::from_static(b"xy"));
        assert_eq!((k.len(), k.is_replayable()), (Some(2), true));
        let k = BodyKind::Stream(());
        assert_eq!((k.len(), k.is_replayable()), (None, false));
    }
}
