use serde_json::json;

use super::*;

const SERVICE: EntityKind = EntityKind::Services;
const ROUTE: EntityKind = EntityKind::Routes;

#[test]
fn service_defaults_are_kongs() {
    let out = valid(SERVICE, json!({"host": "example.com"}));
    assert_eq!(out["protocol"], "http");
    assert_eq!(out["port"], 80);
    assert_eq!(out["retries"], 5);
    for timeout in ["connect_timeout", "write_timeout", "read_timeout"] {
        assert_eq!(out[timeout], 60000);
    }
    assert_eq!(out["enabled"], true);
    assert_eq!(out["path"], Value::Null);
    assert_eq!(out["created_at"], NOW);
    assert_eq!(out["updated_at"], NOW);
}

#[test]
fn service_url_shorthand_sets_protocol_host_port_path() {
    let out = valid(SERVICE, json!({"url": "https://api.example.com/v1/x?q=1"}));
    assert_eq!(
        (&out["protocol"], &out["host"], &out["port"], &out["path"]),
        (&json!("https"), &json!("api.example.com"), &json!(443), &json!("/v1/x"))
    );
    let out = valid(SERVICE, json!({"url": "http://u@10.0.0.1:8080"}));
    assert_eq!(
        (&out["host"], &out["port"], &out["path"]),
        (&json!("10.0.0.1"), &json!(8080), &Value::Null)
    );
    let out = valid(SERVICE, json!({"url": "grpc://svc:9000"}));
    assert_eq!(out["protocol"], "grpc");
}

#[test]
fn service_url_without_host_reports_host() {
    // Like Kong's URL parser, a string without `scheme://` is all path.
    assert_eq!(
        invalid(SERVICE, json!({"url": "nohost"})),
        vec![
            pair("host", "required field missing"),
            pair("path", "should start with: /")
        ]
    );
    assert_eq!(
        invalid(SERVICE, json!({"url": 3})),
        vec![pair("url", "expected a string"), pair("host", "required field missing")]
    );
}

#[test]
fn service_field_rules() {
    let errors = invalid(
        SERVICE,
        json!({
            "name": "bad name", "host": "h:80", "port": 70000, "protocol": "ftp",
            "retries": -1, "connect_timeout": 0, "path": "x", "enabled": "yes", "extra": 1,
        }),
    );
    assert_eq!(
        errors,
        vec![
            pair(
                "name",
                "invalid value 'bad name': the only accepted ascii characters are alphanumerics or ., -, _, and ~"
            ),
            pair("retries", "value should be between 0 and 32767"),
            pair(
                "protocol",
                "expected one of: grpc, grpcs, http, https, tcp, tls, tls_passthrough, udp, ws, wss"
            ),
            pair("host", "must not have a port"),
            pair("port", "value should be between 0 and 65535"),
            pair("path", "should start with: /"),
            pair("connect_timeout", "value should be between 1 and 2147483646"),
            pair("enabled", "expected a boolean"),
            pair("extra", "unknown field"),
        ]
    );
}

#[test]
fn service_requires_host_and_checks_path_format() {
    assert_eq!(
        invalid(SERVICE, json!({})),
        vec![pair("host", "required field missing")]
    );
    let bad = |path: &str| invalid(SERVICE, json!({"host": "h", "path": path}));
    assert_eq!(bad("/a//b"), vec![pair("path", "must not have empty segments")]);
    assert_eq!(bad("/a%zz"), vec![pair("path", "invalid url-encoded value: '%zz'")]);
    assert_eq!(
        bad("/a b"),
        vec![pair(
            "path",
            "invalid path: '/a b' (characters outside of the reserved list of RFC 3986 found)"
        )]
    );
}

#[test]
fn service_tls_options_only_for_https_and_tls() {
    let ok = valid(
        SERVICE,
        json!({"url": "https://h", "tls_verify": true, "tls_verify_depth": 3}),
    );
    assert_eq!(ok["tls_verify"], true);
    assert_eq!(
        invalid(SERVICE, json!({"host": "h", "tls_verify": true})),
        vec![
            pair("tls_verify", "value must be null"),
            pair("", "failed conditional validation given value of field 'protocol'"),
        ]
    );
    assert_eq!(
        invalid(SERVICE, json!({"host": "h", "protocol": "tcp", "path": "/x"}))[0],
        pair("path", "value must be null")
    );
}

