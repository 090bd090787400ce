//! Operating a node: `strait restart` hands the listening sockets to a new process under load
//! without a failed request (keep-alive and new connections, a long request finishing on the
//! old process, a gRPC bidi stream and unary calls), the configuration carrying over; `strait reload` serves a renewed certificate
//! and refuses, changing nothing, a setting that needs a restart; Kong's other commands
//! (`health`, `quit`, `check`, `prepare`, `config init`/`parse`, `version --all`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::grpc::{unprocessed, GrpcClient, GrpcUpstream, Msg, SERVICE};
use strait_e2e::{
    get, run_strait, send_h1, Conn, Gateway, GatewayOptions, LeafCert, TempDir, TlsOptions, Trust, Upstream,
    UpstreamKind,
};
use tokio_stream::wrappers::ReceiverStream;

async fn gateway_to(up: &Upstream, options: GatewayOptions) -> Gateway {
    let gw = Gateway::start(options).await;
    let mut svc = service("s", &up.url("http"), vec![route("s", &["/s"])]);
    svc["read_timeout"] = json!(60_000);
    gw.apply(&config(vec![svc])).await;
    gw
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z'))
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// Requests in a loop over one keep-alive connection, opening a new one when the gateway
/// answers `Connection: close` (as every HTTP/1.1 client does); every error is a failure.
async fn keep_alive_client(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
) {
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            match Conn::h1(addr).await {
                Ok(new) => conn = Some(new),
                Err(error) => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    errors.lock().unwrap().push(format!("connect: {error:#}"));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
        }
        let open = conn.as_mut().expect("a connection");
        match open.send(get("/s/echo")).await {
            Ok(reply) if reply.status == 200 => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
                if reply.header("connection").as_deref() == Some("close") {
                    conn = None;
                }
            }
            Ok(reply) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                errors
                    .lock()
                    .unwrap()
                    .push(format!("status {}: {}", reply.status, reply.text()));
            }
            Err(error) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                errors.lock().unwrap().push(format!("keep-alive request: {error:#}"));
                conn = None;
            }
        }
    }
}

