//! The request curl's flags describe: `-X`, `-H`, `-d`, `--data-binary`, `-I`.

use std::io::Read as _;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, Method};

use crate::args::GetArgs;
use crate::exit::{self, Failed};

/// What every URL of the command is sent: a method, headers and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The method.
    pub method: Method,
    /// The `-H` headers (and a form `Content-Type` for `-d`).
    pub headers: HeaderMap,
    /// The `-d` / `--data-binary` body.
    pub body: Option<Bytes>,
    /// `-H "User-Agent:"`: send no `User-Agent` (curl's way to remove a
    /// header it would add).
    pub no_user_agent: bool,
}

impl Spec {
    /// The request the arguments describe (files and stdin read here).
    ///
    /// # Errors
    /// A malformed header or method (exit 2), `-I` with a body (2), a `@FILE`
    /// that cannot be read (26).
    pub fn from_args(args: &GetArgs) -> Result<Spec, Failed> {
        let mut headers = HeaderMap::new();
        let mut removed = Vec::new();
        for h in &args.headers {
            match parse_header(h)? {
                Header::Set(name, value) => {
                    headers.append(name, value);
                }
                Header::Remove(name) => removed.push(name),
            }
        }
        // curl's default `Accept: */*`, unless given or removed.
        if !headers.contains_key(ACCEPT) && !removed.contains(&ACCEPT) {
            headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        }
        let no_user_agent = removed.contains(&USER_AGENT) && !headers.contains_key(USER_AGENT);
        let mut parts = Vec::new();
        for d in &args.data {
            parts.push(data(d, true)?);
        }
        for d in &args.data_binary {
            parts.push(data(d, false)?);
        }
        let body = (!parts.is_empty()).then(|| Bytes::from(parts.join(&b'&')));
        if args.head && body.is_some() {
            return Err(Failed::config("-I/--head sends no body: it cannot be used with -d/--data-binary"));
        }
        let method = match &args.method {
            Some(m) => Method::from_bytes(m.as_bytes())
                .map_err(|_| Failed::config(format!("-X {m:?} is not a valid HTTP method")))?,
            None if args.head => Method::HEAD,
            None if body.is_some() => Method::POST,
            None => Method::GET,
        };
        if body.is_some() && !headers.contains_key(CONTENT_TYPE) {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
        }
        Ok(Spec { method, headers, body, no_user_agent })
    }
}

/// One `-H`, as curl reads it.
enum Header {
    /// `Name: value`, and curl's `Name;` (an empty value).
    Set(HeaderName, HeaderValue),
    /// `Name:` with nothing after the colon: a header the client would add
    /// (`User-Agent`, `Accept`) is not sent.
    Remove(HeaderName),
}

fn parse_header(h: &str) -> Result<Header, Failed> {
    let bad = |why: &str| Failed::config(format!("-H {h:?}: {why}"));
    let (name, value) = if let Some((name, value)) = h.split_once(':') {
        let value = value.trim();
        if value.is_empty() {
            let name =
                HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad("not a valid header name"))?;
            return Ok(Header::Remove(name));
        }
        (name.trim(), value)
    } else if let Some(name) = h.strip_suffix(';') {
        (name.trim(), "")
    } else {
        return Err(bad("expected `Name: value`"));
    };
    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("not a valid header name"))?;
    let value = HeaderValue::from_str(value).map_err(|_| bad("not a valid header value"))?;
    Ok(Header::Set(name, value))
}

/// One `-d` (`ascii`: CR and LF dropped from a file, as curl) or
/// `--data-binary` value.
fn data(d: &str, ascii: bool) -> Result<Vec<u8>, Failed> {
    let Some(source) = d.strip_prefix('@') else { return Ok(d.as_bytes().to_vec()) };
    let mut bytes = Vec::new();
    if source == "-" {
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failed::with_code(exit::READ, format!("cannot read the body from stdin: {e}")))?;
    } else {
        bytes = std::fs::read(source)
            .map_err(|e| Failed::with_code(exit::READ, format!("cannot read the body from {source}: {e}")))?;
    }
    if ascii {
        bytes.retain(|b| *b != b'\r' && *b != b'\n');
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn spec(extra: &[&str]) -> Result<Spec, Failed> {
        let mut argv = vec!["switchyard", "get"];
        argv.extend_from_slice(extra);
        argv.push("http://a/");
        let crate::args::Command::Get(args) = crate::args::Cli::try_parse_from(argv).unwrap().command else {
            panic!()
        };
        Spec::from_args(&args)
    }

    #[test]
    fn methods_bodies_and_headers_as_curl() {
        assert_eq!(spec(&[]).unwrap().method, Method::GET);
        assert_eq!(spec(&["-I"]).unwrap().method, Method::HEAD);
        let post = spec(&["-d", "a=1", "-d", "b=2"]).unwrap();
        assert_eq!((post.method.as_str(), post.body.as_deref()), ("POST", Some(&b"a=1&b=2"[..])));
        assert_eq!(post.headers[CONTENT_TYPE], "application/x-www-form-urlencoded");
        let put = spec(&["-X", "PUT", "-H", "Content-Type: text/plain", "--data-binary", "x"]).unwrap();
        assert_eq!((put.method.as_str(), put.headers[CONTENT_TYPE].to_str().unwrap()), ("PUT", "text/plain"));
        let h = spec(&["-H", "X-A: 1", "-H", "X-A: 2", "-H", "X-Empty;", "-H", "X-Skip:"]).unwrap();
        assert_eq!(h.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(h.headers["x-empty"], "");
        assert!(!h.headers.contains_key("x-skip"));
        // curl's defaults: Accept */* unless given or removed; `User-Agent:` sends none.
        assert_eq!(h.headers[ACCEPT], "*/*");
        assert!(!h.no_user_agent);
        assert_eq!(spec(&["-H", "Accept: text/plain"]).unwrap().headers[ACCEPT], "text/plain");
        assert!(!spec(&["-H", "accept:"]).unwrap().headers.contains_key(ACCEPT));
        assert!(spec(&["-H", "User-Agent:"]).unwrap().no_user_agent);
        assert!(!spec(&["-H", "User-Agent:", "-H", "User-Agent: mine"]).unwrap().no_user_agent);
        for bad in [&["-H", "no colon"][..], &["-X", "BAD METHOD"], &["-I", "-d", "x"]] {
            assert_eq!(spec(bad).unwrap_err().code, exit::CONFIG, "{bad:?}");
        }
        assert_eq!(spec(&["-d", "@/no/such/file"]).unwrap_err().code, exit::READ);
    }

    #[test]
    fn data_files_lose_line_breaks_but_binary_ones_do_not() {
        let path = std::env::temp_dir().join(format!("switchyard-spec-{}", std::process::id()));
        std::fs::write(&path, b"a=1\r\nb=2\n").unwrap();
        let at = format!("@{}", path.display());
        assert_eq!(spec(&["-d", &at]).unwrap().body.as_deref(), Some(&b"a=1b=2"[..]));
        assert_eq!(spec(&["--data-binary", &at]).unwrap().body.as_deref(), Some(&b"a=1\r\nb=2\n"[..]));
        let _ = std::fs::remove_file(path);
    }
}
