//! The command line: `strait version`, `strait config validate` (exit codes and `path: message`
//! lines), shipped examples, `strait start` with no arguments, env overriding `strait.conf`.

use std::path::Path;
use std::time::Duration;

use strait_e2e::bad_inputs::bad_inputs;
use strait_e2e::{free_port, get, local, run_strait, send_h1, Gateway, GatewayOptions, StraitProcess, TempDir};

const VALID: &str = "_format_version: \"3.0\"\nservices:\n  - name: s\n    url: http://127.0.0.1:9\n    routes:\n      - name: r\n        paths: [/r]\n";

const BAD_PATH: &str = "_format_version: \"3.0\"\nservices:\n  - name: ok\n    url: http://127.0.0.1:9\n  - name: bad\n    url: http://127.0.0.1:9\n    routes:\n      - name: r\n        paths: [\"no-slash\"]\n";

async fn validate(dir: &Path, name: &str, bytes: &[u8]) -> strait_e2e::CliOutput {
    let file = dir.join(name);
    std::fs::write(&file, bytes).expect("write config");
    run_strait(&["config", "validate", file.to_str().unwrap()], dir, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_prints_strait_version() {
    let dir = TempDir::new();
    let out = run_strait(&["version"], dir.path(), &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    let line = out.stdout.trim();
    let version = line
        .strip_prefix("Strait ")
        .unwrap_or_else(|| panic!("expected `Strait <version>`: {line:?}"));
    let parts: Vec<&str> = version.split(['.', '-']).collect();
    assert!(
        parts.len() >= 3 && parts[..3].iter().all(|p| p.parse::<u32>().is_ok()),
        "{version:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_accepts_a_valid_config() {
    let dir = TempDir::new();
    let out = validate(dir.path(), "kong.yml", VALID.as_bytes()).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
    let json =
        serde_json::json!({ "_format_version": "3.0", "services": [{ "name": "s", "url": "http://127.0.0.1:9" }] });
    let out = validate(dir.path(), "kong.json", json.to_string().as_bytes()).await;
    assert_eq!(out.code, Some(0), "{}", out.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_prints_path_and_message() {
    let dir = TempDir::new();
    let out = validate(dir.path(), "kong.yml", BAD_PATH.as_bytes()).await;
    assert!(
        matches!(out.code, Some(code) if code != 0),
        "exit {:?}: {}",
        out.code,
        out.all()
    );
    assert!(
        out.all()
            .lines()
            .any(|l| l.trim() == "services[1].routes[0].paths[0]: should start with: / (or ~ for a regex)"),
        "{}",
        out.all()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_reports_every_error() {
    let dir = TempDir::new();
    let two_errors = format!("{BAD_PATH}  - name: third\n    host: 127.0.0.1\n    port: eighty\n");
    let out = validate(dir.path(), "kong.yml", two_errors.as_bytes()).await;
    assert!(matches!(out.code, Some(code) if code != 0), "{}", out.all());
    let all = out.all();
    assert!(
        all.lines()
            .any(|l| l.trim_start().starts_with("services[1].routes[0].paths[0]: ")),
        "{all}"
    );
    assert!(
        all.lines().any(|l| l.trim_start().starts_with("services[2].port: ")),
        "{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_rejects_bad_inputs() {
    let dir = TempDir::new();
    for bad in bad_inputs() {
        let name = if bad.content_type.contains("json") {
            format!("{}.json", bad.name)
        } else {
            format!("{}.yml", bad.name)
        };
        let out = validate(dir.path(), &name, &bad.bytes).await;
        assert!(
            matches!(out.code, Some(code) if code != 0),
            "{}: exit {:?}: {}",
            bad.name,
            out.code,
            out.all()
        );
        assert!(!out.all().trim().is_empty(), "{}: no error printed", bad.name);
        if let Some(path) = bad.cli_path {
            assert!(
                out.all()
                    .lines()
                    .any(|l| l.trim_start().starts_with(path) && l.contains(": ")),
                "{}: expected a `{path}...: message` line in:\n{}",
                bad.name,
                out.all()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_missing_file_fails() {
    let dir = TempDir::new();
    let out = run_strait(&["config", "validate", "does-not-exist.yml"], dir.path(), &[]).await;
    assert!(matches!(out.code, Some(code) if code != 0), "{}", out.all());
}

/// Every shipped example config passes validation (STYLE: examples are validated by the binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_examples_validate() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let Ok(entries) = std::fs::read_dir(&examples) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_config = matches!(path.extension().and_then(|e| e.to_str()), Some("yml" | "yaml" | "json"));
        if !is_config {
            continue;
        }
        let out = run_strait(&["config", "validate", path.to_str().unwrap()], &examples, &[]).await;
        assert_eq!(out.code, Some(0), "{}: {}", path.display(), out.all());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_without_arguments_uses_strait_data() {
    let dir = TempDir::new();
    let (proxy, admin, status) = (free_port(), free_port(), free_port());
    let env = [
        ("STRAIT_PROXY_LISTEN", format!("127.0.0.1:{proxy}")),
        ("STRAIT_ADMIN_LISTEN", format!("127.0.0.1:{admin}")),
        ("STRAIT_STATUS_LISTEN", format!("127.0.0.1:{status}")),
        ("STRAIT_ADMIN_GUI_LISTEN", "off".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut process = StraitProcess::spawn(&["start"], dir.path(), &env);
    process.wait_admin(local(admin), dir.path()).await;
    let data = dir.path().join("strait-data");
    assert!(data.is_dir(), "./strait-data was not created");
    assert!(
        std::fs::read_dir(&data).unwrap().next().is_some(),
        "./strait-data is empty"
    );
    let reply = send_h1(local(proxy), get("/anything"))
        .await
        .expect("proxy on STRAIT_PROXY_LISTEN");
    assert_eq!(reply.status, 404);
    let exit = process
        .terminate(Duration::from_secs(15))
        .await
        .expect("exit after SIGTERM");
    assert_eq!(exit.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_overrides_the_conf_file() {
    let dir = TempDir::new();
    let (proxy, status, conf_admin, env_admin) = (free_port(), free_port(), free_port(), free_port());
    let conf = dir.path().join("strait.conf");
    std::fs::write(
        &conf,
        format!(
            "# comment line\nprefix = {}\nproxy_listen = 127.0.0.1:{proxy}\nadmin_listen = 127.0.0.1:{conf_admin}\nstatus_listen = 127.0.0.1:{status}\nadmin_gui_listen = off\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let env_value = format!("127.0.0.1:{env_admin}");
    let mut process = StraitProcess::spawn(
        &["start", "--conf", conf.to_str().unwrap()],
        dir.path(),
        &[("STRAIT_ADMIN_LISTEN", &env_value)],
    );
    process.wait_admin(local(env_admin), dir.path()).await;
    assert!(
        send_h1(local(conf_admin), get("/")).await.is_err(),
        "admin must not listen on the conf file's port"
    );
    assert!(dir.path().join("data").is_dir(), "prefix from the conf file is used");
    let reply = send_h1(local(proxy), get("/x"))
        .await
        .expect("proxy from the conf file");
    assert_eq!(reply.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarative_config_is_loaded_at_start() {
    let yaml = "_format_version: \"3.0\"\nservices:\n  - name: boot\n    url: http://127.0.0.1:9\n    routes:\n      - name: boot\n        paths: [/boot]\n        plugins:\n          - name: request-termination\n            config: {status_code: 200, message: booted}\n";
    let gw = Gateway::start(GatewayOptions::new().declarative(yaml)).await;
    let reply = gw.proxy(get("/boot")).await;
    assert_eq!(
        (reply.status.as_u16(), reply.message()),
        (200, Some("booted".to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_flag_sets_the_store_directory() {
    let dir = TempDir::new();
    let (proxy, admin, status) = (free_port(), free_port(), free_port());
    let env = [
        ("STRAIT_PROXY_LISTEN", format!("127.0.0.1:{proxy}")),
        ("STRAIT_ADMIN_LISTEN", format!("127.0.0.1:{admin}")),
        ("STRAIT_STATUS_LISTEN", format!("127.0.0.1:{status}")),
        ("STRAIT_ADMIN_GUI_LISTEN", "off".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let prefix = dir.path().join("custom-prefix");
    let mut process = StraitProcess::spawn(&["start", "--prefix", prefix.to_str().unwrap()], dir.path(), &env);
    process.wait_admin(local(admin), dir.path()).await;
    assert!(prefix.is_dir(), "--prefix directory was not created");
    assert!(
        !dir.path().join("strait-data").exists(),
        "--prefix must replace ./strait-data"
    );
    let exit = process
        .terminate(Duration::from_secs(15))
        .await
        .expect("exit after SIGTERM");
    assert_eq!(exit.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_command_matches_the_admin_api() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let out = run_strait(&["version"], gw.prefix(), &[]).await;
    assert_eq!(out.stdout.trim(), format!("Strait {}", gw.strait_version().await));
}
