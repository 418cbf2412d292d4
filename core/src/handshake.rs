//! The proxy handshakes a route may need before TLS, as sans-IO state machines
//! with one shape: an HTTP `CONNECT` tunnel (RFC 9110 §9.3.6; with Basic
//! `Proxy-Authorization` when the proxy has credentials) and a SOCKS5
//! `CONNECT` (RFC 1928; the origin's name goes to the proxy unresolved,
//! BEHAVIOUR §1), offering username/password authentication (RFC 1929) when
//! the proxy has credentials. [`ProxyHandshake::for_route`] picks the one a
//! route needs. A proxy that asks for authentication (407, or SOCKS5 refusing
//! every method offered) is [`ConnectError::ProxyAuth`], naming the proxy;
//! credentials are never retried blindly, and never appear in an error.
//!
//! An embedder writes what [`ProxyHandshake::poll_transmit`] returns, reads what the
//! proxy sends into a buffer and feeds it to [`ProxyHandshake::handle_read`],
//! until that says [`Handshake::Done`]. The machine never consumes bytes beyond
//! the proxy's answer, and refuses any: after the handshake the client speaks
//! first (TLS), so bytes there mean a confused or hostile proxy.
//!
//! ```
//! use bytes::BytesMut;
//! # use switchyard_core::handshake::{Handshake, ProxyHandshake};
//! # use switchyard_core::Address;
//!
//! let address = Address::from_uri(&"https://example.test/".parse()?)?.build()?;
//! let mut socks = ProxyHandshake::socks5(&address)?;
//! assert_eq!(socks.poll_transmit(), Some(vec![5, 1, 0])); // version 5, "no authentication"
//! let mut buf = BytesMut::from(&[5u8, 0][..]); // the proxy accepts
//! assert_eq!(socks.handle_read(&mut buf, false)?, Handshake::NeedMore);
//! let request = socks.poll_transmit().unwrap(); // CONNECT example.test:443, by name
//! assert_eq!(&request[..5], &[5, 1, 0, 3, 12]);
//! buf.extend_from_slice(&[5, 0, 0, 1, 10, 0, 0, 1, 0x1f, 0x90]); // succeeded, bound 10.0.0.1:8080
//! assert_eq!(socks.handle_read(&mut buf, false)?, Handshake::Done);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use bytes::{Buf, BytesMut};

use crate::address::{Address, Host, ProxyCredentials};
use crate::error::ConnectError;
use crate::http1::{Exchange, Frame, RequestBody, TargetForm};
use crate::route::Route;

/// Where a handshake stands after the bytes fed so far.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Handshake {
    /// More of the proxy's answer is needed (write [`ProxyHandshake::poll_transmit`]
    /// first, if it has something).
    NeedMore,
    /// The tunnel is open: the connection now reaches the Address.
    Done,
}

#[derive(Debug)]
enum State {
    /// CONNECT sent; decoding the proxy's response head.
    Tunnel {
        ex: Box<Exchange>,
    },
    /// SOCKS5 greeting sent; the method choice (2 bytes) is awaited.
    SocksChoice {
        request: Vec<u8>,
        credentials: Option<ProxyCredentials>,
    },
    /// RFC 1929 username/password sent; its status (2 bytes) is awaited.
    SocksAuth {
        request: Vec<u8>,
    },
    /// SOCKS5 request sent; the reply is awaited.
    SocksReply,
    Done,
}

/// One proxy handshake to an Address. See the [module docs](self).
#[derive(Debug)]
pub struct ProxyHandshake {
    state: State,
    out: Option<Vec<u8>>,
    authority: String,
    /// The proxy (its URL, never its credentials), for errors.
    proxy: String,
    /// Credentials were offered.
    authenticated: bool,
}

fn proxy_error(message: String) -> ConnectError {
    ConnectError::Proxy { message }
}

