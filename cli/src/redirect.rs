//! `-L`: which request a redirect answer leads to (curl's and the fetch
//! standard's rules), as a pure function of the hop and the answer.

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, LOCATION, PROXY_AUTHORIZATION};
use http::{HeaderMap, Method, StatusCode};

/// One request of a transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The method.
    pub method: Method,
    /// The absolute URL.
    pub url: String,
    /// The headers given (not the client's own).
    pub headers: HeaderMap,
    /// The body, if any.
    pub body: Option<Bytes>,
    /// `-X` named the method: a hop that turns into a GET keeps the method's
    /// name (without the body), as curl does.
    pub method_forced: bool,
    /// The body is form data (`-d`, `-F`, …): curl treats the request as a
    /// POST for redirects whatever `-X` says (a 301 or 302 drops the body).
    pub posts_data: bool,
}

/// Where a redirect leads, or why it cannot be followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Not a redirect (or one without a Location): this is the answer.
    Answer,
    /// Follow it with this request.
    Follow(Hop),
}

/// What `answer` (status and headers) to `hop` leads to.
///
/// - 301, 302, 303, 307 and 308 with a `Location` are redirects; the
///   Location is resolved against the hop's URL, its fragment dropped.
/// - 303 turns any method but HEAD into a GET without a body; 301 and 302
///   turn a POST into a GET without a body (curl's and browsers' habit); 307
///   and 308 keep the method and body. A method given with `-X` keeps its
///   name where the hop would become a GET (the body is still dropped).
/// - A hop to another origin (scheme, host or port) drops `Authorization`,
///   `Cookie` and `Proxy-Authorization`.
///
/// # Errors
/// A Location that is not a URL, or not an http(s) one.
pub fn next(hop: &Hop, status: StatusCode, headers: &HeaderMap) -> Result<Next, String> {
    next_with(hop, status, headers, Rules::default())
}

/// curl's switches that change [`next`]'s rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// `--location-trusted`: credentials go to other origins too.
    pub keep_credentials: bool,
    /// `--post301`, `--post302`, `--post303`: a POST stays a POST (with its
    /// body) on that status.
    pub keep_post: [bool; 3],
}

