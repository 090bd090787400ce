//! Consumer groups on a real node: Kong's endpoints from both sides,
//! plugins scoped to a group applying to its members only (with Kong's
//! precedence against consumer and route scopes), ACLs that count consumer
//! groups, declarative `consumer_groups` / `consumers[].groups`, and a
//! decK dump → sync → diff round trip.

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, send_json};
use strait_e2e::plugins::gateway_with_echo;
use strait_e2e::{request, Gateway, GatewayOptions, TempDir};

fn terminate(status: u16, message: &str) -> Value {
    json!({ "name": "request-termination", "config": { "status_code": status, "message": message } })
}

async fn call(gw: &Gateway, path: &str, key: &str) -> (u16, String) {
    let reply = gw.proxy(request("GET", path, &[("apikey", key)], "")).await;
    let message = reply.message().unwrap_or_else(|| reply.text());
    (reply.status.as_u16(), message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_plugins_apply_to_members_only_and_membership_is_live() {
    let config = json!({
        "_format_version": "3.0",
        "consumers": [
            { "username": "alice", "keyauth_credentials": [{ "key": "alice-key" }], "groups": [{ "name": "gold" }] },
            { "username": "bob", "keyauth_credentials": [{ "key": "bob-key" }] },
            { "username": "carol", "keyauth_credentials": [{ "key": "carol-key" }],
              "plugins": [terminate(420, "carol's own")] }
        ],
        "consumer_groups": [
            { "name": "gold", "consumers": [{ "username": "carol" }], "plugins": [terminate(418, "gold members")] },
            { "name": "acl-free", "consumers": ["bob"] }
        ],
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "open", "paths": ["/open"], "plugins": [{ "name": "key-auth" }] },
                { "name": "scoped", "paths": ["/scoped"], "plugins": [{ "name": "key-auth" }, terminate(200, "route")] },
                { "name": "acl", "paths": ["/acl"], "plugins": [
                    { "name": "key-auth" },
                    { "name": "acl", "config": { "allow": ["gold"], "include_consumer_groups": true } }
                ] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;

    // Members get the group's plugin; others do not.
    assert_eq!(call(&gw, "/open", "alice-key").await, (418, "gold members".into()));
    assert_eq!(
        call(&gw, "/open", "bob-key").await.0,
        200,
        "bob is in no group with plugins"
    );
    // Consumer group beats route; consumer beats consumer group (Kong's order).
    assert_eq!(call(&gw, "/scoped", "alice-key").await, (418, "gold members".into()));
    assert_eq!(call(&gw, "/scoped", "bob-key").await, (200, "route".into()));
    assert_eq!(call(&gw, "/scoped", "carol-key").await, (420, "carol's own".into()));
    // A route + consumer-group plugin beats a consumer-only one.
    let route_id = gw.admin_get("/routes/scoped").await.json()["id"].clone();
    let body = json!({ "name": "request-termination", "route": { "id": route_id }, "consumer_group": { "name": "gold" },
        "config": { "status_code": 421, "message": "gold on this route" } });
    expect(
        &send_json(&gw, "POST", "/plugins", &body).await,
        201,
        "POST a route+group plugin",
    );
    assert_eq!(
        call(&gw, "/scoped", "carol-key").await,
        (421, "gold on this route".into())
    );
    assert_eq!(call(&gw, "/open", "carol-key").await, (420, "carol's own".into()));

    // ACL with include_consumer_groups: the group name counts.
    assert_eq!(
        call(&gw, "/acl", "alice-key").await,
        (418, "gold members".into()),
        "group plugin runs first"
    );
    assert_eq!(call(&gw, "/acl", "bob-key").await.0, 403);

    // Membership from the consumer's side, live on the proxy.
    let reply = send_json(
        &gw,
        "POST",
        "/consumers/bob/consumer_groups",
        &json!({ "group": "gold" }),
    )
    .await;
    let added = expect(&reply, 201, "POST /consumers/bob/consumer_groups");
    assert_eq!(added["consumer"]["username"], "bob");
    assert_eq!(added["consumer_groups"][0]["name"], "gold");
    assert_eq!(call(&gw, "/open", "bob-key").await, (418, "gold members".into()));
    let reply = send_json(
        &gw,
        "POST",
        "/consumer_groups/gold/consumers",
        &json!({ "consumer": "bob" }),
    )
    .await;
    assert_eq!(reply.status.as_u16(), 409, "{}", reply.text());
    let reply = send_json(
        &gw,
        "POST",
        "/consumer_groups/gold/consumers",
        &json!({ "consumer": "nobody" }),
    )
    .await;
    assert_eq!(reply.status.as_u16(), 404, "{}", reply.text());
    let reply = send_json(&gw, "POST", "/consumer_groups/gold/consumers", &json!({})).await;
    assert_eq!(reply.status.as_u16(), 400, "{}", reply.text());

    let group = expect(&gw.admin_get("/consumer_groups/gold").await, 200, "GET group");
    let mut names: Vec<&str> = group["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["username"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(group["consumer_group"]["name"], "gold");
    assert_eq!(names, ["alice", "bob", "carol"]);
    let bare = gw.admin_get("/consumer_groups/gold?list_consumers=false").await.json();
    assert!(bare.get("consumers").is_none(), "{bare}");
    let of_bob = data(&gw.admin_get("/consumers/bob/consumer_groups").await.json());
    let mut bob_groups: Vec<&str> = of_bob.iter().map(|g| g["name"].as_str().unwrap()).collect();
    bob_groups.sort_unstable();
    assert_eq!(bob_groups, ["acl-free", "gold"]);
    assert_eq!(
        data(&gw.admin_get("/consumer_groups/gold/consumers").await.json()).len(),
        3
    );

    // Leaving the group takes the plugin away at once.
    let reply = gw.admin("DELETE", "/consumer_groups/gold/consumers/bob", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    assert_eq!(call(&gw, "/open", "bob-key").await.0, 200);
    let reply = gw
        .admin("DELETE", "/consumers/alice/consumer_groups/gold", &[], "")
        .await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    assert_eq!(call(&gw, "/open", "alice-key").await.0, 200);
    assert_eq!(call(&gw, "/acl", "alice-key").await.0, 403, "no longer in gold");

    // Two groups with the same plugin at the same scope: the first by name
    // wins, whatever the order the consumer joined them in.
    for (group, status) in [("omega", 432), ("alpha", 431)] {
        expect(
            &send_json(&gw, "POST", "/consumer_groups", &json!({ "name": group })).await,
            201,
            "POST group",
        );
        let plugin = json!({ "name": "request-termination", "consumer_group": { "name": group },
            "config": { "status_code": status, "message": group } });
        expect(
            &send_json(&gw, "POST", "/plugins", &plugin).await,
            201,
            "POST group plugin",
        );
        let member = json!({ "consumer": "bob" });
        expect(
            &send_json(&gw, "POST", &format!("/consumer_groups/{group}/consumers"), &member).await,
            201,
            "join",
        );
    }
    assert_eq!(call(&gw, "/open", "bob-key").await, (431, "alpha".into()));
    let reply = gw.admin("DELETE", "/consumer_groups/alpha", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    assert_eq!(call(&gw, "/open", "bob-key").await, (432, "omega".into()));

    // A plugin cannot be scoped to a consumer and a group at once.
    let body = json!({ "name": "request-termination", "consumer": { "username": "bob" }, "consumer_group": { "name": "gold" } });
    let reply = send_json(&gw, "POST", "/plugins", &body).await;
    assert_eq!(reply.status.as_u16(), 400, "{}", reply.text());
    // Deleting the group takes its memberships and plugins with it.
    let gold_id = gw.admin_get("/consumer_groups/gold").await.json()["consumer_group"]["id"].clone();
    let reply = gw.admin("DELETE", "/consumer_groups/gold", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    assert_eq!(call(&gw, "/open", "carol-key").await, (420, "carol's own".into()));
    let plugins = data(&gw.admin_get("/plugins").await.json());
    assert!(
        plugins.iter().all(|p| p["consumer_group"]["id"] != gold_id),
        "{plugins:?}"
    );
    assert_eq!(
        plugins.iter().filter(|p| p.get("consumer_group").is_some()).count(),
        1,
        "omega's stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_round_trip_through_config_and_deck() {
    let dir = TempDir::new();
    let file = json!({
        "_format_version": "3.0",
        "consumer_groups": [{ "name": "gold", "tags": ["tier"], "plugins": [terminate(418, "gold")] }, { "name": "silver" }],
        "consumers": [
            { "username": "alice", "groups": [{ "name": "gold" }, { "name": "silver" }] },
            { "username": "bob", "groups": ["silver"] }
        ]
    });
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (status, body) = gw.post_config(&file.to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        data(&gw.admin_get("/consumer_groups/silver/consumers").await.json()).len(),
        2
    );
    // The export is Kong's flat form and loads back as no change.
    let exported = gw.admin_get("/config").await.json()["config"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(exported.contains("consumer_group_consumers:"), "{exported}");
    let (status, body) = gw.post_config(&json!({ "config": exported }).to_string()).await;
    assert_eq!(status, 201, "{body}");
    // A membership that names a missing group is an error at its path.
    let mut broken = file.clone();
    broken["consumers"][1]["groups"] = json!([{ "name": "platinum" }]);
    let (status, body) = gw.post_config(&broken.to_string()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("platinum"), "{body}");

    strait_e2e::deck::deck(&gw, dir.path(), &["gateway", "dump", "-o", "dump.yaml", "--yes"])
        .await
        .expect_success("deck gateway dump");
    let dumped = std::fs::read_to_string(dir.path().join("dump.yaml")).unwrap();
    assert!(
        dumped.contains("consumer_groups:") && dumped.contains("groups:"),
        "{dumped}"
    );
    let target = Gateway::start(GatewayOptions::new()).await;
    strait_e2e::deck::deck(&target, dir.path(), &["gateway", "sync", "dump.yaml"])
        .await
        .expect_success("deck gateway sync");
    strait_e2e::deck::deck(&target, dir.path(), &["gateway", "diff", "dump.yaml"])
        .await
        .expect_success("deck gateway diff")
        .expect_no_changes("synced from a dump");
    let gold = target.admin_get("/consumer_groups/gold").await.json();
    assert_eq!(gold["consumers"].as_array().map(Vec::len), Some(1), "{gold}");
    let plugins = data(&target.admin_get("/plugins").await.json());
    assert_eq!(plugins.len(), 1);
    assert_eq!(plugins[0]["consumer_group"]["id"], gold["consumer_group"]["id"]);
}
