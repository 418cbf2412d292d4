//! [`ResponseBody`]: a response body streamed as `Bytes` chunks. Reading it to
//! the end returns the connection to the pool; dropping it early drains a little
//! in the background (HTTP/1.1: up to 64 KiB or 100 ms) or retires the
//! connection — it is never leaked.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use switchyard_core::CallId;

use switchyard_common::Error;

use crate::driver::Shared;
use crate::h1::H1Body;
use crate::h2::H2Body;

/// A streaming response body.
///
/// ```no_run
/// # async fn run<R: switchyard_async::Runtime>(client: switchyard_async::Client<R>) -> Result<(), switchyard_common::Error> {
/// let mut response = client.get("https://example.com/big").send().await?;
/// while let Some(chunk) = response.body_mut().chunk().await? {
///     println!("{} bytes", chunk.len());
/// }
/// # Ok(()) }
/// ```
pub struct ResponseBody {
    inner: Inner,
    received: u64,
    ended: bool,
    owner: Option<(Arc<Shared>, CallId)>,
}

enum Inner {
    Empty,
    H1(Box<H1Body>),
    H2(Box<H2Body>),
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").field("received", &self.received).field("ended", &self.ended).finish()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // Dropped before the end: the inner body returns or retires the
        // connection; the call is over either way.
        if let Some((shared, call)) = self.owner.take() {
            let inner = std::mem::replace(&mut self.inner, Inner::Empty);
            drop(inner);
            let at = shared.now();
            shared.emit(move |l| l.call_end(call, at));
        }
    }
}

impl ResponseBody {
    pub(crate) fn h1(body: H1Body) -> ResponseBody {
        ResponseBody { inner: Inner::H1(Box::new(body)), received: 0, ended: false, owner: None }
    }
    pub(crate) fn h2(body: H2Body) -> ResponseBody {
        ResponseBody { inner: Inner::H2(Box::new(body)), received: 0, ended: false, owner: None }
    }
    pub(crate) fn set_owner(&mut self, shared: Arc<Shared>, call: CallId) {
        self.owner = Some((shared, call));
    }

    /// An empty body (for responses built by hand).
    #[must_use]
    pub fn empty() -> ResponseBody {
        ResponseBody { inner: Inner::Empty, received: 0, ended: true, owner: None }
    }

    /// The next chunk, or `None` at the end (the connection is released then).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        if self.ended {
            return Ok(None);
        }
        let next = match &mut self.inner {
            Inner::Empty => Ok(None),
            Inner::H1(b) => b.chunk().await,
            Inner::H2(b) => b.chunk().await,
        };
        match next {
            Ok(Some(b)) => {
                self.received += b.len() as u64;
                Ok(Some(b))
            }
            Ok(None) => {
                self.ended = true;
                if let Some((shared, call)) = &self.owner {
                    let (at, call, n) = (shared.now(), *call, self.received);
                    shared.emit(move |l| l.response_body_end(call, n, at));
                }
                match &mut self.inner {
                    Inner::H1(b) => b.finish(),
                    Inner::H2(b) => b.finish(),
                    Inner::Empty => {}
                }
                if let Some((shared, call)) = self.owner.take() {
                    let at = shared.now();
                    shared.emit(move |l| l.call_end(call, at));
                }
                Ok(None)
            }
            Err(e) => {
                self.ended = true;
                let e = Error::Body(e);
                if let Some((shared, call)) = self.owner.take() {
                    let (at, err) = (shared.now(), e.clone());
                    shared.emit(move |l| l.call_failed(call, &err, at));
                }
                Err(e)
            }
        }
    }

    /// Reads the whole body.
    pub async fn collect(&mut self) -> Result<Bytes, Error> {
        let mut all = BytesMut::new();
        let mut single: Option<Bytes> = None;
        while let Some(chunk) = self.chunk().await? {
            match single.take() {
                None if all.is_empty() => single = Some(chunk),
                Some(first) => {
                    all.extend_from_slice(&first);
                    all.extend_from_slice(&chunk);
                }
                None => all.extend_from_slice(&chunk),
            }
        }
        Ok(single.unwrap_or_else(|| all.freeze()))
    }

    /// Reads the whole body as text (invalid UTF-8 replaced).
    pub async fn text(&mut self) -> Result<String, Error> {
        let bytes = self.collect().await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Trailer fields, once the body has ended (chunked HTTP/1.1 or HTTP/2).
    #[must_use]
    pub fn trailers(&self) -> Option<&http::HeaderMap> {
        match &self.inner {
            Inner::H1(b) => b.trailers.as_ref(),
            Inner::H2(b) => b.trailers.as_ref(),
            Inner::Empty => None,
        }
    }

    /// Whether the body has been read to the end (its connection released).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.ended
            || match &self.inner {
                Inner::Empty => true,
                Inner::H1(b) => b.is_done(),
                Inner::H2(b) => b.is_done(),
            }
    }
}
