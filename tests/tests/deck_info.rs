//! decK's meta keys on a real node: a `deck gateway dump --select-tag` file
//! (`_info.select_tags`) loads into another node through `POST /config` with
//! its tags on every entity, `_info.defaults` fill what entities leave out,
//! and `_konnect` is refused with a Kong-style error naming it.

use serde_json::json;
use strait_e2e::admin_api::data;
use strait_e2e::deck::deck;
use strait_e2e::{Gateway, GatewayOptions, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_select_tag_dump_loads_into_another_node_with_its_tags() {
    let source = Gateway::start(GatewayOptions::new()).await;
    let (status, body) = source
        .post_config(
            &json!({
                "_format_version": "3.0",
                "services": [
                    { "name": "mine", "url": "http://127.0.0.1:9", "tags": ["team-a"],
                      "routes": [{ "name": "mine-route", "paths": ["/mine"], "tags": ["team-a"] }] },
                    { "name": "theirs", "url": "http://127.0.0.1:9", "tags": ["team-b"] }
                ]
            })
            .to_string(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let dir = TempDir::new();
    deck(
        &source,
        dir.path(),
        &["gateway", "dump", "--select-tag", "team-a", "-o", "team.yaml", "--yes"],
    )
    .await
    .expect_success("deck gateway dump --select-tag");
    let dumped = std::fs::read_to_string(dir.path().join("team.yaml")).expect("team.yaml");
    assert!(
        dumped.contains("select_tags"),
        "decK writes _info.select_tags:\n{dumped}"
    );

    let target = Gateway::start(GatewayOptions::new()).await;
    let (status, body) = target.post_config(&dumped).await;
    assert_eq!(status, 201, "{body}");
    let services = data(&target.admin_get("/services").await.json());
    assert_eq!(services.len(), 1, "only the team's service: {services:?}");
    assert_eq!(services[0]["name"], "mine");
    assert_eq!(services[0]["tags"], json!(["team-a"]));
    let routes = data(&target.admin_get("/routes").await.json());
    assert_eq!(routes[0]["tags"], json!(["team-a"]));
    // decK sees the loaded node as the file: nothing to change.
    deck(&target, dir.path(), &["gateway", "diff", "team.yaml"])
        .await
        .expect_success("deck gateway diff")
        .expect_no_changes("loaded with POST /config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_defaults_apply_and_konnect_is_refused() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (status, body) = gw
        .post_config(
            &json!({
                "_format_version": "3.0",
                "_workspace": "default",
                "_info": {
                    "select_tags": ["synced"],
                    "defaults": { "service": { "read_timeout": 1234 }, "route": { "preserve_host": true } }
                },
                "services": [{ "name": "s", "url": "http://127.0.0.1:9", "routes": [{ "name": "r", "paths": ["/r"] }] }]
            })
            .to_string(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let service = gw.admin_get("/services/s").await.json();
    assert_eq!(service["read_timeout"], 1234);
    assert_eq!(service["tags"], json!(["synced"]));
    assert_eq!(gw.admin_get("/routes/r").await.json()["preserve_host"], true);

    let (status, body) = gw
        .post_config(&json!({ "_format_version": "3.0", "_konnect": { "control_plane_name": "cp" } }).to_string())
        .await;
    assert_eq!(status, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["name"], "invalid declarative configuration");
    assert!(
        error["fields"]["_konnect"]
            .as_str()
            .is_some_and(|m| m.contains("Konnect")),
        "{error}"
    );
    // The rejected post left the configuration as it was.
    assert_eq!(gw.admin_get("/services/s").await.status, 200);
}
