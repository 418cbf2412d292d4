//! Request bodies: none, a buffer (replayable, so retries may resend it), or a
//! reader (sent once, chunked, never replayed).

use std::io::Read;

use bytes::Bytes;

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

#[derive(Default)]
pub(crate) enum Kind {
    #[default]
    Empty,
    Full(Bytes),
    Reader(Box<dyn Read + Send>),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Body::Empty"),
            Kind::Full(b) => write!(f, "Body::Full({} bytes)", b.len()),
            Kind::Reader(_) => f.write_str("Body::Reader"),
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
        Body { kind: Kind::Reader(Box::new(reader)) }
    }

    /// The length, when known in advance.
    #[must_use]
    pub fn len(&self) -> Option<u64> {
        match &self.kind {
            Kind::Empty => Some(0),
            Kind::Full(b) => Some(b.len() as u64),
            Kind::Reader(_) => None,
        }
    }

    /// Whether the body is known to be empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Whether the body can be sent again on a retry.
    #[must_use]
    pub fn is_replayable(&self) -> bool {
        !matches!(self.kind, Kind::Reader(_))
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Body {
        if b.is_empty() {
            Body::empty()
        } else {
            Body { kind: Kind::Full(b) }
        }
    }
}
impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Body {
        Body::from(Bytes::from(v))
    }
}
impl From<String> for Body {
    fn from(s: String) -> Body {
        Body::from(Bytes::from(s))
    }
}
impl From<&'static str> for Body {
    fn from(s: &'static str) -> Body {
        Body::from(Bytes::from_static(s.as_bytes()))
    }
}
impl From<&'static [u8]> for Body {
    fn from(s: &'static [u8]) -> Body {
        Body::from(Bytes::from_static(s))
    }
}
impl From<()> for Body {
    fn from((): ()) -> Body {
        Body::empty()
    }
}
