//! Two Strait nodes on one PostgreSQL database racing writes of one unique
//! value: exactly one create wins, the other gets Kong's 409, and what both
//! nodes serve afterwards is the winner's write. A `PUT` by name racing a
//! `POST` of that name ends as some order of the two would: the `PUT`'s
//! fields always stand, and a `POST` that was told 201 was not replaced
//! behind its back (the `PUT` updated the entity it created).

use serde_json::{json, Value};
use strait_e2e::gateway::Gateway;
use strait_e2e::postgres::PgServer;
use strait_e2e::{LeafCert, Reply};

const ROUNDS: usize = 50;

async fn two_nodes() -> (PgServer, Gateway, Gateway) {
    let server = PgServer::start();
    server.bootstrap();
    let a = Gateway::start(server.node_options()).await;
    let b = Gateway::start(server.node_options()).await;
    (server, a, b)
}

async fn send(node: &Gateway, method: &str, path: &str, body: &Value) -> Reply {
    node.admin(method, path, &[("content-type", "application/json")], body.to_string())
        .await
}

/// Sends both writes at once, one to each node.
async fn race(a: (&Gateway, &str, &str, Value), b: (&Gateway, &str, &str, Value)) -> (Reply, Reply) {
    tokio::join!(send(a.0, a.1, a.2, &a.3), send(b.0, b.1, b.2, &b.3))
}

/// Kong's 409 for `field` = `value` of one entity.
fn assert_unique_violation(reply: &Reply, field: &str, value: &str) {
    assert_eq!(reply.status, 409, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], 5, "{body}");
    assert_eq!(body["name"], "unique constraint violation", "{body}");
    assert_eq!(
        body["message"],
        format!("UNIQUE violation detected on '{{{field}=\"{value}\"}}'"),
        "{body}"
    );
    assert_eq!(body["fields"][field], value, "{body}");
}

/// The winner of a create race: exactly one 201, the other Kong's 409.
fn one_winner<'r>(round: usize, replies: (&'r Reply, &'r Reply), field: &str, value: &str) -> &'r Reply {
    let (x, y) = replies;
    let statuses = (x.status.as_u16(), y.status.as_u16());
    let (winner, loser) = match statuses {
        (201, 409) => (x, y),
        (409, 201) => (y, x),
        _ => panic!(
            "round {round}: expected one 201 and one 409, got {statuses:?}: {} / {}",
            x.text(),
            y.text()
        ),
    };
    assert_unique_violation(loser, field, value);
    winner
}

