//! HPACK (RFC 7541): the header blocks of one connection.
//!
//! [`Decoder`] reads the server's blocks with the full format (indexed
//! fields, literals with and without indexing, the dynamic table and its size
//! updates, Huffman strings). [`TableEncoder`] writes a connection's request
//! fields: the fields a client repeats on every request (`:authority`,
//! `user-agent`, `accept`, …) go into the dynamic table once and are sent as
//! one-byte indexes after that, which spares the server decoding them again;
//! credentials are never indexed; everything else goes as a literal naming a
//! static-table entry where one matches. Its table follows the server's
//! SETTINGS_HEADER_TABLE_SIZE (at most 4 096 octets). [`Encoder`] is the
//! stateless form (literals only).

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};

pub use super::huffman::{huffman_decode, HuffmanError};

/// A field's name as decoded: a pseudo-header or a regular name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    /// `:status`, `:method`, `:path`, `:scheme`, `:authority`, or another
    /// pseudo-header (kept as sent, so the caller can refuse it).
    Pseudo(Bytes),
    /// A regular field name.
    Header(HeaderName),
}

impl Name {
    pub(crate) fn parse(raw: Bytes) -> Result<Name, DecodeError> {
        if raw.first() == Some(&b':') {
            return Ok(Name::Pseudo(raw));
        }
        // RFC 9113 §8.2.1: names are lower case on HTTP/2.
        if raw.iter().any(u8::is_ascii_uppercase) {
            return Err(DecodeError::BadName);
        }
        HeaderName::from_bytes(&raw).map(Name::Header).map_err(|_| DecodeError::BadName)
    }
}

/// Why a header block did not decode: the connection's compression state is
/// lost (a connection error, COMPRESSION_ERROR) — except for a field that is
/// merely malformed ([`DecodeError::is_malformed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// An integer past the block's end or past 2³² .
    Integer,
    /// A string past the block's end.
    Truncated,
    /// A Huffman string that did not decode.
    Huffman,
    /// An index not in the static or dynamic table.
    Index,
    /// A dynamic table size update past our SETTINGS_HEADER_TABLE_SIZE, or
    /// after the block's first field.
    TableSize,
    /// A name with characters a field name cannot have (malformed).
    BadName,
    /// A value with characters a field value cannot have (malformed).
    BadValue,
}

impl DecodeError {
    /// A malformed field (RFC 9113 §8.1.1): the block decoded, the response
    /// is refused (a stream error), the connection stays usable.
    #[must_use]
    pub fn is_malformed(self) -> bool {
        matches!(self, DecodeError::BadName | DecodeError::BadValue)
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::Integer => "an HPACK integer overflowed or was cut off",
            DecodeError::Truncated => "an HPACK string was cut off",
            DecodeError::Huffman => "an HPACK Huffman string did not decode",
            DecodeError::Index => "an HPACK index is not in the table",
            DecodeError::TableSize => "an HPACK table size update was not allowed",
            DecodeError::BadName => "a header field name is malformed",
            DecodeError::BadValue => "a header field value is malformed",
        })
    }
}

/// RFC 7541 Appendix A: the static table (index 1 is the first).
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Each field costs its name and value plus 32 octets in a table (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// A table entry: its name and value, each absent when malformed (the server
/// may still index it, and the table must stay in step with its own), and its
/// size.
/// The last field is the name's length (the size counts it even when the
/// name is malformed).
type Entry = (Option<Name>, Option<HeaderValue>, usize, usize);

/// The dynamic table: newest first.
#[derive(Debug, Default)]
struct Table {
    entries: std::collections::VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Table {
    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((_, _, _, size)) = self.entries.pop_back() else { break };
            self.size -= size;
        }
    }

    fn insert(&mut self, name: Option<Name>, value: Option<HeaderValue>, name_len: usize, size: usize) {
        if size > self.max {
            // A field larger than the table empties it and is not kept (§4.4).
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        self.size += size;
        self.entries.push_front((name, value, name_len, size));
    }
}

/// The decoding side of one connection's HPACK state.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask for.
    limit: usize,
    /// Scratch for Huffman strings.
    scratch: Vec<u8>,
    statics: Vec<Entry>,
    /// The last few Huffman-coded values and what they decoded to. A server
    /// that re-sends the same fields as literals on every response (nginx:
    /// `server`, `content-type`, the second's `date`) costs a comparison per
    /// field instead of a decode, a check and an allocation.
    recent: Vec<(Vec<u8>, HeaderValue)>,
    /// The slot the next new value replaces.
    next: usize,
}

