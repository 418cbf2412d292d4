//! How an exchange ends: finished (the connection's reuse verdict), failed (the
//! retry decision, route memory, the connection's fate), or its connection
//! closed by the peer; and the release that follows.

use super::*;

impl Pool {
    /// The call's exchange ended. `reuse` says whether its connection may carry
    /// another. The call is over.
    pub fn exchange_finished(&mut self, now: Instant, call: CallId, reuse: Reuse) -> Result<(), Misuse> {
        // One lookup on the common path; a misuse puts the call back.
        let c = self.calls.remove(&call).ok_or(Misuse::NoExchange(call))?;
        let CallState::Active { connection, .. } = c.state else {
            self.calls.insert(call, c);
            return Err(Misuse::NoExchange(call));
        };
        // One branch when no route has a failure streak.
        if self.db.tracks_failures() && !c.server_error {
            if let Some(conn) = self.conns.get(&connection) {
                self.db.exchange_succeeded(&conn.route, now);
            }
            self.apply_outliers(now);
        }
        self.release(now, call, connection, reuse, true);
        Ok(())
    }

    /// The call's exchange failed. The pool updates the connection (failed route,
    /// REFUSED_STREAM count, no-coalescing after 421, no new exchanges after a
    /// failure) and decides: retry (a new [`PoolAction::Acquired`] follows for the
    /// same call) or fail with an error that says whether the request may have been
    /// sent.
    pub fn exchange_failed(
        &mut self,
        now: Instant,
        call: CallId,
        failure: ExchangeFailure,
    ) -> Result<FailureOutcome, Misuse> {
        let conn_id = self.active_connection(call)?;
        let mut failure = failure;
        self.never_answered_as_http2(conn_id, &mut failure);
        let (ctx, route) = self.retry_context(call, conn_id);
        let mut decision = decide(&failure, &ctx);
        // The call's deadline passed: no retry is started, and that is why the
        // call fails, whatever else the failure says (the adapters report it
        // as the call's timeout on this verdict alone).
        let deadline_passed = self.calls[&call].options.deadline.is_some_and(|d| now >= d);
        if deadline_passed {
            let may_have_been_sent = match decision {
                RetryDecision::Fail { may_have_been_sent, .. } => may_have_been_sent,
                _ => may_have_been_sent(&failure),
            };
            decision = RetryDecision::Fail { why: NoRetry::DeadlinePassed, may_have_been_sent };
        }
        if let RetryDecision::SameConnection(reason) | RetryDecision::NewConnection { reason, .. } = decision
        {
            if let Err(why) = self.admit_retry(now, call, reason) {
                decision = RetryDecision::Fail { why, may_have_been_sent: may_have_been_sent(&failure) };
            }
        }
        let retire = self.judge_connection(now, call, conn_id, &failure, &ctx);
        self.emit(now, Some(call), EventKind::RetryDecision { connection: conn_id, decision });
        let reuse = retire.map_or(Reuse::Reusable, Reuse::Retire);
        let (reason, same_connection, fresh) = match decision {
            RetryDecision::Fail { why, may_have_been_sent } => {
                self.calls.remove(&call);
                self.release(now, call, conn_id, reuse, false);
                // After the release: the failed connection closes for its
                // failure, not for its route's ejection.
                self.apply_outliers(now);
                return Ok(FailureOutcome::Failed(ExchangeError {
                    kind: failure.kind,
                    may_have_been_sent,
                    why,
                    connection: conn_id,
                    route,
                    retries: ctx.retries,
                }));
            }
            RetryDecision::SameConnection(reason) => (reason, true, false),
            RetryDecision::NewConnection { reason, fresh } => (reason, false, fresh),
        };
        self.release(now, call, conn_id, reuse, false);
        // Before the retry plans its routes.
        self.apply_outliers(now);
        self.retry(now, call, conn_id, reason, same_connection, fresh);
        Ok(FailureOutcome::Retrying(reason))
    }

