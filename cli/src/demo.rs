//! `switchyard demo`: a narrated tour on embedded loopback servers. No network is
//! needed; everything listens on 127.0.0.1 / `[::1]` and stops at the end.

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};
use switchyard_core::CallId;
use switchyard_tests::certs::TestCa;
use switchyard_tests::net::{v4_listener_with_hanging_v6, RawServer, Step};
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{Client, EventLog, HttpVersion, Recorded};

use crate::exit::Failed;
use crate::timeline;

struct Narrator {
    json: bool,
}

impl Narrator {
    fn say(&self, text: &str) {
        if !self.json {
            println!("{text}");
        }
    }
    fn step(&self, step: Value, timeline: &str) {
        if self.json {
            println!("{step}");
        } else {
            print!("{timeline}");
            println!();
        }
        let _ = std::io::stdout().flush();
    }
}

fn last_call(events: &[Recorded]) -> Option<CallId> {
    events.iter().rev().find(|e| e.name == "call_start").and_then(|e| e.call)
}

fn names(events: &[Recorded], call: CallId) -> Vec<&'static str> {
    events.iter().filter(|e| e.call == Some(call)).map(|e| e.name).collect()
}

async fn get(client: &Client, url: &str) -> Result<(http::Version, String), Failed> {
    let mut r = client.get(url).send().await.map_err(|e| Failed::new(format!("{e:#}")))?;
    let body = r.body_mut().text().await.map_err(|e| Failed::new(format!("{e:#}")))?;
    Ok((r.version(), body))
}

