//! The idle connections of one Address, oldest first.
//!
//! A call takes the newest idle connection and a release adds one that is
//! newer than every other (the pool's `now` only moves forward), so both ends
//! of the list are where the work is: a ring buffer kept in order does each in
//! constant time, where an ordered tree pays a search and node upkeep for
//! every acquire and release. Eviction takes the oldest, also an end. Only a
//! connection closing while idle in the middle (the server closed it) costs a
//! shift, of the shorter side.

use std::collections::VecDeque;

use crate::id::ConnectionId;
use crate::time::Instant;

/// An idle connection: idle since then.
pub(super) type IdleKey = (Instant, ConnectionId);

/// The idle connections of one Address, ordered by (idle since, id), as a set.
///
/// The newest is kept inline (in the Address's state, which the pool has
/// already looked up), and with it a copy of the ring's newest: a call that
/// takes the newest connection and a release that puts one back touch
/// neither the ring nor its memory. Measured at 100 000 pooled connections
/// over 1 000 Addresses, the ring's newest slot was a cache miss per acquire
/// (a quarter of the operation's time).
#[derive(Debug, Default)]
pub(super) struct IdleList {
    /// Every entry but `newest`, oldest first.
    older: VecDeque<IdleKey>,
    /// `older`'s last entry, copied.
    older_back: Option<IdleKey>,
    /// When set, newer than every entry of `older`.
    newest: Option<IdleKey>,
}

impl IdleList {
    /// Adds `key`; whether it was new. Constant time when it is the newest.
    pub(super) fn insert(&mut self, key: IdleKey) -> bool {
        match self.newest {
            Some(n) if n == key => return false,
            Some(n) if n < key => {
                self.push_older(n);
                self.newest = Some(key);
                return true;
            }
            Some(_) => {}
            None if self.older_back.is_none_or(|back| back < key) => {
                self.newest = Some(key);
                return true;
            }
            None => {}
        }
        // Older than the newest: in order, in the ring.
        match self.older_back {
            Some(last) if last > key => match self.older.binary_search(&key) {
                Ok(_) => false,
                Err(at) => {
                    self.older.insert(at, key);
                    true
                }
            },
            Some(last) if last == key => false,
            _ => {
                self.push_older(key);
                true
            }
        }
    }

    fn push_older(&mut self, key: IdleKey) {
        self.older.push_back(key);
        self.older_back = Some(key);
    }

