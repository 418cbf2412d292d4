//! The frame scanner: the frame headers of the bytes the server sends, and
//! the few payloads the pool must hear about (SETTINGS, GOAWAY).

/// A frame the pool must hear about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameNote {
    /// The server's SETTINGS (not an acknowledgement); the stream limit when it
    /// set one (absent: unchanged).
    Settings {
        /// SETTINGS_MAX_CONCURRENT_STREAMS, if the frame carried it.
        max_concurrent_streams: Option<u32>,
    },
    /// A header block on this stream (HEADERS plus CONTINUATION payloads, as
    /// sent) passed the scanner's header block limit. Noted once per block,
    /// as soon as the frame that passes it begins.
    HeaderBlockTooLarge {
        /// The stream.
        stream_id: u32,
    },
    /// The server is going away: no new streams on this connection.
    GoAway {
        /// Streams above this id were not processed.
        last_stream_id: u32,
        /// Why (0: NO_ERROR, a graceful shutdown).
        error_code: u32,
    },
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// SETTINGS payloads kept beyond this are ignored (the default maximum frame
/// size; a legitimate SETTINGS frame is far smaller).
const MAX_KEPT: usize = 16 * 1024;

/// Walks the server's frames. See the [module docs](crate::http2).
#[derive(Clone, Debug, Default)]
pub struct FrameScanner {
    header: [u8; 9],
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    remaining: usize,
    kind: u8,
    flags: u8,
    /// The current frame's payload, for SETTINGS and GOAWAY only.
    payload: Vec<u8>,
    frames: u64,
    /// DATA frame payload bytes seen (padding included: flow control counts it).
    data: u64,
    /// Header blocks longer than this on the wire are noted.
    header_limit: Option<usize>,
    /// The header block in progress: its stream, its bytes so far, noted.
    block: Option<(u32, usize, bool)>,
}

impl FrameScanner {
    /// A scanner that also notes every header block longer than `limit` bytes
    /// on the wire ([`FrameNote::HeaderBlockTooLarge`]).
    ///
    /// ```
    /// # use switchyard_core::http2::{FrameNote, FrameScanner};
    /// let mut scanner = FrameScanner::with_header_block_limit(10);
    /// let mut notes = Vec::new();
    /// // HEADERS on stream 1, 12 payload bytes, END_HEADERS.
    /// let mut frame = vec![0, 0, 12, 1, 4, 0, 0, 0, 1];
    /// frame.extend([0u8; 12]);
    /// scanner.feed(&frame, &mut notes);
    /// assert_eq!(notes, [FrameNote::HeaderBlockTooLarge { stream_id: 1 }]);
    /// ```
    #[must_use]
    pub fn with_header_block_limit(limit: usize) -> FrameScanner {
        FrameScanner { header_limit: Some(limit), ..FrameScanner::default() }
    }

    /// Frames seen so far (complete headers).
    #[must_use]
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// DATA payload bytes seen so far, as flow control counts them (padding
    /// included): what an adaptive window measures per round trip.
    ///
    /// ```
    /// # use switchyard_core::http2::FrameScanner;
    /// let mut scanner = FrameScanner::default();
    /// // DATA on stream 1, 3 payload bytes, in two reads.
    /// scanner.feed(&[0, 0, 3, 0, 0, 0, 0, 0, 1, b'a'], &mut Vec::new());
    /// scanner.feed(b"bc", &mut Vec::new());
    /// assert_eq!(scanner.data_bytes(), 3);
    /// ```
    #[must_use]
    pub fn data_bytes(&self) -> u64 {
        self.data
    }

    /// Feeds the next bytes the server sent (any split); appends a note for each
    /// SETTINGS or GOAWAY frame completed by them.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<FrameNote>) {
        while !bytes.is_empty() {
            if self.header_len < 9 {
                let take = (9 - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
                self.header_len += take;
                bytes = &bytes[take..];
                if self.header_len < 9 {
                    return;
                }
                let h = self.header;
                self.remaining = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                self.kind = h[3];
                self.flags = h[4];
                self.frames += 1;
                self.payload.clear();
                if self.header_limit.is_some() {
                    self.header_block(out);
                }
            } else {
                let take = self.remaining.min(bytes.len());
                if self.kind == DATA {
                    self.data += take as u64;
                }
                if self.keeps_payload() {
                    let room = MAX_KEPT.saturating_sub(self.payload.len()).min(take);
                    self.payload.extend_from_slice(&bytes[..room]);
                }
                self.remaining -= take;
                bytes = &bytes[take..];
            }
            if self.header_len == 9 && self.remaining == 0 {
                self.finish(out);
                self.header_len = 0;
            }
        }
    }

