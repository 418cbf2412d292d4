//! curl's cookie engine, as `-b FILE` and `-c FILE` use it: cookies read
//! from a file (curl's Netscape-format jar, or `Set-Cookie:` lines), learnt
//! from every response's `Set-Cookie` (redirect hops included), sent where
//! they match (RFC 6265 §5.4: domain, path, secure, not expired) in curl's
//! order, and written back in curl's format, newest first.

use std::time::{SystemTime, UNIX_EPOCH};

/// The most cookies the jar keeps (curl bounds its jar too); the oldest
/// go first.
pub const MAX_COOKIES: usize = 3000;

/// One cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    /// The domain, without a leading dot.
    pub domain: String,
    /// Also for the domain's subdomains (a `Domain` attribute was given).
    pub tailmatch: bool,
    /// The path.
    pub path: String,
    /// Only over https.
    pub secure: bool,
    /// Not for scripts (kept in the jar as `#HttpOnly_`).
    pub http_only: bool,
    /// Unix seconds it expires at; 0: at the end of the session.
    pub expires: u64,
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
    created: u64,
}

/// The cookies of a command.
#[derive(Debug, Default, Clone)]
pub struct Jar {
    cookies: Vec<Cookie>,
    made: u64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Jar {
    /// Reads a jar file: curl's tab-separated lines (`#HttpOnly_` prefix
    /// kept), or `Set-Cookie:` header lines (for `host`); other lines are
    /// skipped, as curl does.
    #[must_use]
    pub fn read(text: &str, host: &str) -> Jar {
        let mut jar = Jar::default();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if let Some(header) =
                line.strip_prefix("Set-Cookie:").or_else(|| line.strip_prefix("set-cookie:"))
            {
                jar.set(header.trim(), host, "/", true);
                continue;
            }
            let (line, http_only) = match line.strip_prefix("#HttpOnly_") {
                Some(rest) => (rest, true),
                None if line.starts_with('#') || line.trim().is_empty() => continue,
                None => (line, false),
            };
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 7 {
                continue;
            }
            let cookie = Cookie {
                domain: f[0].trim_start_matches('.').to_ascii_lowercase(),
                tailmatch: f[1].eq_ignore_ascii_case("TRUE"),
                path: f[2].to_owned(),
                secure: f[3].eq_ignore_ascii_case("TRUE"),
                http_only,
                expires: f[4].parse().unwrap_or(0),
                name: f[5].to_owned(),
                value: f[6].to_owned(),
                created: 0,
            };
            // In the file's order, as curl reads it (so a jar read and
            // written again lists these the other way round).
            jar.insert(cookie);
        }
        jar
    }

    fn insert(&mut self, mut cookie: Cookie) {
        self.made += 1;
        cookie.created = self.made;
        if let Some(old) = self
            .cookies
            .iter_mut()
            .find(|c| c.name == cookie.name && c.domain == cookie.domain && c.path == cookie.path)
        {
            // A replaced cookie keeps its place (curl keeps the creation time).
            cookie.created = old.created;
            *old = cookie;
        } else {
            self.cookies.push(cookie);
            if self.cookies.len() > MAX_COOKIES {
                self.cookies.remove(0);
            }
        }
    }

    /// Learns one `Set-Cookie` value from a response to `host` and `path`
    /// (`secure`: it came over https). A cookie for another domain, or one
    /// already expired, removes or is dropped as RFC 6265 says.
    pub fn set(&mut self, header: &str, host: &str, request_path: &str, secure: bool) {
        let mut parts = header.split(';');
        let Some((name, value)) = parts.next().and_then(|nv| nv.split_once('=')) else { return };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() {
            return;
        }
        let host = host.to_ascii_lowercase();
        let mut cookie = Cookie {
            domain: host.clone(),
            tailmatch: false,
            path: default_path(request_path),
            secure: false,
            http_only: false,
            expires: 0,
            name: name.to_owned(),
            value: value.to_owned(),
            created: 0,
        };
        let mut max_age = None;
        for attr in parts {
            let (key, val) = attr.split_once('=').map_or((attr.trim(), ""), |(k, v)| (k.trim(), v.trim()));
            match key.to_ascii_lowercase().as_str() {
                "domain" if !val.is_empty() => {
                    let d = val.trim_start_matches('.').to_ascii_lowercase();
                    if !domain_match(&host, &d) {
                        return;
                    }
                    cookie.domain = d;
                    cookie.tailmatch = true;
                }
                "path" if val.starts_with('/') => cookie.path = val.to_owned(),
                "secure" => {
                    if !secure {
                        return;
                    }
                    cookie.secure = true;
                }
                "httponly" => cookie.http_only = true,
                "max-age" => max_age = val.parse::<i64>().ok(),
                "expires" => {
                    if let Ok(t) = httpdate::parse_http_date(val) {
                        cookie.expires = t.duration_since(UNIX_EPOCH).map_or(1, |d| d.as_secs().max(1));
                    }
                }
                _ => {}
            }
        }
        if let Some(age) = max_age {
            cookie.expires = if age <= 0 { 1 } else { now().saturating_add(age.unsigned_abs()) };
        }
        if cookie.expires != 0 && cookie.expires <= now() {
            self.cookies
                .retain(|c| !(c.name == cookie.name && c.domain == cookie.domain && c.path == cookie.path));
            return;
        }
        self.insert(cookie);
    }

