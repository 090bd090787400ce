//! Plugins written against Kong's external PDKs, run by their real plugin
//! servers (PyPI `kong-pdk`, npm `kong-pdk`, installed by scripts/test.sh)
//! on a real node with a real upstream: each reads a request header, sets
//! an upstream header, answers with `kong.response.exit` on a condition
//! and logs; its schema (from the server's dump) is enforced on the Admin
//! API; a server killed under load is started again and the requests that
//! failed meanwhile get Kong's 500.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use strait_e2e::admin_api::send_json;
use strait_e2e::deck::deck;
use strait_e2e::plugins::{echo_headers, echo_service, UPSTREAM};
use strait_e2e::tools::tool;
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{request, Gateway, GatewayOptions, TempDir};

/// A Python plugin as Kong's documentation and `examples/py-hello.py`
/// teach: a module with `Schema`, `version`, `priority` and `Plugin`, run
/// as a dedicated server.
const PY_GREETER: &str = r#"#!/usr/bin/env python3
import time

import kong_pdk.pdk.kong as kong

Schema = (
    {"message": {"type": "string", "required": True}},
    {"deny_header": {"type": "string", "default": "x-deny"}},
)

version = "0.1.0"
priority = 900


class Plugin(object):
    def __init__(self, config):
        self.config = config

    def access(self, kong: kong.kong):
        name, err = kong.request.get_header("x-name")
        if err:
            kong.log.err("reading x-name: ", err)
            return
        nap, _ = kong.request.get_header("x-nap")
        if nap:
            time.sleep(float(nap))
        denied, _ = kong.request.get_header(self.config["deny_header"])
        if denied:
            kong.response.exit(403, {"message": "denied by py-greeter", "who": name})
            return
        kong.service.request.set_header("x-greeting", self.config["message"] + ", " + (name or "stranger"))
        kong.log.set_serialize_value("greeted", name or "stranger")
        kong.log.notice("py-greeter greeted ", name or "stranger")

    def log(self, kong: kong.kong):
        status, _ = kong.response.get_status()
        name, _ = kong.request.get_header("x-name")
        kong.log.notice("py-greeter logged ", status, " for ", name or "stranger")


if __name__ == "__main__":
    from kong_pdk.cli import start_dedicated_server
    start_dedicated_server("py-greeter", Plugin, version, priority, Schema)
"#;

/// The same plugin for the JavaScript PDK, as its `examples/js-hello.js`.
const JS_GREETER: &str = r#"'use strict';

class KongPlugin {
  constructor(config) {
    this.config = config;
  }

  async access(kong) {
    const name = await kong.request.getHeader("x-name");
    const denied = await kong.request.getHeader(this.config.deny_header);
    if (denied) {
      return await kong.response.exit(403, { message: "denied by js-greeter", who: name });
    }
    await kong.service.request.setHeader("x-greeting", `${this.config.message}, ${name || "stranger"}`);
    await kong.log.notice("js-greeter greeted ", name || "stranger");
  }

  async log(kong) {
    const status = await kong.response.getStatus();
    const name = await kong.request.getHeader("x-name");
    await kong.log.notice("js-greeter logged ", status, " for ", name || "stranger");
  }
}

module.exports = {
  Plugin: KongPlugin,
  Schema: [
    { message: { type: "string", required: true } },
    { deny_header: { type: "string", default: "x-deny" } },
  ],
  Version: "0.1.0",
  Priority: 800,
};
"#;

/// The node's settings for a Python server serving `py-greeter` from `dir`.
fn python_server(dir: &Path) -> GatewayOptions {
    let python = tool("python", "STRAIT_KONG_PDK_PYTHON");
    let script = dir.join("py-greeter.py");
    std::fs::write(&script, PY_GREETER).unwrap();
    let run = format!("{} {}", python.display(), script.display());
    GatewayOptions::new()
        .setting("plugins", "bundled,py-greeter")
        .setting("pluginserver_names", "py")
        .setting(
            "pluginserver_py_socket",
            &dir.join("py-greeter.sock").display().to_string(),
        )
        .setting(
            "pluginserver_py_start_cmd",
            &format!("{run} --kong-prefix {} --socket-name py-greeter.sock", dir.display()),
        )
        .setting("pluginserver_py_query_cmd", &format!("{run} --dump"))
        .setting("log_level", "notice")
}

