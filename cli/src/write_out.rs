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
    let Phases { namelookup, connect, appconnect, pretransfer, starttransfer, .. } = p;
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
    // The total is never less than a phase inside it (the clocks are read
    // at different places).
    let starttransfer = at(starttransfer);
    let total = t.elapsed.as_secs_f64().max(starttransfer);
    // The time spent on redirects before the last hop started.
    let redirect = if t.hops.len() > 1 { offset } else { 0.0 };
    let header_bytes: usize = t.hops.iter().map(|h| crate::transfer::head_text(h).len()).sum();
    let request_bytes: u64 = t.hops.iter().map(request_size).sum();
    let uploaded: u64 = t.hops.iter().map(|h| h.request_body).sum();
    let referer = last
        .and_then(|h| h.request_headers.get(http::header::REFERER))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let certificate_failed = t.result.as_ref().err().is_some_and(|f| f.code == crate::exit::CERTIFICATE);
    vec![
        ("http_code", json!(format!("{:03}", last.map_or(0, |h| h.status.as_u16())))),
        ("http_version", json!(http_version)),
        ("remote_ip", json!(last.and_then(|h| h.peer).map_or(String::new(), |a| a.ip().to_string()))),
        ("remote_port", json!(last.and_then(|h| h.peer).map_or(String::new(), |a| a.port().to_string()))),
        ("local_ip", json!(last.and_then(|h| h.local).map_or(String::new(), |a| a.ip().to_string()))),
        ("local_port", json!(last.and_then(|h| h.local).map_or(String::new(), |a| a.port().to_string()))),
        (
            "num_connects",
            json!(t.hops.iter().filter(|h| h.source == Some(switchyard_core::Source::New)).count()),
        ),
        ("num_redirects", json!(t.hops.iter().filter(|h| h.redirect.is_some()).count())),
        ("url_effective", json!(switchyard_common::redact(last.map_or(t.url.as_str(), |h| h.url.as_str())))),
        ("url", json!(switchyard_common::redact(&t.url))),
        ("urlnum", json!(t.index)),
        ("redirect_url", json!(last.and_then(redirect_target).unwrap_or_default())),
        ("time_namelookup", json!(at(namelookup))),
        ("time_connect", json!(at(connect))),
        ("time_appconnect", json!(if tls { at(appconnect) } else { 0.0 })),
        ("time_pretransfer", json!(at(pretransfer))),
        ("time_redirect", json!(redirect)),
        ("time_starttransfer", json!(starttransfer)),
        ("time_total", json!(total)),
        ("size_download", json!(last.map_or(0, |h| h.bytes))),
        ("size_header", json!(header_bytes)),
        ("size_request", json!(request_bytes)),
        ("size_upload", json!(uploaded)),
        ("speed_download", json!(speed(last.map_or(0, |h| h.bytes), total))),
        ("speed_upload", json!(speed(uploaded, total))),
        ("connection_id", json!(last.and_then(|h| h.connection).map_or(String::new(), |c| c.to_string()))),
        ("connection_source", json!(last.and_then(|h| h.source).map_or("", source_words))),
        ("attempts", json!(record.map_or(0, |r| r.tries))),
        ("response_code", json!(last.map_or(0, |h| h.status.as_u16()))),
        ("http_connect", json!(format!("{:03}", http_connect(t, recorder)))),
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
        ("filename_effective", json!(t.filename.clone().unwrap_or_default())),
        ("referer", json!(referer)),
        ("ssl_verify_result", json!(u8::from(certificate_failed))),
        ("proxy_ssl_verify_result", json!(0)),
        ("ftp_entry_path", json!("")),
        ("exitcode", json!(t.result.as_ref().map_or_else(|f| f.code, |()| 0))),
        ("errormsg", json!(t.result.as_ref().map_or_else(|f| f.text(false).to_owned(), |()| String::new()))),
    ]
}