    /// The `Cookie` header for a request to `host` and `path` (`secure`:
    /// over https), in curl's order: longest path first, then longest
    /// domain, then longest name, then newest. `None`: no cookie matches.
    #[must_use]
    pub fn header(&self, host: &str, path: &str, secure: bool) -> Option<String> {
        let host = host.to_ascii_lowercase();
        let now = now();
        let mut matching: Vec<&Cookie> = self
            .cookies
            .iter()
            .filter(|c| {
                (if c.tailmatch { domain_match(&host, &c.domain) } else { host == c.domain })
                    && path_match(path, &c.path)
                    && (!c.secure || secure)
                    && (c.expires == 0 || c.expires > now)
            })
            .collect();
        if matching.is_empty() {
            return None;
        }
        matching.sort_by(|a, b| {
            b.path
                .len()
                .cmp(&a.path.len())
                .then(b.domain.len().cmp(&a.domain.len()))
                .then(b.name.len().cmp(&a.name.len()))
                .then(b.created.cmp(&a.created))
        });
        Some(matching.iter().map(|c| format!("{}={}", c.name, c.value)).collect::<Vec<_>>().join("; "))
    }

    /// The jar in curl's file format.
    #[must_use]
    pub fn write(&self) -> String {
        let mut out = String::from(
            "# Netscape HTTP Cookie File\n# https://curl.se/docs/http-cookies.html\n# This file was generated by libcurl! Edit at your own risk.\n\n",
        );
        // Newest first, as curl writes its jar.
        let mut cookies: Vec<&Cookie> = self.cookies.iter().collect();
        cookies.sort_by_key(|c| std::cmp::Reverse(c.created));
        for c in cookies {
            let domain = if c.tailmatch { format!(".{}", c.domain) } else { c.domain.clone() };
            out.push_str(&format!(
                "{}{domain}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                if c.http_only { "#HttpOnly_" } else { "" },
                if c.tailmatch { "TRUE" } else { "FALSE" },
                c.path,
                if c.secure { "TRUE" } else { "FALSE" },
                c.expires,
                c.name,
                c.value
            ));
        }
        out
    }

    /// Drops the session cookies (no expiry): `-j`.
    pub fn drop_session_cookies(&mut self) {
        self.cookies.retain(|c| c.expires != 0);
    }

    /// How many cookies it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.cookies.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.cookies.is_empty()
    }
}

/// RFC 6265 §5.1.3 (an IP address matches only itself).
fn domain_match(host: &str, domain: &str) -> bool {
    host == domain
        || (host.ends_with(domain)
            && host.as_bytes().get(host.len() - domain.len() - 1) == Some(&b'.')
            && host.parse::<std::net::IpAddr>().is_err())
}

/// RFC 6265 §5.1.4.
fn path_match(request: &str, cookie: &str) -> bool {
    request == cookie
        || (request.starts_with(cookie)
            && (cookie.ends_with('/') || request.as_bytes().get(cookie.len()) == Some(&b'/')))
}

/// RFC 6265 §5.1.4's default path: the request path up to its last `/`.
fn default_path(request: &str) -> String {
    let path = request.split('?').next().unwrap_or("/");
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_match_and_order_as_curl() {
        let mut jar = Jar::default();
        jar.set("a=1", "example.com", "/dir/page", false);
        jar.set("bb=2; Path=/", "example.com", "/", false);
        jar.set("c=3; Domain=.example.com; Path=/dir", "www.example.com", "/", false);
        jar.set("s=4; Secure", "example.com", "/", true);
        jar.set("x=5; Domain=other.org", "example.com", "/", false);
        jar.set("gone=6; Max-Age=0", "example.com", "/", false);
        jar.set("s2=7; Secure", "example.com", "/", false);
        assert_eq!(jar.len(), 4);
        assert_eq!(jar.header("example.com", "/dir/x", false).as_deref(), Some("c=3; a=1; bb=2"));
        assert_eq!(jar.header("example.com", "/", true).as_deref(), Some("bb=2; s=4"));
        assert_eq!(jar.header("sub.example.com", "/dir", false).as_deref(), Some("c=3"));
        assert_eq!(jar.header("example.org", "/", true), None);
        assert_eq!(jar.header("example.com", "/directory", false).as_deref(), Some("bb=2"));
        // Replacing keeps the place; expiring removes.
        jar.set("bb=9; Path=/", "example.com", "/", false);
        jar.set("a=1; Path=/dir; Expires=Thu, 01 Jan 1970 00:00:01 GMT", "example.com", "/", false);
        assert_eq!(jar.header("example.com", "/dir/x", false).as_deref(), Some("c=3; bb=9"));
    }

    #[test]
    fn the_file_format_round_trips() {
        let mut jar = Jar::default();
        jar.set("a=1; HttpOnly", "127.0.0.1", "/", false);
        jar.set("b=2; Domain=example.com; Max-Age=100", "example.com", "/x/y", false);
        let text = jar.write();
        assert!(text.starts_with("# Netscape HTTP Cookie File\n"));
        assert!(text.contains("#HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t0\ta\t1\n"), "{text}");
        assert!(text.contains(".example.com\tTRUE\t/x\tFALSE\t"), "{text}");
        let again = Jar::read(&text, "unused");
        let lines = |t: &str| t.lines().skip(4).map(str::to_owned).collect::<Vec<_>>();
        let mut reversed = lines(&text);
        reversed.reverse();
        assert_eq!(lines(&again.write()), reversed);
        let from_headers = Jar::read("Set-Cookie: k=v; Path=/\nnot a cookie\n", "h.test");
        assert_eq!(from_headers.header("h.test", "/", false).as_deref(), Some("k=v"));
    }
}
