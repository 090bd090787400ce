//! Property tests: random route sets of both styles with overlapping hosts,
//! paths and priorities, random requests; the index must return exactly
//! what the linear reference returns, also after random incremental changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use proptest::prelude::*;
use strait_core::{CidrPort, Route};

use super::reference::LinearRouter;
use super::{route, Req};
use crate::Router;

const HOSTS: &[&str] = &[
    "a.test",
    "b.test",
    "*.test",
    "a.*",
    "x.a.test",
    "a.test:8000",
    "*.a.test",
    "other",
];
const PATHS: &[&str] = &[
    "/",
    "/a",
    "/a/b",
    "/ab",
    "/b",
    r"~/a/\d+$",
    r"~/(a|b)/c",
    r"~.*/c$",
    "~/a",
    r"~(?i)/A/B",
    r"~/ab?/b",
    r"~/a/(?<n>[0-9]+)/c",
    "/a/b/c",
    // Longer than a table slot holds inline, and two of the same length.
    "/a/b/c/a-long-path-prefix-1",
    "/a/b/c/a-long-path-prefix-2",
];
const PREDICATES: &[&str] = &[
    r#"http.host == "a.test""#,
    r#"http.host =^ ".test""#,
    r#"http.host ^= "a.""#,
    r#"http.host != "b.test""#,
    r#"http.path ^= "/a""#,
    r#"http.path == "/a/b""#,
    r#"http.path ~ "^/a/\\d+""#,
    r#"http.path ~ "/c$""#,
    r#"http.path ~ "^/(a|b)/c""#,
    r#"http.path ~ "^/ab?/b""#,
    r#"lower(http.path) ^= "/a""#,
    r#"http.path contains "b""#,
    r#"http.method == "POST""#,
    r#"http.headers.x_v == "1""#,
    r#"any(http.headers.x_v) ~ "^v""#,
    r#"http.queries.q == "1""#,
    r#"net.src.ip in 10.0.0.0/8"#,
    r#"net.dst.port == 8000"#,
    r#"http.path.segments.0 == "a""#,
    r#"http.path.segments.len > 1"#,
    r#"tls.sni == "s.test""#,
    r#"net.protocol == "https""#,
];
const REQUEST_HOSTS: &[&str] = &[
    "a.test",
    "b.test",
    "x.a.test",
    "y.x.a.test",
    "a.other",
    "other",
    "A.TEST",
    "test",
];
const REQUEST_PATHS: &[&str] = &[
    "/",
    "/a",
    "/a/b",
    "/a/1",
    "/ab",
    "/b",
    "/b/c",
    "/A/b",
    "/x/c",
    "/a/b/c/",
    "/a/12/c",
    "/zzz",
    "/a/b/c/a-long-path-prefix-1/x",
    "/a/b/c/a-long-path-prefix-3",
];

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_string)
}

fn some_of(pool: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<String>>> {
    prop::option::weighted(0.6, prop::collection::vec(pick(pool), 1..3))
}

fn traditional_route() -> impl Strategy<Value = Route> {
    (
        some_of(HOSTS),
        some_of(PATHS),
        prop::option::weighted(0.3, prop::collection::vec(pick(&["GET", "POST"]), 1..2)),
        prop::option::weighted(0.3, prop::collection::vec(pick(&["1", "v2", "~*^V\\d$"]), 1..3)),
        prop::option::weighted(0.2, Just(vec!["s.test".to_string()])),
        prop::option::weighted(0.2, pick(&["10.0.0.0/8", "192.168.0.0/16"])),
        (0i64..3, 0i64..4),
    )
        .prop_map(
            |(hosts, paths, methods, header_values, snis, source, (regex_priority, created_at))| {
                let mut r = route("t", created_at);
                r.hosts = hosts;
                r.paths = paths;
                r.methods = methods;
                r.headers = header_values.map(|v| BTreeMap::from([("x-v".to_string(), v)]));
                r.snis = snis;
                r.sources = source.map(|ip| {
                    vec![CidrPort {
                        ip: Some(ip),
                        port: None,
                    }]
                });
                r.regex_priority = regex_priority;
                r
            },
        )
}

fn expression_text() -> impl Strategy<Value = String> {
    pick(PREDICATES).prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| format!("({})", v.join(" && "))),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| format!("({})", v.join(" || "))),
            inner.prop_map(|e| format!("!({e})")),
        ]
    })
}

