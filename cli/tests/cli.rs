//! The `switchyard` binary: argument parsing, `--json` shape, and the demo's
//! outcomes (asserted from its JSON, not its wording).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

use clap::Parser;
use switchyard_cli::args::{parse_duration, parse_resolve, Cli, Command as Sub};
use switchyard_tests::server::{ServerOptions, TestServer};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

#[test]
fn argument_parsing() {
    let r = parse_resolve("Example.com:443:127.0.0.1,[::1]").unwrap();
    assert_eq!((r.host.as_str(), r.port, r.addrs.len()), ("example.com", 443, 2));
    assert!(parse_resolve("example.com:443").is_err());
    assert!(parse_resolve("example.com:99999:127.0.0.1").is_err());
    assert!(parse_resolve("example.com:443:not-an-ip").is_err());
    assert_eq!(parse_duration("250ms").unwrap().as_millis(), 250);
    assert_eq!(parse_duration("1.5s").unwrap().as_millis(), 1500);
    assert_eq!(parse_duration("2").unwrap().as_secs(), 2);
    assert!(parse_duration("5h").is_err());
    assert!(parse_duration("-1s").is_err());

    let cli = Cli::try_parse_from([
        "switchyard",
        "get",
        "-v",
        "--requests",
        "3",
        "--concurrency",
        "2",
        "--http1.1",
        "http://a/",
    ])
    .unwrap();
    let Sub::Get(g) = cli.command else { panic!() };
    assert!(g.verbose && g.http1 && g.requests == 3 && g.concurrency == 2);
    assert!(Cli::try_parse_from(["switchyard", "get", "--http1.1", "--http2", "http://a/"]).is_err());
    assert!(Cli::try_parse_from(["switchyard", "get", "--requests", "0", "http://a/"]).is_err());
    // A URL is required (at run time: -K files and --url may give it).
    let none = bin().arg("get").output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no URL specified"));
}

#[test]
fn get_prints_the_body_and_status() {
    let server = TestServer::start(ServerOptions::default());
    let out = bin().args(["get", &format!("http://127.0.0.1:{}/hello", server.port())]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"hello");
    assert!(String::from_utf8_lossy(&out.stderr).contains("200 OK"));
}

