//! HTTP/3 (RFC 9114) in the core: what travels on a QUIC connection's
//! streams, sans-IO. QUIC itself (packets, loss recovery, TLS) is not here:
//! the adapters run it (quinn-proto, itself sans-IO) and move each stream's
//! bytes in and out of these pieces, so an embedder with another QUIC stack
//! uses them as they are.
//!
//! - [`varint`]: QUIC's variable-length integers.
//! - [`frame`]: frames off a stream in any split ([`FrameReader`]), SETTINGS,
//!   the encoders.
//! - [`qpack`]: field sections with the static table and literals only (we
//!   allow the server no dynamic table, so nothing ever blocks on one).
//! - [`stream`]: one request stream: the request's HEADERS and DATA out,
//!   the response's head, body parts, trailers and end in, with the message
//!   rules (RFC 9114 §4.1) checked.
//! - [`control`]: the connection's unidirectional streams: our control
//!   stream (SETTINGS), the server's control stream (SETTINGS first, GOAWAY
//!   ids never rising), QPACK's streams held to our zero-capacity table, push
//!   refused, unknown stream types read and dropped.
//!
//! ```
//! use bytes::BytesMut;
//! use switchyard_core::http3::stream::{RequestStream, StreamEvent};
//! use switchyard_core::http3::{frame, qpack};
//!
//! let req = http::Request::get("https://example.com/").body(()).unwrap().into_parts().0;
//! let mut stream = RequestStream::new(&req, 16 * 1024);
//! let mut out = BytesMut::new();
//! stream.write_head(&req, None, &mut out); // bytes for the QUIC stream, FIN after them
//!
//! // The server's answer: HEADERS (:status 200 is static entry 25), then DATA.
//! let mut section = BytesMut::new();
//! qpack::Encoder::begin(&mut section);
//! qpack::Encoder::field(&mut section, ":status", b"200", false);
//! let mut wire = BytesMut::new();
//! frame::encode_headers(&section, &mut wire);
//! frame::encode_header(frame::kind::DATA, 2, &mut wire);
//! wire.extend_from_slice(b"hi");
//!
//! let mut events = Vec::new();
//! while let Some(e) = stream.recv(&mut wire, true).unwrap() {
//!     events.push(e);
//! }
//! assert!(matches!(&events[0], StreamEvent::Head(r) if r.status() == 200));
//! assert!(matches!(&events[1], StreamEvent::Data(d) if &d[..] == b"hi"));
//! assert!(matches!(events[2], StreamEvent::End));
//! ```

pub mod control;
pub mod frame;
pub mod qpack;
pub mod stream;
pub mod varint;

pub use frame::{Frame, FrameError, FrameReader, Settings};

/// HTTP/3 and QPACK error codes (RFC 9114 §8.1, RFC 9204 §6).
pub mod code {
    /// No error: a graceful close.
    pub const NO_ERROR: u64 = 0x100;
    /// A protocol error no more specific code covers.
    pub const GENERAL_PROTOCOL_ERROR: u64 = 0x101;
    /// An internal error.
    pub const INTERNAL_ERROR: u64 = 0x102;
    /// A stream the peer was not allowed to open.
    pub const STREAM_CREATION_ERROR: u64 = 0x103;
    /// A control or QPACK stream closed.
    pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
    /// A frame where it is not allowed.
    pub const FRAME_UNEXPECTED: u64 = 0x105;
    /// A frame that breaks its layout.
    pub const FRAME_ERROR: u64 = 0x106;
    /// The peer asked for more than we will hold.
    pub const EXCESSIVE_LOAD: u64 = 0x107;
    /// An id (stream or push) used wrongly.
    pub const ID_ERROR: u64 = 0x108;
    /// SETTINGS that break their rules.
    pub const SETTINGS_ERROR: u64 = 0x109;
    /// No SETTINGS first on the control stream.
    pub const MISSING_SETTINGS: u64 = 0x10a;
    /// The server did not process the request: it may be retried.
    pub const REQUEST_REJECTED: u64 = 0x10b;
    /// The request (or its response) is no longer wanted.
    pub const REQUEST_CANCELLED: u64 = 0x10c;
    /// The stream ended before the message did.
    pub const REQUEST_INCOMPLETE: u64 = 0x10d;
    /// A malformed message.
    pub const MESSAGE_ERROR: u64 = 0x10e;
    /// A CONNECT tunnel's TCP connection failed.
    pub const CONNECT_ERROR: u64 = 0x10f;
    /// The request should go over HTTP/1.1.
    pub const VERSION_FALLBACK: u64 = 0x110;
    /// QPACK: a field section did not decode.
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    /// QPACK: the encoder stream broke its rules.
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
    /// QPACK: the decoder stream broke its rules.
    pub const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;

    /// The code's name as the RFCs spell it (`H3_…`, `QPACK_…`), or
    /// `unknown` (reserved codes `0x1f * N + 0x21` are unknown too).
    #[must_use]
    pub fn name(code: u64) -> &'static str {
        const NAMES: [&str; 17] = [
            "H3_NO_ERROR",
            "H3_GENERAL_PROTOCOL_ERROR",
            "H3_INTERNAL_ERROR",
            "H3_STREAM_CREATION_ERROR",
            "H3_CLOSED_CRITICAL_STREAM",
            "H3_FRAME_UNEXPECTED",
            "H3_FRAME_ERROR",
            "H3_EXCESSIVE_LOAD",
            "H3_ID_ERROR",
            "H3_SETTINGS_ERROR",
            "H3_MISSING_SETTINGS",
            "H3_REQUEST_REJECTED",
            "H3_REQUEST_CANCELLED",
            "H3_REQUEST_INCOMPLETE",
            "H3_MESSAGE_ERROR",
            "H3_CONNECT_ERROR",
            "H3_VERSION_FALLBACK",
        ];
        match code {
            0x100..=0x110 => NAMES[(code - 0x100) as usize],
            QPACK_DECOMPRESSION_FAILED => "QPACK_DECOMPRESSION_FAILED",
            QPACK_ENCODER_STREAM_ERROR => "QPACK_ENCODER_STREAM_ERROR",
            QPACK_DECODER_STREAM_ERROR => "QPACK_DECODER_STREAM_ERROR",
            _ => "unknown",
        }
    }
}

/// Whether a QUIC stream id was opened by the client (RFC 9000 §2.1: the
/// low bit is the initiator).
#[must_use]
pub fn is_client_initiated(stream_id: u64) -> bool {
    stream_id & 1 == 0
}

/// Whether a QUIC stream id is bidirectional (the second bit clear).
#[must_use]
pub fn is_bidirectional(stream_id: u64) -> bool {
    stream_id & 2 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names() {
        assert_eq!(code::name(0x100), "H3_NO_ERROR");
        assert_eq!(code::name(0x10b), "H3_REQUEST_REJECTED");
        assert_eq!(code::name(0x110), "H3_VERSION_FALLBACK");
        assert_eq!(code::name(0x200), "QPACK_DECOMPRESSION_FAILED");
        assert_eq!(code::name(0x21), "unknown");
        assert!(is_client_initiated(0) && is_bidirectional(0));
        assert!(!is_client_initiated(3) && !is_bidirectional(3));
        assert!(is_client_initiated(2) && !is_bidirectional(2));
    }
}