/// A new connection for every request.
async fn new_connection_client(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        match send_h1(addr, get("/s/echo")).await {
            Ok(reply) if reply.status == 200 => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(reply) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                errors.lock().unwrap().push(format!("status {}", reply.status));
            }
            Err(error) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                errors.lock().unwrap().push(format!("new connection: {error:#}"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_hands_the_sockets_over_under_load_without_a_failed_request() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&up, GatewayOptions::new()).await;
    let proxy = gw.proxy_addr();
    let prefix = gw.prefix().to_str().expect("a UTF-8 prefix").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(tokio::spawn(keep_alive_client(
            proxy,
            stop.clone(),
            tally.clone(),
            errors.clone(),
        )));
    }
    clients.push(tokio::spawn(new_connection_client(
        proxy,
        stop.clone(),
        tally.clone(),
        errors.clone(),
    )));
    // A long request in flight across the hand-over finishes on the process that took it.
    let long = tokio::spawn(async move { send_h1(proxy, get("/s/slow?ms=2500")).await });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut pids = vec![gw.serving_pid().expect("a PID file")];
    for round in 0..3 {
        let out = run_strait(&["restart", "-p", &prefix], gw.prefix(), &[]).await;
        assert_eq!(out.code, Some(0), "restart {round}: {}", out.all());
        let new = gw.serving_pid().expect("a PID file");
        assert_ne!(
            Some(&new),
            pids.last(),
            "restart {round}: the PID file names the new process"
        );
        assert!(out.stdout.contains(&new.to_string()), "{}", out.all());
        pids.push(new);
        if round == 0 {
            // A write to the new process's Admin API is served by the ones after it.
            let reply = gw
                .admin(
                    "POST",
                    "/services/s/routes",
                    &[("content-type", "application/json")],
                    json!({"name": "added", "paths": ["/added"]}).to_string(),
                )
                .await;
            assert_eq!(reply.status, 201, "{}", reply.text());
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let long = long.await.expect("task").expect("the long request is answered");
    assert_eq!(long.status, 200, "{}", long.text());
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.expect("client task");
    }
    let (ok, failed) = (tally.ok.load(Ordering::Relaxed), tally.failed.load(Ordering::Relaxed));
    assert_eq!(
        failed,
        0,
        "{failed} failed of {}: {:?}",
        ok + failed,
        errors.lock().unwrap()
    );
    assert!(ok > 100, "only {ok} requests were made");

    // The old processes drained and exited; the last one serves, with the route added.
    for pid in &pids[..pids.len() - 1] {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while alive(*pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!alive(*pid), "process {pid} did not exit after handing over");
    }
    let added = send_h1(proxy, get("/added/echo")).await.expect("request");
    assert_eq!(added.status, 200, "{}", added.text());

    let health = run_strait(&["health", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(health.code, Some(0), "{}", health.all());
    assert!(
        health.stdout.contains("running") && health.stdout.contains(&proxy.to_string()),
        "{}",
        health.all()
    );

    let quit = run_strait(&["quit", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(quit.code, Some(0), "{}", quit.all());
    assert!(quit.stdout.contains("Strait stopped (gracefully)"), "{}", quit.all());
    assert!(!alive(*pids.last().unwrap()));
    assert!(gw.serving_pid().is_none(), "the PID file is removed at exit");
    let health = run_strait(&["health", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(health.code, Some(1), "{}", health.all());
    assert!(health.stderr.contains("not running"), "{}", health.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_serves_a_renewed_certificate_and_refuses_a_setting_that_needs_a_restart() {
    let dir = TempDir::new();
    let (cert, key) = (dir.path().join("proxy.crt"), dir.path().join("proxy.key"));
    let first = LeafCert::self_signed(&["localhost"]);
    std::fs::write(&cert, &first.cert_pem).expect("write");
    std::fs::write(&key, &first.key_pem).expect("write");
    let mut gw = Gateway::start(
        GatewayOptions::new()
            .setting("ssl_cert", cert.to_str().unwrap())
            .setting("ssl_cert_key", key.to_str().unwrap()),
    )
    .await;
    let prefix = gw.prefix().to_str().unwrap().to_string();
    let served = |addr| async move {
        let options = TlsOptions::new(Some("localhost"), &[b"http/1.1"], Trust::Anything);
        let conn = Conn::tls(addr, &options).await.expect("TLS connection");
        conn.tls.expect("TLS info").peer_certificates[0].clone()
    };
    assert_eq!(served(gw.proxy_tls_addr()).await, first.cert_der);

    // Renewed in place: the next connection gets the new certificate, without a restart.
    let second = LeafCert::self_signed(&["localhost"]);
    std::fs::write(&cert, &second.cert_pem).expect("write");
    std::fs::write(&key, &second.key_pem).expect("write");
    let pid = gw.serving_pid();
    let out = run_strait(&["reload", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("Strait reloaded"), "{}", out.all());
    assert_eq!(served(gw.proxy_tls_addr()).await, second.cert_der);
    assert_eq!(gw.serving_pid(), pid, "the same process serves");

    // A changed worker count needs a restart: refused, and nothing else changes with it.
    let conf = gw.prefix().join("strait.conf");
    let original = std::fs::read_to_string(&conf).expect("conf");
    std::fs::write(&conf, format!("{original}worker_threads = 1\nlog_level = debug\n")).expect("write conf");
    let out = run_strait(&["reload", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("worker_threads: needs a restart"), "{}", out.all());
    assert!(
        !out.stderr.contains("log_level"),
        "only what needs a restart is named: {}",
        out.all()
    );
    // A value that does not parse: refused with the setting's error.
    std::fs::write(&conf, format!("{original}log_level = loud\n")).expect("write conf");
    let out = run_strait(&["reload", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("log_level: expected one of"), "{}", out.all());
    // The level was not applied by either refusal: it is applied now.
    std::fs::write(&conf, format!("{original}log_level = debug\n")).expect("write conf");
    let out = run_strait(&["reload", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("log_level: applied"), "{}", out.all());
    assert_eq!(served(gw.proxy_tls_addr()).await, second.cert_der);

    // A bare SIGHUP (systemd's `kill -HUP`) reloads too.
    let third = LeafCert::self_signed(&["localhost"]);
    std::fs::write(&cert, &third.cert_pem).expect("write");
    std::fs::write(&key, &third.key_pem).expect("write");
    gw.hangup();
    assert!(
        gw.log_shows("reloaded", Duration::from_secs(5)).await,
        "{}",
        gw.log_tail()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while served(gw.proxy_tls_addr()).await != third.cert_der && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served(gw.proxy_tls_addr()).await, third.cert_der);

    // `strait stop` stops now.
    let out = run_strait(&["stop", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(gw.wait_exit(Duration::from_secs(5)).await.is_some());
    let out = run_strait(&["stop", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("not running"), "{}", out.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_a_running_prefix_is_refused() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let conf = gw.prefix().join("strait.conf");
    let out = run_strait(&["start", "-c", conf.to_str().unwrap()], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.all().contains("already running"), "{}", out.all());
    let ready = send_h1(gw.status_addr(), get("/status/ready")).await.expect("status");
    assert_eq!(ready.status, 200, "the running node is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kong_commands_check_prepare_config_and_version() {
    let dir = TempDir::new();
    let conf = dir.path().join("strait.conf");
    // Every error at once, each on the setting it is about.
    std::fs::write(
        &conf,
        "log_level = loud\nproxy_listen = 127.0.0.1:notaport\nnonsense_key = 1\nworker_connections = many\n",
    )
    .expect("write");
    let out = run_strait(&["check", conf.to_str().unwrap()], dir.path(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    for expected in [
        "log_level:",
        "proxy_listen:",
        "unknown setting \"nonsense_key\"",
        "worker_connections:",
    ] {
        assert!(out.stderr.contains(expected), "{expected} missing:\n{}", out.all());
    }
    assert!(
        out.stderr.contains(":3: unknown setting"),
        "the line is named: {}",
        out.all()
    );
    std::fs::write(
        &conf,
        format!("prefix = {}/p\nlog_level = warn\n", dir.path().display()),
    )
    .expect("write");
    let out = run_strait(&["check", conf.to_str().unwrap()], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("is valid"), "{}", out.all());

    let out = run_strait(&["prepare", "-c", conf.to_str().unwrap()], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    for laid_out in ["logs", "pids", "sockets", "ssl/strait-default.crt", ".strait_env"] {
        assert!(dir.path().join("p").join(laid_out).exists(), "{laid_out} missing");
    }
    let env = std::fs::read_to_string(dir.path().join("p/.strait_env")).expect("env");
    assert!(env.contains("log_level = warn"), "{env}");

    let out = run_strait(&["config", "init"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    let out = run_strait(&["config", "parse", "kong.yml"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("parse successful"), "{}", out.all());
    let out = run_strait(&["config", "init"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(1), "never over an existing file: {}", out.all());
    assert!(out.stderr.contains("already exists"), "{}", out.all());
    std::fs::write(
        dir.path().join("bad.yml"),
        "_format_version: \"3.0\"\nservices:\n- name: x\n  url: nope\n",
    )
    .expect("write");
    let out = run_strait(&["config", "parse", "bad.yml"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("services[0]") || out.stderr.contains("url"),
        "{}",
        out.all()
    );

    let out = run_strait(&["version", "--all"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    for part in ["Strait: ", "Kong compatibility: 3.9", "Lua: LuaJIT", "wasmtime"] {
        assert!(out.stdout.contains(part), "{part} missing: {}", out.all());
    }
}

/// gRPC across hand-overs: a bidi stream begun before the first `strait restart` is acked to
/// its end by the process that took it (within `graceful_shutdown_timeout`), and unary callers
/// on one channel lose no call: GOAWAY makes the client open a connection to the new process,
/// and a call the old one never processed is retried, as gRPC clients do (every call is
/// answered by the upstream exactly once, so retrying a processed call would fail the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_streams_and_calls_cross_restarts() {
    let upstream = GrpcUpstream::start().await;
    let gw = Gateway::start(GatewayOptions::new().setting("graceful_shutdown_timeout", "20s")).await;
    let mut cfg = config(vec![]);
    cfg["services"] = json!([{ "name": "stream", "url": upstream.url(), "read_timeout": 60_000,
        "write_timeout": 60_000,
        "routes": [{ "name": "stream", "paths": [format!("/{SERVICE}/")],
            "protocols": ["grpc", "grpcs"], "strip_path": false }] }]);
    gw.apply(&cfg).await;
    let prefix = gw.prefix().to_str().unwrap().to_string();
    let client = GrpcClient::h2c(gw.proxy_addr()).await;

    // A bidi stream over 3 s: 150 messages, one every 20 ms.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut acks = client.clone().ack(ReceiverStream::new(rx)).await.expect("bidi call");
    let pacer = tokio::spawn(async move {
        for seq in 0..150u64 {
            tx.send(Msg {
                seq,
                payload: vec![b's'; 16].into(),
            })
            .await
            .expect("queue");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for caller in 0..2u64 {
        let mut client = client.clone();
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            let (mut ok, mut failed, mut seq) = (0u64, Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                let sent = Msg {
                    seq: caller * 1_000_000 + seq,
                    payload: vec![b'u'; 32].into(),
                };
                match client.unary(sent).await {
                    Ok(echo) if echo.seq == caller * 1_000_000 + seq => ok += 1,
                    Err(status) if unprocessed(&status) => continue,
                    other => failed.push(format!("{other:?}")),
                }
                seq += 1;
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for round in 0..2 {
        let out = run_strait(&["restart", "-p", &prefix], gw.prefix(), &[]).await;
        assert_eq!(out.code, Some(0), "restart {round}: {}", out.all());
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    let mut acked = 0;
    while let Some(ack) = acks
        .message()
        .await
        .expect("the stream across the hand-overs is not cut")
    {
        assert_eq!(ack.seq, acked);
        acked += 1;
    }
    assert_eq!(acked, 150, "every message of the stream is acked");
    pacer.await.expect("pacer");
    stop.store(true, Ordering::Relaxed);
    let mut calls = 0;
    for caller in callers {
        let (ok, failed) = caller.await.expect("caller");
        assert!(failed.is_empty(), "failed calls: {failed:?}");
        calls += ok;
    }
    assert!(calls > 20, "only {calls} unary calls");
    assert_eq!(upstream.unary_answered(), calls, "each call answered once");
}

/// A new process that cannot start (its settings no longer parse) changes nothing: the running
/// node keeps serving, and `strait restart` says why at once, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_whose_new_process_fails_leaves_the_node_serving() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&up, GatewayOptions::new()).await;
    let prefix = gw.prefix().to_str().unwrap().to_string();
    let before = gw.serving_pid();
    let conf = gw.prefix().join("strait.conf");
    let original = std::fs::read_to_string(&conf).expect("conf");
    std::fs::write(&conf, format!("{original}worker_connections = many\n")).expect("write conf");
    let started = std::time::Instant::now();
    let out = run_strait(&["restart", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stderr.contains("before taking over"), "{}", out.all());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "said at once, not at the timeout"
    );
    assert_eq!(gw.serving_pid(), before, "the PID file still names the running node");
    let reply = send_h1(gw.proxy_addr(), get("/s/echo")).await.expect("request");
    assert_eq!(reply.status, 200, "the node still serves");
    std::fs::write(&conf, original).expect("write conf");
    let out = run_strait(&["restart", "-p", &prefix], gw.prefix(), &[]).await;
    assert_eq!(
        out.code,
        Some(0),
        "with its settings fixed it hands over: {}",
        out.all()
    );
}