fn expression_route() -> impl Strategy<Value = Route> {
    (expression_text(), 0i64..4, 0i64..4).prop_map(|(text, priority, created_at)| {
        let mut r = route("e", created_at);
        r.expression = Some(text);
        r.priority = Some(priority);
        r
    })
}

fn any_route() -> impl Strategy<Value = Arc<Route>> {
    prop_oneof![traditional_route(), expression_route()].prop_map(Arc::new)
}

fn request() -> impl Strategy<Value = Req> {
    (
        pick(REQUEST_HOSTS),
        pick(REQUEST_PATHS),
        pick(&["GET", "POST"]),
        prop::collection::vec(pick(&["1", "v2", "V3", "x"]), 0..3),
        pick(&["", "q=1", "q=2&q=1", "a=b"]),
        any::<bool>(),
        prop::sample::select(vec![[10u8, 1, 2, 3], [192, 168, 1, 1], [127, 0, 0, 1]]),
        prop::sample::select(vec![8000u16, 9000]),
    )
        .prop_map(|(host, path, method, values, query, tls, src, port)| {
            let mut req = Req::get(&host, &path);
            req.method = method;
            for v in values {
                req.headers = req.headers.with("x-v", &v);
            }
            req.query = query;
            if tls {
                req.protocol = "https";
                req.sni = Some("s.test".into());
            }
            req.source = Some(SocketAddr::from((src, 1234)));
            req.port = port;
            req.destination = Some(SocketAddr::from(([127, 0, 0, 1], port)));
            req
        })
}

type Outcome = Option<(uuid::Uuid, Option<String>, Vec<(String, String)>)>;

fn outcome(m: Option<crate::RouteMatch>) -> Outcome {
    m.map(|m| (m.route.id, m.matched_path, m.captures))
}

