//! QPACK (RFC 9204) without a dynamic table: the field sections of HTTP/3.
//!
//! We tell the server `SETTINGS_QPACK_MAX_TABLE_CAPACITY = 0` and
//! `SETTINGS_QPACK_BLOCKED_STREAMS = 0`, so every section it sends us refers to
//! the static table and literals only, and decodes the moment it arrives (no
//! stream ever waits on the encoder stream). Our own sections do the same: a
//! field is the static entry's index when name and value match one, a literal
//! naming a static entry when the name matches, else a literal name — always
//! valid whatever the server's table allows. Strings go out raw; the server's
//! may be Huffman-coded (HPACK's code, RFC 7541 Appendix B).
//!
//! ```
//! use bytes::BytesMut;
//! use switchyard_core::http3::qpack::{Decoder, Encoder};
//!
//! let mut section = BytesMut::new();
//! Encoder::begin(&mut section);
//! Encoder::field(&mut section, ":status", b"200", false); // static entry 25: one byte
//! Encoder::field(&mut section, "x-trace", b"abc", false);
//! let mut fields = Vec::new();
//! Decoder::new(16 * 1024).decode(&section.freeze(), |name, value| fields.push((name, value))).unwrap();
//! assert_eq!(fields.len(), 2);
//! assert_eq!(fields[1].1, "abc");
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use http::header::HeaderValue;

use crate::http2::hpack::{self, huffman_decode, Name};

/// RFC 9204 Appendix A: the static table, index 0 first.
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    ("strict-transport-security", "max-age=31536000; includesubdomains"),
    ("strict-transport-security", "max-age=31536000; includesubdomains; preload"),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    ("content-security-policy", "script-src 'none'; object-src 'none'; base-uri 'none'"),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// Per field in a section's size: name and value lengths plus 32 (RFC 9114
/// §4.2.2, as HTTP/2 counts).
const FIELD_OVERHEAD: usize = 32;

/// Why a field section did not decode. Except for a malformed field
/// ([`QpackError::is_malformed`]) or a section past our limit, the
/// connection must end with [`QpackError::code`] (RFC 9204 §2.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpackError {
    /// An integer past the section's end or past 2³² − 1.
    Integer,
    /// A string past the section's end.
    Truncated,
    /// A Huffman string that did not decode.
    Huffman,
    /// A static index past the table's 99 entries.
    Index,
    /// A reference to the dynamic table, or a Required Insert Count above
    /// zero: we allowed the server no table.
    Dynamic,
    /// The decoded section is larger than our SETTINGS_MAX_FIELD_SECTION_SIZE.
    TooLarge,
    /// A field name with characters a name cannot have (upper case among them).
    BadName,
    /// A field value with characters a value cannot have.
    BadValue,
}

impl QpackError {
    /// A malformed field (RFC 9114 §4.1.2): the section decoded, the response
    /// is refused (a stream error, H3_MESSAGE_ERROR), the connection stays.
    #[must_use]
    pub fn is_malformed(self) -> bool {
        matches!(self, QpackError::BadName | QpackError::BadValue)
    }

    /// The error code to close with: QPACK_DECOMPRESSION_FAILED (0x200) for
    /// a section that did not decode, H3_EXCESSIVE_LOAD (0x107) for one past
    /// our limit (a stream error), H3_MESSAGE_ERROR (0x10e) for a malformed
    /// field (a stream error).
    #[must_use]
    pub fn code(self) -> u64 {
        match self {
            QpackError::BadName | QpackError::BadValue => super::code::MESSAGE_ERROR,
            QpackError::TooLarge => super::code::EXCESSIVE_LOAD,
            _ => super::code::QPACK_DECOMPRESSION_FAILED,
        }
    }
}

impl std::fmt::Display for QpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QpackError::Integer => "a QPACK integer overflowed or was cut off",
            QpackError::Truncated => "a QPACK string was cut off",
            QpackError::Huffman => "a QPACK Huffman string did not decode",
            QpackError::Index => "a QPACK static index is past the table",
            QpackError::Dynamic => "a QPACK section uses a dynamic table we did not allow",
            QpackError::TooLarge => "a field section is larger than our SETTINGS_MAX_FIELD_SECTION_SIZE",
            QpackError::BadName => "a header field name is malformed",
            QpackError::BadValue => "a header field value is malformed",
        })
    }
}

