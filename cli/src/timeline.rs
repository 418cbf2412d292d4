//! Rendering recorded events: an aligned human timeline, or JSON lines.

use switchyard_core::CallId;
use switchyard_tokio::Recorded;

/// One call's events (plus pool-wide ones in its time span), each with its time
/// since the call started, aligned for reading.
#[must_use]
pub fn render(events: &[Recorded], call: CallId) -> String {
    let Some(start) = events.iter().find(|e| e.call == Some(call) && e.name == "call_start").map(|e| e.at)
    else {
        return String::new();
    };
    let end = events.iter().filter(|e| e.call == Some(call)).map(|e| e.at).max().unwrap_or(start);
    let mut out = String::new();
    for e in events {
        let mine = e.call == Some(call) || (e.call.is_none() && e.at >= start && e.at <= end);
        if !mine {
            continue;
        }
        let ms = (e.at - start).as_secs_f64() * 1000.0;
        out.push_str(&format!("  {ms:>9.3} ms  {:<24} {}\n", e.name, e.detail));
    }
    out
}

/// One event as a JSON object.
#[must_use]
pub fn json(e: &Recorded) -> serde_json::Value {
    serde_json::json!({
        "t_ms": e.at.elapsed_since_origin().as_secs_f64() * 1000.0,
        "call": e.call.map(|c| c.to_string()),
        "event": e.name,
        "detail": e.detail,
    })
}
