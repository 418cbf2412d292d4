//! QUIC's variable-length integers (RFC 9000 §16), which HTTP/3 uses for frame
//! types, lengths, stream types, settings and GOAWAY ids: the top two bits of
//! the first byte say the length (1, 2, 4 or 8 bytes), the rest is the value,
//! big-endian, up to 2^62 - 1.

use bytes::BufMut;

/// The largest value a variable-length integer holds: 2^62 - 1.
pub const MAX: u64 = (1 << 62) - 1;

/// Reads one integer from the start of `buf`: the value and the bytes it
/// took, or `None` when `buf` holds only part of it.
///
/// ```
/// # use switchyard_core::http3::varint;
/// assert_eq!(varint::decode(&[0x25]), Some((37, 1)));
/// assert_eq!(varint::decode(&[0x7b, 0xbd]), Some((15_293, 2)));
/// assert_eq!(varint::decode(&[0x9d, 0x7f, 0x3e]), None); // 4 bytes announced, 3 here
/// ```
#[must_use]
pub fn decode(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        value = (value << 8) | u64::from(b);
    }
    Some((value, len))
}

/// How many bytes `value` takes (values past [`MAX`] are written as `MAX`).
#[must_use]
pub fn len(value: u64) -> usize {
    match value {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `value` in the shortest form; a value past [`MAX`] (which no
/// caller of ours produces: lengths and ids are far smaller) is written as
/// `MAX`.
pub fn encode(value: u64, out: &mut impl BufMut) {
    let value = value.min(MAX);
    match len(value) {
        1 => out.put_u8(value as u8),
        2 => out.put_u16(0x4000 | value as u16),
        4 => out.put_u32(0x8000_0000 | value as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_rfc_examples() {
        // RFC 9000 Appendix A.1's sample encodings.
        assert_eq!(
            decode(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(decode(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(decode(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(decode(&[0x25]), Some((37, 1)));
        // A non-shortest form is still the same value.
        assert_eq!(decode(&[0x40, 0x25]), Some((37, 2)));
        assert_eq!(decode(&[]), None);
    }

    proptest! {
        #[test]
        fn round_trip(value in 0..=MAX, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            encode(value, &mut out);
            prop_assert_eq!(out.len(), len(value));
            let whole = out.len();
            for cut in 0..whole {
                prop_assert_eq!(decode(&out[..cut]), None);
            }
            out.extend_from_slice(&tail);
            prop_assert_eq!(decode(&out), Some((value, whole)));
        }
    }
}
