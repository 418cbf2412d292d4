//! Request bodies: none, a buffer (replayable, so retries may resend it), or a
//! stream — fed through a channel, or any `http_body::Body` or
//! `futures_core::Stream` of bytes — sent once, never replayed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::sync::mpsc;

/// The error a streamed request body may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type PollChunk = Box<dyn FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> + Send>;

/// A streamed request body's source.
pub(crate) enum Stream {
    /// [`Body::channel`]'s receiving half.
    Channel(mpsc::Receiver<Bytes>),
    /// A wrapped `http_body::Body` or `Stream`: its next chunk, trailers skipped.
    Polled(PollChunk),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Channel(_) => "Channel",
            Stream::Polled(_) => "Polled",
        })
    }
}

impl Stream {
    /// The next chunk; `None` at the end.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        match self {
            Stream::Channel(rx) => rx.poll_recv(cx).map(|c| c.map(Ok)),
            Stream::Polled(poll) => poll(cx),
        }
    }
}

/// A request body.
///
/// ```
/// # use switchyard_async::Body;
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
    /// A stream's declared length (sent as `Content-Length`, held to it).
    pub(crate) length: Option<u64>,
}

/// What the body is: none, a buffer, or a stream.
pub(crate) type Kind = switchyard_common::BodyKind<Stream>;

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
    /// A copy of a buffered body (what a redirect resends); `None` for a
    /// stream, which cannot be read twice.
    #[must_use]
    pub fn try_clone(&self) -> Option<Body> {
        let kind = match &self.kind {
            Kind::Empty => Kind::Empty,
            Kind::Full(b) => Kind::Full(b.clone()),
            Kind::Stream(_) => return None,
        };
        Some(Body { kind, length: self.length })
    }

    /// No body.
    #[must_use]
    pub fn empty() -> Body {
        Body { kind: Kind::Empty, length: None }
    }

    /// A streaming body of unknown length (sent with chunked encoding on HTTP/1.1).
    #[must_use]
    pub fn channel() -> (BodySender, Body) {
        let (tx, rx) = mpsc::channel(8);
        (BodySender { tx }, Body { kind: Kind::Stream(Stream::Channel(rx)), length: None })
    }

    /// Any [`http_body::Body`] as a request body: streamed, sent once, never
    /// replayed on a retry — replayability stays explicit: buffer the bytes
    /// into a [`Body::from`] for that. A body whose size hint is exact is sent
    /// with that `Content-Length` and held to it (as [`Body::from_reader`]);
    /// any other is chunked on HTTP/1.1. A body that is already at its end is
    /// sent as no body. Request trailers are not sent. If the body fails, the exchange is abandoned (the HTTP/1.1
    /// connection closes, the HTTP/2 stream is reset) and the call fails with
    /// the body's error; it is never retried.
    ///
    /// ```
    /// # use switchyard_async::Body;
    /// let body = Body::wrap(http_body_util::Full::new(bytes::Bytes::from("hi")));
    /// assert!(!body.is_replayable());
    /// ```
    pub fn wrap<B>(body: B) -> Body
    where
        B: http_body::Body + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if body.is_end_stream() {
            return Body::empty();
        }
        let length = body.size_hint().exact();
        let mut body = Box::pin(body);
        let poll = move |cx: &mut Context<'_>| loop {
            return match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(mut data) => {
                        let n = data.remaining();
                        if n == 0 {
                            continue;
                        }
                        Poll::Ready(Some(Ok(data.copy_to_bytes(n))))
                    }
                    // Trailers (or another frame kind): not sent.
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        };
        Body { kind: Kind::Stream(Stream::Polled(Box::new(poll))), length }
    }

    /// A [`futures_core::Stream`] of byte chunks as a request body, like
    /// [`Body::wrap`] (streamed, never replayed; an error abandons the
    /// exchange and fails the call).
    ///
    /// ```
    /// # use switchyard_async::Body;
    /// # struct Two(u8);
    /// # impl futures_core::Stream for Two {
    /// #     type Item = Result<&'static str, std::io::Error>;
    /// #     fn poll_next(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
    /// #         self.0 += 1;
    /// #         std::task::Poll::Ready(match self.0 { 1 => Some(Ok("a")), 2 => Some(Ok("b")), _ => None })
    /// #     }
    /// # }
    /// let body = Body::from_stream(Two(0));
    /// assert_eq!(body.len(), None);
    /// ```
    pub fn from_stream<S, T, E>(stream: S) -> Body
    where
        S: futures_core::Stream<Item = Result<T, E>> + Send + 'static,
        T: Into<Bytes>,
        E: Into<BoxError>,
    {
        let mut stream = Box::pin(stream);
        let poll = move |cx: &mut Context<'_>| loop {
            return match stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    let chunk = chunk.into();
                    if chunk.is_empty() {
                        continue;
                    }
                    Poll::Ready(Some(Ok(chunk)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        };
        Body { kind: Kind::Stream(Stream::Polled(Box::new(poll))), length: None }
    }

    /// A body read from a tokio [`AsyncRead`](tokio::io::AsyncRead) (a
    /// `tokio::fs::File`, a pipe, a socket) until it ends, in chunks of up to
    /// 16 KiB as the connection takes them. With a `length` (a file's size,
    /// say) it goes out with that `Content-Length` and is held to it: a reader
    /// that ends short or runs long fails the call with
    /// [`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest) and the
    /// connection is not reused. Without one it is chunked on HTTP/1.1. Sent
    /// once, never replayed; a read error fails the call.
    ///
    /// ```no_run
    /// # use switchyard_async::Body;
    /// # async fn f() -> std::io::Result<()> {
    /// let file = tokio::fs::File::open("upload.bin").await?;
    /// let length = file.metadata().await?.len();
    /// let body = Body::from_reader(file, Some(length));
    /// assert_eq!(body.len(), Some(length));
    /// # Ok(()) }
    /// ```
    pub fn from_reader<R>(reader: R, length: Option<u64>) -> Body
    where
        R: tokio::io::AsyncRead + Send + 'static,
    {
        Body { length, ..Body::from_stream(tokio_util::io::ReaderStream::with_capacity(reader, READ_CHUNK)) }
    }

    /// [`Body::from_reader`] for a [`futures_io::AsyncRead`] (smol's and
    /// async-std's files, pipes and sockets).
    ///
    /// ```no_run
    /// # use switchyard_async::Body;
    /// # async fn f() -> std::io::Result<()> {
    /// # let file = futures_io_file();
    /// # fn futures_io_file() -> &'static [u8] { b"" } // any futures_io::AsyncRead
    /// let body = Body::from_futures_reader(file, None);
    /// # drop(body); Ok(()) }
    /// ```
    pub fn from_futures_reader<R>(reader: R, length: Option<u64>) -> Body
    where
        R: futures_io::AsyncRead + Send + 'static,
    {
        use tokio_util::compat::FuturesAsyncReadCompatExt as _;
        Body::from_reader(reader.compat(), length)
    }

    /// Any request body a tower stack hands over: this crate's [`Body`] as
    /// it is (a buffer stays replayable), anything else through
    /// [`Body::wrap`].
    pub(crate) fn from_any<B>(body: B) -> Body
    where
        B: http_body::Body + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let mut slot = Some(body);
        if let Some(ours) = (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<Body>>() {
            return ours.take().unwrap_or_default();
        }
        match slot {
            Some(b) => Body::wrap(b),
            None => Body::empty(),
        }
    }
}

