//! The response-head rules HTTP/2 and HTTP/3 share (RFC 9113 §8.3.2,
//! RFC 9114 §4.3.2): `:status` first and once, no other pseudo-field, no
//! connection-specific field. Each protocol's decoder hands the fields of one
//! head (or trailer section) over one by one; what breaks a rule is kept as
//! the first reason.

use http::header::{HeaderMap, HeaderValue};
use http::StatusCode;

use super::hpack::Name;

/// One section's fields as they arrive.
#[derive(Debug, Default)]
pub(crate) struct HeadFields {
    /// `:status`, if one came (`Err` when it is not a status code).
    pub(crate) status: Option<Result<StatusCode, ()>>,
    /// The regular fields, in order.
    pub(crate) headers: HeaderMap,
    /// The first rule broken, if any.
    pub(crate) bad: Option<&'static str>,
    regular_seen: bool,
}

impl HeadFields {
    /// Takes one decoded field.
    pub(crate) fn field(&mut self, name: Name, value: HeaderValue) {
        match name {
            Name::Pseudo(n) => {
                if n.as_ref() != b":status" || self.status.is_some() || self.regular_seen {
                    self.bad.get_or_insert("a pseudo-field other than one leading :status");
                } else {
                    self.status = Some(StatusCode::from_bytes(value.as_bytes()).map_err(|_| ()));
                }
            }
            Name::Header(n) => {
                self.regular_seen = true;
                use http::header as h;
                if matches!(n, h::CONNECTION | h::TRANSFER_ENCODING | h::UPGRADE)
                    || n.as_str() == "keep-alive"
                    || n.as_str() == "proxy-connection"
                {
                    self.bad.get_or_insert("a connection-specific field");
                }
                self.headers.append(n, value);
            }
        }
    }
}
