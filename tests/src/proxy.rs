//! Test proxies on loopback: an HTTP proxy (`CONNECT` tunnels, and absolute-form
//! requests forwarded with `Proxy-Authorization` removed) and a SOCKS5 proxy.
//! Either may require credentials (`*_with_auth`): Basic `Proxy-Authorization`
//! (a missing or wrong one is answered `407` with `Proxy-Authenticate`), or
//! RFC 1929 username/password. Both resolve names through a fixed map, count
//! what they did, record the credentials they were offered, and pipe bytes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running test proxy.
pub struct TestProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Tunnels or forwards opened, by target `host:port`.
    pub targets: Arc<std::sync::Mutex<Vec<String>>>,
    accepted: Arc<AtomicUsize>,
    /// Credentials offered, as the proxy saw them (`Proxy-Authorization`
    /// values, or `user:password` for SOCKS5), in order.
    offered: Arc<std::sync::Mutex<Vec<String>>>,
}

/// What the proxy requires and records.
struct Rules {
    hosts: BTreeMap<String, IpAddr>,
    /// Required credentials: (user, password).
    auth: Option<(String, String)>,
    offered: Arc<std::sync::Mutex<Vec<String>>>,
}

impl std::fmt::Debug for TestProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestProxy").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl TestProxy {
    /// An HTTP proxy.
    #[must_use]
    pub fn http(hosts: BTreeMap<String, IpAddr>) -> TestProxy {
        TestProxy::start(hosts, false, None)
    }
    /// A SOCKS5 proxy.
    #[must_use]
    pub fn socks5(hosts: BTreeMap<String, IpAddr>) -> TestProxy {
        TestProxy::start(hosts, true, None)
    }
    /// An HTTP proxy that requires Basic credentials `user:password`.
    #[must_use]
    pub fn http_with_auth(hosts: BTreeMap<String, IpAddr>, user: &str, password: &str) -> TestProxy {
        TestProxy::start(hosts, false, Some((user.to_owned(), password.to_owned())))
    }
    /// A SOCKS5 proxy that requires username/password (RFC 1929).
    #[must_use]
    pub fn socks5_with_auth(hosts: BTreeMap<String, IpAddr>, user: &str, password: &str) -> TestProxy {
        TestProxy::start(hosts, true, Some((user.to_owned(), password.to_owned())))
    }
    /// Credentials offered so far, in order.
    #[must_use]
    pub fn offered(&self) -> Vec<String> {
        self.offered.lock().map(|t| t.clone()).unwrap_or_default()
    }
    /// Connections accepted.
    #[must_use]
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
    /// Targets reached, in order.
    #[must_use]
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn start(hosts: BTreeMap<String, IpAddr>, socks: bool, auth: Option<(String, String)>) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let targets = Arc::new(std::sync::Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let offered = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (t, a) = (Arc::clone(&targets), Arc::clone(&accepted));
        let hosts = Arc::new(Rules { hosts, auth, offered: Arc::clone(&offered) });
        // The accept thread ends with the process (tests are short-lived).
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                a.fetch_add(1, Ordering::SeqCst);
                let (t, hosts) = (Arc::clone(&t), Arc::clone(&hosts));
                std::thread::spawn(move || {
                    let _ = if socks { socks5(client, &hosts, &t) } else { http(client, &hosts, &t) };
                });
            }
        });
        TestProxy { addr, targets, accepted, offered }
    }
}

fn resolve(hosts: &BTreeMap<String, IpAddr>, host: &str, port: u16) -> Option<SocketAddr> {
    let ip = host.parse::<IpAddr>().ok().or_else(|| hosts.get(host).copied())?;
    Some(SocketAddr::new(ip, port))
}

