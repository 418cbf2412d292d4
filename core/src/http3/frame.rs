//! HTTP/3 frames (RFC 9114 §7): a type and a length, both variable-length
//! integers, then the payload. [`FrameReader`] takes them off one stream's
//! bytes in any split: DATA payloads stream through in parts as they arrive
//! (a 1 GiB DATA frame is never buffered), other frames are bounded and
//! handed over whole, reserved and unknown types are skipped (§7.2.8,
//! §9), and HTTP/2's frame types that HTTP/3 has no use for are errors (§7.2.8).
//! Where each frame may appear is the stream's business ([`super::stream`],
//! [`super::control`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{code, varint};

/// Frame types (RFC 9114 §7.2).
pub mod kind {
    /// DATA: a part of a message's content.
    pub const DATA: u64 = 0x00;
    /// HEADERS: a QPACK field section (a head or trailers).
    pub const HEADERS: u64 = 0x01;
    /// CANCEL_PUSH (control stream).
    pub const CANCEL_PUSH: u64 = 0x03;
    /// SETTINGS (control stream, first frame).
    pub const SETTINGS: u64 = 0x04;
    /// PUSH_PROMISE (request streams; only after MAX_PUSH_ID).
    pub const PUSH_PROMISE: u64 = 0x05;
    /// GOAWAY (control stream).
    pub const GOAWAY: u64 = 0x07;
    /// MAX_PUSH_ID (client to server only).
    pub const MAX_PUSH_ID: u64 = 0x0d;
}

/// Setting identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5, RFC 9220, RFC 9297).
pub mod setting {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY.
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    /// SETTINGS_MAX_FIELD_SECTION_SIZE.
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    /// SETTINGS_QPACK_BLOCKED_STREAMS.
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL.
    pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
    /// SETTINGS_H3_DATAGRAM.
    pub const H3_DATAGRAM: u64 = 0x33;
}

/// The most a SETTINGS frame may carry; a longer one is H3_EXCESSIVE_LOAD.
pub const MAX_SETTINGS_LEN: u64 = 4096;

/// A frame (or a part of one, for DATA) taken off a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Part of a DATA frame's payload, in order; a frame may come in many
    /// parts, and an empty DATA frame as one empty part (so a DATA frame
    /// where none may be is seen whatever its length).
    Data(Bytes),
    /// A HEADERS frame's whole field section.
    Headers(Bytes),
    /// SETTINGS, parsed.
    Settings(Settings),
    /// GOAWAY: the first stream id (from a server) the server will not process.
    GoAway(u64),
    /// CANCEL_PUSH with its push id.
    CancelPush(u64),
    /// MAX_PUSH_ID with its push id (a server must never send it).
    MaxPushId(u64),
    /// PUSH_PROMISE (we never allow push: the stream treats it as an error).
    PushPromise,
}

/// A protocol error found in a frame: the HTTP/3 error code and what broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameError {
    /// The error code (RFC 9114 §8.1) to close the connection with.
    pub code: u64,
    /// What was wrong.
    pub reason: &'static str,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason, code::name(self.code))
    }
}

impl std::error::Error for FrameError {}

fn error(code: u64, reason: &'static str) -> FrameError {
    FrameError { code, reason }
}

/// A peer's SETTINGS (RFC 9114 §7.2.4); what it did not send has its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Settings {
    /// The largest field section the peer accepts (unlimited when absent).
    pub max_field_section_size: Option<u64>,
    /// The QPACK dynamic table the peer lets us use (0: none).
    pub qpack_max_table_capacity: u64,
    /// Streams the peer lets wait on QPACK inserts (0: none).
    pub qpack_blocked_streams: u64,
    /// Extended CONNECT (RFC 9220).
    pub enable_connect_protocol: bool,
    /// HTTP datagrams (RFC 9297).
    pub h3_datagram: bool,
}

