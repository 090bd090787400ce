//! Property: `POST /schemas/{entity}/validate` (and `/schemas/plugins/validate`) agrees with the
//! write it describes. For generated bodies of every stored entity kind — valid and invalid
//! values, foreign keys by id and by name, existing and missing — validate accepts exactly when
//! the write does, and when both refuse they return the same status, error name and `fields`.
//! A body both accept is deleted again so every case starts from the same stored state.
//!
//! One difference is Kong's and deliberate: validation reads no stored state, so a foreign key
//! id that names no stored entity validates (decK validates files whose entities do not exist
//! yet) while the write answers 400 `foreign key violation`.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Map, Value};
use strait_e2e::admin_api::send_json;
use strait_e2e::{Gateway, GatewayOptions, LeafCert, Reply, TestCa};

/// Stored entities the generated bodies refer to, by id and by name.
struct Fixtures {
    service_id: String,
    route_id: String,
    consumer_id: String,
    upstream_id: String,
    certificate_id: String,
    cert_pem: String,
    key_pem: String,
    ca_pem: String,
}

/// One generated case: the entity's table (`/schemas/{table}/validate`), the collection the
/// write goes to, and the body.
#[derive(Debug, Clone)]
struct Case {
    table: &'static str,
    collection: &'static str,
    body: Map<String, Value>,
}

/// An id no stored entity has.
const MISSING_ID: &str = "9b0f3a46-6d4c-4b7e-9a53-0c6f1d2e3f40";

/// Absent, one of `valid`, or (less often) one of `invalid`, so that whole bodies are valid
/// often enough while every invalid value still turns up.
fn field(valid: Vec<Value>, invalid: Vec<Value>) -> BoxedStrategy<Option<Value>> {
    let mut choices: Vec<(u32, BoxedStrategy<Option<Value>>)> = vec![(2, Just(None).boxed())];
    if !valid.is_empty() {
        choices.push((5, proptest::sample::select(valid).prop_map(Some).boxed()));
    }
    if !invalid.is_empty() {
        choices.push((1, proptest::sample::select(invalid).prop_map(Some).boxed()));
    }
    proptest::strategy::Union::new_weighted(choices).boxed()
}

/// A foreign key: by existing id, by existing name, by `{id, name}` as decK sends it, by a
/// missing id or name, malformed, or absent.
fn reference(id: &str, name: &str) -> BoxedStrategy<Option<Value>> {
    field(
        vec![
            json!({ "id": id }),
            json!({ "name": name }),
            json!({ "id": id, "name": name }),
        ],
        vec![
            json!({ "id": MISSING_ID }),
            json!({ "name": "nobody-by-this-name" }),
            json!({}),
            json!("not-a-record"),
        ],
    )
}

/// A name-like string: unique per case when valid, or one of the usual invalid shapes.
fn name_field() -> BoxedStrategy<Option<Value>> {
    field(
        vec![json!("NAME"), Value::Null],
        vec![json!(""), json!("has space"), json!(42)],
    )
}

fn object(pairs: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key.to_string(), v)))
        .collect()
}

fn case(table: &'static str, collection: &'static str, body: Map<String, Value>) -> Case {
    Case {
        table,
        collection,
        body,
    }
}

fn services() -> BoxedStrategy<Case> {
    (
        name_field(),
        field(
            vec![json!("http://127.0.0.1:9000/p")],
            vec![json!("not a url"), json!("ftp://x")],
        ),
        field(vec![json!(3)], vec![json!(-1), json!("x")]),
        field(vec![json!(60000)], vec![json!(0), json!(2147483648u64)]),
        field(vec![json!(["a", "b"])], vec![json!("a"), json!([1])]),
        field(vec![], vec![json!(true)]),
    )
        .prop_map(|(name, url, retries, timeout, tags, unknown)| {
            let url = url.or_else(|| Some(json!("http://127.0.0.1:9000")));
            let body = object(vec![
                ("name", name),
                ("url", url),
                ("retries", retries),
                ("connect_timeout", timeout),
                ("tags", tags),
                ("no_such_field", unknown),
            ]);
            case("services", "services", body)
        })
        .boxed()
}