impl std::error::Error for QpackError {}

fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<usize, QpackError> {
    hpack::integer(block, at, n).map_err(|_| QpackError::Integer)
}

/// Decodes field sections that use the static table and literals only.
#[derive(Debug)]
pub struct Decoder {
    max_section: usize,
    scratch: Vec<u8>,
}

impl Decoder {
    /// A decoder that refuses sections past `max_field_section_size` (the
    /// SETTINGS_MAX_FIELD_SECTION_SIZE we announce; name + value + 32 per field).
    #[must_use]
    pub fn new(max_field_section_size: usize) -> Decoder {
        Decoder { max_section: max_field_section_size, scratch: Vec::new() }
    }

    /// A string literal whose length has an `n`-bit prefix and whose Huffman
    /// flag is the bit just above it.
    fn string(&mut self, block: &Bytes, at: &mut usize, n: u32) -> Result<Bytes, QpackError> {
        let huffman = block.get(*at).ok_or(QpackError::Truncated)? & (1 << n) != 0;
        let len = integer(block, at, n)?;
        let end = at.checked_add(len).filter(|e| *e <= block.len()).ok_or(QpackError::Truncated)?;
        let out = if huffman {
            self.scratch.clear();
            huffman_decode(&block[*at..end], &mut self.scratch).map_err(|_| QpackError::Huffman)?;
            Bytes::copy_from_slice(&self.scratch)
        } else {
            block.slice(*at..end)
        };
        *at = end;
        Ok(out)
    }

    /// Decodes one whole field section, handing each field to `field` in
    /// order. A malformed field is reported after the whole section was read.
    ///
    /// # Errors
    /// See [`QpackError`]: what failed, and whether the connection survives.
    pub fn decode(
        &mut self,
        block: &Bytes,
        mut field: impl FnMut(Name, HeaderValue),
    ) -> Result<(), QpackError> {
        let mut at = 0;
        // The prefix (§4.5.1): Required Insert Count, then the Base. With no
        // table, the count must be 0 and the Base means nothing.
        if integer(block, &mut at, 8)? != 0 {
            return Err(QpackError::Dynamic);
        }
        integer(block, &mut at, 7)?;
        let mut size = 0usize;
        let mut malformed = None;
        while at < block.len() {
            let b = block[at];
            let (name, value) = if b & 0x80 != 0 {
                // Indexed field line (§4.5.2): T (0x40) = static.
                if b & 0x40 == 0 {
                    return Err(QpackError::Dynamic);
                }
                let (n, v) = *STATIC.get(integer(block, &mut at, 6)?).ok_or(QpackError::Index)?;
                (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes()))
            } else if b & 0x40 != 0 {
                // Literal with name reference (§4.5.4): N (0x20), T (0x10).
                if b & 0x10 == 0 {
                    return Err(QpackError::Dynamic);
                }
                let (n, _) = *STATIC.get(integer(block, &mut at, 4)?).ok_or(QpackError::Index)?;
                (Bytes::from_static(n.as_bytes()), self.string(block, &mut at, 7)?)
            } else if b & 0x20 != 0 {
                // Literal with literal name (§4.5.6): N (0x10), H (0x08), 3-bit length.
                let name = self.string(block, &mut at, 3)?;
                (name, self.string(block, &mut at, 7)?)
            } else {
                // Post-base forms (§4.5.3, §4.5.5) only ever name the dynamic table.
                return Err(QpackError::Dynamic);
            };
            size = size.saturating_add(name.len() + value.len() + FIELD_OVERHEAD);
            if size > self.max_section {
                return Err(QpackError::TooLarge);
            }
            match (Name::parse(name), HeaderValue::from_maybe_shared(value)) {
                (Ok(n), Ok(v)) => field(n, v),
                (Err(_), _) => {
                    malformed.get_or_insert(QpackError::BadName);
                }
                (Ok(_), Err(_)) => {
                    malformed.get_or_insert(QpackError::BadValue);
                }
            }
        }
        malformed.map_or(Ok(()), Err)
    }
}

/// Encodes field sections with the static table and literals (see the
/// module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct Encoder;

