//! `MetricsListener` (feature `metrics`) on a real client: the recorder a
//! program installs sees every call's duration and the pool's connections in
//! OpenTelemetry's names. Its own binary: the recorder is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use switchyard_tests::server::{ServerOptions, TestServer};

#[test]
fn a_tokio_client_reports_through_the_metrics_facade() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder in this process");
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = rt.block_on(async {
        let client = switchyard_tokio::Client::builder()
            .no_proxy()
            .event_listener(switchyard_tokio::metrics::MetricsListener::new())
            .build()
            .unwrap();
        for _ in 0..3 {
            let r = client.get(url.as_str()).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = switchyard_tokio::ResponseExt::text(r).await.unwrap();
        }
        let refused = client.get("http://127.0.0.1:1/").send().await.expect_err("nothing listens on port 1");
        assert!(refused.is_connect(), "{refused}");
        client
    });
    let mut seen = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        seen.push((key.name().to_owned(), labels, value));
    }
    let port = format!("server.port={}", server.port());
    let has = |name: &str, label: &str| {
        seen.iter().find(|(n, l, _)| n == name && l.iter().any(|x| x == label) && l.contains(&port))
    };
    match has("http.client.request.duration", "http.response.status_code=200") {
        Some((_, labels, DebugValue::Histogram(samples))) => {
            assert_eq!(samples.len(), 3, "{labels:?}");
            assert!(samples.iter().all(|s| s.0 >= 0.0));
            assert!(labels.contains(&"http.request.method=GET".to_owned()), "{labels:?}");
        }
        other => panic!("{other:?} in {seen:?}"),
    }
    match has("http.client.open_connections", "http.connection.state=idle") {
        Some((_, _, DebugValue::Gauge(g))) => assert_eq!(g.0, 1.0, "one pooled connection"),
        other => panic!("{other:?} in {seen:?}"),
    }
    let failed = seen
        .iter()
        .find(|(n, l, _)| n == "http.client.request.duration" && l.iter().any(|x| x == "error.type=connect"));
    assert!(matches!(failed, Some((_, _, DebugValue::Histogram(s))) if s.len() == 1), "{seen:?}");
    // The client goes: its connection closes, the gauge comes back down (the
    // debugging recorder hands out what changed since the last look).
    drop(client);
    let closed = snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| {
        let key = key.key();
        let idle = key.labels().any(|l| l.key() == "http.connection.state" && l.value() == "idle");
        (key.name() == "http.client.open_connections" && idle).then_some(value)
    });
    assert_eq!(closed, Some(DebugValue::Gauge((-1.0).into())));
}