    /// Whether a retry the rules allow may run: not during a shutdown
    /// (nothing new is opened or shared then), and not past the call's
    /// Address's budget. A free retry (a stream a GOAWAY left unprocessed, a
    /// refusal beyond the advertised limit) is a healthy server rotating
    /// connections, not a failure: it is counted, never refused (nginx's
    /// `keepalive_requests` would otherwise fail calls the server never saw).
    fn admit_retry(&mut self, now: Instant, call: CallId, reason: RetryReason) -> Result<(), NoRetry> {
        if self.shutdown {
            return Err(NoRetry::Shutdown);
        }
        let allowed = match self.config.retry_budget {
            Some(budget) if !reason.is_free() => {
                let address = &self.calls[&call].address;
                self.addrs.get_mut(address).is_none_or(|a| a.budget.withdraw(now, &budget))
            }
            _ => true,
        };
        if allowed {
            self.stats.retries += 1;
            self.count_for(call, |c| c.retries += 1);
            Ok(())
        } else {
            self.stats.retries_over_budget += 1;
            self.count_for(call, |c| c.retries_over_budget += 1);
            Err(NoRetry::RetryBudget)
        }
    }

    /// Updates the counters of the call's Address.
    fn count_for(&mut self, call: CallId, f: impl FnOnce(&mut stats::AddressCounters)) {
        if let Some(a) = self.calls.get(&call).and_then(|c| self.addrs.get_mut(&c.address)) {
            f(&mut a.counters);
        }
    }

    /// A connection that failed before the server's first SETTINGS never
    /// answered as an HTTP/2 server (an HTTP/1.1 server given prior knowledge
    /// answers with a 400, or closes). The first stream goes out right after
    /// the handshake, so whether it had been written when the failure surfaced
    /// is only timing: one classification for it, a protocol error, not
    /// retried, "may have been sent" (the safe claim).
    fn never_answered_as_http2(&self, conn_id: ConnectionId, failure: &mut ExchangeFailure) {
        use ExchangeFailureKind as K;
        let c = &self.conns[&conn_id];
        if c.multiplexed() && !c.settings && matches!(failure.kind, K::Io { .. } | K::Protocol { .. }) {
            let message = format!(
                "the server did not answer as an HTTP/2 server (no SETTINGS frame before: {}); it may speak only HTTP/1.1",
                failure.kind
            );
            failure.kind = K::Protocol { message };
            failure.progress = Progress::RequestWritten;
        }
    }

    /// What [`decide`] needs besides the failure, with the connection's route.
    fn retry_context(&self, call: CallId, conn_id: ConnectionId) -> (RetryContext, Route) {
        let conn = &self.conns[&conn_id];
        let c = &self.calls[&call];
        let early_stream = match c.state {
            CallState::Active { early_stream, .. } => early_stream,
            _ => None,
        };
        // Opened before SETTINGS, beyond the limit those SETTINGS then set.
        let beyond_limit = early_stream.is_some_and(|n| conn.settings && n > conn.stream_limit);
        let ctx = RetryContext {
            reused: conn.completed > 0,
            refusals_before: conn.refusals,
            refused_elsewhere: c.learned().refused_on.iter().any(|c| *c != conn_id),
            beyond_limit,
            retries: c.retries,
            max_retries: self.config.max_retries,
            free_retries: c.free_retries,
            max_free_retries: self.config.max_free_retries,
        };
        (ctx, conn.route.clone())
    }

    /// What the failure says about the connection (`Some`: it retires, for
    /// that reason) and its route (marked failed in the route database when
    /// the connection never completed an exchange).
    fn judge_connection(
        &mut self,
        now: Instant,
        call: CallId,
        conn_id: ConnectionId,
        failure: &ExchangeFailure,
        ctx: &RetryContext,
    ) -> Option<CloseReason> {
        use ExchangeFailureKind as K;
        let kind = &failure.kind;
        let (route, multiplexed) = {
            let c = &self.conns[&conn_id];
            (c.route.clone(), c.multiplexed())
        };
        match kind {
            K::Io { .. } | K::Protocol { .. } => {
                if !ctx.reused {
                    // Never completed an exchange: the route is suspect.
                    self.db.failed(&route, now);
                } else if failure.progress == Progress::ResponseStarted {
                    // A reused connection that failed mid-response: the
                    // route's (failing before any response byte is the
                    // stale keep-alive race, nobody's fault).
                    self.db.exchange_failed(&route, now);
                }
                Some(CloseReason::Failure)
            }
            K::Timeout => {
                if !ctx.reused {
                    // A connection that never completed an exchange and timed
                    // out: its route is as suspect as after an I/O failure.
                    self.db.failed(&route, now);
                } else if failure.progress != Progress::NothingWritten {
                    // A reused connection whose server took the request and
                    // stalled: the route's.
                    self.db.exchange_failed(&route, now);
                }
                // HTTP/2: the PING decides about the connection (stream_stalled).
                (!multiplexed).then_some(CloseReason::Failure)
            }
            // A stream opened before the server's SETTINGS: not the server's fault.
            K::RefusedStream if ctx.beyond_limit => None,
            K::RefusedStream => {
                self.update(conn_id, |c| c.refusals += 1);
                let c = self.calls.get_mut(&call).expect("call exists");
                if !c.learned().refused_on.contains(&conn_id) {
                    c.learned_mut().refused_on.push(conn_id);
                }
                // Refused twice here: the call's next race tries other routes first.
                let twice = ctx.refusals_before >= 1;
                if twice && !c.learned().avoid_routes.contains(&route) {
                    c.learned_mut().avoid_routes.push(route);
                }
                twice.then_some(CloseReason::RefusedStreams)
            }
            K::StreamReset { .. } => Some(CloseReason::StreamReset),
            // Our own doing: nothing against the route.
            K::Shutdown => Some(CloseReason::Shutdown),
            K::GoAwayUnprocessed => Some(CloseReason::GoAway),
            K::Misdirected => {
                self.update(conn_id, |c| c.no_coalescing = true);
                None
            }
        }
    }

