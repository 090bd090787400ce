use std::collections::BTreeMap;
use std::sync::Arc;

use strait_core::Route;
use uuid::Uuid;

use crate::{upstream_path, HeaderLookup, RequestFacts, Router};

#[derive(Debug, Default)]
struct Headers(BTreeMap<String, Vec<String>>);

impl HeaderLookup for Headers {
    fn values(&self, name: &str) -> Vec<&str> {
        self.0
            .get(name)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

fn route(name: &str, created_at: i64) -> Route {
    Route {
        id: Uuid::new_v4(),
        created_at,
        updated_at: created_at,
        name: Some(name.to_string()),
        protocols: vec!["http".into(), "https".into()],
        methods: None,
        hosts: None,
        paths: None,
        headers: None,
        https_redirect_status_code: 426,
        regex_priority: 0,
        strip_path: true,
        path_handling: "v0".into(),
        preserve_host: false,
        request_buffering: true,
        response_buffering: true,
        snis: None,
        sources: None,
        destinations: None,
        tags: None,
        service: None,
        expression: None,
        priority: None,
    }
}

fn with_paths(mut r: Route, paths: &[&str]) -> Route {
    r.paths = Some(paths.iter().map(|p| p.to_string()).collect());
    r
}

fn with_hosts(mut r: Route, hosts: &[&str]) -> Route {
    r.hosts = Some(hosts.iter().map(|p| p.to_string()).collect());
    r
}

fn find(router: &Router, method: &str, host: &str, path: &str, headers: &Headers) -> Option<String> {
    let facts = RequestFacts {
        protocol: "http",
        method,
        host,
        port: 8000,
        path,
        sni: None,
        headers,
    };
    router.find(&facts).and_then(|m| m.route.name.clone())
}

fn build(routes: Vec<Route>) -> Router {
    Router::build(&routes.into_iter().map(Arc::new).collect::<Vec<_>>()).expect("routes compile")
}

#[test]
fn longest_prefix_wins_and_miss_returns_none() {
    let router = build(vec![
        with_paths(route("short", 1), &["/a"]),
        with_paths(route("long", 2), &["/a/b"]),
    ]);
    let h = Headers::default();
    assert_eq!(find(&router, "GET", "x", "/a/b/c", &h).as_deref(), Some("long"));
    assert_eq!(find(&router, "GET", "x", "/a/c", &h).as_deref(), Some("short"));
    assert_eq!(find(&router, "GET", "x", "/z", &h), None);
}

#[test]
fn more_fields_beat_longer_paths_and_plain_hosts_beat_wildcards() {
    let router = build(vec![
        with_paths(route("path-only", 1), &["/api/v1/long"]),
        with_hosts(with_paths(route("wild", 2), &["/api"]), &["*.example.com"]),
        with_hosts(with_paths(route("plain", 3), &["/api"]), &["a.example.com"]),
    ]);
    let h = Headers::default();
    assert_eq!(
        find(&router, "GET", "a.example.com", "/api/v1/long", &h).as_deref(),
        Some("plain")
    );
    assert_eq!(
        find(&router, "GET", "b.example.com", "/api/v1/long", &h).as_deref(),
        Some("wild")
    );
    assert_eq!(
        find(&router, "GET", "example.com", "/api/v1/long", &h).as_deref(),
        Some("path-only")
    );
}

#[test]
fn regex_paths_capture_and_respect_regex_priority() {
    let mut low = with_paths(route("low", 1), &[r"~/users/(?<id>\d+)$"]);
    low.regex_priority = 1;
    let mut high = with_paths(route("high", 2), &[r"~/users/\d+"]);
    high.regex_priority = 5;
    let router = build(vec![low, high]);
    let h = Headers::default();
    assert_eq!(find(&router, "GET", "x", "/users/42", &h).as_deref(), Some("high"));
    let only_low = build(vec![with_paths(route("low", 1), &[r"~/users/(?<id>\d+)$"])]);
    let facts = RequestFacts {
        protocol: "http",
        method: "GET",
        host: "x",
        port: 80,
        path: "/users/42",
        sni: None,
        headers: &h,
    };
    let m = only_low.find(&facts).expect("match");
    assert_eq!(m.captures, vec![("id".to_string(), "42".to_string())]);
    assert_eq!(m.matched_path.as_deref(), Some("/users/42"));
}

#[test]
fn methods_headers_and_host_ports() {
    let mut r = with_paths(route("post-json", 1), &["/"]);
    r.methods = Some(vec!["POST".into()]);
    let mut headers = BTreeMap::new();
    headers.insert(
        "x-version".to_string(),
        vec!["v2".to_string(), "~*^beta-\\d$".to_string()],
    );
    r.headers = Some(headers);
    let ported = with_hosts(route("ported", 2), &["api.test:8000"]);
    let other_port = with_hosts(route("other-port", 3), &["api.test:9000"]);
    let router = build(vec![r, ported, other_port]);
    let mut h = Headers::default();
    assert_eq!(find(&router, "POST", "x", "/", &h), None);
    h.0.insert("x-version".into(), vec!["V2".into()]);
    assert_eq!(find(&router, "POST", "x", "/", &h).as_deref(), Some("post-json"));
    h.0.insert("x-version".into(), vec!["BETA-3".into()]);
    assert_eq!(find(&router, "POST", "x", "/", &h).as_deref(), Some("post-json"));
    assert_eq!(find(&router, "GET", "x", "/", &h), None);
    assert_eq!(find(&router, "GET", "api.test", "/", &h).as_deref(), Some("ported"));
}

#[test]
fn invalid_regex_is_an_error_not_a_panic() {
    let r = Arc::new(with_paths(route("bad", 1), &["~/(unclosed"]));
    assert!(Router::build(&[r]).is_err());
}

#[test]
fn upstream_paths_follow_kong_path_handling_table() {
    let cases = [
        ("v0", Some("/s"), "/fv0req", "/fv0", true, "/sreq"),
        ("v0", Some("/s"), "/fv0/req", "/fv0", true, "/s/req"),
        ("v0", Some("/s/"), "/fv0req", "/fv0", true, "/s/req"),
        ("v0", Some("/s/"), "/fv0/req", "/fv0", true, "/s/req"),
        ("v1", Some("/s/"), "/fv1/req", "/fv1", true, "/s//req"),
        ("v0", Some("/s"), "/fv0/req", "/fv0", false, "/s/fv0/req"),
        ("v0", None, "/fv0/req", "/fv0", true, "/req"),
        ("v0", None, "/fv0", "/fv0", true, "/"),
        ("v0", None, "/fv0req", "/fv0", true, "/req"),
    ];
    for (handling, service, request, matched, strip, expected) in cases {
        assert_eq!(
            upstream_path(service, request, Some(matched), strip, handling),
            expected,
            "{handling} {service:?} {request} strip={strip}"
        );
    }
}
