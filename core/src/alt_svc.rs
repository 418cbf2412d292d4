//! Alternative services (RFC 7838): the `Alt-Svc` response field parsed into
//! [`AltSvc`], and [`AltSvcCache`], what each origin advertised, bounded and
//! with each entry's freshness.
//!
//! This is how a client learns that an origin speaks HTTP/3: a response over
//! TCP carries `Alt-Svc: h3=":443"; ma=86400`, and later calls to that origin
//! may go to the alternative (UDP port 443 of the same host) instead. The cache
//! follows the RFC's rules, each one a test:
//!
//! - A field received from an origin replaces everything cached for it; `clear`
//!   removes it all (§3, §3.1).
//! - An alternative is fresh for `ma` seconds (24 hours when absent) counted
//!   from when the response was generated: the response's `Age` is taken off
//!   (§3.1).
//! - Alternatives are kept in the server's order of preference (§3).
//! - A change of network forgets every entry not marked `persist=1` (§3.1).
//! - Only origins reached over TLS (`https`) are learned: an alternative
//!   advertised in cleartext could be anyone's (§2.1). Whoever feeds the cache
//!   also keeps responses that came through a proxy out of it (a proxy's
//!   answer speaks for the proxy's view of the network, not the client's).
//!
//! And ours: the cache is bounded (origins, alternatives per origin, the length
//! of a protocol name), evicts the origin least recently used when full, is
//! ordered (a `BTreeMap`, no hash order in anything it returns), and never
//! reads a clock — every operation takes `now`.
//!
//! ```
//! use std::time::Duration;
//! use switchyard_core::alt_svc::{AltSvc, AltSvcCache, Origin};
//! use switchyard_core::{Host, Instant, Scheme};
//!
//! let origin = Origin::new(Scheme::Https, Host::parse("example.com").unwrap(), 443);
//! let field = AltSvc::parse(br#"h3=":8443"; ma=60, h2="alt.example.com:443""#).unwrap();
//! let mut cache = AltSvcCache::default();
//! cache.learn(&origin, &field, Instant::ZERO, Duration::ZERO);
//!
//! let h3 = cache.lookup(&origin, b"h3", Instant::from_millis(59_000)).unwrap();
//! assert_eq!((h3.host(), h3.port()), (None, 8443)); // the origin's own host, UDP port 8443
//! assert!(cache.lookup(&origin, b"h3", Instant::from_millis(60_000)).is_none()); // stale
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::address::{Host, Scheme};
use crate::time::Instant;

/// How long an alternative is fresh when its field names no `ma`: 24 hours
/// (RFC 7838 §3.1).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(86_400);

/// The longest protocol name kept: an ALPN identifier is at most 255 bytes
/// (RFC 7301 §3.1); a longer one cannot name a protocol and is skipped.
pub const MAX_PROTOCOL_LEN: usize = 255;

/// The origin an `Alt-Svc` field speaks for: scheme, host and port of the
/// request whose response carried it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Origin {
    scheme: Scheme,
    host: Host,
    port: u16,
}

impl Origin {
    /// The origin `scheme://host:port`.
    #[must_use]
    pub fn new(scheme: Scheme, host: Host, port: u16) -> Origin {
        Origin { scheme, host, port }
    }

    /// The origin's scheme.
    #[must_use]
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The origin's host.
    #[must_use]
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The origin's port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// One alternative service: a protocol at a host and port, fresh for a while.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Alternative {
    protocol: Box<[u8]>,
    host: Option<Host>,
    port: u16,
    max_age: Duration,
    persist: bool,
}

impl Alternative {
    /// The ALPN protocol identifier, percent-decoded (`h3`, `h2`, ...).
    #[must_use]
    pub fn protocol(&self) -> &[u8] {
        &self.protocol
    }

    /// The alternative's host, or `None` for the origin's own host (the
    /// common `h3=":443"`).
    #[must_use]
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// The alternative's port (never 0).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the alternative is fresh after the response was generated
    /// (`ma`, [`DEFAULT_MAX_AGE`] when absent).
    #[must_use]
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Whether the alternative survives a change of network (`persist=1`).
    #[must_use]
    pub fn persist(&self) -> bool {
        self.persist
    }
}

