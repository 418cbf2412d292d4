//! An HTTP/3 connection's unidirectional streams (RFC 9114 §6.2, RFC 9204
//! §4.2), the client's side.
//!
//! We open one: our control stream, whose first bytes are its type and our
//! SETTINGS ([`Control::open`]); with a zero-capacity QPACK table we need no
//! QPACK streams of our own (RFC 9204 §4.2 lets an endpoint leave them out).
//! The server opens its own, and [`Control::recv`] reads each by its type:
//!
//! - **control** (0x00): one only (a second is H3_STREAM_CREATION_ERROR);
//!   SETTINGS first (else H3_MISSING_SETTINGS) and once (H3_FRAME_UNEXPECTED);
//!   GOAWAY ids a client-initiated bidirectional stream id and never rise
//!   (H3_ID_ERROR); DATA, HEADERS, MAX_PUSH_ID and PUSH_PROMISE have no
//!   place there (H3_FRAME_UNEXPECTED); CANCEL_PUSH names a push we never
//!   allowed (H3_ID_ERROR).
//! - **push** (0x01): we send no MAX_PUSH_ID, so any push is H3_ID_ERROR.
//! - **QPACK encoder** (0x02): at most one; it may only set the table
//!   capacity to 0 (anything that would insert into a table we allowed no
//!   room for is QPACK_ENCODER_STREAM_ERROR).
//! - **QPACK decoder** (0x03): at most one; Stream Cancellation is fine,
//!   Section Acknowledgment and Insert Count Increment refer to a table we
//!   never use (QPACK_DECODER_STREAM_ERROR).
//! - **anything else** (reserved and unknown types): read and dropped.
//!
//! A critical stream (control, QPACK) that ends is H3_CLOSED_CRITICAL_STREAM.
//! Every error here is the connection's.

use std::collections::BTreeMap;

use bytes::{Buf, BytesMut};

use super::frame::{Frame, FrameError, FrameReader, Settings, MAX_SETTINGS_LEN};
use super::{code, varint};

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub mod stream_type {
    /// The control stream.
    pub const CONTROL: u64 = 0x00;
    /// A push stream.
    pub const PUSH: u64 = 0x01;
    /// QPACK's encoder stream.
    pub const QPACK_ENCODER: u64 = 0x02;
    /// QPACK's decoder stream.
    pub const QPACK_DECODER: u64 = 0x03;
}

/// What the server's unidirectional streams told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlEvent {
    /// The server's SETTINGS (once, first on its control stream).
    Settings(Settings),
    /// GOAWAY: requests on streams with this id or above were not processed
    /// and may be retried on another connection; no new ones may start here.
    GoAway(u64),
}

#[derive(Debug)]
enum Uni {
    /// Its type not read yet.
    Untyped,
    Control(FrameReader),
    QpackEncoder,
    QpackDecoder,
    Discard,
}

fn err(code: u64, reason: &'static str) -> FrameError {
    FrameError { code, reason }
}

/// The client's side of an HTTP/3 connection's unidirectional streams (see
/// the module docs).
///
/// ```
/// use bytes::BytesMut;
/// use switchyard_core::http3::control::{Control, ControlEvent};
/// use switchyard_core::http3::Settings;
///
/// let mut control = Control::new(Settings::default());
/// let mut ours = BytesMut::new();
/// control.open(&mut ours); // the first bytes of our control stream
///
/// // The server's control stream (id 3): its type, then SETTINGS.
/// let mut theirs = BytesMut::from(&[0x00][..]);
/// Settings { max_field_section_size: Some(8192), ..Settings::default() }.encode(&mut theirs);
/// let event = control.recv(3, &mut theirs, false).unwrap();
/// assert!(matches!(event, Some(ControlEvent::Settings(s)) if s.max_field_section_size == Some(8192)));
/// ```
#[derive(Debug)]
pub struct Control {
    ours: Settings,
    peer: Option<Settings>,
    goaway: Option<u64>,
    streams: BTreeMap<u64, Uni>,
    control: Option<u64>,
    encoder: Option<u64>,
    decoder: Option<u64>,
}

impl Control {
    /// The connection's side with `ours` to announce; our QPACK settings are
    /// always a zero-capacity table with no blocked streams, whatever `ours`
    /// says (the decoder allows no more).
    #[must_use]
    pub fn new(ours: Settings) -> Control {
        let ours = Settings { qpack_max_table_capacity: 0, qpack_blocked_streams: 0, ..ours };
        Control {
            ours,
            peer: None,
            goaway: None,
            streams: BTreeMap::new(),
            control: None,
            encoder: None,
            decoder: None,
        }
    }

