//! The request curl's flags describe: `-X`, `-H`, `-A`, `-e`, `-u`, `-b`,
//! the body flags (`-d`, `--data-binary`, `--data-raw`, `--data-urlencode`,
//! `--json`, `-F`, `-T`), `-G`, `-I`, `--compressed`.

use std::io::Read as _;

use bytes::Bytes;
use http::header::{
    HeaderName, HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_TYPE, COOKIE, REFERER,
    USER_AGENT,
};
use http::{HeaderMap, Method};

use crate::args::{DataKind, GetArgs};
use crate::exit::{self, Failed};

/// What every URL of the command is sent: a method, headers and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The method.
    pub method: Method,
    /// `-X` gave it: kept on every redirect hop (curl's rule), even where
    /// the hop drops the body.
    pub method_forced: bool,
    /// The headers given (and the ones the flags imply: `Content-Type`,
    /// `Authorization` for `-u`, …).
    pub headers: HeaderMap,
    /// The body.
    pub body: Option<Bytes>,
    /// `-G`: the data, put in each URL's query instead of the body.
    pub query: Option<String>,
    /// `-T FILE`: the name appended to a URL that ends in `/`.
    pub upload_name: Option<String>,
    /// `-e URL;auto`: on each redirect hop, send the URL it came from.
    pub referer_auto: bool,
    /// `-H "User-Agent:"`: send no `User-Agent` (curl's way to remove a
    /// header it would add).
    pub no_user_agent: bool,
    /// `-u` gave credentials (netrc is then not read).
    pub has_user: bool,
    /// The body is form data (-d and kin, -F), not an upload (-T).
    pub posts_data: bool,
}

impl Spec {
    /// The request the arguments describe (files and stdin read here).
    ///
    /// # Errors
    /// A malformed header or method (exit 2), `-I` with a body (2), an
    /// unsupported authentication scheme (2), a `-F`/`-T` file that cannot be
    /// read (26).
    pub fn from_args(args: &GetArgs) -> Result<Spec, Failed> {
        let mut headers = HeaderMap::new();
        let mut removed = Vec::new();
        for h in &args.headers {
            for h in header_lines(h)? {
                match parse_header(&h)? {
                    Header::Set(name, value) => {
                        headers.append(name, value);
                    }
                    Header::Remove(name) => removed.push(name),
                }
            }
        }
        let set_default = |headers: &mut HeaderMap, name: HeaderName, value: &str| -> Result<(), Failed> {
            if !headers.contains_key(&name) && !removed.contains(&name) {
                let value = HeaderValue::from_str(value)
                    .map_err(|_| Failed::config(format!("{value:?} is not a valid {name} value")))?;
                headers.insert(name, value);
            }
            Ok(())
        };
        if let Some(agent) = &args.user_agent {
            set_default(&mut headers, USER_AGENT, agent)?;
        }
        let mut referer_auto = false;
        if let Some(referer) = &args.referer {
            let given = match referer.strip_suffix(";auto") {
                Some(rest) => {
                    referer_auto = true;
                    rest
                }
                None => referer.as_str(),
            };
            if !given.is_empty() {
                set_default(&mut headers, REFERER, given)?;
            }
        }
        for (flag, on) in [("--digest", args.digest), ("--ntlm", args.ntlm), ("--negotiate", args.negotiate)]
        {
            if on {
                return Err(Failed::config(format!(
                    "{flag}: only Basic authentication is supported (-u USER:PASSWORD, or -H 'Authorization: …')"
                )));
            }
        }
        if let Some(user) = &args.user {
            if !user.contains(':') {
                return Err(Failed::config(format!(
                    "-u {user}: give the password too (-u {user}:PASSWORD; switchyard does not prompt for it)"
                )));
            }
            set_default(&mut headers, AUTHORIZATION, &basic(user))?;
        }
        let literal_cookies: Vec<&str> =
            args.cookie.iter().filter(|c| c.contains('=')).map(String::as_str).collect();
        if !literal_cookies.is_empty() {
            set_default(&mut headers, COOKIE, &literal_cookies.join("; "))?;
        }
        if let Some(range) = &args.range {
            set_default(&mut headers, http::header::RANGE, &format!("bytes={range}"))?;
        }
        if let Some(token) = &args.oauth2_bearer {
            set_default(&mut headers, AUTHORIZATION, &format!("Bearer {token}"))?;
        }
        if args.http1_0 {
            return Err(Failed::config(
                "-0/--http1.0: switchyard speaks HTTP/1.1 (which HTTP/1.0 servers answer); drop the flag",
            ));
        }
        if args.compressed {
            set_default(&mut headers, ACCEPT_ENCODING, "deflate, gzip, br")?;
        }
        // curl's default `Accept: */*`, unless given or removed.
        let json = args.data_in_order.iter().any(|(k, _)| *k == DataKind::Json);
        set_default(&mut headers, ACCEPT, if json { "application/json" } else { "*/*" })?;
        let no_user_agent = removed.contains(&USER_AGENT) && !headers.contains_key(USER_AGENT);

        let mut body: Option<Vec<u8>> = None;
        let mut last_kind = None;
        for (kind, value) in &args.data_in_order {
            let part = data(*kind, value, args.silent);
            let joined = body.get_or_insert_with(Vec::new);
            if last_kind.is_some() && !(*kind == DataKind::Json && last_kind == Some(DataKind::Json)) {
                joined.push(b'&');
            }
            joined.extend_from_slice(&part);
            last_kind = Some(*kind);
        }
        let bodies = [
            body.is_some(),
            !args.form.is_empty() || !args.form_string.is_empty(),
            args.upload_file.is_some(),
        ];
        if bodies.iter().filter(|b| **b).count() > 1 {
            return Err(Failed::config(
                "choose one kind of body: -d/--data-*/--json, -F/--form or -T/--upload-file",
            ));
        }
        let mut query = None;
        if args.get {
            query = body.take().map(|b| String::from_utf8_lossy(&b).into_owned());
        }
        let mut content_type = match (&body, json) {
            (Some(_), true) => Some("application/json".to_owned()),
            (Some(_), false) => Some("application/x-www-form-urlencoded".to_owned()),
            (None, _) => None,
        };
        if !args.form.is_empty() || !args.form_string.is_empty() {
            let boundary = boundary();
            body = Some(crate::form::multipart(&args.form, &args.form_string, &boundary)?);
            content_type = Some(format!("multipart/form-data; boundary={boundary}"));
        }
        let posts_data = body.is_some();
        let mut upload_name = None;
        if let Some(file) = &args.upload_file {
            body = Some(read_source(file, "-T")?);
            if file != "-" {
                upload_name =
                    std::path::Path::new(file).file_name().map(|n| n.to_string_lossy().into_owned());
            }
        }
        if (args.head || args.get) && body.is_some() {
            return Err(Failed::config("-I/--head sends no body: it cannot be used with a body flag"));
        }
        let method = match &args.method {
            Some(m) => Method::from_bytes(m.as_bytes())
                .map_err(|_| Failed::config(format!("-X {m:?} is not a valid HTTP method")))?,
            None if args.head => Method::HEAD,
            None if args.upload_file.is_some() => Method::PUT,
            None if body.is_some() => Method::POST,
            None => Method::GET,
        };
        if let Some(ct) = content_type {
            set_default(&mut headers, CONTENT_TYPE, &ct)?;
        }
        // curl (7.88) asks before sending an upload, and a body over 1 MiB.
        let large = body.as_ref().is_some_and(|b| b.len() > 1024 * 1024);
        if args.upload_file.is_some() || large {
            set_default(&mut headers, http::header::EXPECT, "100-continue")?;
        }
        Ok(Spec {
            method,
            method_forced: args.method.is_some(),
            headers,
            body: body.map(Bytes::from),
            query,
            upload_name,
            referer_auto,
            no_user_agent,
            has_user: args.user.is_some(),
            posts_data,
        })
    }