    /// Counts a HEADERS or CONTINUATION frame toward its header block.
    fn header_block(&mut self, out: &mut Vec<FrameNote>) {
        let Some(limit) = self.header_limit else { return };
        let h = self.header;
        let stream_id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let block = match (self.kind, self.block) {
            (HEADERS, _) => (stream_id, self.remaining, false),
            (CONTINUATION, Some((s, len, noted))) if s == stream_id => {
                (s, len.saturating_add(self.remaining), noted)
            }
            _ => return,
        };
        let (s, len, mut noted) = block;
        if len > limit && !noted {
            noted = true;
            out.push(FrameNote::HeaderBlockTooLarge { stream_id: s });
        }
        self.block = (self.flags & END_HEADERS == 0).then_some((s, len, noted));
    }

    fn keeps_payload(&self) -> bool {
        (self.kind == SETTINGS && self.flags & ACK == 0) || (self.kind == GOAWAY && self.payload.len() < 8)
    }

    fn finish(&mut self, out: &mut Vec<FrameNote>) {
        let u32_at = |p: &[u8], i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        match self.kind {
            SETTINGS if self.flags & ACK == 0 => {
                let max_concurrent_streams = self
                    .payload
                    .chunks_exact(6)
                    .filter(|e| u16::from_be_bytes([e[0], e[1]]) == 0x3)
                    .map(|e| u32_at(e, 2))
                    .next_back();
                out.push(FrameNote::Settings { max_concurrent_streams });
            }
            GOAWAY if self.payload.len() >= 8 => out.push(FrameNote::GoAway {
                last_stream_id: u32_at(&self.payload, 0) & 0x7fff_ffff,
                error_code: u32_at(&self.payload, 4),
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn scan(bytes: &[u8], cut: usize) -> Vec<FrameNote> {
        let mut s = FrameScanner::default();
        let mut out = Vec::new();
        let (a, b) = bytes.split_at(cut.min(bytes.len()));
        s.feed(a, &mut out);
        s.feed(b, &mut out);
        out
    }

    #[test]
    fn settings_goaway_and_everything_else_at_every_split() {
        let mut wire = Vec::new();
        // SETTINGS: HEADER_TABLE_SIZE 4096, MAX_CONCURRENT_STREAMS 3.
        wire.extend(frame(4, 0, 0, &[0, 1, 0, 0, 16, 0, 0, 3, 0, 0, 0, 3]));
        wire.extend(frame(4, 1, 0, &[])); // an ACK: not a note
        wire.extend(frame(8, 0, 0, &[0, 0, 0xff, 0xff])); // WINDOW_UPDATE
        wire.extend(frame(0, 0, 1, &[b'x'; 300])); // DATA
        wire.extend(frame(4, 0, 0, &[0, 4, 0, 1, 0, 0])); // SETTINGS without a stream limit
        wire.extend(frame(7, 0, 0, &[0x80, 0, 0, 7, 0, 0, 0, 0, b'd', b'b', b'g'])); // GOAWAY, debug data
        let expected = [
            FrameNote::Settings { max_concurrent_streams: Some(3) },
            FrameNote::Settings { max_concurrent_streams: None },
            FrameNote::GoAway { last_stream_id: 7, error_code: 0 },
        ];
        for cut in 0..=wire.len() {
            assert_eq!(scan(&wire, cut), expected, "cut at {cut}");
        }
        let mut s = FrameScanner::default();
        let mut out = Vec::new();
        for b in &wire {
            s.feed(std::slice::from_ref(b), &mut out);
        }
        assert_eq!(out, expected);
        assert_eq!(s.frames(), 6);
    }

    #[test]
    fn header_blocks_over_the_limit_are_noted_once_at_every_split() {
        let mut wire = Vec::new();
        wire.extend(frame(1, 4, 1, &[0; 100])); // a head of 100 bytes: within
        wire.extend(frame(0, 0, 1, &[b'x'; 300])); // DATA does not count
        wire.extend(frame(1, 0, 3, &[0; 60])); // trailers in three frames: 60 + 60 + 60
        wire.extend(frame(9, 0, 3, &[0; 60]));
        wire.extend(frame(9, 4, 3, &[0; 60]));
        wire.extend(frame(1, 5, 5, &[0; 150])); // one HEADERS frame over the limit
        let expected = [
            FrameNote::HeaderBlockTooLarge { stream_id: 3 },
            FrameNote::HeaderBlockTooLarge { stream_id: 5 },
        ];
        for cut in 0..=wire.len() {
            let mut s = FrameScanner::with_header_block_limit(128);
            let mut out = Vec::new();
            let (a, b) = wire.split_at(cut);
            s.feed(a, &mut out);
            s.feed(b, &mut out);
            assert_eq!(out, expected, "cut at {cut}");
        }
        // Without a limit, nothing is noted.
        assert_eq!(scan(&wire, 7), []);
    }

    #[test]
    fn a_huge_settings_frame_is_bounded() {
        let mut payload = vec![0u8; 6 * 10_000];
        payload[6 * 9_999..].copy_from_slice(&[0, 3, 0, 0, 0, 9]);
        let out = scan(&frame(4, 0, 0, &payload), 100);
        // The limit past the kept bytes is not seen, but nothing grows unbounded.
        assert_eq!(out, [FrameNote::Settings { max_concurrent_streams: None }]);
    }
}
