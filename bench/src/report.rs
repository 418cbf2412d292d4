//! Medians, ratios, and the report (markdown for people, JSON for tools).

use std::fmt::Write as _;
use std::process::{Command, Stdio};

use crate::core;
use crate::measure::Sample;

/// One client's medians over the runs.
pub struct Row {
    pub client: &'static str,
    pub runs: usize,
    pub median: Option<Sample>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Row {
    /// The median of each figure over `samples` (none: the client failed).
    pub fn median(client: &'static str, samples: &[Sample]) -> Row {
        let median = (!samples.is_empty()).then(|| Sample {
            rps: median(samples.iter().map(|s| s.rps).collect()),
            p50_us: median(samples.iter().map(|s| s.p50_us).collect()),
            p99_us: median(samples.iter().map(|s| s.p99_us).collect()),
            cpu_us: median(samples.iter().map(|s| s.cpu_us).collect()),
            rss_kib: median(samples.iter().map(|s| s.rss_kib as f64).collect()) as u64,
            vol_k: median(samples.iter().map(|s| s.vol_k).collect()),
            inv_k: median(samples.iter().map(|s| s.inv_k).collect()),
        });
        Row { client, runs: samples.len(), median }
    }
}

/// One scenario's rows; the first row is the limit the others are compared to.
pub struct Scenario {
    pub id: &'static str,
    pub title: String,
    pub server: String,
    pub rows: Vec<Row>,
}

/// Scenario 6's figures.
pub struct Core {
    /// (pooled connections, ns per acquire+release, instructions per acquire+release).
    pub acquire: Vec<(usize, f64, Option<f64>)>,
    /// (ns, instructions) per typical response decode.
    pub decode: (f64, Option<f64>),
}

pub struct Report {
    pub scenarios: Vec<Scenario>,
    pub core: Core,
    pub runs: usize,
    pub requests: usize,
    pub quick: bool,
}

/// Instructions per operation under callgrind, collecting only inside
/// `core::measured`; `None` without valgrind.
fn instructions(kind: &str, size: usize, ops: usize) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null", "--toggle-collect=*core*measured*"])
        .arg(exe)
        .args(["core-ops", kind, &size.to_string(), &ops.to_string()])
        .stdout(Stdio::null())
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.contains("Collected :"))?;
    let total: f64 = line.rsplit(':').next()?.trim().replace(',', "").parse().ok()?;
    (total > 0.0).then(|| total / ops as f64)
}

/// Scenario 6: timed in this process, counted under callgrind.
pub fn core_scenario(quick: bool) -> Core {
    eprintln!("s6: the core alone (acquire+release, HTTP/1.1 decode)");
    let timed_ops = if quick { 20_000 } else { 200_000 };
    let acquire = [10usize, 1_000, 100_000]
        .into_iter()
        .map(|size| {
            let mut setup = core::pool_with(size);
            let ns = core::time_per_op(&mut core::Op::AcquireRelease(&mut setup), timed_ops);
            // Callgrind runs ~50x slower; the 100k pool's setup is skipped in quick mode.
            let ir = if quick && size > 1_000 { None } else { instructions("acquire", size, 2_000) };
            (size, ns, ir)
        })
        .collect();
    let response = core::typical_response();
    let ns = core::time_per_op(&mut core::Op::Decode(&response), timed_ops);
    Core { acquire, decode: (ns, instructions("decode", 0, 2_000)) }
}

fn ratio(a: Option<&Sample>, b: Option<&Sample>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.rps > 0.0 => format!("{:.2}", a.rps / b.rps),
        _ => "–".into(),
    }
}

