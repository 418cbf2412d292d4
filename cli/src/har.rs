//! `--har FILE`: the calls as an HTTP Archive (HAR 1.2), the format browser
//! devtools and HAR viewers read, with each entry's `timings` (blocked, dns,
//! connect, ssl, send, wait, receive), `serverIPAddress` and `connection`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use switchyard_core::CallId;

use crate::record::{CallRecord, Recorder};
use crate::transfer::{source_words, version_words, HopDone, Transfer};

/// The archive of every call the recorder saw, in the order they started,
/// each with its answer from `transfers` (a call that got none: status 0 and
/// its error in `_error`).
#[must_use]
pub fn archive(transfers: &[Transfer], recorder: &Recorder) -> Value {
    let answers: BTreeMap<CallId, &HopDone> =
        transfers.iter().flat_map(|t| &t.hops).filter_map(|h| h.call.map(|c| (c, h))).collect();
    let entries: Vec<Value> = recorder
        .all()
        .iter()
        .map(|(call, record)| entry(record, answers.get(call).copied(), record.failed.as_deref()))
        .collect();
    json!({
        "log": {
            "version": "1.2",
            "creator": {"name": "switchyard", "version": env!("CARGO_PKG_VERSION")},
            "entries": entries,
        }
    })
}

fn headers(map: &http::HeaderMap) -> Vec<Value> {
    map.iter()
        .map(|(n, v)| json!({"name": n.as_str(), "value": String::from_utf8_lossy(v.as_bytes())}))
        .collect()
}

/// One call as an entry; `hop` is its answer (none for a call that failed:
/// status 0 and the error in `_error`, as devtools show a failed request).
fn entry(r: &CallRecord, hop: Option<&HopDone>, error: Option<&str>) -> Value {
    let timings = r.har_timings();
    let url = hop.map_or_else(|| r.uri.to_string(), |h| h.url.clone());
    let query: Vec<Value> = url::Url::parse(&url)
        .map(|u| u.query_pairs().map(|(n, v)| json!({"name": n, "value": v})).collect())
        .unwrap_or_default();
    let version = hop.map_or("HTTP/1.1", |h| version_words(h.version));
    let mut entry = json!({
        "startedDateTime": rfc3339(r.wall_start),
        "time": timings.total(),
        "request": {
            "method": r.method.as_str(),
            "url": switchyard_common::redact(&url),
            "httpVersion": version,
            "cookies": [],
            "headers": headers(&r.headers),
            "queryString": query,
            "headersSize": -1,
            "bodySize": r.sent_body,
        },
        "response": match hop {
            Some(h) => json!({
                "status": h.status.as_u16(),
                "statusText": h.status.canonical_reason().unwrap_or(""),
                "httpVersion": version,
                "cookies": [],
                "headers": headers(&h.headers),
                "content": {
                    "size": h.bytes,
                    "mimeType": h.headers.get(http::header::CONTENT_TYPE)
                        .map_or(String::new(), |v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
                },
                "redirectURL": h.redirect.clone().unwrap_or_default(),
                "headersSize": -1,
                "bodySize": h.bytes,
            }),
            None => json!({
                "status": 0, "statusText": "", "httpVersion": "", "cookies": [], "headers": [],
                "content": {"size": 0, "mimeType": ""}, "redirectURL": "", "headersSize": -1, "bodySize": -1,
            }),
        },
        "cache": {},
        "timings": {
            "blocked": timings.blocked,
            "dns": timings.dns,
            "connect": timings.connect,
            "ssl": timings.ssl,
            "send": timings.send,
            "wait": timings.wait,
            "receive": timings.receive,
        },
    });
    if let Some(h) = hop {
        if let Some(peer) = h.peer {
            entry["serverIPAddress"] = json!(peer.ip().to_string());
        }
        if let Some(c) = h.connection {
            entry["connection"] = json!(c.to_string());
        }
        if let Some(s) = h.source {
            entry["_connectionSource"] = json!(source_words(s));
        }
    }
    entry["_tries"] = json!(r.tries);
    if let (None, Some(e)) = (hop, error) {
        entry["_error"] = json!(e);
    }
    entry
}

/// `2026-12-05T16:19:27.123Z`: a UTC date and time (days to a civil date by
/// the usual era arithmetic of the proleptic Gregorian calendar).
#[must_use]
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_utc_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_487_567_123);
        assert_eq!(rfc3339(t), "2026-12-05T16:19:27.123Z");
        // A leap day.
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
    }
}
