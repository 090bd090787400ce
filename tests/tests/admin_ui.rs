//! The admin web UI in a real headless Chromium (tests/ui/admin-ui.cjs, Playwright driving
//! Debian's chromium): CRUD through generated forms, the dashboard counting proxied requests,
//! errors on their fields, and a cross-origin write refused by the Admin API. Plus the UI's
//! listener itself: its files, `kconfig.js`, and the headers that keep other sites out.

use std::time::Duration;

use strait_e2e::{free_port, get, send_h1, Gateway, GatewayOptions, Upstream, UpstreamKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_ui_drives_the_admin_api_in_a_real_browser() {
    let playwright = std::env::var("STRAIT_PLAYWRIGHT_DIR")
        .expect("STRAIT_PLAYWRIGHT_DIR: where playwright-core is installed (scripts/test.sh sets it)");
    let chromium = std::env::var("STRAIT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string());
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gui_port = free_port();
    let gw = Gateway::start(GatewayOptions::new().setting("admin_gui_listen", &format!("127.0.0.1:{gui_port}"))).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/admin-ui.cjs");
    let screenshots = std::env::var("STRAIT_UI_SCREENSHOTS").unwrap_or_default();
    let run = tokio::process::Command::new("node")
        .arg(&script)
        .env("STRAIT_PLAYWRIGHT_DIR", playwright)
        .env("STRAIT_CHROMIUM", chromium)
        .env("GUI_URL", format!("http://127.0.0.1:{gui_port}"))
        .env("ADMIN_URL", gw.admin_url())
        .env("PROXY_URL", gw.proxy_url())
        .env("UPSTREAM_URL", up.url("http"))
        .env("EVIL_URL", up.url("http"))
        .env("SCREENSHOTS", screenshots)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the browser test finished within 180 s")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser test failed:\n{stdout}\n{stderr}\n{}",
        gw.log_tail()
    );
    assert!(stdout.contains("all checks passed"), "{stdout}\n{stderr}");
    assert!(
        gw.log().contains("cross-origin request refused"),
        "the refusal is logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_listener_serves_the_app_and_the_admin_api_refuses_other_origins() {
    let gui_port = free_port();
    let gw = Gateway::start(
        GatewayOptions::new()
            .setting("admin_gui_listen", &format!("127.0.0.1:{gui_port}"))
            .setting("admin_gui_path", "/manager"),
    )
    .await;
    let gui: std::net::SocketAddr = format!("127.0.0.1:{gui_port}").parse().unwrap();
    let page = send_h1(gui, get("/manager/services")).await.expect("page");
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("<script type=\"module\" src=\"app.js\">"),
        "{}",
        page.text()
    );
    assert_eq!(page.header("x-frame-options").as_deref(), Some("DENY"));
    assert!(page
        .header("content-security-policy")
        .unwrap_or_default()
        .contains("frame-ancestors 'none'"));
    let kconfig = send_h1(gui, get("/manager/kconfig.js")).await.expect("kconfig");
    assert!(
        kconfig
            .text()
            .contains(&format!("\"ADMIN_API_PORT\":{}", gw.admin_addr().port())),
        "{}",
        kconfig.text()
    );
    let outside = send_h1(gui, get("/elsewhere")).await.expect("outside");
    assert_eq!(outside.status, 404);

    let ui_origin = format!("http://127.0.0.1:{gui_port}");
    // From the UI's origin: served, with CORS headers naming it.
    let ok = gw.admin("GET", "/services", &[("origin", &ui_origin)], "").await;
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.header("access-control-allow-origin").as_deref(),
        Some(ui_origin.as_str())
    );
    let preflight = gw
        .admin(
            "OPTIONS",
            "/services",
            &[("origin", &ui_origin), ("access-control-request-method", "DELETE")],
            "",
        )
        .await;
    assert_eq!(preflight.status, 204);
    assert!(preflight
        .header("access-control-allow-methods")
        .unwrap_or_default()
        .contains("DELETE"));
    // From anywhere else: refused before any handler, reads included.
    for origin in [
        "http://evil.example",
        "null",
        &format!("http://rebound.example:{gui_port}"),
    ] {
        let write = gw
            .admin(
                "POST",
                "/services",
                &[
                    ("origin", origin),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
                "name=evil&url=http://127.0.0.1:9",
            )
            .await;
        assert_eq!(write.status, 403, "{origin}: {}", write.text());
        assert!(write.json()["message"]
            .as_str()
            .unwrap()
            .contains("cross-origin request refused"));
        let read = gw.admin("GET", "/consumers", &[("origin", origin)], "").await;
        assert_eq!(read.status, 403, "{origin}");
    }
    let blind = gw
        .admin(
            "POST",
            "/services",
            &[("sec-fetch-site", "cross-site"), ("content-type", "application/json")],
            "{}",
        )
        .await;
    assert_eq!(blind.status, 403);
    assert_eq!(
        gw.admin("GET", "/services/evil", &[], "").await.status,
        404,
        "nothing was written"
    );
    // Clients that are not browsers are served as before.
    assert_eq!(gw.admin("GET", "/services", &[], "").await.status, 200);
}
