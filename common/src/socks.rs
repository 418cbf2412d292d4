//! The SOCKS5 client handshake (RFC 1928) as bytes in, bytes out; no
//! authentication. The origin's name goes to the proxy unresolved, as
//! BEHAVIOUR §1 asks. Adapters do the reads and writes:
//!
//! 1. write [`GREETING`], read 2 bytes, [`check_choice`];
//! 2. write [`request`], read 4 bytes, [`reply`] says how many more to read and skip.

use switchyard_core::{Address, ConnectError, Host};

use crate::exchange::proxy_error;

/// Version 5, one method: "no authentication".
pub const GREETING: [u8; 3] = [5, 1, 0];

/// Checks the proxy's method choice.
///
/// # Errors
/// The proxy wants authentication or is not SOCKS5.
pub fn check_choice(choice: [u8; 2]) -> Result<(), ConnectError> {
    if choice == [5, 0] {
        Ok(())
    } else {
        Err(proxy_error(format!("the SOCKS5 proxy refused 'no authentication' (answered {choice:?})")))
    }
}

/// The CONNECT request for the Address: a domain name, or an IP literal.
///
/// # Errors
/// The host name is longer than SOCKS5 allows (255 bytes).
pub fn request(address: &Address) -> Result<Vec<u8>, ConnectError> {
    let mut request = vec![5, 1, 0];
    match address.host() {
        Host::Domain(name) => {
            let len =
                u8::try_from(name.len()).map_err(|_| proxy_error("host name too long for SOCKS5".into()))?;
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
    Ok(request)
}

/// What follows the reply's first 4 bytes (the bound address, to skip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    /// This many bytes.
    Bytes(usize),
    /// A domain: one length byte `n`, then `n + 2` bytes.
    Domain,
}

/// Checks the reply's first 4 bytes (version, status, reserved, address type).
///
/// # Errors
/// Not SOCKS5, the proxy could not connect (with its reason), or an unknown
/// address type.
pub fn reply(head: [u8; 4], address: &Address) -> Result<Rest, ConnectError> {
    if head[0] != 5 {
        return Err(proxy_error("not a SOCKS5 reply".into()));
    }
    if head[1] != 0 {
        let why = match head[1] {
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
        return Err(proxy_error(format!(
            "the SOCKS5 proxy could not reach {}:{}: {why}",
            address.host(),
            address.port()
        )));
    }
    match head[3] {
        1 => Ok(Rest::Bytes(4 + 2)),
        4 => Ok(Rest::Bytes(16 + 2)),
        3 => Ok(Rest::Domain),
        _ => Err(proxy_error("bad address type in the SOCKS5 reply".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(url: &str) -> Address {
        let uri: http::Uri = url.parse().unwrap();
        Address::from_uri(&uri).unwrap().build().unwrap()
    }

    #[test]
    fn request_carries_the_name_unresolved() {
        let r = request(&address("http://example.test:8080/")).unwrap();
        assert_eq!(&r[..5], &[5, 1, 0, 3, 12]);
        assert_eq!(&r[5..17], b"example.test");
        assert_eq!(&r[17..], &8080u16.to_be_bytes());
        let r = request(&address("http://127.0.0.1:80/")).unwrap();
        assert_eq!(r, [5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
    }

    #[test]
    fn replies_are_checked() {
        let a = address("http://example.test/");
        assert!(check_choice([5, 0]).is_ok());
        assert!(check_choice([5, 0xff]).is_err());
        assert_eq!(reply([5, 0, 0, 1], &a).unwrap(), Rest::Bytes(6));
        assert_eq!(reply([5, 0, 0, 3], &a).unwrap(), Rest::Domain);
        let refused = reply([5, 5, 0, 1], &a).unwrap_err().to_string();
        assert!(refused.contains("connection refused"), "{refused}");
        assert!(reply([4, 0, 0, 1], &a).is_err());
        assert!(reply([5, 0, 0, 9], &a).is_err());
    }
}