impl Settings {
    /// Parses a SETTINGS payload: a duplicate identifier, one of HTTP/2's
    /// (0x00, 0x02 to 0x05), or a boolean setting other than 0 or 1 is
    /// H3_SETTINGS_ERROR; unknown identifiers are ignored (§7.2.4.1).
    ///
    /// # Errors
    /// The payload breaks a rule above, or a varint is cut off (H3_FRAME_ERROR).
    pub fn parse(mut payload: &[u8]) -> Result<Settings, FrameError> {
        let mut settings = Settings::default();
        let mut seen: Vec<u64> = Vec::new();
        while !payload.is_empty() {
            let (id, n) = varint::decode(payload)
                .ok_or(error(code::FRAME_ERROR, "SETTINGS cut inside an identifier"))?;
            payload = &payload[n..];
            let (value, n) =
                varint::decode(payload).ok_or(error(code::FRAME_ERROR, "SETTINGS cut inside a value"))?;
            payload = &payload[n..];
            if seen.contains(&id) {
                return Err(error(code::SETTINGS_ERROR, "a setting sent twice"));
            }
            seen.push(id);
            let boolean = |v: u64| match v {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(error(code::SETTINGS_ERROR, "a boolean setting other than 0 or 1")),
            };
            match id {
                0x00 | 0x02..=0x05 => {
                    return Err(error(code::SETTINGS_ERROR, "an HTTP/2 setting in HTTP/3 SETTINGS"))
                }
                setting::QPACK_MAX_TABLE_CAPACITY => settings.qpack_max_table_capacity = value,
                setting::MAX_FIELD_SECTION_SIZE => settings.max_field_section_size = Some(value),
                setting::QPACK_BLOCKED_STREAMS => settings.qpack_blocked_streams = value,
                setting::ENABLE_CONNECT_PROTOCOL => settings.enable_connect_protocol = boolean(value)?,
                setting::H3_DATAGRAM => settings.h3_datagram = boolean(value)?,
                _ => {}
            }
        }
        Ok(settings)
    }

    /// Appends the SETTINGS frame that announces these: every non-default
    /// value, and the QPACK ones always (a reader sees our choice spelled out).
    pub fn encode(&self, out: &mut impl BufMut) {
        let mut payload = Vec::new();
        let mut put = |id: u64, value: u64| {
            varint::encode(id, &mut payload);
            varint::encode(value, &mut payload);
        };
        put(setting::QPACK_MAX_TABLE_CAPACITY, self.qpack_max_table_capacity);
        put(setting::QPACK_BLOCKED_STREAMS, self.qpack_blocked_streams);
        if let Some(max) = self.max_field_section_size {
            put(setting::MAX_FIELD_SECTION_SIZE, max);
        }
        if self.enable_connect_protocol {
            put(setting::ENABLE_CONNECT_PROTOCOL, 1);
        }
        if self.h3_datagram {
            put(setting::H3_DATAGRAM, 1);
        }
        varint::encode(kind::SETTINGS, out);
        varint::encode(payload.len() as u64, out);
        out.put_slice(&payload);
    }
}

/// Appends a frame's type and length.
pub fn encode_header(kind: u64, len: u64, out: &mut impl BufMut) {
    varint::encode(kind, out);
    varint::encode(len, out);
}

/// Appends a HEADERS frame around a field section.
pub fn encode_headers(section: &[u8], out: &mut impl BufMut) {
    encode_header(kind::HEADERS, section.len() as u64, out);
    out.put_slice(section);
}

/// Appends a GOAWAY frame.
pub fn encode_goaway(id: u64, out: &mut impl BufMut) {
    encode_header(kind::GOAWAY, varint::len(id) as u64, out);
    varint::encode(id, out);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between frames (a header may be partly buffered).
    Header,
    /// Inside a DATA payload with this much left.
    Data(u64),
    /// Inside an unknown frame's payload, discarded.
    Skip(u64),
    /// A whole payload to collect before the frame is handed over.
    Payload { kind: u64, len: usize },
}

/// Takes frames off one stream's bytes (see the module docs).
#[derive(Debug)]
pub struct FrameReader {
    state: State,
    max_headers: u64,
}

impl FrameReader {
    /// A reader that refuses a HEADERS frame longer than `max_headers`
    /// (H3_EXCESSIVE_LOAD: the section could not fit our limit anyway).
    #[must_use]
    pub fn new(max_headers: u64) -> FrameReader {
        FrameReader { state: State::Header, max_headers }
    }

    /// Whether the stream is between frames (it may end here without
    /// cutting one: RFC 9114 §7.1 makes a stream that ends inside a frame
    /// H3_FRAME_ERROR).
    #[must_use]
    pub fn at_boundary(&self) -> bool {
        self.state == State::Header
    }

