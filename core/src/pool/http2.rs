//! What an HTTP/2 connection's peer reports: SETTINGS (the stream limit),
//! stalled streams, PONGs and GOAWAY.

use super::*;

impl Pool {
    /// HTTP/2 SETTINGS from the server (not an acknowledgement), with its
    /// MAX_CONCURRENT_STREAMS when the frame carried one (`None`: unchanged;
    /// unlimited if the first SETTINGS set none).
    ///
    /// Until the first SETTINGS arrive a connection carries one stream, and
    /// calls that would share it wait for them (up to the handshake timeout,
    /// then it is retired as [`CloseReason::NeverUsable`]); from then on it
    /// carries up to the limit. A higher limit may wake waiters at once; a lower
    /// one stops new streams until enough finish (BEHAVIOUR §4).
    pub fn settings(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        max_concurrent_streams: Option<u32>,
    ) -> Result<(), Misuse> {
        self.known(connection)?;
        if !self.conns[&connection].multiplexed() {
            return Ok(());
        }
        let was_zero = self.conns[&connection].allows_no_stream();
        self.update(connection, |c| {
            c.settings = true;
            if let Some(limit) = max_concurrent_streams {
                c.stream_limit = limit;
            }
        });
        let (address, limit, created, zero) = {
            let c = &self.conns[&connection];
            (c.address.clone(), c.stream_limit, c.created, c.allows_no_stream())
        };
        match (was_zero, zero) {
            (false, true) => self.zero_stream_conns += 1,
            (true, false) => self.zero_stream_conns -= 1,
            _ => {}
        }
        if limit > 0 {
            self.timers.remove(created + self.config.race.handshake_timeout, Timer::Settings(connection));
        }
        if let Some(known) = self.known_protocol.get_mut(&address) {
            known.2 = Some(limit);
        }
        if limit > 0 && !self.probation.is_empty() {
            self.warm_usable(now, connection);
        }
        self.rebalance(now, &address);
        // A warm minimum in streams may need more connections at this limit.
        self.rewarm_address(now, &address);
        Ok(())
    }

    /// A stream's read on this HTTP/2 connection timed out: the peer may have
    /// stalled. The pool sends one PING ([`PoolAction::Ping`]) unless one is
    /// out already; no PONG within [`PoolConfig::pong_timeout`] marks the
    /// connection unhealthy, so a stalled peer stops receiving calls
    /// (BEHAVIOUR §4). Ignored for HTTP/1.1 connections (the read timeout
    /// retires those).
    pub fn stream_stalled(&mut self, now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        let outstanding = self.timers.pong_pending(connection);
        if self.conns[&connection].multiplexed() && !outstanding {
            self.timers.insert(now + self.config.pong_timeout, Timer::Pong(connection));
            self.actions.push_back(PoolAction::Ping { connection });
        }
        Ok(())
    }

    /// The PONG for the connection's PING arrived: it is alive.
    pub fn pong(&mut self, _now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        self.timers.cancel_pong(connection);
        Ok(())
    }

    /// HTTP/2 GOAWAY, with its last stream id and error code
    /// ([`crate::http2::Session::read`] reports it as read): no new exchanges
    /// from this moment; closes once in-flight streams end. Streams above its
    /// last stream id, reported failed as
    /// [`ExchangeFailureKind::GoAwayUnprocessed`] (the
    /// [`Session`](crate::http2::Session::stream_failed) decides), are retried
    /// elsewhere without counting toward the call's retry cap (BEHAVIOUR §6).
    /// The connection remembers it ([`Connection::goaway`]); a later one may
    /// only lower the last stream id.
    pub fn goaway(&mut self, now: Instant, connection: ConnectionId, goaway: GoAway) -> Result<(), Misuse> {
        self.known(connection)?;
        self.learn_stream_budget(now, connection, goaway);
        self.update(connection, |c| {
            let last =
                c.goaway.map_or(goaway.last_stream_id, |g| g.last_stream_id.min(goaway.last_stream_id));
            c.goaway = Some(GoAway { last_stream_id: last, error_code: goaway.error_code });
        });
        self.connection_closed(now, connection, CloseReason::GoAway)
    }

