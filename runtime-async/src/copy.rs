//! Copying a response body out: into an async writer ([`ResponseBody::copy_to`],
//! [`ResponseBody::copy_to_futures`]) or into a file ([`ResponseBody::save_to`]).
//!
//! What makes a download to a file fast is the size of each write, not the
//! copy loop: `tokio::fs::File` hands every `write` to the blocking pool, so
//! `tokio::io::copy`'s 8 KiB writes cost a thread hand-off per 8 KiB. Here the
//! chunks that are already there are gathered (up to [`BATCH`]) and written
//! together, and whatever is buffered is written as soon as the network has
//! nothing more at hand, so a slow trickle is not held back.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use switchyard_common::{BodyError, Error, ErrorKind};
use tokio::io::AsyncWriteExt;

use crate::response::ResponseBody;

/// The most a write gathers: enough that a file write costs one blocking
/// hand-off per MiB, little enough to stay out of the way of memory.
pub(crate) const BATCH: usize = 1 << 20;

/// What the body has for the writer now.
enum Step {
    Chunk(Bytes),
    /// Nothing at hand (more may come): write what is gathered.
    Idle,
    End,
}

/// Gathers chunks that are at hand into one batch.
struct Batcher {
    buf: BytesMut,
    /// A chunk held whole (nothing gathered beside it): written without a copy.
    whole: Option<Bytes>,
    /// The body ended: what is gathered is the last batch.
    ended: bool,
}

impl Batcher {
    fn new() -> Batcher {
        Batcher { buf: BytesMut::new(), whole: None, ended: false }
    }

