//! Request bodies: none, a buffer (replayable, so retries may resend it), or a
//! stream fed through a channel (sent once, never replayed).

use bytes::Bytes;
use tokio::sync::mpsc;

/// A request body.
///
/// ```
/// use switchyard_async::Body;
/// let empty = Body::empty();
/// let full = Body::from("hello");
/// assert_eq!(full.len(), Some(5));
/// assert!(full.is_replayable() && empty.is_replayable());
/// let (sender, streaming) = Body::channel();
/// assert_eq!(streaming.len(), None);
/// # drop(sender);
/// ```
#[derive(Debug, Default)]
pub struct Body {
    pub(crate) kind: Kind,
}

#[derive(Debug, Default)]
pub(crate) enum Kind {
    #[default]
    Empty,
    Full(Bytes),
    Stream(mpsc::Receiver<Bytes>),
}

/// The sending half of [`Body::channel`]: each `send` is one chunk; dropping it
/// ends the body.
#[derive(Debug, Clone)]
pub struct BodySender {
    tx: mpsc::Sender<Bytes>,
}

impl BodySender {
    /// Sends one chunk; waits while the connection is busy writing earlier ones.
    /// Fails when the request was abandoned.
    pub async fn send(&self, chunk: impl Into<Bytes>) -> Result<(), BodyClosed> {
        self.tx.send(chunk.into()).await.map_err(|_| BodyClosed)
    }
}

/// The request no longer reads its body (it failed or was cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyClosed;

impl std::fmt::Display for BodyClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body is no longer being read")
    }
}

impl std::error::Error for BodyClosed {}

impl Body {
    /// No body.
    #[must_use]
    pub fn empty() -> Body {
        Body { kind: Kind::Empty }
    }

    /// A streaming body of unknown length (sent with chunked encoding on HTTP/1.1).
    #[must_use]
    pub fn channel() -> (BodySender, Body) {
        let (tx, rx) = mpsc::channel(8);
        (BodySender { tx }, Body { kind: Kind::Stream(rx) })
    }

    /// The length, when known in advance.
    #[must_use]
    pub fn len(&self) -> Option<u64> {
        match &self.kind {
            Kind::Empty => Some(0),
            Kind::Full(b) => Some(b.len() as u64),
            Kind::Stream(_) => None,
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
        !matches!(self.kind, Kind::Stream(_))
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