    /// The URL this spec sends for `url`: `-T`'s file name after a
    /// trailing `/`, `-G`'s data in the query.
    #[must_use]
    pub fn url_for(&self, url: &str) -> String {
        let (mut base, fragment) = match url.split_once('#') {
            Some((b, f)) => (b.to_owned(), Some(f)),
            None => (url.to_owned(), None),
        };
        if let Some(name) = &self.upload_name {
            let path_ends_in_slash =
                base.split('?').next().is_some_and(|p| p.ends_with('/') || p.splitn(4, '/').nth(3).is_none());
            if path_ends_in_slash {
                let (path, q) = match base.split_once('?') {
                    Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
                    None => (base.clone(), None),
                };
                let slash = if path.ends_with('/') { "" } else { "/" };
                base = format!("{path}{slash}{name}{}", q.map_or(String::new(), |q| format!("?{q}")));
            }
        }
        if let Some(q) = &self.query {
            base.push(if base.contains('?') { '&' } else { '?' });
            base.push_str(q);
        }
        match fragment {
            Some(f) => format!("{base}#{f}"),
            None => base,
        }
    }
}

/// `Basic base64(user:password)`.
#[must_use]
pub fn basic(user_password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_password))
}

/// A multipart boundary: curl's shape (24 dashes and 16 hex digits), from a
/// seed that differs per run.
fn boundary() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mixed =
        (nanos as u64 ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("------------------------{mixed:016x}")
}

/// One `-H`, as curl reads it.
enum Header {
    /// `Name: value`, and curl's `Name;` (an empty value).
    Set(HeaderName, HeaderValue),
    /// `Name:` with nothing after the colon: a header the client would add
    /// (`User-Agent`, `Accept`) is not sent.
    Remove(HeaderName),
}

