//! Kong's `filter_chains` Admin API with Wasm on, in-process: a real store,
//! snapshot compiler and Admin API server, with a stand-in for the Wasm
//! host's filter-chain factory (the runtime lives in strait-wasm). Its own
//! test binary: the installed filters and the factory are process-wide.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use strait_admin::{serve_admin, AdminState, Cluster};
use strait_core::schema::{set_wasm_filters, FilterConfigCheck, WasmFilterInfo};
use strait_core::Config;
use strait_plugins::filters::{set_filter_chain_factory, FilterScope};
use strait_snapshot::{compile_snapshot, SnapshotPublisher};
use strait_store::LmdbStore;

/// What the stand-in factory was asked to build.
type Builds = Arc<Mutex<Vec<(Vec<String>, FilterScope)>>>;

#[derive(Debug)]
struct StandInChain;

impl strait_plugins::Plugin for StandInChain {
    fn name(&self) -> &'static str {
        "proxy-wasm"
    }
    fn priority(&self) -> i32 {
        0
    }
}

/// Filters `tests` and `response_transformer` (Kong's test filters, no
/// config check) and `checked` (its config must be an object); a chain
/// with a filter configured `"fail"` does not build.
fn install_wasm() -> Builds {
    let check: FilterConfigCheck = Arc::new(|config: &Value| match config {
        Value::Object(_) => Ok(()),
        _ => Err("expected object".to_string()),
    });
    let filter = |name: &str, check: Option<FilterConfigCheck>| WasmFilterInfo {
        name: name.into(),
        config_schema: check.as_ref().map(|_| json!({"type": "object"})),
        check,
    };
    set_wasm_filters(
        true,
        vec![
            filter("tests", None),
            filter("response_transformer", None),
            filter("checked", Some(check)),
        ],
    );
    let builds: Builds = Arc::default();
    let seen = builds.clone();
    set_filter_chain_factory(Arc::new(move |specs, scope| {
        if specs.iter().any(|s| s.config == Some(json!("fail"))) {
            return Err("filter 'tests' refused its configuration".to_string());
        }
        seen.lock()
            .unwrap()
            .push((specs.iter().map(|s| s.name.clone()).collect(), scope));
        Ok(Arc::new(StandInChain) as Arc<dyn strait_plugins::Plugin>)
    }));
    builds
}

