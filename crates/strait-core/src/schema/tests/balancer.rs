use serde_json::json;

use super::*;

const UPSTREAM: EntityKind = EntityKind::Upstreams;
const TARGET: EntityKind = EntityKind::Targets;
const UPSTREAM_ID: &str = "6b5e5e5e-1111-4222-8333-444455556666";

#[test]
fn upstream_defaults_are_kongs() {
    let out = valid(UPSTREAM, json!({"name": "backend.internal"}));
    assert_eq!(out["algorithm"], "round-robin");
    assert_eq!(out["hash_on"], "none");
    assert_eq!(out["hash_fallback"], "none");
    assert_eq!(out["hash_on_cookie_path"], "/");
    assert_eq!(out["slots"], 10000);
    assert_eq!(out["use_srv_name"], false);
    assert_eq!(out["healthchecks"], default_healthchecks());
}

#[test]
fn default_healthchecks_is_kongs_object() {
    assert_eq!(
        default_healthchecks(),
        json!({
            "active": {
                "type": "http", "timeout": 1, "concurrency": 10, "http_path": "/",
                "https_sni": null, "https_verify_certificate": true, "headers": null,
                "healthy": {"interval": 0, "http_statuses": [200, 302], "successes": 0},
                "unhealthy": {
                    "interval": 0, "http_statuses": [429, 404, 500, 501, 502, 503, 504, 505],
                    "tcp_failures": 0, "timeouts": 0, "http_failures": 0,
                },
            },
            "passive": {
                "type": "http",
                "healthy": {
                    "http_statuses": [200, 201, 202, 203, 204, 205, 206, 207, 208, 226,
                                      300, 301, 302, 303, 304, 305, 306, 307, 308],
                    "successes": 0,
                },
                "unhealthy": {
                    "http_statuses": [429, 500, 503],
                    "tcp_failures": 0, "timeouts": 0, "http_failures": 0,
                },
            },
            "threshold": 0,
        })
    );
}

#[test]
fn partial_healthchecks_are_filled_and_checked() {
    let out = valid(
        UPSTREAM,
        json!({"name": "u", "healthchecks": {"active": {"healthy": {"interval": 5}}}}),
    );
    assert_eq!(out["healthchecks"]["active"]["healthy"]["interval"], 5);
    assert_eq!(
        out["healthchecks"]["active"]["healthy"]["http_statuses"],
        json!([200, 302])
    );
    assert_eq!(out["healthchecks"]["passive"], default_healthchecks()["passive"]);
    assert_eq!(
        invalid(
            UPSTREAM,
            json!({"name": "u", "healthchecks": {"active": {"type": "ftp", "concurrency": 0, "bogus": 1}}})
        ),
        vec![
            pair(
                "healthchecks.active.type",
                "expected one of: tcp, http, https, grpc, grpcs"
            ),
            pair(
                "healthchecks.active.concurrency",
                "value should be between 1 and 2147483648"
            ),
            pair("healthchecks.active.bogus", "unknown field"),
        ]
    );
}

#[test]
fn upstream_name_is_a_hostname() {
    assert_eq!(
        invalid(UPSTREAM, json!({})),
        vec![pair("name", "required field missing")]
    );
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "10.0.0.1"})),
        vec![pair("name", "Invalid name ('10.0.0.1'); no ip addresses allowed")]
    );
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "a.com:80"})),
        vec![pair("name", "Invalid name ('a.com:80'); no port allowed")]
    );
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "a b"})),
        vec![pair("name", "Invalid name ('a b'); must be a valid hostname")]
    );
}

#[test]
fn upstream_enumerations_and_hashing_rules() {
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "u", "algorithm": "random", "slots": 5})),
        vec![
            pair(
                "algorithm",
                "expected one of: consistent-hashing, least-connections, round-robin, latency, sticky-sessions"
            ),
            pair("slots", "value should be between 10 and 65536"),
        ]
    );
    let hashed = valid(UPSTREAM, json!({"name": "u", "hash_on": "ip"}));
    assert_eq!(hashed["algorithm"], "consistent-hashing");
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "u", "hash_on": "header"})),
        vec![
            pair("hash_on_header", "required field missing"),
            pair("", "failed conditional validation given value of field 'hash_on'"),
        ]
    );
    assert_eq!(
        invalid(UPSTREAM, json!({"name": "u", "hash_fallback": "ip"}))[0],
        pair("hash_fallback", "expected one of: none")
    );
}

#[test]
fn target_defaults_port_and_float_timestamps() {
    let out = valid(TARGET, json!({"target": "10.0.0.1", "upstream": {"id": UPSTREAM_ID}}));
    assert_eq!(out["target"], "10.0.0.1:8000");
    assert_eq!(out["weight"], 100);
    assert_eq!(out["created_at"], json!(NOW as f64));
    let out = valid(TARGET, json!({"target": "[::1]", "upstream": {"id": UPSTREAM_ID}}));
    assert_eq!(out["target"], "[::1]:8000");
    let out = valid(TARGET, json!({"target": "a.com:81", "upstream": {"id": UPSTREAM_ID}}));
    assert_eq!(out["target"], "a.com:81");
}

#[test]
fn target_requires_upstream_and_valid_address() {
    assert_eq!(
        invalid(TARGET, json!({"weight": 70000})),
        vec![
            pair("upstream", "required field missing"),
            pair("target", "required field missing"),
            pair("weight", "value should be between 0 and 65535"),
        ]
    );
    assert_eq!(
        invalid(TARGET, json!({"target": "a b", "upstream": {"id": UPSTREAM_ID}})),
        vec![pair(
            "target",
            "Invalid target ('a b'); not a valid hostname or ip address"
        )]
    );
}

#[test]
fn sticky_sessions_need_their_cookie_and_no_hashing() {
    let out = valid(
        UPSTREAM,
        json!({"name": "sticky.internal", "algorithm": "sticky-sessions", "sticky_sessions_cookie": "route_id"}),
    );
    // No default stored (Kong 3.9 has no such field); the balancer takes `/`.
    assert_eq!(out["sticky_sessions_cookie_path"], serde_json::Value::Null);
    assert_eq!(
        invalid(
            UPSTREAM,
            json!({"name": "sticky.internal", "algorithm": "sticky-sessions"})
        ),
        vec![
            pair("sticky_sessions_cookie", "required field missing"),
            pair("", "failed conditional validation given value of field 'algorithm'"),
        ]
    );
    assert_eq!(
        invalid(
            UPSTREAM,
            json!({"name": "s.internal", "algorithm": "sticky-sessions", "sticky_sessions_cookie": "a b", "hash_on": "ip"})
        ),
        vec![
            pair("sticky_sessions_cookie", "bad cookie name"),
            pair("hash_on", "expected one of: none"),
            pair("", "failed conditional validation given value of field 'algorithm'"),
        ]
    );
    assert_eq!(
        valid(UPSTREAM, json!({"name": "plain.internal"}))["sticky_sessions_cookie"],
        Value::Null
    );
}
