//! Resilience policies seen from outside (issue #34): retry budgets, DNS
//! change drains, HTTP/2 keep-alive PINGs, graceful shutdown. Each scenario
//! counts what the server saw, never how long anything took.

use std::time::Duration;

use switchyard_core::RetryBudget;

use crate::conformance::{Adapter, Config, Failure, Req, Version};
use crate::fault::{Fault, FaultOptions, FaultServer, Reply};
use crate::net::{RawServer, Step};

/// A fifth of the calls, no floor: the bound the scenarios count against.
fn fifth() -> RetryBudget {
    RetryBudget { ratio: 0.2, min_per_second: 0, window: Duration::from_secs(60) }
}

/// Every call either ends well or fails typed; the budget's refusals say so.
fn tally(results: &[Result<crate::conformance::Resp, (Failure, String)>]) -> (usize, usize) {
    let (mut ok, mut over_budget) = (0, 0);
    for r in results {
        match r {
            Ok(r) => {
                assert_eq!(r.body, b"ok");
                ok += 1;
            }
            Err((Failure::Exchange(_), m)) if m.contains("retry budget exhausted") => over_budget += 1,
            Err((kind, m)) => panic!("not a budget refusal ({kind:?}): {m}"),
        }
    }
    (ok, over_budget)
}

/// HTTP/1.1: a server that answers the first request on each connection and
/// drops every later one unanswered (each reuse fails as a stale
/// connection, which a GET retries on a new one). 64 calls from 8 callers:
/// without a budget every reuse costs a second request; with 20 % and no
/// floor, the server sees at most 64 + 12 requests, and the calls whose
/// retry was refused fail typed.
pub fn retry_budget_bounds_a_retry_storm(a: &dyn Adapter) {
    let script =
        || vec![Step::Respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()), Step::Close];
    let server = RawServer::scripted((0..400).map(|_| script()).collect());
    let url = format!("http://127.0.0.1:{}/", server.addr.port());
    let client =
        a.client(Config { version: Version::Http1, retry_budget: Some(Some(fifth())), ..Config::default() });
    let results = client.send_loops(8, 8, Req::get(url.clone()));
    let (ok, over_budget) = tally(&results);
    assert_eq!(ok + over_budget, 64);
    let stats = client.stats();
    assert!(stats.retries <= 12, "{stats:?}");
    assert_eq!(stats.retries_over_budget as usize, over_budget, "{stats:?}");
    assert!(over_budget > 0, "reuses failed beyond the budget: {stats:?}");
    assert!(server.requests() <= 64 + 12, "the server saw {} requests", server.requests());
    // The same load without a budget: every failed reuse is retried.
    let storm = RawServer::scripted((0..400).map(|_| script()).collect());
    let url = format!("http://127.0.0.1:{}/", storm.addr.port());
    let client = a.client(Config { version: Version::Http1, retry_budget: Some(None), ..Config::default() });
    let (ok, over_budget) = tally(&client.send_loops(8, 8, Req::get(url)));
    assert_eq!((ok, over_budget), (64, 0));
    assert!(storm.requests() > server.requests(), "{} vs {}", storm.requests(), server.requests());
}

/// HTTP/2: a server that refuses every stream (REFUSED_STREAM). Without a
/// budget each call is tried up to three times (twice on one connection,
/// once on another); with 20 % and no floor the server sees at most 64 + 12
/// streams for 64 concurrent calls, and every call ends typed.
pub fn retry_budget_bounds_an_http2_retry_storm(a: &dyn Adapter) {
    let server = FaultServer::start(FaultOptions { http2: true, ..FaultOptions::default() });
    server.push((0..400).map(|_| Reply::ok("x").with(Fault::Reset(0x7))));
    let url = format!("http://127.0.0.1:{}/", server.port());
    let client =
        a.client(Config { version: Version::Http2, retry_budget: Some(Some(fifth())), ..Config::default() });
    let results = client.send_all((0..64).map(|_| Req::get(url.clone())).collect());
    let mut over_budget = 0;
    for r in &results {
        let (kind, message) = r.as_ref().expect_err("every stream is refused");
        assert_eq!(*kind, Failure::Exchange(false), "refused: never processed: {message}");
        if message.contains("retry budget exhausted") {
            over_budget += 1;
        } else {
            assert!(message.contains("refused on two connections"), "{message}");
        }
    }
    let streams = server.records().len();
    assert!(streams <= 64 + 12, "the server saw {streams} streams");
    assert!(over_budget >= 64 - 12, "{over_budget} calls stopped at the budget");
    assert_eq!(client.stats().retries_over_budget as usize, over_budget);
}