/// The node's settings for the go-pdk plugin `go-greeter` (tests/plugins/go-greeter,
/// built by scripts/test.sh against go-pdk v0.11.0 from the Go module proxy).
fn go_server(dir: &Path) -> GatewayOptions {
    let binary = tool("go-greeter", "STRAIT_GO_GREETER");
    GatewayOptions::new()
        .setting("plugins", "bundled,go-greeter")
        .setting("pluginserver_names", "go")
        .setting(
            "pluginserver_go_socket",
            &dir.join("go-greeter.socket").display().to_string(),
        )
        .setting(
            "pluginserver_go_start_cmd",
            &format!("{} -kong-prefix {}", binary.display(), dir.display()),
        )
        .setting("pluginserver_go_query_cmd", &format!("{} -dump", binary.display()))
        .setting("log_level", "notice")
}

/// The node's settings for a JavaScript server serving `js-greeter`.
fn js_server(dir: &Path) -> GatewayOptions {
    let server = tool("kong-js-pluginserver", "STRAIT_KONG_JS_PLUGINSERVER");
    let plugins = dir.join("js-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("js-greeter.js"), JS_GREETER).unwrap();
    let run = format!("{} --plugins-directory {}", server.display(), plugins.display());
    GatewayOptions::new()
        .setting("plugins", "bundled,js-greeter")
        .setting("pluginserver_names", "js")
        .setting("pluginserver_js_socket", &dir.join("js.sock").display().to_string())
        .setting(
            "pluginserver_js_start_cmd",
            &format!("{run} --kong-prefix {} --sock-name js.sock", dir.display()),
        )
        .setting("pluginserver_js_query_cmd", &format!("{run} --dump-all-plugins"))
        .setting("log_level", "notice")
}

/// Waits up to 10 seconds for the node's log to contain `text`.
async fn log_shows(gw: &Gateway, text: &str) -> bool {
    gw.log_shows(text, Duration::from_secs(10)).await
}

/// Waits for the server's socket (it starts beside the node).
async fn until_serving(gw: &Gateway, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = gw.proxy(request("GET", path, &[("x-name", "probe")], "")).await;
        if reply.status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the plugin server never answered: {}",
            gw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The plugin `name` on a route, configured by the Admin API; its schema
/// refusing a `message` that is not a string and, for the Python and
/// JavaScript plugins (whose schemas say so; go-pdk's generated ones have
/// no `required` nor defaults), a config without one, with Kong's error body.
async fn greeter_route(gw: &Gateway, name: &str, upstream: &Upstream) -> String {
    let declared = !name.starts_with("go-");
    let config = echo_service(json!([{ "name": "greeted", "paths": ["/greeted"] }]), json!([]))
        .to_string()
        .replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&config).unwrap()).await;

    // Listed with the server's own version and priority, as Kong lists them.
    let root = gw.admin("GET", "/", &[], "").await.json();
    let listed = &root["plugins"]["available_on_server"][name];
    assert_eq!(
        listed["version"], "0.1.0",
        "{name}: {}",
        root["plugins"]["available_on_server"]
    );
    let priority = match name {
        "py-greeter" => 900,
        "js-greeter" => 800,
        _ => 700,
    };
    assert_eq!(listed["priority"], priority, "{name}: {listed}");
    if declared {
        let refused = send_json(
            gw,
            "POST",
            "/routes/greeted/plugins",
            &json!({ "name": name, "config": {} }),
        )
        .await;
        assert_eq!(refused.status, 400, "{}", refused.text());
        let body = refused.json();
        assert_eq!(body["name"], "schema violation");
        assert_eq!(body["fields"]["config"]["message"], "required field missing", "{body}");
    }
    let refused = send_json(
        gw,
        "POST",
        "/routes/greeted/plugins",
        &json!({ "name": name, "config": { "message": 5 } }),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["fields"]["config"]["message"],
        "expected a string",
        "{}",
        refused.text()
    );

    let made = send_json(
        gw,
        "POST",
        "/routes/greeted/plugins",
        &json!({ "name": name, "config": { "message": "hello" } }),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    if declared {
        assert_eq!(made.json()["config"]["deny_header"], "x-deny");
    }
    made.json()["id"].as_str().unwrap().to_string()
}

/// What every greeter does, checked on `gw`.
async fn greets_denies_and_logs(gw: &Gateway, name: &str) {
    until_serving(gw, "/greeted").await;
    let reply = gw.proxy(request("GET", "/greeted", &[("x-name", "Ada")], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(echo_headers(&reply)["x-greeting"], "hello, Ada", "{}", reply.text());

    let denied = gw
        .proxy(request("GET", "/greeted", &[("x-name", "Eve"), ("x-deny", "1")], ""))
        .await;
    assert_eq!(denied.status, 403, "{}", denied.text());
    assert_eq!(
        denied.json(),
        json!({ "message": format!("denied by {name}"), "who": "Eve" })
    );
    assert!(
        log_shows(gw, &format!("[{name}] {name} greeted Ada")).await,
        "{}",
        gw.log_tail()
    );
    // The log phase, after the response, reads the request and the status.
    assert!(
        log_shows(gw, &format!("[{name}] {name} logged 200 for Ada")).await,
        "{}",
        gw.log_tail()
    );
    assert!(
        log_shows(gw, &format!("[{name}] {name} logged 403 for Eve")).await,
        "{}",
        gw.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_on_kong_pdk_reads_sets_exits_and_logs() {
    let dir = TempDir::new();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(python_server(dir.path())).await;
    let plugin = greeter_route(&gw, "py-greeter", &upstream).await;
    greets_denies_and_logs(&gw, "py-greeter").await;

    // Each config change starts a new instance on the server and closes the
    // old one (the Python server never expires instances by itself).
    for message in ["one", "two", "three"] {
        let patched = send_json(
            &gw,
            "PATCH",
            &format!("/plugins/{plugin}"),
            &json!({ "config": { "message": message } }),
        )
        .await;
        assert_eq!(patched.status, 200, "{}", patched.text());
        let reply = gw.proxy(request("GET", "/greeted", &[("x-name", "Cy")], "")).await;
        assert_eq!(
            echo_headers(&reply)["x-greeting"],
            format!("{message}, Cy"),
            "{}",
            reply.text()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = server_status(dir.path(), &dir.path().join("py-greeter.sock"));
        let instances = status.matches("'Id':").count();
        if instances == 1 && status.contains("'message': 'three'") {
            break;
        }
        assert!(Instant::now() < deadline, "instances left on the server: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // kong.log.set_serialize_value reaches the logging plugins' entry.
    let log_path = dir.path().join("file.log");
    let logged = send_json(
        &gw,
        "POST",
        "/routes/greeted/plugins",
        &json!({ "name": "file-log", "config": { "path": log_path.to_str().unwrap() } }),
    )
    .await;
    assert_eq!(logged.status, 201, "{}", logged.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = gw.proxy(request("GET", "/greeted", &[("x-name", "Flo")], "")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(line) = text.lines().find(|line| line.contains("\"greeted\":\"Flo\"")) {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(entry["greeted"], "Flo");
            break;
        }
        assert!(Instant::now() < deadline, "file-log wrote: {text}\n{}", gw.log_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A declarative document (POST /config) is held to the same schema:
    // refused whole, nothing of it applied.
    let mut bad = echo_service(
        json!([{ "name": "declared", "paths": ["/declared"],
                 "plugins": [{ "name": "py-greeter", "config": { "deny_header": "x-no" } }] }]),
        json!([]),
    );
    bad["services"][0]["url"] = json!(upstream.url("http"));
    let refused = send_json(&gw, "POST", "/config", &bad).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("required field missing"), "{}", refused.text());
    assert_eq!(gw.proxy(request("GET", "/declared", &[], "")).await.status, 404);
    let mut good = bad.clone();
    good["services"][0]["routes"][0]["plugins"][0]["config"]["message"] = json!("declared");
    let applied = send_json(&gw, "POST", "/config", &good).await;
    assert_eq!(applied.status, 201, "{}", applied.text());
    let reply = gw.proxy(request("GET", "/declared", &[("x-name", "Bo")], "")).await;
    assert_eq!(echo_headers(&reply)["x-greeting"], "declared, Bo", "{}", reply.text());
    let schema = gw.admin("GET", "/schemas/plugins/py-greeter", &[], "").await;
    assert_eq!(schema.status, 200, "{}", schema.text());
    assert!(schema.text().contains("deny_header"), "{}", schema.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_plugin_on_kong_pdk_reads_sets_exits_and_logs() {
    let dir = TempDir::new();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(js_server(dir.path())).await;
    let _ = greeter_route(&gw, "js-greeter", &upstream).await;
    greets_denies_and_logs(&gw, "js-greeter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_plugin_on_go_pdk_reads_sets_exits_and_logs() {
    let dir = TempDir::new();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(go_server(dir.path())).await;
    let _ = greeter_route(&gw, "go-greeter", &upstream).await;
    greets_denies_and_logs(&gw, "go-greeter").await;

    // ngx.ctx (kong.nginx.set_ctx in access) read in the log phase.
    assert!(
        log_shows(&gw, "[go-greeter] go-greeter remembered Ada").await,
        "{}",
        gw.log_tail()
    );

    // go-pdk's SetQuery (a Struct of lists): the upstream's query, keys sorted.
    let reply = gw
        .proxy(request(
            "GET",
            "/greeted?old=1",
            &[("x-name", "Ann Lee"), ("x-query", "yes")],
            "",
        ))
        .await;
    assert_eq!(
        reply.json()["path"],
        "/?asked=yes&asked=twice&who=Ann%20Lee",
        "{}",
        reply.text()
    );

    // Through decK: a file whose config breaks the server's schema is
    // refused, then the right one syncs (and diffs clean) and runs.
    let file = |message: &str| {
        format!(
            "_format_version: \"3.0\"\nservices:\n  - name: echo\n    url: {}\n    routes:\n      - name: synced\n        paths: [/synced]\n        plugins:\n          - name: go-greeter\n            config: {{ message: {message} }}\n",
            upstream.url("http")
        )
    };
    std::fs::write(dir.path().join("kong.yml"), file("[not, a, string]")).unwrap();
    let refused = deck(&gw, dir.path(), &["gateway", "sync", "kong.yml"]).await;
    assert!(!refused.success, "{}\n{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("expected a string"), "{}", refused.stderr);
    std::fs::write(dir.path().join("kong.yml"), file("synced")).unwrap();
    let synced = deck(&gw, dir.path(), &["gateway", "sync", "kong.yml"])
        .await
        .expect_success("deck gateway sync");
    deck(&gw, dir.path(), &["gateway", "diff", "kong.yml"])
        .await
        .expect_success("deck gateway diff")
        .expect_no_changes(&synced.stdout);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = gw.proxy(request("GET", "/synced", &[("x-name", "Di")], "")).await;
        if reply.status == 200 {
            assert_eq!(echo_headers(&reply)["x-greeting"], "synced, Di", "{}", reply.text());
            break;
        }
        assert!(Instant::now() < deadline, "{}", reply.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_server_is_started_again_and_requests_meanwhile_get_500() {
    let dir = TempDir::new();
    killed_and_started_again(python_server(dir.path()), "py-greeter", "py-greeter.py", "py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_go_pdk_server_is_started_again_and_its_instances_with_it() {
    // go-pdk answers a lost instance by closing the connection: the
    // instance is started again on the new process.
    let dir = TempDir::new();
    killed_and_started_again(go_server(dir.path()), "go-greeter", "go-greeter", "go").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_past_pluginserver_timeout_fails_its_request_alone() {
    let dir = TempDir::new();
    let options = python_server(dir.path()).setting("pluginserver_timeout", "500ms");
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;
    let _ = greeter_route(&gw, "py-greeter", &upstream).await;
    until_serving(&gw, "/greeted").await;

    let gw = std::sync::Arc::new(gw);
    let slow = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = gw
                .proxy(request("GET", "/greeted", &[("x-name", "Zed"), ("x-nap", "3")], ""))
                .await;
            (reply.status.as_u16(), started.elapsed())
        })
    };
    // Meanwhile other requests through the same plugin are answered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let quick = gw.proxy(request("GET", "/greeted", &[("x-name", "Amy")], "")).await;
    assert_eq!(echo_headers(&quick)["x-greeting"], "hello, Amy", "{}", quick.text());
    let (status, took) = slow.await.unwrap();
    assert_eq!(status, 500);
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    assert!(
        log_shows(&gw, "no answer within pluginserver_timeout (500 ms)").await,
        "{}",
        gw.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_an_outside_server_lost_is_started_again_on_the_next_request() {
    // No start_cmd: the server is managed outside Strait (Kong's "assuming
    // external process management"), so Strait cannot see it restart; the
    // new process answers `no plugin instance` and the instance is started
    // again within that request.
    let dir = TempDir::new();
    let python = tool("python", "STRAIT_KONG_PDK_PYTHON");
    let script = dir.path().join("py-greeter.py");
    std::fs::write(&script, PY_GREETER).unwrap();
    let spawn = || {
        std::process::Command::new(&python)
            .arg(&script)
            .args([
                "--kong-prefix",
                &dir.path().display().to_string(),
                "--socket-name",
                "py-greeter.sock",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut outside = spawn();
    let options = GatewayOptions::new()
        .setting("plugins", "bundled,py-greeter")
        .setting("pluginserver_names", "py")
        .setting(
            "pluginserver_py_socket",
            &dir.path().join("py-greeter.sock").display().to_string(),
        )
        .setting(
            "pluginserver_py_query_cmd",
            &format!("{} {} --dump", python.display(), script.display()),
        );
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;
    assert!(
        log_shows(&gw, "assuming external process management").await,
        "{}",
        gw.log_tail()
    );
    let _ = greeter_route(&gw, "py-greeter", &upstream).await;
    until_serving(&gw, "/greeted").await;

    outside.kill().unwrap();
    outside.wait().unwrap();
    let _ = std::fs::remove_file(dir.path().join("py-greeter.sock"));
    let mut outside = spawn();
    // Every request once the new process listens is answered by the plugin.
    until_serving(&gw, "/greeted").await;
    for _ in 0..5 {
        let reply = gw.proxy(request("GET", "/greeted", &[("x-name", "Gus")], "")).await;
        assert_eq!(echo_headers(&reply)["x-greeting"], "hello, Gus", "{}", reply.text());
    }
    outside.kill().unwrap();
    let _ = outside.wait();
}

/// Kills the server of plugin `name` (its process found by `needle`) under
/// back-to-back requests; every request gets the plugin's answer or, while
/// the server is down, Kong's 500 at once; then it serves again.
async fn killed_and_started_again(options: GatewayOptions, name: &str, needle: &str, server: &str) {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(options).await;
    let _ = greeter_route(&gw, name, &upstream).await;
    until_serving(&gw, "/greeted").await;

    let first = server_pid(&gw, needle);
    // SIGKILL, as a crash: nothing of the server is left to answer.
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let (mut ok, mut failed) = (0, 0);
    while started.elapsed() < Duration::from_secs(20) {
        let reply = gw.proxy(request("GET", "/greeted", &[("x-name", "Ada")], "")).await;
        match reply.status.as_u16() {
            200 => {
                assert_eq!(echo_headers(&reply)["x-greeting"], "hello, Ada");
                ok += 1;
                if ok >= 20 {
                    break;
                }
            }
            500 => {
                assert_eq!(reply.json(), json!({ "message": "An unexpected error occurred" }));
                assert_eq!(ok, 0, "a failure after the server came back");
                failed += 1;
            }
            other => panic!("{other}: {}", reply.text()),
        }
    }
    assert!(ok >= 20, "the server was not started again: {}", gw.log_tail());
    assert!(failed > 0, "no request saw the server gone");
    assert!(
        log_shows(&gw, &format!("external pluginserver '{server}' terminated")).await,
        "{}",
        gw.log_tail()
    );
    assert_ne!(server_pid(&gw, needle), first, "the same process");
    println!("{name}: requests that got 500 while the server was restarted: {failed}");
}

/// What the Python server says of itself (`plugin.GetStatus`), asked by a
/// MessagePack-RPC client in Python (the msgpack module kong-pdk brings).
fn server_status(dir: &Path, socket: &Path) -> String {
    const CLIENT: &str = r#"import socket, sys, msgpack
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(msgpack.packb([0, 1, "plugin.GetStatus", [None]]))
u = msgpack.Unpacker(raw=False)
while True:
    data = s.recv(65536)
    if not data:
        raise SystemExit("closed")
    u.feed(data)
    for message in u:
        print(message[3]["Plugins"]["py-greeter"]["Instances"])
        raise SystemExit(0)
"#;
    let script = dir.join("status.py");
    std::fs::write(&script, CLIENT).unwrap();
    let output = std::process::Command::new(tool("python", "STRAIT_KONG_PDK_PYTHON"))
        .arg(&script)
        .arg(socket)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The pid of the node's child whose command line holds `needle`.
fn server_pid(gw: &Gateway, needle: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if parent == Some(gw.pid()) && String::from_utf8_lossy(&cmdline).contains(needle) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no server process under the node");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn config_validate_holds_a_declarative_file_to_the_plugin_servers_schema() {
    // `strait config validate` queries the servers (starting none) and
    // checks a file's plugin configs against the schemas they give.
    let dir = TempDir::new();
    let python = tool("python", "STRAIT_KONG_PDK_PYTHON");
    let script = dir.path().join("py-greeter.py");
    std::fs::write(&script, PY_GREETER).unwrap();
    let file = |config: &str| {
        let path = dir.path().join("kong.yml");
        std::fs::write(
            &path,
            format!(
                "_format_version: \"3.0\"\nservices:\n  - name: s\n    url: http://127.0.0.1:9\n    routes:\n      - name: r\n        paths: [/r]\n        plugins:\n          - name: py-greeter\n            config: {config}\n"
            ),
        )
        .unwrap();
        path
    };
    let validate = |path: &Path| {
        std::process::Command::new(strait_e2e::strait_bin())
            .args(["config", "validate", &path.display().to_string()])
            .env("STRAIT_PLUGINS", "bundled,py-greeter")
            .env("STRAIT_PLUGINSERVER_NAMES", "py")
            .env(
                "STRAIT_PLUGINSERVER_PY_QUERY_CMD",
                format!("{} {} --dump", python.display(), script.display()),
            )
            .output()
            .unwrap()
    };
    let refused = validate(&file("{ deny_header: x-no }"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("message") && stderr.contains("required field missing"),
        "{stderr}"
    );
    let accepted = validate(&file("{ message: hi }"));
    assert!(
        accepted.status.success(),
        "{}{}",
        String::from_utf8_lossy(&accepted.stdout),
        String::from_utf8_lossy(&accepted.stderr)
    );
    // No server was started by the validation.
    assert!(!dir.path().join("py-greeter.sock").exists());
}