/// A parsed `Alt-Svc` field value (all of a response's `Alt-Svc` fields
/// joined with commas, as a list field is).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum AltSvc {
    /// `clear`: the origin withdraws every alternative it advertised.
    Clear,
    /// The alternatives, most preferred first. Entries that parse but cannot
    /// be used (port 0, a protocol name too long, a bad `ma`) are left out;
    /// the list may then be empty, which clears the origin as `clear` does
    /// (the field still replaces what was cached).
    Alternatives(Vec<Alternative>),
}

/// An `Alt-Svc` value that does not follow the field's syntax: where and why.
/// The whole field is then ignored (where one entry's syntax is broken, where
/// the next begins is a guess).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AltSvcError {
    /// Byte offset in the field value where parsing stopped.
    pub at: usize,
    /// What was expected there.
    pub reason: &'static str,
}

impl fmt::Display for AltSvcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed Alt-Svc field at byte {}: {}", self.at, self.reason)
    }
}

impl std::error::Error for AltSvcError {}

/// RFC 9110 §5.6.2: a token's characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

struct Lexer<'a> {
    input: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    fn error(&self, reason: &'static str) -> AltSvcError {
        AltSvcError { at: self.at, reason }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn token(&mut self, what: &'static str) -> Result<&'a [u8], AltSvcError> {
        let start = self.at;
        while self.peek().is_some_and(is_tchar) {
            self.at += 1;
        }
        if self.at == start {
            return Err(self.error(what));
        }
        Ok(&self.input[start..self.at])
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), AltSvcError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    /// RFC 9110 §5.6.4: `DQUOTE *( qdtext / quoted-pair ) DQUOTE`, unescaped.
    fn quoted_string(&mut self) -> Result<Vec<u8>, AltSvcError> {
        self.expect(b'"', "expected '\"' opening a quoted string")?;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error("quoted string never closed")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(b) if b == b'\t' || b == b' ' || b >= 0x21 && b != 0x7f => {
                            out.push(b);
                            self.at += 1;
                        }
                        _ => return Err(self.error("'\\' in a quoted string escapes nothing valid")),
                    }
                }
                Some(b) if b == b'\t' || b == b' ' || b >= 0x21 && b != 0x7f => {
                    out.push(b);
                    self.at += 1;
                }
                Some(_) => return Err(self.error("control character in a quoted string")),
            }
        }
    }
}

/// `%XX` escapes decoded (RFC 7838 §3: a protocol-id is percent-encoded).
/// `None` when an escape is broken.
fn percent_decode(token: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(token.len());
    let mut i = 0;
    while i < token.len() {
        if token[i] == b'%' {
            let hex = token.get(i + 1..i + 3)?;
            let hi = (hex[0] as char).to_digit(16)?;
            let lo = (hex[1] as char).to_digit(16)?;
            out.push(u8::try_from(hi * 16 + lo).ok()?);
            i += 3;
        } else {
            out.push(token[i]);
            i += 1;
        }
    }
    Some(out)
}

/// `[host] ":" port` from an alt-authority's unquoted text; `None` when it
/// cannot be used (no port, port 0 or past 65535, a host that is no host).
fn authority(text: &[u8]) -> Option<(Option<Host>, u16)> {
    let colon = text.iter().rposition(|&b| b == b':')?;
    let (host, port) = (&text[..colon], &text[colon + 1..]);
    if port.is_empty() || port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let port: u16 = std::str::from_utf8(port).ok()?.parse().ok().filter(|&p| p != 0)?;
    if host.is_empty() {
        return Some((None, port));
    }
    let host = Host::parse(std::str::from_utf8(host).ok()?).ok()?;
    Some((Some(host), port))
}

/// `delta-seconds` (RFC 9111 §1.2.2): digits; a value past what fits is as
/// good as the largest.
fn delta_seconds(value: &[u8]) -> Option<Duration> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let secs = value.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')));
    Some(Duration::from_secs(secs.unwrap_or(u64::from(u32::MAX))))
}

