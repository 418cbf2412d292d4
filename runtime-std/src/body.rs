//! Request bodies: none, a buffer (replayable, so retries may resend it), or a
//! reader (sent once, never replayed: chunked, or with `Content-Length` when
//! its length is given).

use std::io::Read;

/// A request body.
///
/// ```
/// use switchyard_std::Body;
/// let empty = Body::empty();
/// let full = Body::from("hello");
/// assert_eq!(full.len(), Some(5));
/// assert!(full.is_replayable() && empty.is_replayable());
/// let streaming = Body::from_reader(std::io::Cursor::new(vec![1u8; 100_000]), None);
/// assert_eq!(streaming.len(), None);
/// assert!(!streaming.is_replayable());
/// let sized = Body::from_reader(std::io::Cursor::new(vec![1u8; 100_000]), Some(100_000));
/// assert_eq!(sized.len(), Some(100_000));
/// assert!(!sized.is_replayable());
/// ```
#[derive(Default)]
pub struct Body {
    pub(crate) kind: Kind,
    /// A reader's declared length.
    pub(crate) length: Option<u64>,
}

/// What the body is: none, a buffer, or a reader.
pub(crate) type Kind = switchyard_common::BodyKind<Box<dyn Read + Send>>;

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Body::Empty"),
            Kind::Full(b) => write!(f, "Body::Full({} bytes)", b.len()),
            Kind::Stream(_) => match self.length {
                Some(n) => write!(f, "Body::Reader({n} bytes)"),
                None => f.write_str("Body::Reader"),
            },
        }
    }
}

impl Body {
    /// No body.
    #[must_use]
    pub fn empty() -> Body {
        Body { kind: Kind::Empty, length: None }
    }

    /// A body read from `reader` until it ends, sent as it is read. With a
    /// `length` (a file's size, say) it goes out with that `Content-Length`
    /// and is held to it: a reader that ends short or runs long fails the
    /// call with [`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest)
    /// and the connection is not reused. Without one it is chunked. It cannot
    /// be replayed, so a failed call is never retried after any of it was sent.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let file = std::fs::File::open("upload.bin")?;
    /// let length = file.metadata()?.len();
    /// let body = switchyard_std::Body::from_reader(file, Some(length));
    /// # drop(body); Ok(()) }
    /// ```
    pub fn from_reader(reader: impl Read + Send + 'static, length: Option<u64>) -> Body {
        Body { kind: Kind::Stream(Box::new(reader)), length }
    }
}

// The same shape in every adapter's body: a buffer or a stream (`kind`), and
// the length a stream was declared with.
impl Body {
    /// The length, when known in advance (a buffer's, or the one a
    /// stream was declared with).
    #[must_use]
    pub fn len(&self) -> Option<u64> {
        self.kind.len().or(self.length)
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
impl From<bytes::Bytes> for Body {
    fn from(b: bytes::Bytes) -> Body {
        Self { kind: switchyard_common::BodyKind::full(b), length: None }
    }
}
impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Body {
        Body::from(bytes::Bytes::from(v))
    }
}
impl From<String> for Body {
    fn from(s: String) -> Body {
        Body::from(bytes::Bytes::from(s))
    }
}
impl From<&'static str> for Body {
    fn from(s: &'static str) -> Body {
        Body::from(bytes::Bytes::from_static(s.as_bytes()))
    }
}
impl From<&'static [u8]> for Body {
    fn from(s: &'static [u8]) -> Body {
        Body::from(bytes::Bytes::from_static(s))
    }
}
impl From<()> for Body {
    fn from((): ()) -> Body {
        Self { kind: switchyard_common::BodyKind::Empty, length: None }
    }
}