fn routes(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        name_field(),
        field(vec![json!(["/a"]), json!("/a")], vec![json!(["nope"]), json!([])]),
        field(vec![json!(["GET"]), json!(["get"])], vec![json!([1])]),
        field(
            vec![json!(["example.com"]), json!(["*.example.com"])],
            vec![json!(["bad host!"])],
        ),
        field(vec![json!(["http", "https"])], vec![json!(["tcp"]), json!(["smtp"])]),
        field(vec![json!(true)], vec![json!("yes")]),
        reference(&fx.service_id, "base-service"),
        field(vec![], vec![json!("http.path == \"/e\"")]),
    )
        .prop_map(|(name, paths, methods, hosts, protocols, strip, service, expression)| {
            let body = object(vec![
                ("name", name),
                ("paths", paths),
                ("methods", methods),
                ("hosts", hosts),
                ("protocols", protocols),
                ("strip_path", strip),
                ("service", service),
                ("expression", expression),
            ]);
            case("routes", "routes", body)
        })
        .boxed()
}

fn consumers() -> BoxedStrategy<Case> {
    (name_field(), name_field(), field(vec![json!(["t"])], vec![json!(7)]))
        .prop_map(|(username, custom_id, tags)| {
            let body = object(vec![("username", username), ("custom_id", custom_id), ("tags", tags)]);
            case("consumers", "consumers", body)
        })
        .boxed()
}

fn key_auths(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        field(vec![json!("NAME")], vec![json!(""), json!(5)]),
        reference(&fx.consumer_id, "base-consumer"),
        field(vec![json!(3600)], vec![json!(-5)]),
    )
        .prop_map(|(key, consumer, ttl)| {
            let body = object(vec![("key", key), ("consumer", consumer), ("ttl", ttl)]);
            case("keyauth_credentials", "key-auths", body)
        })
        .boxed()
}

fn plugins(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        field(
            vec![json!("request-termination")],
            vec![json!("key-auth"), json!("no-such-plugin")],
        ),
        field(
            vec![json!({ "status_code": 418, "message": "m" })],
            vec![
                json!({ "status_code": 99 }),
                json!({ "status_code": "x" }),
                json!({ "nonsense": true }),
            ],
        ),
        reference(&fx.service_id, "base-service"),
        reference(&fx.route_id, "base-route"),
        reference(&fx.consumer_id, "base-consumer"),
        field(vec![json!(false)], vec![json!("no")]),
    )
        .prop_map(|(name, config, service, route, consumer, enabled)| {
            let body = object(vec![
                ("name", name),
                ("config", config),
                ("service", service),
                ("route", route),
                ("consumer", consumer),
                ("enabled", enabled),
            ]);
            case("plugins", "plugins", body)
        })
        .boxed()
}

fn upstreams() -> BoxedStrategy<Case> {
    (
        field(vec![json!("NAME.internal")], vec![json!(""), json!("bad host!")]),
        field(
            vec![json!("round-robin"), json!("consistent-hashing")],
            vec![json!("bogus")],
        ),
        field(vec![json!(100)], vec![json!(5), json!(70000)]),
        field(vec![json!("none"), json!("ip")], vec![json!("header")]),
    )
        .prop_map(|(name, algorithm, slots, hash_on)| {
            let body = object(vec![
                ("name", name),
                ("algorithm", algorithm),
                ("slots", slots),
                ("hash_on", hash_on),
            ]);
            case("upstreams", "upstreams", body)
        })
        .boxed()
}

fn certificates(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        field(
            vec![json!(fx.cert_pem)],
            vec![json!("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----")],
        ),
        field(vec![json!(fx.key_pem)], vec![json!("not a key")]),
        field(
            vec![json!(["NAME.example.com"]), json!("NAME.example.org")],
            vec![json!(["bad sni!"])],
        ),
    )
        .prop_map(|(cert, key, snis)| {
            case(
                "certificates",
                "certificates",
                object(vec![("cert", cert), ("key", key), ("snis", snis)]),
            )
        })
        .boxed()
}

