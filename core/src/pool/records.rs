//! The pool's connection records, in a slab: each [`ConnectionId`] carries
//! the slot of its record, so finding one is an index and a comparison, not
//! a hash lookup.
//!
//! Measured at 100 000 pooled connections over 1 000 Addresses (the core's
//! scenario 6), a hash map placed each connection's record at a hashed spot
//! of a 30 MB table: an acquire missed the cache on the table's control bytes
//! and again on the record, and it paid the hashing (a hundred instructions
//! of an acquire + release). Here a new connection takes the lowest free
//! slot, so the records stay packed at the front, the connections a workload
//! opens together sit together, and when a burst's connections have closed
//! the slots past the last record are given back.
//!
//! A slot's record is checked against the whole id, so an id whose
//! connection closed never finds the slot's next tenant.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Index;

use super::view::Connection;
use crate::id::{ConnectionId, IdAllocator, MAX_SLOTS};

/// The records, by slot. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Records {
    slots: Vec<Option<Connection>>,
    /// The empty slots below the last record, lowest first; entries at or
    /// past `slots.len()` are stale (slots given back since) and only ever
    /// the heap's largest.
    free: BinaryHeap<Reverse<usize>>,
    len: usize,
}

impl Records {
    /// Files the record `make` builds for a fresh id from `ids`, in a free
    /// slot (or a new one), and returns that id.
    ///
    /// # Panics
    /// With [`MAX_SLOTS`] records held already: the pool's total cap
    /// ([`Pool::total_full`](super::Pool::total_full)) never lets it come
    /// to that.
    pub(super) fn insert_with(
        &mut self,
        ids: &mut IdAllocator,
        make: impl FnOnce(ConnectionId) -> Connection,
    ) -> ConnectionId {
        let slot = match self.free.peek() {
            Some(&Reverse(slot)) if slot < self.slots.len() => {
                self.free.pop();
                slot
            }
            _ => {
                // Every entry left is stale (each past the slots there are).
                self.free.clear();
                assert!(
                    self.slots.len() < MAX_SLOTS,
                    "the pool holds {MAX_SLOTS} connection records already"
                );
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let id = ids.next_connection_at(slot);
        self.slots[slot] = Some(make(id));
        self.len += 1;
        id
    }

    /// The record of `id`, while its connection is open.
    #[inline]
    pub(super) fn get(&self, id: &ConnectionId) -> Option<&Connection> {
        match self.slots.get(id.slot()) {
            Some(Some(c)) if c.id == *id => Some(c),
            _ => None,
        }
    }

    /// [`Records::get`], to change.
    #[inline]
    pub(super) fn get_mut(&mut self, id: &ConnectionId) -> Option<&mut Connection> {
        match self.slots.get_mut(id.slot()) {
            Some(Some(c)) if c.id == *id => Some(c),
            _ => None,
        }
    }

    /// Whether `id`'s connection is open.
    pub(super) fn contains_key(&self, id: &ConnectionId) -> bool {
        self.get(id).is_some()
    }

    /// Takes `id`'s record out; its slot is the next one filled.
    pub(super) fn remove(&mut self, id: &ConnectionId) -> Option<Connection> {
        let slot = self.slots.get_mut(id.slot())?;
        if slot.as_ref().is_none_or(|c| c.id != *id) {
            return None;
        }
        let record = slot.take();
        self.len -= 1;
        if id.slot() + 1 == self.slots.len() {
            // The last record: give back the empty slots it ended.
            self.slots.pop();
            while self.slots.last().is_some_and(Option::is_none) {
                self.slots.pop();
            }
            if self.slots.capacity() > 4 * self.slots.len() + 64 {
                self.slots.shrink_to(2 * self.slots.len());
            }
        } else {
            self.free.push(Reverse(id.slot()));
        }
        record
    }

    /// The records, in slot order (not id order: sort what is emitted).
    pub(super) fn values(&self) -> impl Iterator<Item = &Connection> {
        self.slots.iter().flatten()
    }

    /// [`Records::values`], to change.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Connection> {
        self.slots.iter_mut().flatten()
    }

    /// The ids, in slot order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &ConnectionId> {
        self.values().map(|c| &c.id)
    }
}