impl ProxyHandshake {
    /// The handshake `route` needs through its proxy before TLS: a SOCKS5
    /// `CONNECT`, an HTTP `CONNECT` tunnel (https origins through an HTTP
    /// proxy), or none (direct, or an http origin sent in absolute form).
    /// The proxy's credentials, if any, are used.
    ///
    /// # Errors
    /// As [`ProxyHandshake::connect_tunnel`] and [`ProxyHandshake::socks5`].
    pub fn for_route(route: &Route) -> Result<Option<ProxyHandshake>, ConnectError> {
        let credentials = route.proxy().credentials();
        let mut hs = if route.requires_socks5() {
            ProxyHandshake::socks5_with(route.address(), route.target(), credentials)?
        } else if route.requires_tunnel() {
            ProxyHandshake::tunnel_with(route.address(), credentials)?
        } else {
            return Ok(None);
        };
        hs.proxy = route.proxy().to_string();
        Ok(Some(hs))
    }

    /// An HTTP `CONNECT` tunnel to the Address through an HTTP proxy, without
    /// credentials.
    ///
    /// # Errors
    /// [`ConnectError::Proxy`] if the authority cannot form a request.
    pub fn connect_tunnel(address: &Address) -> Result<ProxyHandshake, ConnectError> {
        ProxyHandshake::tunnel_with(address, None)
    }

    fn tunnel_with(
        address: &Address,
        credentials: Option<&ProxyCredentials>,
    ) -> Result<ProxyHandshake, ConnectError> {
        let authority = format!("{}:{}", address.host(), address.port());
        let mut req = http::Request::connect(authority.as_str());
        if let Some(c) = credentials {
            let mut value = http::HeaderValue::try_from(c.basic())
                .map_err(|_| proxy_error("the proxy credentials cannot form a header".into()))?;
            value.set_sensitive(true);
            req = req.header(http::header::PROXY_AUTHORIZATION, value);
        }
        let req = req.body(()).map_err(|e| proxy_error(format!("cannot build CONNECT request: {e}")))?;
        let (parts, ()) = req.into_parts();
        let (ex, head) = Exchange::new(&parts, TargetForm::Authority, RequestBody::None, Default::default())
            .map_err(|e| proxy_error(e.to_string()))?;
        Ok(ProxyHandshake {
            state: State::Tunnel { ex: Box::new(ex) },
            out: Some(head),
            authority,
            proxy: "HTTP proxy".into(),
            authenticated: credentials.is_some(),
        })
    }

    /// A SOCKS5 `CONNECT` to the Address (a name goes unresolved; IP literals as
    /// addresses), offering only "no authentication".
    ///
    /// # Errors
    /// [`ConnectError::Proxy`] if the host name is longer than SOCKS5 allows (255 bytes).
    pub fn socks5(address: &Address) -> Result<ProxyHandshake, ConnectError> {
        ProxyHandshake::socks5_with(address, None, None)
    }

    /// `target`: the origin address to ask for instead of its name (a
    /// `socks5://` route; the client resolved it).
    fn socks5_with(
        address: &Address,
        target: Option<std::net::IpAddr>,
        credentials: Option<&ProxyCredentials>,
    ) -> Result<ProxyHandshake, ConnectError> {
        let mut request = vec![5, 1, 0];
        let host = target.map_or_else(|| address.host().clone(), Host::Ip);
        match &host {
            Host::Domain(name) => {
                let len = u8::try_from(name.len())
                    .map_err(|_| proxy_error("host name too long for SOCKS5".into()))?;
                request.push(3);
                request.push(len);
                request.extend_from_slice(name.as_bytes());
            }
            Host::Ip(std::net::IpAddr::V4(ip)) => {
                request.push(1);
                request.extend_from_slice(&ip.octets());
            }
            Host::Ip(std::net::IpAddr::V6(ip)) => {
                request.push(4);
                request.extend_from_slice(&ip.octets());
            }
        }
        request.extend_from_slice(&address.port().to_be_bytes());
        // With credentials: offer "no authentication" and username/password.
        let greeting = if credentials.is_some() { vec![5, 2, 0, 2] } else { vec![5, 1, 0] };
        Ok(ProxyHandshake {
            state: State::SocksChoice { request, credentials: credentials.cloned() },
            out: Some(greeting),
            // The address asked for, and the origin's name when they differ.
            authority: match target {
                Some(ip) if address.host().ip() != Some(ip) => {
                    format!("{} ({})", std::net::SocketAddr::new(ip, address.port()), address.host())
                }
                _ => format!("{}:{}", address.host(), address.port()),
            },
            proxy: "SOCKS5 proxy".into(),
            authenticated: credentials.is_some(),
        })
    }

