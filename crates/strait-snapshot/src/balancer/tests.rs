use std::collections::HashMap;

use http::{HeaderMap, HeaderValue};
use serde_json::json;

use super::*;

fn addr(host: &str, port: u16) -> TargetAddress {
    TargetAddress {
        host: host.into(),
        port,
    }
}

/// An upstream with Kong's defaults, `fields` laid over them.
fn upstream(fields: serde_json::Value) -> Upstream {
    let mut value = json!({
        "id": Uuid::new_v4(), "created_at": 0, "updated_at": 0, "name": "u",
        "algorithm": "round-robin", "hash_on": "none", "hash_fallback": "none",
        "hash_on_header": null, "hash_fallback_header": null, "hash_on_cookie": null,
        "hash_on_cookie_path": "/", "hash_on_query_arg": null, "hash_fallback_query_arg": null,
        "hash_on_uri_capture": null, "hash_fallback_uri_capture": null, "slots": 10000,
        "healthchecks": strait_core::schema::default_healthchecks(), "tags": null,
        "host_header": null, "client_certificate": null, "use_srv_name": false,
    });
    for (key, field) in fields.as_object().expect("object") {
        value[key] = field.clone();
    }
    serde_json::from_value(value).expect("upstream")
}

fn three() -> Vec<(TargetAddress, u64)> {
    vec![(addr("a", 1), 300), (addr("b", 2), 100), (addr("c", 3), 0)]
}

struct Request {
    headers: HeaderMap,
    ip: std::net::IpAddr,
}

impl Request {
    fn new() -> Request {
        Request {
            headers: HeaderMap::new(),
            ip: "192.0.2.1".parse().unwrap(),
        }
    }

    fn input(&self) -> HashInput<'_> {
        HashInput {
            client_ip: self.ip,
            consumer: None,
            headers: &self.headers,
            path: "/",
            query: None,
            captures: &[],
        }
    }
}