/// Runs the tour. With `json`, prints one JSON object per step (and a final
/// summary) instead of prose.
pub async fn run(json_out: bool) -> Result<(), Failed> {
    let n = Narrator { json: json_out };
    let started = Instant::now();
    n.say("switchyard demo: every server below runs on this machine, on loopback.\n");

    // A test CA and an HTTPS server (HTTP/2 and HTTP/1.1) whose certificate covers
    // two names. [::1]:P never answers (a full accept backlog); 127.0.0.1:P serves.
    let ca = TestCa::new();
    let (listener, _hanging) = v4_listener_with_hanging_v6()
        .ok_or_else(|| Failed::new("cannot set up the black-holed [::1] route on this machine"))?;
    let mut options = ServerOptions::default();
    options
        .tls
        .push((vec!["demo.test".into(), "www.demo.test".into()], ca.leaf(&["demo.test", "www.demo.test"])));
    let server = TestServer::start_on(listener, options);
    let port = server.port();
    let log = EventLog::default();
    // The demo's servers are embedded: never through a proxy from the environment.
    let client = Client::builder()
        .no_proxy()
        .event_listener(log.clone())
        .add_root_certificate(ca.cert.clone())
        .resolve(&format!("demo.test:{port}"), ["::1".parse().expect("ip"), "127.0.0.1".parse().expect("ip")])
        .resolve(&format!("www.demo.test:{port}"), ["127.0.0.1".parse().expect("ip")])
        .build()
        .map_err(|e| Failed::new(format!("{e:#}")))?;

    // 1. Happy Eyeballs.
    n.say("1. First request. DNS says [::1] and 127.0.0.1; [::1] never answers, so after the");
    n.say("   250 ms attempt delay the race starts 127.0.0.1, which wins; TLS picks h2.");
    let (version, _) = get(&client, &format!("https://demo.test:{port}/hello")).await?;
    let events = log.events();
    let call = last_call(&events).ok_or_else(|| Failed::new("no call recorded"))?;
    let starts: Vec<&Recorded> = events.iter().filter(|e| e.name == "connect_start").collect();
    let fallback_ms = match starts.as_slice() {
        [first, second, ..] => (second.at - first.at).as_secs_f64() * 1000.0,
        _ => 0.0,
    };
    let routes: Vec<&str> = starts.iter().map(|e| e.detail.as_str()).collect();
    n.step(
        json!({"step": 1, "name": "happy_eyeballs", "connect_attempts": starts.len(), "routes": routes,
               "fallback_after_ms": fallback_ms, "version": format!("{version:?}"),
               "cancelled": events.iter().filter(|e| e.name == "connect_cancelled").count()}),
        &timeline::render(&events, call),
    );

    // 2. Reuse.
    n.say("2. The same request again: the pooled connection carries it (no DNS, no connect).");
    log.clear();
    get(&client, &format!("https://demo.test:{port}/hello")).await?;
    let events = log.events();
    let call = last_call(&events).ok_or_else(|| Failed::new("no call recorded"))?;
    let acquired =
        events.iter().find(|e| e.name == "connection_acquired").map(|e| e.detail.clone()).unwrap_or_default();
    n.step(
        json!({"step": 2, "name": "reuse", "events": names(&events, call), "acquired": acquired,
               "server_connections": server.connections()}),
        &timeline::render(&events, call),
    );

    // 3. Coalescing.
    n.say("3. www.demo.test: its DNS answer holds the connection's IP and the certificate covers");
    n.say("   it, so it coalesces onto the same HTTP/2 connection.");
    log.clear();
    get(&client, &format!("https://www.demo.test:{port}/hello")).await?;
    let events = log.events();
    let call = last_call(&events).ok_or_else(|| Failed::new("no call recorded"))?;
    let acquired =
        events.iter().find(|e| e.name == "connection_acquired").map(|e| e.detail.clone()).unwrap_or_default();
    n.step(
        json!({"step": 3, "name": "coalescing", "acquired": acquired, "server_connections": server.connections(),
               "coalesced": client.stats().coalesced}),
        &timeline::render(&events, call),
    );

    // 4. A per-host cap.
    n.say("4. 20 concurrent HTTP/1.1 requests under a per-host cap of 4: calls wait their turn,");
    n.say("   and the server never sees more than 4 connections.");
    let plain = TestServer::start(ServerOptions::default());
    let capped = Client::builder()
        .no_proxy()
        .http_version(HttpVersion::Http1Only)
        .max_connections_per_host(4)
        .build()
        .map_err(|e| Failed::new(format!("{e:#}")))?;
    let url = format!("http://127.0.0.1:{}/sleep/50", plain.port());
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (c, u) = (capped.clone(), url.clone());
            tokio::spawn(async move { get(&c, &u).await })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        if matches!(t.await, Ok(Ok(_))) {
            ok += 1;
        }
    }
    let s = capped.stats();
    n.step(
        json!({"step": 4, "name": "per_host_cap", "succeeded": ok, "server_connections": plain.connections(),
               "created": s.created, "reused": s.reused}),
        &format!("   {ok}/20 succeeded over {} connections ({} reused)\n", plain.connections(), s.reused),
    );

    // 5. A stale connection, retried.
    n.say("5. The server drops an idle keep-alive connection just as the next GET is written.");
    n.say("   The GET is idempotent, so it is retried once on a fresh connection.");
    let raw = RawServer::scripted(vec![
        vec![Step::Respond(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_vec()), Step::Close],
        vec![Step::Respond(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond".to_vec())],
    ]);
    let rlog = EventLog::default();
    let retrying = Client::builder()
        .no_proxy()
        .event_listener(rlog.clone())
        .build()
        .map_err(|e| Failed::new(format!("{e:#}")))?;
    get(&retrying, &format!("http://{}/", raw.addr)).await?;
    rlog.clear();
    let (_, body) = get(&retrying, &format!("http://{}/", raw.addr)).await?;
    let events = rlog.events();
    let call = last_call(&events).ok_or_else(|| Failed::new("no call recorded"))?;
    let retries: Vec<String> =
        events.iter().filter(|e| e.name == "retry_decision").map(|e| e.detail.clone()).collect();
    n.step(
        json!({"step": 5, "name": "stale_retry", "body": body, "retries": retries,
               "connections": retrying.stats().created}),
        &timeline::render(&events, call),
    );

    // 6. Stats.
    n.say("6. The pool's view of the HTTPS client:");
    let s = client.stats();
    let closed: serde_json::Map<String, Value> =
        s.closed.iter().map(|(r, c)| (r.to_string(), json!(c))).collect();
    n.step(
        json!({"step": 6, "name": "stats", "open": s.totals.open, "idle": s.totals.idle, "in_use": s.totals.in_use,
               "created": s.created, "reused": s.reused, "coalesced": s.coalesced, "closed": closed,
               "server_connections": server.connections(), "elapsed_ms": started.elapsed().as_secs_f64() * 1000.0}),
        &format!(
            "   open {}, idle {}, in use {}; created {}, reused {}, coalesced {}; closed {}\n   the HTTPS server saw {} connection(s) for 3 requests; tour took {:.0} ms\n",
            s.totals.open,
            s.totals.idle,
            s.totals.in_use,
            s.created,
            s.reused,
            s.coalesced,
            s.closed.values().sum::<u64>(),
            server.connections(),
            started.elapsed().as_secs_f64() * 1000.0
        ),
    );

    manager_step(&n).await
}

/// Step 7, the Manager: two declared servers warm before the first request;
/// one restarted, re-warmed with backoff.
async fn manager_step(n: &Narrator) -> Result<(), Failed> {
    n.say("7. A Manager declares two servers (2 and 1 warm connections): they are connected before");
    n.say("   the first request, which opens nothing. Then the second server goes away (its");
    n.say("   connections close) and comes back 2.5 s later on the same port: the Manager backs");
    n.say("   off (1 s, 1.6 s, ±20 %) and re-warms it.");
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Failed::new(format!("bind: {e}")));
    let (la, lb) = (bind()?, bind()?);
    let port_b = lb.local_addr().map_err(|e| Failed::new(e.to_string()))?.port();
    let a = TestServer::start_on(la, ServerOptions::default());
    let b = TestServer::start_on(lb, ServerOptions::default());
    let log = EventLog::default();
    let (url_a, url_b) = (format!("http://127.0.0.1:{}", a.port()), format!("http://localhost:{port_b}"));
    let manager = switchyard_tokio::Manager::builder()
        .server(&url_a, 2)
        .server(&url_b, 1)
        .client(|c| c.no_proxy().event_listener(log.clone()))
        .ready_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| Failed::new(format!("{e:#}")))?;
    manager.ready().await.map_err(|e| Failed::new(format!("{e:#}")))?;
    let warm = (a.connections(), b.connections());
    let before: Vec<String> = manager.status().iter().map(ToString::to_string).collect();
    log.clear();
    let handle =
        manager.connection(&format!("127.0.0.1:{}", a.port())).map_err(|e| Failed::new(format!("{e:#}")))?;
    let mut response = handle.get("/hello").send().await.map_err(|e| Failed::new(format!("{e:#}")))?;
    let _ = response.body_mut().collect().await;
    let events = log.events();
    let acquired =
        events.iter().find(|e| e.name == "connection_acquired").map(|e| e.detail.clone()).unwrap_or_default();
    let connects = events.iter().filter(|e| e.name == "connect_start").count();
    // The second server goes away, then comes back on its port.
    log.clear();
    let killed = Instant::now();
    drop(b);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let mut back = std::net::TcpListener::bind(("127.0.0.1", port_b));
    for _ in 0..100 {
        if back.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        back = std::net::TcpListener::bind(("127.0.0.1", port_b));
    }
    let back = back.map_err(|e| Failed::new(format!("rebind 127.0.0.1:{port_b}: {e}")))?;
    let b = TestServer::start_on(back, ServerOptions::default());
    let mut ready_again = false;
    for _ in 0..600 {
        if manager.status().iter().all(|s| s.readiness == switchyard_tokio::Readiness::Ready)
            && b.connections() == 1
        {
            ready_again = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let changes: Vec<String> = log
        .events()
        .iter()
        .filter(|e| e.name == "warm_readiness")
        .map(|e| format!("{:>7.0} ms  {}", (e.at - log.events()[0].at).as_secs_f64() * 1000.0, e.detail))
        .collect();
    let after: Vec<String> = manager.status().iter().map(ToString::to_string).collect();
    let mut text = format!(
        "   before the first request: {}
",
        before.join("; ")
    );
    text.push_str(&format!(
        "   server connections: {} and {}; first request: {acquired}, {connects} connects
",
        warm.0, warm.1
    ));
    text.push_str(&format!(
        "   the second server stopped at 0 ms; {} readiness changes:
",
        changes.len()
    ));
    for c in &changes {
        text.push_str(&format!(
            "   {c}
"
        ));
    }
    text.push_str(&format!(
        "   after {:.1} s: {}
",
        killed.elapsed().as_secs_f64(),
        after.join("; ")
    ));
    n.step(
        json!({"step": 7, "name": "manager", "warm_connections": [warm.0, warm.1], "first_request_acquired": acquired,
               "first_request_connects": connects, "readiness_changes": changes, "ready_again": ready_again,
               "rewarmed_connections": b.connections()}),
        &text,
    );
    manager.shutdown().await;
    Ok(())
}