/// curl's `http_connect`: a refused `CONNECT`'s status; 200 for a tunnel
/// this transfer opened (the proxy's exact 2xx is not kept); else 0.
fn http_connect(t: &Transfer, recorder: &Recorder) -> u16 {
    if let Err(f) = &t.result {
        if let Some(status) = f.http_connect {
            return status;
        }
    }
    let tunnelled = t.calls().iter().filter_map(|c| recorder.get(*c)).any(|r| {
        r.connection.is_some_and(|(_, s)| s == switchyard_core::Source::New)
            && r.new_route().is_some_and(switchyard_core::Route::requires_tunnel)
    });
    if tunnelled {
        200
    } else {
        0
    }
}

/// Where a redirect answer points (curl's `redirect_url`: also when -L did
/// not follow it), resolved against the hop's URL.
fn redirect_target(h: &crate::transfer::HopDone) -> Option<String> {
    if !h.status.is_redirection() {
        return None;
    }
    let location = h.headers.get(http::header::LOCATION)?.to_str().ok()?;
    let base = url::Url::parse(&h.url).ok()?;
    base.join(location).ok().map(|u| u.to_string())
}

/// The bytes of one hop's request as HTTP/1.1 writes it: request line,
/// `Host`, the client's `User-Agent` unless a header replaced or removed it,
/// the fields, `Content-Length` for a body, the blank line, the body.
fn request_size(h: &crate::transfer::HopDone) -> u64 {
    let Ok(u) = url::Url::parse(&h.url) else { return 0 };
    let target = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_owned(),
    };
    let host = match u.port() {
        Some(p) => format!("{}:{p}", u.host_str().unwrap_or_default()),
        None => u.host_str().unwrap_or_default().to_owned(),
    };
    let mut n = format!("{} {target} HTTP/1.1\r\nHost: {host}\r\n", h.method).len();
    if !h.request_headers.contains_key(http::header::USER_AGENT) {
        n += format!("User-Agent: {}\r\n", switchyard_common::DEFAULT_USER_AGENT).len();
    }
    for (name, value) in &h.request_headers {
        n += name.as_str().len() + 2 + value.len() + 2;
    }
    if h.request_body > 0 && !h.request_headers.contains_key(http::header::CONTENT_LENGTH) {
        n += format!("Content-Length: {}\r\n", h.request_body).len();
    }
    (n + 2) as u64 + h.request_body
}

