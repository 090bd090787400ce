//! `pre-function` and `post-function` on a real node with a real upstream:
//! Lua code that answers instead of the upstream, changes the upstream
//! request, adds a response header and logs; Kong's sandbox refusing `os`
//! and `io` and `untrusted_lua = on` allowing them; a runaway loop ending
//! in 500 within `lua_max_run_time` while the node keeps serving; a snippet
//! that does not parse refused when written, with Kong's message.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::admin_api::send_json;
use strait_e2e::deck::deck;
use strait_e2e::plugins::{echo_headers, echo_service, UPSTREAM};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{get, request, Gateway, GatewayOptions};

fn route(name: &str, plugins: Value) -> Value {
    json!({ "name": name, "paths": [format!("/{name}")], "plugins": plugins })
}

async fn gateway(options: GatewayOptions, routes: Value) -> (Gateway, Upstream) {
    serve(options, echo_service(routes, json!([]))).await
}

/// A node serving `config` (an `echo_service` document), its service
/// pointed at a real upstream.
async fn serve(options: GatewayOptions, config: Value) -> (Gateway, Upstream) {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;
    let config = config.to_string().replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&config).expect("config")).await;
    (gw, upstream)
}

/// Waits up to 5 seconds for the node's log to contain `text`.
async fn log_shows(gw: &Gateway, text: &str) -> bool {
    gw.log_shows(text, Duration::from_secs(5)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_function_guards_a_route_and_a_post_function_adds_a_header_and_logs() {
    let guard = r#"
        if not kong.request.get_header("x-api-key") then
          return kong.response.exit(401, { message = "key required" }, { ["X-Guard"] = "pre-function" })
        end
        kong.service.request.set_header("x-checked", kong.request.get_method() .. " " .. kong.request.get_path())
        kong.service.request.clear_header("x-api-key")
    "#;
    let routes = json!([
        route(
            "guarded",
            json!([{ "name": "pre-function", "config": { "access": [guard] } }])
        ),
        route(
            "served",
            json!([{ "name": "post-function", "config": {
            "header_filter": ["kong.response.set_header('x-served-by', 'post-function ' .. kong.response.get_status())"],
            "log": ["kong.log.notice('served ', kong.request.get_path(), ' with ', kong.response.get_status())"]
        } }])
        ),
    ]);
    let (gw, _upstream) = gateway(GatewayOptions::new().setting("log_level", "notice"), routes).await;

    let refused = gw.proxy(get("/guarded")).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(refused.json(), json!({ "message": "key required" }));
    assert_eq!(refused.header("x-guard").as_deref(), Some("pre-function"));
    assert!(refused
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));

    let passed = gw.proxy(request("GET", "/guarded/x", &[("x-api-key", "k1")], "")).await;
    assert_eq!(passed.status, 200, "{}", passed.text());
    let headers = echo_headers(&passed);
    assert_eq!(headers["x-checked"], "GET /guarded/x");
    assert!(headers.get("x-api-key").is_none(), "cleared: {headers}");

    let served = gw.proxy(get("/served")).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.header("x-served-by").as_deref(), Some("post-function 200"));
    assert!(
        log_shows(&gw, "[post-function] served /served with 200").await,
        "{}",
        gw.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_refuses_os_and_io_and_untrusted_lua_on_allows_them() {
    let probe = "local f = io.open('/proc/self/status') \
                 kong.service.request.set_header('x-io', tostring(f ~= nil)) f:close() \
                 kong.service.request.set_header('x-os', type(os.execute))";
    let routes = json!([
        route(
            "execute",
            json!([{ "name": "pre-function", "config": { "access": ["os.execute('true')"] } }])
        ),
        route(
            "probe",
            json!([{ "name": "pre-function", "config": { "access": [probe] } }])
        ),
    ]);
    let (sandboxed, _upstream) = gateway(GatewayOptions::new(), routes.clone()).await;
    let reply = sandboxed.proxy(get("/execute")).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.message().as_deref(), Some("An unexpected error occurred"));
    assert!(
        log_shows(&sandboxed, "attempt to call field 'execute' (a nil value)").await,
        "{}",
        sandboxed.log_tail()
    );
    let reply = sandboxed.proxy(get("/probe")).await;
    assert_eq!(reply.status, 500);
    assert!(log_shows(&sandboxed, "attempt to index global 'io' (a nil value)").await);

    let (open, _upstream) = gateway(GatewayOptions::new().setting("untrusted_lua", "on"), routes).await;
    let reply = open.proxy(get("/probe")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let headers = echo_headers(&reply);
    assert_eq!(headers["x-io"], "true");
    assert_eq!(headers["x-os"], "function");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_loop_ends_in_500_within_the_budget_while_requests_keep_flowing() {
    let routes = json!([
        route(
            "loop",
            json!([{ "name": "pre-function", "config": {
            "access": ["while true do pcall(function() while true do end end) end"]
        } }])
        ),
        route("plain", json!([])),
    ]);
    let options = GatewayOptions::new()
        .setting("lua_max_run_time", "300ms")
        .setting("worker_threads", "2");
    let (gw, _upstream) = gateway(options, routes).await;
    let gw = std::sync::Arc::new(gw);
    let looping = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = gw.proxy(get("/loop")).await;
            (reply.status.as_u16(), started.elapsed())
        })
    };
    // Meanwhile the node answers others.
    let mut served = 0;
    let until = Instant::now() + Duration::from_millis(400);
    while Instant::now() < until {
        assert_eq!(gw.proxy(get("/plain")).await.status, 200);
        served += 1;
    }
    assert!(served > 0);
    let (status, took) = looping.await.unwrap();
    assert_eq!(status, 500);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        log_shows(&gw, "exceeded lua_max_run_time (300 ms)").await,
        "{}",
        gw.log_tail()
    );
    // The worker that ran it lives on: every request is answered, the loop
    // again with 500.
    for _ in 0..4 {
        assert_eq!(gw.proxy(get("/plain")).await.status, 200);
        assert_eq!(gw.proxy(get("/loop")).await.status, 500);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_does_not_parse_is_refused_when_written() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let reply = send_json(
        &gw,
        "POST",
        "/plugins",
        &json!({ "name": "pre-function", "config": { "access": ["x ="] } }),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply
            .text()
            .contains(r#"error parsing pre-function: [string \"x =\"]:1: unexpected symbol near '<eof>'"#),
        "{}",
        reply.text()
    );
    let reply = send_json(
        &gw,
        "POST",
        "/plugins",
        &json!({ "name": "post-function", "config": {} }),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply
            .text()
            .contains("at least one of these fields must be non-empty: 'config.certificate'"),
        "{}",
        reply.text()
    );
    let reply = send_json(
        &gw,
        "POST",
        "/plugins",
        &json!({ "name": "post-function", "config": { "log": ["kong.log.err('x')"] } }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()["config"]["access"], json!([]));
    let root = gw.admin("GET", "/", &[], "").await.json();
    assert!(root["plugins"]["available_on_server"]["pre-function"].is_object());
    assert_eq!(
        root["plugins"]["available_on_server"]["pre-function"]["priority"],
        1_000_000
    );
}

/// A custom plugin as Kong's plugin template and documentation teach it:
/// `handler.lua` with PRIORITY, VERSION and phase methods, `schema.lua` in
/// Kong's schema DSL with typedefs. Only the PDK.
const GREETER_HANDLER: &str = r#"
local plugin = {
  PRIORITY = 1000,
  VERSION = "0.1.0",
}

function plugin:init_worker()
  kong.log.debug("saying hi from the 'init_worker' handler")
end

function plugin:access(plugin_conf)
  local who = kong.request.get_header(plugin_conf.request_header) or "anonymous"
  if plugin_conf.deny and who == plugin_conf.deny then
    return kong.response.exit(403, { message = "denied: " .. who })
  end
  kong.service.request.set_header(plugin_conf.upstream_header, string.rep(plugin_conf.greeting .. " ", plugin_conf.times) .. who)
  kong.ctx.shared.greeted = who
end

function plugin:header_filter(plugin_conf)
  kong.response.set_header(plugin_conf.response_header, "status " .. kong.response.get_status())
end

function plugin:body_filter(plugin_conf)
  if not plugin_conf.signature then
    return
  end
  local body = kong.response.get_raw_body()
  if body then
    kong.response.set_raw_body(body .. plugin_conf.signature)
  end
end

function plugin:log(plugin_conf)
  kong.log.notice("greeted ", kong.request.get_header(plugin_conf.request_header), " with ", plugin_conf.greeting)
end

return plugin
"#;

const GREETER_SCHEMA: &str = r#"
local typedefs = require "kong.db.schema.typedefs"

local PLUGIN_NAME = "greeter"

local schema = {
  name = PLUGIN_NAME,
  fields = {
    { consumer = typedefs.no_consumer },
    { protocols = typedefs.protocols_http },
    { config = {
        type = "record",
        fields = {
          { request_header = typedefs.header_name { required = true, default = "x-user" } },
          { upstream_header = typedefs.header_name { required = true, default = "x-greeting" } },
          { response_header = typedefs.header_name { required = true, default = "x-greeter" } },
          { greeting = { type = "string", required = true, default = "hello" } },
          { deny = { type = "string" } },
          { signature = { type = "string" } },
          { times = { type = "integer", default = 1, between = { 1, 10 } } },
        },
      },
    },
  },
}

return schema
"#;

/// The greeter plugin's folder under `dir`, and the node's settings that
/// load it.
fn with_greeter(dir: &std::path::Path) -> GatewayOptions {
    let folder = dir.join("kong/plugins/greeter");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("handler.lua"), GREETER_HANDLER).unwrap();
    std::fs::write(folder.join("schema.lua"), GREETER_SCHEMA).unwrap();
    let package_path = format!("{}/?.lua;;", dir.display());
    GatewayOptions::new()
        .setting("plugins", "bundled,greeter")
        .setting("lua_package_path", &package_path)
        .setting("log_level", "notice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_plugin_folder_loads_validates_and_runs_its_phases() {
    let dir = strait_e2e::TempDir::new();
    let options = with_greeter(dir.path());
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;

    let root = gw.admin("GET", "/", &[], "").await.json();
    assert_eq!(root["plugins"]["available_on_server"]["greeter"]["priority"], 1000);
    // The handler's VERSION, as Kong lists it.
    assert_eq!(root["plugins"]["available_on_server"]["greeter"]["version"], "0.1.0");
    let schema = gw.admin("GET", "/schemas/plugins/greeter", &[], "").await;
    assert_eq!(schema.status, 200, "{}", schema.text());

    // Configured through the Admin API.
    let service = send_json(
        &gw,
        "POST",
        "/services",
        &json!({ "name": "echo", "url": upstream.url("http") }),
    )
    .await;
    assert_eq!(service.status, 201, "{}", service.text());
    let created_route = send_json(
        &gw,
        "POST",
        "/services/echo/routes",
        &json!({ "name": "greet", "paths": ["/greet"] }),
    )
    .await;
    assert_eq!(created_route.status, 201, "{}", created_route.text());
    let refused = send_json(
        &gw,
        "POST",
        "/routes/greet/plugins",
        &json!({ "name": "greeter", "config": { "times": 50 } }),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["name"], "schema violation", "{}", refused.text());
    assert_eq!(
        refused.json()["fields"]["config"]["times"],
        "value should be between 1 and 10",
        "{}",
        refused.text()
    );
    let refused = send_json(
        &gw,
        "POST",
        "/routes/greet/plugins",
        &json!({ "name": "greeter", "config": { "request_header": "bad header" } }),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let created = send_json(
        &gw,
        "POST",
        "/routes/greet/plugins",
        &json!({ "name": "greeter", "config": { "greeting": "hi", "times": 2, "deny": "eve" } }),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()["config"]["request_header"], "x-user");

    let deadline = Instant::now() + Duration::from_secs(5);
    let greeted = loop {
        let reply = gw.proxy(request("GET", "/greet", &[("x-user", "bob")], "")).await;
        if reply.header("x-greeter").is_some() || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(greeted.status, 200, "{}", greeted.text());
    assert_eq!(echo_headers(&greeted)["x-greeting"], "hi hi bob");
    assert_eq!(greeted.header("x-greeter").as_deref(), Some("status 200"));
    assert!(
        log_shows(&gw, "[greeter] greeted bob with hi").await,
        "{}",
        gw.log_tail()
    );
    let denied = gw.proxy(request("GET", "/greet", &[("x-user", "eve")], "")).await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.json(), json!({ "message": "denied: eve" }));
    assert_eq!(denied.header("x-greeter").as_deref(), Some("status 403"));

    // And through POST /config (the declarative path).
    let routes = json!([route(
        "declared",
        json!([{ "name": "greeter", "config": { "greeting": "hey", "signature": "<!-- signed -->" } }])
    )]);
    let config = echo_service(routes, json!([]))
        .to_string()
        .replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&config).unwrap()).await;
    let declared = gw.proxy(get("/declared")).await;
    assert_eq!(declared.status, 200, "{}", declared.text());
    // The body filter buffered the body and appended the signature.
    let text = declared.text();
    let echoed = text.strip_suffix("<!-- signed -->").expect("signed by body_filter");
    let echoed: Value = serde_json::from_str(echoed).unwrap();
    assert_eq!(echoed["headers"]["x-greeting"], "hey anonymous");

    // And through decK (`deck gateway sync`, then a diff with no changes).
    let file = format!(
        "_format_version: \"3.0\"\nservices:\n  - name: echo\n    url: {}\n    routes:\n      - name: synced\n        paths: [/synced]\n        plugins:\n          - name: greeter\n            config: {{ greeting: yo, times: 3 }}\n",
        upstream.url("http")
    );
    std::fs::write(dir.path().join("kong.yml"), file).unwrap();
    let synced = deck(&gw, dir.path(), &["gateway", "sync", "kong.yml"])
        .await
        .expect_success("deck gateway sync");
    deck(&gw, dir.path(), &["gateway", "diff", "kong.yml"])
        .await
        .expect_success("deck gateway diff")
        .expect_no_changes(&synced.stdout);
    let deadline = Instant::now() + Duration::from_secs(5);
    let synced_reply = loop {
        let reply = gw.proxy(get("/synced")).await;
        if reply.status == 200 || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(synced_reply.status, 200, "{}", synced_reply.text());
    assert_eq!(echo_headers(&synced_reply)["x-greeting"], "yo yo yo anonymous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_plugin_that_does_not_load_stops_the_node_with_kongs_message() {
    let dir = strait_e2e::TempDir::new();
    let folder = dir.path().join("kong/plugins/broken");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("handler.lua"), "return { VERSION = '1.0.0' }").unwrap();
    std::fs::write(folder.join("schema.lua"), GREETER_SCHEMA).unwrap();
    let conf = dir.path().join("strait.conf");
    std::fs::write(
        &conf,
        format!(
            "plugins = bundled,broken\nlua_package_path = {}/?.lua;;\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let run = strait_e2e::run_strait(&["start", "--conf", conf.to_str().unwrap()], dir.path(), &[]).await;
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr
            .contains("error loading plugin schemas: on plugin 'broken': handler.PRIORITY must be an integer"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kong_ctx_shared_carries_a_value_from_a_custom_plugin_to_file_log() {
    let dir = strait_e2e::TempDir::new();
    let log_path = dir.path().join("requests.log");
    let routes = json!([route(
        "traced",
        json!([
            { "name": "greeter", "config": {} },
            { "name": "post-function", "config": {
                "header_filter": ["kong.log.set_serialize_value('greeted', kong.ctx.shared.greeted)"]
            } },
            { "name": "file-log", "config": { "path": log_path.to_str().unwrap() } }
        ])
    )]);
    let (gw, _upstream) = gateway(with_greeter(dir.path()), routes).await;
    let reply = gw.proxy(request("GET", "/traced", &[("x-user", "carol")], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "file-log wrote nothing: {}", gw.log_tail());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let entry: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["greeted"], "carol", "{line}");
    assert_eq!(entry["response"]["status"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_function_reads_the_body_and_sets_the_upstream_one_from_a_table() {
    let rewrite = "local body = kong.request.get_body() \
                   kong.service.request.set_body({ name = body.name, greeted = true }, 'application/json')";
    let routes = json!([route(
        "bodied",
        json!([{ "name": "pre-function", "config": { "access": [rewrite] } }])
    )]);
    let (gw, _upstream) = gateway(GatewayOptions::new(), routes).await;
    let reply = gw
        .proxy(request(
            "POST",
            "/bodied",
            &[("content-type", "application/json")],
            r#"{"name":"dan","extra":1}"#,
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echoed = reply.json();
    let body: Value = serde_json::from_str(echoed["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, json!({ "name": "dan", "greeted": true }));
    let length: usize = echoed["headers"]["content-length"].as_str().unwrap().parse().unwrap();
    assert_eq!(length, echoed["body"].as_str().unwrap().len());
}

/// A plugin that turns `x-user` into an `apikey` header: useful only if it
/// runs before key-auth, which its priority (10) does not give it.
const MINTER_HANDLER: &str = r#"
local Minter = {
  PRIORITY = 10,
  VERSION = "1.0.0",
}

function Minter:access(conf)
  local user = kong.request.get_header("x-user")
  if user then
    kong.service.request.set_header("apikey", conf.prefix .. user)
  end
end

return Minter
"#;

const MINTER_SCHEMA: &str = r#"
local typedefs = require "kong.db.schema.typedefs"

return {
  name = "minter",
  fields = {
    { consumer = typedefs.no_consumer },
    { protocols = typedefs.protocols_http },
    { config = {
        type = "record",
        fields = {
          { prefix = { type = "string", required = true, default = "key-" } },
        },
      },
    },
  },
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_moves_a_custom_plugin_before_key_auth_and_a_cycle_is_refused() {
    let dir = strait_e2e::TempDir::new();
    let folder = dir.path().join("kong/plugins/minter");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("handler.lua"), MINTER_HANDLER).unwrap();
    std::fs::write(folder.join("schema.lua"), MINTER_SCHEMA).unwrap();
    let options = GatewayOptions::new()
        .setting("plugins", "bundled,minter")
        .setting("lua_package_path", &format!("{}/?.lua;;", dir.path().display()));
    let routes = json!([route(
        "minted",
        json!([
            { "name": "key-auth", "config": {} },
            { "name": "minter", "instance_name": "minter-1", "config": {} }
        ])
    )]);
    let consumers = json!([{ "username": "bob", "keyauth_credentials": [{ "key": "key-bob" }] }]);
    let (gw, _upstream) = serve(options, echo_service(routes, consumers)).await;

    // By priority key-auth (1250) runs first and finds no key.
    let before = gw.proxy(request("GET", "/minted", &[("x-user", "bob")], "")).await;
    assert_eq!(before.status, 401, "{}", before.text());

    let moved = send_json(
        &gw,
        "PATCH",
        "/plugins/minter-1",
        &json!({ "ordering": { "before": { "access": ["key-auth"] } } }),
    )
    .await;
    assert_eq!(moved.status, 200, "{}", moved.text());
    assert_eq!(moved.json()["ordering"]["before"]["access"], json!(["key-auth"]));
    let after = gw.proxy(request("GET", "/minted", &[("x-user", "bob")], "")).await;
    assert_eq!(after.status, 200, "{}", after.text());
    assert_eq!(echo_headers(&after)["x-consumer-username"], "bob");

    // key-auth ordered before minter as well: a cycle, refused and named.
    let plugins = gw.admin("GET", "/routes/minted/plugins", &[], "").await.json();
    let key_auth = plugins["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "key-auth")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let cycle = send_json(
        &gw,
        "PATCH",
        &format!("/plugins/{key_auth}"),
        &json!({ "ordering": { "before": { "access": ["minter"] } } }),
    )
    .await;
    assert_eq!(cycle.status, 400, "{}", cycle.text());
    assert!(
        cycle
            .text()
            .contains("plugin ordering cycle: key-auth -> minter -> key-auth"),
        "{}",
        cycle.text()
    );
    // Nothing of the refused change was applied.
    let still = gw.proxy(request("GET", "/minted", &[("x-user", "bob")], "")).await;
    assert_eq!(still.status, 200, "{}", still.text());

    let own = send_json(
        &gw,
        "PATCH",
        "/plugins/minter-1",
        &json!({ "ordering": { "after": { "access": ["minter"] } } }),
    )
    .await;
    assert_eq!(own.status, 400, "{}", own.text());
    assert_eq!(
        own.json()["fields"]["ordering"]["after"]["access"],
        "a plugin cannot be ordered after itself ('minter')",
        "{}",
        own.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_code_runs_globally_and_body_filter_code_changes_the_body() {
    let mut config = echo_service(
        json!([
            route(
                "upper",
                json!([{ "name": "post-function", "config": {
                    "body_filter": ["if ngx.arg[1] then ngx.arg[1] = ngx.arg[1]:upper() end"]
                } }])
            ),
            route(
                "broken",
                json!([{ "name": "pre-function", "config": {
                    "access": ["local function inner() error('boom from lua') end inner()"]
                } }])
            ),
        ]),
        json!([]),
    );
    config["plugins"] = json!([{ "name": "pre-function", "config": {
        "rewrite": ["kong.service.request.set_header('x-rewritten', kong.request.get_path())"]
    } }]);
    let (gw, _upstream) = serve(GatewayOptions::new(), config).await;
    let reply = gw.proxy(get("/upper/a")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    assert!(text.contains("\"HEADERS\"") && !text.contains("\"headers\""), "{text}");
    assert!(text.contains("\"X-REWRITTEN\":\"/UPPER/A\""), "{text}");

    // Code that raises: Kong's 500, and the error with its traceback in the log.
    let broken = gw.proxy(get("/broken")).await;
    assert_eq!(broken.status, 500);
    assert_eq!(broken.json(), json!({ "message": "An unexpected error occurred" }));
    assert!(log_shows(&gw, "boom from lua").await, "{}", gw.log_tail());
    assert!(gw.log().contains("stack traceback"), "{}", gw.log_tail());
    assert!(gw.log().contains(":1: in local 'inner'"), "{}", gw.log_tail());
    assert!(reply
        .header("content-length")
        .is_none_or(|n| n == reply.text().len().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_code_reads_the_consumer_and_route_and_authenticates_a_consumer() {
    let read = "local c = kong.client.get_consumer() \
                kong.service.request.set_header('x-who', c and c.username or 'nobody') \
                kong.service.request.set_header('x-route', kong.router.get_route().name) \
                kong.service.request.set_header('x-service', kong.router.get_service().name) \
                kong.service.request.set_header('x-cred', kong.client.get_credential() and 'yes' or 'no')";
    let login = "local c = kong.client.load_consumer(kong.request.get_header('x-user'), true) \
                 if not c then return kong.response.error(401) end \
                 kong.client.authenticate(c, nil)";
    let routes = json!([
        route(
            "keyed",
            json!([
                { "name": "key-auth", "config": {} },
                { "name": "post-function", "config": { "access": [read] } }
            ])
        ),
        route(
            "login",
            json!([{ "name": "pre-function", "config": { "access": [login] } }])
        ),
    ]);
    let consumers = json!([{ "username": "bob", "keyauth_credentials": [{ "key": "k-bob" }] }]);
    let (gw, _upstream) = serve(GatewayOptions::new(), echo_service(routes, consumers)).await;

    let keyed = gw.proxy(request("GET", "/keyed", &[("apikey", "k-bob")], "")).await;
    assert_eq!(keyed.status, 200, "{}", keyed.text());
    let headers = echo_headers(&keyed);
    assert_eq!(headers["x-who"], "bob");
    assert_eq!(headers["x-route"], "keyed");
    assert_eq!(headers["x-service"], "echo");
    assert_eq!(headers["x-cred"], "yes");

    let login = gw.proxy(request("GET", "/login", &[("x-user", "bob")], "")).await;
    assert_eq!(login.status, 200, "{}", login.text());
    assert_eq!(echo_headers(&login)["x-consumer-username"], "bob");
    let stranger = gw.proxy(request("GET", "/login", &[("x-user", "eve")], "")).await;
    assert_eq!(stranger.status, 401);
    assert_eq!(stranger.json(), json!({ "message": "Unauthorized" }));
}
