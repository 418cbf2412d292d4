//! Request bodies: none, a buffer (replayable, so retries may resend it), or a
//! reader (sent once, chunked, never replayed).

use std::io::Read;

/// A request body.
///
/// ```
/// use switchyard_std::Body;
/// let empty = Body::empty();
/// let full = Body::from("hello");
/// assert_eq!(full.len(), Some(5));
/// assert!(full.is_replayable() && empty.is_replayable());
/// let streaming = Body::from_reader(std::io::Cursor::new(vec![1u8; 100_000]));
/// assert_eq!(streaming.len(), None);
/// assert!(!streaming.is_replayable());
/// ```
#[derive(Default)]
pub struct Body {
    pub(crate) kind: Kind,
}

/// What the body is: none, a buffer, or a reader.
pub(crate) type Kind = switchyard_common::BodyKind<Box<dyn Read + Send>>;

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Body::Empty"),
            Kind::Full(b) => write!(f, "Body::Full({} bytes)", b.len()),
            Kind::Stream(_) => f.write_str("Body::Reader"),
        }
    }
}

impl Body {
    /// No body.
    #[must_use]
    pub fn empty() -> Body {
        Body { kind: Kind::Empty }
    }

    /// A body read from `reader` until it ends, sent as it is read (chunked on
    /// HTTP/1.1). It cannot be replayed, so a failed call is never retried
    /// after any of it was sent.
    pub fn from_reader(reader: impl Read + Send + 'static) -> Body {
        Body { kind: Kind::Stream(Box::new(reader)) }
    }
}

switchyard_common::request_body!(Body);