fn assert_agree(router: &Router, routes: &[Arc<Route>], requests: &[Req]) -> Result<(), TestCaseError> {
    let reference = LinearRouter::new(routes);
    for req in requests {
        let facts = req.facts();
        prop_assert_eq!(
            outcome(router.find(&facts)),
            outcome(reference.find(&facts)),
            "request {:?}",
            req
        );
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Change {
    Insert(Arc<Route>),
    Remove(usize),
    Replace(usize, Arc<Route>),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any_route().prop_map(Change::Insert),
        any::<usize>().prop_map(Change::Remove),
        (any::<usize>(), any_route()).prop_map(|(i, r)| Change::Replace(i, r)),
    ]
}

/// Apply `change` to the router and to the plain list of routes.
fn apply(router: &mut Router, routes: &mut Vec<Arc<Route>>, change: Change) {
    match change {
        Change::Insert(r) if router.insert(r.clone()).is_ok() => routes.push(r),
        Change::Remove(i) if !routes.is_empty() => {
            let gone = routes.remove(i % routes.len());
            assert!(router.remove(gone.id));
        }
        Change::Replace(i, r) if !routes.is_empty() => {
            let at = i % routes.len();
            let mut updated = (*r).clone();
            updated.id = routes[at].id;
            let updated = Arc::new(updated);
            if router.replace(updated.clone()).is_ok() {
                routes[at] = updated;
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn index_agrees_with_linear_reference(
        routes in prop::collection::vec(any_route(), 0..24),
        requests in prop::collection::vec(request(), 1..24),
    ) {
        let valid: Vec<Arc<Route>> = routes.into_iter().filter(|r| Router::build(std::slice::from_ref(r)).is_ok()).collect();
        let router = Router::build(&valid).map_err(|e| TestCaseError::fail(e.to_string()))?;
        assert_agree(&router, &valid, &requests)?;
    }

    #[test]
    fn incremental_changes_agree_with_a_fresh_build_and_the_reference(
        initial in prop::collection::vec(any_route(), 0..16),
        changes in prop::collection::vec(change(), 1..24),
        requests in prop::collection::vec(request(), 1..16),
    ) {
        let mut routes: Vec<Arc<Route>> = initial.into_iter().filter(|r| Router::build(std::slice::from_ref(r)).is_ok()).collect();
        let original = Router::build(&routes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let original_routes = routes.clone();
        let mut router = original.clone();
        for change in changes {
            apply(&mut router, &mut routes, change);
        }
        assert_agree(&router, &routes, &requests)?;
        let fresh = Router::build(&routes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for req in &requests {
            prop_assert_eq!(outcome(router.find(&req.facts())), outcome(fresh.find(&req.facts())));
        }
        // The router it was derived from still answers for the old set.
        assert_agree(&original, &original_routes, &requests)?;
    }
}

/// Pieces of regex path patterns: plain text (which the router splits off
/// as a prefix) and regex syntax (which it keeps), in any order.
const PATTERN_PIECES: &[&str] = &[
    "/",
    "a",
    "b",
    "/ab",
    "é",
    "-",
    "x",
    "~",
    r"\d+",
    "[ab]",
    "(?<n>[0-9]+)",
    "(a|b)",
    "b?",
    "a*",
    r"\b",
    "$",
    ".",
    "(?i)A",
    "x{2}",
    r"\.",
    "(?:/c)?",
    "(",
    ")",
    "+",
];
const PATH_PIECES: &[&str] = &["/", "a", "b", "1", "23", "x", ".", "A", "é", "c", "-", "~"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A regex path matches, captures and records its matched path exactly
    /// as the whole pattern anchored at the start does, however the router
    /// splits it; and a pattern compiles in the router iff it compiles.
    #[test]
    fn regex_paths_match_as_the_whole_anchored_pattern(
        pieces in prop::collection::vec(pick(PATTERN_PIECES), 1..6),
        paths in prop::collection::vec(prop::collection::vec(pick(PATH_PIECES), 0..7), 1..12),
    ) {
        let pattern = pieces.concat();
        // Configuration validation rejects a pattern that does not compile
        // on its own (`)(` would inside `^(?:...)`), before any router.
        prop_assume!(strait_expr::compile_regex(&pattern, false).is_ok());
        // The reference is the `regex` crate, not the router's own engine.
        let whole = regex::Regex::new(&format!("^(?:{})", strait_expr::ascii_perl_classes(&pattern)));
        let built = Router::build(&[Arc::new(super::with_paths(route("r", 1), &[&format!("~{pattern}")]))]);
        prop_assert_eq!(whole.is_ok(), built.is_ok(), "{}: {:?}", pattern, built.as_ref().err());
        let (Ok(whole), Ok(router)) = (whole, built) else {
            return Ok(());
        };
        for path in paths {
            let path = path.concat();
            let expected = whole.captures(&path).map(|caps| {
                let captures: Vec<(String, String)> = whole
                    .capture_names()
                    .enumerate()
                    .skip(1)
                    .filter_map(|(i, name)| {
                        let m = caps.get(i)?;
                        Some((name.map(str::to_string).unwrap_or_else(|| i.to_string()), m.as_str().to_string()))
                    })
                    .collect();
                (caps.get(0).map(|m| m.as_str().to_string()), captures)
            });
            let got = router
                .find(&Req::get("x", &path).facts())
                .map(|m| (m.matched_path, m.captures));
            prop_assert_eq!(got, expected, "{} on {:?}", pattern, path);
        }
    }
}
