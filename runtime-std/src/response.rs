//! [`ResponseBody`]: a response body read in `Bytes` chunks or through
//! [`std::io::Read`]. Reading it to the end returns the connection to the pool;
//! dropping it early drains a little (up to 64 KiB or 100 ms) or closes the
//! connection — it is never leaked.

use std::io;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use switchyard_common::Error;
use switchyard_core::CallId;

use crate::driver::Shared;
use crate::h1::H1Body;

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
    inner: Option<Box<H1Body>>,
    received: u64,
    ended: bool,
    owner: Option<(Arc<Shared>, CallId)>,
    /// What `Read` has not handed out yet of the last chunk.
    pending: Bytes,
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
            drop(self.inner.take());
            let at = shared.now();
            shared.emit(move |l| l.call_end(call, at));
        }
    }
}

impl ResponseBody {
    pub(crate) fn h1(body: H1Body) -> ResponseBody {
        ResponseBody {
            inner: Some(Box::new(body)),
            received: 0,
            ended: false,
            owner: None,
            pending: Bytes::new(),
        }
    }
    pub(crate) fn set_owner(&mut self, shared: Arc<Shared>, call: CallId) {
        self.owner = Some((shared, call));
    }

    /// An empty body (for responses built by hand).
    #[must_use]
    pub fn empty() -> ResponseBody {
        ResponseBody { inner: None, received: 0, ended: true, owner: None, pending: Bytes::new() }
    }

    /// The next chunk, or `None` at the end (the connection is released then).
    ///
    /// # Errors
    /// [`Error::Body`]: the connection failed, timed out, or broke the framing.
    pub fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        if !self.pending.is_empty() {
            return Ok(Some(std::mem::take(&mut self.pending)));
        }
        if self.ended {
            return Ok(None);
        }
        let next = match &mut self.inner {
            None => Ok(None),
            Some(b) => b.chunk(),
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
                if let Some(b) = &mut self.inner {
                    b.finish();
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
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn collect(&mut self) -> Result<Bytes, Error> {
        let mut all = BytesMut::new();
        let mut single: Option<Bytes> = None;
        while let Some(chunk) = self.chunk()? {
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
    ///
    /// # Errors
    /// As [`ResponseBody::chunk`].
    pub fn text(&mut self) -> Result<String, Error> {
        let bytes = self.collect()?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Trailer fields, once the body has ended (chunked HTTP/1.1).
    #[must_use]
    pub fn trailers(&self) -> Option<&http::HeaderMap> {
        self.inner.as_ref().and_then(|b| b.trailers.as_ref())
    }

    /// Whether the body has been read to the end (its connection released).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.pending.is_empty() && (self.ended || self.inner.as_ref().is_none_or(|b| b.is_done()))
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
