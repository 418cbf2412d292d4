//! Pool metrics as Prometheus text, named after OpenTelemetry's HTTP client
//! semantic conventions (`http.client.open_connections` with its `http.connection.state`
//! attribute, `idle` or `active`), dots as underscores, one series per
//! server (`server_address`, `server_port`, `url_scheme`, as the
//! conventions name them). From a client's `stats_by_address()` and
//! `stats()`:
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `http_client_open_connections{http_connection_state="idle"\|"active"}` | gauge | idle connections, connections carrying exchanges |
//! | `http_client_connecting` | gauge | races and kept attempts in progress |
//! | `http_client_waiting_calls` | gauge | calls waiting for capacity |
//! | `http_client_calls_total` | counter | calls made (retries not counted) |
//! | `http_client_connections_created_total` | counter | connections established |
//! | `http_client_connections_closed_total{reason}` | counter | closes, by reason |
//! | `http_client_retries_total` | counter | retries started |
//! | `http_client_retries_over_budget_total` | counter | retries the budget refused |
//! | `http_client_reused_total` | counter | exchanges carried by a connection after its first |
//! | `http_client_route_ejections_total` | counter | ejections of the server's routes (outlier ejection) |
//!
//! and pool-wide `switchyard_pool_reused_total`, `…_coalesced_total`,
//! `…_tcp_connects_total`, `…_tls_handshakes_total`, `…_joined_idle_total`
//! (connections a racing call made but did not use: it took an existing one
//! first), `…_wasted_total`, `…_dns_refreshes_total`,
//! `…_dns_drained_total`, `…_route_restorations_total`, and the gauge
//! `switchyard_pool_ejected_routes`.
//!
//! With the `metrics` feature, `MetricsListener` records the pool's life
//! through the `metrics` facade instead (any exporter), with the request and
//! connection duration histograms.

use std::fmt::Write as _;

#[cfg(feature = "metrics")]
mod listener;
#[cfg(feature = "metrics")]
pub use listener::MetricsListener;

use switchyard_core::{AddressMetrics, PoolStats};