impl AltSvc {
    /// Parses a field value: `clear`, or a comma-separated list of
    /// `protocol-id="[host]:port"` with `;`-separated parameters (`ma`,
    /// `persist`; others are ignored, as the RFC asks).
    ///
    /// ```
    /// use std::time::Duration;
    /// use switchyard_core::alt_svc::AltSvc;
    ///
    /// let AltSvc::Alternatives(alts) = AltSvc::parse(br#"h3=":443"; ma=3600; persist=1, h3%2D29=":443""#).unwrap()
    /// else { unreachable!() };
    /// assert_eq!(alts[0].protocol(), b"h3");
    /// assert_eq!(alts[0].max_age(), Duration::from_secs(3600));
    /// assert!(alts[0].persist());
    /// assert_eq!(alts[1].protocol(), b"h3-29");
    /// assert_eq!(AltSvc::parse(b"clear").unwrap(), AltSvc::Clear);
    /// assert!(AltSvc::parse(br#"h3=":443"#).is_err()); // the quote never closes
    /// ```
    ///
    /// # Errors
    /// The value breaks the field's syntax: an [`AltSvcError`] says where.
    pub fn parse(value: &[u8]) -> Result<AltSvc, AltSvcError> {
        let trimmed = value.trim_ascii();
        if trimmed.eq_ignore_ascii_case(b"clear") {
            return Ok(AltSvc::Clear);
        }
        let mut lx = Lexer { input: value, at: 0 };
        let mut alternatives = Vec::new();
        let mut seen_any = false;
        loop {
            // Empty list elements are allowed (RFC 9110 §5.6.1).
            loop {
                lx.skip_ows();
                if lx.peek() == Some(b',') {
                    lx.at += 1;
                } else {
                    break;
                }
            }
            if lx.peek().is_none() {
                break;
            }
            seen_any = true;
            let protocol_at = lx.at;
            let protocol = lx.token("expected a protocol-id")?;
            lx.expect(b'=', "expected '=' after the protocol-id")?;
            let authority_text = lx.quoted_string()?;
            let mut usable = true;
            let protocol = match percent_decode(protocol) {
                Some(p) if !p.is_empty() && p.len() <= MAX_PROTOCOL_LEN => p,
                Some(_) => {
                    usable = false;
                    Vec::new()
                }
                None => {
                    return Err(AltSvcError { at: protocol_at, reason: "broken %-escape in the protocol-id" })
                }
            };
            let target = authority(&authority_text);
            usable &= target.is_some();
            let (mut max_age, mut persist) = (None, None);
            loop {
                lx.skip_ows();
                if lx.peek() != Some(b';') {
                    break;
                }
                lx.at += 1;
                lx.skip_ows();
                // A trailing ';' before the next entry or the end is tolerated.
                if matches!(lx.peek(), None | Some(b',')) {
                    break;
                }
                let name = lx.token("expected a parameter name after ';'")?;
                lx.skip_ows();
                lx.expect(b'=', "expected '=' after a parameter name")?;
                lx.skip_ows();
                let value = if lx.peek() == Some(b'"') {
                    lx.quoted_string()?
                } else {
                    lx.token("expected a parameter value")?.to_vec()
                };
                if name.eq_ignore_ascii_case(b"ma") {
                    if max_age.is_none() {
                        max_age = Some(delta_seconds(&value));
                    }
                } else if name.eq_ignore_ascii_case(b"persist") && persist.is_none() {
                    persist = Some(value == b"1");
                }
            }
            let max_age = match max_age {
                None => DEFAULT_MAX_AGE,
                Some(Some(age)) => age,
                Some(None) => {
                    usable = false;
                    Duration::ZERO
                }
            };
            lx.skip_ows();
            match lx.peek() {
                None | Some(b',') => {}
                Some(_) => return Err(lx.error("expected ',' or ';' after an alternative")),
            }
            if let (true, Some((host, port))) = (usable, target) {
                alternatives.push(Alternative {
                    protocol: protocol.into_boxed_slice(),
                    host,
                    port,
                    max_age,
                    persist: persist.unwrap_or(false),
                });
            }
        }
        if !seen_any {
            return Err(AltSvcError { at: 0, reason: "empty field value" });
        }
        Ok(AltSvc::Alternatives(alternatives))
    }
}