/// How many decoded values a decoder remembers, and the longest coded value
/// it remembers (a long one is unlikely to repeat, and costly to compare).
const RECENT: usize = 8;
const RECENT_LEN: usize = 64;

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(4096)
    }
}

impl Decoder {
    /// A decoder whose table may grow to `limit` octets (what our SETTINGS
    /// allow the server to use; 4 096 unless we said otherwise).
    #[must_use]
    pub fn new(limit: usize) -> Decoder {
        let statics = STATIC
            .iter()
            .map(|&(n, v)| {
                let name = if n.starts_with(':') {
                    Name::Pseudo(Bytes::from_static(n.as_bytes()))
                } else {
                    Name::Header(HeaderName::from_static(n))
                };
                (Some(name), Some(HeaderValue::from_static(v)), n.len(), n.len() + v.len() + ENTRY_OVERHEAD)
            })
            .collect();
        Decoder {
            table: Table { max: limit, ..Table::default() },
            limit,
            scratch: Vec::new(),
            statics,
            recent: Vec::new(),
            next: 0,
        }
    }

    fn entry(&self, index: usize) -> Result<&Entry, DecodeError> {
        match index {
            0 => Err(DecodeError::Index),
            1..=61 => Ok(&self.statics[index - 1]),
            _ => self.table.entries.get(index - 62).ok_or(DecodeError::Index),
        }
    }

