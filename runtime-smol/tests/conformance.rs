//! The conformance suite and reliability matrix on switchyard-smol, unchanged;
//! and the suite again driven from async-std, for programs written against it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::pin::Pin;

use switchyard_smol::{Client, EventLog};
use switchyard_tests::adapter::{self, AsyncTestClient, Executor};
use switchyard_tests::conformance::{Adapter, Config, TestClient};

/// Calls block on `smol::block_on`; concurrent calls are tasks on smol's
/// global executor.
struct OnSmol;

impl Executor for OnSmol {
    fn block_on<T>(&self, f: impl Future<Output = T>) -> T {
        smol::block_on(f)
    }
    fn spawn<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> Pin<Box<dyn Future<Output = T> + Send>> {
        Box::pin(smol::spawn(f))
    }
}

struct SmolAdapter;

impl Adapter for SmolAdapter {
    fn name(&self) -> &'static str {
        "smol"
    }
    fn client(&self, config: Config) -> Box<dyn TestClient> {
        let log = EventLog::default();
        let client = adapter::builder::<Client>(config, &log).build().expect("client");
        Box::new(AsyncTestClient { client, log, exec: OnSmol })
    }
}

switchyard_tests::conformance_suite!(SmolAdapter);
switchyard_tests::reliability_matrix!(SmolAdapter);
switchyard_tests::hostile_suite!(SmolAdapter);
switchyard_tests::found_suite!(SmolAdapter);
switchyard_tests::churn_suite!(SmolAdapter);
switchyard_tests::interop_suite!(SmolAdapter);

#[test]
fn load_10000_calls_1000_at_a_time_through_a_cap_of_16() {
    let peak = switchyard_tests::reliability::load(&SmolAdapter);
    eprintln!("smol load: 10 000 calls ok; peak RSS {peak:?} KiB");
}

#[test]
fn the_resident_set_does_not_grow_over_10000_calls() {
    let growth = switchyard_tests::reliability::no_leak(&SmolAdapter);
    eprintln!("resident set growth per 1 000 calls (median): {growth} KiB");
}

#[test]
fn mixed_faults_every_call_accounted_for() {
    let (ok, failed) = switchyard_tests::reliability::mixed(&SmolAdapter, 0x5eed);
    eprintln!("smol mixed: {ok} ok, {failed} typed errors");
    assert!(ok > 0 && failed > 0);
}

/// The same client driven the way an async-std program drives futures: its
/// `block_on` and its `spawn`, nothing from smol on the calling side.
mod from_async_std {
    use super::*;

    struct OnAsyncStd;

    impl Executor for OnAsyncStd {
        fn block_on<T>(&self, f: impl Future<Output = T>) -> T {
            async_std::task::block_on(f)
        }
        fn spawn<T: Send + 'static>(
            &self,
            f: impl Future<Output = T> + Send + 'static,
        ) -> Pin<Box<dyn Future<Output = T> + Send>> {
            Box::pin(async_std::task::spawn(f))
        }
    }

    struct AsyncStdAdapter;

    impl Adapter for AsyncStdAdapter {
        fn name(&self) -> &'static str {
            "smol-from-async-std"
        }
        fn client(&self, config: Config) -> Box<dyn TestClient> {
            let log = EventLog::default();
            let client = adapter::builder::<Client>(config, &log).build().expect("client");
            Box::new(AsyncTestClient { client, log, exec: OnAsyncStd })
        }
    }

    switchyard_tests::conformance_suite!(AsyncStdAdapter);
}

// The ecosystem surface (issue 18), as on tokio.
mod ecosystem {
    use switchyard_smol::Smol;
    use switchyard_tests::ecosystem;