#[test]
fn get_json_has_one_event_per_line() {
    let server = TestServer::start(ServerOptions::default());
    let out = bin()
        .args(["get", "--json-events", "--resolve", &format!("local.test:{}:127.0.0.1", server.port())])
        .arg(format!("http://local.test:{}/hello", server.port()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut events = json_lines(&out.stdout);
    let result = events.pop().unwrap();
    assert_eq!(result["result"]["http_code"], "200", "a result object ends the output: {result}");
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    for expected in [
        "call_start",
        "dns_start",
        "dns_end",
        "connect_start",
        "connect_end",
        "connection_acquired",
        "call_end",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    for e in &events {
        assert!(e["t_ms"].is_f64() && e["detail"].is_string(), "{e}");
    }
}

#[test]
fn repeated_runs_print_a_summary() {
    let server = TestServer::start(ServerOptions::default());
    let out = bin()
        .args(["get", "--json-events", "--requests", "20", "--concurrency", "4", "--max-per-host", "2"])
        .arg(format!("http://127.0.0.1:{}/hello", server.port()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["succeeded"], 20);
    assert!(summary["connections_opened"].as_u64().unwrap() <= 2, "{summary}");
    // A call reuses a connection or takes the one its race made; a race that
    // lost to a released connection leaves its connection idle (scheduling).
    let raced = summary["connections_opened"].as_u64().unwrap() - summary["joined_idle"].as_u64().unwrap();
    assert_eq!(summary["reused"].as_u64().unwrap() + raced, 20, "{summary}");
    assert!(server.connections() <= 2);
}

#[test]
fn errors_are_one_clear_line_and_exit_non_zero() {
    let cases = [
        (vec!["get", "ftp://example.com/"], "unsupported URL scheme"),
        (vec!["get", "--resolve", "nowhere.test:80:127.0.0.1", "http://127.0.0.1:1/"], "cannot connect"),
        (vec!["get", "--runtime", "smol", "http://127.0.0.1:1/"], "cannot connect"),
        (vec!["get", "--runtime", "std", "http://127.0.0.1:1/"], "cannot connect"),
    ];
    for (args, expected) in cases {
        let out = bin().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn demo_outcomes() {
    let out = bin().args(["demo", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let steps = json_lines(&out.stdout);
    assert_eq!(steps.len(), 7);
    let s = |i: usize| &steps[i];
    // 1: the race tried [::1] first, fell back to 127.0.0.1, cancelled the loser.
    let routes: Vec<&str> = s(0)["routes"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(routes[0].contains("[::1]") && routes[1].contains("127.0.0.1"), "{routes:?}");
    assert!(s(0)["cancelled"].as_u64().unwrap() >= 1);
    assert_eq!(s(0)["version"], "HTTP/2.0");
    // 2: reused; 3: coalesced; one server connection throughout.
    assert!(s(1)["acquired"].as_str().unwrap().contains("Pooled"));
    assert!(s(2)["acquired"].as_str().unwrap().contains("Coalesced"));
    assert_eq!(s(2)["server_connections"], 1);
    // 4: the cap held.
    assert_eq!(s(3)["succeeded"], 20);
    assert!(s(3)["server_connections"].as_u64().unwrap() <= 4);
    // 5: one retry, on a fresh connection, and the body arrived.
    assert_eq!(s(4)["body"], "second");
    let retries = s(4)["retries"].as_array().unwrap();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].as_str().unwrap().contains("StaleConnection"));
    // 6: the pool's counters.
    assert_eq!(
        (s(5)["created"].as_u64(), s(5)["reused"].as_u64(), s(5)["coalesced"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    // 7: the Manager warmed both servers first; the first request opened nothing;
    // the restarted server went degraded (backing off) and was re-warmed.
    assert_eq!(s(6)["warm_connections"], serde_json::json!([2, 1]));
    assert!(s(6)["first_request_acquired"].as_str().unwrap().contains("Pooled"));
    assert_eq!(s(6)["first_request_connects"], 0);
    assert_eq!(s(6)["ready_again"], true);
    assert_eq!(s(6)["rewarmed_connections"], 1);
    let changes: Vec<&str> =
        s(6)["readiness_changes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(changes.iter().any(|c| c.contains("degraded") && c.contains("retry in")), "{changes:?}");
    assert!(changes.last().unwrap().contains("ready"), "{changes:?}");
}

/// `--runtime smol` and `--runtime std` fetch the same way as tokio, and the
/// summary counts reuse on each.
#[test]
fn every_runtime_fetches_and_reuses() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    for runtime in ["tokio", "smol", "std"] {
        let out = bin().args(["get", "--runtime", runtime, &url]).output().unwrap();
        assert!(out.status.success(), "{runtime}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, b"hello", "{runtime}");
        let out = bin()
            .args([
                "get",
                "--json-events",
                "--runtime",
                runtime,
                "--requests",
                "20",
                "--concurrency",
                "4",
                &url,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{runtime}: {}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out.stdout);
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["succeeded"], 20, "{runtime}: {summary}");
        let opened = summary["connections_opened"].as_u64().unwrap();
        assert!((1..=4).contains(&opened), "{runtime}: {summary}");
        // Every request went on a connection its race made, or was a reuse (of
        // one made earlier, or of one that joined the pool idle).
        let used = summary["connections_used"].as_u64().unwrap();
        assert!((1..=opened).contains(&used), "{runtime}: {summary}");
        let raced = opened - summary["joined_idle"].as_u64().unwrap();
        assert_eq!(summary["reused"].as_u64().unwrap(), 20 - raced, "{runtime}: {summary}");
        assert_eq!(summary["tcp_connects"].as_u64().unwrap(), opened, "{runtime}: nothing wasted: {summary}");
    }
    // HTTP/2 with prior knowledge on every runtime, the blocking one too.
    for runtime in ["tokio", "smol", "std"] {
        let before = server.records().len();
        let out =
            bin().args(["get", "--runtime", runtime, "--http2-prior-knowledge", &url]).output().unwrap();
        assert!(out.status.success(), "{runtime}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, b"hello", "{runtime}");
        assert_eq!(server.records()[before].version, http::Version::HTTP_2, "{runtime}");
    }
}

/// curl's `--unix-socket` on every runtime: the URL's host in `Host`, the
/// timeline names the path, two URLs share the pooled socket connection;
/// `--local-address` binds the source address; a missing socket is one line
/// naming the path.
#[test]
fn unix_socket_and_socket_options() {
    let path = switchyard_tests::conformance::unix_socket_path("cli");
    let server = TestServer::start(ServerOptions { unix: Some(path.clone()), ..ServerOptions::default() });
    let sock = path.to_str().unwrap();
    for runtime in ["tokio", "smol", "std"] {
        let out = bin()
            .args(["get", "--runtime", runtime, "--unix-socket", sock, "-v"])
            .args(["http://docker.test/hello", "http://docker.test/hello"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{runtime}: {err}");
        assert_eq!(out.stdout, b"hellohello", "{runtime}");
        assert!(err.contains(&format!("via unix:{sock}")), "{runtime}: {err}");
    }
    assert_eq!(server.connections(), 3, "one connection per run, reused by its second URL");
    assert!(server.records().iter().all(|r| r.authority.as_deref() == Some("docker.test")));

    let out =
        bin().args(["get", "--unix-socket", "/nonexistent/sy.sock", "http://x.test/"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/sy.sock"));

    let peers = switchyard_tests::transport::PeerRecorder::start("127.0.0.1".parse().unwrap());
    let url = format!("http://127.0.0.1:{}/", peers.addr.port());
    let out =
        bin().args(["get", "--local-address", "127.0.0.3", "--keepalive-time", "30", &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(peers.peers()[0].ip(), std::net::IpAddr::from([127, 0, 0, 3]));
    let _ = std::fs::remove_file(path);
}

/// `-x socks5://` resolves the origin here (the proxy is asked for the
/// address, so a name only `--resolve` knows works); `-x socks5h://` sends the
/// name (the proxy resolves it).
#[test]
fn socks5_resolves_here_and_socks5h_at_the_proxy() {
    use switchyard_tests::proxy::TestProxy;
    let origin = TestServer::start(ServerOptions::default());
    let port = origin.port();
    let proxy = TestProxy::socks5(std::collections::BTreeMap::from([(
        "proxied.test".to_owned(),
        "127.0.0.1".parse().unwrap(),
    )]));
    let socks = |scheme: &str| format!("{scheme}://127.0.0.1:{}", proxy.addr.port());
    let url = format!("http://local.test:{port}/hello");
    let resolve = format!("local.test:{port}:127.0.0.1");
    let out = bin().args(["get", "-x", &socks("socks5"), "--resolve", &resolve, &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = bin()
        .args(["get", "-x", &socks("socks5h"), &format!("http://proxied.test:{port}/hello")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(proxy.targets(), [format!("127.0.0.1:{port}"), format!("proxied.test:{port}")]);
}

/// Credentials in a URL never reach the output: not in the timeline, the JSON
/// events, or an error; they travel as `Authorization: Basic`.
#[test]
fn get_never_prints_url_credentials() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://ann:hunter2@127.0.0.1:{}/hello", server.port());
    let out = bin().args(["get", "-v", &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = bin().args(["get", "--json-events", &url]).output().unwrap();
    assert_eq!(server.records()[0].authorization.as_deref(), Some("Basic YW5uOmh1bnRlcjI="));
    // Nothing listens on port 1: the error names the URL, without the password.
    let failed =
        bin().args(["get", "--connect-timeout", "1s", "http://ann:hunter2@127.0.0.1:1/"]).output().unwrap();
    assert!(!failed.status.success());
    let failed_text = String::from_utf8_lossy(&failed.stderr);
    assert!(failed_text.contains("ann:***@127.0.0.1:1"), "{failed_text}");
    for output in [&out.stdout, &out.stderr, &json.stdout, &json.stderr, &failed.stdout, &failed.stderr] {
        assert!(!String::from_utf8_lossy(output).contains("hunter2"), "{}", String::from_utf8_lossy(output));
    }
}

/// The proxy environment is honoured by default (curl's variables, with
/// credentials in the proxy URL, which never reach the output); a malformed
/// variable fails with its name; `--no-proxy-env` ignores them; `--proxy` sets one.
#[test]
fn get_uses_the_proxy_environment() {
    use switchyard_tests::proxy::TestProxy;
    let server = TestServer::start(ServerOptions::default());
    let hosts = std::collections::BTreeMap::from([("origin.test".to_owned(), "127.0.0.1".parse().unwrap())]);
    let proxy = TestProxy::http_with_auth(hosts, "ann", "pr0xy-pw");
    let url = format!("http://origin.test:{}/hello", server.port());
    let via = format!("http://ann:pr0xy-pw@127.0.0.1:{}", proxy.addr.port());
    let out =
        bin().args(["get", "-v", &url]).env("http_proxy", &via).env_remove("no_proxy").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");
    assert_eq!(proxy.targets(), [format!("forward origin.test:{}", server.port())]);
    let timeline = String::from_utf8_lossy(&out.stderr);
    assert!(timeline.contains("proxy_select_end") && timeline.contains("(from http_proxy)"), "{timeline}");
    for stream in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(stream).contains("pr0xy-pw"), "{}", String::from_utf8_lossy(stream));
    }
    let bad = bin().args(["get", &url]).env("http_proxy", "ftp://nope:21").output().unwrap();
    assert!(!bad.status.success());
    let text = String::from_utf8_lossy(&bad.stderr);
    assert!(text.contains("environment variable http_proxy"), "{text}");
    // Ignored: origin.test cannot be resolved without the proxy.
    let ignored =
        bin().args(["get", "--no-proxy-env", &url]).env("http_proxy", "ftp://nope:21").output().unwrap();
    assert!(!String::from_utf8_lossy(&ignored.stderr).contains("environment variable"));
    let flag = bin().args(["get", "--proxy", &via, &url]).env_remove("http_proxy").output().unwrap();
    assert!(flag.status.success(), "{}", String::from_utf8_lossy(&flag.stderr));
}

#[test]
fn get_with_hickory_shows_dns_and_cache_steps() {
    use switchyard_tests::dns::{DnsServer, Zone};
    let server = TestServer::start(ServerOptions::default());
    let zone = Zone { v4: vec!["127.0.0.1".parse().unwrap()], ttl: 300, ..Zone::default() };
    let dns = DnsServer::start([("web.test".to_owned(), zone)]);
    let dns_server = dns.addr().to_string();
    // `/close` ends its connection, so the second URL needs DNS again: the cache answers.
    let first = format!("http://web.test:{}/close", server.port());
    let second = format!("http://web.test:{}/hello", server.port());
    for runtime in ["tokio", "smol"] {
        let before = dns.queries("web.test", "A");
        let out = bin()
            .args(["get", "-v", "--runtime", runtime, "--dns", "hickory", "--dns-server", &dns_server])
            .args([&first, &second])
            .env_remove("http_proxy")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{runtime}: {stderr}");
        assert!(
            stderr.contains("dns_start") && stderr.contains("web.test (A) -> 127.0.0.1"),
            "{runtime}: {stderr}"
        );
        assert!(stderr.contains("web.test (from cache)"), "{runtime}: the second URL's lookup: {stderr}");
        assert_eq!(dns.queries("web.test", "A"), before + 1, "{runtime}: one A query for two URLs");
    }
    // hickory needs an async runtime; a server needs hickory.
    let std = bin().args(["get", "--runtime", "std", "--dns", "hickory", &second]).output().unwrap();
    assert!(!std.status.success());
    assert!(String::from_utf8_lossy(&std.stderr).contains("--dns hickory needs --runtime tokio or smol"));
    let stray = bin().args(["get", "--dns-server", &dns_server, &second]).output().unwrap();
    assert!(!stray.status.success());
    assert!(String::from_utf8_lossy(&stray.stderr).contains("--dns-server needs --dns hickory"));
}

#[test]
fn warm_prints_readiness_as_it_changes() {
    let server = TestServer::start(ServerOptions::default());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let up = format!("http://127.0.0.1:{}", server.port());
    let down = format!("http://127.0.0.1:{dead}");
    let out = bin()
        .args(["warm", "--min", "2", "--for", "1500ms", "--down-after", "1s", "--json", &up, &down])
        .env_remove("http_proxy")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    let of = |url: &str| lines.iter().filter(|l| l["server"] == url).collect::<Vec<_>>();
    let ready = of(&up);
    assert!(ready.iter().any(|l| l["readiness"] == "ready" && l["open"] == 2), "{ready:?}");
    assert_eq!(server.connections(), 2, "two warm connections, no request");
    assert!(server.records().is_empty());
    let refused = of(&down);
    assert!(
        refused
            .iter()
            .any(|l| l["readiness"] == "degraded"
                && l["last_error"].as_str().unwrap_or("").contains("refused")),
        "{refused:?}"
    );
    assert!(refused.iter().any(|l| l["readiness"] == "down"), "down after 1 s: {refused:?}");
}

/// `get` streams the body as it arrives, to `-o FILE` or stdout, on every
/// runtime, over HTTP/1.1 and HTTP/2 (TLS): 24 MiB arrive whole, byte for
/// byte; an output it cannot write is an error naming it.
#[test]
fn get_streams_large_bodies_to_a_file_and_stdout() {
    let ca = switchyard_tests::certs::TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let server = TestServer::start(options);
    let dir = std::env::temp_dir().join(format!("switchyard-cli-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let size = 24 << 20;
    let url = format!("https://a.test:{}/bytes/{size}", server.port());
    let resolve = format!("a.test:{}:127.0.0.1", server.port());
    let ca_arg = ca_file.to_str().unwrap();
    for (runtime, version) in
        [("tokio", "--http2"), ("smol", "--http2"), ("tokio", "--http1.1"), ("std", "--http1.1")]
    {
        let what = format!("{runtime} {version}");
        let out_file = dir.join(format!("{runtime}{version}.bin"));
        let args = ["get", "--runtime", runtime, version, "--cacert", ca_arg, "--resolve", &resolve];
        let out = bin().args(args).args(["-o", out_file.to_str().unwrap(), &url]).output().unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let written = std::fs::read(&out_file).unwrap();
        assert_eq!(written.len(), size, "{what}");
        assert!(written.iter().all(|b| *b == b'x'), "{what}");
        let out = bin().args(args).arg(&url).output().unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout.len(), size, "{what}: stdout");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("200 OK"), "{what}: the status on stderr: {stderr}");
    }
    let nowhere = dir.join("no/such/dir/out.bin");
    let out = bin()
        .args(["get", "--cacert", ca_arg, "--resolve", &resolve, "-o", nowhere.to_str().unwrap(), &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot write") && stderr.contains("out.bin"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gateway`: requests by `Host` and in absolute form reach the declared
/// server over its warm connection, an undeclared host is 403, each request is
/// one JSON access-log line, and SIGTERM stops it cleanly.
#[test]
fn gateway_forwards_to_declared_servers_and_stops_on_sigterm() {
    use std::io::{BufRead, Read, Write};
    let server = TestServer::start(ServerOptions::default());
    let up = format!("127.0.0.1:{}", server.port());
    let mut child = bin()
        .args(["gateway", "--listen", "127.0.0.1:0", "--server", &format!("http://{up}=1"), "--json"])
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let listen =
        first.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).expect(&first).to_owned();
    let ask = |request: String| {
        let mut s = std::net::TcpStream::connect(&listen).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let by_host = ask(format!("GET /hello HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"));
    assert!(by_host.starts_with("HTTP/1.1 200") && by_host.ends_with("hello"), "{by_host}");
    let absolute = ask(format!("GET http://{up}/hello HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"));
    assert!(absolute.starts_with("HTTP/1.1 200"), "{absolute}");
    let refused = ask("GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n".to_owned());
    assert!(refused.starts_with("HTTP/1.1 403") && refused.contains("other.test"), "{refused}");
    assert_eq!(server.connections(), 1, "both requests rode the warm connection");
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit: {:?}", out.status);
    let lines = json_lines(&out.stdout);
    let statuses: Vec<_> = lines.iter().map(|l| l["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [200, 200, 403], "{lines:?}");
    assert_eq!(lines[0]["connection"], lines[1]["connection"], "one upstream connection: {lines:?}");
    assert!(lines[0]["connection"].as_str().is_some_and(|c| c.starts_with("conn#")), "{lines:?}");
    assert!(lines[2]["refused"].as_str().is_some_and(|r| r.contains("other.test")), "{lines:?}");
}

/// `gateway --threads 3 --no-access-log`: three workers share the port
/// (`SO_REUSEPORT`), each with its own warm connection; every request is
/// answered, nothing is logged, and SIGTERM stops every worker.
#[test]
fn gateway_workers_share_the_port_and_stop_together() {
    use std::io::{BufRead, Read, Write};
    let server = TestServer::start(ServerOptions::default());
    let up = format!("127.0.0.1:{}", server.port());
    let mut child = bin()
        .args(["gateway", "--listen", "127.0.0.1:0", "--server", &format!("http://{up}=1"), "--threads", "3"])
        .arg("--no-access-log")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.contains("(3 threads)"), "{first}");
    let listen =
        first.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).expect(&first).to_owned();
    for i in 0..60 {
        let mut s = std::net::TcpStream::connect(&listen).unwrap();
        write!(s, "GET /hello HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("hello"), "request {i}: {out}");
    }
    // One warm connection per worker (each Manager keeps its own minimum).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.connections() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(server.connections(), 3);
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit: {:?}", out.status);
    assert!(out.stdout.is_empty(), "no access log: {}", String::from_utf8_lossy(&out.stdout));
    // A listen address that cannot be bound fails before any worker starts.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let out = bin()
        .args(["gateway", "--listen", &busy, "--server", &format!("http://{up}"), "--threads", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot listen on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--metrics` after a `-n/-c` run: the pool per server in Prometheus text,
/// OpenTelemetry's names, on every runtime.
#[test]
fn get_metrics_prints_prometheus_text_per_server() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    for runtime in ["tokio", "smol", "std"] {
        let out = bin()
            .args(["get", "--runtime", runtime, "--requests", "6", "--concurrency", "2", "--metrics", &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let labels =
            format!("server_address=\"127.0.0.1\",server_port=\"{}\",url_scheme=\"http\"", server.port());
        let value = |series: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
                .unwrap_or_else(|| panic!("{runtime}: no {series} in\n{text}"))
        };
        assert_eq!(value(&format!("http_client_calls_total{{{labels}}}")), 6, "{runtime}");
        let created = value(&format!("http_client_connections_created_total{{{labels}}}"));
        assert!((1..=2).contains(&created), "{runtime}: {created} connections for 2 callers");
        assert_eq!(
            value(&format!("http_client_open_connections{{{labels},http_connection_state=\"active\"}}")),
            0
        );
        assert_eq!(
            value(&format!("http_client_open_connections{{{labels},http_connection_state=\"idle\"}}")),
            created
        );
        // Each call either reused a connection or took the one its own race
        // made; a race that lost to a released connection leaves its
        // connection idle unused (how often depends on scheduling, so the
        // count is read, not assumed).
        let (joined, wasted) =
            (value("switchyard_pool_joined_idle_total"), value("switchyard_pool_wasted_total"));
        assert_eq!(wasted, 0, "{runtime}: one route, nothing to throw away");
        assert!(joined < created, "{runtime}: at least one call used its own connection");
        assert_eq!(value("switchyard_pool_reused_total"), 6 - (created - joined), "{runtime}");
        assert!(text.contains("# TYPE http_client_calls_total counter"), "{text}");
    }
}

// ---- curl's habits (#35) ----

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().arg("--no-proxy-env").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `switchyard URL` is `switchyard get URL`; -H, -X, -d (@file, stdin),
/// --data-binary and -I reach the server as curl sends them.
#[test]
fn curl_request_flags_reach_the_server() {
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());
    let (code, out, err) =
        run(&["-s", "-H", "X-One: 1", "-H", "User-Agent: curl-habit", &format!("{base}/headers")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("x-one: 1") && out.contains("user-agent: curl-habit"), "{out}");
    assert!(err.is_empty(), "-s prints nothing on stderr: {err}");

    let (code, out, err) = run(&["-d", "a=1", "-d", "b=2", &format!("{base}/echo")]);
    assert_eq!((code, out.as_str()), (0, "a=1&b=2"), "{err}");
    let (_, out, _) = run(&["-d", "x=1", &format!("{base}/headers")]);
    assert!(out.contains("content-type: application/x-www-form-urlencoded"), "{out}");

    let dir = std::env::temp_dir().join(format!("switchyard-cli-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("body.txt");
    std::fs::write(&file, "k=v\r\nw=z\n").unwrap();
    let at = format!("@{}", file.display());
    let (_, out, _) = run(&["-d", &at, &format!("{base}/echo")]);
    assert_eq!(out, "k=vw=z");
    let (_, out, _) = run(&["--data-binary", &at, "-X", "PUT", &format!("{base}/echo")]);
    assert_eq!(out, "k=v\r\nw=z\n");
    let mut child = bin()
        .args(["--no-proxy-env", "-d", "@-", &format!("{base}/echo")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"from=stdin\n").unwrap();
    drop(child.stdin.take());
    let piped = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&piped.stdout), "from=stdin");
    // curl's way: a warning, and an empty body is posted.
    let (code, out, err) = run(&["-d", "@/no/such/file", &format!("{base}/echo")]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("Couldn't read data from file"), "{err}");

    let (code, out, err) = run(&["-I", &format!("{base}/hello")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("content-length: 5\r\n"), "{out:?}");
    assert!(out.ends_with("\r\n\r\n"), "the head only: {out:?}");
    let (_, out, _) = run(&["-i", &format!("{base}/hello")]);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("\r\n\r\nhello"), "{out:?}");
    let (_, out, _) = run(&["-X", "DELETE", &format!("{base}/x")]);
    assert_eq!(out, "/x");

    let methods: Vec<String> = server.records().iter().map(|r| r.method.clone()).collect();
    for m in ["GET", "POST", "PUT", "HEAD", "DELETE"] {
        assert!(methods.iter().any(|x| x == m), "{m} never sent: {methods:?}");
    }
    let (code, _, err) = run(&["-H", "no colon", &format!("{base}/")]);
    assert_eq!(code, 2, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// curl's exit codes: 6 DNS, 7 refused, 28 timeout, 60 untrusted
/// certificate, 22 with -f on a 404, 3 a malformed URL; each message one line
/// naming the URL once, the whole chain with -v.
#[test]
fn exit_codes_are_curls() {
    let server = TestServer::start(ServerOptions::default());
    let ca = switchyard_tests::certs::TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let tls = TestServer::start(options);
    let refused = format!("http://127.0.0.1:{}/", switchyard_tests::net::refused_port());
    let slow = format!("http://127.0.0.1:{}/sleep/5000", server.port());
    let resolve = format!("a.test:{}:127.0.0.1", tls.port());
    let untrusted = format!("https://a.test:{}/hello", tls.port());
    let missing = format!("http://127.0.0.1:{}/status/404", server.port());
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["http://nowhere.invalid/"], 6, "cannot resolve nowhere.invalid"),
        (vec![&refused], 7, "cannot connect to 127.0.0.1"),
        (vec!["-m", "0.3", &slow], 28, "timed out"),
        (vec!["--resolve", &resolve, &untrusted], 60, "certificate"),
        (vec!["-f", &missing], 22, "returned error: 404"),
        (vec!["http://[::1/"], 3, "(3)"),
        (vec!["-g", "http://[::1/"], 3, "not a URL"),
        (vec!["ftp://x/"], 1, "unsupported URL scheme"),
    ];
    for (args, expected, words) in cases {
        for runtime in ["tokio", "std"] {
            let mut all = vec!["--runtime", runtime];
            all.extend(&args);
            let (code, out, err) = run(&all);
            assert_eq!(code, expected, "{all:?}: {err}");
            assert!(err.contains(words), "{all:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{all:?}: one line: {err}");
            let url = args.last().unwrap();
            if !url.contains('[') {
                assert_eq!(err.matches(url.split('?').next().unwrap()).count(), 1, "the URL once: {err}");
            }
            assert!(err.starts_with(&format!("switchyard: ({expected}) ")), "{err}");
            if expected == 22 {
                assert!(out.is_empty(), "-f prints no body: {out}");
            }
        }
    }
    // -v: the whole chain (and the timeline).
    let (code, _, err) = run(&["-v", &refused]);
    assert_eq!(code, 7);
    assert!(err.contains("call_failed") && err.contains("os error"), "{err}");
    // -s hides the error, -S shows it again.
    assert!(run(&["-s", &refused]).2.is_empty());
    assert!(run(&["-sS", &refused]).2.contains("(7)"));
    // --max-redirs: 47 past it.
    let chain = format!("http://127.0.0.1:{}/redirect/5", server.port());
    let (code, _, err) = run(&["-L", "--max-redirs", "2", &chain]);
    assert_eq!(code, 47, "{err}");
    assert_eq!(run(&["-L", "--max-redirs", "6", &chain]).0, 0);
}

/// Several URLs: every one is tried, the exit code is the last one's (curl's
/// rule: a failure followed by a success exits 0).
#[test]
fn every_url_is_tried_and_the_last_decides() {
    let server = TestServer::start(ServerOptions::default());
    let ok = format!("http://127.0.0.1:{}/hello", server.port());
    let refused = format!("http://127.0.0.1:{}/", switchyard_tests::net::refused_port());
    let (code, out, err) = run(&[&refused, &ok, "http://nowhere.invalid/", &ok]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hellohello");
    assert!(err.contains("(7)") && err.contains("(6)"), "{err}");
    assert_eq!(server.records().len(), 2);
    let (code, _, _) = run(&["http://nowhere.invalid/", &refused]);
    assert_eq!(code, 7);
    let (code, _, _) = run(&[&refused, "http://nowhere.invalid/"]);
    assert_eq!(code, 6);
}

/// -L across two origins: the same-origin hop reuses the connection (-v
/// shows `Pooled`), the cross-origin one drops Authorization; a POST turns
/// into a GET on 302 and stays a POST on 307.
#[test]
fn location_follows_redirects_on_the_same_pool() {
    let a = TestServer::start(ServerOptions::default());
    let b = TestServer::start(ServerOptions::default());
    let to_b = format!("http://127.0.0.1:{}/hello", b.port());
    // a: /redirect/1 -> /redirect/0 -> /hello (same origin), then /goto to b.
    let (code, out, err) = run(&[
        "-v",
        "-L",
        "-H",
        "Authorization: Bearer t",
        &format!("http://127.0.0.1:{}/redirect/1", a.port()),
    ]);
    assert_eq!((code, out.as_str()), (0, "hello"), "{err}");
    assert!(err.contains("Pooled"), "the same-origin hop reuses: {err}");
    assert!(err.contains("following to"), "{err}");
    assert_eq!(a.connections(), 1);
    assert!(a.records().iter().all(|r| r.authorization.as_deref() == Some("Bearer t")));

    let cross = format!("http://127.0.0.1:{}/goto/302?{to_b}", a.port());
    let (code, out, err) = run(&["-L", "-H", "Authorization: Bearer t", &cross]);
    assert_eq!((code, out.as_str()), (0, "hello"), "{err}");
    assert_eq!(b.records().len(), 1);
    assert_eq!(b.records()[0].authorization, None, "dropped on the hop to another origin");

    let echo_b = format!("http://127.0.0.1:{}/echo", b.port());
    for (status, method, body) in
        [("302", "GET", ""), ("303", "GET", ""), ("307", "POST", "x=1"), ("308", "POST", "x=1")]
    {
        let url = format!("http://127.0.0.1:{}/goto/{status}?{echo_b}", a.port());
        let (code, out, err) = run(&["-L", "-d", "x=1", &url]);
        assert_eq!((code, out.as_str()), (0, body), "{status}: {err}");
        assert_eq!(b.records().last().unwrap().method, method, "{status}");
    }
    // Without -L the redirect is the answer.
    let (code, out, _) = run(&["-i", &cross]);
    assert_eq!(code, 0);
    assert!(out.starts_with("HTTP/1.1 302 Found\r\n") && out.contains("location: "), "{out}");
    // -i with -L prints every hop's head.
    let (_, out, _) = run(&["-L", "-i", &cross]);
    assert_eq!(out.matches("HTTP/1.1 ").count(), 2, "{out}");
}

/// -w: every variable filled in, the times numeric and ordered.
#[test]
fn write_out_fills_in_curls_variables() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://localhost.test:{}/redirect/0", server.port());
    let resolve = format!("localhost.test:{}:127.0.0.1", server.port());
    let format = "%{http_code}|%{http_version}|%{remote_ip}|%{remote_port}|%{num_connects}|%{num_redirects}|%{time_namelookup}|%{time_connect}|%{time_appconnect}|%{time_starttransfer}|%{time_total}|%{size_download}|%{connection_id}|%{connection_source}|%{attempts}|%{url_effective}\\n";
    let (code, out, err) = run(&["-s", "-L", "--resolve", &resolve, "-o", "/dev/null", "-w", format, &url]);
    assert_eq!(code, 0, "{err}");
    let line = out.trim_end();
    let v: Vec<&str> = line.split('|').collect();
    assert_eq!(v.len(), 16, "{line}");
    assert_eq!(&v[..6], ["200", "1.1", "127.0.0.1", &server.port().to_string(), "1", "1"], "{line}");
    let times: Vec<f64> =
        v[6..11].iter().map(|t| t.parse().unwrap_or_else(|_| panic!("{t} in {line}"))).collect();
    assert!(times[0] > 0.0 && times[1] > 0.0, "DNS and connect happened: {line}");
    assert_eq!(times[2], 0.0, "no TLS: {line}");
    assert!(times[0] <= times[1] && times[1] <= times[3] && times[3] <= times[4], "ordered: {line}");
    assert_eq!(v[11], "5");
    assert!(!v[12].is_empty(), "{line}");
    assert_eq!(v[13], "pooled", "the hop after the redirect reused: {line}");
    assert_eq!(v[14], "1");
    assert!(v[15].ends_with("/hello"), "{line}");
    // TLS: time_appconnect after time_connect; HTTP/2 by ALPN.
    let ca = switchyard_tests::certs::TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let tls = TestServer::start(options);
    let dir = std::env::temp_dir().join(format!("switchyard-cli-w-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let (code, out, err) = run(&[
        "--cacert",
        ca_file.to_str().unwrap(),
        "--resolve",
        &format!("a.test:{}:127.0.0.1", tls.port()),
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{time_connect} %{time_appconnect} %{connection_source}",
        &format!("https://a.test:{}/hello", tls.port()),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("HTTP/2 200 OK"), "status lines say HTTP/2: {err}");
    let v: Vec<&str> = out.split(' ').collect();
    assert_eq!((v[0], v[3]), ("2", "new"), "{out}");
    let (connect, app): (f64, f64) = (v[1].parse().unwrap(), v[2].parse().unwrap());
    assert!(connect > 0.0 && app > connect, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// -k accepts an untrusted certificate and warns every time; --http2 on
/// http:// uses HTTP/1.1 (and says so with -v); prior knowledge against an
/// HTTP/1.1 server says what to do.
#[test]
fn insecure_and_http_versions() {
    let ca = switchyard_tests::certs::TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let tls = TestServer::start(options);
    let resolve = format!("a.test:{}:127.0.0.1", tls.port());
    let url = format!("https://a.test:{}/hello", tls.port());
    for _ in 0..2 {
        let (code, out, err) = run(&["-k", "--resolve", &resolve, &url]);
        assert_eq!((code, out.as_str()), (0, "hello"), "{err}");
        assert!(err.contains("warning") && err.contains("NOT verified"), "{err}");
    }
    let plain = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", plain.port());
    let (code, _, err) = run(&["--http2", "-v", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("HTTP/1.1 200 OK"), "{err}");
    assert!(err.contains("--http2-prior-knowledge"), "-v says why HTTP/1.1: {err}");
    assert_eq!(plain.records()[0].version, http::Version::HTTP_11);
    // An HTTP/1.1-only server, given prior knowledge, answers the preface
    // with a 400.
    let answer = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec();
    let old = switchyard_tests::net::RawServer::start(vec![answer.clone(), answer]);
    let url = format!("http://127.0.0.1:{}/", old.addr.port());
    let (code, _, err) = run(&["--http2-prior-knowledge", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("only HTTP/1.1") && err.trim_end().lines().count() == 1, "{err}");
    assert!(!err.contains("frame"), "the frame-level cause is for -v: {err}");
    assert!(run(&["--h2-prior-knowledge", &url]).2.contains("only HTTP/1.1"), "the old name still parses");
}

/// -n/-c with -v: the first call's timeline and every call that opened a
/// connection, then the summary; a single --json fetch ends with a result.
#[test]
fn runs_show_timelines_and_json_ends_with_a_result() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    let (code, _, err) = run(&["-v", "--requests", "6", "--concurrency", "2", &url]);
    assert_eq!(code, 0, "{err}");
    let opened = err.matches("(opened a connection)").count();
    assert!((1..=2).contains(&opened), "{err}");
    // A call whose own attempt lost to a connection another call released
    // is served by that one and keeps its attempt idle for the pool: the
    // server then sees a connection no call "opened". How often depends on
    // scheduling, so only the bounds are guaranteed: every opened connection
    // reached the server, and two callers never need more than two.
    assert!((opened..=2).contains(&server.connections()), "{} connections: {err}", server.connections());
    assert!(err.contains("call_start") && err.contains("6 requests: 6 ok"), "{err}");

    let out = bin().args(["--no-proxy-env", "--json-events", &url]).output().unwrap();
    let lines = json_lines(&out.stdout);
    let result = &lines.last().unwrap()["result"];
    assert_eq!(result["http_code"], "200", "{result}");
    assert_eq!(result["connection_source"], "new");
    assert!(result["time_total"].as_f64().unwrap() > 0.0);
    let refused = format!("http://127.0.0.1:{}/", switchyard_tests::net::refused_port());
    let out = bin().args(["--no-proxy-env", "--json-events", &refused]).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.last().unwrap()["result"]["error"]["exit_code"], 7);
}

/// --har: a HAR 1.2 log with an entry per call (every hop, every -n call),
/// each with timings, serverIPAddress and connection.
#[test]
fn har_records_every_call() {
    let server = TestServer::start(ServerOptions::default());
    let dir = std::env::temp_dir().join(format!("switchyard-cli-har-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let har = dir.join("out.har");
    let url = format!("http://127.0.0.1:{}/redirect/1", server.port());
    let refused = format!("http://127.0.0.1:{}/", switchyard_tests::net::refused_port());
    let (code, _, err) = run(&["-s", "-L", "--har", har.to_str().unwrap(), &url, &refused]);
    assert_eq!(code, 7, "{err}");
    let log: serde_json::Value = serde_json::from_slice(&std::fs::read(&har).unwrap()).unwrap();
    assert_eq!(log["log"]["version"], "1.2");
    let entries = log["log"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "three hops and the failed call: {log}");
    let statuses: Vec<u64> = entries.iter().map(|e| e["response"]["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [302, 302, 200, 0]);
    for e in &entries[..3] {
        assert_eq!(e["serverIPAddress"], "127.0.0.1", "{e}");
        assert!(e["connection"].is_string(), "{e}");
        for phase in ["blocked", "dns", "connect", "ssl", "send", "wait", "receive"] {
            assert!(e["timings"][phase].is_number(), "{phase} in {e}");
        }
        assert!(e["startedDateTime"].as_str().unwrap().ends_with('Z'));
        let sum: f64 = ["blocked", "dns", "connect", "send", "wait", "receive"]
            .iter()
            .map(|p| e["timings"][p].as_f64().unwrap().max(0.0))
            .sum();
        assert!((e["time"].as_f64().unwrap() - sum).abs() < 1e-6, "{e}");
    }
    assert!(entries[0]["timings"]["connect"].as_f64().unwrap() >= 0.0, "the first hop connected");
    assert_eq!(entries[1]["timings"]["connect"], -1.0, "the second reused");
    assert_eq!(
        entries[0]["response"]["redirectURL"],
        format!("http://127.0.0.1:{}/redirect/0", server.port())
    );
    assert!(entries[3]["_error"].as_str().unwrap().contains("refused"), "{}", entries[3]);
    let (code, _, err) = run(&[
        "--requests",
        "5",
        "--concurrency",
        "2",
        "--har",
        har.to_str().unwrap(),
        &format!("http://127.0.0.1:{}/hello", server.port()),
    ]);
    assert_eq!(code, 0, "{err}");
    let log: serde_json::Value = serde_json::from_slice(&std::fs::read(&har).unwrap()).unwrap();
    assert_eq!(log["log"]["entries"].as_array().unwrap().len(), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Side by side with curl (required in CI, as the interop suite's servers):
/// the same argument vectors against the same loopback server, comparing exit
/// codes, stdout bytes and what the server saw (its `/headers` route echoes
/// the request's fields). Each case is a curl habit: a URL without a scheme,
/// `-o -`, `Accept: */*` by default, `-H "Name:"` removing a header the
/// client would add, `Name;` sending it empty.
#[test]
fn matches_curl_on_everyday_invocations() {
    let server = TestServer::start(ServerOptions::default());
    let port = server.port();
    let at = |path: &str| format!("127.0.0.1:{port}{path}");
    let http = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let cases: Vec<Vec<String>> = vec![
        vec![at("/hello")],
        vec![format!("localhost:{port}/hello")],
        vec!["-s".into(), "-o".into(), "-".into(), http("/hello")],
        vec!["-H".into(), "User-Agent: same".into(), http("/headers")],
        vec!["-H".into(), "User-Agent:".into(), http("/headers")],
        vec!["-H".into(), "User-Agent: same".into(), "-H".into(), "Accept:".into(), at("/headers")],
        vec![
            "-H".into(),
            "User-Agent: same".into(),
            "-H".into(),
            "Accept: text/plain".into(),
            http("/headers"),
        ],
        vec!["-H".into(), "User-Agent: same".into(), "-H".into(), "X-Empty;".into(), http("/headers")],
        vec!["-H".into(), "User-Agent: same".into(), "-d".into(), "a=1".into(), http("/headers")],
        // -w: curl's variables that need no clock, and an unknown one (nothing in its place).
        vec![
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}|%{response_code}|%{method}|%{scheme}|%{content_type}|%{exitcode}|%{errormsg}|[%{nope}]|%header{content-length}\\n".into(),
            http("/hello"),
        ],
        vec!["-o".into(), "/dev/null".into(), "-w".into(), "%{method} %{response_code} %{exitcode}".into(), "-I".into(), http("/status/404")],
    ];
    let curl_there = Command::new("curl").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(curl_there, "curl is needed for this comparison (CI installs it)");
    for args in cases {
        let curl = Command::new("curl").arg("-s").args(&args).output().unwrap();
        let ours = bin().args(&args).output().unwrap();
        assert_eq!(
            ours.status.code(),
            curl.status.code(),
            "{args:?}: exit code; ours: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&curl.stdout),
            "{args:?}: stdout (what the server saw, for /headers)"
        );
    }
}

/// HTTP/2 heads as curl prints them: `HTTP/2 200 ` (no reason phrase), the
/// fields lower-case as they arrive, CRLF — the same bytes as curl's against
/// nghttpd over TLS with ALPN h2 (its `date` field aside).
#[test]
fn http2_heads_print_as_curl_prints_them() {
    let server = switchyard_tests::interop::Nghttpd::start(true, None)
        .expect("nghttpd (nghttp2-server; CI installs it)");
    let dir = std::env::temp_dir().join(format!("switchyard-cli-h2heads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &server.ca.cert_pem).unwrap();
    let base = format!("https://localhost:{}", server.port);
    let resolve = format!("localhost:{}:127.0.0.1", server.port);
    let without_date = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("date:"))
            .collect::<String>()
    };
    for args in [
        vec!["-sI".to_owned(), format!("{base}/hello")],
        vec!["-si".to_owned(), format!("{base}/hello")],
        vec!["-si".to_owned(), format!("{base}/missing")],
        vec![
            "-s".to_owned(),
            "-D".to_owned(),
            "-".to_owned(),
            "-o".to_owned(),
            "/dev/null".to_owned(),
            format!("{base}/hello"),
        ],
        vec![
            "-s".to_owned(),
            "-o".to_owned(),
            "/dev/null".to_owned(),
            "-w".to_owned(),
            "%{http_version} %{response_code} %{size_download} %{num_headers}".to_owned(),
            format!("{base}/hello"),
        ],
    ] {
        let mut all = vec![
            "--http2".to_owned(),
            "--cacert".to_owned(),
            ca_file.display().to_string(),
            "--resolve".to_owned(),
            resolve.clone(),
        ];
        all.extend(args);
        let ours = bin().args(&all).output().unwrap();
        let curl = Command::new("curl").args(&all).output().unwrap();
        assert_eq!(ours.status.code(), curl.status.code(), "{all:?}");
        let (ours, theirs) = (without_date(&ours.stdout), without_date(&curl.stdout));
        assert_eq!(ours, theirs, "{all:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Side by side with curl against a real nginx (Debian's nginx-light, as
/// the interop suite starts it): plain HTTP/1.1 and TLS with ALPN (HTTP/2),
/// heads as nginx writes them, ranges, resume, uploads to its echo module,
/// `-w`, and through squid and microsocks — the same exit code and stdout
/// bytes (the `Date` field aside).
#[test]
fn matches_curl_against_nginx() {
    let nginx = switchyard_tests::interop::Nginx::start(switchyard_tests::interop::NginxOptions::default())
        .expect("nginx (nginx-light; CI installs it)");
    let dir = std::env::temp_dir().join(format!("switchyard-cli-nginx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &nginx.ca.cert_pem).unwrap();
    std::fs::write(dir.join("up.txt"), "uploaded\n").unwrap();
    let plain = |p: &str| format!("http://127.0.0.1:{}{p}", nginx.plain_port);
    let tls = |p: &str| format!("https://localhost:{}{p}", nginx.tls_port);
    let resolve = format!("localhost:{}:127.0.0.1", nginx.tls_port);
    let ca = ca_file.display().to_string();
    let with_tls = |mut a: Vec<String>| {
        a.splice(0..0, ["--cacert".to_owned(), ca.clone(), "--resolve".to_owned(), resolve.clone()]);
        a
    };
    let s = |a: &[&str]| a.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let w = "%{http_code} %{http_version} %{size_download} %{content_type} %{num_headers} %{scheme}\\n";
    let cases = vec![
        s(&["-s", &plain("/hello")]),
        s(&["-sI", &plain("/hello")]),
        s(&["-si", &plain("/hello")]),
        s(&["-si", &plain("/missing")]),
        s(&["-sf", &plain("/missing")]),
        s(&["-s", "-r", "1-3", &plain("/hello")]),
        s(&["-si", "-r", "1-3", &plain("/hello")]),
        s(&["-s", "-o", "/dev/null", "-w", w, &plain("/big")]),
        s(&["-s", "-d", "a=1&b=2", &plain("/echo")]),
        s(&["-s", "-T", "up.txt", &plain("/echo")]),
        s(&["-s", "--json", "{\"k\":1}", &plain("/echo")]),
        s(&["-s", "--data-urlencode", "q=a b", &plain("/echo")]),
        s(&["-s", "-X", "DELETE", &plain("/hello")]),
        s(&["-s", "--http1.1", "-D", "-", "-o", "/dev/null", &plain("/hello")]),
        with_tls(s(&["-s", &tls("/hello")])),
        with_tls(s(&["-sI", &tls("/hello")])),
        with_tls(s(&["-si", "--http1.1", &tls("/hello")])),
        with_tls(s(&["-s", "-o", "/dev/null", "-w", w, &tls("/big")])),
        with_tls(s(&["-s", "-o", "/dev/null", "-w", w, "--http1.1", &tls("/big")])),
        with_tls(s(&["-s", "-d", "over=h2", &tls("/echo")])),
        s(&["-s", "https://localhost:1/"]),
    ];
    // Through squid (CONNECT tunnels, absolute form) and microsocks (SOCKS5).
    let squid = switchyard_tests::interop::Squid::start().expect("squid (CI installs it)");
    let socks = switchyard_tests::interop::Microsocks::start().expect("microsocks (CI installs it)");
    let squid_url = format!("http://127.0.0.1:{}", squid.port);
    let socks_at = format!("127.0.0.1:{}", socks.port);
    let mut cases = cases;
    cases.extend([
        with_tls(s(&["-s", "-x", &squid_url, "-w", "[%{http_connect}]", &tls("/hello")])),
        with_tls(s(&["-s", "-x", &squid_url, &tls("/missing")])),
        s(&["-s", "-x", &squid_url, "-w", "[%{http_connect} %{http_code}]", &plain("/hello")]),
        s(&["-s", "-x", &squid_url, "-d", "via=squid", &plain("/echo")]),
        s(&["-s", "--noproxy", "127.0.0.1", "-x", &squid_url, &plain("/hello")]),
        s(&["-s", "--socks5", &socks_at, &plain("/hello")]),
        s(&["-s", "--socks5-hostname", &socks_at, &plain("/hello")]),
        with_tls(s(&["-s", "--socks5-hostname", &socks_at, "-w", "[%{http_version}]", &tls("/hello")])),
    ]);
    let without_date = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .split_inclusive('\n')
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .collect::<String>()
    };
    for args in cases {
        let ours = bin().current_dir(&dir).args(&args).output().unwrap();
        let curl = Command::new("curl").current_dir(&dir).args(&args).output().unwrap();
        assert_eq!(
            ours.status.code(),
            curl.status.code(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        assert_eq!(without_date(&ours.stdout), without_date(&curl.stdout), "{args:?}");
    }
    // -C -: a file that holds the first two bytes is completed.
    for program in [Command::new("curl"), bin()] {
        let mut program = program;
        std::fs::write(dir.join("part.txt"), "he").unwrap();
        let out = program
            .current_dir(&dir)
            .args(["-s", "-C", "-", "-o", "part.txt", &plain("/hello")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(std::fs::read_to_string(dir.join("part.txt")).unwrap(), "hello");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `-w '%{json}'`: every key curl 7.88 writes (but `certs` and `num_certs`,
/// which need the certificate chain) with a value of the same JSON type,
/// and the values that need no clock equal.
#[test]
fn write_out_json_has_curls_keys_and_types() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    let args = ["-s", "-o", "/dev/null", "-w", "%{json}", url.as_str()];
    let parse = |out: std::process::Output| -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap().as_object().unwrap().clone()
    };
    let theirs = parse(Command::new("curl").args(args).output().unwrap());
    let ours = parse(bin().args(args).output().unwrap());
    let kind = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    };
    for (key, value) in &theirs {
        if key == "certs" || key == "num_certs" {
            continue;
        }
        let mine = ours.get(key).unwrap_or_else(|| panic!("{key} missing: {ours:?}"));
        if key != "curl_version" {
            assert_eq!(kind(mine), kind(value), "{key}: ours {mine}, curl {value}");
        }
        if !key.starts_with("time_")
            && !key.starts_with("speed_")
            && key != "local_port"
            && key != "curl_version"
            && key != "size_request"
        {
            assert_eq!(mine, value, "{key}");
        }
    }
}

/// The CLI over HTTP/3 (`--http3-only`, `--http3`), against aioquic and
/// ngtcp2's server on loopback UDP.
mod http3 {
    use super::bin;
    use switchyard_tests::h3::H3Server;

    /// `switchyard get` with `args`, trusting `server`'s CA: (exit code,
    /// stdout, stderr).
    fn get(server: &H3Server, args: &[&str]) -> (Option<i32>, Vec<u8>, String) {
        let dir =
            std::env::temp_dir().join(format!("switchyard-cli-h3-{}-{}", std::process::id(), server.port));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, server.ca_pem()).unwrap();
        let out = bin().arg("get").arg("--cacert").arg(&ca).args(args).output().unwrap();
        (out.status.code(), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    #[test]
    fn http3_only_fetches_from_aioquic() {
        let Some(server) = H3Server::aioquic() else { return };
        let url = format!("https://localhost:{}/bytes/300000", server.port);
        let (code, out, err) =
            get(&server, &["--http3-only", "-s", "-w", "\n%{http_version} %{http_code}", &url]);
        assert_eq!(code, Some(0), "{err}");
        let text = String::from_utf8_lossy(&out);
        let (body, summary) = text.rsplit_once('\n').unwrap();
        assert_eq!(summary, "3 200");
        assert_eq!(body.len(), 300_000);
        assert!(body.bytes().all(|b| b == b'x'));
    }

    #[test]
    fn http3_only_fetches_a_file_from_ngtcp2() {
        let file: Vec<u8> = (0..1_500_000u32).map(|i| (i % 241) as u8).collect();
        let Some(server) = H3Server::ngtcp2(&[], &[("file.bin", &file)]) else { return };
        let url = format!("https://localhost:{}/file.bin", server.port);
        let (code, out, err) = get(&server, &["--http3-only", "-s", &url]);
        assert_eq!(code, Some(0), "{err}");
        assert!(out == file, "{} bytes, byte for byte", out.len());
    }

    #[test]
    fn http3_falls_back_to_tcp_where_udp_is_silent() {
        let Some(h3) = H3Server::aioquic() else { return };
        // A TLS server on TCP; the same port's UDP side never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
        let mut options = switchyard_tests::server::ServerOptions::default();
        options.tls.push((vec!["localhost".into()], h3.leaf(&["localhost"])));
        let _tcp = switchyard_tests::server::TestServer::start_on(listener, options);
        let url = format!("https://localhost:{port}/hello");
        let resolve = format!("localhost:{port}:127.0.0.1");
        let (code, out, err) =
            get(&h3, &["--http3", "--resolve", &resolve, "-s", "-w", " %{http_version}", &url]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(String::from_utf8_lossy(&out), "hello 2", "TCP answered, over HTTP/2");
        drop(silent);
    }

    #[test]
    fn http3_on_the_blocking_runtime_is_a_config_error() {
        let out =
            bin().args(["get", "--http3-only", "--runtime", "std", "https://localhost:1/"]).output().unwrap();
        assert_ne!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--http3"), "{:?}", out);
    }
}
