//! [`Http1Error`]: everything that can be wrong with an HTTP/1.1 exchange's bytes
//! or with a request given to the encoder.

use std::fmt;

/// A malformed response, a violated limit, a truncated message, or a request the
/// encoder cannot frame. Never a panic, never unbounded buffering.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Http1Error {
    /// The response head (status line and headers) exceeds the limit.
    HeadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The response has more header fields than the limit.
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// The status line or a header field is malformed.
    MalformedHead {
        /// What is wrong.
        reason: &'static str,
    },
    /// A `Content-Length` value is not a decimal number that fits in 64 bits.
    InvalidContentLength {
        /// The value as received (lossy UTF-8).
        value: String,
    },
    /// Several `Content-Length` values disagree.
    ConflictingContentLength {
        /// The values as received.
        values: Vec<String>,
    },
    /// Both `Content-Length` and `Transfer-Encoding` (a request-smuggling vector;
    /// refused rather than guessed).
    ContentLengthAndTransferEncoding,
    /// A chunk-size line is not hexadecimal or overflows 64 bits.
    InvalidChunkSize {
        /// The line as received (lossy UTF-8, truncated).
        line: String,
    },
    /// A chunk-size line (with extensions) exceeds the limit.
    ChunkLineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// Chunk data is not followed by CRLF.
    MissingChunkTerminator,
    /// The trailer section is larger than the head limit.
    TrailersTooLarge {
        /// The limit in bytes (the response head limit).
        limit: usize,
    },
    /// The trailer section is malformed.
    MalformedTrailers {
        /// What is wrong.
        reason: &'static str,
    },
    /// The connection closed before any byte of the response.
    EmptyResponse,
    /// The connection closed in the middle of the response head.
    TruncatedHead {
        /// Bytes of head received.
        received: usize,
    },
    /// The connection closed before the body was complete.
    TruncatedBody {
        /// The declared length, when known.
        expected: Option<u64>,
        /// Body bytes received.
        received: u64,
    },
    /// The request cannot be encoded (missing authority, conflicting framing, …).
    InvalidRequest {
        /// What is wrong.
        reason: &'static str,
    },
    /// More body bytes were given than the declared `Content-Length`.
    BodyTooLong {
        /// The declared length.
        declared: u64,
    },
    /// The body ended before the declared `Content-Length`.
    BodyTooShort {
        /// The declared length.
        declared: u64,
        /// Bytes given.
        sent: u64,
    },
    /// The request body may not be sent now (already finished, withheld after a
    /// final response to `Expect: 100-continue`, or still awaiting `100 Continue`).
    BodyNotAllowed,
    /// More informational (1xx) responses than the limit before the final one.
    TooManyInformational {
        /// The limit.
        limit: usize,
    },
    /// The first bytes are not an HTTP/1.x status line (the peer does not speak
    /// HTTP/1.1 on this connection).
    NotHttp {
        /// The first bytes as received (lossy UTF-8, truncated).
        start: String,
    },
}

impl Http1Error {
    /// Whether the peer's bytes were at fault (as opposed to the request given to
    /// the encoder).
    #[must_use]
    pub fn is_protocol_error(&self) -> bool {
        !matches!(
            self,
            Http1Error::InvalidRequest { .. }
                | Http1Error::BodyTooLong { .. }
                | Http1Error::BodyTooShort { .. }
                | Http1Error::BodyNotAllowed
        )
    }
}

impl fmt::Display for Http1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Http1Error::HeadTooLarge { limit } => write!(f, "response head larger than {limit} bytes"),
            Http1Error::TooManyHeaders { limit } => write!(f, "response has more than {limit} header fields"),
            Http1Error::MalformedHead { reason } => write!(f, "malformed response head: {reason}"),
            Http1Error::InvalidContentLength { value } => write!(f, "invalid Content-Length {value:?}"),
            Http1Error::ConflictingContentLength { values } => {
                write!(f, "conflicting Content-Length values {values:?}")
            }
            Http1Error::ContentLengthAndTransferEncoding => {
                f.write_str("response has both Content-Length and Transfer-Encoding")
            }
            Http1Error::InvalidChunkSize { line } => write!(f, "invalid chunk size line {line:?}"),
            Http1Error::ChunkLineTooLong { limit } => write!(f, "chunk size line longer than {limit} bytes"),
            Http1Error::MissingChunkTerminator => f.write_str("chunk data not followed by CRLF"),
            Http1Error::TrailersTooLarge { limit } => {
                write!(f, "trailer section larger than {limit} bytes (the response head limit)")
            }
            Http1Error::MalformedTrailers { reason } => write!(f, "malformed trailers: {reason}"),
            Http1Error::EmptyResponse => f.write_str("connection closed before any response byte"),
            Http1Error::TruncatedHead { received } => {
                write!(f, "connection closed after {received} bytes of the response head")
            }
            Http1Error::TruncatedBody { expected: Some(n), received } => {
                write!(f, "connection closed after {received} of {n} body bytes")
            }
            Http1Error::TruncatedBody { expected: None, received } => {
                write!(f, "connection closed after {received} body bytes, before the last chunk")
            }
            Http1Error::InvalidRequest { reason } => write!(f, "cannot encode request: {reason}"),
            Http1Error::BodyTooLong { declared } => {
                write!(f, "request body longer than its Content-Length {declared}")
            }
            Http1Error::BodyTooShort { declared, sent } => {
                write!(f, "request body ended after {sent} of {declared} bytes")
            }
            Http1Error::BodyNotAllowed => f.write_str("the request body may not be sent now"),
            Http1Error::TooManyInformational { limit } => {
                write!(f, "more than {limit} informational (1xx) responses")
            }
            Http1Error::NotHttp { start } => write!(f, "not an HTTP/1.x response: starts with {start:?}"),
        }
    }
}

impl std::error::Error for Http1Error {}