/// The cache's bounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AltSvcConfig {
    /// Origins remembered; learning one more forgets the least recently used.
    /// Default 1 024.
    pub max_origins: usize,
    /// Alternatives kept per origin, the most preferred first. Default 8.
    pub max_per_origin: usize,
}

impl Default for AltSvcConfig {
    fn default() -> AltSvcConfig {
        AltSvcConfig { max_origins: 1024, max_per_origin: 8 }
    }
}

/// What [`AltSvcCache::learn`] did with a field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Learned {
    /// The origin's alternatives are now these many (replacing any before).
    Stored(usize),
    /// The origin has no alternatives any more (`clear`, or a field whose
    /// every alternative was stale or unusable).
    Cleared,
    /// Nothing learned: the origin is not `https`.
    NotSecure,
}

#[derive(Clone, Debug)]
struct Entry {
    /// Most preferred first; each with the instant it goes stale.
    alternatives: Vec<(Alternative, Instant)>,
    /// The recency stamp this origin has in `AltSvcCache::recency`.
    used: u64,
}

/// What origins advertised, bounded and ordered (see the module's rules).
#[derive(Clone, Debug, Default)]
pub struct AltSvcCache {
    config: AltSvcConfig,
    entries: BTreeMap<Origin, Entry>,
    /// Recency stamp → origin, least recently used first.
    recency: BTreeMap<u64, Origin>,
    next_stamp: u64,
}

impl AltSvcCache {
    /// An empty cache with these bounds (a bound of 0 is taken as 1).
    #[must_use]
    pub fn new(config: AltSvcConfig) -> AltSvcCache {
        let config = AltSvcConfig {
            max_origins: config.max_origins.max(1),
            max_per_origin: config.max_per_origin.max(1),
        };
        AltSvcCache { config, ..AltSvcCache::default() }
    }

    /// The cache's bounds.
    #[must_use]
    pub fn config(&self) -> AltSvcConfig {
        self.config
    }

