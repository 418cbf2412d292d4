//! HTTP/2 in the core: one client connection as a sans-IO state machine
//! ([`Driver`]: framing, HPACK, flow control both ways, stream states, with
//! the HTTP/1.1 driver's shape — bytes in, bytes out, events out, no clock),
//! and the rules the pool needs from it ([`Session`]: what a failure means
//! for the call and the connection, the head limit, the 421 rule, the close
//! reason). Every adapter pumps the same driver; so can an embedder's own
//! loop.
//!
//! For an embedder that brings another HTTP/2 implementation,
//! [`FrameScanner`] walks the frame headers of the bytes the server sends
//! (RFC 9113 §4.1) so [`Pool::settings`](crate::Pool::settings) and
//! [`Pool::goaway`](crate::Pool::goaway) hear of SETTINGS and GOAWAY the
//! moment they arrive; with a header block limit
//! ([`FrameScanner::with_header_block_limit`]) it also notes each block whose
//! bytes pass it. It keeps at most one frame header and a bounded SETTINGS
//! payload, and never rejects anything.
//!
//! ```
//! # use switchyard_core::http2::{FrameNote, FrameScanner};
//! let mut scanner = FrameScanner::default();
//! let mut notes = Vec::new();
//! // SETTINGS (type 4) with one entry: MAX_CONCURRENT_STREAMS (3) = 10.
//! let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 10];
//! scanner.feed(&settings[..7], &mut notes); // any split
//! scanner.feed(&settings[7..], &mut notes);
//! assert_eq!(notes, [FrameNote::Settings { max_concurrent_streams: Some(10) }]);
//! ```
//!
//! [`Session`] holds one connection's rules: it hears the server's SETTINGS
//! and GOAWAY (from the driver, or through the scanner) and decides what each
//! failure means for the call and the connection (see its module,
//! [`session`]).
//!
//! [`StreamTimer`] holds a stream's deadlines (the call's, the head's, the
//! body's, and the read and write timeouts of each wait) and says what a
//! passed one means, so an adapter's call only waits.
//!
//! [`WindowEstimator`] decides the adaptive flow-control window from the DATA
//! bytes received and PING round trips.

pub mod driver;
pub(crate) mod fields;
mod frame;
pub mod hpack;
mod huffman;
pub mod session;
pub mod timer;
mod window;

pub use driver::{field_sizes, Driver, DriverConfig, Event, OpenError, RequestHead, PREFACE};
pub use frame::{FrameNote, FrameScanner};
pub use session::{code_name, ConnectionEnd, GoAway, Peer, Report, Session, StreamError};
pub use timer::{Expired, StreamLimits, StreamTimer, Wait};
pub use window::{WindowEstimator, PROTOCOL_WINDOW};
