//! One owner for a call's rules, written once for every adapter: the bounds
//! its exchanges apply, the target form and head of each HTTP/1.1 attempt, a
//! proxy's own 407, and what the pool's verdict on a failed exchange means for
//! the call — a retry, the exchange's error, or the call's timeout when the
//! core says its deadline passed (the core's rule; adapters do not check the
//! clock a second time). An adapter supplies only how to wait: for the pool's
//! answer, and for the exchange's I/O.
//!
//! ```ignore
//! let owner = CallOwner::new(call, &plan);
//! loop {
//!     let lease = wait_for_the_pool().await?;           // the adapter's wait
//!     let attempt = run_the_exchange(&owner, lease).await; // the adapter's I/O
//!     let failure = match owner.answered(attempt) {
//!         Ok(done) => return done,
//!         Err(failure) => failure,
//!     };
//!     owner.after_failure(shared.exchange_failed(call, failure, tx))?; // retrying
//! }
//! ```

use std::borrow::Cow;
use std::time::Duration;

use switchyard_core::pool::{ExchangeFailure, RequestFacts};
use switchyard_core::pool::{NoRetry, RetryReason};
use switchyard_core::{http1, CallId, ConnectionId, FailureOutcome, Misuse, Pool, Proxy};

use crate::engine::{Call, CallPlan};
use crate::exchange::Attempted;
use crate::{Error, TimeoutPhase};

/// A call's rules across its attempts (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct CallOwner {
    call: CallId,
    facts: RequestFacts,
    deadline: Option<std::time::Instant>,
    call_deadline: Option<std::time::Instant>,
    body_timeout: Option<Duration>,
}

/// One HTTP/1.1 attempt's request line form and head (with a proxy's
/// credentials when it goes through an HTTP proxy), and that proxy.
#[derive(Debug)]
pub struct H1Target<'p> {
    form: http1::TargetForm,
    head: Cow<'p, http::request::Parts>,
    via: Option<Proxy>,
}

impl CallOwner {
    /// The owner of `call`, planned as `plan`.
    #[must_use]
    pub fn new(call: CallId, plan: &CallPlan) -> CallOwner {
        CallOwner {
            call,
            facts: plan.facts,
            deadline: plan.deadline,
            call_deadline: plan.call_deadline,
            body_timeout: plan.body_timeout,
        }
    }

    /// The call.
    #[must_use]
    pub fn call(&self) -> CallId {
        self.call
    }

    /// What the request allows (retries).
    #[must_use]
    pub fn facts(&self) -> RequestFacts {
        self.facts
    }

    /// Until the response head.
    #[must_use]
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// The whole call, its body included.
    #[must_use]
    pub fn call_deadline(&self) -> Option<std::time::Instant> {
        self.call_deadline
    }

    /// The response body, from its head.
    #[must_use]
    pub fn body_timeout(&self) -> Option<Duration> {
        self.body_timeout
    }

    /// The call's bounds on the waits of an HTTP/2 stream, on the core's
    /// clock (`from_std` converts): its head deadline, its whole deadline,
    /// its body timeout, and the client's read and write timeouts.
    #[must_use]
    pub fn stream_limits(
        &self,
        from_std: impl Fn(std::time::Instant) -> switchyard_core::Instant,
        read_timeout: Option<Duration>,
        write_timeout: Option<Duration>,
    ) -> switchyard_core::http2::StreamLimits {
        switchyard_core::http2::StreamLimits {
            head_deadline: self.deadline.map(&from_std),
            call_deadline: self.call_deadline.map(&from_std),
            read_timeout,
            write_timeout,
            body_timeout: self.body_timeout,
        }
    }

    /// The form and head of an HTTP/1.1 attempt on `connection` (read from
    /// the pool: absolute form through an HTTP proxy).
    #[must_use]
    pub fn h1_target<'p>(
        &self,
        pool: &Pool,
        connection: ConnectionId,
        parts: &'p http::request::Parts,
    ) -> H1Target<'p> {
        let (form, head, via) = crate::engine::target_form(pool, connection, parts);
        H1Target { form, head, via }
    }

    /// The request as the HTTP/1.1 exchange takes it.
    #[must_use]
    pub fn h1_call<'a>(&self, target: &'a H1Target<'_>, body_len: Option<u64>) -> Call<'a> {
        Call {
            parts: &target.head,
            form: target.form,
            body_len,
            facts: self.facts,
            deadline: self.deadline,
            call_deadline: self.call_deadline,
            body_timeout: self.body_timeout,
        }
    }

    /// How an attempt ended: `Ok` ends the call (its response, or an error no
    /// retry can mend — a proxy's own 407 among them, named), `Err` is a
    /// failure the pool must hear.
    ///
    /// # Errors
    /// The exchange failed: report it to the pool, then [`CallOwner::after_failure`].
    pub fn answered<B>(
        &self,
        attempt: Result<http::Response<B>, Attempted>,
        via: Option<&Proxy>,
    ) -> Result<Result<http::Response<B>, Error>, ExchangeFailure> {
        match attempt {
            Ok(response) => Ok(crate::engine::proxy_answer(response, via)),
            Err(Attempted::Fatal(e)) => Ok(Err(e)),
            Err(Attempted::Failed(failure)) => Err(failure),
        }
    }

    /// What the pool's verdict on a failed exchange means for the call: `Ok`
    /// it is being retried (wait for the next answer), `Err` its error — the
    /// call's timeout (response-head phase) when the core says the deadline
    /// passed ([`NoRetry::DeadlinePassed`]), the exchange's error otherwise.
    ///
    /// # Errors
    /// The call ends with this error.
    pub fn after_failure(&self, outcome: Result<FailureOutcome, Misuse>) -> Result<RetryReason, Error> {
        match outcome {
            Ok(FailureOutcome::Retrying(reason)) => {
                tracing::debug!(call = %self.call, ?reason, "retrying");
                Ok(reason)
            }
            Ok(FailureOutcome::Failed(e)) if e.why == NoRetry::DeadlinePassed => {
                Err(Error::timeout(TimeoutPhase::ResponseHead))
            }
            Ok(FailureOutcome::Failed(e)) => Err(Error::exchange(e)),
            Err(misuse) => Err(Error::internal(misuse)),
        }
    }
}

impl H1Target<'_> {
    /// The HTTP proxy the attempt goes through (its 407 is its own).
    #[must_use]
    pub fn via(&self) -> Option<&Proxy> {
        self.via.as_ref()
    }

    /// The proxy the request goes through, keeping nothing else of the
    /// target (once the head is encoded).
    #[must_use]
    pub fn into_via(self) -> Option<Proxy> {
        self.via
    }
}