#[test]
fn route_defaults_are_kongs() {
    let out = valid(ROUTE, json!({"paths": ["/"]}));
    assert_eq!(out["protocols"], json!(["http", "https"]));
    assert_eq!(out["https_redirect_status_code"], 426);
    assert_eq!(out["regex_priority"], 0);
    assert_eq!(out["strip_path"], true);
    assert_eq!(out["path_handling"], "v0");
    assert_eq!(out["preserve_host"], false);
    assert_eq!(out["request_buffering"], true);
    assert_eq!(out["response_buffering"], true);
    assert_eq!(out["service"], Value::Null);
    assert!(out.get("priority").is_none());
}

#[test]
fn route_must_match_on_something() {
    assert_eq!(invalid(ROUTE, json!({})), vec![pair("", ROUTE_HTTPS_NEEDS_MATCHER)]);
    assert_eq!(
        invalid(ROUTE, json!({"protocols": ["http"]})),
        vec![pair("", ROUTE_HTTP_NEEDS_MATCHER)]
    );
    for matcher in [
        json!({"methods": ["GET"]}),
        json!({"hosts": ["a.com"]}),
        json!({"headers": {"x": ["1"]}}),
    ] {
        valid(ROUTE, matcher);
    }
    valid(ROUTE, json!({"snis": ["a.com"]}));
    let out = valid(ROUTE, json!({"expression": "http.path == \"/\"", "priority": 7}));
    assert_eq!(out["priority"], 7);
}

