//! `switchyard warm`: a Manager over the given servers, printing each server's
//! readiness as it changes.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::args::WarmArgs;
use crate::exit::Failed;

/// Runs `switchyard warm` on tokio.
pub fn run(args: &WarmArgs) -> Result<(), Failed> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::new(format!("cannot start the tokio runtime: {e}")))?;
    rt.block_on(watch(args))
}

/// A Manager over `servers` (URL, minimum) with the CLI's `--resolve` and
/// `--cacert`, proxies from the environment, and `more` settings.
///
/// # Errors
/// A bad `--cacert` or server URL.
pub fn manager(
    servers: &[(String, usize)],
    resolve: &[crate::args::Resolve],
    cacert: Option<&std::path::Path>,
    more: impl FnOnce(switchyard_tokio::ManagerBuilder) -> switchyard_tokio::ManagerBuilder,
) -> Result<switchyard_tokio::Manager, Failed> {
    let mut builder = switchyard_tokio::Manager::builder();
    for (url, min) in servers {
        builder = builder.server(url, *min);
    }
    let resolve = resolve.to_vec();
    let certs = ca_certificates(cacert)?;
    builder = builder.client(move |mut c| {
        for r in &resolve {
            c = c.resolve(&format!("{}:{}", r.host, r.port), r.addrs.iter().copied());
        }
        for cert in certs {
            c = c.add_root_certificate(cert);
        }
        c.proxy_from_env()
    });
    // The caller's settings last: they override the defaults above.
    more(builder).build().map_err(|e| Failed::new(format!("{e:#}")))
}

/// The DER certificates of a `--cacert` PEM file (none without one).
///
/// # Errors
/// The file cannot be read, or holds a bad PEM block.
pub fn ca_certificates(path: Option<&std::path::Path>) -> Result<Vec<Vec<u8>>, Failed> {
    use rustls::pki_types::pem::PemObject;
    let Some(path) = path else { return Ok(Vec::new()) };
    let mut certs = Vec::new();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| Failed::new(format!("cannot read --cacert {}: {e}", path.display())))?
    {
        certs.push(
            c.map_err(|e| Failed::new(format!("bad PEM in --cacert {}: {e}", path.display())))?.to_vec(),
        );
    }
    Ok(certs)
}

async fn watch(args: &WarmArgs) -> Result<(), Failed> {
    let servers: Vec<(String, usize)> = args.urls.iter().map(|u| (u.clone(), args.min)).collect();
    let manager =
        manager(&servers, &args.resolve, args.cacert.as_deref(), |b| b.ready_timeout(args.down_after))?;
    let started = Instant::now();
    let mut last: Vec<String> = Vec::new();
    loop {
        let now: Vec<String> = manager
            .status()
            .iter()
            .map(|s| format!("{} {} {}/{}", s.url, s.readiness, s.open, s.wanted))
            .collect();
        if now != last {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            let mut out = std::io::stdout().lock();
            for (i, s) in manager.status().iter().enumerate() {
                if last.get(i) == now.get(i) {
                    continue;
                }
                let line = if args.json {
                    serde_json::json!({"t_ms": ms, "server": s.url, "readiness": s.readiness.as_str(), "open": s.open,
                        "wanted": s.wanted, "proving": s.proving, "connecting": s.connecting, "failures": s.failures,
                        "last_error": s.last_error, "next_retry_ms": s.next_retry_in.map(|d| d.as_millis() as u64)})
                    .to_string()
                } else {
                    format!("{ms:>9.0} ms  {s}")
                };
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            last = now;
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    manager.shutdown().await;
    Ok(())
}