/// The metrics in Prometheus' text exposition format (version 0.0.4).
///
/// ```
/// # use switchyard_core::{Address, AddressMetrics, AddressStats, PoolStats};
/// # use switchyard_common::metrics;
/// let address = Address::from_uri(&"https://api.test/".parse().unwrap()).unwrap().build().unwrap();
/// let gauges = AddressStats { idle: 2, in_use: 1, open: 3, ..AddressStats::default() };
/// let metrics = AddressMetrics { address, gauges, counters: Default::default() };
/// let text = metrics::prometheus_text(&[metrics], &PoolStats::default());
/// assert!(text.contains(r#"http_client_open_connections{server_address="api.test",server_port="443",url_scheme="https",http_connection_state="idle"} 2"#));
/// ```
#[must_use]
pub fn prometheus_text(by_address: &[AddressMetrics], pool: &PoolStats) -> String {
    let mut out = String::new();
    let labels: Vec<String> = by_address.iter().map(labels).collect();
    let mut family = |name: &str, kind: &str, help: &str, rows: &mut dyn Iterator<Item = (String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (l, v) in rows {
            let _ = writeln!(out, "{name}{{{l}}} {v}");
        }
    };
    let each = |f: &dyn Fn(&AddressMetrics) -> u64| {
        by_address.iter().zip(&labels).map(|(m, l)| (l.clone(), f(m))).collect::<Vec<_>>().into_iter()
    };
    family(
        "http_client_open_connections",
        "gauge",
        "Open connections by state (idle, or active: carrying exchanges).",
        &mut by_address.iter().zip(&labels).flat_map(|(m, l)| {
            [
                (format!("{l},http_connection_state=\"idle\""), m.gauges.idle as u64),
                (format!("{l},http_connection_state=\"active\""), m.gauges.in_use as u64),
            ]
        }),
    );
    family(
        "http_client_connecting",
        "gauge",
        "Connects in progress.",
        &mut each(&|m| m.gauges.connecting as u64),
    );
    family(
        "http_client_waiting_calls",
        "gauge",
        "Calls waiting for capacity.",
        &mut each(&|m| m.gauges.waiters as u64),
    );
    family(
        "http_client_calls_total",
        "counter",
        "Calls made (retries not counted).",
        &mut each(&|m| m.counters.calls),
    );
    family(
        "http_client_connections_created_total",
        "counter",
        "Connections established.",
        &mut each(&|m| m.counters.created),
    );
    family(
        "http_client_connections_closed_total",
        "counter",
        "Connections closed, by reason.",
        &mut by_address.iter().zip(&labels).flat_map(|(m, l)| {
            m.counters
                .closed
                .iter()
                .map(move |(r, n)| (format!("{l},reason=\"{}\"", escape(&r.to_string())), *n))
        }),
    );
    family("http_client_retries_total", "counter", "Retries started.", &mut each(&|m| m.counters.retries));
    family(
        "http_client_retries_over_budget_total",
        "counter",
        "Retries refused by the retry budget.",
        &mut each(&|m| m.counters.retries_over_budget),
    );
    family(
        "http_client_reused_total",
        "counter",
        "Exchanges carried by a connection after its first.",
        &mut each(&|m| m.counters.reused),
    );
    family(
        "http_client_route_ejections_total",
        "counter",
        "Ejections of the server's routes after failures in a row.",
        &mut each(&|m| m.counters.ejections),
    );
    for (name, help, v) in [
        ("switchyard_pool_reused_total", "Calls served by an existing connection.", pool.reused),
        ("switchyard_pool_coalesced_total", "Calls served by a coalesced HTTP/2 connection.", pool.coalesced),
        ("switchyard_pool_tcp_connects_total", "TCP connects started.", pool.tcp_connects),
        ("switchyard_pool_tls_handshakes_total", "TLS handshakes started.", pool.tls_handshakes),
        (
            "switchyard_pool_joined_idle_total",
            "Connections that joined the pool idle: their call took an existing connection first.",
            pool.joined_idle,
        ),
        ("switchyard_pool_wasted_total", "Connects thrown away after TCP completed.", pool.wasted),
        (
            "switchyard_pool_dns_refreshes_total",
            "Names looked up again for pooled connections.",
            pool.dns_refreshes,
        ),
        (
            "switchyard_pool_dns_drained_total",
            "Connections drained because their address left DNS.",
            pool.dns_drained,
        ),
        ("switchyard_pool_route_restorations_total", "Ejected routes restored.", pool.restorations),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
    }
    let name = "switchyard_pool_ejected_routes";
    let _ = writeln!(
        out,
        "# HELP {name} Routes ejected now.\n# TYPE {name} gauge\n{name} {}",
        pool.ejected_routes
    );
    out
}

/// The conventions' server attributes for an Address.
fn labels(m: &AddressMetrics) -> String {
    let a = &m.address;
    let host = a.host().to_string();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let scheme = if a.is_https() { "https" } else { "http" };
    format!("server_address=\"{}\",server_port=\"{}\",url_scheme=\"{scheme}\"", escape(host), a.port())
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::Address;

    #[test]
    fn ejections_reuse_and_ejected_routes_are_exported() {
        let address = Address::from_uri(&"http://a.test:8080/".parse().unwrap()).unwrap().build().unwrap();
        let mut m = AddressMetrics { address, gauges: Default::default(), counters: Default::default() };
        m.counters.ejections = 3;
        m.counters.reused = 7;
        let pool = PoolStats { ejected_routes: 2, restorations: 1, ..PoolStats::default() };
        let text = prometheus_text(&[m], &pool);
        let l = r#"{server_address="a.test",server_port="8080",url_scheme="http"}"#;
        for line in [
            format!("http_client_route_ejections_total{l} 3"),
            format!("http_client_reused_total{l} 7"),
            "switchyard_pool_ejected_routes 2".to_owned(),
            "switchyard_pool_route_restorations_total 1".to_owned(),
            "# TYPE switchyard_pool_ejected_routes gauge".to_owned(),
        ] {
            assert!(text.lines().any(|x| x == line), "{line} missing from\n{text}");
        }
    }
}
