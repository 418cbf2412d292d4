//! `-w/--write-out`: curl's `%{variable}`s filled in from a transfer, and the
//! same values as the `--json` result object.

use crate::record::{Phases, Recorder};
use crate::transfer::{source_words, Transfer};

/// Every variable `-w` knows, with its value for `t`.
#[must_use]
pub fn variables(t: &Transfer, recorder: &Recorder) -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let last = t.last();
    // The last call's phases, counted from the transfer's start (curl's
    // times are cumulative over redirects too).
    let last_call = t.calls().last().copied();
    let record = last_call.and_then(|c| recorder.get(c));
    let offset =
        record.as_ref().map_or(0.0, |r| r.local_start.saturating_duration_since(t.started).as_secs_f64());
    let p = record.as_ref().map(crate::record::CallRecord::phases).unwrap_or_default();
    // Cumulative, as curl's: a phase the last call skipped (DNS and connect
    // on a reused connection) ends where the call started; TLS is 0 without
    // TLS.
    let at = |v: f64| if record.is_some() { v + offset } else { 0.0 };
    let Phases { namelookup, connect, appconnect, starttransfer, .. } = p;
    let tls = last
        .map_or(t.url.as_str(), |h| h.url.as_str())
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let http_version = match last.map(|h| h.version) {
        Some(http::Version::HTTP_10) => "1.0",
        Some(http::Version::HTTP_2) => "2",
        Some(http::Version::HTTP_3) => "3",
        Some(_) => "1.1",
        None => "0",
    };
    vec![
        ("http_code", json!(format!("{:03}", last.map_or(0, |h| h.status.as_u16())))),
        ("http_version", json!(http_version)),
        ("remote_ip", json!(last.and_then(|h| h.peer).map_or(String::new(), |a| a.ip().to_string()))),
        ("remote_port", json!(last.and_then(|h| h.peer).map_or(String::new(), |a| a.port().to_string()))),
        (
            "num_connects",
            json!(t.hops.iter().filter(|h| h.source == Some(switchyard_core::Source::New)).count()),
        ),
        ("num_redirects", json!(t.hops.iter().filter(|h| h.redirect.is_some()).count())),
        ("url_effective", json!(switchyard_common::redact(last.map_or(t.url.as_str(), |h| h.url.as_str())))),
        ("time_namelookup", json!(at(namelookup))),
        ("time_connect", json!(at(connect))),
        ("time_appconnect", json!(if tls { at(appconnect) } else { 0.0 })),
        ("time_starttransfer", json!(at(starttransfer))),
        ("time_total", json!(t.elapsed.as_secs_f64())),
        ("size_download", json!(last.map_or(0, |h| h.bytes))),
        ("connection_id", json!(last.and_then(|h| h.connection).map_or(String::new(), |c| c.to_string()))),
        ("connection_source", json!(last.and_then(|h| h.source).map_or("", source_words))),
        ("attempts", json!(record.map_or(0, |r| r.tries))),
        ("response_code", json!(last.map_or(0, |h| h.status.as_u16()))),
        ("method", json!(last.map_or("GET", |h| h.method.as_str()))),
        ("scheme", json!(scheme(last.map_or(t.url.as_str(), |h| h.url.as_str())))),
        (
            "content_type",
            json!(last
                .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()),
        ),
        ("num_headers", json!(last.map_or(0, |h| h.headers.len()))),
        ("speed_download", json!(speed(last.map_or(0, |h| h.bytes), t.elapsed.as_secs_f64()))),
        ("exitcode", json!(t.result.as_ref().map_or_else(|f| f.code, |()| 0))),
        ("errormsg", json!(t.result.as_ref().map_or_else(|f| f.text(false).to_owned(), |()| String::new()))),
    ]
}

/// The URL's scheme as curl prints it (`HTTP`, `HTTPS`).
fn scheme(url: &str) -> String {
    url.split_once("://").map_or(String::new(), |(s, _)| s.to_ascii_uppercase())
}

/// Bytes per second, whole, as curl's `speed_download`.
fn speed(bytes: u64, seconds: f64) -> u64 {
    if seconds > 0.0 {
        (bytes as f64 / seconds) as u64
    } else {
        0
    }
}

/// The `%{name}`s in `format` that [`render`] does not know (curl warns about
/// each, on stderr, and prints nothing in its place).
#[must_use]
pub fn unknown(format: &str, vars: &[(&'static str, serde_json::Value)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = format;
    while let Some(i) = rest.find("%{") {
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !vars.iter().any(|(n, _)| *n == name) {
            out.push(name.to_owned());
        }
        rest = &after[end + 1..];
    }
    out
}

/// `format` with its variables and escapes replaced (`\n`, `\r`, `\t`, `\\`,
/// `%%`); an unknown `%{name}` prints nothing (as curl; [`unknown`] lists
/// them for the warning). `%header{name}` is that response header's value
/// (`headers`: the last response's). Times print with six decimals, as curl's.
#[must_use]
pub fn render(
    format: &str,
    vars: &[(&'static str, serde_json::Value)],
    headers: Option<&http::HeaderMap>,
) -> String {
    let mut out = String::new();
    let mut rest = format;
    while let Some(i) = rest.find(['%', '\\']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("%{") {
            if let Some(end) = after.find('}') {
                let name = &after[..end];
                if let Some((n, v)) = vars.iter().find(|(n, _)| *n == name) {
                    out.push_str(&value_text(n, v));
                }
                rest = &after[end + 1..];
                continue;
            }
        }
        if let Some(after) = tail.strip_prefix("%header{") {
            if let Some(end) = after.find('}') {
                let values: Vec<&str> = headers
                    .map(|h| h.get_all(&after[..end]).iter().filter_map(|v| v.to_str().ok()).collect())
                    .unwrap_or_default();
                out.push_str(&values.join(", "));
                rest = &after[end + 1..];
                continue;
            }
        }
        let (text, used) = match tail.as_bytes().get(1) {
            Some(b'%') if tail.starts_with('%') => ("%", 2),
            Some(b'n') if tail.starts_with('\\') => ("\n", 2),
            Some(b'r') if tail.starts_with('\\') => ("\r", 2),
            Some(b't') if tail.starts_with('\\') => ("\t", 2),
            Some(b'\\') if tail.starts_with('\\') => ("\\", 2),
            _ => (&tail[..1], 1),
        };
        out.push_str(text);
        rest = &tail[used..];
    }
    out.push_str(rest);
    out
}

fn value_text(name: &str, v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) if name.starts_with("time_") => {
            format!("{:.6}", n.as_f64().unwrap_or(0.0))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_as_curl() {
        let vars = vec![("http_code", json!("200")), ("time_total", json!(0.5)), ("num_connects", json!(1))];
        assert_eq!(
            render("%{http_code} %{time_total}s %{num_connects}\\n100%% %{nope} \\t\\\\", &vars, None),
            "200 0.500000s 1\n100%  \t\\"
        );
        assert_eq!(unknown("%{http_code} %{nope} %{also}", &vars), ["nope", "also"]);
        assert_eq!(render("%{unclosed", &vars, None), "%{unclosed");
        assert_eq!(render("trailing %", &vars, None), "trailing %");
        assert_eq!(render("ünï %{http_code}", &vars, None), "ünï 200");
        let mut h = http::HeaderMap::new();
        h.insert("x-a", http::HeaderValue::from_static("1"));
        assert_eq!(render("[%header{X-A}][%header{x-b}]", &vars, Some(&h)), "[1][]");
    }
}