    /// Sends the call again once its failed exchange was released: on the
    /// same connection (`same_connection`) while it still takes a stream,
    /// otherwise to another one (`fresh`: only a new connection will do).
    fn retry(
        &mut self,
        now: Instant,
        call: CallId,
        conn_id: ConnectionId,
        reason: RetryReason,
        same_connection: bool,
        fresh: bool,
    ) {
        let c = self.calls.get_mut(&call).expect("call exists");
        c.state = CallState::Pending;
        c.count_retry(reason);
        let share = same_connection
            && self.conns.get(&conn_id).is_some_and(|c| c.usable() && c.in_flight < c.limit());
        if share {
            // Still a coalesced share when the connection was made for another
            // Address (the 421 rule reads it).
            let coalesced = self.calls[&call].address != self.conns[&conn_id].address;
            let source = if coalesced { Source::Coalesced } else { Source::Shared };
            self.assign(now, call, conn_id, source);
            return;
        }
        let c = self.calls.get_mut(&call).expect("call exists");
        if !same_connection || !reason.is_free() {
            c.learned_mut().avoid.push(conn_id);
        }
        c.fresh_only |= fresh;
        self.dispatch(now, call);
    }

    /// The peer closed the connection, or it failed or proved unhealthy. It takes no
    /// new exchanges and closes as soon as none is in flight (exchanges on it should
    /// be reported failed).
    pub fn connection_closed(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        reason: CloseReason,
    ) -> Result<(), Misuse> {
        self.known(connection)?;
        let address = self.conns[&connection].address.clone();
        self.retire(now, connection, reason);
        // Calls waiting for its SETTINGS (or a stream) go elsewhere.
        self.rebalance(now, &address);
        Ok(())
    }

    /// An exchange on `conn` ended (the call already moved on or ended).
    pub(super) fn release(
        &mut self,
        now: Instant,
        call: CallId,
        conn: ConnectionId,
        reuse: Reuse,
        completed: bool,
    ) {
        let idle_here = self.update(conn, |c| {
            c.in_flight -= 1;
            if completed {
                c.completed += 1;
            }
            if c.in_flight == 0 {
                c.idle_since = Some(now);
            }
        });
        if completed && !self.probation.is_empty() {
            self.warm_served(now, conn);
        }
        // A connection that will carry no new exchanges says so first, then the
        // release, then (if nothing else is in flight) its close.
        if let Reuse::Retire(reason) = reuse {
            self.mark_no_new(now, conn, reason);
        }
        self.emit_passing(now, Some(call), || EventKind::ConnectionReleased { connection: conn });
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let close = c.no_new.filter(|_| c.in_flight == 0);
        let enforce = c.no_new.is_none()
            && c.in_flight == 0
            && (idle_here.is_some_and(|n| n > self.config.max_idle_per_address)
                || self.config.max_idle_total.is_some());
        // The common case (nothing to close or trim, nobody waiting or racing):
        // done, without taking a handle on the Address.
        if close.is_none() && !enforce && self.waiters.is_empty() && self.racing_total == 0 {
            return;
        }
        let address = c.address.clone();
        if let Some(reason) = close {
            self.close(now, conn, reason);
        } else if enforce {
            self.enforce_idle_caps(now, &address);
        }
        self.rebalance(now, &address);
    }
}