impl Records {
    /// The slab's own invariants, for
    /// [`Pool::check_invariants`](super::Pool::check_invariants): each record
    /// in the slot its id names, the count right, the free list exactly the
    /// empty slots.
    pub(super) fn check(&self) -> Result<(), String> {
        for (slot, c) in self.slots.iter().enumerate() {
            if let Some(c) = c {
                if c.id.slot() != slot {
                    return Err(format!("{} filed in slot {slot}", c.id));
                }
            }
        }
        let held = self.slots.iter().flatten().count();
        if held != self.len {
            return Err(format!("records count {} but hold {held}", self.len));
        }
        let mut free: Vec<usize> =
            self.free.iter().map(|r| r.0).filter(|&slot| slot < self.slots.len()).collect();
        free.sort_unstable();
        let entries = free.len();
        free.dedup();
        if free.len() != entries || free.len() + held != self.slots.len() {
            return Err("the free list is not the empty slots".to_owned());
        }
        if free.iter().any(|&slot| self.slots[slot].is_some()) {
            return Err("a free slot holds a record".to_owned());
        }
        if self.slots.last().is_some_and(Option::is_none) {
            return Err("an empty slot past the last record".to_owned());
        }
        Ok(())
    }
}

impl Index<&ConnectionId> for Records {
    type Output = Connection;

    /// # Panics
    /// When `id`'s connection is not open.
    #[inline]
    fn index(&self, id: &ConnectionId) -> &Connection {
        self.get(id).unwrap_or_else(|| panic!("no open connection {id}"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::address::{Address, Protocol, Proxy, Scheme};
    use crate::route::Route;
    use crate::time::Instant;

    fn record(id: ConnectionId) -> Connection {
        let address = Address::builder(Scheme::Http, "127.0.0.1", 80).build().expect("address");
        let route = Route::new(address.clone(), Proxy::Direct, "127.0.0.1:80".parse().expect("socket"));
        Connection::established(id, (address, route, Protocol::Http1), Instant::ZERO, None, None)
    }

    #[test]
    fn a_closed_connections_id_never_finds_its_slots_next_tenant() {
        let (mut records, mut ids) = (Records::default(), IdAllocator::default());
        let a = records.insert_with(&mut ids, record);
        let b = records.insert_with(&mut ids, record);
        assert_eq!(records.remove(&a).map(|c| c.id), Some(a));
        let c = records.insert_with(&mut ids, record);
        assert_eq!(c.slot(), a.slot(), "the lowest free slot");
        assert_ne!(c, a);
        assert!(records.get(&a).is_none() && records.remove(&a).is_none());
        assert_eq!(records[&c].id, c);
        assert!(a < b && b < c, "ids compare in the order they were issued");
        assert_eq!(format!("{a} {b} {c}"), "conn#1 conn#2 conn#3");
        records.check().unwrap();
    }

    #[test]
    fn the_slots_past_the_last_record_are_given_back() {
        let (mut records, mut ids) = (Records::default(), IdAllocator::default());
        let all: Vec<ConnectionId> = (0..10_000).map(|_| records.insert_with(&mut ids, record)).collect();
        let kept = all[0];
        for id in all.iter().skip(1).rev().step_by(2).chain(all.iter().skip(2).step_by(2)) {
            assert!(records.remove(id).is_some());
        }
        records.check().unwrap();
        assert_eq!(records.slots.len(), 1, "only the first record's slot");
        assert!(records.slots.capacity() <= 64 + 4, "capacity given back: {}", records.slots.capacity());
        assert_eq!(records.values().map(|c| c.id).collect::<Vec<_>>(), [kept]);
    }

    proptest! {
        /// Any mix of opens and closes: the records are exactly the open
        /// connections, every id finds its own record or none, and the
        /// slab's invariants hold.
        #[test]
        fn the_records_are_the_open_connections(ops in proptest::collection::vec((any::<bool>(), 0usize..64), 0..400)) {
            let (mut records, mut ids) = (Records::default(), IdAllocator::default());
            let mut open: BTreeMap<ConnectionId, ()> = BTreeMap::new();
            let mut closed: Vec<ConnectionId> = Vec::new();
            for (insert, pick) in ops {
                if insert || open.is_empty() {
                    let id = records.insert_with(&mut ids, record);
                    prop_assert!(open.insert(id, ()).is_none() && !closed.contains(&id));
                } else {
                    let id = *open.keys().nth(pick % open.len()).expect("picked");
                    open.remove(&id);
                    prop_assert_eq!(records.remove(&id).map(|c| c.id), Some(id));
                    closed.push(id);
                }
                records.check().map_err(TestCaseError::fail)?;
                prop_assert!(open.keys().all(|id| records.get(id).is_some_and(|c| c.id == *id)));
                prop_assert!(closed.iter().all(|id| !records.contains_key(id)));
                let mut held: Vec<ConnectionId> = records.keys().copied().collect();
                held.sort();
                prop_assert!(held.iter().eq(open.keys()));
                prop_assert_eq!(records.slots.len(), open.keys().map(|id| id.slot() + 1).max().unwrap_or(0));
            }
        }
    }
}
