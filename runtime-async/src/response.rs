//! [`ResponseBody`]: a response body streamed as `Bytes` chunks. Reading it to
//! the end returns the connection to the pool; dropping it early drains a little
//! in the background (HTTP/1.1: up to 64 KiB or 100 ms) or retires the
//! connection — it is never leaked.

use std::sync::Arc;

use bytes::Bytes;
use switchyard_common::{BodyLedger, Collector, Error};
use switchyard_core::CallId;

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
    // Dropped first: the connection is released before the call ends.
    inner: Inner,
    ledger: BodyLedger,
}

enum Inner {
    Empty,
    H1(Box<H1Body>),
    H2(Box<H2Body>),
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").field("ledger", &self.ledger).finish_non_exhaustive()
    }
}

impl ResponseBody {
    pub(crate) fn h1(body: H1Body) -> ResponseBody {
        ResponseBody { inner: Inner::H1(Box::new(body)), ledger: BodyLedger::new(false) }
    }
    pub(crate) fn h2(body: H2Body) -> ResponseBody {
        ResponseBody { inner: Inner::H2(Box::new(body)), ledger: BodyLedger::new(false) }
    }
    pub(crate) fn set_owner(&mut self, shared: Arc<Shared>, call: CallId) {
        self.ledger.own(shared, call);
    }

    /// An empty body (for responses built by hand).
    #[must_use]
    pub fn empty() -> ResponseBody {
        ResponseBody { inner: Inner::Empty, ledger: BodyLedger::new(true) }
    }

    /// The next chunk, or `None` at the end (the connection is released then).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        if self.ledger.is_ended() {
            return Ok(None);
        }
        let next = match &mut self.inner {
            Inner::Empty => Ok(None),
            Inner::H1(b) => b.chunk().await,
            Inner::H2(b) => b.chunk().await,
        };
        let inner = &mut self.inner;
        self.ledger.settle(next, || match inner {
            Inner::H1(b) => b.0.finish(),
            Inner::H2(b) => b.finish(),
            Inner::Empty => {}
        })
    }

    /// Reads the whole body.
    pub async fn collect(&mut self) -> Result<Bytes, Error> {
        let mut all = Collector::default();
        while let Some(chunk) = self.chunk().await? {
            all.push(chunk);
        }
        Ok(all.finish())
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
            Inner::H1(b) => b.0.trailers.as_ref(),
            Inner::H2(b) => b.trailers.as_ref(),
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
            }
    }
}
