//! The Manager's scenarios, run on every adapter (`manager_suite!`): `ready()`
//! opens the minimum before any request (the server counts the connections),
//! the first request opens nothing (events prove it), a restarted server is
//! re-warmed, an undeclared host is refused without a connection, and a server
//! that refuses connections is degraded, then down, with its error.

use std::net::TcpListener;
use std::time::Duration;

use switchyard_common::manager::ServerStatus;
use switchyard_common::{Error, EventLog};
use switchyard_core::{PoolStats, Readiness};

use crate::conformance::{eventually, EventRow, Failure, Resp};
use crate::server::{ServerOptions, TestServer};

/// A Manager as the suite drives it.
pub trait TestManager: Send + Sync {
    /// Waits for every minimum (the error's kind and text on failure).
    fn ready(&self) -> Result<(), Error>;
    /// `GET path` through `host`'s handle.
    fn get(&self, host: &str, path: &str) -> Result<Resp, (Failure, String)>;
    /// Asks for `host`'s handle: the error, if refused.
    fn refuses(&self, host: &str) -> Option<Error>;
    /// Every server's status.
    fn status(&self) -> Vec<ServerStatus>;
    /// The pool's stats.
    fn stats(&self) -> PoolStats;
    /// Every event so far.
    fn events(&self) -> Vec<EventRow>;
    /// Forgets recorded events.
    fn clear_events(&self);
    /// Shuts the Manager down.
    fn shutdown(&self);
}

/// An adapter that can make Managers.
pub trait ManagerAdapter {
    /// A Manager over `servers` (URL, minimum), with this ready timeout and
    /// events recorded into `log`.
    fn manager(
        &self,
        servers: &[(String, usize)],
        ready_timeout: Duration,
        log: &EventLog,
    ) -> Box<dyn TestManager>;
}

fn one(a: &dyn ManagerAdapter, url: &str, min: usize, ready_timeout: Duration) -> Box<dyn TestManager> {
    a.manager(&[(url.to_owned(), min)], ready_timeout, &EventLog::default())
}

/// `ready()` completes with the minimum open on the server side before any
/// request; the first request opens no connection; shutdown closes them.
pub fn manager_warm_before_the_first_request(a: &dyn ManagerAdapter) {
    let first = TestServer::start(ServerOptions::default());
    let second = TestServer::start(ServerOptions::default());
    let servers = [
        (format!("http://127.0.0.1:{}", first.port()), 2),
        (format!("http://localhost:{}", second.port()), 1),
    ];
    let log = EventLog::default();
    let m = a.manager(&servers, Duration::from_secs(10), &log);
    m.ready().expect("ready");
    eventually("the servers accept the warm connections", Duration::from_secs(5), || {
        first.connections() == 2 && second.connections() == 1
    });
    assert!(first.records().is_empty() && second.records().is_empty(), "no request was sent");
    let status = m.status();
    assert_eq!(
        status.iter().map(|s| (s.readiness, s.open)).collect::<Vec<_>>(),
        [(Readiness::Ready, 2), (Readiness::Ready, 1)]
    );
    m.clear_events();
    let r = m.get(&format!("127.0.0.1:{}", first.port()), "/hello").expect("get");
    assert_eq!(r.body, b"hello");
    let r = m.get("localhost", "/hello").expect("get by bare host");
    assert_eq!(r.body, b"hello");
    let events = m.events();
    assert!(!events.iter().any(|(_, n, _)| *n == "connect_start" || *n == "dns_start"), "{events:?}");
    let acquired: Vec<&EventRow> = events.iter().filter(|(_, n, _)| *n == "connection_acquired").collect();
    assert_eq!(acquired.len(), 2, "{events:?}");
    assert!(acquired.iter().all(|(_, _, d)| d.contains("Pooled")), "{acquired:?}");
    assert_eq!((first.connections(), second.connections()), (2, 1), "no new connection");
    assert_eq!(m.stats().created, 3);
    m.shutdown();
    assert!(m.status().iter().all(|s| s.readiness == Readiness::ShutDown));
    assert_eq!(m.stats().totals.open, 0, "shutdown closes the idle connections");
}

/// A server restarted on the same port is re-warmed: its connections close,
/// the Manager backs off while the port refuses, then reconnects.
pub fn manager_rewarms_a_restarted_server(a: &dyn ManagerAdapter) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = TestServer::start_on(listener, ServerOptions::default());
    let m = one(a, &format!("http://127.0.0.1:{port}"), 2, Duration::from_secs(20));
    m.ready().expect("ready");
    eventually("two warm connections", Duration::from_secs(5), || server.connections() == 2);
    drop(server); // its connections close
    eventually("the Manager sees the server gone", Duration::from_secs(10), || {
        m.status()[0].readiness != Readiness::Ready
    });
    // The old listener may take a moment to go: bind the same port again, bounded.
    let mut listener = None;
    eventually("the same port again", Duration::from_secs(10), || {
        listener = TcpListener::bind(("127.0.0.1", port)).ok();
        listener.is_some()
    });
    let listener = listener.expect("bound");
    let restarted = TestServer::start_on(listener, ServerOptions::default());
    eventually("re-warmed on the restarted server", Duration::from_secs(15), || {
        m.status()[0].readiness == Readiness::Ready && restarted.connections() == 2
    });
    let r = m.get(&format!("127.0.0.1:{port}"), "/hello").expect("get");
    assert_eq!(r.body, b"hello");
    let events = m.events();
    assert!(
        events.iter().any(|(_, n, d)| *n == "warm_readiness" && d.contains("degraded")),
        "readiness went through degraded: {events:?}"
    );
}

