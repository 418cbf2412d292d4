//! The request and response surface every adapter shares, written once: the
//! request builder ([`RequestBuilder`], generic over how a client sends), what a
//! request body is ([`BodyKind`]), and what every response body does around its
//! chunks ([`BodyLedger`]: counting, ending the call for listeners exactly once;
//! [`Collector`]: gathering a whole body without copying a single chunk).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use switchyard_core::{CallId, Instant};

use crate::{BodyError, Error, RequestOptions};

/// How a client sends a built request: an async adapter returns a future, the
/// blocking one the response.
pub trait Sender: Clone {
    /// The adapter's request body.
    type Body: Default;
    /// What sending yields.
    type Output;
    /// Sends `request`.
    fn send_request(&self, request: http::Request<Self::Body>) -> Self::Output;
    /// What sending yields when the request could not even be built.
    fn refuse(error: Error) -> Self::Output;
}

/// A request being built: from a client's `get`, `post`, … Finish with
/// [`RequestBuilder::send`].
#[must_use]
pub struct RequestBuilder<C: Sender> {
    client: C,
    request: Result<http::request::Builder, Error>,
    body: C::Body,
    options: RequestOptions,
}

impl<C: Sender> std::fmt::Debug for RequestBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBuilder").field("options", &self.options).finish_non_exhaustive()
    }
}

impl<C: Sender> RequestBuilder<C> {
    /// A `method` request to `uri` on `client`.
    pub fn new(client: C, method: http::Method, uri: &str) -> Self {
        RequestBuilder {
            client,
            request: Ok(http::Request::builder().method(method).uri(uri)),
            body: C::Body::default(),
            options: RequestOptions::default(),
        }
    }
    /// Adds a header field.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.request = self.request.map(|b| b.header(name, value));
        self
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
    /// Marks a non-idempotent request as safe to send twice.
    pub fn retryable(mut self) -> Self {
        self.options.retryable = true;
        self
    }
    /// This call's timeout (until the response head).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.options.timeout = Some(d);
        self
    }
    /// This call's body timeout: the response body must end within `d` of its head.
    pub fn body_timeout(mut self, d: Duration) -> Self {
        self.options.body_timeout = Some(d);
        self
    }
    /// Sends the request (async adapters: `.send().await`).
    pub fn send(self) -> C::Output {
        let built =
            self.request.and_then(|b| b.body(self.body).map_err(|e| Error::InvalidRequest(e.to_string())));
        match built {
            Ok(mut request) => {
                request.extensions_mut().insert(self.options);
                self.client.send_request(request)
            }
            Err(e) => C::refuse(e),
        }
    }
}

/// The request constructors every client has (`get`, `post`, `put`, `delete`,
/// `head`), for an adapter's `impl` block; `$builder` is its request builder.
#[macro_export]
macro_rules! request_methods {
    ($builder:ty) => {
        /// A GET request.
        pub fn get(&self, uri: &str) -> $builder {
            $crate::RequestBuilder::new(self.clone(), $crate::__http::Method::GET, uri)
        }
        /// A POST request.
        pub fn post(&self, uri: &str) -> $builder {
            $crate::RequestBuilder::new(self.clone(), $crate::__http::Method::POST, uri)
        }
        /// A PUT request.
        pub fn put(&self, uri: &str) -> $builder {
            $crate::RequestBuilder::new(self.clone(), $crate::__http::Method::PUT, uri)
        }
        /// A DELETE request.
        pub fn delete(&self, uri: &str) -> $builder {
            $crate::RequestBuilder::new(self.clone(), $crate::__http::Method::DELETE, uri)
        }
        /// A HEAD request.
        pub fn head(&self, uri: &str) -> $builder {
            $crate::RequestBuilder::new(self.clone(), $crate::__http::Method::HEAD, uri)
        }
    };
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

/// What every adapter's request body offers, for a type whose one field is `kind:
/// BodyKind<_>`: `len`, `is_empty`, `is_replayable`, and `From`
/// conversions (bytes, vectors, strings, `()`).
#[macro_export]
macro_rules! request_body {
    ($body:ty) => {
        impl $body {
            /// The length, when known in advance.
            #[must_use]
            pub fn len(&self) -> Option<u64> {
                self.kind.len()
            }
            /// Whether the body is known to be empty.
            #[must_use]
            pub fn is_empty(&self) -> bool {
                self.kind.is_empty()
            }
            /// Whether the body can be sent again on a retry.
            #[must_use]
            pub fn is_replayable(&self) -> bool {
                self.kind.is_replayable()
            }
        }
        impl From<$crate::__bytes::Bytes> for $body {
            fn from(b: $crate::__bytes::Bytes) -> $body {
                Self { kind: $crate::BodyKind::full(b) }
            }
        }
        impl From<Vec<u8>> for $body {
            fn from(v: Vec<u8>) -> $body {
                <$body>::from($crate::__bytes::Bytes::from(v))
            }
        }
        impl From<String> for $body {
            fn from(s: String) -> $body {
                <$body>::from($crate::__bytes::Bytes::from(s))
            }
        }
        impl From<&'static str> for $body {
            fn from(s: &'static str) -> $body {
                <$body>::from($crate::__bytes::Bytes::from_static(s.as_bytes()))
            }
        }
        impl From<&'static [u8]> for $body {
            fn from(s: &'static [u8]) -> $body {
                <$body>::from($crate::__bytes::Bytes::from_static(s))
            }
        }
        impl From<()> for $body {
            fn from((): ()) -> $body {
                Self { kind: $crate::BodyKind::Empty }
            }
        }
    };
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
        BodyLedger { received: 0, ended, owner: None }
    }

    /// The body ends `call`: its end is the call's end (for listeners: with
    /// none, there is nothing to tell). A body still to be read tells
    /// `response_body_start` now. Called as `send` returns: every event of the
    /// call so far has reached the listener when this returns.
    pub fn own(&mut self, notes: Arc<dyn Notes>, call: CallId) {
        if notes.listening() {
            if !self.ended {
                let at = notes.now();
                notes.note(Box::new(move |l| l.response_body_start(call, at)));
            }
            notes.flush();
            self.owner = Some((notes, call));
        }
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
    /// [`Error::Body`] when the body failed.
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
                if let Some((notes, call)) = self.owner.take() {
                    let at = notes.now();
                    notes.note(Box::new(move |l| l.call_end(call, at)));
                    // Every event of the call is heard before its end is handed out.
                    notes.flush();
                }
                Ok(None)
            }
            Err(e) => {
                self.ended = true;
                let e = Error::Body(e);
                if let Some((notes, call)) = self.owner.take() {
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