fn ca_certificates(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        field(vec![json!(fx.ca_pem)], vec![json!(fx.cert_pem), json!("garbage")]),
        field(vec![], vec![json!("0".repeat(64)), json!("short")]),
    )
        .prop_map(|(cert, digest)| {
            case(
                "ca_certificates",
                "ca_certificates",
                object(vec![("cert", cert), ("cert_digest", digest)]),
            )
        })
        .boxed()
}

fn snis(fx: &Fixtures) -> BoxedStrategy<Case> {
    (
        field(
            vec![json!("NAME.example.net"), json!("*.NAME.example.net")],
            vec![json!("bad sni!"), json!("")],
        ),
        reference(&fx.certificate_id, "unused"),
    )
        .prop_map(|(name, certificate)| {
            case(
                "snis",
                "snis",
                object(vec![("name", name), ("certificate", certificate)]),
            )
        })
        .boxed()
}

/// Targets are written under their upstream (Kong has no top-level target writes).
fn targets(fx: &Fixtures) -> BoxedStrategy<Case> {
    let upstream = fx.upstream_id.clone();
    (
        field(vec![json!("10.0.0.NUM:8080")], vec![json!(""), json!("bad::target::")]),
        field(vec![json!(100)], vec![json!(-1), json!(70000)]),
    )
        .prop_map(move |(target, weight)| {
            let mut body = object(vec![("target", target), ("weight", weight)]);
            body.insert("upstream".into(), json!({ "id": upstream }));
            case("targets", "upstreams/base-upstream/targets", body)
        })
        .boxed()
}

/// Replaces the `NAME`/`NUM` placeholders so valid unique values never collide between cases.
fn personalise(value: &mut Value, n: usize) {
    match value {
        Value::String(text) => {
            *text = text
                .replace("NAME", &format!("gen{n}"))
                .replace("NUM", &(n % 250).to_string())
        }
        Value::Array(items) => items.iter_mut().for_each(|v| personalise(v, n)),
        Value::Object(map) => map.values_mut().for_each(|v| personalise(v, n)),
        _ => {}
    }
}

async fn fixtures(gw: &Gateway) -> Fixtures {
    let id = |reply: Reply, what: &str| -> String {
        assert_eq!(reply.status, 201, "{what}: {}", reply.text());
        reply.json()["id"].as_str().expect("id").to_string()
    };
    let service = send_json(
        gw,
        "POST",
        "/services",
        &json!({ "name": "base-service", "url": "http://127.0.0.1:9" }),
    )
    .await;
    let service_id = id(service, "service");
    let route = send_json(
        gw,
        "POST",
        "/routes",
        &json!({ "name": "base-route", "paths": ["/base"], "service": { "id": service_id } }),
    )
    .await;
    let consumer = send_json(gw, "POST", "/consumers", &json!({ "username": "base-consumer" })).await;
    let upstream = send_json(gw, "POST", "/upstreams", &json!({ "name": "base-upstream" })).await;
    let leaf = LeafCert::self_signed(&["base.example.com"]);
    let certificate = send_json(
        gw,
        "POST",
        "/certificates",
        &json!({ "cert": leaf.cert_pem, "key": leaf.key_pem }),
    )
    .await;
    Fixtures {
        service_id,
        route_id: id(route, "route"),
        consumer_id: id(consumer, "consumer"),
        upstream_id: id(upstream, "upstream"),
        certificate_id: id(certificate, "certificate"),
        cert_pem: leaf.cert_pem.clone(),
        key_pem: leaf.key_pem.clone(),
        ca_pem: TestCa::new("agreement test CA").cert_pem(),
    }
}

