//! `examples/every-plugin.yml`, a Kong 3.x declarative file enabling every
//! bundled plugin with the credentials they read, loads unchanged three
//! ways: `strait config validate`, `POST /config` (then the plugins run),
//! and `deck gateway sync`, after which `deck gateway diff` finds nothing to
//! change. decK fills plugin defaults from `/schemas/plugins/{name}`, so a
//! schema default that differs from what the node stores shows up here.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use strait_e2e::deck::deck;
use strait_e2e::{get, request, run_strait, Gateway, GatewayOptions, Reply, TempDir};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/every-plugin.yml")
}

/// Plugin names in use, sorted, with how many instances each has.
async fn plugin_census(gw: &Gateway) -> Vec<(String, usize)> {
    let plugins = gw.admin_get("/plugins?size=1000").await.json();
    let mut census: Vec<(String, usize)> = Vec::new();
    for plugin in plugins["data"].as_array().expect("plugins") {
        let name = plugin["name"].as_str().expect("name").to_string();
        match census.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => census.push((name, 1)),
        }
    }
    census.sort();
    census
}

/// Waits until the proxy serves the file's configuration (5 s).
async fn until_live(gw: &Gateway) -> Reply {
    let started = Instant::now();
    loop {
        let reply = gw
            .proxy(request("GET", "/maintenance", &[("x-maintenance", "1")], ""))
            .await;
        if reply.status == 503 || started.elapsed() > Duration::from_secs(5) {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_every_plugin_file_validates_loads_runs_and_round_trips_through_deck() {
    let text = std::fs::read_to_string(example()).expect("examples/every-plugin.yml");
    let dir = TempDir::new();

    // 1. The CLI.
    let checked = run_strait(&["config", "validate", example().to_str().unwrap()], dir.path(), &[]).await;
    assert_eq!(checked.code, Some(0), "{}{}", checked.stdout, checked.stderr);

    // 2. POST /config, then the plugins do their work.
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (status, body) = gw.post_config(&text).await;
    assert_eq!(status, 201, "{body}");
    let maintenance = until_live(&gw).await;
    assert_eq!(maintenance.status, 503);
    assert_eq!(maintenance.text(), "down for maintenance");
    assert!(
        maintenance.header("x-request-id").is_some(),
        "service-wide correlation-id"
    );
    assert_eq!(maintenance.header("x-served-by").as_deref(), Some("strait"));
    let census = plugin_census(&gw).await;
    let names: Vec<&str> = census.iter().map(|(n, _)| n.as_str()).collect();
    // The bundled plugins and the two strait-lua adds (pre-function, post-function).
    let mut every: Vec<&str> = strait_plugins::AVAILABLE.to_vec();
    every.extend(["pre-function", "post-function"]);
    every.sort_unstable();
    assert_eq!(names, every, "the file enables every plugin this build runs");
    let lua = gw.proxy(get("/lua")).await;
    assert_eq!(
        (lua.status.as_u16(), lua.message(), lua.header("x-lua")),
        (200, Some("lua: welcome".into()), Some("post-function 200".into()))
    );
    let denied = gw.proxy(get("/lua?deny=1")).await;
    assert_eq!(
        (denied.status.as_u16(), denied.message(), denied.header("x-lua")),
        (403, Some("lua: denied".into()), Some("post-function 403".into()))
    );

    let alice = gw
        .proxy(request("GET", "/key-auth", &[("apikey", "alice-key")], ""))
        .await;
    assert_eq!(
        (alice.status.as_u16(), alice.json()["message"].clone()),
        (200, "key-auth: welcome".into())
    );
    let bob = gw
        .proxy(request("GET", "/key-auth", &[("apikey", "bob-key")], ""))
        .await;
    assert_eq!(bob.status, 403, "acl allows only gold: {}", bob.text());
    assert_eq!(gw.proxy(get("/key-auth")).await.status, 401);
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:alice-password");
    let basic = format!("Basic {basic}");
    assert_eq!(
        gw.proxy(request("GET", "/basic-auth", &[("authorization", &basic)], ""))
            .await
            .status,
        200
    );
    assert_eq!(gw.proxy(get("/jwt")).await.status, 401);
    assert_eq!(gw.proxy(get("/hmac-auth")).await.status, 401);
    let token = gw
        .proxy(request(
            "POST",
            "/oauth2/oauth2/token",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("x-forwarded-proto", "https"),
            ],
            "grant_type=client_credentials&client_id=alice-client&client_secret=alice-client-secret",
        ))
        .await;
    assert_eq!(token.status, 200, "{}", token.text());
    let bearer = format!(
        "Bearer {}",
        token.json()["access_token"].as_str().expect("access_token")
    );
    assert_eq!(gw.proxy(get("/oauth2")).await.status, 401);
    // Authenticated, the request goes on to the file's unreachable service.
    assert_eq!(
        gw.proxy(request("GET", "/oauth2", &[("authorization", &bearer)], ""))
            .await
            .status,
        502
    );
    assert_eq!(gw.proxy(get("/guarded")).await.status, 200);
    let bot = gw
        .proxy(request("GET", "/guarded", &[("user-agent", "BadBot/1.0")], ""))
        .await;
    assert_eq!(bot.status, 403);
    let big = gw.proxy(request("POST", "/guarded", &[], vec![b'x'; 2048])).await;
    assert_eq!(big.status, 413);
    // No broker at the file's address: never a 200, Strait's 503.
    let kafka = gw
        .proxy(request("POST", "/kafka", &[("content-type", "text/plain")], "event"))
        .await;
    assert_eq!(
        (kafka.status.as_u16(), kafka.message()),
        (503, Some("could not send message to topic".into()))
    );
    let preflight = gw
        .proxy(request(
            "OPTIONS",
            "/guarded",
            &[
                ("origin", "https://a.example.org"),
                ("access-control-request-method", "GET"),
            ],
            "",
        ))
        .await;
    assert_eq!(
        preflight.header("access-control-allow-origin").as_deref(),
        Some("https://a.example.org")
    );
    let echoed = gw.proxy(request("GET", "/transformed", &[("x-org", "acme")], "")).await;
    assert_eq!(
        echoed.json()["request"]["headers"]["x-tenant"],
        "acme",
        "{}",
        echoed.text()
    );
    let limited: Vec<u16> = [
        gw.proxy(get("/limited")).await,
        gw.proxy(get("/limited")).await,
        gw.proxy(get("/limited")).await,
    ]
    .iter()
    .map(|r| r.status.as_u16())
    .collect();
    assert_eq!(limited, [200, 200, 429], "rate-limiting: two an hour");
    let first = gw.proxy(get("/cached")).await;
    let second = gw.proxy(get("/cached")).await;
    let statuses = (first.header("x-cache-status"), second.header("x-cache-status"));
    assert_eq!(statuses, (Some("Miss".into()), Some("Hit".into())));

    // 3. decK: sync the same file into an empty node, then diff it.
    let fresh = Gateway::start(GatewayOptions::new()).await;
    std::fs::write(dir.path().join("kong.yml"), &text).expect("write");
    let synced = deck(&fresh, dir.path(), &["gateway", "sync", "kong.yml"])
        .await
        .expect_success("deck gateway sync");
    let diff = deck(&fresh, dir.path(), &["gateway", "diff", "kong.yml"])
        .await
        .expect_success("deck gateway diff");
    diff.expect_no_changes(&synced.stdout);
    let census_after_sync = plugin_census(&fresh).await;
    assert_eq!(census_after_sync, census, "decK wrote the same plugins");
    let config_plugins: Value = fresh.admin_get("/plugins?size=1000").await.json();
    assert!(config_plugins["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "proxy-cache" && p["config"]["memory"]["dictionary_name"] == "kong_db_cache"));
}
