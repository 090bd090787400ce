//! The logging plugins on a real node, each against a real local sink:
//! `file-log` (Kong's entry, one JSON line, reopened on SIGUSR1),
//! `http-log` (Kong 3.x queue: batches, retries, a full queue drops and
//! counts without slowing the proxy), `tcp-log`, `udp-log`, and `syslog`
//! (severity by status, `log_level` threshold, facility) on a Unix datagram
//! socket standing for `/dev/log`.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use strait_e2e::sinks::{DatagramCollector, HttpCollector, TcpCollector};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{eventually, get, request, Gateway, GatewayOptions};

const ROUTE_ID: &str = "10900000-0000-4000-8000-000000000001";
const SERVICE_ID: &str = "10900000-0000-4000-8000-0000000000aa";
const CONSUMER_ID: &str = "10900000-0000-4000-8000-0000000000cc";

/// One service (fixed id) with one route per `(name, path, plugins)`.
fn config(upstream: &Upstream, routes: &[(&str, &str, Value)]) -> Value {
    let routes: Vec<Value> = routes
        .iter()
        .enumerate()
        .map(|(index, (name, path, plugins))| {
            let id = if index == 0 {
                ROUTE_ID.to_string()
            } else {
                format!("10900000-0000-4000-8000-00000000010{index}")
            };
            json!({ "id": id, "name": name, "paths": [path], "plugins": plugins })
        })
        .collect();
    json!({
        "_format_version": "3.0",
        "consumers": [{ "id": CONSUMER_ID, "username": "ada", "keyauth_credentials": [{ "key": "secret-key" }] }],
        "services": [{ "id": SERVICE_ID, "name": "echo", "url": upstream.url("http"), "routes": routes }]
    })
}

async fn start(options: GatewayOptions) -> (Gateway, Upstream) {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;
    (gw, upstream)
}

fn read_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