    /// The settings we announce.
    #[must_use]
    pub fn ours(&self) -> Settings {
        self.ours
    }

    /// Appends our control stream's first bytes: its type and SETTINGS.
    /// The stream stays open for the connection's life (GOAWAY would follow).
    pub fn open(&self, out: &mut BytesMut) {
        varint::encode(stream_type::CONTROL, out);
        self.ours.encode(out);
    }

    /// The server's SETTINGS, once they came.
    #[must_use]
    pub fn peer_settings(&self) -> Option<&Settings> {
        self.peer.as_ref()
    }

    /// The lowest GOAWAY id the server sent, if any.
    #[must_use]
    pub fn goaway(&self) -> Option<u64> {
        self.goaway
    }

    /// Whether a request on client stream `id` was left unprocessed by the
    /// server's GOAWAY (its id at or past the GOAWAY's): it never reached the
    /// application and may be sent again on another connection, whatever its
    /// method (RFC 9114 §5.2).
    #[must_use]
    pub fn unprocessed(&self, id: u64) -> bool {
        self.goaway.is_some_and(|first| id >= first)
    }

    /// Unidirectional streams being read (ended ones are forgotten; QUIC's
    /// stream limit, which we set, bounds how many a server can open).
    #[must_use]
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Takes bytes the server sent on its unidirectional stream `id` off the
    /// front of `buf` (`fin`: the stream ended and `buf` holds the rest): the
    /// next event, or `None` when more bytes are needed. Call again while it
    /// returns an event.
    ///
    /// # Errors
    /// The stream broke the rules above: the connection must close with the
    /// code.
    pub fn recv(
        &mut self,
        id: u64,
        buf: &mut BytesMut,
        fin: bool,
    ) -> Result<Option<ControlEvent>, FrameError> {
        if id & 3 != 3 {
            return Err(err(code::STREAM_CREATION_ERROR, "not a server-initiated unidirectional stream"));
        }
        let mut state = self.streams.remove(&id).unwrap_or(Uni::Untyped);
        let result = self.step(id, &mut state, buf);
        let ended = fin && buf.is_empty();
        match (&result, ended) {
            (Ok(Some(_)), _) | (Ok(None), false) => {
                self.streams.insert(id, state);
            }
            (Ok(None), true) => {
                if matches!(state, Uni::Control(_) | Uni::QpackEncoder | Uni::QpackDecoder) {
                    return Err(err(
                        code::CLOSED_CRITICAL_STREAM,
                        "the server closed a control or QPACK stream",
                    ));
                }
            }
            (Err(_), _) => {}
        }
        result
    }

