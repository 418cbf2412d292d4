//! HTTP/1.1 as pure state machines: bytes in, bytes out, no I/O. All adapters
//! share them.
//!
//! * [`Conn`] and [`Driver`] ([`driver`]): the connection driver — one exchange on one
//!   connection with its phases, timers, early responses, draining, keep-alive and
//!   failure classification. This is what an adapter drives.
//! * [`Exchange`]: the codec underneath (below).
//!
//! An [`Exchange`] encodes one request ([`encode_head`], [`BodyEncoder`]) and
//! decodes its response ([`ResponseDecoder`]); at the end it says whether the
//! connection may carry another exchange ([`Exchange::reuse`]), and if not, why —
//! the reason feeds the pool's no-new-exchanges events.
//!
//! ```text
//!  new ──► head written ──► body: none | sending | awaiting 100 ──┐
//!                                 ▲             │ 100 Continue     │
//!                                 └─────────────┘ (or the adapter's│timeout)
//!  response: [Informational]* ──► Head ──► Data* [Trailers] ──► End
//!                                      └──► Upgraded (101, CONNECT 2xx)
//! ```
//!
//! Body framing follows RFC 9112 §6.3: no body for HEAD, 1xx, 204 and 304;
//! `Transfer-Encoding` ending in `chunked`; `Content-Length` (invalid or
//! conflicting values are errors, and both headers together are refused);
//! otherwise the body runs until the connection closes.
//!
//! # Example
//!
//! ```
//! use bytes::BytesMut;
//! # use switchyard_core::http1::{Exchange, Frame, Limits, RequestBody, TargetForm};
//! # use switchyard_core::Reuse;
//!
//! let (parts, ()) = http::Request::get("http://example.com/").body(()).unwrap().into_parts();
//! let (mut exchange, head) = Exchange::new(&parts, TargetForm::Origin, RequestBody::None, Limits::default())?;
//! assert_eq!(head, b"GET / HTTP/1.1\r\nhost: example.com\r\n\r\n");
//!
//! // The response arrives in two reads; the split does not matter.
//! let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhel"[..]);
//! let Some(Frame::Head(response)) = exchange.decode(&mut buf, false)? else { panic!() };
//! assert_eq!(response.status(), 200);
//! assert_eq!(exchange.decode(&mut buf, false)?, Some(Frame::Data("hel".into())));
//! assert_eq!(exchange.decode(&mut buf, false)?, None); // needs more input
//! buf.extend_from_slice(b"lo");
//! assert_eq!(exchange.decode(&mut buf, false)?, Some(Frame::Data("lo".into())));
//! assert_eq!(exchange.decode(&mut buf, false)?, Some(Frame::End));
//! assert_eq!(exchange.reuse(), Reuse::Reusable);
//! # Ok::<(), switchyard_core::http1::Http1Error>(())
//! ```

pub mod driver;
mod error;
mod outbox;
mod request;
mod response;

pub use driver::{BodyFailure, Conn, Driver, DriverConfig, Event, Failure, Peek, Refused, Request};
pub use error::Http1Error;
pub use request::{encode_head, BodyCounter, BodyEncoder, RequestBody, TargetForm};
pub use response::{Frame, Limits, RawHead, ResponseDecoder};

use bytes::BytesMut;

use crate::connection::{CloseReason, Reuse};