/// curl's `%{json}`: every variable (curl's names and switchyard's own),
/// numbers as numbers, empty strings as `null`, keys sorted, then
/// `curl_version` (here switchyard's).
#[must_use]
pub fn json(vars: &[(&'static str, serde_json::Value)]) -> String {
    // Numbers curl keeps as numbers (ports and codes too); times with six
    // decimals, as curl writes them.
    let numeric = ["http_code", "http_connect", "remote_port", "local_port"];
    let mut map = std::collections::BTreeMap::new();
    for (name, v) in vars {
        let text = match v {
            serde_json::Value::String(s) if numeric.contains(name) => {
                s.parse::<u64>().map_or_else(|_| "null".to_owned(), |n| n.to_string())
            }
            serde_json::Value::String(s) if s.is_empty() => "null".to_owned(),
            serde_json::Value::Number(n) if name.starts_with("time_") => {
                format!("{:.6}", n.as_f64().unwrap_or(0.0))
            }
            other => other.to_string(),
        };
        map.insert(*name, text);
    }
    let mut out = String::from("{");
    for (name, v) in &map {
        out.push_str(&format!("\"{name}\":{v},"));
    }
    out.push_str(&format!("\"curl_version\":\"switchyard/{}\"}}", env!("CARGO_PKG_VERSION")));
    out
}

/// curl's `%{header_json}`: the response's fields, names lower-case, each
/// with its values in order, one field per line.
#[must_use]
pub fn header_json(headers: Option<&http::HeaderMap>) -> String {
    let Some(headers) = headers else { return "{}".into() };
    let fields: Vec<String> = headers
        .keys()
        .map(|name| {
            let values: Vec<serde_json::Value> = headers
                .get_all(name)
                .iter()
                .map(|v| serde_json::json!(String::from_utf8_lossy(v.as_bytes())))
                .collect();
            format!("{}:{}", serde_json::json!(name.as_str()), serde_json::Value::Array(values))
        })
        .collect();
    format!("{{{}\n}}", fields.join(",\n"))
}

/// The URL's scheme as curl prints it (`HTTP`, `HTTPS`).
fn scheme(url: &str) -> String {
    url.split_once("://").map_or(String::new(), |(s, _)| s.to_ascii_uppercase())
}

/// Bytes per second, whole, as curl's `speed_download`.
fn speed(bytes: u64, seconds: f64) -> u64 {
    if bytes == 0 {
        return 0;
    }
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
        if !vars.iter().any(|(n, _)| *n == name) && !SPECIAL.contains(&name) {
            out.push(name.to_owned());
        }
        rest = &after[end + 1..];
    }
    out
}

/// The variables that are not values: `json`, `header_json`, and the
/// switches `stdout` and `stderr`.
const SPECIAL: [&str; 4] = ["json", "header_json", "stdout", "stderr"];

/// `format` with its variables and escapes replaced (`\n`, `\r`, `\t`, `\\`,
/// `%%`); an unknown `%{name}` prints nothing (as curl; [`unknown`] lists
/// them for the warning). `%header{name}` is that response header's value
/// (`headers`: the last response's). Times print with six decimals, as curl's.
/// What `%{stderr}` sends to stderr is left out (see [`render_to`]).
#[must_use]
pub fn render(
    format: &str,
    vars: &[(&'static str, serde_json::Value)],
    headers: Option<&http::HeaderMap>,
) -> String {
    render_to(format, vars, headers).into_iter().filter(|(stderr, _)| !stderr).map(|(_, s)| s).collect()
}

/// [`render`], in pieces: each with whether it goes to stderr (after
/// `%{stderr}`, until `%{stdout}`).
#[must_use]
pub fn render_to(
    format: &str,
    vars: &[(&'static str, serde_json::Value)],
    headers: Option<&http::HeaderMap>,
) -> Vec<(bool, String)> {
    let mut pieces = Vec::new();
    let mut to_stderr = false;
    let mut out = String::new();
    let mut rest = format;
    while let Some(i) = rest.find(['%', '\\']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("%{") {
            if let Some(end) = after.find('}') {
                let name = &after[..end];
                match name {
                    "stdout" | "stderr" => {
                        pieces.push((to_stderr, std::mem::take(&mut out)));
                        to_stderr = name == "stderr";
                    }
                    "json" => out.push_str(&json(vars)),
                    "header_json" => out.push_str(&header_json(headers)),
                    _ => {
                        if let Some((n, v)) = vars.iter().find(|(n, _)| *n == name) {
                            out.push_str(&value_text(n, v));
                        }
                    }
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
    pieces.push((to_stderr, out));
    pieces
}

/// `-w @FILE` (`@-`: stdin): the format read from a file, its line ends
/// dropped as curl does; else the format as given.
#[must_use]
pub fn format_text(w: &str) -> String {
    match w.strip_prefix('@') {
        Some(file) => crate::request::read_source(file, "-w")
            .map(|b| String::from_utf8_lossy(&b).replace(['\r', '\n'], ""))
            .unwrap_or_default(),
        None => w.to_owned(),
    }
}

/// Writes `-w`'s output for one transfer (stdout and stderr pieces).
pub fn write(format: &str, vars: &[(&'static str, serde_json::Value)], headers: Option<&http::HeaderMap>) {
    use std::io::Write as _;
    for (stderr, text) in render_to(format, vars, headers) {
        if stderr {
            let _ = std::io::stderr().write_all(text.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
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
    fn json_as_curl_writes_it() {
        let vars = vec![
            ("http_code", json!("200")),
            ("remote_port", json!("8080")),
            ("local_port", json!("")),
            ("time_total", json!(0.000097)),
            ("content_type", json!("")),
            ("num_connects", json!(1)),
            ("url", json!("http://a/")),
        ];
        let text = json(&vars);
        assert!(text.starts_with("{\"content_type\":null,\"http_code\":200,\"local_port\":null,\"num_connects\":1,\"remote_port\":8080,\"time_total\":0.000097,\"url\":\"http://a/\",\"curl_version\":\"switchyard/"), "{text}");
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["remote_port"], 8080);
    }

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
