//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B): decoding the strings a
//! server sends, encoding none (our literals go out raw: always valid, and a
//! request's fields are few).
//!
//! The code is canonical: within one length, codes count up in symbol order,
//! and each length's first code follows the last code of the length before
//! (shifted). So a code of length `L` is found by comparing its top `L` bits
//! with the first code past that length's range, lengths in increasing order;
//! the common octets (codes of at most 8 bits) come from a 256-entry table.

#[path = "huffman_codes.rs"]
mod codes;
use codes::CODES;

/// A string's Huffman code did not decode (RFC 7541 §5.2: padding longer
/// than 7 bits or not of ones, or the EOS symbol inside the string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HuffmanError;

const MIN_LEN: usize = 5;
const MAX_LEN: usize = 30;

/// For each length: (first code, number of codes, index of its first symbol
/// in `SORTED`).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    sorted: [u16; 257],
    /// By the next 8 bits: the symbol and its length, when its code has at
    /// most 8 bits (length 0: a longer code).
    fast: [(u8, u8); 256],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        sorted: [0; 257],
        fast: [(0, 0); 256],
    };
    let mut next = 0usize;
    let mut len = MIN_LEN;
    while len <= MAX_LEN {
        c.offset[len] = next as u16;
        let mut sym = 0;
        while sym < 257 {
            let (code, l) = CODES[sym];
            if l as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = code;
                }
                c.count[len] += 1;
                c.sorted[next] = sym as u16;
                next += 1;
                if len <= 8 {
                    let shift = 8 - len;
                    let start = (code as usize) << shift;
                    let mut j = 0;
                    while j < (1 << shift) {
                        c.fast[start + j] = (sym as u8, len as u8);
                        j += 1;
                    }
                }
            }
            sym += 1;
        }
        len += 1;
    }
    c
}

static TABLE: Canonical = canonical();

/// Decodes `input` onto `out`.
///
/// ```
/// # use switchyard_core::http2::hpack::huffman_decode;
/// // "www.example.com", RFC 7541 C.4.1.
/// let coded = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
/// let mut out = Vec::new();
/// huffman_decode(&coded, &mut out).unwrap();
/// assert_eq!(out, b"www.example.com");
/// ```
pub fn huffman_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let t = &TABLE;
    // Valid bits are the low `bits` of `acc`.
    let mut acc: u64 = 0;
    let mut bits: usize = 0;
    let mut bytes = input.iter();
    loop {
        while bits <= 56 {
            match bytes.next() {
                Some(&b) => {
                    acc = (acc << 8) | u64::from(b);
                    bits += 8;
                }
                None => break,
            }
        }
        if bits == 0 {
            return Ok(());
        }
        // The next 8 bits (padded with ones past the end).
        let top8 = if bits >= 8 {
            (acc >> (bits - 8)) as usize & 0xff
        } else {
            ((acc << (8 - bits)) as usize | ((1 << (8 - bits)) - 1)) & 0xff
        };
        let (sym, len) = t.fast[top8];
        if len != 0 && usize::from(len) <= bits {
            out.push(sym);
            bits -= usize::from(len);
            continue;
        }
        if bits < 8 {
            // What is left must be padding: fewer than 8 bits, all ones.
            let mask = (1u64 << bits) - 1;
            return if acc & mask == mask { Ok(()) } else { Err(HuffmanError) };
        }
        let mut len = 9;
        let found = loop {
            if len > MAX_LEN || len > bits {
                break None;
            }
            let code = (acc >> (bits - len)) as u32 & ((1u32 << len) - 1);
            let first = t.first[len];
            if t.count[len] > 0 && code >= first && code - first < t.count[len] {
                break Some(t.sorted[usize::from(t.offset[len]) + (code - first) as usize]);
            }
            len += 1;
        };
        match found {
            Some(256) | None => {
                // EOS inside the string, or a code cut off at the end (the
                // remaining bits are not valid padding: more than 7 of them).
                return Err(HuffmanError);
            }
            Some(sym) => {
                out.push(sym as u8);
                bits -= len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes with the table (tests only: our literals go out raw).
    fn encode(input: &[u8]) -> Vec<u8> {
        let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
        for &b in input {
            let (code, len) = CODES[usize::from(b)];
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                out.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        if bits > 0 {
            out.push(((acc << (8 - bits)) | ((1 << (8 - bits)) - 1)) as u8);
        }
        out
    }

    #[test]
    fn every_octet_decodes_alone_and_in_company() {
        for b in 0..=255u8 {
            let mut out = Vec::new();
            huffman_decode(&encode(&[b]), &mut out).unwrap();
            assert_eq!(out, [b], "octet {b}");
        }
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut out = Vec::new();
        huffman_decode(&encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn rfc_examples_decode() {
        // RFC 7541 C.4.2 and C.6.1.
        let cases: [(&[u8], &[u8]); 2] =
            [(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], b"no-cache"), (&[0x64, 0x02], b"302")];
        for (coded, plain) in cases {
            let mut out = Vec::new();
            huffman_decode(coded, &mut out).unwrap();
            assert_eq!(out, plain);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        let mut out = Vec::new();
        // 'a' is 00011 (5 bits): padding of zeros is not allowed.
        assert_eq!(huffman_decode(&[0b0001_1000], &mut out), Err(HuffmanError));
        // A whole byte of ones after a full symbol: padding longer than 7 bits.
        assert_eq!(huffman_decode(&[0b0001_1111, 0xff], &mut out), Err(HuffmanError));
        // EOS itself (30 ones) inside the string.
        assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(HuffmanError));
        // Empty input is the empty string.
        out.clear();
        assert_eq!(huffman_decode(&[], &mut out), Ok(()));
        assert!(out.is_empty());
    }
}