    fn step(
        &mut self,
        id: u64,
        state: &mut Uni,
        buf: &mut BytesMut,
    ) -> Result<Option<ControlEvent>, FrameError> {
        if let Uni::Untyped = state {
            let Some((kind, n)) = varint::decode(buf) else {
                return Ok(None);
            };
            buf.advance(n);
            *state = match kind {
                stream_type::PUSH => {
                    return Err(err(code::ID_ERROR, "a push stream, and we allowed no push"))
                }
                stream_type::CONTROL | stream_type::QPACK_ENCODER | stream_type::QPACK_DECODER => {
                    let slot = match kind {
                        stream_type::CONTROL => &mut self.control,
                        stream_type::QPACK_ENCODER => &mut self.encoder,
                        _ => &mut self.decoder,
                    };
                    if slot.is_some() {
                        return Err(err(
                            code::STREAM_CREATION_ERROR,
                            "a second control or QPACK stream of one type",
                        ));
                    }
                    *slot = Some(id);
                    match kind {
                        stream_type::CONTROL => Uni::Control(FrameReader::new(MAX_SETTINGS_LEN)),
                        stream_type::QPACK_ENCODER => Uni::QpackEncoder,
                        _ => Uni::QpackDecoder,
                    }
                }
                _ => Uni::Discard,
            };
        }
        match state {
            Uni::Untyped => Ok(None),
            Uni::Discard => {
                buf.clear();
                Ok(None)
            }
            Uni::QpackEncoder => {
                // Set Dynamic Table Capacity (001xxxxx) to 0 is all a zero-capacity table takes.
                while let Some(&b) = buf.first() {
                    if b & 0xe0 != 0x20 {
                        return Err(err(
                            code::QPACK_ENCODER_STREAM_ERROR,
                            "an insert into a table we allowed no room for",
                        ));
                    }
                    let mut at = 0;
                    match crate::http2::hpack::integer(buf, &mut at, 5) {
                        Ok(0) => buf.advance(at),
                        Ok(_) => {
                            return Err(err(
                                code::QPACK_ENCODER_STREAM_ERROR,
                                "a table capacity above the 0 we allowed",
                            ));
                        }
                        Err(_) if at_limit(buf) => {
                            return Err(err(
                                code::QPACK_ENCODER_STREAM_ERROR,
                                "a table capacity past any bound",
                            ));
                        }
                        Err(_) => break, // the rest of the integer has not come yet
                    }
                }
                Ok(None)
            }
            Uni::QpackDecoder => {
                // Stream Cancellation (01xxxxxx) only; the others acknowledge
                // a dynamic table we never used.
                while let Some(&b) = buf.first() {
                    if b & 0xc0 != 0x40 {
                        return Err(err(
                            code::QPACK_DECODER_STREAM_ERROR,
                            "an acknowledgment for a table we never used",
                        ));
                    }
                    let mut at = 0;
                    match crate::http2::hpack::integer(buf, &mut at, 6) {
                        Ok(_) => buf.advance(at),
                        Err(_) if at_limit(buf) => {
                            return Err(err(code::QPACK_DECODER_STREAM_ERROR, "a stream id past any bound"));
                        }
                        Err(_) => break,
                    }
                }
                Ok(None)
            }
            Uni::Control(reader) => {
                let Some(frame) = reader.read(buf)? else { return Ok(None) };
                match (frame, self.peer.is_some()) {
                    (Frame::Settings(s), false) => {
                        self.peer = Some(s);
                        Ok(Some(ControlEvent::Settings(s)))
                    }
                    (_, false) => {
                        Err(err(code::MISSING_SETTINGS, "the control stream did not begin with SETTINGS"))
                    }
                    (Frame::Settings(_), true) => Err(err(code::FRAME_UNEXPECTED, "a second SETTINGS")),
                    (Frame::GoAway(goaway), true) => {
                        if goaway % 4 != 0 {
                            return Err(err(
                                code::ID_ERROR,
                                "a GOAWAY id that is not a client request stream's",
                            ));
                        }
                        if self.goaway.is_some_and(|before| goaway > before) {
                            return Err(err(code::ID_ERROR, "a GOAWAY id above an earlier one"));
                        }
                        self.goaway = Some(goaway);
                        Ok(Some(ControlEvent::GoAway(goaway)))
                    }
                    (Frame::CancelPush(_), true) => {
                        Err(err(code::ID_ERROR, "CANCEL_PUSH, and we allowed no push"))
                    }
                    (Frame::Data(_) | Frame::Headers(_) | Frame::PushPromise | Frame::MaxPushId(_), true) => {
                        Err(err(code::FRAME_UNEXPECTED, "a request or client frame on the control stream"))
                    }
                }
            }
        }
    }
}

