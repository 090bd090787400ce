//! Admin API writes with Kong's semantics: POST/PUT/PATCH/DELETE on entities, nested endpoints,
//! foreign keys by id or name, cascades, plugin uniqueness, credentials, certificates with SNIs,
//! targets under their upstream, and form/multipart bodies.

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, expect_error, send_form, send_json, send_multipart};
use strait_e2e::{Gateway, GatewayOptions, TestCa};

async fn gateway() -> Gateway {
    Gateway::start(GatewayOptions::new()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_get_put_patch_delete_follow_kong() {
    let gw = gateway().await;
    let created = send_json(
        &gw,
        "POST",
        "/services",
        &json!({"name": "s", "url": "http://a.test:81/p"}),
    )
    .await;
    let created = expect(&created, 201, "POST /services");
    assert_eq!(
        (created["host"].clone(), created["port"].clone()),
        (json!("a.test"), json!(81))
    );
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(expect(&gw.admin_get("/services/s").await, 200, "by name")["id"], id);
    assert_eq!(
        expect(&gw.admin_get(&format!("/services/{id}")).await, 200, "by id")["name"],
        "s"
    );

    // PATCH merges; null clears; url is re-split.
    let patched = send_json(&gw, "PATCH", "/services/s", &json!({"retries": 2, "path": null})).await;
    let patched = expect(&patched, 200, "PATCH");
    assert_eq!(
        (patched["retries"].clone(), patched["path"].clone()),
        (json!(2), Value::Null)
    );
    assert_eq!(patched["host"], "a.test");
    let resplit = send_json(
        &gw,
        "PATCH",
        &format!("/services/{id}"),
        &json!({"url": "https://b.test/q"}),
    )
    .await;
    let resplit = expect(&resplit, 200, "PATCH url");
    assert_eq!(
        (
            &resplit["protocol"],
            &resplit["host"],
            &resplit["port"],
            &resplit["path"]
        ),
        (&json!("https"), &json!("b.test"), &json!(443), &json!("/q"))
    );
    assert_eq!(resplit["retries"], 2, "other fields kept");
    let other_id = json!({"id": "6f1e4a1c-9f57-4c4e-9d0b-000000000009", "retries": 3});
    let kept = expect(
        &send_json(&gw, "PATCH", "/services/s", &other_id).await,
        200,
        "PATCH id",
    );
    assert_eq!(
        (kept["id"].as_str(), kept["retries"].clone()),
        (Some(id.as_str()), json!(3))
    );

    // PUT replaces the whole entity (absent fields back to defaults), by name or id.
    let put = send_json(&gw, "PUT", "/services/s", &json!({"host": "c.test"})).await;
    let put = expect(&put, 200, "PUT existing");
    assert_eq!(
        (put["id"].as_str(), put["retries"].clone(), put["protocol"].clone()),
        (Some(id.as_str()), json!(5), json!("http"))
    );
    let upserted = expect(
        &send_json(&gw, "PUT", "/services/fresh", &json!({"host": "d.test"})).await,
        200,
        "PUT new",
    );
    assert_eq!(upserted["name"], "fresh");
    let new_id = "6f1e4a1c-9f57-4c4e-9d0b-1c0f7b1d2e3f";
    let by_id = send_json(
        &gw,
        "PUT",
        &format!("/services/{new_id}"),
        &json!({"host": "e.test", "name": "e"}),
    )
    .await;
    assert_eq!(expect(&by_id, 200, "PUT by new id")["id"], new_id);

    // DELETE is 204, also when the entity is absent.
    assert_eq!(gw.admin("DELETE", "/services/s", &[], "").await.status, 204);
    assert_eq!(gw.admin("DELETE", "/services/s", &[], "").await.status, 204);
    let missing = gw.admin_get("/services/s").await;
    assert_eq!(expect(&missing, 404, "gone"), json!({"message": "Not found"}));
    let left: Vec<Value> = data(&gw.admin_get("/services").await.json())
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_and_foreign_entity_endpoints() {
    let gw = gateway().await;
    expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s1", "host": "h"})).await,
        201,
        "s1",
    );
    expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s2", "host": "h"})).await,
        201,
        "s2",
    );
    let route = send_json(
        &gw,
        "POST",
        "/services/s1/routes",
        &json!({"name": "r1", "paths": ["/r1"]}),
    )
    .await;
    let route = expect(&route, 201, "nested POST");
    let s1 = gw.admin_get("/services/s1").await.json();
    assert_eq!(route["service"]["id"], s1["id"]);
    assert_eq!(data(&gw.admin_get("/services/s1/routes").await.json()).len(), 1);
    assert_eq!(data(&gw.admin_get("/services/s2/routes").await.json()).len(), 0);
    expect(&gw.admin_get("/services/s1/routes/r1").await, 200, "owned child");
    expect(
        &gw.admin_get("/services/s2/routes/r1").await,
        404,
        "child of another parent",
    );
    expect(&gw.admin_get("/services/nope/routes").await, 404, "missing parent");

    assert_eq!(
        expect(&gw.admin_get("/routes/r1/service").await, 200, "parent")["name"],
        "s1"
    );
    let renamed = send_json(&gw, "PATCH", "/routes/r1/service", &json!({"retries": 1})).await;
    assert_eq!(expect(&renamed, 200, "PATCH parent")["retries"], 1);
    let refused = gw.admin("DELETE", "/routes/r1/service", &[], "").await;
    assert_eq!(
        expect(&refused, 405, "DELETE parent"),
        json!({"message": "Method not allowed"})
    );
    let patched = send_json(&gw, "PATCH", "/services/s1/routes/r1", &json!({"paths": ["/x"]})).await;
    assert_eq!(expect(&patched, 200, "nested PATCH")["paths"], json!(["/x"]));
    expect(
        &gw.admin("DELETE", "/services/s2/routes/r1", &[], "").await,
        404,
        "nested DELETE elsewhere",
    );
    expect(
        &gw.admin("DELETE", "/services/s1/routes/r1", &[], "").await,
        204,
        "nested DELETE",
    );
    expect(&gw.admin_get("/routes/r1").await, 404, "deleted");

    // PUT /routes/{r}/service creates a service and attaches the route to it.
    let orphan = send_json(&gw, "POST", "/routes", &json!({"name": "orphan", "paths": ["/o"]})).await;
    expect(&orphan, 201, "route without service");
    expect(&gw.admin_get("/routes/orphan/service").await, 404, "no service yet");
    let attached = send_json(&gw, "PUT", "/routes/orphan/service", &json!({"host": "new.test"})).await;
    let attached = expect(&attached, 200, "PUT parent");
    assert_eq!(
        gw.admin_get("/routes/orphan").await.json()["service"]["id"],
        attached["id"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_by_name_or_id() {
    let gw = gateway().await;
    let service = expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await,
        201,
        "s",
    );
    let by_name = send_json(
        &gw,
        "POST",
        "/routes",
        &json!({"paths": ["/a"], "service": {"name": "s"}}),
    )
    .await;
    assert_eq!(
        expect(&by_name, 201, "by name")["service"],
        json!({"id": service["id"]})
    );
    let by_id = send_json(
        &gw,
        "POST",
        "/routes",
        &json!({"paths": ["/b"], "service": {"id": service["id"]}}),
    )
    .await;
    expect(&by_id, 201, "by id");
    let form = send_form(&gw, "POST", "/routes", "paths[1]=/c&service.name=s").await;
    assert_eq!(expect(&form, 201, "form by name")["service"]["id"], service["id"]);

    let unresolved = send_json(
        &gw,
        "POST",
        "/routes",
        &json!({"paths": ["/d"], "service": {"name": "nope"}}),
    )
    .await;
    let body = expect_error(&unresolved, 400, 13, "foreign keys unresolved");
    assert_eq!(
        body["message"],
        "foreign key unresolved (service.name: the foreign key cannot be resolved with '{name=\"nope\"}' for an existing 'services' entity)"
    );
    let ghost = "0b5d2c2e-1111-4a4a-8b8b-000000000001";
    let missing = send_json(
        &gw,
        "POST",
        "/routes",
        &json!({"paths": ["/e"], "service": {"id": ghost}}),
    )
    .await;
    let body = expect_error(&missing, 400, 4, "foreign key violation");
    assert_eq!(body["fields"], json!({"service": {"id": ghost}}));
    assert_eq!(
        data(&gw.admin_get("/routes").await.json()).len(),
        3,
        "nothing written by failures"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_cascade_like_kong() {
    let gw = gateway().await;
    expect(
        &send_json(&gw, "POST", "/consumers", &json!({"username": "alice"})).await,
        201,
        "consumer",
    );
    expect(
        &send_json(&gw, "POST", "/consumers/alice/key-auth", &json!({"key": "k1"})).await,
        201,
        "key 1",
    );
    expect(
        &send_json(&gw, "POST", "/consumers/alice/key-auth", &json!({})).await,
        201,
        "generated key",
    );
    let plugin = json!({"name": "request-termination", "config": {"status_code": 403}});
    expect(
        &send_json(&gw, "POST", "/consumers/alice/plugins", &plugin).await,
        201,
        "consumer plugin",
    );
    assert_eq!(data(&gw.admin_get("/key-auths").await.json()).len(), 2);
    expect(
        &gw.admin("DELETE", "/consumers/alice", &[], "").await,
        204,
        "delete consumer",
    );
    assert_eq!(
        data(&gw.admin_get("/key-auths").await.json()).len(),
        0,
        "credentials cascade"
    );
    assert_eq!(
        data(&gw.admin_get("/plugins").await.json()).len(),
        0,
        "consumer plugins cascade"
    );

    expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await,
        201,
        "s",
    );
    expect(
        &send_json(
            &gw,
            "POST",
            "/services/s/routes",
            &json!({"name": "r", "paths": ["/r"]}),
        )
        .await,
        201,
        "r",
    );
    expect(
        &send_json(&gw, "POST", "/routes/r/plugins", &plugin).await,
        201,
        "route plugin",
    );
    expect(
        &send_json(&gw, "POST", "/services/s/plugins", &plugin).await,
        201,
        "service plugin",
    );
    let refused = gw.admin("DELETE", "/services/s", &[], "").await;
    let body = expect_error(&refused, 400, 4, "foreign key violation");
    assert_eq!(
        body["message"],
        "an existing 'routes' entity references this 'services' entity"
    );
    expect(&gw.admin("DELETE", "/routes/r", &[], "").await, 204, "delete route");
    assert_eq!(
        data(&gw.admin_get("/plugins").await.json()).len(),
        1,
        "route plugin cascaded"
    );
    expect(&gw.admin("DELETE", "/services/s", &[], "").await, 204, "delete service");
    assert_eq!(
        data(&gw.admin_get("/plugins").await.json()).len(),
        0,
        "service plugin cascaded"
    );

    expect(
        &send_json(&gw, "POST", "/upstreams", &json!({"name": "pool"})).await,
        201,
        "upstream",
    );
    expect(
        &send_json(
            &gw,
            "POST",
            "/upstreams/pool/targets",
            &json!({"target": "127.0.0.1:9"}),
        )
        .await,
        201,
        "target",
    );
    expect(
        &gw.admin("DELETE", "/upstreams/pool", &[], "").await,
        204,
        "delete upstream",
    );
    assert_eq!(data(&gw.admin_get("/targets").await.json()).len(), 0, "targets cascade");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_are_unique_per_scope() {
    let gw = gateway().await;
    expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await,
        201,
        "s",
    );
    expect(
        &send_json(
            &gw,
            "POST",
            "/services/s/routes",
            &json!({"name": "r", "paths": ["/r"]}),
        )
        .await,
        201,
        "r",
    );
    let plugin = json!({"name": "request-termination"});
    let first = expect(
        &send_json(&gw, "POST", "/routes/r/plugins", &plugin).await,
        201,
        "first",
    );
    assert_eq!(first["config"]["status_code"], 503, "defaults filled in: {first}");
    let again = send_json(&gw, "POST", "/routes/r/plugins", &plugin).await;
    let body = expect_error(&again, 409, 5, "unique constraint violation");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("UNIQUE violation detected on '{consumer=null,name=\"request-termination\""),
        "{body}"
    );
    expect(
        &send_json(&gw, "POST", "/services/s/plugins", &plugin).await,
        201,
        "other scope",
    );
    expect(&send_json(&gw, "POST", "/plugins", &plugin).await, 201, "global");
    expect_error(
        &send_json(&gw, "POST", "/plugins", &plugin).await,
        409,
        5,
        "unique constraint violation",
    );
    let id = first["id"].as_str().unwrap();
    let patched = send_json(
        &gw,
        "PATCH",
        &format!("/plugins/{id}"),
        &json!({"config": {"message": "closed"}}),
    )
    .await;
    let patched = expect(&patched, 200, "PATCH config merges");
    assert_eq!(
        (
            patched["config"]["message"].clone(),
            patched["config"]["status_code"].clone()
        ),
        (json!("closed"), json!(503))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_auth_credentials_nested_and_top_level() {
    let gw = gateway().await;
    expect(
        &send_json(&gw, "POST", "/consumers", &json!({"username": "bob"})).await,
        201,
        "bob",
    );
    let key = expect(
        &send_form(&gw, "POST", "/consumers/bob/key-auth", "key=secret-1&tags=t").await,
        201,
        "form key",
    );
    assert_eq!(
        (key["key"].clone(), key["tags"].clone()),
        (json!("secret-1"), json!(["t"]))
    );
    let id = key["id"].as_str().unwrap().to_string();
    expect(&gw.admin_get("/key-auths/secret-1").await, 200, "top-level by key");
    expect(
        &gw.admin_get(&format!("/consumers/bob/key-auth/{id}")).await,
        200,
        "nested by id",
    );
    assert_eq!(
        expect(&gw.admin_get("/key-auths/secret-1/consumer").await, 200, "owner")["username"],
        "bob"
    );
    let put_id = "5a4d0f0e-2222-4b4b-9c9c-000000000002";
    let put = send_json(
        &gw,
        "PUT",
        &format!("/consumers/bob/key-auth/{put_id}"),
        &json!({"key": "secret-2"}),
    )
    .await;
    assert_eq!(expect(&put, 200, "nested PUT")["id"], put_id);
    assert_eq!(data(&gw.admin_get("/consumers/bob/key-auth").await.json()).len(), 2);
    let missing = gw.admin("DELETE", "/consumers/bob/key-auth/not-a-key", &[], "").await;
    expect(&missing, 404, "missing nested credential");
    expect(
        &gw.admin("DELETE", &format!("/consumers/bob/key-auth/{id}"), &[], "")
            .await,
        204,
        "nested delete",
    );
    let duplicate = send_json(&gw, "POST", "/consumers/bob/key-auth", &json!({"key": "secret-2"})).await;
    expect(&duplicate, 409, "duplicate key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_manage_their_snis() {
    let gw = gateway().await;
    let ca = TestCa::new("crud ca");
    let leaf = ca.issue(&["a.test", "b.test"]);
    let cert = json!({"cert": leaf.cert_pem, "key": leaf.key_pem, "snis": ["a.test", "b.test"]});
    let created = expect(&send_json(&gw, "POST", "/certificates", &cert).await, 201, "cert");
    assert_eq!(created["snis"], json!(["a.test", "b.test"]));
    assert_eq!(data(&gw.admin_get("/snis").await.json()).len(), 2);
    assert_eq!(
        expect(&gw.admin_get("/certificates/a.test").await, 200, "by SNI")["id"],
        created["id"]
    );
    let patched = send_json(
        &gw,
        "PATCH",
        "/certificates/a.test",
        &json!({"snis": ["b.test", "c.test"]}),
    )
    .await;
    assert_eq!(expect(&patched, 200, "PATCH snis")["snis"], json!(["b.test", "c.test"]));
    expect(&gw.admin_get("/snis/a.test").await, 404, "dropped SNI");
    assert_eq!(
        data(
            &gw.admin_get(&format!("/certificates/{}/snis", created["id"].as_str().unwrap()))
                .await
                .json()
        )
        .len(),
        2
    );
    expect(
        &gw.admin("DELETE", "/certificates/b.test", &[], "").await,
        204,
        "delete cert",
    );
    assert_eq!(data(&gw.admin_get("/snis").await.json()).len(), 0, "SNIs cascade");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_live_under_their_upstream() {
    let gw = gateway().await;
    expect(
        &send_json(&gw, "POST", "/upstreams", &json!({"name": "pool"})).await,
        201,
        "upstream",
    );
    let target = send_json(&gw, "POST", "/upstreams/pool/targets", &json!({"target": "10.0.0.1"})).await;
    assert_eq!(expect(&target, 201, "target")["target"], "10.0.0.1:8000");
    expect(
        &gw.admin_get("/upstreams/pool/targets/10.0.0.1:8000").await,
        200,
        "by target",
    );
    let again = send_json(
        &gw,
        "POST",
        "/upstreams/pool/targets",
        &json!({"target": "10.0.0.1:8000"}),
    )
    .await;
    expect_error(&again, 409, 5, "unique constraint violation");
    let weighted = send_json(
        &gw,
        "PATCH",
        "/upstreams/pool/targets/10.0.0.1:8000",
        &json!({"weight": 5}),
    )
    .await;
    assert_eq!(expect(&weighted, 200, "PATCH target")["weight"], 5);
    expect(
        &send_json(&gw, "POST", "/targets", &json!({"target": "x"})).await,
        405,
        "no top-level target writes",
    );
    expect(
        &gw.admin("DELETE", "/upstreams/pool/targets/10.0.0.1:8000", &[], "")
            .await,
        204,
        "delete",
    );
    assert_eq!(data(&gw.admin_get("/upstreams/pool/targets").await.json()).len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_and_multipart_bodies() {
    let gw = gateway().await;
    let form = "name=formsvc&host=f.test&port=8080&tags[1]=a&tags[2]=b";
    let service = expect(&send_form(&gw, "POST", "/services", form).await, 201, "form service");
    assert_eq!(
        (service["port"].clone(), service["tags"].clone()),
        (json!(8080), json!(["a", "b"]))
    );
    let route = send_form(
        &gw,
        "POST",
        "/services/formsvc/routes",
        "paths[]=/x&paths[]=/y&strip_path=false",
    )
    .await;
    let route = expect(&route, 201, "form route");
    assert_eq!(
        (route["paths"].clone(), route["strip_path"].clone()),
        (json!(["/x", "/y"]), json!(false))
    );
    let fields = [("name", "multi"), ("url", "http://m.test:9000/m"), ("retries", "1")];
    let multi = expect(
        &send_multipart(&gw, "POST", "/services", &fields).await,
        201,
        "multipart",
    );
    assert_eq!(
        (multi["port"].clone(), multi["retries"].clone()),
        (json!(9000), json!(1))
    );
    let cleared = send_form(&gw, "PATCH", "/services/multi", "path=").await;
    assert_eq!(expect(&cleared, 200, "empty form value clears")["path"], Value::Null);
    let plugin = "name=request-termination&config.status_code=451&config.message=gone";
    let plugin = expect(
        &send_form(&gw, "POST", "/services/formsvc/plugins", plugin).await,
        201,
        "form plugin",
    );
    assert_eq!(plugin["config"]["status_code"], 451);
}