/// Runs one case: validate, then write, compare, and delete what the write created.
/// Returns whether the body was accepted.
async fn check(gw: &Gateway, case: &Case) -> Result<bool, TestCaseError> {
    let body = Value::Object(case.body.clone());
    let validate_path = match case.table {
        "plugins" => "/schemas/plugins/validate".to_string(),
        table => format!("/schemas/{table}/validate"),
    };
    let validated = send_json(gw, "POST", &validate_path, &body).await;
    let written = send_json(gw, "POST", &format!("/{}", case.collection), &body).await;
    let (v, w) = (validated.status.as_u16(), written.status.as_u16());
    prop_assert!(
        v < 500 && w < 500,
        "5xx: validate {v} {} / write {w} {}",
        validated.text(),
        written.text()
    );
    if w == 201 {
        let id = written.json()["id"].as_str().unwrap_or_default().to_string();
        let deleted = gw.admin("DELETE", &format!("/{}/{id}", case.collection), &[], "").await;
        prop_assert_eq!(deleted.status.as_u16(), 204, "cleanup: {}", deleted.text());
    }
    let missing_parent = body.to_string().contains(MISSING_ID) && written.json()["name"] == "foreign key violation";
    match (v, w) {
        (200, 201) => Ok(true),
        // The write stops at the first missing parent; validation never looks.
        _ if missing_parent => {
            prop_assert_eq!(w, 400, "{}", written.text());
            Ok(false)
        }
        (200, _) | (_, 201) => Err(TestCaseError::fail(format!(
            "disagree on {body}: validate {v} {} / write {w} {}",
            validated.text(),
            written.text()
        ))),
        _ => {
            let (vb, wb) = (validated.json(), written.json());
            prop_assert_eq!(v, w, "status for {}", body);
            prop_assert_eq!(&vb["name"], &wb["name"], "error name for {}", body);
            prop_assert_eq!(&vb["fields"], &wb["fields"], "fields for {}", body);
            Ok(false)
        }
    }
}

/// Kong's validate reads no database: a route whose service id names nothing validates (as
/// `deck gateway validate` needs), the write is refused; a name must still resolve.
async fn validation_reads_no_stored_parents(gw: &Gateway) {
    let route = json!({ "paths": ["/v"], "service": { "id": MISSING_ID, "name": "not-stored-yet" } });
    let validated = send_json(gw, "POST", "/schemas/routes/validate", &route).await;
    assert_eq!(validated.status, 200, "{}", validated.text());
    let written = send_json(gw, "POST", "/routes", &route).await;
    assert_eq!(written.status, 400, "{}", written.text());
    assert_eq!(written.json()["name"], "foreign key violation");
    let by_name = json!({ "paths": ["/v"], "service": { "name": "not-stored-yet" } });
    for path in ["/schemas/routes/validate", "/routes"] {
        let reply = send_json(gw, "POST", path, &by_name).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(reply.json()["name"], "foreign keys unresolved", "{path}");
    }
}

#[test]
fn validate_endpoints_agree_with_writes_for_every_entity() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let gw = runtime.block_on(Gateway::start(GatewayOptions::new()));
    let fx = runtime.block_on(fixtures(&gw));
    runtime.block_on(validation_reads_no_stored_parents(&gw));
    let strategy = prop_oneof![
        services(),
        routes(&fx),
        consumers(),
        key_auths(&fx),
        plugins(&fx),
        upstreams(),
        targets(&fx),
        certificates(&fx),
        ca_certificates(&fx),
        snis(&fx),
    ];
    let cases: u32 = std::env::var("STRAIT_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    };
    // A fixed seed: CI runs the same cases every time; STRAIT_PROPTEST_CASES widens the run.
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(std::collections::BTreeMap::<&str, [usize; 2]>::new());
    let result = runner.run(&strategy, |mut case| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut body = Value::Object(std::mem::take(&mut case.body));
        personalise(&mut body, n);
        case.body = match body {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let accepted = runtime.block_on(check(&gw, &case))?;
        let mut outcomes = outcomes.lock().unwrap_or_else(|p| p.into_inner());
        outcomes.entry(case.table).or_default()[usize::from(accepted)] += 1;
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}\n{}", gw.log_tail());
    }
    assert!(counter.into_inner() >= cases as usize, "every case ran");
    // Both outcomes for every kind: the generators reach valid and invalid bodies alike.
    let outcomes = outcomes.into_inner().unwrap_or_else(|p| p.into_inner());
    assert_eq!(outcomes.len(), 10, "every entity kind was generated: {outcomes:?}");
    for (table, [refused, accepted]) in &outcomes {
        assert!(
            *refused > 0 && *accepted > 0,
            "{table}: {refused} refused, {accepted} accepted"
        );
    }
}
