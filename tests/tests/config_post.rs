//! `POST /config` and `GET /config`: every accepted body form, Kong's 400 error body (nested and
//! flattened), `check_hash`, and that a rejected config never disturbs the running one.

use serde_json::{json, Value};
use strait_e2e::bad_inputs::bad_inputs;
use strait_e2e::declarative::{answering, config, many_routes, route, terminating_service};
use strait_e2e::{get, Gateway, GatewayOptions};

const BAD_PATH_YAML: &str = "_format_version: \"3.0\"\nservices:\n  - name: ok\n    url: http://127.0.0.1:9\n  - name: bad\n    url: http://127.0.0.1:9\n    routes:\n      - name: r\n        paths: [\"no-slash\"]\n";

/// A config whose `/live` route answers `message`.
fn live(message: &str) -> Value {
    config(vec![terminating_service(
        "live",
        vec![answering(route("live", &["/live"]), message)],
    )])
}

fn yaml_live(message: &str) -> String {
    format!(
        "_format_version: \"3.0\"\nservices:\n  - name: live\n    url: http://127.0.0.1:9\n    routes:\n      - name: live\n        paths: [/live]\n        plugins:\n          - name: request-termination\n            config: {{status_code: 200, message: {message}}}\n"
    )
}

async fn live_message(gw: &Gateway) -> Option<String> {
    gw.proxy(get("/live")).await.message()
}

