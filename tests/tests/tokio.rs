//! The conformance suite on switchyard-tokio.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use switchyard_core::{AcquireError, ConnectError, Failure as CoreFailure, TlsFailure};
use switchyard_tests::conformance::{Adapter, Config, EventRow, Failure, Req, Resp, TestClient, Version};
use switchyard_tokio::{Client, Error, EventLog, HttpVersion, Resolve, Resolving, StreamLimitPolicy};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    })
}

/// Only the names the test configured; anything else does not exist.
struct Hermetic(BTreeMap<String, Vec<IpAddr>>);

impl Resolve for Hermetic {
    fn resolve(&self, host: &str, _port: u16) -> Resolving {
        let answer = self.0.get(host).cloned();
        let host = host.to_owned();
        Box::pin(async move {
            answer.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such host {host}"))
            })
        })
    }
}

struct TokioAdapter;

struct TokioClient {
    client: Client,
    log: EventLog,
}

fn classify(e: &Error) -> Failure {
    match e {
        Error::InvalidUrl { .. } => Failure::InvalidUrl,
        Error::Connect(AcquireError::Connect(race)) => {
            let tls = race.failures.iter().find_map(|f| match f {
                CoreFailure::Connect { error: ConnectError::Tls { kind, .. }, .. } => Some(*kind),
                _ => None,
            });
            match tls {
                Some(TlsFailure::Hostname) => Failure::TlsHostname,
                Some(_) => Failure::TlsCertificate,
                None if race.failures.iter().all(|f| matches!(f, CoreFailure::Dns { .. })) => Failure::Dns,
                None => Failure::Connect,
            }
        }
        e if e.is_timeout() => Failure::Timeout,
        _ => Failure::Other,
    }
}

async fn send(client: &Client, req: Req) -> Result<Resp, (Failure, String)> {
    let mut builder = client.get(&req.url);
    builder = match req.method.as_str() {
        "GET" => builder,
        "POST" => client.post(&req.url),
        "PUT" => client.put(&req.url),
        _ => builder,
    };
    if req.exclusive {
        builder = builder.exclusive();
    }
    let result = async {
        let mut response = builder.body(req.body).send().await?;
        let body = response.body_mut().collect().await?;
        Ok::<_, Error>(Resp {
            status: response.status().as_u16(),
            version: response.version(),
            body: body.to_vec(),
        })
    }
    .await;
    result.map_err(|e| (classify(&e), e.to_string()))
}

impl TestClient for TokioClient {
    fn send(&self, req: Req) -> Result<Resp, (Failure, String)> {
        runtime().block_on(send(&self.client, req))
    }
    fn send_all(&self, reqs: Vec<Req>) -> Vec<Result<Resp, (Failure, String)>> {
        runtime().block_on(async {
            let tasks: Vec<_> = reqs
                .into_iter()
                .map(|r| {
                    let c = self.client.clone();
                    tokio::spawn(async move { send(&c, r).await })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.expect("task"));
            }
            out
        })
    }
    fn stats(&self) -> switchyard_core::PoolStats {
        self.client.stats()
    }
    fn events(&self) -> Vec<EventRow> {
        self.log
            .events()
            .into_iter()
            .map(|e| {
                (
                    e.call.map(|c| format!("{c}").trim_start_matches("call#").parse().unwrap_or(0)),
                    e.name,
                    e.detail,
                )
            })
            .collect()
    }
    fn clear_events(&self) {
        self.log.clear();
    }
    fn evict(&self) {
        let _guard = runtime().enter();
        self.client.evict_idle();
    }
}

impl Adapter for TokioAdapter {
    fn name(&self) -> &'static str {
        "tokio"
    }
    fn client(&self, config: Config) -> Box<dyn TestClient> {
        let log = EventLog::default();
        let mut b = Client::builder()
            .event_listener(log.clone())
            .attempt_delay(config.attempt_delay)
            .connect_timeout(config.connect_timeout)
            .idle_timeout(config.idle_timeout)
            .resolver(Hermetic(config.hosts.clone()))
            .http_version(match config.version {
                Version::Auto => HttpVersion::Auto,
                Version::Http1 => HttpVersion::Http1Only,
                Version::Http2 => HttpVersion::Http2Only,
            });
        if let Some(n) = config.max_per_host {
            b = b.max_connections_per_host(n);
        }
        if config.wait_for_streams {
            b = b.http2_stream_limit_policy(StreamLimitPolicy::Wait);
        }
        if let Some(root) = config.root {
            b = b.add_root_certificate(root);
        }
        let client = b.build().expect("client");
        let _ = Arc::new(());
        Box::new(TokioClient { client, log })
    }
}

switchyard_tests::conformance_suite!(TokioAdapter);