    /// Takes the next frame, or the next part of a DATA frame, off the front
    /// of `buf`; `None` when `buf` holds no more of one yet (what is left
    /// there is an incomplete header or payload).
    ///
    /// # Errors
    /// A frame breaks the protocol: the connection must close with the code.
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        loop {
            match self.state {
                State::Header => {
                    let Some((kind, a)) = varint::decode(buf) else { return Ok(None) };
                    let Some((len, b)) = varint::decode(&buf[a..]) else { return Ok(None) };
                    buf.advance(a + b);
                    self.state = match kind {
                        kind::DATA if len == 0 => return Ok(Some(Frame::Data(Bytes::new()))),
                        kind::DATA => State::Data(len),
                        // HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION (§7.2.8).
                        0x02 | 0x06 | 0x08 | 0x09 => {
                            return Err(error(
                                code::FRAME_UNEXPECTED,
                                "an HTTP/2 frame type on an HTTP/3 stream",
                            ));
                        }
                        kind::PUSH_PROMISE => return Ok(Some(Frame::PushPromise)),
                        kind::HEADERS if len > self.max_headers => {
                            return Err(error(
                                code::EXCESSIVE_LOAD,
                                "a HEADERS frame past our field section limit",
                            ));
                        }
                        kind::SETTINGS if len > MAX_SETTINGS_LEN => {
                            return Err(error(code::EXCESSIVE_LOAD, "a SETTINGS frame past 4 096 bytes"));
                        }
                        kind::GOAWAY | kind::CANCEL_PUSH | kind::MAX_PUSH_ID if len > 8 || len == 0 => {
                            return Err(error(
                                code::FRAME_ERROR,
                                "a frame that holds one id has another length",
                            ));
                        }
                        kind::HEADERS
                        | kind::SETTINGS
                        | kind::GOAWAY
                        | kind::CANCEL_PUSH
                        | kind::MAX_PUSH_ID => {
                            // Bounded just above (HEADERS by our limit, which fits memory).
                            State::Payload { kind, len: usize::try_from(len).unwrap_or(usize::MAX) }
                        }
                        _ => State::Skip(len),
                    };
                }
                State::Data(0) | State::Skip(0) => self.state = State::Header,
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    self.state = State::Data(left - n as u64);
                    return Ok(Some(Frame::Data(buf.split_to(n).freeze())));
                }
                State::Skip(left) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    buf.advance(n);
                    self.state = State::Skip(left - n as u64);
                }
                State::Payload { kind, len } => {
                    if buf.len() < len {
                        return Ok(None);
                    }
                    let payload = buf.split_to(len).freeze();
                    self.state = State::Header;
                    let id = || match varint::decode(&payload) {
                        Some((id, n)) if n == payload.len() => Ok(id),
                        _ => Err(error(code::FRAME_ERROR, "a frame's id does not fill its payload")),
                    };
                    return Ok(Some(match kind {
                        kind::HEADERS => Frame::Headers(payload),
                        kind::SETTINGS => Frame::Settings(Settings::parse(&payload)?),
                        kind::GOAWAY => Frame::GoAway(id()?),
                        kind::CANCEL_PUSH => Frame::CancelPush(id()?),
                        _ => Frame::MaxPushId(id()?),
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(reader: &mut FrameReader, bytes: &[u8], step: usize) -> Result<Vec<Frame>, FrameError> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step.max(1)) {
            buf.extend_from_slice(chunk);
            while let Some(f) = reader.read(&mut buf)? {
                out.push(f);
            }
        }
        Ok(out)
    }

    /// DATA parts joined, so splits compare equal.
    fn joined(frames: Vec<Frame>) -> Vec<Frame> {
        let mut out: Vec<Frame> = Vec::new();
        for f in frames {
            if let (Frame::Data(more), Some(Frame::Data(last))) = (&f, out.last_mut()) {
                let mut b = BytesMut::from(&last[..]);
                b.extend_from_slice(more);
                *last = b.freeze();
                continue;
            }
            out.push(f);
        }
        out
    }

    fn sample() -> Vec<u8> {
        let mut out = BytesMut::new();
        Settings { max_field_section_size: Some(16_384), ..Settings::default() }.encode(&mut out);
        encode_headers(b"\x00\x00\xd9", &mut out);
        encode_header(0x21, 3, &mut out); // a reserved type: skipped
        out.put_slice(b"xyz");
        encode_header(kind::DATA, 5, &mut out);
        out.put_slice(b"hello");
        encode_header(kind::DATA, 0, &mut out);
        encode_goaway(8, &mut out);
        out.to_vec()
    }

    #[test]
    fn frames_come_out_whole_in_any_split() {
        let bytes = sample();
        let whole = joined(read_all(&mut FrameReader::new(1024), &bytes, bytes.len()).unwrap());
        assert_eq!(
            whole,
            [
                Frame::Settings(Settings { max_field_section_size: Some(16_384), ..Settings::default() }),
                Frame::Headers(Bytes::from_static(b"\x00\x00\xd9")),
                Frame::Data(Bytes::from_static(b"hello")),
                Frame::GoAway(8),
            ]
        );
        for step in 1..bytes.len() {
            let mut r = FrameReader::new(1024);
            assert_eq!(joined(read_all(&mut r, &bytes, step).unwrap()), whole, "split every {step}");
            assert!(r.at_boundary());
        }
    }

    #[test]
    fn data_streams_through_without_waiting_for_the_whole_frame() {
        let mut r = FrameReader::new(1024);
        let mut buf = BytesMut::new();
        encode_header(kind::DATA, 1 << 30, &mut buf);
        buf.put_slice(b"first");
        assert_eq!(r.read(&mut buf).unwrap(), Some(Frame::Data(Bytes::from_static(b"first"))));
        assert_eq!(r.read(&mut buf).unwrap(), None);
        assert!(!r.at_boundary(), "inside a frame");
    }

    #[test]
    fn protocol_errors_carry_their_codes() {
        let check = |bytes: &[u8], want: u64| {
            let e = read_all(&mut FrameReader::new(64), bytes, bytes.len()).unwrap_err();
            assert_eq!(e.code, want, "{bytes:?}: {e}");
        };
        check(&[0x06, 0x00], code::FRAME_UNEXPECTED); // HTTP/2 PING
        check(&[0x09, 0x00], code::FRAME_UNEXPECTED); // CONTINUATION
        check(&[0x01, 0x40, 0x41], code::EXCESSIVE_LOAD); // HEADERS of 65 > 64
        check(&[0x04, 0x50, 0x01], code::EXCESSIVE_LOAD); // SETTINGS of 4 097
        check(&[0x07, 0x00], code::FRAME_ERROR); // GOAWAY without an id
        check(&[0x07, 0x02, 0x01, 0x02], code::FRAME_ERROR); // GOAWAY with a byte left over
        check(&[0x04, 0x02, 0x02, 0x00], code::SETTINGS_ERROR); // HTTP/2's ENABLE_PUSH
        check(&[0x04, 0x04, 0x06, 0x01, 0x06, 0x02], code::SETTINGS_ERROR); // twice
        check(&[0x04, 0x02, 0x08, 0x02], code::SETTINGS_ERROR); // boolean 2
        check(&[0x04, 0x01, 0x06], code::FRAME_ERROR); // a value missing
        assert_eq!(read_all(&mut FrameReader::new(64), &[0x05, 0x00], 2).unwrap(), [Frame::PushPromise]);
    }

    #[test]
    fn settings_round_trip() {
        let s = Settings {
            max_field_section_size: Some(1 << 20),
            qpack_max_table_capacity: 0,
            qpack_blocked_streams: 0,
            enable_connect_protocol: true,
            h3_datagram: true,
        };
        let mut out = BytesMut::new();
        s.encode(&mut out);
        let frames = read_all(&mut FrameReader::new(64), &out, out.len()).unwrap();
        assert_eq!(frames, [Frame::Settings(s)]);
        // Unknown and reserved identifiers are ignored.
        assert_eq!(Settings::parse(&[0x21, 0x05, 0x40, 0x40, 0x01]).unwrap(), Settings::default());
    }

    proptest! {
        #[test]
        fn never_panics_and_any_split_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..128), step in 1usize..16) {
            let whole = read_all(&mut FrameReader::new(256), &bytes, bytes.len()).map(joined);
            let split = read_all(&mut FrameReader::new(256), &bytes, step).map(joined);
            // Errors may be found at different points only if a frame before
            // them differs, which it cannot: same frames, same error.
            prop_assert_eq!(whole, split);
        }
    }
}
