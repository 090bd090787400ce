//! azure-functions end to end: the request the function receives (method,
//! path, query, headers but `Host`, body, the injected keys) and its answer
//! relayed in place of the upstream's; Kong's 500 when it cannot be called.

use serde_json::json;
use strait_e2e::plugins::{echo_service, gateway_with_echo};
use strait_e2e::request;
use strait_e2e::upstream::Upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_functions_calls_the_function_and_answers_with_it() {
    // The function app: an echo server on 127.0.0.1:80 (`https: false` fixes
    // the port at 80), named `<appname>.<hostdomain>` = `127.0.0.1`.
    let function = Upstream::start_at("127.0.0.1:80".parse().expect("addr")).await;
    let routes = json!([
        { "name": "fn", "paths": ["/fn"], "plugins": [{ "name": "azure-functions", "config": {
            "appname": "127.0.0", "hostdomain": "1", "https": false, "routeprefix": "/api/",
            "functionname": "echo/hello", "apikey": "function-key", "clientid": "client-7" } }] },
        { "name": "gone", "paths": ["/gone"], "plugins": [{ "name": "azure-functions", "config": {
            "appname": "127.0.0", "hostdomain": "2", "https": false, "functionname": "hello", "timeout": 2000 } }] }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let reply = gw
        .proxy(request(
            "POST",
            "/fn/ignored?name=ada&tags=a&tags=b",
            &[("content-type", "text/plain"), ("x-trace", "t-1")],
            "hello function",
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = reply.json();
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/api/echo/hello?name=ada&tags=a&tags=b");
    assert_eq!(seen["body"], "hello function");
    let headers = &seen["headers"];
    assert_eq!(headers["x-functions-key"], "function-key");
    assert_eq!(headers["x-functions-clientid"], "client-7");
    assert_eq!(headers["x-trace"], "t-1");
    assert_eq!(
        headers["host"], "127.0.0.1",
        "Strait's Host for the function, not the client's"
    );
    assert_eq!(upstream.hits(), 0, "the service's upstream is not called");

    // The function's status and headers come back.
    let missing = gw.proxy(request("GET", "/fn?x=1", &[], "")).await;
    assert_eq!(missing.status, 200);
    assert_eq!(missing.header("content-type").as_deref(), Some("application/json"));

    // Nothing listens: Kong's 500.
    let gone = gw.proxy(request("GET", "/gone", &[], "")).await;
    assert_eq!(gone.status, 500);
    assert_eq!(gone.json(), json!({ "message": "An unexpected error occurred" }));
    drop(function);
}

/// The AWS stand-in (tests/stand-ins/aws.py): Lambda's Invoke and STS's
/// AssumeRole, each request's SigV4 checked with botocore's signer.
struct AwsStandIn {
    port: u16,
    child: std::process::Child,
}

impl AwsStandIn {
    fn start() -> AwsStandIn {
        use std::io::BufRead;
        let python = std::env::var_os("STRAIT_AWS_PYTHON").map_or_else(
            || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/venv/bin/python"),
            std::path::PathBuf::from,
        );
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("stand-ins/aws.py");
        let port = strait_e2e::free_port();
        let mut child = std::process::Command::new(&python)
            .arg(&script)
            .arg(port.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} ({e}): scripts/test.sh installs botocore into its venv",
                    python.display()
                )
            });
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("stand-in output");
        assert_eq!(line.trim(), "ready", "the AWS stand-in did not start");
        AwsStandIn { port, child }
    }
}

impl Drop for AwsStandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_lambda_invokes_signed_and_answers_as_kong() {
    let aws = AwsStandIn::start();
    let lambda = |path: &str, extra: serde_json::Value| {
        let mut config = json!({ "aws_key": "AKIDSTRAITTEST", "aws_secret": "strait-test-secret",
            "aws_region": "us-east-1", "host": "127.0.0.1", "port": aws.port, "disable_https": true,
            "function_name": "echo" });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        json!({ "name": path.trim_start_matches('/').replace('/', "-"), "paths": [path], "strip_path": false,
                "plugins": [{ "name": "aws-lambda", "config": config }] })
    };
    let routes = json!([
        lambda("/echo", json!({ "qualifier": "v1" })),
        lambda(
            "/forward",
            json!({ "forward_request_method": true, "forward_request_uri": true,
                                    "forward_request_headers": true, "forward_request_body": true })
        ),
        lambda(
            "/proxy",
            json!({ "function_name": "proxy", "is_proxy_integration": true })
        ),
        lambda(
            "/bad-proxy",
            json!({ "function_name": "bad-proxy", "is_proxy_integration": true })
        ),
        lambda(
            "/unhandled",
            json!({ "function_name": "unhandled", "unhandled_status": 412 })
        ),
        lambda("/wrong-key", json!({ "aws_secret": "not-the-secret" })),
        lambda(
            "/role",
            json!({ "aws_assume_role_arn": "arn:aws:iam::123456789012:role/edge",
                                 "aws_sts_endpoint_url": format!("http://127.0.0.1:{}/", aws.port) })
        ),
        lambda("/gateway", json!({ "awsgateway_compatible": true })),
        lambda(
            "/arn",
            json!({ "function_name": "arn:aws:lambda:us-east-1:123456789012:function:echo",
                                "invocation_type": "Event", "log_type": "None" })
        )
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let json_body = [("content-type", "application/json")];

    // The query and the JSON body, merged; the signed call reached the function.
    let reply = gw.proxy(request("POST", "/echo?x=1", &json_body, r#"{"a": 1}"#)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = reply.json();
    assert_eq!(seen["function"], "echo");
    assert_eq!(seen["qualifier"], "v1");
    assert_eq!(seen["invocation_type"], "RequestResponse");
    assert_eq!(seen["log_type"], "Tail");
    assert_eq!(seen["payload"], json!({ "x": "1", "a": 1 }));
    assert_eq!(reply.header("x-amz-executed-version").as_deref(), Some("$LATEST"));
    assert_eq!(upstream.hits(), 0);

    // The request's parts.
    let reply = gw
        .proxy(request(
            "PUT",
            "/forward?tag=a&tag=b",
            &[("content-type", "application/octet-stream"), ("x-team", "edge")],
            "raw bytes",
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let payload = &reply.json()["payload"];
    assert_eq!(payload["request_method"], "PUT");
    assert_eq!(payload["request_uri"], "/forward?tag=a&tag=b");
    assert_eq!(payload["request_uri_args"], json!({ "tag": ["a", "b"] }));
    assert_eq!(payload["request_headers"]["x-team"], "edge");
    assert_eq!(
        payload["request_body"], "cmF3IGJ5dGVz",
        "an unparsable body goes base64"
    );
    assert_eq!(payload["request_body_base64"], true);

    // The function's own API Gateway response.
    let reply = gw.proxy(request("GET", "/proxy", &[], "")).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.text(), "created by the function");
    assert_eq!(reply.header("x-from-function").as_deref(), Some("yes"));
    let multi: Vec<_> = reply
        .headers
        .get_all("x-multi")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(multi, ["a", "b"]);
    let reply = gw.proxy(request("GET", "/bad-proxy", &[], "")).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["message"], "Bad Gateway");
    assert!(reply.json()["error"]
        .as_str()
        .is_some_and(|e| e.starts_with("could not JSON decode Lambda function response: ")));

    // An unhandled error answers with unhandled_status.
    let reply = gw.proxy(request("GET", "/unhandled", &[], "")).await;
    assert_eq!(reply.status, 412);
    assert_eq!(reply.json()["errorMessage"], "boom");

    // A signature AWS refuses: Kong's 500.
    let reply = gw.proxy(request("GET", "/wrong-key", &[], "")).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.json(), json!({ "message": "An unexpected error occurred" }));

    // An assumed role: STS's temporary credentials sign the invocation.
    let reply = gw.proxy(request("GET", "/role", &[], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["access_key"], "ASIATEMPORARY");

    // An API Gateway proxy event.
    let reply = gw
        .proxy(request("POST", "/gateway?q=1&q=2", &json_body, r#"{"k":"v"}"#))
        .await;
    let event = &reply.json()["payload"];
    assert_eq!(event["httpMethod"], "POST");
    assert_eq!(event["path"], "/gateway");
    assert_eq!(event["queryStringParameters"], json!({ "q": "1" }));
    assert_eq!(event["multiValueQueryStringParameters"], json!({ "q": ["1", "2"] }));
    assert_eq!(event["isBase64Encoded"], true);
    assert_eq!(event["body"], "eyJrIjoidiJ9");
    assert_eq!(event["requestContext"]["httpMethod"], "POST");

    // A function named by its ARN (':' encoded in the path, and again when signed).
    let reply = gw.proxy(request("GET", "/arn", &[], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = reply.json();
    assert_eq!(seen["function"], "arn:aws:lambda:us-east-1:123456789012:function:echo");
    assert_eq!(seen["invocation_type"], "Event");

    // The key pair goes together.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "aws-lambda", "config": { "aws_key": "AKID", "function_name": "f" } }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
}
