//! The conformance suite and reliability matrix on switchyard-std, unchanged,
//! HTTP/2 scenarios included (the core's driver, pumped by a reader thread).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use switchyard_std::{Client, Error, EventLog};
use switchyard_tests::adapter;
use switchyard_tests::conformance::{Adapter, Config, EventRow, Failure, Req, Resp, TestClient};

struct StdAdapter;

struct StdClient {
    client: Client,
    log: EventLog,
}

fn request(client: &Client, req: &Req) -> switchyard_std::RequestBuilder {
    let mut builder = match req.method.as_str() {
        "POST" => client.post(&req.url),
        "PUT" => client.put(&req.url),
        "DELETE" => client.delete(&req.url),
        "HEAD" => client.head(&req.url),
        _ => client.get(&req.url),
    };
    if req.exclusive {
        builder = builder.exclusive();
    }
    for (n, v) in &req.headers {
        builder = builder.header(n, v);
    }
    builder
}

fn send(client: &Client, req: Req) -> Result<Resp, (Failure, String)> {
    let builder = request(client, &req);
    let result = (|| {
        let body = if req.streamed {
            switchyard_std::Body::from_reader(std::io::Cursor::new(req.body), None)
        } else {
            switchyard_std::Body::from(req.body)
        };
        let mut response = builder.body(body).send()?;
        let body = response.body_mut().collect()?;
        Ok::<_, Error>(Resp {
            status: response.status().as_u16(),
            version: response.version(),
            body: body.to_vec(),
        })
    })();
    result.map_err(|e| adapter::failure(&e))
}

impl TestClient for StdClient {
    fn send(&self, req: Req) -> Result<Resp, (Failure, String)> {
        send(&self.client, req)
    }
    fn hold(&self, req: Req) -> Result<(u16, Box<dyn std::any::Any>), (Failure, String)> {
        let response = request(&self.client, &req).body(req.body).send().map_err(|e| adapter::failure(&e))?;
        Ok((response.status().as_u16(), Box::new(response)))
    }
    /// One thread per request, all at once.
    fn send_all(&self, reqs: Vec<Req>) -> Vec<Result<Resp, (Failure, String)>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = reqs.into_iter().map(|r| s.spawn(|| send(&self.client, r))).collect();
            handles.into_iter().map(|h| h.join().expect("call thread")).collect()
        })
    }
    fn stats(&self) -> switchyard_core::PoolStats {
        self.client.stats()
    }
    fn events(&self) -> Vec<EventRow> {
        adapter::rows(&self.log)
    }
    fn clear_events(&self) {
        self.log.clear();
    }
    fn evict(&self) {
        self.client.evict_idle();
    }
    fn addresses(&self) -> usize {
        self.client.stats_by_address().len()
    }
    fn shutdown(&self, grace: std::time::Duration) -> switchyard_std::ShutdownReport {
        self.client.shutdown(grace)
    }
}

impl Adapter for StdAdapter {
    fn name(&self) -> &'static str {
        "std"
    }
    fn client(&self, config: Config) -> Box<dyn TestClient> {
        let log = EventLog::default();
        let client = adapter::builder::<Client>(config, &log).build().expect("client");
        Box::new(StdClient { client, log })
    }
}

switchyard_tests::conformance_suite!(StdAdapter);
switchyard_tests::reliability_matrix!(StdAdapter);
switchyard_tests::hostile_suite!(StdAdapter);
switchyard_tests::found_suite!(StdAdapter);
switchyard_tests::churn_suite!(StdAdapter);
switchyard_tests::interop_suite!(StdAdapter);

#[test]
fn load_10000_calls_1000_at_a_time_through_a_cap_of_16() {
    let peak = switchyard_tests::reliability::load(&StdAdapter);
    eprintln!("std load: 10 000 calls ok; peak RSS {peak:?} KiB");
}

#[test]
fn the_resident_set_does_not_grow_over_10000_calls() {
    let growth = switchyard_tests::reliability::no_leak(&StdAdapter);
    eprintln!("resident set growth per 1 000 calls (median): {growth} KiB");
}

#[test]
fn mixed_faults_every_call_accounted_for() {
    let (ok, failed) = switchyard_tests::reliability::mixed(&StdAdapter, 0x5eed);
    eprintln!("std mixed: {ok} ok, {failed} typed errors");
    assert!(ok > 0 && failed > 0);
}

// ---------------------------------------------------------------------------
// The Manager, blocking.

struct StdManagers;

struct StdManager {
    manager: switchyard_std::Manager,
    log: EventLog,
}

impl switchyard_tests::manager::TestManager for StdManager {
    fn ready(&self) -> Result<(), Error> {
        self.manager.ready()
    }
    fn get(&self, host: &str, path: &str) -> Result<Resp, (Failure, String)> {
        let handle = self.manager.connection(host).map_err(|e| adapter::failure(&e))?;
        let result = (|| {
            let mut response = handle.get(path).send()?;
            let body = response.body_mut().collect()?;
            Ok::<_, Error>(Resp {
                status: response.status().as_u16(),
                version: response.version(),
                body: body.to_vec(),
            })
        })();
        result.map_err(|e| adapter::failure(&e))
    }
    fn refuses(&self, host: &str) -> Option<Error> {
        self.manager.connection(host).err()
    }
    fn status(&self) -> Vec<switchyard_std::ServerStatus> {
        self.manager.status()
    }
    fn stats(&self) -> switchyard_std::PoolStats {
        self.manager.client().stats()
    }
    fn events(&self) -> Vec<EventRow> {
        adapter::rows(&self.log)
    }
    fn clear_events(&self) {
        self.log.clear();
    }
    fn shutdown(&self) {
        self.manager.shutdown();
    }
}

impl switchyard_tests::manager::ManagerAdapter for StdManagers {
    fn manager(
        &self,
        servers: &[(String, usize)],
        ready_timeout: std::time::Duration,
        log: &EventLog,
    ) -> Box<dyn switchyard_tests::manager::TestManager> {
        let mut b = switchyard_std::Manager::builder()
            .ready_timeout(ready_timeout)
            .client(|c| c.event_listener(log.clone()).connect_timeout(std::time::Duration::from_secs(2)));
        for (url, min) in servers {
            b = b.server(url, *min);
        }
        Box::new(StdManager { manager: b.build().expect("manager"), log: log.clone() })
    }
}

switchyard_tests::manager_suite!(StdManagers);