impl Encoder {
    /// Starts a section: Required Insert Count 0 and Base 0 (§4.5.1).
    pub fn begin(out: &mut BytesMut) {
        out.put_slice(&[0, 0]);
    }

    /// Appends one field (`name` lower case, as HTTP/3 requires). A
    /// `sensitive` one (credentials) carries the never-index bit, so no
    /// intermediary puts it in a table (§4.5.4, §7.1.3).
    pub fn field(out: &mut BytesMut, name: &str, value: &[u8], sensitive: bool) {
        let mut by_name = None;
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            if n.len() == name.len() && n == name {
                if v.as_bytes() == value && !sensitive {
                    hpack::put_integer(out, 0xc0, 6, i);
                    return;
                }
                by_name.get_or_insert(i);
            }
        }
        let never = if sensitive { 0x20 } else { 0 };
        match by_name {
            Some(i) => hpack::put_integer(out, 0x50 | never, 4, i),
            None => {
                hpack::put_integer(out, 0x20 | (never >> 1), 3, name.len());
                out.put_slice(name.as_bytes());
            }
        }
        hpack::put_integer(out, 0, 7, value.len());
        out.put_slice(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(block: &[u8]) -> Result<Vec<(String, Vec<u8>)>, QpackError> {
        let mut out = Vec::new();
        Decoder::new(64 * 1024).decode(&Bytes::copy_from_slice(block), |n, v| {
            let name = match n {
                Name::Pseudo(p) => String::from_utf8(p.to_vec()).unwrap(),
                Name::Header(h) => h.as_str().to_owned(),
            };
            out.push((name, v.as_bytes().to_vec()));
        })?;
        Ok(out)
    }

    #[test]
    fn static_entries_by_index() {
        // RFC 9204 Appendix A spot checks, with the two-byte prefix.
        assert_eq!(decode(&[0, 0, 0xc0 | 17]).unwrap(), [(":method".to_owned(), b"GET".to_vec())]);
        assert_eq!(decode(&[0, 0, 0xc0 | 25]).unwrap(), [(":status".to_owned(), b"200".to_vec())]);
        // Index 98 needs the 6-bit prefix's continuation: 63 + 35.
        assert_eq!(
            decode(&[0, 0, 0xff, 35]).unwrap(),
            [("x-frame-options".to_owned(), b"sameorigin".to_vec())]
        );
        assert_eq!(decode(&[0, 0, 0xff, 36]), Err(QpackError::Index));
    }

    #[test]
    fn the_rfc_example_b1() {
        // RFC 9204 Appendix B.1: `:path /index.html` as a literal with a
        // static name reference (index 1), raw value.
        let mut block = vec![0x00, 0x00, 0x51, 0x0b];
        block.extend_from_slice(b"/index.html");
        assert_eq!(decode(&block).unwrap(), [(":path".to_owned(), b"/index.html".to_vec())]);
    }

    #[test]
    fn huffman_literals_decode() {
        // "www.example.com" Huffman-coded (RFC 7541 C.4.1) as a literal name
        // `custom` (raw) with a Huffman value.
        let coded = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        let mut block = vec![0, 0, 0x20 | 6];
        block.extend_from_slice(b"custom");
        block.push(0x80 | coded.len() as u8);
        block.extend_from_slice(&coded);
        assert_eq!(decode(&block).unwrap(), [("custom".to_owned(), b"www.example.com".to_vec())]);
        // A Huffman name (the H bit above the 3-bit prefix) that is all padding past 7 bits.
        let mut bad = vec![0, 0, 0x20 | 0x08 | 1, 0xff, 0];
        assert_eq!(decode(&bad), Err(QpackError::Huffman));
        bad.truncate(3);
        assert_eq!(decode(&bad), Err(QpackError::Truncated));
    }

    #[test]
    fn the_dynamic_table_is_refused() {
        assert_eq!(decode(&[1, 0]), Err(QpackError::Dynamic), "Required Insert Count above 0");
        assert_eq!(decode(&[0, 0, 0x80]), Err(QpackError::Dynamic), "indexed, dynamic");
        assert_eq!(decode(&[0, 0, 0x40, 0]), Err(QpackError::Dynamic), "name reference, dynamic");
        assert_eq!(decode(&[0, 0, 0x10]), Err(QpackError::Dynamic), "post-base index");
        assert_eq!(decode(&[0, 0, 0x00, 0]), Err(QpackError::Dynamic), "post-base name reference");
        // Errors that end the connection carry QPACK_DECOMPRESSION_FAILED.
        assert_eq!(QpackError::Dynamic.code(), 0x200);
    }

    #[test]
    fn malformed_fields_and_the_size_limit_are_stream_errors() {
        let mut upper = vec![0, 0, 0x20 | 2];
        upper.extend_from_slice(b"Ab\x01x");
        assert_eq!(decode(&upper), Err(QpackError::BadName));
        let mut value = vec![0, 0, 0x50 | 5]; // cookie
        value.extend_from_slice(&[2, b'a', b'\n']);
        assert_eq!(decode(&value), Err(QpackError::BadValue));
        assert!(QpackError::BadValue.is_malformed() && QpackError::BadValue.code() == 0x10e);
        let mut big = BytesMut::new();
        Encoder::begin(&mut big);
        Encoder::field(&mut big, "x-big", &[b'a'; 100], false);
        let mut d = Decoder::new(100 + 5 + 32 - 1);
        assert_eq!(d.decode(&big.clone().freeze(), |_, _| {}), Err(QpackError::TooLarge));
        assert_eq!(QpackError::TooLarge.code(), 0x107);
        let mut d = Decoder::new(100 + 5 + 32);
        assert_eq!(d.decode(&big.freeze(), |_, _| {}), Ok(()));
    }

    #[test]
    fn a_section_from_another_implementation() {
        // What pylsqpack 1.0 (aioquic's QPACK) encodes for a response when the
        // peer allows no dynamic table: static references, Huffman strings.
        let hex =
            "0000d95f4d89198fdad31180aeeae25696d07abe9403aa5f29141004e2817ae001700053168dfff4548308996b\
                   5f44909d983f9b8d34cb3fcfda948e065c003f2ef2b12d424f4f88dc7a4aa711d1697f";
        let bytes: Vec<u8> =
            (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        let fields = decode(&bytes).unwrap();
        let fields: Vec<(&str, &[u8])> = fields.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        assert_eq!(
            fields,
            [
                (":status", &b"200"[..]),
                ("server", b"aioquic/1.7.2"),
                ("date", b"Mon, 07 Dec 2026 18:00:00 GMT"),
                ("content-type", b"text/html; charset=utf-8"),
                ("content-length", b"1234"),
                ("alt-svc", b"h3=\":4433\"; ma=3600"),
                ("x-custom", b"Some Value"),
            ]
        );
    }

    #[test]
    fn the_encoder_picks_the_shortest_static_form() {
        let mut out = BytesMut::new();
        Encoder::begin(&mut out);
        Encoder::field(&mut out, ":method", b"GET", false);
        assert_eq!(&out[..], [0, 0, 0xc0 | 17]);
        let mut out = BytesMut::new();
        Encoder::field(&mut out, ":path", b"/a", false);
        assert_eq!(&out[..], [0x51, 2, b'/', b'a']);
        let mut out = BytesMut::new();
        Encoder::field(&mut out, "authorization", b"Bearer x", true);
        // Index 84 past the 4-bit prefix: 15, then 84 - 15 = 69.
        assert_eq!(&out[..2], [0x50 | 0x20 | 15, 69], "a never-indexed literal naming static entry 84");
    }

    proptest! {
        /// Whatever fields go in come out, in order, byte for byte.
        #[test]
        fn round_trip(fields in proptest::collection::vec(
            (prop_oneof![
                Just(":method".to_owned()), Just(":path".to_owned()), Just(":status".to_owned()),
                Just("content-type".to_owned()), Just("authorization".to_owned()), "[a-z][a-z0-9-]{0,20}",
            ], proptest::collection::vec(0x20u8..0x7f, 0..40), any::<bool>()),
            0..12,
        )) {
            let mut out = BytesMut::new();
            Encoder::begin(&mut out);
            for (n, v, s) in &fields {
                Encoder::field(&mut out, n, v, *s);
            }
            let got = decode(&out).unwrap();
            let want: Vec<(String, Vec<u8>)> = fields.iter().map(|(n, v, _)| (n.clone(), v.clone())).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn decode_never_panics(block in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&block);
        }
    }
}
