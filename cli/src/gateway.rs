//! `switchyard gateway`: a Manager over the declared servers, serving local
//! requests on `--listen` over their warm connections (the library's
//! `Manager::gateway`), one access-log line per request on stdout.

use std::io::Write;

use crate::args::{Dns, GatewayArgs};
use crate::exit::Failed;
use crate::warm::manager;

/// Runs `switchyard gateway` on tokio: `--threads` workers, each a
/// single-threaded runtime with its own listener (`SO_REUSEPORT` when there are
/// several), Manager and upstream connections — nginx's worker model, with no
/// hand-off between threads on a request's way — while this thread waits for
/// ctrl-c, SIGTERM or `--for` and then stops them all.
///
/// # Errors
/// A bad `--server`, `--cacert` or `--listen`, or a listener failing.
pub fn run(args: &GatewayArgs) -> Result<(), Failed> {
    let threads = usize::from(args.threads);
    let cannot = |e: std::io::Error| Failed::new(format!("cannot listen on {}: {e}", args.listen));
    // Every listener before anything starts: a bad --listen fails at once.
    let listeners = if threads == 1 {
        vec![switchyard_tokio::gateway::listener(args.listen).map_err(cannot)?]
    } else {
        let first = switchyard_tokio::gateway::shared_listener(args.listen).map_err(cannot)?;
        let at = first.local_addr().map_err(cannot)?;
        let mut all = vec![first];
        for _ in 1..threads {
            all.push(switchyard_tokio::gateway::shared_listener(at).map_err(cannot)?);
        }
        all
    };
    let local = listeners[0].local_addr().map_err(cannot)?;
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let (done, mut ended) = tokio::sync::mpsc::unbounded_channel::<()>();
    std::thread::scope(|scope| {
        let workers: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(i, listener)| {
                let (stopping, done) = (stopping.clone(), done.clone());
                std::thread::Builder::new()
                    .name(format!("gateway-{i}"))
                    .spawn_scoped(scope, move || {
                        let served = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .map_err(|e| Failed::new(format!("cannot start the tokio runtime: {e}")))
                            .and_then(|rt| rt.block_on(serve(args, listener, local, i == 0, stopping)));
                        let _ = done.send(());
                        served
                    })
                    .map_err(|e| Failed::new(format!("cannot start a gateway thread: {e}")))
            })
            .collect();
        drop(done);
        // Until a signal (or --for), or until a worker ends on its own (it failed).
        let waited = tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
            rt.block_on(async {
                let duration = args.duration;
                tokio::select! {
                    () = async {
                        match duration {
                            Some(d) => tokio::time::sleep(d).await,
                            None => interrupted().await,
                        }
                        eprintln!("switchyard gateway: stopping (requests in flight may finish)");
                    } => {}
                    _ = ended.recv() => {}
                }
            });
        });
        let _ = stop.send(true);
        let mut first_error =
            waited.err().map(|e| Failed::new(format!("cannot start the tokio runtime: {e}")));
        for worker in workers {
            let result = match worker {
                Ok(handle) => handle.join().unwrap_or_else(|_| Err(Failed::new("a gateway thread panicked"))),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// One worker: a Manager over the declared servers and the gateway on
/// `listener`, until `stopping` says so.
async fn serve(
    args: &GatewayArgs,
    listener: std::net::TcpListener,
    local: std::net::SocketAddr,
    announce: bool,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), Failed> {
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
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Failed::new(format!("cannot listen on {local}: {e}")))?;
    if announce {
        let servers: Vec<&str> = args.servers.iter().map(|(u, _)| u.as_str()).collect();
        let threads = match args.threads {
            1 => String::new(),
            n => format!(" ({n} threads)"),
        };
        eprintln!("switchyard gateway: listening on http://{local} for {}{threads}", servers.join(", "));
    }
    let json = args.json;
    let mut gateway = manager
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
        });
    if !args.no_access_log {
        gateway = gateway.access_log(move |record| {
            let line = if json { record.to_json() } else { record.to_string() };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        });
    }
    let stop = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
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