/// Waits until `/live` answers `message` (a 201 may precede the swap by a moment).
async fn wait_live(gw: &Gateway, message: &str) {
    let proxy = gw.proxy_addr();
    strait_e2e::eventually(
        std::time::Duration::from_secs(5),
        "posted config not served",
        || async move {
            let reply = strait_e2e::send_h1(proxy, get("/live")).await?;
            anyhow::ensure!(reply.message().as_deref() == Some(message), "served {}", reply.text());
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_json_yaml_and_wrapped_bodies() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let forms: Vec<(&str, String, &str)> = vec![
        ("application/json", live("json").to_string(), "json"),
        ("application/x-yaml", yaml_live("xyaml"), "xyaml"),
        ("text/yaml", yaml_live("textyaml"), "textyaml"),
        (
            "application/json",
            json!({ "config": yaml_live("wrapped-yaml") }).to_string(),
            "wrapped-yaml",
        ),
        (
            "application/json",
            json!({ "config": live("wrapped-json").to_string() }).to_string(),
            "wrapped-json",
        ),
    ];
    for (content_type, body, message) in forms {
        let reply = gw.post_config_as("/config", content_type, body.into_bytes()).await;
        assert_eq!(reply.status, 201, "{message} as {content_type}: {}", reply.text());
        assert!(reply.json().is_object(), "201 body is the loaded config");
        wait_live(&gw, message).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_config_is_400_with_fields() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let reply = gw
        .post_config_as("/config", "application/x-yaml", BAD_PATH_YAML.as_bytes().to_vec())
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], 14, "{body}");
    assert_eq!(body["name"], "invalid declarative configuration");
    assert!(body["message"].is_string());
    assert!(body["fields"].is_object(), "{body}");
    let fields = body["fields"].to_string();
    assert!(
        fields.contains("services") && fields.contains("routes") && fields.contains("paths"),
        "{fields}"
    );
    assert!(fields.contains("should start with: / (or ~ for a regex)"), "{fields}");
    assert!(
        body.get("flattened_errors").is_none() || body["flattened_errors"].is_null(),
        "only on request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flatten_errors_lists_entity_errors() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let reply = gw
        .post_config_as(
            "/config?flatten_errors=1",
            "application/x-yaml",
            BAD_PATH_YAML.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], 14);
    let flattened = body["flattened_errors"]
        .as_array()
        .unwrap_or_else(|| panic!("flattened_errors: {body}"));
    let route = flattened
        .iter()
        .find(|entity| entity["entity_type"] == "route")
        .unwrap_or_else(|| panic!("a route entry: {body}"));
    let errors = route["errors"].as_array().expect("errors array");
    let error = errors
        .iter()
        .find(|e| e["field"].as_str().is_some_and(|f| f.contains("paths")))
        .unwrap_or_else(|| panic!("an error on paths: {route}"));
    assert_eq!(error["type"], "field");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("should start with"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_hash_skips_an_unchanged_config() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let first = live("one").to_string().into_bytes();
    let reply = gw.post_config_as("/config", "application/json", first.clone()).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let before = gw.admin_get("/status").await.json();

    let reply = gw
        .post_config_as("/config?check_hash=1", "application/json", first)
        .await;
    assert_eq!(reply.status, 304, "{}", reply.text());
    let after = gw.admin_get("/status").await.json();
    assert_eq!(
        after["config_version"], before["config_version"],
        "304 must not change anything"
    );
    assert_eq!(after["configuration_hash"], before["configuration_hash"]);

    let reply = gw
        .post_config_as(
            "/config?check_hash=1",
            "application/json",
            live("two").to_string().into_bytes(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    wait_live(&gw, "two").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_config_returns_the_loaded_config() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&live("exported")).await;
    let reply = gw.admin_get("/config").await;
    assert_eq!(reply.status, 200);
    let text = reply.json()["config"].as_str().expect("config string").to_string();
    let parsed: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("config is not YAML/JSON ({e}): {text}"));
    assert!(parsed["_format_version"].is_string(), "{text}");
    let services = parsed["services"].as_array().expect("services");
    assert!(services.iter().any(|s| s["name"] == "live"), "{text}");
    // What GET returns can be posted back as is.
    let (status, body) = gw.post_config(&text).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(live_message(&gw).await.as_deref(), Some("exported"));
}

/// A big answer (every entity) is sent while it is written, chunked; a small one whole with its
/// length. Both are the whole configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_post_answer_is_sent_as_it_is_written_and_a_small_one_whole() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let body = many_routes(3000, "big").to_string().into_bytes();
    let reply = gw.post_config_as("/config", "application/json", body).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        reply.headers.get("transfer-encoding").map(|v| v.as_bytes()),
        Some(&b"chunked"[..])
    );
    assert!(reply.headers.get("content-length").is_none());
    assert!(reply.body.len() > 1024 * 1024, "{} bytes", reply.body.len());
    let answer = reply.json();
    assert_eq!(answer["_format_version"], "3.0");
    assert_eq!(answer["routes"].as_array().expect("routes").len(), 3001);
    assert_eq!(answer["services"].as_array().expect("services").len(), 1);

    let reply = gw
        .post_config_as("/config", "application/json", live("small").to_string().into_bytes())
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert!(reply.headers.get("transfer-encoding").is_none());
    let length: usize = reply.headers["content-length"].to_str().unwrap().parse().unwrap();
    assert_eq!(length, reply.body.len());
    assert_eq!(reply.json()["services"][0]["name"], "live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_configs_leave_the_running_one_serving() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&live("original")).await;
    let version = gw.admin_get("/status").await.json()["config_version"].clone();
    for bad in bad_inputs() {
        let reply = gw.post_config_as("/config", bad.content_type, bad.bytes.clone()).await;
        assert_eq!(reply.status, 400, "{}: {}", bad.name, reply.text());
        let body = reply.json();
        assert_eq!(body["code"], 14, "{}: {body}", bad.name);
        assert_eq!(body["name"], "invalid declarative configuration", "{}", bad.name);
        if let Some(word) = bad.admin_mentions {
            assert!(
                reply.text().contains(word),
                "{}: 400 body should mention {word:?}: {}",
                bad.name,
                reply.text()
            );
        }
        assert_eq!(
            live_message(&gw).await.as_deref(),
            Some("original"),
            "{} disturbed the running config",
            bad.name
        );
    }
    let reply = gw
        .post_config_as("/config", "application/x-yaml", BAD_PATH_YAML.as_bytes().to_vec())
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        gw.admin_get("/status").await.json()["config_version"],
        version,
        "no version bump on rejection"
    );
    let services = gw.admin_get("/services").await.json();
    assert!(
        services["data"].as_array().unwrap().iter().any(|s| s["name"] == "live"),
        "{services}"
    );
    assert_eq!(live_message(&gw).await.as_deref(), Some("original"));
}

/// `count` routes `/d{i}` answering `messages[i]`, every plugin with a fixed id (as decK and
/// generated files give them), so a re-post differs only where a message does.
fn fixed_ids(messages: &[String]) -> Value {
    let routes: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            json!({
                "name": format!("d{i}"),
                "paths": [format!("/d{i}")],
                "plugins": [{
                    "id": format!("00000000-0000-4000-8000-{i:012}"),
                    "name": "request-termination",
                    "config": {"status_code": 200, "message": message}
                }]
            })
        })
        .collect();
    json!({"_format_version": "3.0", "services": [{"name": "d", "url": "http://127.0.0.1:9", "routes": routes}]})
}

