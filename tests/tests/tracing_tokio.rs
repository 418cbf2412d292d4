//! The tracing span per call on switchyard-tokio, in a test binary of its own:
//! a thread-local subscriber (`set_default`) and tests of other binaries'
//! calls running in parallel on other threads race over tracing's per-callsite
//! interest cache, so this check runs with no other test in its process.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use switchyard_tests::ecosystem;

#[test]
fn a_tracing_span_per_call() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(ecosystem::tracing_spans("switchyard_tokio", async |url| {
        let client = switchyard_tokio::Client::new().unwrap();
        let r = client.get(url).send().await.map_err(|e| format!("{e:#}"))?;
        let status = r.status().as_u16();
        let _ = switchyard_tokio::ResponseExt::text(r).await.map_err(|e| format!("{e:#}"))?;
        Ok(status)
    }));
}