    /// A graceful GOAWAY that left streams unprocessed tells how many streams
    /// the server took on this connection; the same count twice in a row is
    /// the server's limit per connection ([`CloseReason::StreamBudget`]),
    /// held for the route TTL.
    fn learn_stream_budget(&mut self, now: Instant, connection: ConnectionId, goaway: GoAway) {
        if goaway.error_code != 0 {
            return;
        }
        // One lesson per connection: a second GOAWAY on it (RFC 9113 §6.8's
        // two-step shutdown, or a repeat) is not a second connection agreeing.
        let Some(c) = self.conns.get(&connection).filter(|c| c.multiplexed() && c.goaway.is_none()) else {
            return;
        };
        // Client streams are odd: ids 1, 3, … up to the last one processed.
        let processed = u64::from(goaway.last_stream_id).div_ceil(2);
        if processed == 0 || c.assigned <= processed {
            return; // nothing was turned away: a shutdown, not a limit
        }
        let ttl = self.config.route_ttl;
        let Some(a) = self.addrs.get_mut(&c.address) else { return };
        if a.last_goaway_processed == Some(processed) {
            a.stream_budget = Some((processed, now + ttl));
        }
        a.last_goaway_processed = Some(processed);
    }

    /// An HTTP/2 connection's keep-alive PING is due
    /// ([`PoolConfig::ping_interval`]): one PING unless one is out already,
    /// a PONG deadline [`PoolConfig::pong_timeout`] after it, and the next
    /// PING an interval on.
    pub(super) fn keepalive_due(&mut self, now: Instant, id: ConnectionId) {
        let Some(every) = self.config.ping_interval else { return };
        if !self.conns.get(&id).is_some_and(|c| c.multiplexed() && c.no_new.is_none()) {
            return;
        }
        if !self.timers.pong_pending(id) {
            self.stats.keepalive_pings += 1;
            self.timers.insert(now + self.config.pong_timeout, Timer::Pong(id));
            self.actions.push_back(PoolAction::Ping { connection: id });
        }
        self.timers.insert(now + every, Timer::KeepAlive(id));
    }

    /// The connection's PONG is overdue: it is unhealthy.
    pub(super) fn pong_overdue(&mut self, now: Instant, id: ConnectionId) {
        if self.conns.contains_key(&id) {
            self.retire(now, id, CloseReason::Unhealthy);
        }
    }

    /// A new HTTP/2 connection's SETTINGS never came, or allowed no stream
    /// all along: it is never usable. Calls that waited for its SETTINGS go
    /// elsewhere; calls that waited because it allowed zero streams fail
    /// ([`AcquireError::NoStreams`]: the next call may try one new
    /// connection, so a server that allows none costs one connection per
    /// never-usable period); a stream on it cannot finish, so the embedder ends
    /// it now ([`PoolAction::Abort`]).
    pub(super) fn settings_overdue(&mut self, now: Instant, id: ConnectionId) {
        let Some((address, busy, zero)) = self
            .conns
            .get(&id)
            .map(|c| (c.address.clone(), c.in_flight > 0, c.settings && c.stream_limit == 0))
        else {
            return;
        };
        self.retire(now, id, CloseReason::NeverUsable);
        if zero {
            let waited = self.config.race.handshake_timeout;
            // Every call waiting for the Address that could have used a
            // shared connection waited because of it (the zero-stream check
            // comes first); exclusive and fresh-only calls wait for other
            // reasons.
            let mut failed: Vec<CallId> = self
                .calls
                .iter()
                .filter(|(_, c)| {
                    c.address == address
                        && !c.options.exclusive
                        && !c.fresh_only
                        && matches!(c.state, CallState::Waiting { .. })
                })
                .map(|(call, _)| *call)
                .collect();
            failed.sort_unstable();
            for call in failed {
                let error = AcquireError::NoStreams { address: address.clone(), connection: id, waited };
                self.fail_unserved(now, call, error);
            }
        }
        if busy {
            let reason = CloseReason::NeverUsable;
            self.actions.push_back(PoolAction::Abort { connection: id, reason });
        }
        self.rebalance(now, &address);
    }
}