/// How much a reader body reads at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A tokio file, streamed (chunked: its length is not known without asking
/// the file system; [`Body::from_reader`] takes it for a `Content-Length`).
/// On with the tokio adapter (feature `tokio-fs` here).
#[cfg(feature = "tokio-fs")]
impl From<tokio::fs::File> for Body {
    fn from(file: tokio::fs::File) -> Body {
        Body::from_reader(file, None)
    }
}

/// A smol (async-fs) file, streamed as a tokio file is. Needs the
/// `async-fs` feature (on in switchyard-smol).
#[cfg(feature = "async-fs")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-fs")))]
impl From<async_fs::File> for Body {
    fn from(file: async_fs::File) -> Body {
        Body::from_futures_reader(file, None)
    }
}

/// A request [`Body`] is an [`http_body::Body`] too, so it can travel through
/// tower middleware to the client's `Service` impl (which takes it back as it
/// is, replayable buffer included).
impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(_) => match std::mem::take(&mut this.kind) {
                Kind::Full(b) => Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
                _ => Poll::Ready(None),
            },
            Kind::Stream(s) => s.poll_chunk(cx).map(|c| c.map(|r| r.map(http_body::Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Empty)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.len() {
            Some(n) => http_body::SizeHint::with_exact(n),
            None => http_body::SizeHint::default(),
        }
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
