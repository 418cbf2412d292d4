//! The request bytes a [`Driver`](super::Driver) has encoded but not yet seen
//! written: small pieces (the head, chunk framing, small body chunks) copied
//! into one buffer, and a large body chunk held as the caller's [`Bytes`]
//! between them, so a big upload is never copied inside the client.

use bytes::{Buf, Bytes};

/// Body chunks at least this long are sent from the caller's buffer.
pub(crate) const CARRY_MIN: usize = 16 * 1024;

/// Unwritten request bytes, in order: `head[pos..]`, `carry`, `tail[tail_pos..]`.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    head: Vec<u8>,
    pos: usize,
    carry: Bytes,
    tail: Vec<u8>,
    tail_pos: usize,
}

impl Outbox {
    /// Starts with `bytes` (the request head).
    pub(crate) fn new(bytes: Vec<u8>) -> Outbox {
        Outbox { head: bytes, ..Outbox::default() }
    }

    /// The head's buffer, emptied, for the connection's next exchange.
    pub(crate) fn into_head_buffer(self) -> Vec<u8> {
        let mut head = self.head;
        head.clear();
        head
    }

    /// Bytes still to write.
    pub(crate) fn len(&self) -> usize {
        self.head.len() - self.pos + self.carry.len() + self.tail.len() - self.tail_pos
    }

    /// Whether everything was written.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the next small bytes go: after a held chunk, into the tail.
    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        if self.carry.is_empty() && self.tail_pos >= self.tail.len() {
            &mut self.head
        } else {
            &mut self.tail
        }
    }

    /// Holds a large chunk (only when nothing is held yet: the driver takes the
    /// next chunk once this one is written); `before` and `after` frame it.
    pub(crate) fn hold(&mut self, before: &[u8], chunk: Bytes, after: &[u8]) {
        debug_assert!(self.carry.is_empty() && self.tail_pos >= self.tail.len());
        self.head.extend_from_slice(before);
        self.carry = chunk;
        self.tail.clear();
        self.tail_pos = 0;
        self.tail.extend_from_slice(after);
    }

    /// The next bytes to write, if any.
    pub(crate) fn pending(&self) -> Option<&[u8]> {
        if self.pos < self.head.len() {
            Some(&self.head[self.pos..])
        } else if !self.carry.is_empty() {
            Some(&self.carry)
        } else if self.tail_pos < self.tail.len() {
            Some(&self.tail[self.tail_pos..])
        } else {
            None
        }
    }

    /// `n` bytes of [`Outbox::pending`] were written; returns how many counted
    /// (at most what was pending).
    pub(crate) fn advance(&mut self, n: usize) -> usize {
        let n = n.min(self.pending().map_or(0, <[u8]>::len));
        if self.pos < self.head.len() {
            self.pos += n;
        } else if !self.carry.is_empty() {
            self.carry.advance(n);
        } else {
            self.tail_pos += n;
        }
        if self.is_empty() {
            self.clear();
        }
        n
    }

    /// Drops whatever is unwritten (keeping the buffers' capacity).
    pub(crate) fn clear(&mut self) {
        self.head.clear();
        self.pos = 0;
        self.carry = Bytes::new();
        self.tail.clear();
        self.tail_pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes everything in pieces of `step` bytes; returns the bytes.
    fn drain(o: &mut Outbox, step: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(p) = o.pending() {
            let k = p.len().min(step);
            got.extend_from_slice(&p[..k]);
            assert_eq!(o.advance(k), k);
        }
        got
    }

    #[test]
    fn bytes_come_out_in_order_whatever_the_write_sizes() {
        for step in [1, 3, 7, 1000] {
            let mut o = Outbox::new(b"HEAD".to_vec());
            o.hold(b"5\r\n", Bytes::from_static(b"hello"), b"\r\n");
            assert_eq!(o.len(), 4 + 3 + 5 + 2);
            assert_eq!(drain(&mut o, step), b"HEAD5\r\nhello\r\n");
            assert!(o.is_empty());
            // Small bytes after a written hold go to the front again.
            o.buffer().extend_from_slice(b"0\r\n\r\n");
            assert_eq!(drain(&mut o, step), b"0\r\n\r\n");
        }
    }

    #[test]
    fn small_bytes_added_while_a_chunk_is_held_follow_it() {
        let mut o = Outbox::new(Vec::new());
        o.hold(b"", Bytes::from_static(b"body"), b"");
        o.buffer().extend_from_slice(b"0\r\n\r\n");
        assert_eq!(drain(&mut o, 2), b"body0\r\n\r\n");
    }

    #[test]
    fn advance_never_counts_more_than_pending() {
        let mut o = Outbox::new(b"ab".to_vec());
        assert_eq!(o.advance(10), 2);
        assert_eq!(o.advance(10), 0);
        assert!(o.pending().is_none());
    }
}