    fn auth_error(&self) -> ConnectError {
        ConnectError::ProxyAuth { proxy: self.proxy.clone(), credentials_refused: self.authenticated }
    }

    /// Bytes to write to the proxy now, if any. Write them whole before reading.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.take()
    }

    /// Whether [`ProxyHandshake::poll_transmit`] has bytes waiting.
    #[must_use]
    pub fn wants_write(&self) -> bool {
        self.out.is_some()
    }

    /// Whether the tunnel is open.
    #[must_use]
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Feeds what the proxy sent (`eof`: it closed its side), consuming what the
    /// handshake uses.
    ///
    /// # Errors
    /// [`ConnectError::Proxy`]: the proxy refused (with its status or SOCKS5
    /// reason), answered something else, closed early, or sent bytes past its
    /// answer. Errors leave the machine unusable; the embedder closes the socket.
    pub fn handle_read(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Handshake, ConnectError> {
        loop {
            match &mut self.state {
                State::Done => {
                    if !buf.is_empty() {
                        return Err(proxy_error("the proxy sent bytes before the tunnel was used".into()));
                    }
                    return Ok(Handshake::Done);
                }
                State::Tunnel { ex } => match ex.decode(buf, eof) {
                    Ok(Some(Frame::Head(r))) if r.status().is_success() => self.state = State::Done,
                    Ok(Some(Frame::Head(r)))
                        if r.status() == http::StatusCode::PROXY_AUTHENTICATION_REQUIRED =>
                    {
                        return Err(self.auth_error())
                    }
                    Ok(Some(Frame::Head(r))) => {
                        return Err(ConnectError::TunnelRefused {
                            authority: self.authority.clone(),
                            status: r.status(),
                        })
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return Ok(Handshake::NeedMore),
                    Err(e) => return Err(proxy_error(format!("bad CONNECT response: {e}"))),
                },
                State::SocksChoice { request, credentials } => {
                    if buf.len() < 2 {
                        return self.need_more(eof);
                    }
                    let choice = [buf[0], buf[1]];
                    match (choice, credentials.take()) {
                        ([5, 0], _) => {
                            buf.advance(2);
                            self.out = Some(std::mem::take(request));
                            self.state = State::SocksReply;
                        }
                        ([5, 2], Some(c)) => {
                            buf.advance(2);
                            let (user, password) = (c.user().as_bytes(), c.password().as_bytes());
                            let (Ok(ulen), Ok(plen)) =
                                (u8::try_from(user.len()), u8::try_from(password.len()))
                            else {
                                return Err(proxy_error(
                                    "the SOCKS5 user name or password is longer than 255 bytes".into(),
                                ));
                            };
                            // RFC 1929 §2: version 1, then each field with its length.
                            let mut auth = vec![1, ulen];
                            auth.extend_from_slice(user);
                            auth.push(plen);
                            auth.extend_from_slice(password);
                            self.out = Some(auth);
                            self.state = State::SocksAuth { request: std::mem::take(request) };
                        }
                        ([5, 0xff], _) => return Err(self.auth_error()),
                        (other, _) => {
                            return Err(proxy_error(format!(
                                "the SOCKS5 proxy chose no method offered (answered {:#04x} {:#04x})",
                                other[0], other[1]
                            )))
                        }
                    }
                    return Ok(Handshake::NeedMore);
                }
                State::SocksAuth { request } => {
                    if buf.len() < 2 {
                        return self.need_more(eof);
                    }
                    let status = [buf[0], buf[1]];
                    buf.advance(2);
                    if status[1] != 0 {
                        return Err(self.auth_error());
                    }
                    self.out = Some(std::mem::take(request));
                    self.state = State::SocksReply;
                    return Ok(Handshake::NeedMore);
                }
                State::SocksReply => {
                    let Some(len) = self.socks_reply_len(buf)? else { return self.need_more(eof) };
                    buf.advance(len);
                    self.state = State::Done;
                }
            }
        }
    }

    fn need_more(&self, eof: bool) -> Result<Handshake, ConnectError> {
        if eof {
            Err(proxy_error("the proxy closed the connection during the handshake".into()))
        } else {
            Ok(Handshake::NeedMore)
        }
    }

    /// The whole SOCKS5 reply's length once it is all in `buf` (`None`: more is
    /// needed), after checking its status.
    fn socks_reply_len(&self, buf: &[u8]) -> Result<Option<usize>, ConnectError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        if buf[0] != 5 {
            return Err(proxy_error("not a SOCKS5 reply".into()));
        }
        if buf[1] != 0 {
            let why = match buf[1] {
                1 => "general failure",
                2 => "connection not allowed by ruleset",
                3 => "network unreachable",
                4 => "host unreachable",
                5 => "connection refused",
                6 => "TTL expired",
                7 => "command not supported",
                8 => "address type not supported",
                _ => "unknown error",
            };
            return Err(proxy_error(format!("the SOCKS5 proxy could not reach {}: {why}", self.authority)));
        }
        // Version, status, reserved, address type; the bound address; its port.
        let len = match buf[3] {
            1 => 4 + 4 + 2,
            4 => 4 + 16 + 2,
            3 => match buf.get(4) {
                Some(n) => 4 + 1 + usize::from(*n) + 2,
                None => return Ok(None),
            },
            _ => return Err(proxy_error("bad address type in the SOCKS5 reply".into())),
        };
        Ok((buf.len() >= len).then_some(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(url: &str) -> Address {
        let uri: http::Uri = url.parse().unwrap();
        Address::from_uri(&uri).unwrap().build().unwrap()
    }

    /// Feeds `answer` one byte at a time, writing nothing back; the result.
    fn feed(hs: &mut ProxyHandshake, answer: &[u8]) -> Result<Handshake, ConnectError> {
        let mut buf = BytesMut::new();
        let mut last = hs.handle_read(&mut buf, false)?;
        for b in answer {
            let _ = hs.poll_transmit();
            buf.extend_from_slice(&[*b]);
            last = hs.handle_read(&mut buf, false)?;
        }
        Ok(last)
    }

    #[test]
    fn socks5_request_carries_the_name_unresolved_or_the_ip() {
        let mut hs = ProxyHandshake::socks5(&address("http://example.test:8080/")).unwrap();
        assert_eq!(hs.poll_transmit(), Some(vec![5, 1, 0]));
        assert_eq!(hs.poll_transmit(), None);
        assert_eq!(hs.handle_read(&mut BytesMut::from(&[5u8, 0][..]), false).unwrap(), Handshake::NeedMore);
        let r = hs.poll_transmit().unwrap();
        assert_eq!(&r[..5], &[5, 1, 0, 3, 12]);
        assert_eq!(&r[5..17], b"example.test");
        assert_eq!(&r[17..], &8080u16.to_be_bytes());
        let mut hs = ProxyHandshake::socks5(&address("http://127.0.0.1:80/")).unwrap();
        let _ = hs.poll_transmit();
        hs.handle_read(&mut BytesMut::from(&[5u8, 0][..]), false).unwrap();
        assert_eq!(hs.poll_transmit(), Some(vec![5, 1, 0, 1, 127, 0, 0, 1, 0, 80]));
    }

    #[test]
    fn socks5_route_with_a_target_asks_for_the_address_socks5h_for_the_name() {
        let a = address("http://example.test:8080/");
        let local = Route::new(
            a.clone(),
            crate::Proxy::socks5("10.0.0.2", 1080).unwrap(),
            "10.0.0.2:1080".parse().unwrap(),
        );
        for (target, atyp, tail) in [
            ("10.1.2.3", 1u8, vec![10u8, 1, 2, 3]),
            ("fd00::7", 4, {
                let mut v = vec![0xfd, 0];
                v.extend([0; 13]);
                v.push(7);
                v
            }),
        ] {
            let route = local.clone().with_target(target.parse().unwrap());
            let mut hs = ProxyHandshake::for_route(&route).unwrap().unwrap();
            assert_eq!(hs.poll_transmit().unwrap(), [5, 1, 0]);
            let mut buf = BytesMut::from(&[5u8, 0][..]);
            hs.handle_read(&mut buf, false).unwrap();
            let request = hs.poll_transmit().unwrap();
            let mut expected = vec![5, 1, 0, atyp];
            expected.extend(tail);
            expected.extend(8080u16.to_be_bytes());
            assert_eq!(request, expected, "{target}");
        }
        let remote =
            Route::new(a, crate::Proxy::socks5h("10.0.0.2", 1080).unwrap(), "10.0.0.2:1080".parse().unwrap());
        let mut hs = ProxyHandshake::for_route(&remote).unwrap().unwrap();
        hs.poll_transmit();
        let mut buf = BytesMut::from(&[5u8, 0][..]);
        hs.handle_read(&mut buf, false).unwrap();
        let request = hs.poll_transmit().unwrap();
        assert_eq!(&request[3..5], &[3, 12], "address type 3, then the name's length");
        assert_eq!(&request[5..17], b"example.test");
    }

    #[test]
    fn socks5_replies_of_every_address_type_byte_by_byte() {
        let a = address("http://example.test/");
        for reply in [
            vec![5, 0, 0, 1, 10, 0, 0, 1, 0, 80],
            [vec![5, 0, 0, 4], vec![0; 16], vec![0, 80]].concat(),
            [vec![5, 0, 0, 3, 3], b"abc".to_vec(), vec![0, 80]].concat(),
        ] {
            let mut hs = ProxyHandshake::socks5(&a).unwrap();
            let answer = [vec![5, 0], reply.clone()].concat();
            assert_eq!(feed(&mut hs, &answer).unwrap(), Handshake::Done, "{reply:?}");
            assert!(hs.is_done());
            // One byte short: not done.
            let mut hs = ProxyHandshake::socks5(&a).unwrap();
            assert_eq!(feed(&mut hs, &answer[..answer.len() - 1]).unwrap(), Handshake::NeedMore);
        }
    }

    #[test]
    fn socks5_refusals_and_garbage_are_typed() {
        let a = address("http://example.test/");
        let err = |answer: &[u8]| {
            let mut hs = ProxyHandshake::socks5(&a).unwrap();
            feed(&mut hs, answer).unwrap_err().to_string()
        };
        assert!(err(&[5, 0xff]).contains("the SOCKS5 proxy requires authentication"), "{}", err(&[5, 0xff]));
        assert!(err(&[5, 2]).contains("chose no method offered"), "{}", err(&[5, 2]));
        assert!(err(&[5, 0, 5, 5, 0, 1]).contains("connection refused"));
        assert!(err(&[5, 0, 4, 0, 0, 1]).contains("not a SOCKS5 reply"));
        assert!(err(&[5, 0, 5, 0, 0, 9]).contains("bad address type"));
        assert!(err(&[5, 0, 5, 0, 0, 1, 1, 2, 3, 4, 0, 80, 0x16]).contains("bytes before the tunnel"));
        let mut hs = ProxyHandshake::socks5(&a).unwrap();
        let closed = hs.handle_read(&mut BytesMut::from(&[5u8][..]), true).unwrap_err();
        assert!(closed.to_string().contains("closed"), "{closed}");
    }

    #[test]
    fn connect_tunnel_opens_on_2xx_and_refuses_otherwise() {
        let a = address("https://example.test/");
        let mut hs = ProxyHandshake::connect_tunnel(&a).unwrap();
        let head = hs.poll_transmit().unwrap();
        assert!(
            head.starts_with(b"CONNECT example.test:443 HTTP/1.1\r\n"),
            "{:?}",
            String::from_utf8_lossy(&head)
        );
        assert_eq!(feed(&mut hs, b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap(), Handshake::Done);
        let mut hs = ProxyHandshake::connect_tunnel(&a).unwrap();
        let e = feed(&mut hs, b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").unwrap_err();
        assert!(matches!(e, ConnectError::ProxyAuth { credentials_refused: false, .. }), "{e}");
        let mut hs = ProxyHandshake::connect_tunnel(&a).unwrap();
        let e = feed(&mut hs, b"HTTP/1.1 403 Forbidden\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("refused the tunnel to example.test:443: 403"), "{e}");
        assert!(
            matches!(&e, ConnectError::TunnelRefused { authority, status } if authority == "example.test:443" && status.as_u16() == 403),
            "{e:?}"
        );
        let mut hs = ProxyHandshake::connect_tunnel(&a).unwrap();
        let e = feed(&mut hs, b"HTTP/1.1 200 OK\r\n\r\nsurprise").unwrap_err();
        assert!(e.to_string().contains("bytes before the tunnel"), "{e}");
    }

    fn route(url: &str, proxy: crate::Proxy) -> Route {
        let addr = proxy.endpoint().map(|(h, p)| format!("{h}:{p}")).unwrap_or_default();
        Route::new(address(url), proxy, addr.parse().unwrap())
    }

    #[test]
    fn a_tunnel_with_credentials_sends_basic_and_a_407_names_the_proxy() {
        let creds = crate::ProxyCredentials::new("ann", "s3cret");
        let p = crate::Proxy::http("10.0.0.1", 3128).unwrap().with_credentials(creds.clone());
        let mut hs = ProxyHandshake::for_route(&route("https://example.test/", p.clone())).unwrap().unwrap();
        let head = String::from_utf8(hs.poll_transmit().unwrap()).unwrap();
        assert!(head.contains(&format!("proxy-authorization: {}\r\n", creds.basic())), "{head}");
        assert_eq!(creds.basic(), "Basic YW5uOnMzY3JldA==");
        let e = feed(&mut hs, b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").unwrap_err();
        assert_eq!(
            e,
            ConnectError::ProxyAuth { proxy: "http://10.0.0.1:3128".into(), credentials_refused: true }
        );
        assert!(
            !e.to_string().contains("s3cret") && e.to_string().contains("refused the credentials"),
            "{e}"
        );
        // Without credentials: no header, and the 407 says none are configured.
        let bare = crate::Proxy::http("10.0.0.1", 3128).unwrap();
        let mut hs = ProxyHandshake::for_route(&route("https://example.test/", bare)).unwrap().unwrap();
        let head = String::from_utf8(hs.poll_transmit().unwrap()).unwrap();
        assert!(!head.to_ascii_lowercase().contains("proxy-authorization"), "{head}");
        let e = feed(&mut hs, b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("requires authentication"), "{e}");
        // An http origin through an HTTP proxy needs no handshake (absolute form).
        assert!(ProxyHandshake::for_route(&route("http://example.test/", p)).unwrap().is_none());
    }

    #[test]
    fn socks5_username_password_follows_rfc_1929() {
        let creds = crate::ProxyCredentials::new("bob", "pw");
        let p = crate::Proxy::socks5("10.0.0.2", 1080).unwrap().with_credentials(creds);
        let start =
            || ProxyHandshake::for_route(&route("https://example.test/", p.clone())).unwrap().unwrap();
        let mut hs = start();
        assert_eq!(hs.poll_transmit(), Some(vec![5, 2, 0, 2]), "offers none and username/password");
        assert_eq!(feed(&mut hs, &[5, 2]).unwrap(), Handshake::NeedMore);
        assert_eq!(hs.poll_transmit(), Some(vec![1, 3, b'b', b'o', b'b', 2, b'p', b'w']));
        assert_eq!(feed(&mut hs, &[1, 0]).unwrap(), Handshake::NeedMore);
        let request = hs.poll_transmit().unwrap();
        assert_eq!(&request[..4], &[5, 1, 0, 3], "then CONNECT by name");
        assert_eq!(feed(&mut hs, &[5, 0, 0, 1, 10, 0, 0, 1, 0, 80]).unwrap(), Handshake::Done);
        // Refused credentials, and a proxy refusing every method.
        let mut hs = start();
        let _ = hs.poll_transmit();
        feed(&mut hs, &[5, 2]).unwrap();
        let _ = hs.poll_transmit();
        let e = feed(&mut hs, &[1, 1]).unwrap_err();
        assert_eq!(
            e,
            ConnectError::ProxyAuth { proxy: "socks5://10.0.0.2:1080".into(), credentials_refused: true }
        );
        let mut hs = start();
        let _ = hs.poll_transmit();
        assert!(matches!(feed(&mut hs, &[5, 0xff]), Err(ConnectError::ProxyAuth { .. })));
        // The proxy may still choose "no authentication".
        let mut hs = start();
        let _ = hs.poll_transmit();
        assert_eq!(feed(&mut hs, &[5, 0]).unwrap(), Handshake::NeedMore);
        assert_eq!(&hs.poll_transmit().unwrap()[..2], &[5, 1]);
    }
}
