//! `switchyard gateway`: a Manager over the declared servers, serving local
//! requests on `--listen` over their warm connections (the library's
//! `Manager::gateway`), one access-log line per request on stdout.

use std::io::Write;

use crate::args::{Dns, GatewayArgs};
use crate::exit::Failed;
use crate::warm::manager;

/// Runs `switchyard gateway` on tokio.
///
/// # Errors
/// A bad `--server`, `--cacert` or `--listen`, or the listener failing.
pub fn run(args: &GatewayArgs) -> Result<(), Failed> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::new(format!("cannot start the tokio runtime: {e}")))?;
    rt.block_on(serve(args))
}

async fn serve(args: &GatewayArgs) -> Result<(), Failed> {
    let proxy = match &args.proxy {
        Some(url) => Some(
            switchyard_common::parse_proxy_url(url).map_err(|why| Failed::new(format!("--proxy: {why}")))?,
        ),
        None => None,
    };
    let dns = match args.dns {
        Dns::System if args.dns_servers.is_empty() => None,
        Dns::System => return Err(Failed::new("--dns-server needs --dns hickory")),
        Dns::Hickory if args.dns_servers.is_empty() => Some(switchyard_tokio::HickoryResolver::system()),
        Dns::Hickory => Some(switchyard_tokio::HickoryResolver::with_servers(&args.dns_servers)),
    };
    let dns = dns.transpose().map_err(|e| Failed::new(format!("--dns hickory: {e:#}")))?;
    let (connect_timeout, no_proxy_env) = (args.connect_timeout, args.no_proxy_env);
    let manager = manager(&args.servers, &args.resolve, args.cacert.as_deref(), move |b| {
        b.client(move |mut c| {
            c = c.connect_timeout(connect_timeout);
            if let Some(resolver) = dns {
                c = c.async_resolver(resolver);
            }
            match proxy {
                Some(proxy) => c.proxies([proxy]),
                None if no_proxy_env => c.no_proxy(),
                None => c,
            }
        })
    })?;
    let listener = switchyard_tokio::gateway::bind(args.listen)
        .map_err(|e| Failed::new(format!("cannot listen on {}: {e}", args.listen)))?;
    let local =
        listener.local_addr().map_err(|e| Failed::new(format!("cannot listen on {}: {e}", args.listen)))?;
    let servers: Vec<&str> = args.servers.iter().map(|(u, _)| u.as_str()).collect();
    eprintln!("switchyard gateway: listening on http://{local} for {}", servers.join(", "));
    let json = args.json;
    let gateway = manager
        .gateway()
        .max_connections(args.max_connections)
        .max_requests(args.max_requests)
        .shutdown_grace(args.grace)
        .idle_timeout(args.idle_timeout)
        .response_timeout(args.response_timeout)
        .status_page(if args.status_for_anyone {
            switchyard_tokio::gateway::StatusAccess::Anyone
        } else {
            switchyard_tokio::gateway::StatusAccess::Loopback
        })
        .access_log(move |record| {
            let line = if json { record.to_json() } else { record.to_string() };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        });
    let duration = args.duration;
    let stop = async move {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => interrupted().await,
        }
        eprintln!("switchyard gateway: stopping (requests in flight may finish)");
    };
    gateway
        .serve_until(listener, stop)
        .await
        .map_err(|e| Failed::new(format!("the listener on {local} failed: {e}")))?;
    manager.shutdown().await;
    Ok(())
}

/// Ctrl-c, or SIGTERM on Unix.
async fn interrupted() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