    fn len(&self) -> usize {
        self.whole.as_ref().map_or(self.buf.len(), Bytes::len)
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a chunk; `true` when the batch is full.
    fn push(&mut self, chunk: Bytes) -> bool {
        if self.is_empty() {
            self.whole = Some(chunk);
        } else {
            if let Some(first) = self.whole.take() {
                self.buf.reserve(BATCH.max(first.len() + chunk.len()));
                self.buf.extend_from_slice(&first);
            }
            self.buf.extend_from_slice(&chunk);
        }
        self.len() >= BATCH
    }

    /// The batch, to write; the batcher is empty after.
    fn take(&mut self) -> Bytes {
        match self.whole.take() {
            Some(whole) => whole,
            None => self.buf.split().freeze(),
        }
    }
}

impl ResponseBody {
    /// The next step for a writer: a chunk, or `Idle` when nothing is at hand
    /// and `gathered` bytes wait to be written.
    async fn step(&mut self, gathered: bool) -> Result<Step, Error> {
        std::future::poll_fn(|cx| match self.poll_chunk(cx) {
            Poll::Ready(Ok(Some(chunk))) => Poll::Ready(Ok(Step::Chunk(chunk))),
            Poll::Ready(Ok(None)) => Poll::Ready(Ok(Step::End)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if gathered => Poll::Ready(Ok(Step::Idle)),
            Poll::Pending => Poll::Pending,
        })
        .await
    }

    /// The next batch to write: full, or all there is while the network has
    /// nothing more at hand, or the last; `None` once all was handed out.
    async fn next_batch(&mut self, batch: &mut Batcher) -> Result<Option<Bytes>, Error> {
        loop {
            if batch.ended {
                return Ok((!batch.is_empty()).then(|| batch.take()));
            }
            match self.step(!batch.is_empty()).await? {
                Step::Chunk(chunk) => {
                    if batch.push(chunk) {
                        return Ok(Some(batch.take()));
                    }
                }
                Step::Idle => return Ok(Some(batch.take())),
                Step::End => batch.ended = true,
            }
        }
    }

    /// Copies the rest of the body into `out`, a tokio writer (a
    /// `tokio::fs::File`, a socket, a `Vec<u8>`), flushes it, and returns
    /// how many bytes were written. Chunks already received are written
    /// together (up to 1 MiB per write): into a `tokio::fs::File` this is
    /// several times faster than `tokio::io::copy` from
    /// [`into_reader`](ResponseBody::into_reader), whose 8 KiB writes each
    /// cost a trip to tokio's blocking pool. A writer of futures-io (smol,
    /// async-std): [`copy_to_futures`](ResponseBody::copy_to_futures); a file
    /// by its path on any runtime: [`save_to`](ResponseBody::save_to).
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`]; the writer's failure is
    /// [`BodyError::Sink`] (drop the response then: its connection closes).
    pub async fn copy_to<W>(&mut self, out: &mut W) -> Result<u64, Error>
    where
        W: tokio::io::AsyncWrite + Unpin + ?Sized,
    {
        let mut batch = Batcher::new();
        let mut written = 0u64;
        while let Some(bytes) = self.next_batch(&mut batch).await? {
            if let Err(e) = out.write_all(&bytes).await {
                return Err(self.sink_failed(e));
            }
            written += bytes.len() as u64;
        }
        out.flush().await.map_err(|e| self.sink_failed(e))?;
        Ok(written)
    }

    /// [`copy_to`](ResponseBody::copy_to) for a futures-io writer
    /// (`async_fs::File` with smol or async-std, `Vec<u8>`, a socket).
    ///
    /// # Errors
    /// As [`copy_to`](ResponseBody::copy_to).
    pub async fn copy_to_futures<W>(&mut self, out: &mut W) -> Result<u64, Error>
    where
        W: futures_io::AsyncWrite + Unpin + ?Sized,
    {
        use tokio_util::compat::FuturesAsyncWriteCompatExt;
        let mut out = (&mut *out).compat_write();
        self.copy_to(&mut out).await
    }

    /// Saves the rest of the body into the file at `path` (created, or
    /// truncated if it exists) and returns how many bytes were written. On
    /// any runtime: the file is written by a thread of its own with the
    /// standard library's file I/O while the body keeps arriving, in writes
    /// of up to 1 MiB. When the body fails midway the file holds what
    /// arrived (as `curl -o` leaves it).
    ///
    /// ```no_run
    /// # async fn run(client: switchyard_async::Client<impl switchyard_async::Runtime>) -> Result<(), switchyard_async::Error> {
    /// let mut response = client.get("http://127.0.0.1:8080/big.iso").send().await?.error_for_status()?;
    /// let bytes = response.save_to("big.iso").await?;
    /// println!("{bytes} bytes saved");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ResponseBody::poll_chunk`]; the file's failure (it cannot be
    /// created, the disk is full) is [`BodyError::Sink`] naming the path.
    pub async fn save_to(&mut self, path: impl AsRef<Path>) -> Result<u64, Error> {
        let path = path.as_ref().to_owned();
        // A few batches in flight: the network never waits on the disk
        // unless the disk is the slower.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<io::Result<u64>>();
        let named = |e: io::Error, path: &Path| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let writer = move || {
            use std::io::Write;
            let result = (|| {
                let mut file = std::fs::File::create(&path).map_err(|e| named(e, &path))?;
                let mut written = 0u64;
                while let Some(bytes) = rx.blocking_recv() {
                    file.write_all(&bytes).map_err(|e| named(e, &path))?;
                    written += bytes.len() as u64;
                }
                file.flush().map_err(|e| named(e, &path))?;
                Ok(written)
            })();
            let _ = done_tx.send(result);
        };
        if let Err(e) = std::thread::Builder::new().name("switchyard-save".into()).spawn(writer) {
            return Err(self.sink_failed(e));
        }
        let mut batch = Batcher::new();
        let outcome: Result<(), Error> = async {
            while let Some(bytes) = self.next_batch(&mut batch).await? {
                // The writer gone: its failure comes back below.
                if tx.send(bytes).await.is_err() {
                    break;
                }
            }
            Ok(())
        }
        .await;
        drop(tx);
        let saved = done_rx.await.unwrap_or_else(|_| Err(io::Error::other("the file writer stopped")));
        outcome?;
        saved.map_err(|e| self.sink_failed(e))
    }

    /// The writer failed: the error names the call's URL (dropping the
    /// body then closes its connection, as for any body left unread).
    fn sink_failed(&self, e: io::Error) -> Error {
        self.ledger.about(Error::from(ErrorKind::Body(BodyError::Sink(Arc::new(e)))))
    }
}
