//! Incremental updates: insert / remove / replace on a clone leave the
//! original untouched, and shared regexes are compiled once.

use std::sync::Arc;

use super::{build, expression, route, with_hosts, with_paths, Req};
use crate::Router;

#[test]
fn clone_then_change_leaves_the_original_serving() {
    let base = build(vec![with_paths(route("a", 1), &["/a"])]);
    let mut next = base.clone();
    let b = Arc::new(with_paths(route("b", 2), &["/b"]));
    next.insert(b.clone()).expect("insert");
    assert_eq!(Req::get("x", "/b").name_in(&base), None);
    assert_eq!(Req::get("x", "/b").name_in(&next).as_deref(), Some("b"));
    assert!(next.insert(b.clone()).is_err(), "duplicate id");
    assert!(next.remove(b.id));
    assert!(!next.remove(b.id));
    assert_eq!(Req::get("x", "/b").name_in(&next), None);
    assert_eq!(next.len(), 1);
}

#[test]
fn replace_moves_a_route_between_index_slots() {
    let mut router = Router::default();
    let mut r = with_hosts(with_paths(route("r", 1), &["/old"]), &["a.test"]);
    router.insert(Arc::new(r.clone())).expect("insert");
    r.paths = Some(vec!["/new".into()]);
    r.hosts = None;
    router.replace(Arc::new(r.clone())).expect("replace");
    assert_eq!(Req::get("a.test", "/old").name_in(&router), None);
    assert_eq!(Req::get("b.test", "/new").name_in(&router).as_deref(), Some("r"));
    r.expression = Some("http.path ==".into());
    assert!(router.replace(Arc::new(r)).is_err());
    assert_eq!(
        Req::get("b.test", "/new").name_in(&router).as_deref(),
        Some("r"),
        "failed replace keeps the old route"
    );
}

#[test]
fn routes_using_one_pattern_share_its_compiled_regex() {
    let routes: Vec<_> = (0..50)
        .map(|i| {
            expression(
                &format!("r{i}"),
                &format!(r#"http.path ~ "^/same/\\d+$" && http.host == "h{i}""#),
                1,
            )
        })
        .collect();
    let ids: Vec<_> = routes.iter().map(|r| r.id).collect();
    let mut router = build(routes);
    assert_eq!(router.regexes.len(), 1);
    for id in ids {
        router.remove(id);
    }
    assert_eq!(router.regexes.len(), 0);
    assert!(router.is_empty());
}

#[test]
fn regex_paths_differing_only_in_leading_text_share_one_compiled_regex() {
    let routes: Vec<_> = (0..50)
        .map(|i| {
            with_paths(
                route(&format!("r{i}"), i),
                &[&format!(r"~/tenant{i}/orders/(?<id>\d+)$")],
            )
        })
        .collect();
    let ids: Vec<_> = routes.iter().map(|r| r.id).collect();
    let mut router = build(routes);
    assert_eq!(router.regexes.len(), 1, "one regex for `(?<id>\\d+)$`");
    let m = router
        .find(&Req::get("x", "/tenant7/orders/42").facts())
        .expect("match");
    assert_eq!(m.route.name.as_deref(), Some("r7"));
    assert_eq!(m.matched_path.as_deref(), Some("/tenant7/orders/42"));
    assert_eq!(m.captures, vec![("id".to_string(), "42".to_string())]);
    assert!(router.find(&Req::get("x", "/tenant7/orders/4x").facts()).is_none());
    for id in ids {
        router.remove(id);
    }
    assert_eq!(router.regexes.len(), 0);
}

#[test]
fn large_routers_grow_and_shrink_incrementally() {
    let mut router = Router::default();
    let routes: Vec<Arc<_>> = (0..3000)
        .map(|i| Arc::new(with_paths(route(&format!("r{i}"), i), &[&format!("/r{i}/")])))
        .collect();
    for r in &routes {
        router.insert(r.clone()).expect("insert");
    }
    let snapshot = router.clone();
    for r in routes.iter().step_by(2) {
        router.remove(r.id);
    }
    assert_eq!(router.len(), 1500);
    assert_eq!(Req::get("x", "/r10/x").name_in(&router), None);
    assert_eq!(Req::get("x", "/r11/x").name_in(&router).as_deref(), Some("r11"));
    assert_eq!(Req::get("x", "/r10/x").name_in(&snapshot).as_deref(), Some("r10"));
}

#[test]
fn many_prefixes_short_and_long_match_by_their_whole_key() {
    // Past a handful of prefixes per host the index keeps them in a table;
    // keys up to a slot's inline room and longer ones, some of one length.
    let long = |i: i64| format!("/tenants/a-long-tenant-name-{i:03}");
    let routes: Vec<_> = (0..40)
        .map(|i| with_paths(route(&format!("short{i}"), i), &[&format!("/s{i}")]))
        .chain((0..40).map(|i| with_paths(route(&format!("long{i}"), 100 + i), &[&long(i)])))
        .collect();
    let router = build(routes);
    assert_eq!(Req::get("x", "/s7/x").name_in(&router).as_deref(), Some("short7"));
    // `/s1` is a prefix of `/s17`: the longer path wins.
    assert_eq!(Req::get("x", "/s17").name_in(&router).as_deref(), Some("short17"));
    assert_eq!(Req::get("x", "/s99").name_in(&router).as_deref(), Some("short9"));
    let m = router
        .find(&Req::get("x", &format!("{}/orders", long(12))).facts())
        .expect("match");
    assert_eq!(m.route.name.as_deref(), Some("long12"));
    assert_eq!(m.matched_path.as_deref(), Some(long(12).as_str()));
    // Same length as every long key, different last byte: no route.
    assert_eq!(Req::get("x", "/tenants/a-long-tenant-name-04x").name_in(&router), None);
    assert_eq!(Req::get("x", "/t").name_in(&router), None);
}
