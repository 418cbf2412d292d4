//! The SOCKS5 client handshake (RFC 1928), no authentication: the origin's name
//! goes to the proxy unresolved, as BEHAVIOUR §1 asks.

use switchyard_core::{Address, ConnectError, Host};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::driver::Io;

fn proxy_error(message: impl Into<String>) -> ConnectError {
    ConnectError::Proxy { message: message.into() }
}

/// Asks the SOCKS5 proxy on `io` to connect to the Address.
pub(crate) async fn connect(mut io: Io, address: &Address) -> Result<Io, ConnectError> {
    let io_err = |e: std::io::Error| ConnectError::from_io(&e);
    // Greeting: version 5, one method, "no authentication".
    io.write_all(&[5, 1, 0]).await.map_err(io_err)?;
    let mut choice = [0u8; 2];
    io.read_exact(&mut choice).await.map_err(io_err)?;
    if choice != [5, 0] {
        return Err(proxy_error(format!(
            "the SOCKS5 proxy refused 'no authentication' (answered {choice:?})"
        )));
    }
    // CONNECT to the origin: a domain name, or an IP literal.
    let mut request = vec![5, 1, 0];
    match address.host() {
        Host::Domain(name) => {
            let len = u8::try_from(name.len()).map_err(|_| proxy_error("host name too long for SOCKS5"))?;
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
    io.write_all(&request).await.map_err(io_err)?;
    // Reply: version, status, reserved, bound address (skipped).
    let mut head = [0u8; 4];
    io.read_exact(&mut head).await.map_err(io_err)?;
    if head[0] != 5 {
        return Err(proxy_error("not a SOCKS5 reply"));
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
    let skip = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut len = [0u8; 1];
            io.read_exact(&mut len).await.map_err(io_err)?;
            usize::from(len[0]) + 2
        }
        _ => return Err(proxy_error("bad address type in the SOCKS5 reply")),
    };
    let mut bound = vec![0u8; skip];
    io.read_exact(&mut bound).await.map_err(io_err)?;
    Ok(io)
}