impl Report {
    fn find<'a>(s: &'a Scenario, client: &str) -> Option<&'a Sample> {
        s.rows.iter().find(|r| r.client == client).and_then(|r| r.median.as_ref())
    }

    /// Every (scenario, client) without a number.
    pub fn missing(&self) -> Vec<String> {
        let mut m: Vec<String> = self
            .scenarios
            .iter()
            .flat_map(|s| {
                s.rows.iter().filter(|r| r.median.is_none()).map(move |r| format!("{}/{}", s.id, r.client))
            })
            .collect();
        // Instruction counts need valgrind; without it scenario 6 is timed only.
        let counted = crate::server::has("valgrind");
        for (size, _, ir) in &self.core.acquire {
            if counted && ir.is_none() && !(self.quick && *size > 1_000) {
                m.push(format!("s6/instructions@{size}"));
            }
        }
        if counted && self.core.decode.1.is_none() {
            m.push("s6/decode-instructions".into());
        }
        let mut required = vec!["s1", "s2", "s3", "s4", "s5", "s7", "s8"];
        if crate::server::has("h2o") {
            required.push("s3-tls");
        }
        for id in required {
            if !self.scenarios.iter().any(|s| s.id == id) {
                m.push(format!("{id} (not run)"));
            }
        }
        m
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# switchyard-bench\n\nMedians of {} run(s); {} requests per measurement (scenario 4: a quarter). \
             Ratios compare requests/s within this run. Waits: the client's voluntary + involuntary \
             context switches per 1 000 requests, summed over its threads (it blocked with nothing \
             to do + it was preempted).\n",
            self.runs, self.requests
        );
        for s in &self.scenarios {
            let _ = writeln!(out, "## {}\n\nServer: {}.\n", s.title, s.server);
            if s.id == "s5" {
                self.eyeballs(&mut out, s);
                continue;
            }
            let limit = s.rows.first().and_then(|r| r.median.as_ref());
            let (hy, rq, ur) = (Self::find(s, "hyper-util"), Self::find(s, "reqwest"), Self::find(s, "ureq"));
            let rss = s.id == "s2";
            let _ = writeln!(
                out,
                "| client | req/s | p50 µs | p99 µs | CPU µs/req | waits /1k req |{} vs {} | vs hyper-util | vs reqwest | vs ureq |",
                if rss { " peak RSS MiB |" } else { "" },
                s.rows[0].client
            );
            let _ = writeln!(
                out,
                "|---|---:|---:|---:|---:|---:|{}---:|---:|---:|---:|",
                if rss { "---:|" } else { "" }
            );
            for r in &s.rows {
                let Some(m) = &r.median else {
                    let _ = writeln!(
                        out,
                        "| {} | failed | | | | |{} | | | |",
                        r.client,
                        if rss { " |" } else { "" }
                    );
                    continue;
                };
                let _ = writeln!(
                    out,
                    "| {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1} + {:.1} |{} {} | {} | {} | {} |",
                    r.client,
                    m.rps,
                    m.p50_us,
                    m.p99_us,
                    m.cpu_us,
                    m.vol_k,
                    m.inv_k,
                    if rss { format!(" {:.1} |", m.rss_kib as f64 / 1024.0) } else { String::new() },
                    ratio(Some(m), limit),
                    ratio(Some(m), hy),
                    ratio(Some(m), rq),
                    ratio(Some(m), ur),
                );
            }
            out.push('\n');
        }
        let _ = writeln!(out, "## 6. The core alone\n");
        let _ = writeln!(
            out,
            "| operation | ns/op (median of 5 batches) | instructions/op (callgrind) |\n|---|---:|---:|"
        );
        for (size, ns, ir) in &self.core.acquire {
            let _ = writeln!(
                out,
                "| acquire + release, {size} pooled connections | {ns:.0} | {} |",
                ir.map_or("–".into(), |i| format!("{i:.0}"))
            );
        }
        let (ns, ir) = self.core.decode;
        let _ = writeln!(
            out,
            "| decode a 200 with 10 fields and a 1 KiB body | {ns:.0} | {} |",
            ir.map_or("–".into(), |i| format!("{i:.0}"))
        );
        if let (Some(small), Some(big)) = (self.core.acquire.first(), self.core.acquire.last()) {
            let _ = writeln!(
                out,
                "\nacquire + release at {} vs {} connections: {:.2}×",
                big.0,
                small.0,
                big.1 / small.1
            );
        }
        out
    }

    fn eyeballs(&self, out: &mut String, s: &Scenario) {
        let raw_ms = Self::find(s, "raw").map(|r| r.p50_us / 1000.0);
        let _ = writeln!(
            out,
            "Ideal: the attempt delay (switchyard 250 ms; hyper-util and reqwest 300 ms) plus one loopback request \
             (`raw`: {}). ureq has no attempt delay: it waits on the black-holed address within its connect \
             timeout (set to 1 s here).\n",
            raw_ms.map_or("–".into(), |m| format!("{m:.2} ms"))
        );
        let _ = writeln!(
            out,
            "| client | time to response head, ms (median) | over the ideal, ms |\n|---|---:|---:|"
        );
        for r in &s.rows {
            let Some(m) = &r.median else {
                let _ = writeln!(out, "| {} | failed | |", r.client);
                continue;
            };
            let ms = m.p50_us / 1000.0;
            // ureq has no attempt delay: how long it waits on the black hole
            // depends on how it spends its connect timeout, so no ideal is claimed.
            let delay = match r.client {
                "raw" => Some(0.0),
                "hyper-util" | "reqwest" => Some(300.0),
                "ureq" => None,
                _ => Some(250.0),
            };
            let over = match (raw_ms, delay) {
                (Some(raw), Some(delay)) => format!("{:+.1}", ms - delay - raw),
                _ => "no attempt delay".into(),
            };
            let _ = writeln!(out, "| {} | {ms:.1} | {over} |", r.client);
        }
        out.push('\n');
    }

    pub fn json(&self) -> String {
        let mut out = String::from("{\n  \"scenarios\": [\n");
        let scenarios: Vec<String> = self
            .scenarios
            .iter()
            .map(|s| {
                let rows: Vec<String> = s
                    .rows
                    .iter()
                    .map(|r| {
                        format!(
                            "      {{\"client\": \"{}\", \"runs\": {}, \"median\": {}}}",
                            r.client,
                            r.runs,
                            r.median.as_ref().map_or("null".into(), Sample::json)
                        )
                    })
                    .collect();
                format!(
                    "    {{\"id\": \"{}\", \"title\": {:?}, \"server\": {:?}, \"rows\": [\n{}\n    ]}}",
                    s.id,
                    s.title,
                    s.server,
                    rows.join(",\n")
                )
            })
            .collect();
        out.push_str(&scenarios.join(",\n"));
        let acquire: Vec<String> = self
            .core
            .acquire
            .iter()
            .map(|(size, ns, ir)| {
                format!(
                    "{{\"connections\": {size}, \"ns\": {ns:.1}, \"instructions\": {}}}",
                    ir.map_or("null".into(), |i| format!("{i:.0}"))
                )
            })
            .collect();
        let _ = write!(
            out,
            "\n  ],\n  \"core\": {{\"acquire_release\": [{}], \"decode\": {{\"ns\": {:.1}, \"instructions\": {}}}}},\n  \
             \"runs\": {}, \"requests\": {}, \"quick\": {}\n}}\n",
            acquire.join(", "),
            self.core.decode.0,
            self.core.decode.1.map_or("null".into(), |i| format!("{i:.0}")),
            self.runs,
            self.requests,
            self.quick
        );
        out
    }
}
