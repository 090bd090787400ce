//! The plugin platform end to end, with real upstreams: key-auth (header,
//! query, body, hide_credentials, anonymous, duplicates, run_on_preflight),
//! acl (allow/deny, groups header, 401 vs 403), consumer headers, Kong's
//! scope precedence one row at a time, consumer-scoped plugins that apply
//! only after authentication, and plugin protocols.

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, gateway_with_echo};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{get, request, Gateway, GatewayOptions};

fn consumers() -> Value {
    json!([
        {
            "username": "alice", "custom_id": "a-1",
            "keyauth_credentials": [{ "key": "alice-key" }],
            "acls": [{ "group": "admins" }, { "group": "staff" }]
        },
        {
            "username": "bob",
            "keyauth_credentials": [{ "key": "bob-key" }],
            "acls": [{ "group": "guests" }]
        },
        { "username": "anon" }
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_finds_keys_and_sets_consumer_headers() {
    let config = json!({
        "_format_version": "3.0",
        "consumers": consumers(),
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "plain", "paths": ["/plain"], "plugins": [{ "name": "key-auth" }] },
                { "name": "hidden", "paths": ["/hidden"], "plugins": [{
                    "name": "key-auth",
                    "config": { "hide_credentials": true, "key_in_body": true, "key_names": ["apikey", "x-key"], "realm": "strait" }
                }] },
                { "name": "preflight", "paths": ["/preflight"], "plugins": [{
                    "name": "key-auth", "config": { "run_on_preflight": false }
                }] },
                { "name": "anonymous", "paths": ["/anonymous"], "plugins": [{
                    "name": "key-auth", "config": { "anonymous": "anon" }
                }] },
                { "name": "ghost", "paths": ["/ghost"], "plugins": [{
                    "name": "key-auth", "config": { "anonymous": "nobody-here" }
                }] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;

    let missing = gw.proxy(get("/plain")).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.message().as_deref(), Some("No API key found in request"));
    assert_eq!(missing.header("www-authenticate").as_deref(), Some("Key"));

    let wrong = gw.proxy(request("GET", "/plain", &[("apikey", "nope")], "")).await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.message().as_deref(), Some("Unauthorized"));

    let ok = gw.proxy(request("GET", "/plain", &[("apikey", "alice-key")], "")).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let headers = echo_headers(&ok);
    assert_eq!(headers["x-consumer-username"], "alice");
    assert_eq!(headers["x-consumer-custom-id"], "a-1");
    assert!(headers["x-consumer-id"].as_str().is_some_and(|id| id.len() == 36));
    assert!(headers["x-credential-identifier"]
        .as_str()
        .is_some_and(|id| id.len() == 36));
    assert!(headers.get("x-anonymous-consumer").is_none());
    assert_eq!(headers["apikey"], "alice-key", "credentials are kept unless hidden");

    let by_query = gw.proxy(get("/plain?apikey=bob-key&x=1")).await;
    assert_eq!(by_query.status, 200);
    assert_eq!(echo_headers(&by_query)["x-consumer-username"], "bob");

    let duplicate = gw.proxy(request("GET", "/plain?apikey=a&apikey=b", &[], "")).await;
    assert_eq!(duplicate.status, 401);
    assert_eq!(duplicate.message().as_deref(), Some("Duplicate API key found"));

    // hide_credentials strips the key from header, query and body.
    let hidden = gw.proxy(get("/hidden?apikey=alice-key&keep=1")).await;
    assert_eq!(hidden.status, 200, "{}", hidden.text());
    assert_eq!(hidden.json()["path"], "/?keep=1", "strip_path removed /hidden");
    let hidden = gw.proxy(request("GET", "/hidden", &[("x-key", "bob-key")], "")).await;
    assert_eq!(hidden.status, 200);
    assert!(echo_headers(&hidden).get("x-key").is_none());
    let form = gw
        .proxy(request(
            "POST",
            "/hidden",
            &[("content-type", "application/x-www-form-urlencoded")],
            "a=1&apikey=alice-key",
        ))
        .await;
    assert_eq!(form.status, 200, "{}", form.text());
    assert_eq!(form.json()["body"], "a=1");
    let json_body = gw
        .proxy(request(
            "POST",
            "/hidden",
            &[("content-type", "application/json")],
            r#"{"apikey":"alice-key","n":2}"#,
        ))
        .await;
    assert_eq!(json_body.status, 200, "{}", json_body.text());
    assert_eq!(json_body.json()["body"], r#"{"n":2}"#);
    let realm = gw.proxy(get("/hidden")).await;
    assert_eq!(
        realm.header("www-authenticate").as_deref(),
        Some("Key realm=\"strait\"")
    );

    let options = gw.proxy(request("OPTIONS", "/preflight", &[], "")).await;
    assert_eq!(options.status, 200, "preflight passes without a key");
    assert_eq!(gw.proxy(get("/preflight")).await.status, 401);

    let anonymous = gw.proxy(get("/anonymous")).await;
    assert_eq!(anonymous.status, 200);
    let headers = echo_headers(&anonymous);
    assert_eq!(headers["x-consumer-username"], "anon");
    assert_eq!(headers["x-anonymous-consumer"], "true");
    assert!(headers.get("x-credential-identifier").is_none());

    let ghost = gw.proxy(get("/ghost")).await;
    assert_eq!(ghost.status, 500);
    assert_eq!(
        ghost.message().as_deref(),
        Some("anonymous consumer nobody-here is configured but doesn't exist")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_allows_and_denies_by_consumer_groups() {
    let config = json!({
        "_format_version": "3.0",
        "consumers": consumers(),
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "admins", "paths": ["/admins"], "plugins": [
                    { "name": "key-auth", "config": { "anonymous": "anon" } },
                    { "name": "acl", "config": { "allow": ["admins"] } }
                ] },
                { "name": "noguests", "paths": ["/noguests"], "plugins": [
                    { "name": "key-auth" },
                    { "name": "acl", "config": { "deny": ["guests"], "hide_groups_header": true } }
                ] },
                { "name": "open", "paths": ["/open"], "plugins": [
                    { "name": "acl", "config": { "allow": ["admins"] } }
                ] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    let alice = gw
        .proxy(request("GET", "/admins", &[("apikey", "alice-key")], ""))
        .await;
    assert_eq!(alice.status, 200);
    assert_eq!(echo_headers(&alice)["x-consumer-groups"], "admins, staff");
    let bob = gw.proxy(request("GET", "/admins", &[("apikey", "bob-key")], "")).await;
    assert_eq!(bob.status, 403);
    assert_eq!(bob.message().as_deref(), Some("You cannot consume this service"));
    // The anonymous consumer has no groups and no credential: 401.
    let anonymous = gw.proxy(get("/admins")).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.message().as_deref(), Some("Unauthorized"));

    let alice = gw
        .proxy(request("GET", "/noguests", &[("apikey", "alice-key")], ""))
        .await;
    assert_eq!(alice.status, 200);
    assert!(echo_headers(&alice).get("x-consumer-groups").is_none());
    let bob = gw
        .proxy(request("GET", "/noguests", &[("apikey", "bob-key")], ""))
        .await;
    assert_eq!(bob.status, 403);

    // No authentication plugin ran: no consumer, no groups.
    assert_eq!(gw.proxy(get("/open")).await.status, 401);
}

/// Each row of Kong's precedence table: the most specific instance of a
/// plugin wins, and consumer-scoped instances apply once the consumer is
/// known. request-termination answers with the scope's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_precedence_follows_kong_row_by_row() {
    fn term(scope: &str) -> Value {
        json!({ "name": "request-termination", "config": { "status_code": 200, "message": scope } })
    }
    fn with(mut plugin: Value, fields: Value) -> Value {
        for (k, v) in fields.as_object().expect("fields") {
            plugin[k] = v.clone();
        }
        plugin
    }
    // Every scope is configured for route r1/service s1/consumer alice, and
    // each test route removes the more specific ones to expose the next row.
    let rows: [(&str, &[&str]); 8] = [
        ("route+service+consumer", &["rsc", "rc", "sc", "rs", "c", "r", "s", "g"]),
        ("route+consumer", &["rc", "sc", "rs", "c", "r", "s", "g"]),
        ("service+consumer", &["sc", "rs", "c", "r", "s", "g"]),
        ("route+service", &["rs", "c", "r", "s", "g"]),
        ("consumer", &["c", "r", "s", "g"]),
        ("route", &["r", "s", "g"]),
        ("service", &["s", "g"]),
        ("global", &["g"]),
    ];
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    for (expected, scopes) in rows {
        let mut plugins = Vec::new();
        let (service, route, consumer) = ("s1", "r1", "alice");
        for scope in scopes {
            let mut fields = json!({});
            if scope.contains('r') {
                fields["route"] = json!(route);
            }
            if scope.contains('s') {
                fields["service"] = json!(service);
            }
            if scope.contains('c') {
                fields["consumer"] = json!(consumer);
            }
            plugins.push(with(term(scope), fields));
        }
        let config = json!({
            "_format_version": "3.0",
            "consumers": consumers(),
            "services": [{
                "name": service, "url": upstream.url("http"),
                "routes": [{ "name": route, "paths": ["/p"] }]
            }],
            "plugins": plugins.iter().map(|p| {
                let mut p = p.clone();
                for key in ["route", "service", "consumer"] {
                    if let Some(name) = p.get(key).and_then(Value::as_str).map(str::to_string) {
                        p[key] = json!(name);
                    }
                }
                p
            }).collect::<Vec<_>>(),
        });
        // A key-auth on the route identifies alice before request-termination runs.
        let mut config = config;
        config["services"][0]["routes"][0]["plugins"] = json!([{ "name": "key-auth" }]);
        gw.apply(&config).await;
        let reply = gw.proxy(request("GET", "/p", &[("apikey", "alice-key")], "")).await;
        let want = scopes[0];
        assert_eq!(
            reply.message().as_deref(),
            Some(want),
            "row {expected}: {}",
            reply.text()
        );
        // Bob is another consumer: consumer-scoped instances never apply to him.
        let bob = gw.proxy(request("GET", "/p", &[("apikey", "bob-key")], "")).await;
        let bob_want = scopes.iter().find(|s| !s.contains('c')).copied();
        assert_eq!(
            bob.message().as_deref(),
            bob_want,
            "row {expected}, bob: {}",
            bob.text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_plugins_follow_admin_writes_and_protocols_filter() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let config = json!({
        "_format_version": "3.0",
        "consumers": consumers(),
        "services": [{
            "name": "s1", "url": upstream.url("http"),
            "routes": [{ "name": "r1", "paths": ["/p"], "plugins": [{ "name": "key-auth" }] }]
        }]
    });
    gw.apply(&config).await;
    let call = || gw.proxy(request("GET", "/p", &[("apikey", "alice-key")], ""));
    assert_eq!(call().await.status, 200);
    let created = gw
        .admin(
            "POST",
            "/consumers/alice/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "request-termination", "config": { "status_code": 429, "message": "alice paused" } })
                .to_string(),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().expect("id").to_string();
    strait_e2e::eventually(std::time::Duration::from_secs(5), "consumer plugin live", || async {
        let reply = call().await;
        anyhow::ensure!(reply.status == 429, "status {}", reply.status);
        Ok(())
    })
    .await;
    // Bob is untouched.
    let bob = gw.proxy(request("GET", "/p", &[("apikey", "bob-key")], "")).await;
    assert_eq!(bob.status, 200);
    // A plugin limited to https does not run on plain http.
    let patched = gw
        .admin(
            "PATCH",
            &format!("/plugins/{id}"),
            &[("content-type", "application/json")],
            json!({ "protocols": ["https"] }).to_string(),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    strait_e2e::eventually(std::time::Duration::from_secs(5), "protocol filter live", || async {
        let reply = call().await;
        anyhow::ensure!(reply.status == 200, "status {}", reply.status);
        Ok(())
    })
    .await;
    // key-auth cannot be scoped to a consumer (Kong's no_consumer).
    let refused = gw
        .admin(
            "POST",
            "/consumers/alice/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "key-auth" }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["fields"]["consumer"], "value must be null");
}

/// The consumer's fields are held beside the request's header map until a plugin reads them
/// (strait-plugins identity.rs): a request-transformer after key-auth and acl that renames one
/// finds it, one that only adds a field leaves them to the encoder, and an HTTP/2 (gRPC)
/// upstream gets them in its map. Each way the upstream sees the same fields, the client's
/// spoofed ones replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_fields_reach_every_upstream_and_the_plugins_that_read_them() {
    let h2 = Upstream::start(UpstreamKind::H2c).await;
    let acl = json!({ "name": "acl", "config": { "allow": ["admins"] } });
    let config = json!({
        "_format_version": "3.0",
        "consumers": consumers(),
        "services": [
            { "name": "echo", "url": "UPSTREAM", "routes": [
                { "name": "renames", "paths": ["/renames"], "plugins": [{ "name": "key-auth" }, acl,
                    { "name": "request-transformer", "config": {
                        "rename": { "headers": ["x-consumer-username:x-user"] } } }] },
                { "name": "adds", "paths": ["/adds"], "plugins": [{ "name": "key-auth" }, acl,
                    { "name": "request-transformer", "config": { "add": { "headers": ["x-added:1"] } } }] }
            ] },
            { "name": "h2", "url": h2.url("grpc"), "routes": [
                { "name": "h2", "paths": ["/echo.Service"], "protocols": ["grpc"], "strip_path": false,
                  "plugins": [{ "name": "key-auth" }, acl] }
            ] }
        ]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    let spoofed = [
        ("apikey", "alice-key"),
        ("x-consumer-id", "spoofed"),
        ("x-anonymous-consumer", "true"),
    ];
    let expect_alice = |headers: &Value| {
        assert!(
            headers["x-consumer-id"].as_str().is_some_and(|id| id.len() == 36),
            "{headers}"
        );
        assert_eq!(headers["x-consumer-custom-id"], "a-1", "{headers}");
        assert!(headers["x-credential-identifier"]
            .as_str()
            .is_some_and(|id| id.len() == 36));
        assert_eq!(headers["x-consumer-groups"], "admins, staff", "{headers}");
        assert!(headers.get("x-anonymous-consumer").is_none(), "{headers}");
    };

    let renamed = gw.proxy(request("GET", "/renames", &spoofed, "")).await;
    assert_eq!(renamed.status, 200, "{}", renamed.text());
    let headers = echo_headers(&renamed);
    expect_alice(&headers);
    assert_eq!(headers["x-user"], "alice");
    assert!(headers.get("x-consumer-username").is_none(), "{headers}");

    let added = gw.proxy(request("GET", "/adds", &spoofed, "")).await;
    assert_eq!(added.status, 200, "{}", added.text());
    let headers = echo_headers(&added);
    expect_alice(&headers);
    assert_eq!(headers["x-consumer-username"], "alice");
    assert_eq!(headers["x-added"], "1");

    let mut conn = strait_e2e::Conn::h2c(gw.proxy_addr()).await.expect("h2c connect");
    let mut grpc = spoofed.to_vec();
    grpc.extend([("content-type", "application/grpc"), ("te", "trailers")]);
    let reply = conn
        .send(request("POST", "/echo.Service/Call", &grpc, "\0\0\0\0\0"))
        .await
        .expect("grpc call");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["version"], "HTTP/2", "{}", reply.text());
    let headers = echo_headers(&reply);
    expect_alice(&headers);
    assert_eq!(headers["x-consumer-username"], "alice");
}