    #[test]
    fn request_api() {
        smol::block_on(ecosystem::request_api::<Smol>());
    }
    #[test]
    fn response_helpers_and_ids() {
        smol::block_on(ecosystem::response_helpers::<Smol>());
    }
    #[test]
    fn body_traits() {
        smol::block_on(ecosystem::body_traits::<Smol>());
    }
    #[test]
    fn sized_streamed_uploads() {
        smol::block_on(ecosystem::sized_streams::<Smol>());
    }
    /// A smol (async-fs) file is a body, and with its size through
    /// `Body::from_futures_reader` goes out with `Content-Length`.
    #[test]
    fn a_smol_file_is_a_body() {
        use switchyard_smol::{Body, Client};
        use switchyard_tests::server::{ServerOptions, TestServer};
        smol::block_on(async {
            let (server, client) =
                (TestServer::start(ServerOptions::default()), Client::new().expect("client"));
            let url = |p: &str| format!("http://127.0.0.1:{}{p}", server.port());
            let path = std::env::temp_dir().join(format!("switchyard-smol-file-{}", std::process::id()));
            std::fs::write(&path, b"from a smol file").expect("write");
            let file = smol::fs::File::open(&path).await.expect("open");
            let r = client.post(url("/echo")).body(file).send().await.expect("POST a file");
            assert_eq!(r.text().await.expect("echo"), "from a smol file");
            let file = smol::fs::File::open(&path).await.expect("open");
            let length = file.metadata().await.expect("metadata").len();
            let r =
                client.post(url("/headers")).body(Body::from_futures_reader(file, Some(length))).send().await;
            let seen = r.expect("POST").text().await.expect("headers");
            assert!(seen.contains("content-length: 16"), "{seen}");
            std::fs::remove_file(&path).expect("remove");
        });
    }
    #[test]
    fn timeouts_cover_the_body() {
        smol::block_on(ecosystem::timeouts::<Smol>());
    }
    #[test]
    fn errors_one_can_match() {
        smol::block_on(ecosystem::errors::<Smol>());
    }
    #[test]
    fn tower_http_over_a_client() {
        ecosystem::with_tokio_timer(|| smol::block_on(ecosystem::tower_stack::<Smol>()));
    }
    #[test]
    fn a_tracing_span_per_call() {
        smol::block_on(ecosystem::tracing_spans("switchyard_smol", async |url| {
            let client = switchyard_smol::Client::new().unwrap();
            let r = client.get(url).send().await.map_err(|e| format!("{e:#}"))?;
            let status = r.status().as_u16();
            let _ = switchyard_smol::ResponseExt::text(r).await.map_err(|e| format!("{e:#}"))?;
            Ok(status)
        }));
    }
    #[test]
    fn tls_inputs_and_danger() {
        smol::block_on(ecosystem::tls_inputs::<Smol>());
    }
}

// ---------------------------------------------------------------------------
// The Manager.

struct SmolManagers;

impl switchyard_tests::manager::ManagerAdapter for SmolManagers {
    fn manager(
        &self,
        servers: &[(String, usize)],
        ready_timeout: std::time::Duration,
        log: &EventLog,
    ) -> Box<dyn switchyard_tests::manager::TestManager> {
        let mut b = switchyard_smol::Manager::builder()
            .ready_timeout(ready_timeout)
            .client(|c| c.event_listener(log.clone()).connect_timeout(std::time::Duration::from_secs(2)));
        for (url, min) in servers {
            b = b.server(url, *min);
        }
        let manager = b.build().expect("manager");
        Box::new(switchyard_tests::manager::AsyncTestManager { manager, log: log.clone(), exec: OnSmol })
    }

    fn h2c_manager(
        &self,
        servers: &[(String, usize)],
        ready_timeout: std::time::Duration,
        log: &EventLog,
    ) -> Option<Box<dyn switchyard_tests::manager::TestManager>> {
        let mut b = switchyard_smol::Manager::builder().ready_timeout(ready_timeout).client(|c| {
            c.event_listener(log.clone())
                .http_version(switchyard_smol::HttpVersion::Http2Only)
                .connect_timeout(std::time::Duration::from_secs(2))
        });
        for (url, min) in servers {
            b = b.server(url, *min);
        }
        let manager = b.build().expect("manager");
        Some(Box::new(switchyard_tests::manager::AsyncTestManager {
            manager,
            log: log.clone(),
            exec: OnSmol,
        }))
    }
}

switchyard_tests::manager_suite!(SmolManagers);