fn counts(balancer: &Balancer, requests: usize) -> HashMap<String, usize> {
    let request = Request::new();
    let mut counts = HashMap::new();
    for _ in 0..requests {
        let pick = balancer
            .pick(&request.input(), &mut Attempts::default())
            .expect("a peer");
        *counts
            .entry(balancer.peer(pick.index).address.host.clone())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn round_robin_follows_weights_exactly_and_skips_zero_weight() {
    let b = Balancer::new(&upstream(json!({})), three());
    let counts = counts(&b, 400);
    assert_eq!(counts.get("a"), Some(&300));
    assert_eq!(counts.get("b"), Some(&100));
    assert_eq!(counts.get("c"), None);
    assert_eq!(b.target_count(), 2);
}

#[test]
fn round_robin_spreads_a_heavy_target_s_turns() {
    let b = Balancer::new(&upstream(json!({})), vec![(addr("a", 1), 2), (addr("b", 1), 2)]);
    let request = Request::new();
    let order: Vec<String> = (0..4)
        .map(|_| {
            let pick = b.pick(&request.input(), &mut Attempts::default()).unwrap();
            b.peer(pick.index).address.host.clone()
        })
        .collect();
    assert_ne!(order[0], order[1]);
    assert_ne!(order[2], order[3]);
}

#[test]
fn an_empty_balancer_has_no_peer() {
    let b = Balancer::new(&upstream(json!({})), vec![]);
    assert!(b.pick(&Request::new().input(), &mut Attempts::default()).is_none());
}

#[test]
fn unhealthy_targets_are_passed_over_and_all_down_means_no_peer() {
    for algorithm in [
        "round-robin",
        "least-connections",
        "latency",
        "consistent-hashing",
        "sticky-sessions",
    ] {
        let b = Balancer::new(
            &upstream(json!({"algorithm": algorithm, "hash_on": "ip"})),
            vec![(addr("a", 1), 100), (addr("b", 1), 100), (addr("c", 1), 100)],
        );
        b.peer(0).health.set(false);
        let counts = counts(&b, 300);
        assert_eq!(counts.get("a"), None, "{algorithm}");
        b.peer(1).health.set(false);
        b.peer(2).health.set(false);
        assert!(
            b.pick(&Request::new().input(), &mut Attempts::default()).is_none(),
            "{algorithm}"
        );
    }
}

#[test]
fn a_retry_goes_to_another_target_while_one_is_left() {
    for algorithm in ["round-robin", "least-connections", "consistent-hashing"] {
        let b = Balancer::new(
            &upstream(json!({"algorithm": algorithm, "hash_on": "ip"})),
            vec![(addr("a", 1), 100), (addr("b", 1), 100)],
        );
        let request = Request::new();
        let mut attempts = Attempts::default();
        let first = b.pick(&request.input(), &mut attempts).unwrap().index;
        let second = b.pick(&request.input(), &mut attempts).unwrap().index;
        assert_ne!(first, second, "{algorithm}");
        // Both tried: a third attempt reuses a healthy one rather than failing.
        assert!(b.pick(&request.input(), &mut attempts).is_some(), "{algorithm}");
    }
}

#[test]
fn least_connections_avoids_the_busy_target() {
    let b = Balancer::new(
        &upstream(json!({"algorithm": "least-connections"})),
        vec![(addr("a", 1), 100), (addr("b", 1), 100)],
    );
    let busy: Vec<_> = (0..50).map(|_| b.peer(0).health.begin()).collect();
    let counts = counts(&b, 1000);
    // Two targets: every pick compares both.
    let a = counts.get("a").copied().unwrap_or(0);
    assert_eq!(a, 0, "a got {a}");
    drop(busy);
    let a = counts_of(&b, "a", 1000);
    assert!((400..=600).contains(&a), "a got {a} once idle");
}

fn counts_of(b: &Balancer, host: &str, n: usize) -> usize {
    counts(b, n).get(host).copied().unwrap_or(0)
}

#[test]
fn latency_prefers_the_faster_target() {
    let b = Balancer::new(
        &upstream(json!({"algorithm": "latency"})),
        vec![(addr("slow", 1), 100), (addr("fast", 1), 100)],
    );
    b.peer(0).health.record_latency(std::time::Duration::from_millis(50));
    b.peer(1).health.record_latency(std::time::Duration::from_millis(1));
    let slow = counts_of(&b, "slow", 1000);
    assert_eq!(slow, 0, "slow got {slow}");
    // Among many targets, a slow one still loses nearly every comparison.
    let many = Balancer::new(
        &upstream(json!({"algorithm": "latency"})),
        (0..10).map(|i| (addr(&format!("t{i}"), 1), 100)).collect(),
    );
    for i in 0..10 {
        let ms = if i == 0 { 50 } else { 1 };
        many.peer(i).health.record_latency(std::time::Duration::from_millis(ms));
    }
    let slow = counts_of(&many, "t0", 1000);
    assert!(slow < 40, "slow got {slow} of 1000");
}

#[test]
fn consistent_hashing_keeps_a_key_on_its_target() {
    let b = Balancer::new(
        &upstream(json!({"algorithm": "consistent-hashing", "hash_on": "header", "hash_on_header": "x-user"})),
        (0..5).map(|i| (addr(&format!("10.0.0.{i}"), 80), 100)).collect(),
    );
    let mut seen = std::collections::HashSet::new();
    for user in 0..50 {
        let mut request = Request::new();
        request
            .headers
            .insert("x-user", HeaderValue::from_str(&format!("user-{user}")).unwrap());
        let first = b.pick(&request.input(), &mut Attempts::default()).unwrap().index;
        for _ in 0..5 {
            assert_eq!(b.pick(&request.input(), &mut Attempts::default()).unwrap().index, first);
        }
        seen.insert(first);
    }
    assert_eq!(seen.len(), 5, "50 keys reach every target");
}

#[test]
fn a_missing_hash_cookie_is_made_up_and_set() {
    let b = Balancer::new(
        &upstream(
            json!({"algorithm": "consistent-hashing", "hash_on": "cookie", "hash_on_cookie": "lb", "hash_on_cookie_path": "/app"}),
        ),
        vec![(addr("a", 1), 100), (addr("b", 1), 100)],
    );
    let pick = b.pick(&Request::new().input(), &mut Attempts::default()).unwrap();
    let cookie = pick.set_cookie.expect("cookie");
    assert!(cookie.starts_with("lb=") && cookie.contains("Path=/app"), "{cookie}");
    let value = cookie.split(';').next().unwrap().to_string();
    let mut request = Request::new();
    request
        .headers
        .insert(http::header::COOKIE, HeaderValue::from_str(&value).unwrap());
    let again = b.pick(&request.input(), &mut Attempts::default()).unwrap();
    assert_eq!(
        again,
        Pick {
            index: pick.index,
            set_cookie: None
        }
    );
}

#[test]
fn sticky_sessions_name_the_target_in_a_cookie() {
    let b = Balancer::new(
        &upstream(json!({"algorithm": "sticky-sessions", "sticky_sessions_cookie": "s"})),
        vec![(addr("a", 1), 100), (addr("b", 1), 100)],
    );
    let first = b.pick(&Request::new().input(), &mut Attempts::default()).unwrap();
    let cookie = first.set_cookie.clone().expect("cookie");
    let mut request = Request::new();
    let value = cookie.split(';').next().unwrap().to_string();
    request
        .headers
        .insert(http::header::COOKIE, HeaderValue::from_str(&value).unwrap());
    for _ in 0..4 {
        let pick = b.pick(&request.input(), &mut Attempts::default()).unwrap();
        assert_eq!(
            pick,
            Pick {
                index: first.index,
                set_cookie: None
            }
        );
    }
    b.peer(first.index).health.set(false);
    let moved = b.pick(&request.input(), &mut Attempts::default()).unwrap();
    assert_ne!(moved.index, first.index);
    assert!(moved.set_cookie.is_some(), "the cookie follows the new target");
}

#[test]
fn passive_reports_eject_after_the_threshold() {
    let mut checks = strait_core::schema::default_healthchecks();
    checks["passive"]["unhealthy"]["http_failures"] = json!(2);
    let b = Balancer::new(
        &upstream(json!({"healthchecks": checks})),
        vec![(addr("a", 1), 100), (addr("b", 1), 100)],
    );
    b.report_status(0, 500);
    assert!(b.peer(0).health.is_healthy());
    b.report_status(0, 503);
    assert!(!b.peer(0).health.is_healthy());
    b.report_status(1, 404);
    b.report_status(1, 404);
    assert!(b.peer(1).health.is_healthy(), "404 is in neither passive list");
}

#[test]
fn a_threshold_refuses_every_request_when_too_little_weight_is_healthy() {
    let mut checks = strait_core::schema::default_healthchecks();
    checks["threshold"] = json!(60);
    let b = Balancer::new(
        &upstream(json!({"healthchecks": checks})),
        vec![(addr("a", 1), 100), (addr("b", 1), 100)],
    );
    assert!(b.pick(&Request::new().input(), &mut Attempts::default()).is_some());
    b.peer(0).health.set(false);
    assert!(b.pick(&Request::new().input(), &mut Attempts::default()).is_none());
}

#[test]
fn health_survives_a_rebuilt_balancer() {
    let u = upstream(json!({}));
    let first = Balancer::new(&u, vec![(addr("a", 1), 100), (addr("b", 1), 100)]);
    first.peer(0).health.set(false);
    let second = Balancer::new(&u, vec![(addr("a", 1), 50), (addr("b", 1), 100), (addr("c", 1), 1)]);
    assert!(!second.peer(0).health.is_healthy());
    assert!(second.peer(2).health.is_healthy());
}

#[test]
fn targets_parse_like_kong() {
    assert_eq!(parse_target("10.0.0.1:80"), Some(addr("10.0.0.1", 80)));
    assert_eq!(parse_target("example.com"), Some(addr("example.com", 8000)));
    assert_eq!(parse_target("[::1]:9000"), Some(addr("::1", 9000)));
    assert_eq!(parse_target("host:notaport"), None);
    assert_eq!(addr("::1", 9000).name(), "[::1]:9000");
}