    /// Decodes one whole header block, handing each field to `field` in
    /// order. A malformed field ([`DecodeError::is_malformed`]) is reported
    /// after the whole block was read, so the table stays in step with the
    /// server's; any other error leaves it out of step (the connection must
    /// end).
    pub fn decode(
        &mut self,
        block: &Bytes,
        mut field: impl FnMut(Name, HeaderValue),
    ) -> Result<(), DecodeError> {
        let mut at = 0;
        let mut first = true;
        let mut malformed = None;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = integer(block, &mut at, 7)?;
                match self.entry(index)? {
                    (Some(n), Some(v), _, _) => field(n.clone(), v.clone()),
                    (n, _, _, _) => {
                        malformed.get_or_insert(if n.is_none() {
                            DecodeError::BadName
                        } else {
                            DecodeError::BadValue
                        });
                    }
                }
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field.
                let size = integer(block, &mut at, 5)?;
                if size > self.limit || !first {
                    return Err(DecodeError::TableSize);
                }
                self.table.max = size;
                self.table.evict_to(size);
                continue;
            } else {
                // A literal (§6.2): with incremental indexing (01), without
                // (0000) or never indexed (0001).
                let indexing = b & 0x40 != 0;
                let prefix = if indexing { 6 } else { 4 };
                let index = integer(block, &mut at, prefix)?;
                let (name, name_len) = if index == 0 {
                    let raw = self.string(block, &mut at)?;
                    let len = raw.len();
                    (Name::parse(raw).ok(), len)
                } else {
                    let (n, _, name_len, _) = self.entry(index)?;
                    (n.clone(), *name_len)
                };
                let (value, value_len) = self.value(block, &mut at)?;
                if indexing {
                    self.table.insert(
                        name.clone(),
                        value.clone(),
                        name_len,
                        name_len + value_len + ENTRY_OVERHEAD,
                    );
                }
                match (name, value) {
                    (Some(n), Some(v)) => field(n, v),
                    (None, _) => {
                        malformed.get_or_insert(DecodeError::BadName);
                    }
                    (Some(_), None) => {
                        malformed.get_or_insert(DecodeError::BadValue);
                    }
                }
            }
            first = false;
        }
        malformed.map_or(Ok(()), Err)
    }

    /// A field value (a string literal, §5.2) as a header value (`None`
    /// when it is not a valid one) and its decoded length. A Huffman-coded
    /// value seen lately comes from [`Decoder::recent`].
    fn value(&mut self, block: &Bytes, at: &mut usize) -> Result<(Option<HeaderValue>, usize), DecodeError> {
        let huffman = block.get(*at).ok_or(DecodeError::Truncated)? & 0x80 != 0;
        if huffman {
            let mut peek = *at;
            let len = integer(block, &mut peek, 7)?;
            let end = peek.checked_add(len).filter(|e| *e <= block.len()).ok_or(DecodeError::Truncated)?;
            let coded = &block[peek..end];
            if len <= RECENT_LEN {
                if let Some((_, value)) = self.recent.iter().find(|(c, _)| c.as_slice() == coded) {
                    *at = end;
                    return Ok((Some(value.clone()), value.len()));
                }
            }
            let raw = self.string(block, at)?;
            let decoded = raw.len();
            let value = HeaderValue::from_maybe_shared(raw).ok();
            if let (Some(v), true) = (&value, len <= RECENT_LEN) {
                let slot = (coded.to_vec(), v.clone());
                if self.recent.len() < RECENT {
                    self.recent.push(slot);
                } else {
                    self.recent[self.next] = slot;
                }
                self.next = (self.next + 1) % RECENT;
            }
            return Ok((value, decoded));
        }
        let raw = self.string(block, at)?;
        let len = raw.len();
        Ok((HeaderValue::from_maybe_shared(raw).ok(), len))
    }

    /// A string literal (§5.2): raw bytes share the block; Huffman ones are
    /// decoded.
    fn string(&mut self, block: &Bytes, at: &mut usize) -> Result<Bytes, DecodeError> {
        let huffman = block.get(*at).ok_or(DecodeError::Truncated)? & 0x80 != 0;
        let len = integer(block, at, 7)?;
        let end = at.checked_add(len).filter(|e| *e <= block.len()).ok_or(DecodeError::Truncated)?;
        let raw = &block[*at..end];
        let out = if huffman {
            self.scratch.clear();
            huffman_decode(raw, &mut self.scratch).map_err(|_| DecodeError::Huffman)?;
            Bytes::copy_from_slice(&self.scratch)
        } else {
            block.slice(*at..end)
        };
        *at = end;
        Ok(out)
    }

    /// The table's current size in octets (fields plus 32 each).
    #[must_use]
    pub fn table_size(&self) -> usize {
        self.table.size
    }
}

/// An integer with an `n`-bit prefix (§5.1), at most 2³² − 1.
pub(crate) fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<usize, DecodeError> {
    let mask = (1u32 << n) - 1;
    let first = u32::from(*block.get(*at).ok_or(DecodeError::Integer)?) & mask;
    *at += 1;
    if first < mask {
        return Ok(first as usize);
    }
    let mut value = u64::from(mask);
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(DecodeError::Integer)?;
        *at += 1;
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(DecodeError::Integer);
        }
        if b & 0x80 == 0 {
            return Ok(value as usize);
        }
        shift += 7;
        if shift > 28 {
            return Err(DecodeError::Integer);
        }
    }
}

