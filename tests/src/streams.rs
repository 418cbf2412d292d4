//! A cleartext hyper server (HTTP/1.1 and HTTP/2 prior knowledge) whose bodies
//! stream and never sit whole in memory, for the gateway's bounded-memory and
//! trailer checks:
//!
//! - `POST /sink`: reads the request body to its end, answers how many bytes;
//! - `GET /source/N`: N bytes of `x` in 64 KiB chunks, made as they are sent;
//! - `GET /trailers`: `abc`, then the trailer `x-checksum: 42`;
//! - `POST /echo`: the request body streamed back as it arrives.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

type Streamed = http_body_util::combinators::BoxBody<Bytes, hyper::Error>;

/// `N` bytes made as they are polled, in 64 KiB chunks; then optional trailers.
#[derive(Debug)]
pub struct Generated {
    left: u64,
    chunk: Bytes,
    trailers: Option<HeaderMap>,
}

impl Generated {
    /// `n` bytes of `x`.
    #[must_use]
    pub fn new(n: u64) -> Generated {
        Generated { left: n, chunk: Bytes::from(vec![b'x'; 64 * 1024]), trailers: None }
    }
}

impl Body for Generated {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
        }
        let n = this.left.min(this.chunk.len() as u64);
        this.left -= n;
        Poll::Ready(Some(Ok(Frame::data(this.chunk.slice(..usize::try_from(n).unwrap_or(0))))))
    }
    fn is_end_stream(&self) -> bool {
        self.left == 0 && self.trailers.is_none()
    }
    fn size_hint(&self) -> SizeHint {
        if self.trailers.is_some() {
            return SizeHint::default();
        }
        SizeHint::with_exact(self.left)
    }
}

/// A running stream server; stopped (its connections closed) when dropped.
#[derive(Debug)]
pub struct StreamServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StreamServer {
    /// Serves on `127.0.0.1:0`.
    #[must_use]
    pub fn start() -> StreamServer {
        StreamServer::start_on(std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback"))
    }

    /// Serves on a listener the test bound.
    #[must_use]
    pub fn start_on(listener: std::net::TcpListener) -> StreamServer {
        let addr = listener.local_addr().expect("local addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let mut stopped = std::pin::pin!(stopped);
                loop {
                    let stream = tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => stream,
                            Err(_) => continue,
                        },
                    };
                    tokio::spawn(async move {
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        let service =
                            hyper::service::service_fn(
                                |r| async move { Ok::<_, Infallible>(answer(r).await) },
                            );
                        let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                    });
                }
            });
            rt.shutdown_background();
        });
        StreamServer { addr, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for StreamServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn answer(request: Request<Incoming>) -> Response<Streamed> {
    let path = request.uri().path().to_owned();
    let boxed = |b: Generated| b.map_err(|never| match never {}).boxed();
    if path == "/sink" {
        let mut body = request.into_body();
        let mut n = 0u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => n += frame.data_ref().map_or(0, |d| d.len() as u64),
                Err(_) => break,
            }
        }
        return Response::new(
            http_body_util::Full::new(Bytes::from(n.to_string())).map_err(|never| match never {}).boxed(),
        );
    }
    if path == "/echo" {
        return Response::new(request.into_body().boxed());
    }
    if path == "/trailers" {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
        let mut body = Generated::new(0);
        body.chunk = Bytes::from_static(b"abc");
        body.left = 3;
        body.trailers = Some(trailers);
        return Response::new(boxed(body));
    }
    if let Some(n) = path.strip_prefix("/source/").and_then(|n| n.parse::<u64>().ok()) {
        return Response::new(boxed(Generated::new(n)));
    }
    let mut response = Response::new(boxed(Generated::new(0)));
    *response.status_mut() = http::StatusCode::NOT_FOUND;
    response
}
