//! What the pool needs to hear from an HTTP/2 connection as it happens, read
//! off the server's frames: its SETTINGS (the stream limit) and GOAWAY; and,
//! when a limit is set ([`FrameScanner::with_header_block_limit`]), each header
//! block (HEADERS and its CONTINUATIONs: a response head or trailers) whose
//! bytes on the wire pass it, so the embedder can fail that response rather than
//! let the HTTP/2 implementation cut the fields silently.
//!
//! HTTP/2 itself stays with a full implementation (the adapters use the `h2`
//! crate); [`FrameScanner`] only walks the frame headers of the bytes the
//! server sends (RFC 9113 §4.1) so the embedder can report
//! [`Pool::settings`](crate::Pool::settings) and
//! [`Pool::goaway`](crate::Pool::goaway) the moment the frames arrive, not when
//! a stream next fails or the connection ends. It keeps at most one frame
//! header and a bounded SETTINGS payload; it never rejects anything (framing
//! errors are the HTTP/2 implementation's to report).
//!
//! ```
//! use switchyard_core::http2::{FrameNote, FrameScanner};
//! let mut scanner = FrameScanner::default();
//! let mut notes = Vec::new();
//! // SETTINGS (type 4) with one entry: MAX_CONCURRENT_STREAMS (3) = 10.
//! let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 10];
//! scanner.feed(&settings[..7], &mut notes); // any split
//! scanner.feed(&settings[7..], &mut notes);
//! assert_eq!(notes, [FrameNote::Settings { max_concurrent_streams: Some(10) }]);
//! ```
//!
//! [`Session`] holds one connection's rules: it reads the server's bytes
//! through the scanner and decides, from the facts an HTTP/2 bridge reports,
//! what each failure means for the call and the connection (see its module,
//! [`session`]).
//!
//! [`WindowEstimator`] decides the adaptive flow-control window from the DATA
//! bytes the scanner counts and PING round trips.

mod driver;
mod frame;
pub mod hpack;
mod huffman;
pub mod session;
mod window;

pub use driver::{field_sizes, Driver, DriverConfig, Event, OpenError, RequestHead, PREFACE};
pub use frame::{FrameNote, FrameScanner};
pub use session::{code_name, ConnectionEnd, GoAway, Peer, Report, Session, StreamError};
pub use window::{WindowEstimator, PROTOCOL_WINDOW};
