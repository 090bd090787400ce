//! An upstream's `healthchecks` record, read once when its balancer is
//! built. The schema (strait-core) has already filled Kong's defaults and
//! checked every range; a value missing here falls back to the same default.

use std::time::Duration;

use serde_json::Value;
use strait_runtime::health::{Report, Thresholds};

/// How active probes talk to a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Tcp,
    Http,
    Https,
    /// `grpc.health.v1.Health/Check` over h2c.
    Grpc,
    /// The same over TLS (ALPN `h2`).
    Grpcs,
}

/// `healthchecks.active`, when either interval is set.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveChecks {
    pub kind: ProbeKind,
    pub timeout: Duration,
    pub concurrency: usize,
    pub http_path: String,
    pub https_sni: Option<String>,
    pub verify_certificate: bool,
    pub headers: Vec<(String, String)>,
    /// How often a healthy target is probed (zero: never).
    pub healthy_interval: Duration,
    /// How often an unhealthy target is probed (zero: never).
    pub unhealthy_interval: Duration,
    pub healthy_statuses: Vec<u16>,
    pub unhealthy_statuses: Vec<u16>,
    pub limits: Thresholds,
}

impl ActiveChecks {
    /// What a probe's response status reports; `None` for a status in neither list.
    pub fn judge(&self, status: u16) -> Option<Report> {
        judge(status, &self.healthy_statuses, &self.unhealthy_statuses)
    }
}

/// Everything a balancer needs of `healthchecks`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HealthChecks {
    pub active: Option<ActiveChecks>,
    pub passive_limits: Thresholds,
    pub passive_healthy_statuses: Vec<u16>,
    pub passive_unhealthy_statuses: Vec<u16>,
    /// `threshold`: the percentage of weight that must be healthy for the
    /// upstream to take requests at all (0: no such rule).
    pub threshold: f64,
}

impl HealthChecks {
    pub fn from_value(value: &Value) -> HealthChecks {
        let active = &value["active"];
        let passive = &value["passive"];
        let healthy_interval = seconds(&active["healthy"]["interval"]);
        let unhealthy_interval = seconds(&active["unhealthy"]["interval"]);
        let active = (!healthy_interval.is_zero() || !unhealthy_interval.is_zero()).then(|| ActiveChecks {
            kind: match active["type"].as_str() {
                Some("tcp") => ProbeKind::Tcp,
                Some("https") => ProbeKind::Https,
                Some("grpc") => ProbeKind::Grpc,
                Some("grpcs") => ProbeKind::Grpcs,
                _ => ProbeKind::Http,
            },
            timeout: match seconds(&active["timeout"]) {
                zero if zero.is_zero() => Duration::from_secs(1),
                timeout => timeout,
            },
            concurrency: active["concurrency"].as_u64().unwrap_or(10).clamp(1, 1024) as usize,
            http_path: active["http_path"].as_str().unwrap_or("/").to_string(),
            https_sni: active["https_sni"].as_str().map(str::to_string),
            verify_certificate: active["https_verify_certificate"].as_bool().unwrap_or(true),
            headers: probe_headers(&active["headers"]),
            healthy_interval,
            unhealthy_interval,
            healthy_statuses: statuses(&active["healthy"]["http_statuses"], &[200, 302]),
            unhealthy_statuses: statuses(
                &active["unhealthy"]["http_statuses"],
                &[429, 404, 500, 501, 502, 503, 504, 505],
            ),
            limits: thresholds(active),
        });
        HealthChecks {
            active,
            passive_limits: thresholds(passive),
            passive_healthy_statuses: statuses(
                &passive["healthy"]["http_statuses"],
                &[
                    200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 306, 307, 308,
                ],
            ),
            passive_unhealthy_statuses: statuses(&passive["unhealthy"]["http_statuses"], &[429, 500, 503]),
            threshold: value["threshold"].as_f64().unwrap_or(0.0),
        }
    }

    /// Passive checks can mark a target down (Kong's test for "using health checks").
    pub fn passive(&self) -> bool {
        let l = &self.passive_limits;
        l.http_failures != 0 || l.tcp_failures != 0 || l.timeouts != 0
    }

    /// Kong reports `HEALTHCHECKS_OFF` unless active or passive checks run.
    pub fn enabled(&self) -> bool {
        self.active.is_some() || self.passive()
    }

    /// What a proxied response's status reports to passive checks.
    pub fn judge_response(&self, status: u16) -> Option<Report> {
        if !self.passive() && self.passive_limits.successes == 0 {
            return None;
        }
        judge(status, &self.passive_healthy_statuses, &self.passive_unhealthy_statuses)
    }
}

fn judge(status: u16, healthy: &[u16], unhealthy: &[u16]) -> Option<Report> {
    if unhealthy.contains(&status) {
        Some(Report::HttpFailure)
    } else if healthy.contains(&status) {
        Some(Report::Success)
    } else {
        None
    }
}

fn seconds(value: &Value) -> Duration {
    value
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.min(65535.0)))
}

fn count(value: &Value) -> u32 {
    value.as_u64().unwrap_or(0).min(255) as u32
}

fn thresholds(record: &Value) -> Thresholds {
    Thresholds {
        successes: count(&record["healthy"]["successes"]),
        http_failures: count(&record["unhealthy"]["http_failures"]),
        tcp_failures: count(&record["unhealthy"]["tcp_failures"]),
        timeouts: count(&record["unhealthy"]["timeouts"]),
    }
}

fn statuses(value: &Value, default: &[u16]) -> Vec<u16> {
    match value.as_array() {
        Some(list) => list
            .iter()
            .filter_map(Value::as_u64)
            .filter_map(|s| u16::try_from(s).ok())
            .collect(),
        None => default.to_vec(),
    }
}

/// `headers`: a map of name to a list of values, sent with every probe.
fn probe_headers(value: &Value) -> Vec<(String, String)> {
    let Some(map) = value.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, values) in map {
        match values {
            Value::Array(list) => out.extend(
                list.iter()
                    .filter_map(Value::as_str)
                    .map(|v| (name.clone(), v.to_string())),
            ),
            Value::String(v) => out.push((name.clone(), v.clone())),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kong_defaults_turn_every_check_off() {
        let checks = HealthChecks::from_value(&strait_core::schema::default_healthchecks());
        assert!(!checks.enabled());
        assert_eq!(checks.judge_response(500), None);
        assert_eq!(checks.passive_unhealthy_statuses, [429, 500, 503]);
    }

    #[test]
    fn intervals_and_thresholds_are_read() {
        let mut value = strait_core::schema::default_healthchecks();
        value["active"]["healthy"]["interval"] = json!(0.5);
        value["active"]["type"] = json!("tcp");
        value["active"]["headers"] = json!({"x-probe": ["a", "b"]});
        value["passive"]["unhealthy"]["tcp_failures"] = json!(2);
        let checks = HealthChecks::from_value(&value);
        let active = checks.active.as_ref().expect("active");
        assert_eq!(active.kind, ProbeKind::Tcp);
        assert_eq!(active.healthy_interval, Duration::from_millis(500));
        assert_eq!(active.unhealthy_interval, Duration::ZERO);
        assert_eq!(active.timeout, Duration::from_secs(1));
        assert_eq!(active.headers.len(), 2);
        assert_eq!(checks.passive_limits.tcp_failures, 2);
        assert!(checks.passive());
        assert_eq!(checks.judge_response(503), Some(Report::HttpFailure));
        assert_eq!(checks.judge_response(200), Some(Report::Success));
        assert_eq!(checks.judge_response(404), None);
    }
}
