//! A fast, deterministic hasher for the core's internal maps. Their keys are
//! ids the core issued and Addresses (which carry a precomputed SipHash of
//! their fields), so the standard library's per-process random SipHash buys
//! nothing here and cost over a third of an acquire + release (callgrind).
//! Adapters use it for their own maps keyed by the core's ids (a call's
//! waiter, a connection's socket), for the same reason.
//!
//! ```
//! # use switchyard_core::hash::FastMap;
//!
//! let mut sockets: FastMap<u64, &str> = FastMap::default();
//! sockets.insert(7, "the seventh connection's socket");
//! assert_eq!(sockets.get(&7), Some(&"the seventh connection's socket"));
//! ```
//!
//! The mixing step is the well-known multiply-rotate scheme (as in Firefox and
//! rustc's "Fx" hasher): fold each word in with a rotate, xor and multiply by
//! an odd constant. Deterministic across processes, so nothing the core
//! computes depends on a random seed.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x517c_c1b7_2722_0a95;

/// The hasher. See the module docs.
#[derive(Default, Clone, Copy, Debug)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A `HashSet` with [`FastHasher`].
pub type FastSet<T> = HashSet<T, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash(v: impl Hash) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(v)
    }

    #[test]
    fn deterministic_and_spread() {
        assert_eq!(hash(42u64), hash(42u64));
        assert_eq!(hash("example.com"), hash("example.com"));
        assert_ne!(hash("example.com"), hash("example.org"));
        // Short and long byte strings, differing only in the last byte.
        assert_ne!(hash([1u8, 2, 3]), hash([1u8, 2, 4]));
        assert_ne!(hash([7u8; 17]), hash([[7u8; 16].as_slice(), &[8]].concat()));
        // Consecutive ids land in many different buckets (top 7 bits and low bits vary).
        let tops: FastSet<u64> = (0..64u64).map(|i| hash(i) >> 57).collect();
        assert!(tops.len() > 32, "{}", tops.len());
        let lows: FastSet<u64> = (0..64u64).map(|i| hash(i) & 63).collect();
        assert!(lows.len() > 32, "{}", lows.len());
    }
}
