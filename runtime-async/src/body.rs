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

/// What the body is: none, a buffer, or a channel's receiving half.
pub(crate) type Kind = switchyard_common::BodyKind<mpsc::Receiver<Bytes>>;

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
}

switchyard_common::request_body!(Body);