    /// Removes `key`; whether it was there. Constant time at either end.
    pub(super) fn remove(&mut self, key: &IdleKey) -> bool {
        if self.newest.as_ref() == Some(key) {
            self.newest = None;
            return true;
        }
        if self.older_back.as_ref() == Some(key) {
            self.older.pop_back();
            self.older_back = self.older.back().copied();
            return true;
        }
        if self.older.front() == Some(key) {
            self.older.pop_front();
            if self.older.is_empty() {
                self.older_back = None;
            }
            return true;
        }
        match self.older.binary_search(key) {
            Ok(at) => {
                self.older.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The oldest.
    pub(super) fn first(&self) -> Option<&IdleKey> {
        self.older.front().or(self.newest.as_ref())
    }

    /// Whether `key` is in the list.
    pub(super) fn contains(&self, key: &IdleKey) -> bool {
        self.newest.as_ref() == Some(key) || self.older.binary_search(key).is_ok()
    }

    /// How many.
    pub(super) fn len(&self) -> usize {
        self.older.len() + usize::from(self.newest.is_some())
    }

    /// The newest for which `f` holds.
    pub(super) fn newest_where(&self, mut f: impl FnMut(ConnectionId) -> bool) -> Option<ConnectionId> {
        if let Some((_, id)) = self.newest {
            if f(id) {
                return Some(id);
            }
        }
        let mut at = self.older.len();
        while at > 0 {
            at -= 1;
            let id = self.older[at].1;
            if f(id) {
                return Some(id);
            }
        }
        None
    }

    /// Oldest first.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &IdleKey> {
        self.older.iter().chain(self.newest.iter())
    }
}

/// Every idle connection of the pool, oldest first (by idle since, then id).
/// The pool adds and removes exactly what it adds to and removes from the
/// Addresses' [`IdleList`]s (which know what they hold).
///
/// Removal is lazy: a call takes an idle connection from anywhere in this
/// order, and searching an ordered tree for it cost more than the rest of the
/// acquire. A removed entry stays where it is until it reaches the front or
/// the queue is compacted; whether an entry is still live is asked of the
/// pool (`is_live`: the connection is idle, since that instant). The front is
/// always live, so the oldest idle connection (idle expiry, eviction) is
/// exact. An entry removed and then added again (idle again at the same
/// instant) is the same entry, live again.
#[derive(Debug, Default)]
pub(super) struct IdleQueue {
    entries: VecDeque<IdleKey>,
    live: usize,
}

impl IdleQueue {
    /// Adds `key`, which must be live and not counted yet. Constant time when
    /// it is the newest (amortized over compactions).
    pub(super) fn insert(&mut self, key: IdleKey, is_live: impl Fn(&IdleKey) -> bool) {
        self.live += 1;
        match self.entries.back() {
            Some(last) if *last > key => {
                if let Err(at) = self.entries.binary_search(&key) {
                    self.entries.insert(at, key);
                }
            }
            Some(last) if *last == key => {}
            _ => self.entries.push_back(key),
        }
        // Removed entries are at most three in four: compacting costs a pass
        // over the queue once every (at least) as many inserts.
        if self.entries.len() > 4 * self.live + 64 {
            self.entries.retain(|k| is_live(k));
        }
    }

    /// Forgets `key`, which was counted; `is_live` already answers for the
    /// connection's new state, or (the connection closing) for the others.
    pub(super) fn remove(&mut self, key: &IdleKey, is_live: impl Fn(&IdleKey) -> bool) {
        self.live -= 1;
        if self.entries.front() == Some(key) {
            self.entries.pop_front();
            while self.entries.front().is_some_and(|front| !is_live(front)) {
                self.entries.pop_front();
            }
        }
    }

    /// The oldest idle connection.
    pub(super) fn first(&self) -> Option<&IdleKey> {
        self.entries.front()
    }

    /// How many are idle.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The live entries, oldest first.
    pub(super) fn iter<'a>(
        &'a self,
        is_live: impl Fn(&IdleKey) -> bool + 'a,
    ) -> impl Iterator<Item = &'a IdleKey> + 'a {
        self.entries.iter().filter(move |k| is_live(k))
    }

    /// Whether `key` is a live entry.
    pub(super) fn contains(&self, key: &IdleKey, is_live: impl Fn(&IdleKey) -> bool) -> bool {
        self.entries.binary_search(key).is_ok() && is_live(key)
    }

    /// The queue's own invariants against `is_live`, for
    /// [`Pool::check_invariants`](super::Pool::check_invariants).
    pub(super) fn check(&self, is_live: impl Fn(&IdleKey) -> bool) -> Result<(), String> {
        let live = self.entries.iter().filter(|k| is_live(k)).count();
        if live != self.live {
            return Err(format!("idle queue counts {} live entries, holds {live}", self.live));
        }
        if self.entries.front().is_some_and(|k| !is_live(k)) {
            return Err(format!("idle queue's front {:?} is not idle", self.entries.front()));
        }
        if !self.entries.iter().zip(self.entries.iter().skip(1)).all(|(a, b)| a < b) {
            return Err("idle queue out of order".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn key(micros: u64, id: u64) -> IdleKey {
        (Instant::ZERO + Duration::from_micros(micros), ConnectionId::from_raw(id))
    }

    #[test]
    fn newest_and_oldest_leave_from_the_ends() {
        let mut list = IdleList::default();
        for i in 0..4 {
            list.insert(key(i, i));
        }
        assert!(list.remove(&key(3, 3)), "the newest");
        assert!(list.remove(&key(0, 0)), "the oldest");
        assert!(!list.remove(&key(0, 0)), "already gone");
        assert_eq!(list.iter().copied().collect::<Vec<_>>(), [key(1, 1), key(2, 2)]);
        assert_eq!(list.first(), Some(&key(1, 1)));
        assert_eq!(list.newest_where(|_| true), Some(key(2, 2).1));
        assert_eq!(list.newest_where(|id| id == key(0, 1).1), Some(key(1, 1).1));
        assert_eq!(list.newest_where(|_| false), None);
    }

    #[test]
    fn an_older_key_goes_in_order_and_a_duplicate_is_ignored() {
        let mut list = IdleList::default();
        list.insert(key(10, 1));
        list.insert(key(5, 2));
        list.insert(key(10, 1));
        list.insert(key(7, 3));
        assert_eq!(list.iter().copied().collect::<Vec<_>>(), [key(5, 2), key(7, 3), key(10, 1)]);
        assert_eq!(list.len(), 3);
        assert!(list.contains(&key(7, 3)));
        assert!(list.remove(&key(7, 3)), "from the middle");
        assert!(!list.contains(&key(7, 3)));
    }

    /// The queue against an ordered set, with a live-set the test keeps as
    /// the pool keeps its connections' state.
    #[test]
    fn the_queue_keeps_its_front_live_and_compacts() {
        let live = std::cell::RefCell::new(BTreeSet::new());
        let is_live = |k: &IdleKey| live.borrow().contains(k);
        let mut q = IdleQueue::default();
        for i in 0..1000 {
            let k = key(i, i % 7);
            live.borrow_mut().insert(k);
            q.insert(k, is_live);
            if i % 10 != 0 {
                live.borrow_mut().remove(&k);
                q.remove(&k, is_live);
            }
            q.check(is_live).unwrap();
        }
        assert_eq!(q.len(), 100);
        assert!(q.entries.len() <= 4 * 100 + 64, "compacted: {}", q.entries.len());
        assert_eq!(q.first(), Some(&key(0, 0)));
        let oldest = key(0, 0);
        live.borrow_mut().remove(&oldest);
        q.remove(&oldest, is_live);
        assert_eq!(q.first(), Some(&key(10, 3)), "the next live one");
        assert!(q.iter(is_live).all(|k| live.borrow().contains(k)));
        assert_eq!(q.iter(is_live).count(), 99);
    }

    proptest! {
        /// Idle, busy and closed connections in any order: the queue's live
        /// entries are the idle set, oldest first, and its front the oldest.
        #[test]
        fn the_queue_is_the_idle_set(ops in proptest::collection::vec((0u8..3, 0u64..6), 0..300)) {
            // Per connection: idle since (None: busy or closed).
            let state = std::cell::RefCell::new(std::collections::BTreeMap::<u64, Option<u64>>::new());
            let is_live = |k: &IdleKey| {
                let since = (k.0 - Instant::ZERO).as_micros() as u64;
                state.borrow().iter().any(|(id, s)| key(0, *id).1 == k.1 && *s == Some(since))
            };
            let mut q = IdleQueue::default();
            let mut now = 0;
            for (op, id) in ops {
                now += u64::from(op == 0);
                let current = state.borrow().get(&id).copied().flatten();
                match (op, current) {
                    // Idle from now (released), if it was not idle.
                    (0 | 1, None) => {
                        state.borrow_mut().insert(id, Some(now));
                        q.insert(key(now, id), is_live);
                    }
                    // Taken by a call (busy), or closed.
                    (_, Some(since)) => {
                        state.borrow_mut().insert(id, None);
                        q.remove(&key(since, id), is_live);
                    }
                    _ => {}
                }
                q.check(is_live).map_err(TestCaseError::fail)?;
                let mut model: Vec<IdleKey> = state
                    .borrow()
                    .iter()
                    .filter_map(|(id, s)| s.map(|s| key(s, *id)))
                    .collect();
                model.sort();
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.first(), model.first());
                prop_assert!(q.iter(is_live).eq(model.iter()));
            }
        }

        /// Any sequence of inserts and removes leaves the same set, in the same
        /// order, as an ordered set would.
        #[test]
        fn behaves_as_an_ordered_set(ops in proptest::collection::vec((any::<bool>(), 0u64..8, 0u64..6), 0..200)) {
            let mut list = IdleList::default();
            let mut model = BTreeSet::new();
            for (insert, t, id) in ops {
                let k = key(t, id);
                if insert {
                    prop_assert_eq!(list.insert(k), model.insert(k));
                } else {
                    prop_assert_eq!(list.remove(&k), model.remove(&k));
                }
                prop_assert_eq!(list.len(), model.len());
                prop_assert_eq!(list.first(), model.first());
                prop_assert!(list.iter().eq(model.iter()));
                prop_assert_eq!(list.newest_where(|_| true), model.last().map(|k| k.1));
                prop_assert_eq!(list.newest_where(|c| c != k.1), model.iter().rev().find(|m| m.1 != k.1).map(|m| m.1));
                prop_assert!(model.iter().all(|m| list.contains(m)));
                prop_assert_eq!(list.contains(&k), model.contains(&k));
            }
        }
    }
}
