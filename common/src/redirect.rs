//! What a client layers over its calls, as its builder records it: redirects
//! followed ([`Policy`]) and bodies decoded. The async adapters do the work
//! (tower-http's `FollowRedirect` and `Decompression`); the blocking adapter
//! has neither.

/// How many redirects a client follows (reqwest's `redirect::Policy`); give it
/// to `ClientBuilder::redirect` (the `redirect` feature).
///
/// ```
/// # use switchyard_common::redirect::Policy;
/// assert_eq!(Policy::default(), Policy::limited(10));
/// assert_eq!(Policy::none().max_hops(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    max: usize,
}

impl Policy {
    /// Follow at most `max` redirects per call; one more fails the call
    /// (`ErrorKind::Redirect`).
    #[must_use]
    pub fn limited(max: usize) -> Policy {
        Policy { max }
    }
    /// Follow none: the redirect response is the answer (the default).
    #[must_use]
    pub fn none() -> Policy {
        Policy { max: 0 }
    }
    /// The most redirects followed per call.
    #[must_use]
    pub fn max_hops(&self) -> usize {
        self.max
    }
}

/// Ten hops, as reqwest (once `redirect` is called at all).
impl Default for Policy {
    fn default() -> Policy {
        Policy::limited(10)
    }
}

/// What a client layers over its calls: redirects followed, bodies decoded.
/// None by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    /// Redirects followed per call (0: none).
    pub redirects: usize,
    /// Encodings decoded: [`Layers::GZIP`], [`Layers::DEFLATE`], [`Layers::BROTLI`].
    pub decode: u8,
}

impl Layers {
    /// gzip bodies decoded.
    pub const GZIP: u8 = 1;
    /// deflate bodies decoded.
    pub const DEFLATE: u8 = 2;
    /// br bodies decoded.
    pub const BROTLI: u8 = 4;
    /// Whether a call goes through any layer.
    #[must_use]
    pub fn any(&self) -> bool {
        self.redirects > 0 || self.decode != 0
    }
    /// The same, with `encoding` decoded or not.
    #[must_use]
    pub fn decoding(mut self, encoding: u8, on: bool) -> Layers {
        if on {
            self.decode |= encoding;
        } else {
            self.decode &= !encoding;
        }
        self
    }
}