/// `-H @FILE`: one header per line; else the one given.
fn header_lines(h: &str) -> Result<Vec<String>, Failed> {
    match h.strip_prefix('@') {
        Some(file) => match read_source(file, "-H") {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()),
            // curl's way: a warning, and no header from it.
            Err(f) => {
                eprintln!("Warning: {}", f.message);
                Ok(Vec::new())
            }
        },
        None => Ok(vec![h.to_owned()]),
    }
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

/// A file's bytes, or stdin's for `-`.
///
/// # Errors
/// The file cannot be read (exit 26).
pub fn read_source(source: &str, flag: &str) -> Result<Vec<u8>, Failed> {
    let mut bytes = Vec::new();
    if source == "-" {
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| {
            Failed::with_code(exit::READ, format!("({}) {flag}: cannot read stdin: {e}", exit::READ))
        })?;
    } else {
        bytes = std::fs::read(source).map_err(|e| {
            Failed::with_code(exit::READ, format!("({}) {flag}: cannot read {source}: {e}", exit::READ))
        })?;
    }
    Ok(bytes)
}

/// A file for `-d @FILE` and its kin: curl warns when it cannot be read and
/// sends nothing in its place.
fn data_file(source: &str, quiet: bool) -> Vec<u8> {
    read_source(source, "-d").unwrap_or_else(|_| {
        if !quiet {
            eprintln!("Warning: Couldn't read data from file \"{source}\", this makes an empty ");
            eprintln!("Warning: POST.");
        }
        Vec::new()
    })
}

/// One body flag's value, as curl reads it.
fn data(kind: DataKind, d: &str, quiet: bool) -> Vec<u8> {
    let data_file = |source: &str| data_file(source, quiet);
    match kind {
        DataKind::Raw => d.as_bytes().to_vec(),
        DataKind::Ascii => match d.strip_prefix('@') {
            Some(source) => {
                let mut bytes = data_file(source);
                bytes.retain(|b| *b != b'\r' && *b != b'\n');
                bytes
            }
            None => d.as_bytes().to_vec(),
        },
        DataKind::Binary | DataKind::Json => match d.strip_prefix('@') {
            Some(source) => data_file(source),
            None => d.as_bytes().to_vec(),
        },
        DataKind::UrlEncode => crate::form::urlencode_arg(d, data_file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &[&str]) -> Result<Spec, Failed> {
        let mut argv = vec!["switchyard", "get"];
        argv.extend_from_slice(extra);
        argv.push("http://a/");
        let cli = crate::args::parse(argv.into_iter().map(std::ffi::OsString::from)).unwrap();
        let crate::args::Command::Get(args) = cli.command else { panic!() };
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
        // curl's way with a file that cannot be read: a warning, an empty part.
        assert_eq!(spec(&["-d", "@/no/such/file"]).unwrap().body.as_deref(), Some(&b""[..]));
        assert_eq!(spec(&["-F", "f=@/no/such/file"]).unwrap_err().code, exit::READ);
        // The flags' order decides the body's.
        let ordered = spec(&["--data-urlencode", "a=b c", "-d", "x=1", "--data-raw", "@r"]).unwrap();
        assert_eq!(ordered.body.as_deref(), Some(&b"a=b+c&x=1&@r"[..]));
        let json = spec(&["--json", "[1,", "--json", "2]"]).unwrap();
        assert_eq!(json.body.as_deref(), Some(&b"[1,2]"[..]));
        assert_eq!(
            (json.headers[CONTENT_TYPE].to_str().unwrap(), json.headers[ACCEPT].to_str().unwrap()),
            ("application/json", "application/json")
        );
        let user = spec(&["-u", "ann:pw", "-A", "agent/1", "-e", "http://r/;auto", "-b", "k=v"]).unwrap();
        assert_eq!(user.headers[http::header::AUTHORIZATION], "Basic YW5uOnB3");
        assert_eq!(user.headers[USER_AGENT], "agent/1");
        assert_eq!(user.headers[REFERER], "http://r/");
        assert!(user.referer_auto);
        assert_eq!(user.headers[COOKIE], "k=v");
        assert_eq!(spec(&["-u", "ann"]).unwrap_err().code, exit::CONFIG);
        assert_eq!(spec(&["--digest", "-u", "a:b"]).unwrap_err().code, exit::CONFIG);
        let get = spec(&["-G", "-d", "q=1"]).unwrap();
        assert_eq!(
            (get.method.as_str(), get.body.is_none(), get.url_for("http://a/p?x#f")),
            ("GET", true, "http://a/p?x&q=1#f".to_owned())
        );
        assert_eq!(spec(&["-d", "x", "-F", "a=1"]).unwrap_err().code, exit::CONFIG);
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