struct Node {
    addr: std::net::SocketAddr,
    _dir: TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start_node() -> Node {
    let dir = TempDir(std::env::temp_dir().join(format!("strait-admin-wasm-{}", uuid::Uuid::new_v4())));
    let store = LmdbStore::open_with_map_size(&dir.0, 64 << 20).expect("store");
    let initial = compile_snapshot(0, Arc::new(Config::default())).expect("empty snapshot");
    let state = Arc::new(AdminState {
        store: Arc::new(store),
        publisher: SnapshotPublisher::start(initial),
        stats: Default::default(),
        node_id: "node".into(),
        hostname: "test".into(),
        configuration: json!({}),
        ready: Arc::new(AtomicBool::new(true)),
        router_flavor: Default::default(),
        admin_token: None,
        writes: Default::default(),
        declarative: Default::default(),
        headers: Default::default(),
        origins: Default::default(),
        cluster: Cluster::None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(serve_admin(listener, state, None, stopped));
    Node {
        addr,
        _dir: dir,
        _stop: stop,
    }
}

impl Node {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let stream = tokio::net::TcpStream::connect(self.addr).await.expect("connect");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.map(|b| b.to_string()).unwrap_or_default())))
            .expect("request");
        let response = sender.send_request(request).await.expect("response");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        let value = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes).expect("JSON body"),
        };
        (status, value)
    }

    async fn expect(&self, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        let (got, value) = self.call(method, path, body).await;
        assert_eq!(got, status, "{method} {path}: {value}");
        value
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_chains_have_kongs_api_when_wasm_is_on() {
    let builds = install_wasm();
    let node = start_node().await;
    let service = node
        .expect(
            "POST",
            "/services",
            Some(json!({"name": "s", "url": "http://127.0.0.1:9"})),
            201,
        )
        .await;
    let route = node
        .expect(
            "POST",
            "/routes",
            Some(json!({"name": "r", "paths": ["/"], "service": {"id": service["id"]}})),
            201,
        )
        .await;
    let (service_id, route_id) = (service["id"].as_str().unwrap(), route["id"].as_str().unwrap());

    let on_service = node
        .expect(
            "POST",
            "/filter-chains",
            Some(json!({"service": {"id": service_id}, "filters": [{"name": "tests"}], "tags": ["t1"]})),
            201,
        )
        .await;
    assert_eq!(on_service["enabled"], json!(true));
    assert_eq!(on_service["route"], Value::Null);
    assert_eq!(
        on_service["filters"],
        json!([{"name": "tests", "config": null, "enabled": true}])
    );
    let on_route = node
        .expect(
            "POST",
            "/routes/r/filter-chains",
            Some(json!({"name": "rc", "filters": [
                {"name": "tests", "config": "123", "enabled": false},
                {"name": "response_transformer", "config": "{}"},
            ]})),
            201,
        )
        .await;
    assert_eq!(on_route["route"], json!({"id": route_id}));
    // The route's chain is its service's filters then its own enabled ones.
    let scope = FilterScope {
        route: Some(route_id.parse().unwrap()),
        service: Some(service_id.parse().unwrap()),
    };
    let last = builds.lock().unwrap().last().cloned();
    assert_eq!(
        last,
        Some((vec!["tests".to_string(), "response_transformer".to_string()], scope))
    );

    // One chain per route, Kong's unique violation naming the route.
    let (status, error) = node
        .call(
            "POST",
            &format!("/routes/{route_id}/filter-chains"),
            Some(json!({"filters": [{"name": "tests"}]})),
        )
        .await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["fields"], json!({"route": {"id": route_id}}));
    assert_eq!(
        error["message"],
        format!("UNIQUE violation detected on '{{route={{id=\"{route_id}\"}}}}'")
    );
    // Schema errors name their field, Kong's way.
    let (status, error) = node
        .call(
            "POST",
            "/filter-chains",
            Some(
                json!({"service": {"id": service_id}, "route": {"id": route_id}, "filters": [
                    {"name": "missing"}, {"name": "tests", "config": {"a": 1}}, {"name": "checked", "config": "text"},
                ]}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(
        error["fields"],
        json!({
            "@entity": ["only one or none of these fields must be set: 'service', 'route'"],
            "filters": [
                {"name": "no such filter"},
                {"config": "wrong type: expected one of string, null, got object"},
                {"config": "expected object"},
            ],
        })
    );
    // A chain the Wasm host cannot build is refused whole.
    let (status, error) = node
        .call(
            "PATCH",
            "/filter-chains/rc",
            Some(json!({"filters": [{"name": "tests", "config": "fail"}]})),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(
        error["fields"]["@entity"],
        json!(["filter_chains[rc]: filter 'tests' refused its configuration"])
    );

    // Reads: lists, by name, nested, the parent, tags.
    let all = node.expect("GET", "/filter-chains", None, 200).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 2);
    let by_name = node.expect("GET", "/filter-chains/rc", None, 200).await;
    assert_eq!(by_name, on_route);
    let parent = node.expect("GET", "/filter-chains/rc/route", None, 200).await;
    assert_eq!(parent["id"], json!(route_id));
    let of_service = node.expect("GET", "/services/s/filter-chains", None, 200).await;
    assert_eq!(of_service["data"], json!([on_service.clone()]));
    let tagged = node.expect("GET", "/filter-chains?tags=t1", None, 200).await;
    assert_eq!(tagged["data"], json!([on_service.clone()]));

    // The filters that apply to the route, Kong's shape.
    let service_chain = json!({"name": null, "id": on_service["id"]});
    let route_chain = json!({"name": "rc", "id": on_route["id"]});
    let listed = node.expect("GET", "/routes/r/filters/all", None, 200).await;
    assert_eq!(
        listed,
        json!({"filters": [
            {"name": "tests", "config": null, "from": "service", "enabled": true, "filter_chain": service_chain},
            {"name": "tests", "config": "123", "from": "route", "enabled": false, "filter_chain": route_chain},
            {"name": "response_transformer", "config": "{}", "from": "route", "enabled": true, "filter_chain": route_chain},
        ]})
    );
    let disabled = node
        .expect("GET", &format!("/routes/{route_id}/filters/disabled"), None, 200)
        .await;
    assert_eq!(disabled["filters"].as_array().unwrap().len(), 1);
    node.expect("PATCH", "/filter-chains/rc", Some(json!({"enabled": false})), 200)
        .await;
    let enabled = node.expect("GET", "/routes/r/filters/enabled", None, 200).await;
    assert_eq!(enabled["filters"].as_array().unwrap().len(), 1, "{enabled}");
    assert_eq!(enabled["filters"][0]["from"], "service");
    node.expect("GET", "/routes/nothing/filters/all", None, 404).await;

    // Filter schemas: the filter's own, or Kong's default.
    let draft_4 = "http://json-schema.org/draft-04/schema#";
    let schema = node.expect("GET", "/schemas/filters/checked", None, 200).await;
    assert_eq!(schema, json!({"$schema": draft_4, "type": "object"}));
    let schema = node.expect("GET", "/schemas/filters/tests", None, 200).await;
    assert_eq!(schema, json!({"$schema": draft_4, "type": ["string", "null"]}));
    let described = node.expect("GET", "/schemas/filter_chains", None, 200).await;
    let filters = described["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|f| f.get("filters").cloned())
        .unwrap();
    assert_eq!(
        filters["elements"]["fields"][0]["name"]["one_of"],
        json!(["checked", "response_transformer", "tests"])
    );

    // Deleting the route takes its chain; the service's stays until the
    // service goes.
    node.expect("DELETE", "/routes/r", None, 204).await;
    let left = node.expect("GET", "/filter-chains", None, 200).await;
    assert_eq!(left["data"], json!([on_service]));
    node.expect("DELETE", "/services/s", None, 204).await;
    let left = node.expect("GET", "/filter-chains", None, 200).await;
    assert_eq!(left["data"], json!([]));
}
