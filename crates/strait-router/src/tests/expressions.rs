//! Expression routes: fields, operators, multi-valued semantics, priority.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{build, expression, route, with_paths, Headers, Req};
use crate::{Router, RouterError};

#[test]
fn higher_priority_wins_and_ties_go_to_the_older_route() {
    let mut older = expression("older", r#"http.path ^= "/a""#, 5);
    older.created_at = 1;
    let mut newer = expression("newer", r#"http.path ^= "/a/b""#, 5);
    newer.created_at = 2;
    let top = expression("top", r#"http.path ^= "/""#, 9);
    let router = build(vec![older.clone(), newer.clone()]);
    assert_eq!(Req::get("x", "/a/b").name_in(&router).as_deref(), Some("older"));
    let router = build(vec![older, newer, top]);
    assert_eq!(Req::get("x", "/a/b").name_in(&router).as_deref(), Some("top"));
}

#[test]
fn host_path_method_header_and_query_fields() {
    let router = build(vec![
        expression(
            "api",
            r#"http.host == "api.test" && http.path ^= "/v1" && http.method == "POST""#,
            10,
        ),
        expression("hdr", r#"http.headers.x_tenant == "acme""#, 5),
        expression("qry", r#"http.queries.debug == "1" && http.path == "/q""#, 4),
        expression(
            "wild",
            r#"http.host =^ ".test" && http.path ~ "^/users/(?<id>\\d+)$""#,
            3,
        ),
    ]);
    let mut req = Req::get("api.test", "/v1/x");
    assert_eq!(req.name_in(&router), None, "GET is not POST");
    req.method = "POST".into();
    assert_eq!(req.name_in(&router).as_deref(), Some("api"));
    let req = Req {
        headers: Headers::default().with("x-tenant", "acme"),
        ..Req::get("other", "/")
    };
    assert_eq!(req.name_in(&router).as_deref(), Some("hdr"));
    let mut req = Req::get("other", "/q");
    req.query = "a=2&debug=1".into();
    assert_eq!(req.name_in(&router).as_deref(), Some("qry"));
    req.query = "debug=0".into();
    assert_eq!(req.name_in(&router), None);
    let req = Req::get("b.test", "/users/7");
    let m = router.find(&req.facts()).expect("match");
    assert_eq!(m.route.name.as_deref(), Some("wild"));
    assert_eq!(m.captures, vec![("id".to_string(), "7".to_string())]);
    assert_eq!(m.matched_path.as_deref(), Some("/users/7"));
}

#[test]
fn multi_valued_fields_need_every_value_unless_any() {
    let router = build(vec![
        expression("all", r#"http.headers.x_v ^= "ok""#, 2),
        expression("any", r#"any(http.headers.x_v) == "yes""#, 1),
    ]);
    let req = |values: &[&str]| {
        let mut headers = Headers::default();
        for v in values {
            headers = headers.with("x-v", v);
        }
        Req {
            headers,
            ..Req::get("x", "/")
        }
        .name_in(&router)
    };
    assert_eq!(req(&["ok1", "ok2"]).as_deref(), Some("all"));
    assert_eq!(req(&["ok1", "yes"]).as_deref(), Some("any"));
    assert_eq!(req(&["no"]), None);
    assert_eq!(req(&[]), None, "an absent header fails even `!=`-free predicates");
}

#[test]
fn lower_segments_and_network_fields() {
    let router = build(vec![
        expression("lower", r#"lower(http.path) == "/caps""#, 9),
        expression(
            "seg",
            r#"http.path.segments.1 == "b" && http.path.segments.len == 3"#,
            8,
        ),
        expression("range", r#"http.path.segments.0_1 == "r/s""#, 7),
        expression("net", r#"net.src.ip in 192.168.0.0/16 && net.dst.port == 8443"#, 6),
        expression("proto", r#"net.protocol == "https" && tls.sni == "s.test""#, 5),
    ]);
    assert_eq!(Req::get("x", "/CAPS").name_in(&router).as_deref(), Some("lower"));
    assert_eq!(Req::get("x", "/a/b/c/").name_in(&router).as_deref(), Some("seg"));
    assert_eq!(Req::get("x", "/a/b/c/d").name_in(&router), None);
    assert_eq!(Req::get("x", "/r/s/t").name_in(&router).as_deref(), Some("range"));
    let mut req = Req::get("x", "/n");
    req.source = Some(SocketAddr::from(([192, 168, 3, 4], 5555)));
    req.destination = Some(SocketAddr::from(([127, 0, 0, 1], 8443)));
    assert_eq!(req.name_in(&router).as_deref(), Some("net"));
    let mut req = Req::get("x", "/p");
    req.protocol = "https";
    req.sni = Some("s.test".into());
    assert_eq!(req.name_in(&router).as_deref(), Some("proto"));
}

#[test]
fn not_and_or_combinations() {
    let router = build(vec![expression(
        "combo",
        r#"(http.host == "a.test" || http.host == "b.test") && !(http.path ^= "/private")"#,
        1,
    )]);
    assert_eq!(Req::get("a.test", "/x").name_in(&router).as_deref(), Some("combo"));
    assert_eq!(Req::get("b.test", "/x").name_in(&router).as_deref(), Some("combo"));
    assert_eq!(Req::get("b.test", "/private/x").name_in(&router), None);
    assert_eq!(Req::get("c.test", "/x").name_in(&router), None);
}

#[test]
fn styles_mix_in_one_router() {
    let router = build(vec![
        with_paths(route("traditional", 1), &["/t"]),
        expression("expr", r#"http.path ^= "/e""#, 1),
    ]);
    assert_eq!(Req::get("x", "/t/1").name_in(&router).as_deref(), Some("traditional"));
    assert_eq!(Req::get("x", "/e/1").name_in(&router).as_deref(), Some("expr"));
}

#[test]
fn invalid_expressions_name_the_route_position_and_expectation() {
    let bad = Arc::new(expression("broken", r#"http.path == "/a" && http.host == 1"#, 1));
    let err = Router::build(std::slice::from_ref(&bad)).expect_err("type error");
    let text = err.to_string();
    assert!(matches!(err, RouterError::InvalidExpression { .. }));
    assert!(
        text.contains(&bad.id.to_string()) && text.contains("(broken)"),
        "{text}"
    );
    assert!(
        text.contains("at column 35") && text.contains("expects a string literal"),
        "{text}"
    );
    let mixed = Arc::new(expression(
        "mixed",
        r#"http.path == "/a" && http.host == "b" || http.method == "GET""#,
        1,
    ));
    let text = Router::build(&[mixed]).expect_err("mixed").to_string();
    assert!(text.contains("cannot be mixed without parentheses"), "{text}");
}