/// What `path` holds on both nodes (each reads the shared database).
async fn stored_on_both(a: &Gateway, b: &Gateway, path: &str) -> Value {
    let on_a = a.admin_get(path).await;
    let on_b = b.admin_get(path).await;
    assert_eq!(on_a.status, 200, "{path} on A: {}", on_a.text());
    assert_eq!(on_b.status, 200, "{path} on B: {}", on_b.text());
    assert_eq!(on_a.json(), on_b.json(), "{path}: the nodes disagree");
    on_a.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_of_one_name_on_two_nodes_give_one_201_and_one_409() {
    let (_server, a, b) = two_nodes().await;
    for round in 0..ROUNDS {
        let name = format!("svc-{round}");
        let (x, y) = race(
            (
                &a,
                "POST",
                "/services",
                json!({"name": name, "url": format!("http://a.test/{round}")}),
            ),
            (
                &b,
                "POST",
                "/services",
                json!({"name": name, "url": format!("http://b.test/{round}")}),
            ),
        )
        .await;
        let winner = one_winner(round, (&x, &y), "name", &name).json();
        let stored = stored_on_both(&a, &b, &format!("/services/{name}")).await;
        assert_eq!(
            stored["id"], winner["id"],
            "round {round}: the 201's entity was replaced"
        );
        assert_eq!(
            stored["host"], winner["host"],
            "round {round}: the 201's write was lost"
        );
    }
    let listed = a.admin_get("/services?size=1000").await.json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(ROUNDS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_by_name_racing_a_post_of_that_name_loses_no_write() {
    let (_server, a, b) = two_nodes().await;
    let (mut post_first, mut put_first) = (0, 0);
    for round in 0..ROUNDS {
        let name = format!("put-{round}");
        // Alternate the sides so neither node always carries the same verb.
        let (put_node, post_node) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let (put, post) = race(
            (
                put_node,
                "PUT",
                &format!("/services/{name}"),
                json!({"url": "http://put.test/p"}),
            ),
            (
                post_node,
                "POST",
                "/services",
                json!({"name": name, "url": "http://post.test/p"}),
            ),
        )
        .await;
        let stored = stored_on_both(&a, &b, &format!("/services/{name}")).await;
        assert_eq!(stored["host"], "put.test", "round {round}: the PUT's fields must stand");
        match post.status.as_u16() {
            // The POST was first: the PUT updated the entity the POST made.
            201 => {
                post_first += 1;
                assert_eq!(put.status, 200, "round {round}: {}", put.text());
                assert_eq!(put.json()["id"], post.json()["id"], "round {round}");
                assert_eq!(stored["id"], post.json()["id"], "round {round}");
            }
            // The PUT was first: the POST of its name is Kong's 409.
            _ => {
                put_first += 1;
                assert!(
                    matches!(put.status.as_u16(), 200 | 201),
                    "round {round}: {}",
                    put.text()
                );
                assert_unique_violation(&post, "name", &name);
                assert_eq!(stored["id"], put.json()["id"], "round {round}");
            }
        }
    }
    eprintln!("POST first {post_first} times, PUT first {put_first} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_unique_field_is_decided_by_the_database() {
    let (_server, a, b) = two_nodes().await;
    let cert = LeafCert::self_signed(&["race.test"]);
    let created = send(
        &a,
        "POST",
        "/certificates",
        &json!({"cert": cert.cert_pem, "key": cert.key_pem}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let certificate = created.json()["id"].clone();
    assert_eq!(
        send(&a, "POST", "/consumers", &json!({"username": "owner"}))
            .await
            .status,
        201
    );
    for round in 0..10 {
        // Consumers' username and custom_id.
        let username = format!("user-{round}");
        let (x, y) = race(
            (&a, "POST", "/consumers", json!({"username": username, "tags": ["a"]})),
            (&b, "POST", "/consumers", json!({"username": username, "tags": ["b"]})),
        )
        .await;
        one_winner(round, (&x, &y), "username", &username);
        let custom_id = format!("custom-{round}");
        let (x, y) = race(
            (&a, "POST", "/consumers", json!({"custom_id": custom_id})),
            (&b, "POST", "/consumers", json!({"custom_id": custom_id})),
        )
        .await;
        one_winner(round, (&x, &y), "custom_id", &custom_id);

        // A key-auth key, under one consumer from both nodes.
        let key = format!("key-{round}");
        let (x, y) = race(
            (&a, "POST", "/consumers/owner/key-auth", json!({"key": key})),
            (&b, "POST", "/consumers/owner/key-auth", json!({"key": key})),
        )
        .await;
        let winner = one_winner(round, (&x, &y), "key", &key).json();
        let stored = stored_on_both(&a, &b, &format!("/key-auths/{}", winner["id"].as_str().unwrap())).await;
        assert_eq!(stored["key"], key);

        // An upstream's name and an SNI's name.
        let upstream = format!("up-{round}");
        let (x, y) = race(
            (&a, "POST", "/upstreams", json!({"name": upstream, "slots": 100})),
            (&b, "POST", "/upstreams", json!({"name": upstream, "slots": 200})),
        )
        .await;
        let winner = one_winner(round, (&x, &y), "name", &upstream).json();
        let stored = stored_on_both(&a, &b, &format!("/upstreams/{upstream}")).await;
        assert_eq!(
            stored["slots"], winner["slots"],
            "round {round}: the 201's write was lost"
        );
        let sni = format!("sni-{round}.race.test");
        let (x, y) = race(
            (
                &a,
                "POST",
                "/snis",
                json!({"name": sni, "certificate": {"id": certificate}}),
            ),
            (
                &b,
                "POST",
                "/snis",
                json!({"name": sni, "certificate": {"id": certificate}}),
            ),
        )
        .await;
        one_winner(round, (&x, &y), "name", &sni);
    }
    let consumers = a.admin_get("/consumers?size=1000").await.json();
    assert_eq!(
        consumers["data"].as_array().map(Vec::len),
        Some(21),
        "owner + 10 usernames + 10 custom_ids"
    );
    let keys = a.admin_get("/consumers/owner/key-auth").await.json();
    assert_eq!(keys["data"].as_array().map(Vec::len), Some(10));
}
