//! Credentials in a URL (`https://user:secret@host/`). RFC 9110 §4.2.4 deprecates
//! them and RFC 9113 §8.3.1 forbids them in `:authority`, yet users write them;
//! curl and Go turn them into `Authorization: Basic`, and so do we:
//!
//! - they never reach `Host` or `:authority`: [`take_userinfo`] removes them from
//!   the request URI before anything else sees it (events, logs, errors);
//! - they become `Authorization: Basic base64(user:password)` (percent-decoded),
//!   marked sensitive, unless the caller set `Authorization` itself;
//! - where a URL with credentials must be shown, [`redacted`] prints
//!   `user:***@host`.

use base64::Engine as _;
use http::header::AUTHORIZATION;
use http::{HeaderValue, Uri};
use percent_encoding::percent_decode_str;

use crate::Error;

/// Removes userinfo from the request URI and, unless the request already has
/// an `Authorization` field, adds Basic credentials made from it.
///
/// ```
/// let req = http::Request::get("https://ann:s%40cret@example.com/x").body(()).unwrap();
/// let (mut parts, ()) = req.into_parts();
/// switchyard_common::take_userinfo(&mut parts)?;
/// assert_eq!(parts.uri, "https://example.com/x");
/// // base64("ann:s@cret")
/// assert_eq!(parts.headers["authorization"], "Basic YW5uOnNAY3JldA==");
/// assert!(parts.headers["authorization"].is_sensitive());
/// # Ok::<(), switchyard_common::Error>(())
/// ```
///
/// # Errors
/// [`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest) (naming the URL without its password) when the
/// URI without its userinfo is not valid.
pub fn take_userinfo(parts: &mut http::request::Parts) -> Result<(), Error> {
    let Some(authority) = parts.uri.authority() else { return Ok(()) };
    let Some((userinfo, host_port)) = authority.as_str().rsplit_once('@') else { return Ok(()) };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let invalid = |what: &str| Error::invalid_request(format!("{what} in {}", redacted(&parts.uri)));
    let mut uri = parts.uri.clone().into_parts();
    uri.authority = Some(host_port.parse().map_err(|_| invalid("invalid host"))?);
    let stripped = Uri::from_parts(uri).map_err(|_| invalid("invalid URL"))?;
    if !parts.headers.contains_key(AUTHORIZATION) {
        let mut credentials: Vec<u8> = percent_decode_str(user).collect();
        credentials.push(b':');
        credentials.extend(percent_decode_str(password));
        let encoded = base64::engine::general_purpose::STANDARD.encode(&credentials);
        let mut value = HeaderValue::try_from(format!("Basic {encoded}"))
            .map_err(|_| invalid("credentials that cannot form a header"))?;
        value.set_sensitive(true);
        parts.headers.insert(AUTHORIZATION, value);
    }
    parts.uri = stripped;
    Ok(())
}

/// The URI as text with any password replaced by `***` (`user:***@host`).
///
/// ```
/// let uri: http::Uri = "https://ann:secret@example.com/x".parse().unwrap();
/// assert_eq!(switchyard_common::redacted(&uri), "https://ann:***@example.com/x");
/// ```
#[must_use]
pub fn redacted(uri: &Uri) -> String {
    redact(&uri.to_string())
}

/// A URL given as text (valid or not) with any password replaced by `***`:
/// for printing what a user typed.
///
/// ```
/// assert_eq!(switchyard_common::redact("http://ann:pw@h:8/p@q"), "http://ann:***@h:8/p@q");
/// assert_eq!(switchyard_common::redact("not a url"), "not a url");
/// // Not a valid URL, and still no password shown.
/// assert_eq!(switchyard_common::redact("https://ann:pa#ss@host/"), "https://ann:***@host/");
/// ```
#[must_use]
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else { return url.to_owned() };
    let rest = &url[start..];
    // Err towards hiding: the userinfo ends at the last `@` before the first `/`
    // that follows an `@` (a password may hold `#`, `?` or `/` in text that is
    // not a valid URL).
    let Some(first_at) = rest.find('@') else { return url.to_owned() };
    let host_end = rest[first_at..].find('/').map_or(rest.len(), |i| first_at + i);
    let Some(at) = rest[..host_end].rfind('@') else { return url.to_owned() };
    match rest[..at].find(':') {
        Some(colon) => format!("{}:***{}", &url[..start + colon], &rest[at..]),
        None => url.to_owned(),
    }
}

/// The URI without its userinfo (what spans and logs show).
///
/// ```
/// let uri: http::Uri = "https://ann:pw@example.com/x?q=1".parse().unwrap();
/// assert_eq!(switchyard_common::without_userinfo(&uri), "https://example.com/x?q=1");
/// ```
#[must_use]
pub fn without_userinfo(uri: &Uri) -> String {
    let text = uri.to_string();
    match (uri.authority(), uri.scheme_str()) {
        (Some(a), Some(scheme)) if a.as_str().contains('@') => {
            let host = a.as_str().rsplit_once('@').map_or(a.as_str(), |(_, h)| h);
            let rest = uri.path_and_query().map_or("/", |pq| pq.as_str());
            format!("{scheme}://{host}{rest}")
        }
        _ => text,
    }
}
