//! The DNS scenarios of async adapters on switchyard-smol: answers per family
//! into the race, and hickory on async-io (no tokio) against the test DNS
//! server. (The rest of smol's suite runs from `switchyard-smol`'s own tests.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use switchyard_smol::{Client, EventLog};
use switchyard_tests::adapter::{self, AsyncTestClient, Executor};
use switchyard_tests::conformance::{Adapter, Config, TestClient};

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

switchyard_tests::dns_suite!(SmolAdapter, |server: std::net::SocketAddr| {
    Arc::new(switchyard_smol::HickoryResolver::with_servers(&[server]).expect("hickory"))
        as Arc<dyn switchyard_smol::AsyncResolve>
});
