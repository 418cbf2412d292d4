//! Following redirects (the `redirect` feature), on tower-http's
//! `FollowRedirect`: `ClientBuilder::redirect(Policy::limited(10))`.
//!
//! Redirects are **not followed by default**, even with the feature on (a
//! feature turned on elsewhere in the dependency graph must not change what a
//! client does); `redirect` turns it on per client. Each hop is a call of its
//! own on the same pool, so a same-origin hop reuses the pooled connection.
//! tower-http's rules apply: 301/302 turn a POST into a GET, 303 turns every
//! method but HEAD into a GET (without the body), 307/308 keep the method and
//! resend the body when it is a buffer (a stream cannot be replayed: the
//! redirect response is returned as it is); `Authorization`, `Cookie` and
//! `Proxy-Authorization` are dropped on a hop to another origin. A redirect
//! past the limit fails the call with [`ErrorKind::Redirect`](crate::ErrorKind::Redirect)
//! (reqwest's "error following redirect"): a 3xx never passes for the answer
//! when the policy says to follow it. The response's final URL is
//! `Response::url`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{BoxFuture, Error, ResponseBody};

pub use switchyard_common::redirect::{Layers, Policy};

type Answer = Result<http::Response<ResponseBody>, Error>;

/// A service that sends a client's calls (the client, or a layer over it).
pub(crate) trait Call:
    tower_service::Service<
        http::Request<crate::Body>,
        Response = http::Response<ResponseBody>,
        Error = Error,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> Call for S where
    S: tower_service::Service<
            http::Request<crate::Body>,
            Response = http::Response<ResponseBody>,
            Error = Error,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

/// Sends `request` through `service` under `layers`.
pub(crate) fn layered<S>(service: S, layers: Layers, request: http::Request<crate::Body>) -> BoxFuture<Answer>
where
    S: Call + Clone,
{
    #[cfg(feature = "decompression")]
    if layers.decode != 0 {
        return follow(Decoding { inner: service, decode: layers.decode }, layers.redirects, request);
    }
    follow(service, layers.redirects, request)
}

/// Follows up to `max` redirects (only with the feature; `max` is 0 without).
fn follow<S>(mut service: S, max: usize, request: http::Request<crate::Body>) -> BoxFuture<Answer>
where
    S: Call + Clone,
{
    #[cfg(feature = "redirect")]
    if max > 0 {
        use tower_http::follow_redirect::policy::{clone_body_fn, FilterCredentials, PolicyExt};
        use tower_http::follow_redirect::FollowRedirect;
        let policy = Hops { left: max, max }
            .and::<_, crate::Body, Error>(FilterCredentials::new())
            .and::<_, crate::Body, Error>(clone_body_fn(crate::Body::try_clone));
        let mut service = FollowRedirect::with_policy(service, policy);
        // The client's service is always ready (poll_ready is `Ready(Ok)`).
        return Box::pin(tower_service::Service::call(&mut service, request));
    }
    let _ = max;
    Box::pin(service.call(request))
}

/// At most `max` hops; the one past them fails the call (tower-http's own
/// `Limited` returns the last 3xx as if it were the answer).
#[cfg(feature = "redirect")]
#[derive(Clone, Copy, Debug)]
struct Hops {
    left: usize,
    max: usize,
}

#[cfg(feature = "redirect")]
impl<B> tower_http::follow_redirect::policy::Policy<B, Error> for Hops {
    fn redirect(
        &mut self,
        attempt: &tower_http::follow_redirect::policy::Attempt<'_>,
    ) -> Result<tower_http::follow_redirect::policy::Action, Error> {
        if self.left == 0 {
            let why = format!(
                "more than {} redirect{} ({} to {})",
                self.max,
                if self.max == 1 { "" } else { "s" },
                attempt.status().as_u16(),
                switchyard_common::redact(&attempt.location().to_string()),
            );
            return Err(Error::from(switchyard_common::ErrorKind::Redirect(why))
                .with_url(&attempt.previous().to_string()));
        }
        self.left -= 1;
        Ok(tower_http::follow_redirect::policy::Action::Follow)
    }
}

/// tower-http's Decompression over the client, its body back in a
/// [`ResponseBody`] (so a decoding client answers the same type).
#[cfg(feature = "decompression")]
#[derive(Clone)]
struct Decoding<S> {
    inner: S,
    decode: u8,
}

#[cfg(feature = "decompression")]
impl<S> tower_service::Service<http::Request<crate::Body>> for Decoding<S>
where
    S: Call,
{
    type Response = http::Response<ResponseBody>;
    type Error = Error;
    type Future = BoxFuture<Answer>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, request: http::Request<crate::Body>) -> Self::Future {
        let uri = request.uri().clone();
        let mut service = tower_http::decompression::Decompression::new(&mut self.inner)
            .gzip(self.decode & Layers::GZIP != 0)
            .deflate(self.decode & Layers::DEFLATE != 0)
            .br(self.decode & Layers::BROTLI != 0);
        let future = service.call(request);
        Box::pin(async move {
            let response = future.await?;
            Ok(response.map(|body| ResponseBody::decoded(body, &uri)))
        })
    }
}

pin_project_lite::pin_project! {
    /// A call's future: sent directly, or through the redirect follower.
    #[project = SendProj]
    pub(crate) enum SendFuture<F> {
        Direct { #[pin] future: F },
        Following { future: BoxFuture<Answer> },
    }
}

impl<F: Future<Output = Answer>> Future for SendFuture<F> {
    type Output = Result<crate::Response, Error>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = match self.project() {
            SendProj::Direct { future } => std::task::ready!(future.poll(cx)),
            SendProj::Following { future } => std::task::ready!(future.as_mut().poll(cx)),
        };
        Poll::Ready(answer.map(crate::Response::from))
    }
}