/// A decimal number of at most 19 digits (so it fits in a `u64`), nothing else.
pub(crate) fn parse_decimal(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    b.iter().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// May the request body be sent now?
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BodyPermission {
    /// Yes.
    Send,
    /// Not yet: the request said `Expect: 100-continue`. Wait for `100 Continue`,
    /// a final response, or the adapter's own timeout
    /// ([`Exchange::continue_timed_out`]).
    AwaitContinue,
    /// No: the server answered before asking for it, so it is withheld.
    Withheld,
    /// The body is complete (or there is none).
    Done,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Send {
    Awaiting,
    Sending,
    Withheld,
}

/// One request/response exchange on an HTTP/1.1 connection.
#[derive(Clone, Debug)]
pub struct Exchange {
    body: BodyEncoder,
    send: Send,
    request_close: bool,
    /// Encoded body bytes were never written (an early response stopped the upload).
    body_abandoned: bool,
    decoder: ResponseDecoder,
}

impl Exchange {
    /// Starts an exchange: validates and encodes the request head (returned, to be
    /// written first) and prepares the response decoder.
    pub fn new(
        parts: &http::request::Parts,
        form: TargetForm,
        body: RequestBody,
        limits: Limits,
    ) -> Result<(Exchange, Vec<u8>), Http1Error> {
        Exchange::with_buffer(parts, form, body, limits, Vec::with_capacity(256))
    }

    /// [`Exchange::new`], encoding the head into `head` (an empty buffer a
    /// connection kept from its last exchange).
    pub(crate) fn with_buffer(
        parts: &http::request::Parts,
        form: TargetForm,
        body: RequestBody,
        limits: Limits,
        mut head: Vec<u8>,
    ) -> Result<(Exchange, Vec<u8>), Http1Error> {
        let facts = request::encode(parts, form, body, &mut head)?;
        let request_close = facts.close;
        let send =
            if facts.expect_continue && body != RequestBody::None { Send::Awaiting } else { Send::Sending };
        let exchange = Exchange {
            body: BodyEncoder::new(body),
            send,
            request_close,
            body_abandoned: false,
            decoder: ResponseDecoder::new(&parts.method, limits),
        };
        Ok((exchange, head))
    }

    /// Whether the body may be sent now.
    #[must_use]
    pub fn body_permission(&self) -> BodyPermission {
        if self.body.is_finished() {
            return BodyPermission::Done;
        }
        match self.send {
            Send::Awaiting => BodyPermission::AwaitContinue,
            Send::Sending => BodyPermission::Send,
            Send::Withheld => BodyPermission::Withheld,
        }
    }

    /// The adapter's wait for `100 Continue` ran out: send the body anyway (RFC
    /// 9110 §10.1.1 lets a client stop waiting).
    pub fn continue_timed_out(&mut self) {
        if self.send == Send::Awaiting {
            self.send = Send::Sending;
        }
    }

    /// Appends framed body bytes to `out`.
    pub fn encode_body(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), Http1Error> {
        if self.send != Send::Sending {
            return Err(Http1Error::BodyNotAllowed);
        }
        self.body.encode(data, out)
    }

    /// Frames a `len`-byte body chunk the caller writes itself, between
    /// `before` and `after`; see [`BodyEncoder::frame`].
    pub fn frame_body(
        &mut self,
        len: usize,
        before: &mut Vec<u8>,
        after: &mut Vec<u8>,
    ) -> Result<(), Http1Error> {
        if self.send != Send::Sending {
            return Err(Http1Error::BodyNotAllowed);
        }
        self.body.frame(len, before, after)
    }

    /// Ends the body (the last chunk and trailers for chunked bodies).
    pub fn finish_body(
        &mut self,
        trailers: Option<&http::HeaderMap>,
        out: &mut Vec<u8>,
    ) -> Result<(), Http1Error> {
        if self.send != Send::Sending {
            return Err(Http1Error::BodyNotAllowed);
        }
        self.body.finish(trailers, out)
    }

    /// The adapter stopped writing the request before all encoded bytes went
    /// out (a final response arrived first). The body's framing position on the
    /// connection is unknown, so the connection cannot be reused.
    pub fn abandon_body(&mut self) {
        self.body_abandoned = true;
    }

    /// Whether the whole request body (if any) was encoded and none of it was
    /// abandoned: what the adapter wrote is the complete request.
    #[must_use]
    pub fn body_sent(&self) -> bool {
        self.body.is_finished() && !self.body_abandoned
    }

    /// Decodes the next response frame from `buf`; see [`ResponseDecoder::decode`].
    /// A `100 Continue` releases a withheld body; a final response that arrives
    /// while the body still waits for `100 Continue` withholds it for good.
    pub fn decode(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<Frame>, Http1Error> {
        let frame = self.decoder.decode(buf, eof)?;
        if self.send == Send::Awaiting {
            match &frame {
                Some(Frame::Informational(r)) if r.status() == http::StatusCode::CONTINUE => {
                    self.send = Send::Sending;
                }
                Some(Frame::Head(_)) => self.send = Send::Withheld,
                _ => {}
            }
        }
        Ok(frame)
    }

    /// The decoder, for its state.
    #[must_use]
    pub fn decoder(&self) -> &ResponseDecoder {
        &self.decoder
    }

    /// Whether the response is complete.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.decoder.is_complete()
    }

    /// Whether the connection may carry another exchange after this one, and if
    /// not, why: `Connection: close` on either side, HTTP/1.0 without keep-alive, a
    /// close-delimited body, a body not fully read, bytes after the response, a
    /// framing error, an upgrade, `100-continue` not honoured, or a request body
    /// not fully sent (not encoded, or [abandoned](Exchange::abandon_body)).
    #[must_use]
    pub fn reuse(&self) -> Reuse {
        let decoded = self.decoder.reuse();
        if decoded != Reuse::Reusable {
            return decoded;
        }
        let reason = if self.send == Send::Withheld {
            CloseReason::ExpectNotHonoured
        } else if !self.body.is_finished() || self.body_abandoned {
            CloseReason::RequestBodyIncomplete
        } else if self.request_close {
            CloseReason::RequestClose
        } else {
            return Reuse::Reusable;
        };
        Reuse::Retire(reason)
    }
}
