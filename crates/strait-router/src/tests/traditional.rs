//! Traditional routes: Kong's `traditional_compatible` priority and matching.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use strait_core::CidrPort;

use super::{build, route, with_hosts, with_paths, Headers, Req};
use crate::{upstream_path, Router};

#[test]
fn longest_prefix_wins_and_miss_returns_none() {
    let router = build(vec![
        with_paths(route("short", 1), &["/a"]),
        with_paths(route("long", 2), &["/a/b"]),
    ]);
    assert_eq!(Req::get("x", "/a/b/c").name_in(&router).as_deref(), Some("long"));
    assert_eq!(Req::get("x", "/a/c").name_in(&router).as_deref(), Some("short"));
    assert_eq!(Req::get("x", "/z").name_in(&router), None);
}

#[test]
fn more_fields_beat_longer_paths_and_plain_hosts_beat_wildcards() {
    let router = build(vec![
        with_paths(route("path-only", 1), &["/api/v1/long"]),
        with_hosts(with_paths(route("wild", 2), &["/api"]), &["*.example.com"]),
        with_hosts(with_paths(route("plain", 3), &["/api"]), &["a.example.com"]),
    ]);
    let name = |host: &str| Req::get(host, "/api/v1/long").name_in(&router);
    assert_eq!(name("a.example.com").as_deref(), Some("plain"));
    assert_eq!(name("b.example.com").as_deref(), Some("wild"));
    assert_eq!(name("example.com").as_deref(), Some("path-only"));
}

#[test]
fn wildcard_hosts_match_by_suffix_and_prefix() {
    let router = build(vec![
        with_hosts(route("suffix", 1), &["*.example.com"]),
        with_hosts(route("prefix", 2), &["api.*"]),
    ]);
    assert_eq!(
        Req::get("a.b.example.com", "/").name_in(&router).as_deref(),
        Some("suffix")
    );
    assert_eq!(Req::get("api.test", "/").name_in(&router).as_deref(), Some("prefix"));
    assert_eq!(Req::get("example.com", "/").name_in(&router), None);
    assert_eq!(
        Req::get("EXAMPLE.api.Example.COM", "/").name_in(&router).as_deref(),
        Some("suffix")
    );
}

#[test]
fn regex_paths_capture_and_respect_regex_priority() {
    let mut low = with_paths(route("low", 1), &[r"~/users/(?<id>\d+)$"]);
    low.regex_priority = 1;
    let mut high = with_paths(route("high", 2), &[r"~/users/\d+"]);
    high.regex_priority = 5;
    let router = build(vec![low, high]);
    assert_eq!(Req::get("x", "/users/42").name_in(&router).as_deref(), Some("high"));
    let only_low = build(vec![with_paths(route("low", 1), &[r"~/users/(?<id>\d+)$"])]);
    let req = Req::get("x", "/users/42");
    let m = only_low.find(&req.facts()).expect("match");
    assert_eq!(m.captures, vec![("id".to_string(), "42".to_string())]);
    assert_eq!(m.matched_path.as_deref(), Some("/users/42"));
}

#[test]
fn a_route_with_mixed_paths_ranks_each_group_on_its_own() {
    // Kong splits `paths` into groups: the regex group outranks prefixes (regex bit),
    // and each prefix group carries its own length.
    let mixed = with_paths(route("mixed", 1), &["/a", r"~/b/\d+$", "/abc"]);
    let mid = with_paths(route("mid", 2), &["/ab"]);
    let router = build(vec![mixed, mid]);
    assert_eq!(Req::get("x", "/abc").name_in(&router).as_deref(), Some("mixed"));
    assert_eq!(Req::get("x", "/abx").name_in(&router).as_deref(), Some("mid"));
    assert_eq!(Req::get("x", "/b/7").name_in(&router).as_deref(), Some("mixed"));
    let m = router.find(&Req::get("x", "/abcd").facts()).expect("match");
    assert_eq!(m.matched_path.as_deref(), Some("/abc"));
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
    let post = |headers: Headers| {
        let mut req = Req::get("x", "/");
        req.method = "POST".into();
        req.headers = headers;
        req.name_in(&router)
    };
    assert_eq!(post(Headers::default()), None);
    assert_eq!(
        post(Headers::default().with("x-version", "V2")).as_deref(),
        Some("post-json")
    );
    assert_eq!(
        post(Headers::default().with("x-version", "BETA-3")).as_deref(),
        Some("post-json")
    );
    assert_eq!(Req::get("x", "/").name_in(&router), None);
    assert_eq!(Req::get("api.test", "/").name_in(&router).as_deref(), Some("ported"));
}