/// A re-post that changes a few entities commits only those: the others keep their
/// `created_at` (a full replace would stamp them again), a removed route and a new one that
/// takes its path both take effect, the version moves by one, and all of it survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repost_commits_only_what_changed() {
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    let mut messages: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    let reply = gw
        .post_config_as(
            "/config",
            "application/json",
            fixed_ids(&messages).to_string().into_bytes(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let route_d0 = gw.admin_get("/routes/d0").await.json();
    let version = |status: &Value| status["config_version"].as_u64().expect("config_version");
    let before = version(&gw.admin_get("/status").await.json());
    // Parsing stamps entities without created_at with the current second: let it move.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    messages[3] = "changed".into();
    let mut document = fixed_ids(&messages);
    let routes = document["services"][0]["routes"].as_array_mut().expect("routes");
    let mut last = routes.pop().expect("d11");
    last["name"] = json!("d11-renamed");
    last["plugins"][0]["id"] = json!("00000000-0000-4000-8000-999999999999");
    routes.push(last);
    let reply = gw
        .post_config_as("/config", "application/json", document.to_string().into_bytes())
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(gw.proxy(get("/d3")).await.message().as_deref(), Some("changed"));
    assert_eq!(gw.proxy(get("/d11")).await.message().as_deref(), Some("m11"));
    assert_eq!(gw.admin_get("/routes/d11").await.status, 404);
    assert_eq!(gw.admin_get("/routes/d11-renamed").await.status, 200);
    assert_eq!(
        gw.admin_get("/routes/d0").await.json()["created_at"],
        route_d0["created_at"],
        "an unchanged route was written again"
    );
    assert_eq!(version(&gw.admin_get("/status").await.json()), before + 1);
    let hash = gw.admin_get("/status").await.json()["configuration_hash"].clone();
    gw.restart().await;
    assert_eq!(gw.proxy(get("/d3")).await.message().as_deref(), Some("changed"));
    assert_eq!(gw.admin_get("/routes/d11").await.status, 404);
    assert_eq!(
        gw.admin_get("/routes/d0").await.json()["created_at"],
        route_d0["created_at"]
    );
    assert_eq!(gw.admin_get("/status").await.json()["configuration_hash"], hash);
}

/// How many `POST /config`s this node applied as their changes (parsed
/// against the last accepted document, see `declarative::memo`).
fn applied_as_changes(gw: &Gateway) -> usize {
    gw.log().matches("configuration replaced by its changes").count()
}

/// A re-post that differs in a few items is parsed and applied as those
/// changes only; what breaks that path (another write in between, a
/// rejected document) falls back to the whole parse, and every result is
/// what the whole document says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repost_is_parsed_as_its_changes() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut messages: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    let post = |messages: &[String]| {
        let body = fixed_ids(messages).to_string().into_bytes();
        let gw = &gw;
        async move { gw.post_config_as("/config", "application/json", body).await }
    };
    assert_eq!(post(&messages).await.status, 201);
    assert_eq!(applied_as_changes(&gw), 0, "a first load has nothing to compare with");

    messages[7] = "seven".into();
    let reply = post(&messages).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(gw.proxy(get("/d7")).await.message().as_deref(), Some("seven"));
    assert_eq!(applied_as_changes(&gw), 1, "{}", gw.log_tail());
    // The 201 body is the whole configuration, as after a whole load.
    assert_eq!(reply.json()["routes"].as_array().map(Vec::len), Some(40));

    // Another write moves the version: the next post is parsed whole.
    let patched = gw
        .admin(
            "PATCH",
            "/routes/d1",
            &[("content-type", "application/json")],
            r#"{"paths": ["/patched"]}"#,
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    messages[8] = "eight".into();
    assert_eq!(post(&messages).await.status, 201);
    assert_eq!(applied_as_changes(&gw), 1);
    assert_eq!(gw.proxy(get("/d1")).await.message().as_deref(), Some("m1"));
    assert_eq!(gw.proxy(get("/d8")).await.message().as_deref(), Some("eight"));

    // A rejected post changes nothing, memo included.
    let mut broken = fixed_ids(&messages);
    broken["services"][0]["routes"][2]["paths"] = json!(["no-slash"]);
    let reply = gw
        .post_config_as("/config", "application/json", broken.to_string().into_bytes())
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let fields = reply.json()["fields"].to_string();
    assert!(fields.contains("should start with: / (or ~ for a regex)"), "{fields}");
    messages[9] = "nine".into();
    assert_eq!(post(&messages).await.status, 201);
    assert_eq!(applied_as_changes(&gw), 2, "{}", gw.log_tail());
    assert_eq!(gw.proxy(get("/d9")).await.message().as_deref(), Some("nine"));
    assert_eq!(gw.proxy(get("/d2")).await.message().as_deref(), Some("m2"));

    // A removed route stops answering; a duplicate name is Kong's error.
    messages.pop();
    assert_eq!(post(&messages).await.status, 201);
    assert_eq!(applied_as_changes(&gw), 3);
    assert_eq!(gw.admin_get("/routes/d39").await.status, 404);
    assert_eq!(gw.proxy(get("/d38")).await.message().as_deref(), Some("m38"));
    let mut duplicate = fixed_ids(&messages);
    duplicate["services"][0]["routes"][3]["name"] = json!("d4");
    let reply = gw
        .post_config_as("/config", "application/json", duplicate.to_string().into_bytes())
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(gw.proxy(get("/d3")).await.message().as_deref(), Some("m3"));
}
