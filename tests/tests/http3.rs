//! HTTP/3 on the TLS proxy listener (`ssl http2 http3`) from a real client, aioquic
//! (tests/h3/client.py): bodies both ways, a streamed response, plugins, many streams on
//! one connection, the idle timeout, GOAWAY on a graceful stop, and one route answering
//! alike over HTTP/1.1, HTTP/2 and HTTP/3.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::declarative::{config, route, service};
use strait_e2e::h3::{header, run};
use strait_e2e::{request, Conn, Gateway, GatewayOptions, TestCa, TlsOptions, Trust, Upstream, UpstreamKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SNI: &str = "h3.test";

/// `cfg` with a certificate for [`SNI`] from `ca`.
fn with_certificate(mut cfg: Value, ca: &TestCa) -> Value {
    let leaf = ca.issue(&[SNI]);
    cfg["certificates"] = json!([{ "cert": leaf.cert_pem, "key": leaf.key_pem, "snis": [{ "name": SNI }] }]);
    cfg
}

async fn gateway(options: GatewayOptions, cfg: Value, ca: &TestCa) -> Gateway {
    let gw = Gateway::start(options.http3()).await;
    let reply = gw.apply(&with_certificate(cfg, ca)).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    gw
}

fn echo_of(result: &Value) -> Value {
    serde_json::from_str(result["text"].as_str().expect("a short body")).expect("the upstream's echo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_both_ways_and_the_access_log() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let gw = gateway(
        GatewayOptions::new(),
        config(vec![service("s", &up.url("http"), vec![route("r", &["/h3"])])]),
        &ca,
    )
    .await;
    let report = run(
        &gw,
        &ca,
        SNI,
        &json!({ "requests": [
            { "path": "/h3/echo?x=1", "headers": { "x-a": "b" } },
            { "method": "POST", "path": "/h3/echo", "body_bytes": 3_000_000 },
            { "path": "/h3/big?bytes=5000000" },
            { "method": "POST", "path": "/h3/echo", "headers": { "content-length": "12x" } },
        ]}),
    );
    assert_eq!(report["alpn"], "h3");
    let results = report["results"].as_array().expect("results");
    for result in &results[..3] {
        assert_eq!(result["status"], 200, "{result}");
        assert!(result["error"].is_null(), "{result}");
    }
    // A Content-Length that is no number: malformed (RFC 9114 §4.1.2), never forwarded.
    assert_eq!(results[3]["status"], 400, "{}", results[3]);
    assert!(results[3]["text"].as_str().unwrap().contains("Bad request"));
    let get = echo_of(&results[0]);
    assert_eq!(get["method"], "GET");
    assert_eq!(get["path"], "/echo?x=1");
    assert_eq!(get["headers"]["x-a"], "b");
    assert_eq!(get["headers"]["x-forwarded-proto"], "https");
    assert_eq!(get["headers"]["x-forwarded-host"], SNI, "the request's authority");
    // 3 MB up, echoed back whole and in order.
    assert_eq!(
        results[1]["echo_body_sha256"], results[1]["sent_sha256"],
        "{}",
        results[1]["body_len"]
    );
    assert!(results[1]["body_len"].as_u64().unwrap() > 3_000_000);
    assert_eq!(results[2]["body_len"], 5_000_000);
    // The access log names the protocol as nginx's `$server_protocol` does.
    let log = std::fs::read_to_string(gw.prefix().join("logs/access.log")).expect("access log");
    assert!(log.contains("\"POST /h3/echo HTTP/3.0\" 200"), "{log}");
    assert_eq!(up.hits(), 3);
}

/// An upstream that sends its body in two chunks 1.5 s apart.
async fn dribbling_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let _ = socket.write_all(b"6\r\nsecond\r\n0\r\n\r\n").await;
                let _ = socket.read(&mut buf).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_arrives_as_the_upstream_sends_it() {
    let addr = dribbling_upstream().await;
    let ca = TestCa::new("h3 ca");
    let gw = gateway(
        GatewayOptions::new(),
        // Kong's `response_buffering = false`: data is passed on as it comes (SSE).
        config(vec![service(
            "s",
            &format!("http://{addr}"),
            vec![json!({ "name": "r", "paths": ["/drip"], "response_buffering": false })],
        )]),
        &ca,
    )
    .await;
    let report = run(&gw, &ca, SNI, &json!({ "requests": [{ "path": "/drip" }] }));
    let result = &report["results"][0];
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["text"], "firstsecond");
    let first = result["first_byte_s"].as_f64().expect("first byte");
    let last = result["last_byte_s"].as_f64().expect("last byte");
    assert!(
        last - first > 1.0,
        "the first chunk waited for the second: {first} .. {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_and_reject_over_http3() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let mut cfg = config(vec![service("s", &up.url("http"), vec![route("r", &["/guarded"])])]);
    cfg["plugins"] = json!([
        { "name": "key-auth", "route": "r" },
        { "name": "pre-function", "route": "r", "config": { "access": [
            "kong.service.request.set_header('x-proto', ngx.var.server_protocol .. ' ' .. kong.request.get_http_version())"
        ]}},
    ]);
    cfg["consumers"] = json!([{ "username": "alice", "keyauth_credentials": [{ "key": "secret" }] }]);
    let gw = gateway(GatewayOptions::new(), cfg, &ca).await;
    let report = run(
        &gw,
        &ca,
        SNI,
        &json!({ "requests": [
            { "path": "/guarded/echo" },
            { "path": "/guarded/echo", "headers": { "apikey": "secret" } },
        ]}),
    );
    let refused = &report["results"][0];
    assert_eq!(refused["status"], 401, "{refused}");
    let body: Value = serde_json::from_str(refused["text"].as_str().unwrap()).expect("Kong's error body");
    assert_eq!(body["message"], "No API key found in request");
    assert!(header(refused, "www-authenticate").is_some(), "{refused}");
    let served = &report["results"][1];
    assert_eq!(served["status"], 200, "{served}");
    let echo = echo_of(served);
    assert_eq!(
        echo["headers"]["x-proto"], "HTTP/3.0 3",
        "what plugins see of the protocol"
    );
    assert_eq!(echo["headers"]["x-consumer-username"], "alice");
    assert_eq!(up.hits(), 1, "the refused request never reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_share_one_connection() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    // Fewer streams allowed at once than the client opens: the rest wait for credit.
    let gw = gateway(
        GatewayOptions::new().setting("http3_max_concurrent_streams", "50"),
        config(vec![service("s", &up.url("http"), vec![route("r", &["/many"])])]),
        &ca,
    )
    .await;
    let requests: Vec<Value> = (0..120)
        .map(|i| json!({ "method": "POST", "path": format!("/many/slow?ms=400&i={i}"), "body": format!("n{i}") }))
        .collect();
    let report = run(&gw, &ca, SNI, &json!({ "requests": requests }));
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 120);
    let mut slowest: f64 = 0.0;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["status"], 200, "{result}");
        let echo = echo_of(result);
        assert_eq!(echo["body"], format!("n{i}"), "each stream got its own answer");
        slowest = slowest.max(result["last_byte_s"].as_f64().unwrap_or(f64::MAX));
    }
    // One after another they would take 48 s; 50 at a time, three rounds of 0.4 s.
    assert!(slowest < 8.0, "streams were served concurrently: slowest {slowest} s");
    assert_eq!(up.hits(), 120);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_at_the_idle_timeout() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let gw = gateway(
        GatewayOptions::new().setting("http3_idle_timeout", "1s"),
        config(vec![service("s", &up.url("http"), vec![route("r", &["/idle"])])]),
        &ca,
    )
    .await;
    // Within the timeout the connection carries the next request ...
    let kept = run(
        &gw,
        &ca,
        SNI,
        &json!({ "requests": [{ "path": "/idle/echo" }], "then_wait": 0.4,
                 "requests_after": [{ "path": "/idle/echo" }] }),
    );
    assert_eq!(kept["results_after"][0]["status"], 200, "{kept}");
    assert!(kept["terminated_before_after"].is_null(), "{kept}");
    // ... past it, the connection is gone (the client asked for 60 s: the node's 1 s rules).
    let idle = run(
        &gw,
        &ca,
        SNI,
        &json!({ "requests": [{ "path": "/idle/echo" }], "then_wait": 2.5,
                 "requests_after": [{ "path": "/idle/echo" }] }),
    );
    let closed = &idle["terminated_before_after"];
    assert!(!closed.is_null(), "the connection outlived the idle timeout: {idle}");
    let after = closed["after_s"].as_f64().unwrap();
    assert!((0.9..2.4).contains(&after), "closed after {after} s");
    assert!(idle["results_after"][0]["status"].is_null(), "{idle}");
    // And the node let it go too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let status = gw.admin_get("/status").await.json();
        if status["server"]["connections_active"] == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_finishes_the_request_in_flight_then_goes_away() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let gw = gateway(
        GatewayOptions::new(),
        config(vec![service("s", &up.url("http"), vec![route("r", &["/stop"])])]),
        &ca,
    )
    .await;
    let report = std::thread::scope(|scope| {
        let client = scope.spawn(|| {
            run(
                &gw,
                &ca,
                SNI,
                &json!({ "requests": [{ "path": "/stop/slow?ms=2000" }], "then_wait": 1.0,
                         "requests_after": [{ "path": "/stop/echo" }] }),
            )
        });
        // Stop once the slow request is at the upstream (the client's start-up
        // can take seconds on a loaded machine), well before it is answered.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while up.hits() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the slow request never reached the upstream"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        gw.quit();
        client.join().expect("client thread")
    });
    assert_eq!(
        report["results"][0]["status"], 200,
        "the request in flight was answered: {report}"
    );
    // After the GOAWAY no new request is served on the connection: it is refused
    // (H3_REQUEST_REJECTED, 0x10b: the client may retry it elsewhere) or the connection is gone.
    let after = &report["results_after"][0];
    assert!(after["status"].is_null(), "{report}");
    let error = after["error"].as_str().unwrap_or_default();
    assert!(
        error == "stream reset 267" || error == "connection terminated" || !report["terminated_before_after"].is_null(),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_route_answers_alike_over_http1_http2_and_http3() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let mut cfg = config(vec![service("s", &up.url("http"), vec![route("r", &["/same"])])]);
    cfg["plugins"] = json!([
        { "name": "response-transformer", "route": "r", "config": { "add": { "headers": ["x-added:yes"] } } },
        { "name": "request-transformer", "route": "r", "config": { "add": { "headers": ["x-upstream-added:1"] } } },
    ]);
    let gw = gateway(GatewayOptions::new(), cfg, &ca).await;
    let path = "/same/echo?q=1";
    let mut answers = Vec::new();
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let options = TlsOptions::new(Some(SNI), &[alpn], Trust::CaPem(ca.cert_pem()));
        let mut conn = Conn::tls(gw.proxy_tls_addr(), &options).await.expect("TLS connect");
        let reply = conn
            .send(request("POST", path, &[("host", SNI), ("x-a", "b")], "same body"))
            .await
            .expect("request");
        let alt_svc = reply.header("alt-svc").expect("Alt-Svc on a TLS response");
        assert_eq!(alt_svc, format!("h3=\":{}\"; ma=86400", gw.proxy_tls_addr().port()));
        answers.push((reply.status.as_u16(), reply.header("x-added"), reply.json()));
    }
    let report = run(
        &gw,
        &ca,
        SNI,
        &json!({ "requests": [{ "method": "POST", "path": path, "headers": { "x-a": "b" }, "body": "same body" }] }),
    );
    let h3 = &report["results"][0];
    answers.push((
        h3["status"].as_u64().unwrap() as u16,
        header(h3, "x-added").map(str::to_string),
        echo_of(h3),
    ));
    let fields = |echo: &Value| {
        let headers = &echo["headers"];
        json!({
            "method": echo["method"], "path": echo["path"], "body": echo["body"], "version": echo["version"],
            "host": headers["host"], "x-a": headers["x-a"], "x-upstream-added": headers["x-upstream-added"],
            "x-forwarded-proto": headers["x-forwarded-proto"], "x-forwarded-host": headers["x-forwarded-host"],
            "x-forwarded-port": headers["x-forwarded-port"], "x-forwarded-path": headers["x-forwarded-path"],
            "x-real-ip": headers["x-real-ip"], "content-length": headers["content-length"],
        })
    };
    let first = (answers[0].0, answers[0].1.clone(), fields(&answers[0].2));
    assert_eq!(first.0, 200);
    assert_eq!(first.1.as_deref(), Some("yes"));
    for (i, (status, added, echo)) in answers.iter().enumerate().skip(1) {
        assert_eq!(
            (*status, added.clone(), fields(echo)),
            first,
            "protocol {} differs from HTTP/1.1",
            ["h1", "h2", "h3"][i]
        );
    }
    assert_eq!(up.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_without_ssl_is_refused_at_start() {
    let dir = strait_e2e::TempDir::new();
    let conf = dir.path().join("strait.conf");
    std::fs::write(&conf, "proxy_listen = 127.0.0.1:0 http3\n").expect("write conf");
    let out = strait_e2e::run_strait(&["check", conf.to_str().unwrap()], dir.path(), &[]).await;
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("http3 needs ssl"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_rtt_is_off_by_default_and_then_serves_only_safe_methods() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("h3 ca");
    let cfg = config(vec![service("s", &up.url("http"), vec![route("r", &["/early"])])]);
    let plan = json!({ "early_data": true, "ticket_path": "/early/echo", "requests": [
        { "path": "/early/echo" },
        { "method": "POST", "path": "/early/echo", "body": "not twice" },
    ]});
    // Off (the default): the resumed connection's first flight waits for the handshake.
    let gw = gateway(GatewayOptions::new(), cfg.clone(), &ca).await;
    let off = run(&gw, &ca, SNI, &plan);
    assert_eq!(off["session_resumed"], true, "{off}");
    assert_eq!(off["early_data_accepted"], false, "{off}");
    assert_eq!(off["results"][0]["status"], 200, "{off}");
    assert_eq!(off["results"][1]["status"], 200, "{off}");
    drop(gw);
    // On: early data is accepted; the GET in it is served at once, marked for the upstream
    // (RFC 8470), the POST only once the handshake completed (a replay never completes it).
    let gw = gateway(GatewayOptions::new().setting("http3_early_data", "on"), cfg, &ca).await;
    let on = run(&gw, &ca, SNI, &plan);
    assert_eq!(on["ticket_allows_early_data"], true, "{on}");
    assert_eq!(on["early_data_accepted"], true, "{on}");
    assert_eq!(on["results"][0]["status"], 200, "{on}");
    assert_eq!(on["results"][1]["status"], 200, "{on}");
    let get = echo_of(&on["results"][0]);
    assert_eq!(
        get["headers"]["early-data"], "1",
        "the GET was served from 0-RTT: {get}"
    );
    let post = echo_of(&on["results"][1]);
    assert_eq!(post["body"], "not twice");
    assert!(
        post["headers"]["early-data"].is_null(),
        "the POST waited for the handshake: {post}"
    );
}