#[test]
fn snis_only_bind_tls_requests() {
    let mut r = with_paths(route("sni", 1), &["/s"]);
    r.snis = Some(vec!["secure.test".into()]);
    let router = build(vec![r]);
    let mut req = Req::get("x", "/s");
    assert_eq!(req.name_in(&router).as_deref(), Some("sni"), "plain http ignores snis");
    req.protocol = "https";
    req.sni = Some("other.test".into());
    assert_eq!(req.name_in(&router), None);
    req.sni = Some("secure.test".into());
    assert_eq!(req.name_in(&router).as_deref(), Some("sni"));
}

#[test]
fn sources_and_destinations_use_cidrs_and_ports() {
    let mut r = route("from-lan", 1);
    r.sources = Some(vec![CidrPort {
        ip: Some("10.0.0.0/8".into()),
        port: None,
    }]);
    r.destinations = Some(vec![CidrPort {
        ip: None,
        port: Some(8000),
    }]);
    let router = build(vec![r]);
    let mut req = Req::get("x", "/");
    assert_eq!(req.name_in(&router).as_deref(), Some("from-lan"));
    req.source = Some(SocketAddr::from(([192, 168, 0, 1], 1)));
    assert_eq!(req.name_in(&router), None);
    let mut bad = route("bad", 1);
    bad.sources = Some(vec![CidrPort {
        ip: Some("10.0.0.0/99".into()),
        port: None,
    }]);
    let err = Router::build(&[Arc::new(bad)]).expect_err("invalid cidr");
    assert!(err.to_string().contains("(bad)"), "{err}");
}

#[test]
fn invalid_and_pathological_regexes_are_errors_naming_the_route() {
    let r = Arc::new(with_paths(route("bad", 1), &["~/(unclosed"]));
    let err = Router::build(std::slice::from_ref(&r)).expect_err("invalid regex");
    assert!(err.to_string().contains(&r.id.to_string()), "{err}");
    assert!(err.to_string().contains("(bad)"), "{err}");
    let huge = Arc::new(with_paths(route("huge", 1), &["~/((a{100}){100}){100}"]));
    assert!(Router::build(&[huge]).is_err());
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

#[test]
fn regex_paths_anchor_without_a_group_only_when_that_means_the_same() {
    let requests = ["/a/b", "/ab/b", "/x", "/a/12", "/b/c", "/c", "/a"];
    for pattern in [r"/ab?/b", r"/a|/b/c", r"/a/\d+$", "x", "(?i)/A", "/a(/b)?$"] {
        let grouped = regex::Regex::new(&format!("^(?:{pattern})")).expect("grouped compiles");
        let router = build(vec![with_paths(route("r", 1), &[&format!("~{pattern}")])]);
        for path in requests {
            assert_eq!(
                Req::get("x", path).name_in(&router).is_some(),
                grouped.is_match(path),
                "~{pattern} on {path}"
            );
        }
    }
}

/// `first_slots` hands out the slot a lookup reads first: for a path whose
/// prefix key sits where its probe starts (about half of them), the matched
/// route's facts lie inside it; short lists and host-keyed routes give none.
#[test]
fn first_slots_point_at_the_slot_the_lookup_reads() {
    let routes = (0..2000).map(|i| with_paths(route(&format!("r{i}"), i), &[&format!("/r{i:05}")]));
    let router = build(routes.collect());
    let mut inside = 0;
    for i in 0..2000 {
        let path = format!("/r{i:05}/more");
        let request = Req::get("x", &path);
        let facts = request.facts();
        let found = router.find(&facts).expect("every path has its route");
        let facts_at = std::ptr::from_ref(found.facts) as usize;
        let mut slots = Vec::new();
        router.first_slots(path.as_bytes(), |at, len| slots.push((at as usize, len)));
        assert!(slots.len() <= 1, "one key length, at most one slot: {slots:?}");
        if slots.iter().any(|&(at, len)| (at..at + len).contains(&facts_at)) {
            inside += 1;
        }
    }
    assert!(
        inside > 2000 / 3,
        "only {inside} of 2000 lookups read the slot first_slots gave"
    );

    let mut none = Vec::new();
    let few = build(vec![
        with_paths(route("a", 1), &["/a"]),
        with_paths(route("b", 2), &["/b"]),
    ]);
    few.first_slots(b"/a/x", |at, len| none.push((at, len)));
    let hosts = build(
        (0..100)
            .map(|i| {
                with_hosts(
                    with_paths(route(&format!("h{i}"), i), &[&format!("/p{i}")]),
                    &["h.example"],
                )
            })
            .collect(),
    );
    hosts.first_slots(b"/p1/x", |at, len| none.push((at, len)));
    assert!(none.is_empty(), "{none:?}");
}
