//! Opaque identifiers. Never reused within one [`IdAllocator`].
//!
//! A call's sub-identifiers ([`AttemptId`], [`QueryId`]) embed the [`CallId`], so an
//! owner of many races can route an embedder's report to the right race without a
//! lookup table, and an id from one race is never mistaken for another's.

use std::fmt;
use std::num::NonZeroU64;

/// One call's request for a connection.
// Never zero: an `Option<CallId>` (every event carries one) is 8 bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(NonZeroU64);

/// One connection, pooled or not.
// A sequence number (high 40 bits: the order ids compare in, and what
// `Display` shows) and the pool's slot for the connection's record (low 24
// bits), so the pool finds a record by indexing, not hashing.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(u64);

/// Bits of a [`ConnectionId`] that hold its record's slot.
const SLOT_BITS: u32 = 24;
/// Connection sequence numbers run from 1 to this (2^40 - 1), then start
/// again at 1: 127 days at 100 000 new connections a second. Only an id held
/// that long, for a connection long closed, could meet its namesake.
const SEQ_MAX: u64 = (1 << (64 - SLOT_BITS)) - 1;

/// How many connection records a pool holds at most (2^24, far above any
/// process's descriptor limit): the slots a [`ConnectionId`] can name.
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;

/// One connect attempt (TCP, then for the winner its handshakes) on one route.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId {
    call: CallId,
    seq: u32,
}

/// One DNS query a call asked the embedder to perform.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryId {
    call: CallId,
    seq: u32,
}

impl AttemptId {
    pub(crate) fn new(call: CallId, seq: u32) -> Self {
        AttemptId { call, seq }
    }
    /// The call that started this attempt.
    #[must_use]
    pub fn call(self) -> CallId {
        self.call
    }
}

impl QueryId {
    pub(crate) fn new(call: CallId, seq: u32) -> Self {
        QueryId { call, seq }
    }
    /// The call that asked for this query.
    #[must_use]
    pub fn call(self) -> CallId {
        self.call
    }
}

/// Hands out [`CallId`]s and [`ConnectionId`]s, each never reused.
///
/// One allocator belongs to one owner of the core's state (a pool, or an embedder
/// running races by hand). Ids from different allocators may be equal.
///
/// ```
/// # use switchyard_core::IdAllocator;
/// let mut ids = IdAllocator::default();
/// let (a, b) = (ids.next_call(), ids.next_call());
/// assert_ne!(a, b);
/// ```
#[derive(Debug, Default, Clone)]
pub struct IdAllocator {
    calls: u64,
    connections: u64,
}

impl IdAllocator {
    /// A fresh call id.
    pub fn next_call(&mut self) -> CallId {
        self.calls += 1;
        CallId(NonZeroU64::new(self.calls).expect("counted from 1"))
    }
    /// Whether `id` was handed out by this allocator.
    #[must_use]
    pub fn has_issued_call(&self, id: CallId) -> bool {
        (1..=self.calls).contains(&id.0.get())
    }
    /// Whether `id`'s sequence number was reached by this allocator (its
    /// connection may since have closed).
    #[must_use]
    pub fn has_issued_connection(&self, id: ConnectionId) -> bool {
        let issued = self.connections.min(SEQ_MAX);
        (1..=issued).contains(&id.seq())
    }
    /// A fresh connection id (its record slot 0: a pool allots ids with
    /// slots of its own).
    pub fn next_connection(&mut self) -> ConnectionId {
        self.next_connection_at(0)
    }
    /// A fresh connection id naming record slot `slot` (below [`MAX_SLOTS`]).
    pub(crate) fn next_connection_at(&mut self, slot: usize) -> ConnectionId {
        debug_assert!(slot < MAX_SLOTS);
        self.connections += 1;
        let seq = (self.connections - 1) % SEQ_MAX + 1;
        ConnectionId(seq << SLOT_BITS | slot as u64)
    }
}

impl ConnectionId {
    /// Its sequence number: 1 for a pool's first connection.
    fn seq(self) -> u64 {
        self.0 >> SLOT_BITS
    }
    /// The slot of its record in its pool.
    pub(crate) fn slot(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }
}

#[cfg(test)]
impl ConnectionId {
    /// The id with this number, for the core's own unit tests.
    pub(crate) fn from_raw(n: u64) -> ConnectionId {
        ConnectionId(n << SLOT_BITS)
    }
}

impl fmt::Debug for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call#{}", self.0)
    }
}
impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
impl fmt::Debug for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.seq())
    }
}
impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
impl fmt::Debug for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/attempt#{}", self.call.0, self.seq)
    }
}
impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
impl fmt::Debug for QueryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/dns#{}", self.call.0, self.seq)
    }
}
impl fmt::Display for QueryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