fn pipe(a: TcpStream, b: TcpStream) {
    let (mut a2, mut b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
    let up = std::thread::spawn(move || {
        let (mut a, mut b) = (a, b);
        let _ = std::io::copy(&mut a, &mut b);
        let _ = b.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut b2, &mut a2);
    let _ = a2.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

fn http(
    mut client: TcpStream,
    rules: &Rules,
    targets: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let hosts = &rules.hosts;
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    client.set_read_timeout(None)?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut words = text.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let offered = text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim().eq_ignore_ascii_case("proxy-authorization").then(|| value.trim().to_owned())
    });
    if let Some(o) = &offered {
        rules.offered.lock().map(|mut v| v.push(o.clone())).ok();
    }
    if let Some((user, password)) = &rules.auth {
        let expected = switchyard_core::ProxyCredentials::new(user.as_str(), password.as_str()).basic();
        if offered.as_deref() != Some(expected.as_str()) {
            return client.write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
    // A proxy's own header goes no further.
    let head: Vec<u8> = text
        .split_inclusive("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("proxy-authorization:"))
        .collect::<String>()
        .into_bytes();
    if method == "CONNECT" {
        let (host, port) = target.rsplit_once(':').unwrap_or((target, "443"));
        let Some(addr) = resolve(hosts, host, port.parse().unwrap_or(443)) else {
            return client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        };
        let upstream = TcpStream::connect(addr)?;
        targets.lock().map(|mut t| t.push(target.to_owned())).ok();
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")?;
        pipe(client, upstream);
        return Ok(());
    }
    // Absolute-form: forward the request as it is to the origin it names.
    let rest = target.split_once("://").map_or(target, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "80"));
    let Some(addr) = resolve(hosts, host, port.parse().unwrap_or(80)) else {
        return client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
    };
    let mut upstream = TcpStream::connect(addr)?;
    targets.lock().map(|mut t| t.push(format!("forward {authority}"))).ok();
    upstream.write_all(&head)?;
    pipe(client, upstream);
    Ok(())
}

fn socks5(
    mut client: TcpStream,
    rules: &Rules,
    targets: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let hosts = &rules.hosts;
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting)?;
    let mut methods = vec![0u8; usize::from(greeting[1])];
    client.read_exact(&mut methods)?;
    match &rules.auth {
        None if greeting[0] == 5 && methods.contains(&0) => client.write_all(&[5, 0])?,
        Some(_) if greeting[0] == 5 && methods.contains(&2) => {
            client.write_all(&[5, 2])?;
            // RFC 1929: version 1, user, password.
            let field = |client: &mut TcpStream| -> std::io::Result<String> {
                let mut len = [0u8; 1];
                client.read_exact(&mut len)?;
                let mut v = vec![0u8; usize::from(len[0])];
                client.read_exact(&mut v)?;
                Ok(String::from_utf8_lossy(&v).into_owned())
            };
            let mut version = [0u8; 1];
            client.read_exact(&mut version)?;
            let (user, password) = (field(&mut client)?, field(&mut client)?);
            rules.offered.lock().map(|mut v| v.push(format!("{user}:{password}"))).ok();
            let ok = rules.auth.as_ref().is_some_and(|(u, p)| *u == user && *p == password);
            if version[0] != 1 || !ok {
                return client.write_all(&[1, 1]);
            }
            client.write_all(&[1, 0])?;
        }
        _ => return client.write_all(&[5, 0xff]),
    }
    let mut req = [0u8; 4];
    client.read_exact(&mut req)?;
    let host = match req[3] {
        1 => {
            let mut ip = [0u8; 4];
            client.read_exact(&mut ip)?;
            IpAddr::from(ip).to_string()
        }
        4 => {
            let mut ip = [0u8; 16];
            client.read_exact(&mut ip)?;
            IpAddr::from(ip).to_string()
        }
        _ => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len)?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name)?;
            String::from_utf8_lossy(&name).into_owned()
        }
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port)?;
    let port = u16::from_be_bytes(port);
    let Some(addr) = resolve(hosts, &host, port) else {
        return client.write_all(&[5, 4, 0, 1, 0, 0, 0, 0, 0, 0]); // host unreachable
    };
    let Ok(upstream) = TcpStream::connect(addr) else {
        return client.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]); // refused
    };
    targets.lock().map(|mut t| t.push(format!("{host}:{port}"))).ok();
    client.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0])?;
    pipe(client, upstream);
    Ok(())
}