/// An undeclared host is a typed error, and no connection is opened for it.
pub fn manager_refuses_an_undeclared_host(a: &dyn ManagerAdapter) {
    let server = TestServer::start(ServerOptions::default());
    let m = one(a, &format!("http://127.0.0.1:{}", server.port()), 1, Duration::from_secs(10));
    m.ready().expect("ready");
    let before = m.stats().tcp_connects;
    for host in ["other.test", "127.0.0.2", &format!("127.0.0.1:{}", server.port() ^ 1)] {
        let e = m.refuses(host).unwrap_or_else(|| panic!("{host} was accepted"));
        assert!(matches!(e.kind(), switchyard_common::ErrorKind::NotDeclared { .. }), "{e:?}");
        assert!(e.to_string().contains(host) && e.to_string().contains("not a server"), "{e}");
    }
    // A URL to another server through a declared server's handle is refused too.
    let (kind, msg) =
        m.get(&format!("127.0.0.1:{}", server.port()), "http://other.test/x").expect_err("refused");
    assert!(msg.contains("other.test") && msg.contains("not a server"), "{kind:?}: {msg}");
    assert_eq!(m.stats().tcp_connects, before, "nothing was dialled");
}

/// A server that refuses connections is degraded (with the error and the next
/// retry), then down once the ready timeout passes; `ready()` fails naming it.
pub fn manager_reports_a_refusing_server_degraded_then_down(a: &dyn ManagerAdapter) {
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed); // nothing listens: connects are refused
    let url = format!("http://127.0.0.1:{port}");
    let m = one(a, &url, 1, Duration::from_millis(1500));
    eventually("degraded after the first refusal", Duration::from_secs(5), || {
        m.status()[0].readiness == Readiness::Degraded
    });
    let s = &m.status()[0];
    assert!(s.last_error.as_deref().is_some_and(|e| e.contains("refused")), "{s:?}");
    assert!(s.failures >= 1);
    let e = m.ready().expect_err("never ready");
    assert!(matches!(e.kind(), switchyard_common::ErrorKind::NotReady(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&url) && text.contains("refused"), "{text}");
    eventually("down after the ready timeout", Duration::from_secs(10), || {
        m.status()[0].readiness == Readiness::Down
    });
    // The event follows on the pool's timer.
    eventually("a warm_readiness event says down", Duration::from_secs(5), || {
        m.events().iter().any(|(_, n, d)| *n == "warm_readiness" && d.contains(": down (0/1 open)"))
    });
}

/// Lists the Manager scenarios for an adapter: `manager_suite!(Adapter)`.
#[macro_export]
macro_rules! manager_suite {
    ($adapter:expr) => {
        mod manager {
            use super::*;
            #[test]
            fn manager_warm_before_the_first_request() {
                $crate::manager::manager_warm_before_the_first_request(&$adapter);
            }
            #[test]
            fn manager_rewarms_a_restarted_server() {
                $crate::manager::manager_rewarms_a_restarted_server(&$adapter);
            }
            #[test]
            fn manager_refuses_an_undeclared_host() {
                $crate::manager::manager_refuses_an_undeclared_host(&$adapter);
            }
            #[test]
            fn manager_reports_a_refusing_server_degraded_then_down() {
                $crate::manager::manager_reports_a_refusing_server_degraded_then_down(&$adapter);
            }
        }
    };
}

/// Any async adapter's Manager as a [`TestManager`].
pub struct AsyncTestManager<R: switchyard_async::Runtime, E> {
    /// The Manager.
    pub manager: switchyard_async::Manager<R>,
    /// Its events.
    pub log: EventLog,
    /// How the test drives it.
    pub exec: E,
}

impl<R: switchyard_async::Runtime, E: crate::adapter::Executor> TestManager for AsyncTestManager<R, E> {
    fn ready(&self) -> Result<(), Error> {
        self.exec.block_on(self.manager.ready())
    }
    fn get(&self, host: &str, path: &str) -> Result<Resp, (Failure, String)> {
        let handle = self.manager.connection(host).map_err(|e| crate::adapter::failure(&e))?;
        self.exec.block_on(async {
            let mut response = handle.get(path).send().await.map_err(|e| crate::adapter::failure(&e))?;
            let status = response.status().as_u16();
            let body = response.body_mut().collect().await.map_err(|e| crate::adapter::failure(&e))?;
            Ok(Resp { status, version: response.version(), body: body.to_vec() })
        })
    }
    fn refuses(&self, host: &str) -> Option<Error> {
        self.manager.connection(host).err()
    }
    fn status(&self) -> Vec<ServerStatus> {
        self.manager.status()
    }
    fn stats(&self) -> PoolStats {
        self.manager.client().stats()
    }
    fn events(&self) -> Vec<EventRow> {
        crate::adapter::rows(&self.log)
    }
    fn clear_events(&self) {
        self.log.clear();
    }
    fn shutdown(&self) {
        self.exec.block_on(self.manager.shutdown());
    }
}
