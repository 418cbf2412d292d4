//! `switchyard get`.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_tokio::{Client, EventLog, HttpVersion};

use crate::args::{GetArgs, Runtime};
use crate::timeline;

/// A failure that ends the command, with the one line to print.
#[derive(Debug)]
pub struct Failed(pub String);

fn client(args: &GetArgs, log: &EventLog) -> Result<Client, Failed> {
    let mut b = Client::builder()
        .event_listener(log.clone())
        .connect_timeout(args.connect_timeout)
        .attempt_delay(args.attempt_delay);
    if args.http1 {
        b = b.http_version(HttpVersion::Http1Only);
    } else if args.http2 || args.h2_prior_knowledge {
        b = b.http_version(HttpVersion::Http2Only);
    }
    if let Some(n) = args.max_per_host {
        b = b.max_connections_per_host(n);
    }
    for r in &args.resolve {
        b = b.resolve(&format!("{}:{}", r.host, r.port), r.addrs.iter().copied());
    }
    if let Some(path) = &args.cacert {
        use rustls::pki_types::pem::PemObject;
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| Failed(format!("cannot read --cacert {}: {e}", path.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| Failed(format!("bad PEM in --cacert {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Failed(format!("no certificates in --cacert {}", path.display())));
        }
        for c in certs {
            b = b.add_root_certificate(c.to_vec());
        }
    }
    b.build().map_err(|e| Failed(e.to_string()))
}

/// Runs `switchyard get`; returns the process exit code.
pub async fn run(args: GetArgs) -> Result<(), Failed> {
    if args.runtime != Runtime::Tokio {
        return Err(Failed(format!(
            "runtime {:?} is not available yet: only tokio is built (use --runtime tokio)",
            args.runtime
        )));
    }
    let log = EventLog::default();
    let client = client(&args, &log)?;
    if args.requests == 1 && args.concurrency == 1 {
        for url in &args.urls {
            single(&client, &log, url, &args).await?;
        }
        return Ok(());
    }
    repeated(&client, &log, &args).await
}

async fn single(client: &Client, log: &EventLog, url: &str, args: &GetArgs) -> Result<(), Failed> {
    log.clear();
    let result = fetch(client, url).await;
    let events = log.events();
    if args.json {
        let mut out = std::io::stdout().lock();
        for e in &events {
            let _ = writeln!(out, "{}", timeline::json(e));
        }
    }
    let call = events.iter().find(|e| e.name == "call_start").and_then(|e| e.call);
    if args.verbose && !args.json {
        if let Some(call) = call {
            eprint!("{}", timeline::render(&events, call));
        }
    }
    let (status, version, body) = result.map_err(|e| Failed(format!("{url}: {e}")))?;
    if !args.json {
        eprintln!("{version:?} {status}");
    }
    match &args.output {
        Some(path) => std::fs::write(path, &body)
            .map_err(|e| Failed(format!("cannot write {}: {e}", path.display())))?,
        None if !args.json => {
            let mut out = std::io::stdout().lock();
            out.write_all(&body).and_then(|()| out.flush()).map_err(|e| Failed(format!("stdout: {e}")))?;
        }
        None => {}
    }
    Ok(())
}

async fn fetch(
    client: &Client,
    url: &str,
) -> Result<(http::StatusCode, http::Version, bytes::Bytes), switchyard_tokio::Error> {
    let mut response = client.get(url).send().await?;
    let body = response.body_mut().collect().await?;
    Ok((response.status(), response.version(), body))
}

async fn repeated(client: &Client, log: &EventLog, args: &GetArgs) -> Result<(), Failed> {
    let total = args.requests * args.urls.len() as u64;
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::hidden());
    let show = std::io::stderr().is_terminal() && !args.json;
    let limit =
        Arc::new(tokio::sync::Semaphore::new(usize::try_from(args.concurrency).unwrap_or(usize::MAX)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..total {
        let url = args.urls[usize::try_from(i).unwrap_or(0) % args.urls.len()].clone();
        let (client, limit, task_bar) = (client.clone(), Arc::clone(&limit), bar.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.ok();
            let t = Instant::now();
            let r = fetch(&client, &url).await;
            task_bar.inc(1);
            r.map(|_| t.elapsed()).map_err(|e| format!("{url}: {e}"))
        }));
        // Only runs that take longer than a second get a progress bar.
        if show && started.elapsed() > Duration::from_secs(1) && bar.is_hidden() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        if show && started.elapsed() > Duration::from_secs(1) && bar.is_hidden() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        match t.await {
            Ok(Ok(d)) => latencies.push(d),
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("task: {e}")),
        }
    }
    bar.finish_and_clear();
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let stats = client.stats();
    let closed: serde_json::Map<String, serde_json::Value> =
        stats.closed.iter().map(|(r, n)| (r.to_string(), serde_json::json!(n))).collect();
    let summary = serde_json::json!({
        "requests": total,
        "succeeded": latencies.len(),
        "failed": errors.len(),
        "connections_opened": stats.created,
        "reused": stats.reused,
        "coalesced": stats.coalesced,
        "closed": closed,
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99)},
        "wall_ms": started.elapsed().as_secs_f64() * 1000.0,
    });
    if args.json {
        let mut out = std::io::stdout().lock();
        for e in log.events() {
            let _ = writeln!(out, "{}", timeline::json(&e));
        }
        let _ = writeln!(out, "{}", serde_json::json!({ "summary": summary }));
    } else {
        eprintln!(
            "{} requests: {} ok, {} failed in {:.0} ms\nconnections: {} opened, {} reused, {} coalesced\nclosed: {}\nlatency: p50 {:.2} ms, p99 {:.2} ms",
            total,
            latencies.len(),
            errors.len(),
            started.elapsed().as_secs_f64() * 1000.0,
            stats.created,
            stats.reused,
            stats.coalesced,
            if stats.closed.is_empty() {
                "none".to_owned()
            } else {
                stats.closed.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
            },
            pct(0.5),
            pct(0.99),
        );
    }
    match errors.first() {
        Some(first) => Err(Failed(format!("{} of {total} requests failed; first: {first}", errors.len()))),
        None => Ok(()),
    }
}