/// A prefix integer that failed with at least 6 bytes in hand overflowed
/// (past 2³²); with fewer it may only be incomplete.
fn at_limit(buf: &[u8]) -> bool {
    buf.len() >= 6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http3::frame;

    /// `(stream id, bytes, fin)` in the order they arrive.
    type Input = Vec<(u64, Vec<u8>, bool)>;

    fn control_bytes(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![0x00];
        for f in frames {
            out.extend_from_slice(f);
        }
        out
    }

    fn settings() -> Vec<u8> {
        let mut out = BytesMut::new();
        Settings::default().encode(&mut out);
        out.to_vec()
    }

    fn goaway(id: u64) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame::encode_goaway(id, &mut out);
        out.to_vec()
    }

    /// Feeds `(stream, bytes, fin)` in order, in `step`-byte parts; the
    /// events, or the first error.
    fn feed(input: &[(u64, Vec<u8>, bool)], step: usize) -> Result<Vec<ControlEvent>, FrameError> {
        let mut c = Control::new(Settings::default());
        let mut bufs: BTreeMap<u64, BytesMut> = BTreeMap::new();
        let mut events = Vec::new();
        for (id, bytes, fin) in input {
            let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[]] } else { bytes.chunks(step).collect() };
            let last = chunks.len() - 1;
            for (i, chunk) in chunks.into_iter().enumerate() {
                let buf = bufs.entry(*id).or_default();
                buf.extend_from_slice(chunk);
                while let Some(e) = c.recv(*id, buf, *fin && i == last)? {
                    events.push(e);
                }
            }
        }
        Ok(events)
    }

    fn every_split(input: &[(u64, Vec<u8>, bool)]) -> Result<Vec<ControlEvent>, FrameError> {
        let whole = feed(input, usize::MAX);
        for step in 1..8 {
            assert_eq!(feed(input, step), whole, "split every {step}");
        }
        whole
    }

    #[test]
    fn settings_then_goaways_that_never_rise() {
        let events = every_split(&[
            (3, control_bytes(&[&settings(), &goaway(8), &goaway(4)]), false),
            (7, vec![0x02, 0x20], false),    // QPACK encoder: capacity 0
            (11, vec![0x03, 0x41], false),   // QPACK decoder: cancel stream 1
            (15, vec![0x21, 1, 2, 3], true), // a reserved type: dropped, may end
        ])
        .unwrap();
        assert_eq!(
            events,
            [ControlEvent::Settings(Settings::default()), ControlEvent::GoAway(8), ControlEvent::GoAway(4)]
        );
        let mut c = Control::new(Settings::default());
        assert!(!c.unprocessed(0), "no GOAWAY: every stream may have been processed");
        let mut buf = BytesMut::from(&control_bytes(&[&settings(), &goaway(4)])[..]);
        while c.recv(3, &mut buf, false).unwrap().is_some() {}
        assert!(!c.unprocessed(0) && c.unprocessed(4) && c.unprocessed(8));
    }

    #[test]
    fn the_rules_and_their_codes() {
        let cases: Vec<(&str, Input, u64)> = vec![
            ("no SETTINGS first", vec![(3, control_bytes(&[&goaway(0)]), false)], code::MISSING_SETTINGS),
            (
                "SETTINGS twice",
                vec![(3, control_bytes(&[&settings(), &settings()]), false)],
                code::FRAME_UNEXPECTED,
            ),
            (
                "GOAWAY rising",
                vec![(3, control_bytes(&[&settings(), &goaway(4), &goaway(8)]), false)],
                code::ID_ERROR,
            ),
            (
                "GOAWAY on a uni id",
                vec![(3, control_bytes(&[&settings(), &goaway(2)]), false)],
                code::ID_ERROR,
            ),
            (
                "DATA on control",
                vec![(3, control_bytes(&[&settings(), &[0x00, 0x01, 0x61]]), false)],
                code::FRAME_UNEXPECTED,
            ),
            (
                "empty DATA on control",
                vec![(3, control_bytes(&[&settings(), &[0x00, 0x00]]), false)],
                code::FRAME_UNEXPECTED,
            ),
            (
                "MAX_PUSH_ID from a server",
                vec![(3, control_bytes(&[&settings(), &[0x0d, 0x01, 0x00]]), false)],
                code::FRAME_UNEXPECTED,
            ),
            (
                "CANCEL_PUSH",
                vec![(3, control_bytes(&[&settings(), &[0x03, 0x01, 0x00]]), false)],
                code::ID_ERROR,
            ),
            ("control closed", vec![(3, control_bytes(&[&settings()]), true)], code::CLOSED_CRITICAL_STREAM),
            (
                "two control streams",
                vec![(3, vec![0x00], false), (7, vec![0x00], false)],
                code::STREAM_CREATION_ERROR,
            ),
            ("push", vec![(3, vec![0x01], false)], code::ID_ERROR),
            ("an insert", vec![(3, vec![0x02, 0xc0, 0x00], false)], code::QPACK_ENCODER_STREAM_ERROR),
            ("capacity 1", vec![(3, vec![0x02, 0x21], false)], code::QPACK_ENCODER_STREAM_ERROR),
            ("a section ack", vec![(3, vec![0x03, 0x81], false)], code::QPACK_DECODER_STREAM_ERROR),
            (
                "an insert count increment",
                vec![(3, vec![0x03, 0x01], false)],
                code::QPACK_DECODER_STREAM_ERROR,
            ),
            ("encoder closed", vec![(3, vec![0x02], true)], code::CLOSED_CRITICAL_STREAM),
            ("a client stream id", vec![(2, vec![0x00], false)], code::STREAM_CREATION_ERROR),
        ];
        for (what, input, want) in cases {
            let e = every_split(&input).unwrap_err();
            assert_eq!(e.code, want, "{what}: {e}");
        }
    }

    #[test]
    fn ended_streams_are_forgotten() {
        let mut c = Control::new(Settings::default());
        for id in (3..400).step_by(4) {
            let mut buf = BytesMut::from(&[0x21, 0xff][..]);
            assert_eq!(c.recv(id, &mut buf, true), Ok(None));
        }
        assert_eq!(c.open_streams(), 0);
        let mut ours = BytesMut::new();
        Control::new(Settings { qpack_max_table_capacity: 4096, ..Settings::default() }).open(&mut ours);
        assert_eq!(ours[0], 0x00, "the control stream's type");
        let mut reader = FrameReader::new(64);
        ours.advance(1);
        assert_eq!(
            reader.read(&mut ours).unwrap(),
            Some(Frame::Settings(Settings::default())),
            "QPACK capacity kept at 0"
        );
    }
}