async fn lines_eventually(path: &std::path::Path, count: usize) -> Vec<Value> {
    eventually(Duration::from_secs(5), "log lines", || async move {
        let lines = read_lines(path);
        anyhow::ensure!(lines.len() == count, "{} lines, want {count}", lines.len());
        Ok(lines)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_log_writes_kongs_entry_and_reopens_on_sigusr1() {
    let (gw, upstream) = start(GatewayOptions::new()).await;
    let path = gw.prefix().join("file-log.json");
    let plugins = json!([
        { "name": "key-auth" },
        { "name": "file-log", "config": { "path": path.display().to_string() } }
    ]);
    gw.apply(&config(&upstream, &[("logged", "/logged", plugins)])).await;

    let reply = gw
        .proxy(request(
            "GET",
            "/logged/x?a=1&a=2&flag&b=x%20y",
            &[
                ("apikey", "secret-key"),
                ("authorization", "Bearer t0ken"),
                ("x-two", "1"),
                ("x-two", "2"),
            ],
            "",
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let request_id = reply.header("x-kong-request-id").expect("request id");
    let entry = lines_eventually(&path, 1).await.remove(0);

    let logged = &entry["request"];
    assert_eq!(logged["method"], "GET");
    assert_eq!(logged["uri"], "/logged/x?a=1&a=2&flag&b=x%20y");
    assert_eq!(
        logged["url"],
        format!(
            "http://127.0.0.1:{}/logged/x?a=1&a=2&flag&b=x%20y",
            gw.proxy_addr().port()
        )
    );
    assert_eq!(
        logged["querystring"],
        json!({"a": ["1", "2"], "flag": true, "b": "x y"})
    );
    assert_eq!(logged["headers"]["authorization"], "REDACTED");
    assert_eq!(logged["headers"]["apikey"], "secret-key");
    assert_eq!(logged["headers"]["x-two"], json!(["1", "2"]));
    assert_eq!(logged["id"], request_id.as_str());
    assert!(logged["size"].as_u64().unwrap() > 50, "{logged}");
    assert_eq!(entry["upstream_uri"], "/x?a=1&a=2&flag&b=x%20y");
    assert_eq!(entry["upstream_status"], "200");
    assert_eq!(entry["response"]["status"], 200);
    assert_eq!(entry["response"]["headers"]["x-kong-request-id"], request_id.as_str());
    assert_eq!(
        entry["response"]["size"].as_u64(),
        Some(reply.body.len() as u64),
        "response.size counts the body sent"
    );
    for latency in ["kong", "proxy", "request", "receive"] {
        assert!(entry["latencies"][latency].is_i64(), "latencies.{latency}: {entry}");
    }
    assert_eq!(entry["tries"][0]["ip"], "127.0.0.1");
    assert_eq!(entry["tries"][0]["port"], upstream.port());
    assert_eq!(entry["route"]["id"], ROUTE_ID);
    assert_eq!(entry["route"]["name"], "logged");
    assert_eq!(entry["service"]["id"], SERVICE_ID);
    assert_eq!(entry["consumer"]["username"], "ada");
    assert_eq!(entry["authenticated_entity"]["consumer_id"], CONSUMER_ID);
    assert!(entry["authenticated_entity"]["id"].is_string());
    assert_eq!(entry["client_ip"], "127.0.0.1");
    assert_eq!(entry["source"], "service");
    assert_eq!(entry["workspace_name"], "default");
    let started = entry["started_at"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now - started < 60_000, "started_at is epoch milliseconds: {started}");

    // A plugin's answer is logged as an exit.
    let refused = gw.proxy(get("/logged/no-key")).await;
    assert_eq!(refused.status, 401);
    let entries = lines_eventually(&path, 2).await;
    assert_eq!(entries[1]["source"], "exit");
    assert_eq!(entries[1]["response"]["status"], 401);
    assert!(entries[1].get("consumer").is_none());

    // logrotate: move the file away, signal, and the next line starts a new file.
    let rotated = gw.prefix().join("file-log.json.1");
    std::fs::rename(&path, &rotated).expect("rotate");
    gw.reopen_logs();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = gw
        .proxy(request("GET", "/logged/after", &[("apikey", "secret-key")], ""))
        .await;
    assert_eq!(after.status, 200);
    let fresh = lines_eventually(&path, 1).await;
    assert_eq!(fresh[0]["request"]["uri"], "/logged/after");
    assert_eq!(
        read_lines(&rotated).len(),
        2,
        "the rotated file keeps the old lines only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_log_batches_retries_and_never_grows_past_its_queue() {
    let (gw, upstream) = start(GatewayOptions::new()).await;
    let collector = HttpCollector::start().await;
    let stuck = HttpCollector::start().await;
    stuck.hang(true);
    let endpoint = collector.url("/logs?k=v").replace("http://", "http://user:pw@");
    let routes = [
        (
            "batched",
            "/batched",
            json!([{ "name": "http-log", "config": {
                "http_endpoint": endpoint,
                "headers": { "x-token": "t" },
                "queue": { "max_batch_size": 3, "max_coalescing_delay": 0.3, "initial_retry_delay": 0.05 } } }]),
        ),
        (
            "single",
            "/single",
            json!([{ "name": "http-log", "config": { "http_endpoint": collector.url("/one"), "method": "PUT" } }]),
        ),
        (
            "stuck",
            "/stuck",
            json!([{ "name": "http-log", "config": {
                "http_endpoint": stuck.url("/never"), "timeout": 60000,
                "queue": { "max_entries": 2 } } }]),
        ),
    ];
    gw.apply(&config(&upstream, &routes)).await;

    for n in 0..3 {
        let reply = gw.proxy(get(&format!("/batched/{n}"))).await;
        assert_eq!(reply.status, 200);
    }
    let batch = eventually(Duration::from_secs(5), "one batch of three", || async {
        let received = collector.received();
        anyhow::ensure!(received.len() == 1, "{} requests", received.len());
        Ok(received[0].clone())
    })
    .await;
    assert_eq!(batch.method, "POST");
    assert_eq!(batch.path, "/logs?k=v");
    assert_eq!(batch.headers["content-type"], "application/json");
    assert_eq!(batch.headers["x-token"], "t");
    let basic = base64::engine::general_purpose::STANDARD.encode("user:pw");
    assert_eq!(batch.headers["authorization"], format!("Basic {basic}").as_str());
    let entries = batch.json();
    let uris: Vec<&str> = entries
        .as_array()
        .expect("a batch is a JSON array")
        .iter()
        .map(|e| e["request"]["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["/batched/0", "/batched/1", "/batched/2"]);

    // Two failures, then the same batch goes through.
    collector.fail_first(2);
    let before = collector.attempts();
    assert_eq!(gw.proxy(get("/batched/retried")).await.status, 200);
    let retried = eventually(Duration::from_secs(5), "the retried batch", || async {
        let received = collector.received();
        anyhow::ensure!(received.len() == 2, "{} delivered", received.len());
        Ok(received[1].clone())
    })
    .await;
    assert_eq!(collector.attempts() - before, 3, "two failures, then success");
    assert_eq!(retried.json()[0]["request"]["uri"], "/batched/retried");

    // max_batch_size 1 sends the entry itself, with the configured method.
    assert_eq!(gw.proxy(get("/single/alone")).await.status, 200);
    let single = eventually(Duration::from_secs(5), "the single entry", || async {
        let received = collector.received();
        anyhow::ensure!(received.len() == 3, "{} delivered", received.len());
        Ok(received[2].clone())
    })
    .await;
    assert_eq!(single.method, "PUT");
    assert_eq!(single.json()["request"]["uri"], "/single/alone");

    // A sink that never answers: one entry in flight, two waiting, the
    // rest dropped and counted; the proxy answers as fast as before.
    let dropped_before = gw.admin_get("/status").await.json()["logs"]["dropped_total"]
        .as_u64()
        .unwrap();
    let started = std::time::Instant::now();
    for n in 0..12 {
        assert_eq!(gw.proxy(get(&format!("/stuck/{n}"))).await.status, 200);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the proxy never waits on a log queue"
    );
    let status = gw.admin_get("/status").await.json();
    let dropped = status["logs"]["dropped_total"].as_u64().unwrap() - dropped_before;
    assert!(
        (9..=10).contains(&dropped),
        "dropped {dropped} of 12 with 1 in flight and 2 queued"
    );
    assert_eq!(stuck.attempts(), 1, "one request held by the stuck sink");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_log_send_one_entry_per_request() {
    let (gw, upstream) = start(GatewayOptions::new()).await;
    let tcp = TcpCollector::start().await;
    let udp = DatagramCollector::udp().await;
    let udp_port = udp.udp.unwrap().port();
    let routes = [
        (
            "tcp",
            "/tcp",
            json!([{ "name": "tcp-log", "config": { "host": "127.0.0.1", "port": tcp.addr.port() } }]),
        ),
        (
            "udp",
            "/udp",
            json!([{ "name": "udp-log", "config": { "host": "127.0.0.1", "port": udp_port } }]),
        ),
    ];
    gw.apply(&config(&upstream, &routes)).await;
    for n in 0..3 {
        assert_eq!(gw.proxy(get(&format!("/tcp/{n}"))).await.status, 200);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(gw.proxy(get("/udp/one")).await.status, 200);
    let lines = eventually(Duration::from_secs(5), "three tcp-log lines", || async {
        let lines = tcp.lines();
        anyhow::ensure!(lines.len() == 3, "{} lines", lines.len());
        Ok(lines)
    })
    .await;
    for (n, line) in lines.iter().enumerate() {
        let entry: Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(entry["request"]["uri"], format!("/tcp/{n}"));
        assert_eq!(entry["route"]["name"], "tcp");
    }
    assert_eq!(tcp.connections(), 1, "one kept-alive connection");
    let datagrams = eventually(Duration::from_secs(5), "one udp-log datagram", || async {
        let datagrams = udp.datagrams();
        anyhow::ensure!(datagrams.len() == 1, "{} datagrams", datagrams.len());
        Ok(datagrams)
    })
    .await;
    let entry: Value = serde_json::from_slice(&datagrams[0]).expect("a JSON datagram");
    assert_eq!(entry["request"]["uri"], "/udp/one");
    assert_eq!(entry["response"]["status"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syslog_sends_by_severity_to_the_local_socket() {
    let dir = strait_e2e::TempDir::new();
    let socket = dir.path().join("log.sock");
    let sink = DatagramCollector::unix(&socket);
    let options = GatewayOptions::new().setting("syslog_socket", &socket.display().to_string());
    let (gw, upstream) = start(options).await;
    let plugins = json!([{ "name": "syslog", "config": {
        "log_level": "err", "successful_severity": "info", "client_errors_severity": "err",
        "server_errors_severity": "crit", "facility": "local0" } }]);
    gw.apply(&config(&upstream, &[("sys", "/sys", plugins)])).await;
    assert_eq!(gw.proxy(get("/sys/fine")).await.status, 200);
    assert_eq!(gw.proxy(get("/sys/status/404")).await.status, 404);
    assert_eq!(gw.proxy(get("/sys/status/503")).await.status, 503);
    let datagrams = eventually(Duration::from_secs(5), "two syslog messages", || async {
        let datagrams = sink.datagrams();
        anyhow::ensure!(datagrams.len() == 2, "{} messages", datagrams.len());
        Ok(datagrams)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.datagrams().len(), 2, "info is below log_level err: not sent");
    let mut seen = Vec::new();
    for datagram in &datagrams {
        let text = String::from_utf8(datagram.clone()).expect("text");
        let (head, message) = text.split_once("]: ").expect("`<PRI>time kong[pid]: message`");
        assert!(head.contains(" kong["), "{head}");
        let priority: u8 = head[1..head.find('>').unwrap()].parse().unwrap();
        let entry: Value = serde_json::from_str(message).expect("JSON message");
        seen.push((priority, entry["response"]["status"].as_u64().unwrap()));
    }
    seen.sort();
    // local0 is facility 16: err (3) → 131, crit (2) → 130.
    assert_eq!(seen, [(130, 503), (131, 404)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_access_and_error_logs() {
    // Defaults: text access log at <prefix>/logs/access.log, every request
    // (a 404 with no route too).
    let (gw, upstream) = start(GatewayOptions::new()).await;
    gw.apply(&config(&upstream, &[("plain", "/plain", json!([]))])).await;
    let missing = gw
        .proxy(request(
            "GET",
            "/nowhere?q=1",
            &[("user-agent", "tester/1"), ("referer", "http://r/")],
            "",
        ))
        .await;
    assert_eq!(missing.status, 404);
    let id = missing.header("x-kong-request-id").unwrap();
    let access = gw.prefix().join("logs/access.log");
    let line = eventually(Duration::from_secs(5), "the access line", || {
        let (access, id) = (access.clone(), id.clone());
        async move {
            let text = std::fs::read_to_string(&access)?;
            let line = text.lines().find(|l| l.contains(&id)).map(str::to_string);
            line.ok_or_else(|| anyhow::anyhow!("no line for {id} in {text:?}"))
        }
    })
    .await;
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains(" +0000] \"GET /nowhere?q=1 HTTP/1.1\" 404 "), "{line}");
    assert!(
        line.ends_with(&format!("\"http://r/\" \"tester/1\" kong_request_id: \"{id}\"")),
        "{line}"
    );

    // JSON format, the error log in a file under the prefix, no colour codes.
    let options = GatewayOptions::new()
        .setting("log_format", "json")
        .setting("proxy_error_log", "logs/error.log")
        .setting("proxy_access_log", "logs/json-access.log");
    let (gw, upstream) = start(options).await;
    gw.apply(&config(&upstream, &[("plain", "/plain", json!([]))])).await;
    let reply = gw.proxy(get("/plain/json")).await;
    assert_eq!(reply.status, 200);
    let path = gw.prefix().join("logs/json-access.log");
    let entry = eventually(Duration::from_secs(5), "the JSON access line", || {
        let path = path.clone();
        async move {
            let text = std::fs::read_to_string(&path)?;
            let found = text
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("JSON access line"))
                .find(|v| v["uri"] == "/plain/json");
            found.ok_or_else(|| anyhow::anyhow!("no line yet"))
        }
    })
    .await;
    assert_eq!(entry["status"], 200);
    assert_eq!(entry["method"], "GET");
    assert_eq!(entry["bytes_sent"].as_u64(), Some(reply.body.len() as u64));
    assert_eq!(entry["request_id"], reply.header("x-kong-request-id").unwrap().as_str());
    let error_log = gw.prefix().join("logs/error.log");
    let text = eventually(Duration::from_secs(5), "the error log", || {
        let error_log = error_log.clone();
        async move {
            let text = std::fs::read_to_string(&error_log)?;
            anyhow::ensure!(text.contains("strait started"), "{text}");
            Ok(text)
        }
    })
    .await;
    assert!(!text.contains('\u{1b}'), "no ANSI colour codes in a file: {text}");
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("error log line not JSON ({e}): {line}"));
    }

    // `off`: no access log at all.
    let (gw, upstream) = start(GatewayOptions::new().setting("proxy_access_log", "off")).await;
    gw.apply(&config(&upstream, &[("plain", "/plain", json!([]))])).await;
    assert_eq!(gw.proxy(get("/plain/quiet")).await.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!gw.prefix().join("logs/access.log").exists());
}