/// [`next`] with curl's switches.
///
/// # Errors
/// As [`next`].
pub fn next_with(hop: &Hop, status: StatusCode, headers: &HeaderMap, rules: Rules) -> Result<Next, String> {
    if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
        return Ok(Next::Answer);
    }
    let Some(location) = headers.get(LOCATION) else { return Ok(Next::Answer) };
    let location = String::from_utf8_lossy(location.as_bytes());
    let base = url::Url::parse(&hop.url).map_err(|e| format!("the URL {} cannot be a base: {e}", hop.url))?;
    let mut target = base
        .join(&location)
        .map_err(|e| format!("the redirect's Location {location:?} is not a URL: {e}"))?;
    if !matches!(target.scheme(), "http" | "https") {
        return Err(format!("the redirect goes to {target}, which is not an http or https URL"));
    }
    target.set_fragment(None);
    let posting = hop.method == Method::POST || (hop.method_forced && hop.posts_data);
    let becomes_get = match status.as_u16() {
        303 if posting && rules.keep_post[2] => false,
        303 => hop.method != Method::HEAD,
        301 => posting && !rules.keep_post[0],
        302 => posting && !rules.keep_post[1],
        _ => false,
    };
    let mut next = hop.clone();
    next.url = target.to_string();
    if becomes_get {
        if !hop.method_forced {
            next.method = Method::GET;
        }
        next.posts_data = false;
        next.body = None;
        next.headers.remove(CONTENT_TYPE);
        next.headers.remove(CONTENT_LENGTH);
    }
    if base.origin() != target.origin() && !rules.keep_credentials {
        for h in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
            next.headers.remove(h);
        }
    }
    Ok(Next::Follow(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(method: Method, url: &str) -> Hop {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, "Bearer t".parse().unwrap());
        headers.insert(COOKIE, "a=b".parse().unwrap());
        headers.insert(CONTENT_TYPE, "text/plain".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
        Hop {
            method,
            url: url.into(),
            headers,
            body: Some(Bytes::from_static(b"body")),
            method_forced: false,
            posts_data: true,
        }
    }

    fn to(location: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(LOCATION, location.parse().unwrap());
        h
    }

    fn follow(h: &Hop, status: u16, location: &str) -> Hop {
        match next(h, StatusCode::from_u16(status).unwrap(), &to(location)).unwrap() {
            Next::Follow(n) => n,
            Next::Answer => panic!("{status} {location} not followed"),
        }
    }

    #[test]
    fn methods_change_as_curl_does() {
        let post = hop(Method::POST, "http://a.test/x");
        for status in [301, 302, 303] {
            let n = follow(&post, status, "/y");
            assert_eq!(
                (n.method, n.body, n.url.as_str()),
                (Method::GET, None, "http://a.test/y"),
                "{status}"
            );
            assert!(!n.headers.contains_key(CONTENT_TYPE));
        }
        for status in [307, 308] {
            let n = follow(&post, status, "/y");
            assert_eq!((n.method, n.body.as_deref()), (Method::POST, Some(&b"body"[..])), "{status}");
        }
        let put = hop(Method::PUT, "http://a.test/x");
        assert_eq!(follow(&put, 302, "/y").method, Method::PUT);
        assert_eq!(follow(&put, 303, "/y").method, Method::GET);
        assert_eq!(follow(&hop(Method::HEAD, "http://a.test/"), 303, "/y").method, Method::HEAD);
        // -X POST: the name is kept, the body is not (curl's rule).
        let forced = Hop { method_forced: true, ..hop(Method::POST, "http://a.test/x") };
        for status in [301, 302, 303] {
            let n = follow(&forced, status, "/y");
            assert_eq!((n.method, n.body), (Method::POST, None), "{status}");
        }
        assert_eq!(follow(&forced, 307, "/y").body.as_deref(), Some(&b"body"[..]));
        // -X PUT -d: a form post to curl, so 302 drops the body too; -T's PUT keeps it.
        let put_form = Hop { method_forced: true, ..hop(Method::PUT, "http://a.test/x") };
        assert_eq!(follow(&put_form, 302, "/y").body, None);
        let upload = Hop { method_forced: false, posts_data: false, ..hop(Method::PUT, "http://a.test/x") };
        assert_eq!(follow(&upload, 302, "/y").body.as_deref(), Some(&b"body"[..]));
    }

    #[test]
    fn credentials_stay_on_their_origin() {
        let h = hop(Method::GET, "http://a.test:8080/x");
        let same = follow(&h, 302, "http://a.test:8080/z#frag");
        assert_eq!(same.url, "http://a.test:8080/z");
        assert!(same.headers.contains_key(AUTHORIZATION) && same.headers.contains_key(COOKIE));
        for other in ["http://b.test:8080/", "http://a.test:8081/", "https://a.test:8080/"] {
            let n = follow(&h, 302, other);
            assert!(!n.headers.contains_key(AUTHORIZATION) && !n.headers.contains_key(COOKIE), "{other}");
            assert!(n.headers.contains_key("x-kept"), "{other}");
        }
    }

    #[test]
    fn curls_switches_change_the_rules() {
        let post = hop(Method::POST, "http://a.test/x");
        let rules = Rules { keep_credentials: true, keep_post: [true, false, true] };
        let go = |status: u16| match next_with(
            &post,
            StatusCode::from_u16(status).unwrap(),
            &to("http://b.test/y"),
            rules,
        )
        .unwrap()
        {
            Next::Follow(n) => n,
            Next::Answer => panic!(),
        };
        assert_eq!((go(301).method, go(301).body.is_some()), (Method::POST, true));
        assert_eq!((go(302).method, go(302).body.is_some()), (Method::GET, false));
        assert_eq!(go(303).method, Method::POST);
        assert!(go(302).headers.contains_key(AUTHORIZATION) && go(302).headers.contains_key(COOKIE));
    }

    #[test]
    fn not_every_answer_is_a_redirect() {
        let h = hop(Method::GET, "http://a.test/");
        assert_eq!(next(&h, StatusCode::OK, &to("/y")).unwrap(), Next::Answer);
        assert_eq!(next(&h, StatusCode::FOUND, &HeaderMap::new()).unwrap(), Next::Answer);
        assert_eq!(next(&h, StatusCode::NOT_MODIFIED, &to("/y")).unwrap(), Next::Answer);
        assert!(next(&h, StatusCode::FOUND, &to("ftp://a.test/")).is_err());
        assert_eq!(follow(&h, 301, "../up?q=1").url, "http://a.test/up?q=1");
    }
}