#[test]
fn route_expressions_are_parsed_and_type_checked() {
    let errors = invalid(ROUTE, json!({"expression": "http.path == \"/\" && http.host == 1"}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, "expression");
    assert!(
        errors[0].1.starts_with("invalid expression: at column 34:"),
        "{}",
        errors[0].1
    );
}

#[test]
fn route_snis_need_a_tls_protocol() {
    assert_eq!(
        invalid(ROUTE, json!({"protocols": ["http"], "paths": ["/"], "snis": ["a.com"]})),
        vec![pair(
            "",
            "'snis' can only be set when 'protocols' is 'grpcs', 'https', 'tls', 'tls_passthrough', or 'wss'"
        )]
    );
    assert_eq!(
        invalid(ROUTE, json!({"snis": ["1.2.3.4", "a.com:80"]})),
        vec![
            pair("snis[0]", "must not be an IP"),
            pair("snis[1]", "must not have a port")
        ]
    );
}

#[test]
fn route_paths_are_prefixes_or_valid_regexes() {
    let out = valid(ROUTE, json!({"paths": ["/a", "~/users/(?P<id>\\d+)$"]}));
    assert_eq!(out["paths"][1], "~/users/(?P<id>\\d+)$");
    valid(ROUTE, json!({"paths": ["~x"]}));
    let errors = invalid(ROUTE, json!({"paths": ["a", "x/y", "/a//b", "~/(", "/%zz", 5]}));
    assert_eq!(errors[0], pair("paths[0]", ROUTE_PATH_START));
    assert_eq!(errors[1], pair("paths[1]", ROUTE_PATH_START));
    assert_eq!(errors[2], pair("paths[2]", "must not have empty segments"));
    assert_eq!(errors[3].0, "paths[3]");
    assert!(errors[3].1.starts_with("invalid regex: '/(' ("), "{}", errors[3].1);
    assert_eq!(errors[4], pair("paths[4]", "invalid url-encoded value: '%zz'"));
    assert_eq!(errors[5], pair("paths[5]", "expected a string"));
    assert_eq!(errors.len(), 6);
    let huge = invalid(ROUTE, json!({"paths": ["~/(a{1000}){1000}"]}));
    assert!(huge[0].1.starts_with("invalid regex"), "{}", huge[0].1);
    assert!(huge[0].1.contains("size limit"), "{}", huge[0].1);
}

#[test]
fn route_hosts_allow_one_edge_wildcard_and_a_port() {
    valid(
        ROUTE,
        json!({"hosts": ["*.a.com", "a.*", "a.com:8000", "*.a.com:80", "10.0.0.1"]}),
    );
    assert_eq!(
        invalid(ROUTE, json!({"hosts": ["*.*.com", "a.*.com", "a.com:99999", "a b"]})),
        vec![
            pair("hosts[0]", "invalid wildcard: must have at most one wildcard"),
            pair(
                "hosts[1]",
                "invalid wildcard: must be placed at leftmost or rightmost label"
            ),
            pair("hosts[2]", "invalid port number"),
            pair("hosts[3]", "invalid hostname: a b"),
        ]
    );
}

#[test]
fn route_methods_and_headers() {
    let out = valid(
        ROUTE,
        json!({"methods": ["GET", "GET", "POST"], "headers": {"X-Version": ["1", "2"]}}),
    );
    assert_eq!(out["methods"], json!(["GET", "POST"]));
    assert_eq!(out["headers"], json!({"x-version": ["1", "2"]}));
    assert_eq!(
        invalid(
            ROUTE,
            json!({"methods": ["get"], "headers": {"Host": ["a"], "x y": ["1"], "x": "1"}})
        ),
        vec![
            pair("methods[0]", "invalid value: get"),
            pair(
                "headers.Host",
                "cannot contain 'host' header, which must be specified in the 'hosts' attribute"
            ),
            pair(
                "headers.x y",
                "bad header name 'x y', allowed characters are A-Z, a-z, 0-9, '_', and '-'"
            ),
            pair("headers.x", "expected an array"),
        ]
    );
}

#[test]
fn route_enumerations() {
    assert_eq!(
        invalid(
            ROUTE,
            json!({"paths": ["/"], "https_redirect_status_code": 200, "path_handling": "v2"})
        ),
        vec![
            pair("https_redirect_status_code", "expected one of: 426, 301, 302, 307, 308"),
            pair("path_handling", "expected one of: v0, v1"),
        ]
    );
    assert_eq!(
        invalid(ROUTE, json!({"paths": ["/"], "protocols": []}))[0],
        pair("protocols", "length must be at least 1")
    );
    assert_eq!(
        invalid(ROUTE, json!({"paths": ["/"], "protocols": ["http", "tcp"]}))[0],
        pair(
            "protocols",
            "these sets are mutually exclusive: ('http', 'https'), ('tcp', 'tls', 'udp')"
        )
    );
}

#[test]
fn route_service_reference_is_an_id_record() {
    let id = "6b5e5e5e-1111-4222-8333-444455556666";
    let out = valid(ROUTE, json!({"paths": ["/"], "service": {"id": id}}));
    assert_eq!(out["service"], json!({"id": id}));
    // Kong ignores fields beside the primary key (decK sends `{id, name}`).
    let out = valid(ROUTE, json!({"paths": ["/"], "service": {"id": id, "name": "x"}}));
    assert_eq!(out["service"], json!({"id": id}));
    assert_eq!(
        invalid(ROUTE, json!({"paths": ["/"], "service": {"name": "x"}})),
        vec![pair("service.id", "required field missing")]
    );
    assert_eq!(
        invalid(ROUTE, json!({"paths": ["/"], "service": "x"})),
        vec![pair("service", "expected a record")]
    );
}

#[test]
fn stream_and_grpc_routes_follow_their_subschemas() {
    valid(
        ROUTE,
        json!({"protocols": ["tcp"], "destinations": [{"ip": "10.0.0.0/8", "port": 80}]}),
    );
    valid(ROUTE, json!({"protocols": ["tls_passthrough"], "snis": ["a.com"]}));
    assert_eq!(
        invalid(ROUTE, json!({"protocols": ["tcp"], "paths": ["/"]})),
        vec![
            pair(
                "paths",
                "cannot set 'paths' when 'protocols' is 'tcp', 'tls', 'tls_passthrough' or 'udp'"
            ),
            pair(
                "",
                "must set one of 'sources', 'destinations', 'snis' when 'protocols' is 'tcp', 'tls' or 'udp'"
            ),
        ]
    );
    assert_eq!(
        invalid(ROUTE, json!({"protocols": ["tcp"], "sources": [{"ip": "300.1.1.1"}]})),
        vec![pair("sources[0].ip", "invalid ip or cidr range: '300.1.1.1'")]
    );
    let grpc = valid(ROUTE, json!({"protocols": ["grpc"], "paths": ["/pkg.Svc/"]}));
    assert_eq!(grpc["strip_path"], false);
    assert_eq!(
        invalid(
            ROUTE,
            json!({"protocols": ["grpc"], "paths": ["/"], "strip_path": true, "methods": ["GET"]})
        ),
        vec![
            pair(
                "strip_path",
                "cannot set 'strip_path' when 'protocols' is 'grpc' or 'grpcs'"
            ),
            pair("methods", "cannot set 'methods' when 'protocols' is 'grpc' or 'grpcs'"),
        ]
    );
}

#[test]
fn many_errors_are_collected_not_just_the_first() {
    let errors = invalid(
        ROUTE,
        json!({"name": 1, "paths": ["x"], "strip_path": "no", "regex_priority": 1.5, "tags": [""]}),
    );
    assert_eq!(errors.len(), 5, "{errors:?}");
}