    /// Origins with alternatives cached (stale ones included until
    /// [`expire`](Self::expire) or a lookup drops them).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no origin has alternatives cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    fn remove(&mut self, origin: &Origin) {
        if let Some(entry) = self.entries.remove(origin) {
            self.recency.remove(&entry.used);
        }
    }

    /// Learns the field `origin`'s response carried, received at `now` with
    /// the response's `Age` (zero when it had none): it replaces what was
    /// cached for the origin.
    pub fn learn(&mut self, origin: &Origin, field: &AltSvc, now: Instant, age: Duration) -> Learned {
        if origin.scheme != Scheme::Https {
            return Learned::NotSecure;
        }
        let max = self.config().max_per_origin;
        let fresh: Vec<(Alternative, Instant)> = match field {
            AltSvc::Clear => Vec::new(),
            AltSvc::Alternatives(list) => list
                .iter()
                .filter(|a| a.max_age > age)
                .take(max)
                .map(|a| (a.clone(), now + (a.max_age - age)))
                .collect(),
        };
        self.remove(origin);
        if fresh.is_empty() {
            return Learned::Cleared;
        }
        let n = fresh.len();
        if self.entries.len() >= self.config().max_origins {
            if let Some((_, oldest)) = self.recency.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        let used = self.stamp();
        self.recency.insert(used, origin.clone());
        self.entries.insert(origin.clone(), Entry { alternatives: fresh, used });
        Learned::Stored(n)
    }

    /// The most preferred fresh alternative of `origin` that speaks
    /// `protocol` (an ALPN id such as `b"h3"`), marking the origin recently
    /// used. Stale alternatives met on the way are dropped.
    pub fn lookup(&mut self, origin: &Origin, protocol: &[u8], now: Instant) -> Option<&Alternative> {
        let entry = self.entries.get_mut(origin)?;
        entry.alternatives.retain(|(_, stale_at)| *stale_at > now);
        if entry.alternatives.is_empty() {
            self.remove(origin);
            return None;
        }
        let position = entry.alternatives.iter().position(|(a, _)| &*a.protocol == protocol)?;
        let old = entry.used;
        self.next_stamp += 1;
        let used = self.next_stamp;
        entry.used = used;
        self.recency.remove(&old);
        self.recency.insert(used, origin.clone());
        self.entries.get(origin).map(|e| &e.alternatives[position].0)
    }

    /// `origin`'s fresh alternatives at `now`, most preferred first, each
    /// with the instant it goes stale.
    pub fn alternatives(
        &self,
        origin: &Origin,
        now: Instant,
    ) -> impl Iterator<Item = (&Alternative, Instant)> {
        self.entries
            .get(origin)
            .into_iter()
            .flat_map(|e| e.alternatives.iter())
            .filter(move |(_, stale_at)| *stale_at > now)
            .map(|(a, stale_at)| (a, *stale_at))
    }

    /// Forgets one alternative of `origin` (say, the client could not reach
    /// it); the origin's others stay.
    pub fn forget(&mut self, origin: &Origin, protocol: &[u8], host: Option<&Host>, port: u16) {
        let Some(entry) = self.entries.get_mut(origin) else { return };
        entry
            .alternatives
            .retain(|(a, _)| !(&*a.protocol == protocol && a.host.as_ref() == host && a.port == port));
        if entry.alternatives.is_empty() {
            self.remove(origin);
        }
    }

    /// The network changed (another interface, another address): every
    /// alternative not marked `persist=1` is forgotten (RFC 7838 §3.1).
    pub fn network_changed(&mut self) {
        let mut emptied = Vec::new();
        for (origin, entry) in &mut self.entries {
            entry.alternatives.retain(|(a, _)| a.persist);
            if entry.alternatives.is_empty() {
                emptied.push(origin.clone());
            }
        }
        for origin in emptied {
            self.remove(&origin);
        }
    }

    /// Drops every alternative stale at `now`; returns how many went.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        let mut emptied = Vec::new();
        for (origin, entry) in &mut self.entries {
            let before = entry.alternatives.len();
            entry.alternatives.retain(|(_, stale_at)| *stale_at > now);
            dropped += before - entry.alternatives.len();
            if entry.alternatives.is_empty() {
                emptied.push(origin.clone());
            }
        }
        for origin in emptied {
            self.remove(&origin);
        }
        dropped
    }

    /// The soonest instant an alternative goes stale (for a driver that
    /// wants to call [`expire`](Self::expire) on time), if any is cached.
    #[must_use]
    pub fn next_expiry(&self) -> Option<Instant> {
        self.entries.values().flat_map(|e| e.alternatives.iter().map(|(_, at)| *at)).min()
    }

    /// Checks the cache's invariants (for tests and fuzzing): every origin in
    /// the recency index and back, no empty entry, the bounds kept.
    ///
    /// # Panics
    /// An invariant is broken.
    pub fn check_invariants(&self) {
        let config = self.config();
        assert!(self.entries.len() <= config.max_origins, "more origins than the bound");
        assert_eq!(self.entries.len(), self.recency.len(), "recency index out of step");
        for (origin, entry) in &self.entries {
            assert!(!entry.alternatives.is_empty(), "an origin kept with no alternatives");
            assert!(entry.alternatives.len() <= config.max_per_origin, "more alternatives than the bound");
            assert_eq!(self.recency.get(&entry.used), Some(origin), "recency stamp names another origin");
            assert!(entry.used <= self.next_stamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn origin(host: &str) -> Origin {
        Origin::new(Scheme::Https, Host::parse(host).unwrap(), 443)
    }

    fn alts(value: &str) -> Vec<Alternative> {
        match AltSvc::parse(value.as_bytes()).unwrap() {
            AltSvc::Alternatives(a) => a,
            AltSvc::Clear => panic!("clear"),
        }
    }

    fn secs(s: u64) -> Instant {
        Instant::from_elapsed(Duration::from_secs(s))
    }

    #[test]
    fn parses_the_common_shapes() {
        let a = alts(r#"h3=":443"; ma=86400, h3-29=":443"; ma=86400"#);
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].protocol(), a[0].host(), a[0].port()), (&b"h3"[..], None, 443));
        assert_eq!(a[1].protocol(), b"h3-29");
        let a = alts(r#"h2="alt.example.com:8000", h3="[::1]:4433";persist=1"#);
        assert_eq!(a[0].host(), Some(&Host::parse("alt.example.com").unwrap()));
        assert_eq!(a[0].max_age(), DEFAULT_MAX_AGE);
        assert_eq!(a[1].host(), Some(&Host::parse("[::1]").unwrap()));
        assert_eq!(a[1].port(), 4433);
        assert!(a[1].persist() && !a[0].persist());
        // No whitespace between a protocol-id and its '=' in the grammar.
        assert_eq!(AltSvc::parse(b" \th3 = \":443\"").unwrap_err().at, 4);
    }

    #[test]
    fn grammar_edges() {
        // OWS is allowed around ';' and '=' of parameters, not inside an alternative's head.
        let a = alts("h3=\":443\" ;  MA = 10 ; Persist=1 ,, ");
        assert_eq!(a[0].max_age(), Duration::from_secs(10));
        assert!(a[0].persist());
        assert_eq!(AltSvc::parse(b"  CLEAR ").unwrap(), AltSvc::Clear);
        // Quoted parameter values and escapes in the authority.
        let a = alts(r#"h3=":4\43"; ma="20""#);
        assert_eq!((a[0].port(), a[0].max_age()), (443, Duration::from_secs(20)));
        // Unknown parameters are ignored; the first ma wins.
        let a = alts(r#"h3=":443"; foo=bar; ma=5; ma=7; v="x,y""#);
        assert_eq!(a[0].max_age(), Duration::from_secs(5));
        // Percent-encoded protocol ids.
        assert_eq!(alts(r#"w%3D%3D=":80""#)[0].protocol(), b"w==");
        // A trailing ';' is tolerated.
        assert_eq!(alts(r#"h3=":443";"#).len(), 1);
        // Huge ma saturates instead of failing.
        assert_eq!(
            alts(r#"h3=":443"; ma=99999999999999999999999"#)[0].max_age(),
            Duration::from_secs(u64::from(u32::MAX))
        );
    }

    #[test]
    fn unusable_entries_are_left_out_and_the_rest_kept() {
        let a = alts(r#"h3=":0", h3=":70000", h3="nohost", h3=":443"; ma=abc, h3="bad host:1", h3=":8443""#);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].port(), 8443);
        let long = format!("{}=\":443\", h3=\":1\"", "a".repeat(256));
        assert_eq!(alts(&long).len(), 1);
        assert_eq!(alts(&format!("{}=\":443\"", "a".repeat(255))).len(), 1);
    }

    #[test]
    fn syntax_errors_say_where() {
        for (value, at) in [
            (&br#"h3=":443"#[..], 8),
            (b"h3=:443", 3),
            (b"h3", 2),
            (b"=\":1\"", 0),
            (br#"h3=":443" x"#, 10),
            (br#"h3=":443"; ma"#, 13),
            (br#"h3=":443"; =1"#, 11),
            (br#"h%4=":443""#, 0),
            (b"h3=\"\x01:1\"", 4),
            (b"", 0),
            (b" , ,", 0),
        ] {
            let e = AltSvc::parse(value).unwrap_err();
            assert_eq!(e.at, at, "{:?}: {e}", String::from_utf8_lossy(value));
            assert!(e.to_string().contains("malformed Alt-Svc"));
        }
    }

    #[test]
    fn a_field_replaces_what_the_origin_had_and_clear_removes_it() {
        let mut cache = AltSvcCache::default();
        let o = origin("example.com");
        let first = AltSvc::parse(br#"h3=":443", h2=":443""#).unwrap();
        assert_eq!(cache.learn(&o, &first, secs(0), Duration::ZERO), Learned::Stored(2));
        let second = AltSvc::parse(br#"h3=":8443""#).unwrap();
        assert_eq!(cache.learn(&o, &second, secs(1), Duration::ZERO), Learned::Stored(1));
        assert!(cache.lookup(&o, b"h2", secs(2)).is_none(), "replaced, not merged");
        assert_eq!(cache.lookup(&o, b"h3", secs(2)).unwrap().port(), 8443);
        assert_eq!(cache.learn(&o, &AltSvc::Clear, secs(3), Duration::ZERO), Learned::Cleared);
        assert!(cache.is_empty());
        // A field with nothing usable clears too.
        cache.learn(&o, &first, secs(4), Duration::ZERO);
        let none = AltSvc::parse(br#"h3=":0""#).unwrap();
        assert_eq!(cache.learn(&o, &none, secs(5), Duration::ZERO), Learned::Cleared);
        assert!(cache.is_empty());
        cache.check_invariants();
    }

    #[test]
    fn freshness_counts_from_the_response_s_generation() {
        let mut cache = AltSvcCache::default();
        let o = origin("example.com");
        let field = AltSvc::parse(br#"h3=":443"; ma=100, h3=":444"; ma=10"#).unwrap();
        // The response is 30 s old: the first alternative has 70 s left, the second none.
        assert_eq!(cache.learn(&o, &field, secs(1000), Duration::from_secs(30)), Learned::Stored(1));
        assert_eq!(cache.lookup(&o, b"h3", secs(1069)).unwrap().port(), 443);
        assert!(cache.lookup(&o, b"h3", secs(1070)).is_none());
        assert!(cache.is_empty(), "a lookup drops the stale origin");
        // Without Age, default max-age is a day.
        cache.learn(&o, &AltSvc::parse(br#"h3=":443""#).unwrap(), secs(0), Duration::ZERO);
        assert_eq!(cache.next_expiry(), Some(secs(86_400)));
        assert_eq!(cache.expire(secs(86_399)), 0);
        assert_eq!(cache.expire(secs(86_400)), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn preference_order_and_per_origin_bound() {
        let mut cache = AltSvcCache::new(AltSvcConfig { max_origins: 4, max_per_origin: 2 });
        let o = origin("example.com");
        let field = AltSvc::parse(br#"h2=":1", h3=":2", h3=":3", h3=":4""#).unwrap();
        assert_eq!(cache.learn(&o, &field, secs(0), Duration::ZERO), Learned::Stored(2));
        let kept: Vec<u16> = cache.alternatives(&o, secs(0)).map(|(a, _)| a.port()).collect();
        assert_eq!(kept, [1, 2]);
        assert_eq!(cache.lookup(&o, b"h3", secs(0)).unwrap().port(), 2);
    }

    #[test]
    fn only_https_origins_are_learned() {
        let mut cache = AltSvcCache::default();
        let o = Origin::new(Scheme::Http, Host::parse("example.com").unwrap(), 80);
        let field = AltSvc::parse(br#"h3=":443""#).unwrap();
        assert_eq!(cache.learn(&o, &field, secs(0), Duration::ZERO), Learned::NotSecure);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_least_recently_used_origin_goes_first() {
        let mut cache = AltSvcCache::new(AltSvcConfig { max_origins: 2, max_per_origin: 8 });
        let field = AltSvc::parse(br#"h3=":443""#).unwrap();
        let (a, b, c) = (origin("a.test"), origin("b.test"), origin("c.test"));
        cache.learn(&a, &field, secs(0), Duration::ZERO);
        cache.learn(&b, &field, secs(1), Duration::ZERO);
        assert!(cache.lookup(&a, b"h3", secs(2)).is_some(), "a is now the most recently used");
        cache.learn(&c, &field, secs(3), Duration::ZERO);
        assert!(cache.lookup(&b, b"h3", secs(4)).is_none(), "b was least recently used");
        assert!(cache.lookup(&a, b"h3", secs(4)).is_some());
        assert!(cache.lookup(&c, b"h3", secs(4)).is_some());
        cache.check_invariants();
    }

    #[test]
    fn network_change_keeps_only_persistent_alternatives() {
        let mut cache = AltSvcCache::default();
        let (a, b) = (origin("a.test"), origin("b.test"));
        cache.learn(
            &a,
            &AltSvc::parse(br#"h3=":443"; persist=1, h3=":444""#).unwrap(),
            secs(0),
            Duration::ZERO,
        );
        cache.learn(&b, &AltSvc::parse(br#"h3=":443"; persist=0"#).unwrap(), secs(0), Duration::ZERO);
        cache.network_changed();
        let left: Vec<u16> = cache.alternatives(&a, secs(1)).map(|(x, _)| x.port()).collect();
        assert_eq!(left, [443]);
        assert!(cache.alternatives(&b, secs(1)).next().is_none());
        assert_eq!(cache.len(), 1);
        cache.check_invariants();
    }

    #[test]
    fn forgetting_one_alternative_keeps_the_others() {
        let mut cache = AltSvcCache::default();
        let o = origin("example.com");
        cache.learn(&o, &AltSvc::parse(br#"h3=":443", h3="alt.test:443""#).unwrap(), secs(0), Duration::ZERO);
        cache.forget(&o, b"h3", None, 443);
        let alt = cache.lookup(&o, b"h3", secs(1)).unwrap();
        assert_eq!(alt.host(), Some(&Host::parse("alt.test").unwrap()));
        cache.forget(&o, b"h3", Some(&Host::parse("alt.test").unwrap()), 443);
        assert!(cache.is_empty());
    }

    fn numbered(o: u8) -> Origin {
        origin(&format!("o{o}.test"))
    }

    #[derive(Clone, Debug)]
    enum Op {
        Learn(u8, u8, u16, u64),
        Clear(u8),
        Lookup(u8, u64),
        Expire(u64),
        NetworkChanged,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6, 0u8..12, 0u16..200, 0u64..50).prop_map(|(o, n, ma, age)| Op::Learn(o, n, ma, age)),
            (0u8..6).prop_map(Op::Clear),
            (0u8..6, 0u64..400).prop_map(|(o, t)| Op::Lookup(o, t)),
            (0u64..400).prop_map(Op::Expire),
            Just(Op::NetworkChanged),
        ]
    }

    proptest! {
        /// Any sequence of operations keeps the bounds and the index; what a
        /// lookup returns is always fresh at its `now` and the most preferred
        /// of the origin's last field still there.
        #[test]
        fn the_cache_keeps_its_invariants(ops in proptest::collection::vec(op(), 1..80)) {
            let mut cache = AltSvcCache::new(AltSvcConfig { max_origins: 3, max_per_origin: 4 });
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Learn(o, n, ma, age) => {
                        let value: Vec<String> = (0..n).map(|i| format!("h3=\":{}\"; ma={ma}; persist={}", 1000 + u16::from(i), i % 2)).collect();
                        let value = if value.is_empty() { "clear".to_owned() } else { value.join(", ") };
                        let field = AltSvc::parse(value.as_bytes()).unwrap();
                        cache.learn(&numbered(o), &field, secs(now), Duration::from_secs(age));
                        if n > 0 && u64::from(ma) > age {
                            let alts: Vec<_> = cache.alternatives(&numbered(o), secs(now)).collect();
                            prop_assert_eq!(alts.len(), usize::from(n).min(4));
                            prop_assert_eq!(alts[0].0.port(), 1000);
                            prop_assert_eq!(alts[0].1, secs(now + u64::from(ma) - age));
                        }
                    }
                    Op::Clear(o) => {
                        cache.learn(&numbered(o), &AltSvc::Clear, secs(now), Duration::ZERO);
                        prop_assert!(cache.alternatives(&numbered(o), secs(now)).next().is_none());
                    }
                    Op::Lookup(o, t) => {
                        now += t;
                        let o = numbered(o);
                        let expected = cache.alternatives(&o, secs(now)).next().map(|(a, _)| a.clone());
                        let got = cache.lookup(&o, b"h3", secs(now)).cloned();
                        prop_assert_eq!(got, expected);
                    }
                    Op::Expire(t) => {
                        now += t;
                        cache.expire(secs(now));
                        prop_assert!(cache.next_expiry().is_none_or(|at| at > secs(now)));
                    }
                    Op::NetworkChanged => {
                        cache.network_changed();
                        for o in 0..6 {
                            prop_assert!(cache.alternatives(&numbered(o), secs(0)).all(|(a, _)| a.persist()));
                        }
                    }
                }
                cache.check_invariants();
            }
        }

        /// The parser never panics, and what it keeps is always usable.
        #[test]
        fn parse_never_panics(value in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(AltSvc::Alternatives(list)) = AltSvc::parse(&value) {
                for a in list {
                    prop_assert!(a.port() != 0 && !a.protocol().is_empty() && a.protocol().len() <= MAX_PROTOCOL_LEN);
                }
            }
        }
    }
}
