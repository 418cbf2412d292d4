//! How a call gets a new connection: DNS answers (shared lookups, the cache),
//! connect attempts and their reports, the call's race, and the connection it
//! opens.

use super::*;

impl Pool {
    /// Feeds a DNS answer: every address at once, as `getaddrinfo` gives them
    /// (cached for [`DnsCacheConfig::default_ttl`]). For an origin lookup, a
    /// coalescable HTTP/2 connection among the answers ends the race at once
    /// (BEHAVIOUR §5).
    ///
    /// [`DnsCacheConfig::default_ttl`]: crate::DnsCacheConfig::default_ttl
    pub fn handle_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: Result<Vec<IpAddr>, DnsError>,
    ) -> Result<(), Misuse> {
        self.handle_dns_answer(now, query, DnsAnswer::all(answer))
    }

    /// Feeds a DNS answer, whole or for one address family, with its time to
    /// live (see [`crate::dns`]). Every call sharing the lookup gets it; the
    /// complete answer is cached.
    pub fn handle_dns_answer(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: DnsAnswer,
    ) -> Result<(), Misuse> {
        let answer = answer.normalized();
        if let Some(followers) = self.dns.answered(query, &answer, now) {
            if let Some((key, ips)) = self.dns.take_completed() {
                self.drain_moved(now, &key, &ips);
            }
            // The leader's call may have ended: the followers still get it.
            let _ = self.deliver_dns(now, query, answer.clone(), DnsSource::Lookup);
            for follower in followers {
                let _ = self.deliver_dns(now, follower, answer.clone(), DnsSource::Shared);
            }
            return Ok(());
        }
        self.deliver_dns(now, query, answer, DnsSource::Lookup)
    }

    /// Clears the DNS cache (lookups in flight are unaffected).
    pub fn clear_dns_cache(&mut self) {
        self.dns.clear();
    }

    /// Names in the DNS cache.
    #[must_use]
    pub fn dns_cache_len(&self) -> usize {
        self.dns.len()
    }

    /// Passes one answer to the race of `query`'s call.
    pub(super) fn deliver_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: DnsAnswer,
        source: DnsSource,
    ) -> Result<(), Misuse> {
        let call_id = query.call();
        let Some(call) = self.calls.get(&call_id) else {
            return self.stale_call(call_id, Misuse::UnknownQuery(query));
        };
        let CallState::Racing(racing) = &call.state else {
            return Ok(()); // the race ended: a late answer
        };
        let direct_queries = &racing.direct_queries;
        if let Ok(ips) = &answer.result {
            if direct_queries.contains(&query) && !call.options.exclusive && !call.fresh_only {
                let address = call.address.clone();
                if let Some(conn) = self.find_coalescable(&address, ips, &call.learned().avoid) {
                    let addresses = ips.clone();
                    let host = address.host().clone();
                    let family = answer.family;
                    self.emit(
                        now,
                        Some(call_id),
                        EventKind::DnsEnd { query, host, addresses, family, source },
                    );
                    self.stop_race(now, call_id);
                    self.assign(now, call_id, conn, Source::Coalesced);
                    // Calls that waited for this race's result may go now.
                    self.rebalance(now, &address);
                    return Ok(());
                }
            }
        }
        let Some(Call { state: CallState::Racing(racing), .. }) = self.calls.get_mut(&call_id) else {
            return Ok(());
        };
        racing.race.handle_dns_answer(now, query, answer, source, &mut self.db)?;
        self.pump_race(now, call_id);
        Ok(())
    }

    /// TCP connected for `attempt`.
    pub fn handle_connected(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_connected(now, attempt);
            return Ok(());
        }
        self.with_race(now, attempt, |race, db| race.handle_connected(now, attempt, db))
    }

    /// The attempt's proxy tunnel (SOCKS5, or `CONNECT` for an https origin)
    /// is open; its TLS, if any, starts now. The connect timeout covers TCP
    /// and the tunnel; from here the handshake timeout bounds TLS (see
    /// [`Race::handle_tunnelled`]).
    pub fn handle_tunnelled(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_tunnelled(now, attempt);
            return Ok(());
        }
        self.with_race(now, attempt, |race, _| race.handle_tunnelled(now, attempt))
    }

    /// The winner's handshakes finished; `alpn` is the negotiated protocol and `tls`
    /// the verified certificate's facts (for coalescing), when TLS ran.
    pub fn handle_established(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        alpn: Option<Protocol>,
        tls: Option<TlsFacts>,
    ) -> Result<(), Misuse> {
        if tls.as_ref().is_some_and(|t| t.unverified) {
            self.unverified.attempts.insert(attempt);
        }
        if self.kept.contains_key(&attempt) {
            self.kept_established(now, attempt, alpn, tls);
            return Ok(());
        }
        if let Some(Call { state: CallState::Racing(racing), .. }) = self.calls.get_mut(&attempt.call()) {
            if let Some(t) = tls {
                racing.tls.insert(attempt, t);
            }
        }
        self.with_race(now, attempt, |race, db| race.handle_established(now, attempt, alpn, db))
    }

    /// `attempt` failed.
    pub fn handle_failed(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        error: ConnectError,
    ) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_failed(now, attempt, error);
            return Ok(());
        }
        if matches!(error, ConnectError::Exhausted { .. }) && self.make_room(now, attempt) {
            return Ok(());
        }
        self.with_race(now, attempt, |race, db| race.handle_failed(now, attempt, error, db))
    }

    /// Out of file descriptors: close the least recently used idle connection
    /// (any Address) and connect `attempt`'s route again. `false` when there is
    /// no idle connection to close or the attempt is no longer connecting; each
    /// retry closes one connection, so the retries are bounded by the idle count.
    pub(super) fn make_room(&mut self, now: Instant, attempt: AttemptId) -> bool {
        let Some(&(_, victim)) = self.idle_all.first() else { return false };
        let route = match self.calls.get(&attempt.call()) {
            Some(Call { state: CallState::Racing(racing), .. }) => {
                racing.race.connecting_route(attempt).cloned()
            }
            _ => None,
        };
        let Some(route) = route else { return false };
        self.close(now, victim, CloseReason::Evicted);
        self.stats.tcp_connects += 1;
        self.actions.push_back(PoolAction::Connect { attempt, route });
        true
    }

    pub(super) fn with_race(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        f: impl FnOnce(&mut Race, &mut RouteDatabase) -> Result<(), Misuse>,
    ) -> Result<(), Misuse> {
        let call_id = attempt.call();
        match self.calls.get_mut(&call_id) {
            Some(Call { state: CallState::Racing(racing), .. }) => {
                f(&mut racing.race, &mut self.db)?;
                self.pump_race(now, call_id);
                Ok(())
            }
            // The race ended (won, pooled, cancelled): a late report, ignored.
            Some(_) => Ok(()),
            None => self.stale_call(call_id, Misuse::UnknownAttempt(attempt)),
        }
    }

    pub(super) fn start_race(&mut self, now: Instant, call_id: CallId) {
        let call = self.calls.get_mut(&call_id).expect("call exists");
        let request = RaceRequest {
            call: call_id,
            address: call.address.clone(),
            proxies: call.options.proxies().to_vec(),
            proxy_reason: call.options.proxy_reason().cloned(),
            deadline: call.options.deadline,
            first_sequence: call.sequence,
            avoid: call.learned().avoid_routes.clone(),
            known_answers: call.learned().answers.clone(),
        };
        let race = Race::start(request, self.config.race, now, &mut self.db);
        call.state = CallState::Racing(Box::new(Racing {
            race,
            timer: None,
            direct_queries: Vec::new(),
            tls: BTreeMap::new(),
        }));
        let address = call.address.clone();
        self.addrs.entry(address).or_default().racing.insert(call_id);
        self.racing_total += 1;
        self.pump_race(now, call_id);
    }

    /// Moves a race's actions and events into the pool's queues, handles its end,
    /// and re-arms its timer.
    pub(super) fn pump_race(&mut self, now: Instant, call_id: CallId) {
        let mut finished = None;
        // Answers known at once (cached, or parts of a shared lookup), fed after.
        let mut answers: Vec<(QueryId, DnsAnswer, DnsSource)> = Vec::new();
        {
            let Some(Call { state: CallState::Racing(racing), address, .. }) = self.calls.get_mut(&call_id)
            else {
                return;
            };
            let Racing { race, timer, direct_queries, .. } = &mut **racing;
            let resolver = address.resolver_identity();
            // Actions first: a lookup the cache answers, or another call's query
            // in flight, changes what its DnsStart event says.
            let mut sources: Vec<(QueryId, DnsSource)> = Vec::new();
            while let Some(action) = race.poll_action() {
                match action {
                    Action::Resolve { query, host, port, proxy } => {
                        if proxy == Proxy::Direct {
                            direct_queries.push(query);
                        }
                        let key = (resolver, host.clone(), port);
                        match self.dns.lookup(key, query, now) {
                            Lookup::Miss => {
                                self.stats.dns_lookups += 1;
                                self.actions.push_back(PoolAction::Resolve {
                                    query,
                                    host,
                                    port,
                                    proxy: Box::new(proxy),
                                });
                            }
                            Lookup::Cached(result) => {
                                self.stats.dns_cache_hits += 1;
                                sources.push((query, DnsSource::Cache));
                                answers.push((query, DnsAnswer::all(result), DnsSource::Cache));
                            }
                            Lookup::InFlight(parts) => {
                                self.stats.dns_shared += 1;
                                sources.push((query, DnsSource::Shared));
                                answers.extend(parts.into_iter().map(|p| (query, p, DnsSource::Shared)));
                            }
                        }
                    }
                    Action::Connect { attempt, route } => {
                        self.stats.tcp_connects += 1;
                        self.actions.push_back(PoolAction::Connect { attempt, route })
                    }
                    Action::Handshake { attempt, route } => {
                        if route.requires_tls() {
                            self.stats.tls_handshakes += 1;
                        }
                        self.handshaking.insert(attempt);
                        self.actions.push_back(PoolAction::Handshake { attempt, route });
                    }
                    Action::Cancel { attempt } => {
                        self.actions.push_back(PoolAction::CancelAttempt { attempt })
                    }
                    other => finished = Some(other),
                }
            }
            while let Some(mut e) = race.poll_event() {
                count_attempt_end(&mut self.stats, &mut self.handshaking, &e);
                e.unverified_tls = self.unverified.mark(&e.kind);
                if !self.events_on {
                    continue;
                }
                if let EventKind::DnsStart { query, source, .. } = &mut e.kind {
                    if let Some((_, s)) = sources.iter().find(|(q, _)| q == query) {
                        *source = *s;
                    }
                }
                self.events.push_back(e);
            }
            if let Some(t) = timer.take() {
                self.timers.remove(t, Timer::Race(call_id));
            }
            if finished.is_none() {
                *timer = race.poll_timeout();
                if let Some(t) = *timer {
                    self.timers.insert(t, Timer::Race(call_id));
                }
            }
        }
        self.apply_outliers(now);
        self.race_moved(now, call_id, finished, answers);
    }

    /// After [`Pool::pump_race`]: a race that ended is won (a connection for
    /// the call, or for the warm pool) or failed (the call fails); a race that
    /// goes on gets the DNS answers known at once.
    fn race_moved(
        &mut self,
        now: Instant,
        call_id: CallId,
        finished: Option<Action>,
        answers: Vec<(QueryId, DnsAnswer, DnsSource)>,
    ) {
        match finished {
            Some(Action::Won { attempt, route, protocol }) if self.is_warm_call(call_id) => {
                let tls = match &mut self.calls.get_mut(&call_id).expect("call exists").state {
                    CallState::Racing(racing) => racing.tls.remove(&attempt),
                    _ => None,
                };
                let tls = tls.filter(|_| protocol.is_coalescable());
                self.warm_won(now, call_id, attempt, route, protocol, tls);
            }
            Some(Action::Failed(error)) if self.is_warm_call(call_id) => {
                self.warm_failed(now, call_id, &error)
            }
            Some(Action::Won { attempt, route, protocol }) => {
                self.on_won(now, call_id, attempt, route, protocol)
            }
            Some(Action::Failed(error)) => {
                let address = self.calls[&call_id].address.clone();
                self.stop_race(now, call_id);
                self.calls.remove(&call_id);
                self.actions.push_back(PoolAction::AcquireFailed {
                    call: call_id,
                    error: AcquireError::Connect(error),
                });
                self.rebalance(now, &address);
            }
            _ => {
                for (query, answer, source) in answers {
                    let _ = self.deliver_dns(now, query, answer, source);
                }
            }
        }
    }

    /// Forgets a call's race (already finished or to be cancelled), draining its
    /// cancellations, and frees its connecting slot.
    pub(super) fn stop_race(&mut self, now: Instant, call_id: CallId) {
        let Some(call) = self.calls.get_mut(&call_id) else {
            return;
        };
        let CallState::Racing(racing) = &mut call.state else {
            return;
        };
        let Racing { race, timer, .. } = &mut **racing;
        race.cancel(now);
        let sequence = race.sequence_end();
        let answers = race.answers().to_vec();
        while let Some(mut e) = race.poll_event() {
            count_attempt_end(&mut self.stats, &mut self.handshaking, &e);
            e.unverified_tls = self.unverified.mark(&e.kind);
            if self.events_on {
                self.events.push_back(e);
            }
        }
        while let Some(action) = race.poll_action() {
            if let Action::Cancel { attempt } = action {
                self.actions.push_back(PoolAction::CancelAttempt { attempt });
            }
        }
        if let Some(t) = timer.take() {
            self.timers.remove(t, Timer::Race(call_id));
        }
        call.state = CallState::Pending;
        call.sequence = sequence;
        if !answers.is_empty() || call.learned.is_some() {
            call.learned_mut().answers = answers;
        }
        let address = call.address.clone();
        if let Some(a) = self.addrs.get_mut(&address) {
            a.racing.remove(&call_id);
        }
        self.racing_total -= 1;
        self.gc_address(&address);
    }

    pub(super) fn on_won(
        &mut self,
        now: Instant,
        call_id: CallId,
        attempt: AttemptId,
        route: Route,
        protocol: Protocol,
    ) {
        let tls = match &mut self.calls.get_mut(&call_id).expect("call exists").state {
            CallState::Racing(racing) => racing.tls.remove(&attempt),
            _ => None,
        };
        self.stop_race(now, call_id);
        let address = self.calls[&call_id].address.clone();
        let tls = tls.filter(|_| protocol.is_coalescable());
        let id = self.open_connection(now, attempt, &address, route, protocol, tls);
        // Post-connect de-duplication (the new connection is not indexed yet, so it
        // cannot find itself): an eligible multiplexed connection that appeared
        // meanwhile serves the call, and the new one is closed.
        if protocol.is_multiplexed() {
            let existing =
                self.find_pooled(call_id).filter(|(c, _)| self.conns[c].multiplexed()).or_else(|| {
                    let call = &self.calls[&call_id];
                    let ip = self.conns[&id].route.socket_addr().ip();
                    (!call.options.exclusive && !call.fresh_only)
                        .then(|| self.find_coalescable(&address, &[ip], &call.learned().avoid))
                        .flatten()
                        .map(|c| (c, Source::Coalesced))
                });
            // Only a duplicate if the other has room for this call and every
            // call waiting for the Address; otherwise (a low stream limit under
            // load) the new connection is needed and serves the call.
            let demand = 1 + self.addrs.get(&address).map_or(0, |a| a.waiters);
            let existing = existing.filter(|(other, _)| {
                let c = &self.conns[other];
                c.limit().saturating_sub(c.in_flight) as usize >= demand
            });
            if let Some((other, source)) = existing {
                self.stats.wasted += 1;
                self.close(now, id, CloseReason::Duplicate);
                self.assign(now, call_id, other, source);
                self.rebalance(now, &address);
                return;
            }
        }
        self.index(id);
        self.assign(now, call_id, id, Source::New);
        self.rebalance(now, &address);
    }

    /// One connection's lifetime: `max_lifetime` moved by up to
    /// `max_lifetime_jitter` of itself, either way (whole milliseconds, at
    /// least 1 ms).
    pub(super) fn jittered_lifetime(&mut self, d: std::time::Duration) -> std::time::Duration {
        let share = self.config.max_lifetime_jitter.clamp(0.0, 1.0);
        if share == 0.0 {
            return d;
        }
        let ms = d.as_secs_f64() * 1000.0 * (1.0 + share * self.lifetime_jitter.unit());
        std::time::Duration::from_millis((ms.round() as u64).max(1))
    }

    /// A connection is ready: records it, counts it, remembers the protocol its
    /// Address negotiated, and tells the embedder. Not yet indexed (not idle).
    pub(super) fn open_connection(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        address: &Address,
        route: Route,
        protocol: Protocol,
        tls: Option<TlsFacts>,
    ) -> ConnectionId {
        let lifetime_deadline = self.config.max_lifetime.map(|d| now + self.jittered_lifetime(d));
        let unverified = tls.as_ref().is_some_and(|t| t.unverified);
        let id = self.conns.insert_with(&mut self.ids, |id| {
            Connection::established(id, (address.clone(), route, protocol), now, tls, lifetime_deadline)
        });
        if unverified {
            self.unverified.connections.insert(id);
        }
        if !self.warm.is_empty() {
            self.warm_opened(now, id, address);
        }
        let a = self.addrs.entry(address.clone()).or_default();
        a.open += 1;
        a.counters.created += 1;
        self.open_total += 1;
        self.stats.created += 1;
        if let Some(t) = lifetime_deadline {
            self.timers.insert(t, Timer::Lifetime(id));
        }
        if protocol.is_multiplexed() {
            self.timers.insert(now + self.config.race.handshake_timeout, Timer::Settings(id));
            if let Some(every) = self.config.ping_interval {
                self.timers.insert(now + every, Timer::KeepAlive(id));
            }
        }
        let limit = self.known_protocol.get(address).and_then(|k| k.2).filter(|_| protocol.is_multiplexed());
        self.known_protocol.insert(address.clone(), (protocol, now + self.config.route_ttl, limit));
        if self.known_protocol.len() > self.known_sweep_at {
            // Forget what has expired (amortized: only when the map has
            // grown), then, past the bound, the oldest.
            self.known_protocol.retain(|_, (_, until, _)| *until > now);
            let kept = super::evict::KNOWN_PROTOCOLS_KEPT;
            if self.known_protocol.len() > kept {
                let mut untils: Vec<Instant> = self.known_protocol.values().map(|k| k.1).collect();
                untils.sort_unstable();
                let cut = untils[self.known_protocol.len() - kept];
                self.known_protocol.retain(|_, (_, until, _)| *until > cut);
            }
            self.known_sweep_at = 64 + 2 * self.known_protocol.len();
        }
        self.actions.push_back(PoolAction::Established { attempt, connection: id, protocol });
        self.watch_dns(now, id);
        id
    }
}
