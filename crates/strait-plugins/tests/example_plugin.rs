//! The plugin written in docs/plugins.md ("Writing a plugin"), compiled and
//! run through a chain beside a bundled plugin.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, Uri};
use strait_plugins::{EmptyDirectory, Flow, Plugin, PluginChain, PluginResponse, Protocol, RequestCtx, SharedStore};

#[derive(Debug)]
struct ForbidHeader {
    header: String,
}

impl Plugin for ForbidHeader {
    fn name(&self) -> &'static str {
        "forbid-header"
    }
    fn priority(&self) -> i32 {
        990
    }
    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if ctx.headers.contains_key(self.header.as_str()) {
            return Flow::Respond(PluginResponse::message(403, "Forbidden"));
        }
        Flow::Continue
    }
}

fn run(chain: &PluginChain, headers: &mut HeaderMap) -> Flow {
    let mut method = Method::GET;
    let mut uri = Uri::from_static("/x");
    let directory = EmptyDirectory;
    let mut ctx = RequestCtx {
        method: &mut method,
        protocol: Protocol::Http,
        http_version: http::Version::HTTP_11,
        client_ip: "127.0.0.1".parse().expect("ip"),
        client_port: 50000,
        server_port: 8000,
        host: "example.test",
        route_id: None,
        route_name: None,
        service_id: None,
        captures: &[],
        uri: &mut uri,
        headers,
        body: None,
        request_body_limit: None,
        upstream_host: None,
        directory: &directory,
        consumer: None,
        consumer_view: None,
        credential: None,
        authenticated_groups: None,
        shared: SharedStore::default(),
        response_headers: Default::default(),
        exact_path: false,
        identity: Default::default(),
        client_cert: None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    runtime.block_on(chain.access(&mut ctx))
}

#[test]
fn example_plugin_runs_in_priority_order() {
    let termination = strait_plugins::build_plugin(
        "request-termination",
        serde_json::json!({ "status_code": 200, "message": "reached" })
            .as_object()
            .expect("object"),
    )
    .expect("bundled plugin");
    let example: Arc<dyn Plugin> = Arc::new(ForbidHeader {
        header: "x-forbidden".into(),
    });
    let chain = PluginChain::from_instances(vec![termination, example]);
    assert_eq!(chain.names(), ["forbid-header", "request-termination"]);
    let mut headers = HeaderMap::new();
    headers.insert("x-forbidden", HeaderValue::from_static("1"));
    match run(&chain, &mut headers) {
        Flow::Respond(response) => assert_eq!(response.status, 403),
        Flow::Continue => panic!("the example plugin should answer"),
    }
    match run(&chain, &mut HeaderMap::new()) {
        Flow::Respond(response) => assert_eq!(response.status, 200, "request-termination answers"),
        Flow::Continue => panic!("request-termination should answer"),
    }
}

/// The schema docs/plugins.md gives the example ("one folder, one registry
/// line"), registered as `install()` registers a bundled plugin's.
#[test]
fn its_schema_registers_and_validates_like_a_bundled_one() {
    use serde_json::json;
    use strait_core::schema::field::Field;
    use strait_core::schema::{formats, register_plugin_schema, validate_plugin_config, PluginSchema};

    let schema = PluginSchema::new(vec![(
        "header",
        Field::string()
            .required()
            .default(json!("x-forbidden"))
            .check(formats::header_name),
    )]);
    register_plugin_schema("forbid-header", schema);
    let mut errors = Vec::new();
    let config = validate_plugin_config("forbid-header", None, &mut errors).expect("registered");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(config["header"], "x-forbidden");
    validate_plugin_config("forbid-header", Some(&json!({"header": "not a name"})), &mut errors);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "config.header");
    assert!(strait_core::schema::plugin_schema_json("forbid-header").is_some());
}