pub(crate) fn put_integer(out: &mut BytesMut, first: u8, n: u32, value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.put_u8(first | value as u8);
        return;
    }
    out.put_u8(first | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.put_u8((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.put_u8(rest as u8);
}

/// The encoding side: literals without indexing (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct Encoder;

impl Encoder {
    /// Appends one field: the static entry's index when name and value both
    /// match it, else a literal naming the static entry's name when one
    /// matches, else a literal name.
    pub fn field(self, out: &mut BytesMut, name: &str, value: &[u8]) {
        if let Some(i) = static_full(name, value) {
            put_integer(out, 0x80, 7, i);
            return;
        }
        put_literal(out, 0x00, 4, name, value);
    }
}

/// The most our encoder's table holds, whatever the server allows.
const ENCODER_TABLE: usize = 4096;

/// The encoding side of one connection, with a dynamic table (see the module
/// docs).
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// # use switchyard_core::http2::hpack::{Decoder, TableEncoder};
/// let mut e = TableEncoder::default();
/// let mut d = Decoder::default();
/// for _ in 0..2 {
///     let mut block = BytesMut::new();
///     e.begin(&mut block);
///     e.field(&mut block, "user-agent", b"switchyard");
///     let mut seen = Vec::new();
///     d.decode(&block.freeze(), |_, v| seen.push(v)).unwrap();
///     assert_eq!(seen, ["switchyard"]);
/// }
/// ```
#[derive(Debug)]
pub struct TableEncoder {
    /// Newest first, as the decoder numbers them.
    entries: std::collections::VecDeque<(Bytes, Bytes)>,
    size: usize,
    max: usize,
    /// A size update to send at the start of the next block.
    update: Option<usize>,
}

impl Default for TableEncoder {
    fn default() -> TableEncoder {
        TableEncoder { entries: std::collections::VecDeque::new(), size: 0, max: ENCODER_TABLE, update: None }
    }
}

impl TableEncoder {
    /// The server's SETTINGS_HEADER_TABLE_SIZE: the table shrinks to it (or
    /// to our own cap), and the next block says so.
    pub fn set_max(&mut self, peer: usize) {
        let max = peer.min(ENCODER_TABLE);
        if max != self.max {
            self.max = max;
            self.evict_to(max);
            self.update = Some(self.update.map_or(max, |u| u.min(max)));
        }
    }

    /// Starts a header block (a pending size update goes first).
    pub fn begin(&mut self, out: &mut BytesMut) {
        if let Some(max) = self.update.take() {
            put_integer(out, 0x20, 5, max);
        }
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((n, v)) = self.entries.pop_back() else { break };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }

    /// Appends one field.
    pub fn field(&mut self, out: &mut BytesMut, name: &str, value: &[u8]) {
        if let Some(i) = static_full(name, value) {
            put_integer(out, 0x80, 7, i);
            return;
        }
        if let Some(i) = self.entries.iter().position(|(n, v)| n == name.as_bytes() && v == value) {
            put_integer(out, 0x80, 7, 62 + i);
            return;
        }
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if matches!(name, "authorization" | "proxy-authorization" | "cookie") {
            // Never indexed, here or by any intermediary (RFC 7541 §7.1.3).
            put_literal(out, 0x10, 4, name, value);
        } else if repeated(name) && size <= self.max {
            put_literal(out, 0x40, 6, name, value);
            self.evict_to(self.max - size);
            self.size += size;
            self.entries.push_front((Bytes::copy_from_slice(name.as_bytes()), Bytes::copy_from_slice(value)));
        } else {
            put_literal(out, 0x00, 4, name, value);
        }
    }
}

/// Fields a client sends with the same value on request after request.
fn repeated(name: &str) -> bool {
    matches!(
        name,
        ":authority"
            | "user-agent"
            | "accept"
            | "accept-encoding"
            | "accept-language"
            | "content-type"
            | "cache-control"
    )
}

/// A literal field: `first`'s pattern, its name as a static index (in an
/// `n`-bit prefix) or a literal, then the value (raw, never Huffman).
fn put_literal(out: &mut BytesMut, first: u8, n: u32, name: &str, value: &[u8]) {
    match static_name(name) {
        Some(i) => put_integer(out, first, n, i),
        None => {
            out.put_u8(first);
            put_integer(out, 0x00, 7, name.len());
            out.put_slice(name.as_bytes());
        }
    }
    put_integer(out, 0x00, 7, value.len());
    out.put_slice(value);
}

fn static_full(name: &str, value: &[u8]) -> Option<usize> {
    Some(match (name, value) {
        (":method", b"GET") => 2,
        (":method", b"POST") => 3,
        (":path", b"/") => 4,
        (":scheme", b"http") => 6,
        (":scheme", b"https") => 7,
        ("accept-encoding", b"gzip, deflate") => 16,
        _ => return None,
    })
}

fn static_name(name: &str) -> Option<usize> {
    // The entries a request carries most; the rest go out as literal names.
    Some(match name {
        ":authority" => 1,
        ":method" => 2,
        ":path" => 4,
        ":scheme" => 6,
        "accept-encoding" => 16,
        "accept-language" => 17,
        "accept" => 19,
        "authorization" => 23,
        "cache-control" => 24,
        "content-length" => 28,
        "content-type" => 31,
        "cookie" => 32,
        "expect" => 35,
        "if-modified-since" => 40,
        "if-none-match" => 41,
        "range" => 50,
        "referer" => 51,
        "user-agent" => 58,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
        let mut out = Vec::new();
        d.decode(&Bytes::copy_from_slice(block), |n, v| {
            let n = match n {
                Name::Pseudo(b) => String::from_utf8(b.to_vec()).unwrap(),
                Name::Header(h) => h.to_string(),
            };
            out.push((n, v.to_str().unwrap().to_owned()));
        })?;
        Ok(out)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    /// RFC 7541 C.6.1: the first response, Huffman coded.
    const RFC_C6_FIRST: [u8; 54] = [
        0x48, 0x82, 0x64, 0x02, 0x58, 0x85, 0xae, 0xc3, 0x77, 0x1a, 0x4b, 0x61, 0x96, 0xd0, 0x7a, 0xbe, 0x94,
        0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b, 0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b,
        0xff, 0x6e, 0x91, 0x9d, 0x29, 0xad, 0x17, 0x18, 0x63, 0xc7, 0x8f, 0x0b, 0x97, 0xc8, 0xe9, 0xae, 0x82,
        0xae, 0x43, 0xd3,
    ];

    #[test]
    fn rfc_response_examples_with_huffman_and_eviction() {
        // RFC 7541 C.6: three responses, Huffman coded, a 256-octet table.
        let mut d = Decoder::new(256);
        let first = RFC_C6_FIRST;
        assert_eq!(
            decode_all(&mut d, &first).unwrap(),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.table_size(), 222);
        let second = [0x48, 0x83, 0x64, 0x0e, 0xff, 0xc1, 0xc0, 0xbf];
        assert_eq!(
            decode_all(&mut d, &second).unwrap(),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.table_size(), 222);
    }

    #[test]
    fn values_sent_again_as_literals_decode_the_same_from_the_recent_list() {
        // `cache-control` (static 24) without indexing, Huffman values from
        // RFC 7541 C.6: "private", "302", "307"; then one coded "302" with a
        // byte more (the same prefix: never taken for "302").
        let private = [0x85, 0xae, 0xc3, 0x77, 0x1a, 0x4b];
        let c302 = [0x82, 0x64, 0x02];
        let c307 = [0x83, 0x64, 0x0e, 0xff];
        let field = |value: &[u8]| [&[0x0f, 0x09][..], value].concat();
        let mut d = Decoder::default();
        let mut expect = Vec::new();
        let mut block = Vec::new();
        // More distinct values than the list holds, several rounds: every
        // field decodes to itself whether it was remembered or not.
        let mut longer = vec![0x84, 0x64, 0x0e, 0xff, 0xff];
        longer[4] = 0xff;
        for round in 0..4 {
            for (coded, text) in [(&private[..], "private"), (&c302[..], "302"), (&c307[..], "307")] {
                block.extend(field(coded));
                expect.push(("cache-control", text));
            }
            if round % 2 == 1 {
                // "307" padded with a whole extra octet of ones: invalid (§5.2).
                let mut bad = Decoder::default();
                assert_eq!(decode_all(&mut bad, &field(&longer)), Err(DecodeError::Huffman));
            }
        }
        for _ in 0..3 {
            assert_eq!(decode_all(&mut d, &block).unwrap(), pairs(&expect));
        }
        assert!(d.recent.len() <= RECENT);
        // A value the list holds, then a block whose value only starts like it.
        let mut d = Decoder::default();
        assert_eq!(decode_all(&mut d, &field(&c307)).unwrap(), pairs(&[("cache-control", "307")]));
        assert_eq!(decode_all(&mut d, &field(&longer)), Err(DecodeError::Huffman));
        assert_eq!(decode_all(&mut d, &field(&c307)).unwrap(), pairs(&[("cache-control", "307")]));
        // The C.6 responses with the recent list warm: the same fields, and
        // the table in step (the third response's date is new).
        let mut d = Decoder::new(256);
        let first = RFC_C6_FIRST;
        let once = decode_all(&mut d, &first).unwrap();
        let size = d.table_size();
        let mut again = Decoder::new(256);
        again.recent.clone_from(&d.recent);
        assert_eq!(decode_all(&mut again, &first).unwrap(), once);
        assert_eq!(again.table_size(), size);
    }

    #[test]
    fn encoded_requests_decode_back() {
        let mut out = BytesMut::new();
        let e = Encoder;
        let fields: [(&str, &str); 7] = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a.test:8443"),
            (":path", "/x?y=1"),
            ("user-agent", "switchyard"),
            ("x-long", &"v".repeat(300)),
            ("accept-encoding", "gzip, deflate"),
        ];
        for (n, v) in fields {
            e.field(&mut out, n, v.as_bytes());
        }
        let mut d = Decoder::default();
        assert_eq!(decode_all(&mut d, &out).unwrap(), pairs(&fields));
        assert_eq!(d.table_size(), 0, "nothing we send is indexed");
    }

    #[test]
    fn hostile_blocks_are_errors() {
        let mut d = Decoder::default();
        // Index 0, an index past both tables, an integer that never ends,
        // one past 2^32, a string longer than the block, a size update past
        // our limit, a size update after a field.
        let cases: [(&[u8], DecodeError); 7] = [
            (&[0x80], DecodeError::Index),
            (&[0xff, 0x00], DecodeError::Index),
            (&[0xff, 0xff, 0xff], DecodeError::Integer),
            (&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], DecodeError::Integer),
            (&[0x00, 0x05, b'a'], DecodeError::Truncated),
            (&[0x3f, 0xe2, 0x1f], DecodeError::TableSize),
            (&[0x82, 0x20], DecodeError::TableSize),
        ];
        for (block, want) in cases {
            assert_eq!(decode_all(&mut d, block), Err(want), "{block:x?}");
        }
        // Upper case names are malformed, not fatal.
        let e = decode_all(&mut d, &[0x00, 0x01, b'A', 0x01, b'b']).unwrap_err();
        assert!(e.is_malformed());
    }

    #[test]
    fn the_table_encoder_indexes_repeated_fields_and_follows_the_servers_size() {
        let mut e = TableEncoder::default();
        let mut d = Decoder::default();
        let fields: [(&str, &str); 4] = [
            (":authority", "a.test"),
            ("user-agent", "switchyard"),
            ("authorization", "Basic c2VjcmV0"),
            ("x-request-id", "1"),
        ];
        let mut sizes = Vec::new();
        for round in 0..3 {
            let mut block = BytesMut::new();
            e.begin(&mut block);
            for (n, v) in fields {
                e.field(&mut block, n, v.as_bytes());
            }
            sizes.push(block.len());
            assert_eq!(decode_all(&mut d, &block).unwrap(), pairs(&fields), "round {round}");
            assert_eq!(d.table_size(), e.size, "both tables in step");
        }
        assert!(sizes[1] < sizes[0] && sizes[1] == sizes[2], "{sizes:?}");
        // Credentials are never indexed.
        assert!(!e.entries.iter().any(|(n, _)| n == "authorization"));
        // The server shrinks its table: the next block starts with the update
        // and both sides evict alike.
        e.set_max(40);
        let mut block = BytesMut::new();
        e.begin(&mut block);
        e.field(&mut block, ":authority", b"a.test");
        assert_eq!(block[0] & 0xe0, 0x20, "a size update first");
        let mut small = Decoder::new(4096);
        // (A fresh decoder sees only this block: the update then the literal.)
        assert!(decode_all(&mut small, &block).is_ok());
        assert!(e.size <= 40);
    }

    #[test]
    fn integers_round_trip_at_every_prefix() {
        for n in 1..=8u32 {
            for v in
                [0usize, 1, (1 << n) - 2, (1 << n) - 1, 1 << n, 127, 128, 1337, 1 << 20, u32::MAX as usize]
            {
                let mut out = BytesMut::new();
                put_integer(&mut out, 0, n, v);
                let mut at = 0;
                assert_eq!(integer(&out, &mut at, n), Ok(v), "n={n} v={v}");
                assert_eq!(at, out.len());
            }
        }
    }
}
