//! Crash safety: a child process loops `replace()` and is killed with SIGKILL
//! at a random moment; after reopening, `load()` must return one complete,
//! committed configuration whose content matches its version.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use strait_core::{Config, ConfigVersion, ForeignKey, Route, Service};
use strait_store::{LmdbStore, Store};
use uuid::Uuid;

/// Set in the child: the store directory the writer loops on.
const WRITER_DIR_ENV: &str = "STRAIT_STORE_CRASH_WRITER_DIR";
const SERVICES_PER_VERSION: usize = 50;
const ROUTES_PER_SERVICE: usize = 4;
const MAP_SIZE: usize = 512 << 20;

fn service(version: ConfigVersion, index: usize) -> Service {
    Service {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: Some(format!("v{version}-{index}")),
        retries: 5,
        protocol: "http".into(),
        host: format!("host-{version}.example.com"),
        port: 80,
        path: None,
        connect_timeout: 60000,
        write_timeout: 60000,
        read_timeout: 60000,
        tags: Some(vec![format!("v{version}")]),
        client_certificate: None,
        tls_verify: None,
        tls_verify_depth: None,
        ca_certificates: None,
        enabled: true,
        tls_sans: None,
    }
}

fn route(version: ConfigVersion, service: Uuid, index: usize) -> Route {
    Route {
        name: Some(format!("v{version}-{service}-{index}")),
        protocols: vec!["http".into()],
        hosts: Some(vec![format!("host-{version}.example.com")]),
        paths: Some(vec![format!("/{index}")]),
        tags: Some(vec![format!("v{version}")]),
        service: Some(ForeignKey::new(service)),
        ..Route::with_kong_defaults(Uuid::new_v4(), 1)
    }
}

/// The configuration the writer commits as `version`.
fn config_for(version: ConfigVersion) -> Config {
    let services: Vec<Service> = (0..SERVICES_PER_VERSION).map(|i| service(version, i)).collect();
    let routes = services
        .iter()
        .flat_map(|s| (0..ROUTES_PER_SERVICE).map(move |i| route(version, s.id, i)))
        .collect();
    Config {
        services,
        routes,
        ..Config::default()
    }
}

/// Everything in `config` must say it belongs to `version`.
fn assert_matches_version(version: ConfigVersion, config: &Config) {
    if version == 0 {
        assert_eq!(config, &Config::default());
        return;
    }
    let tag = Some(vec![format!("v{version}")]);
    assert_eq!(config.services.len(), SERVICES_PER_VERSION, "version {version}");
    assert_eq!(config.routes.len(), SERVICES_PER_VERSION * ROUTES_PER_SERVICE);
    let prefix = format!("v{version}-");
    for service in &config.services {
        let name = service.name.as_deref().unwrap_or_default();
        assert!(name.starts_with(&prefix), "{name} in version {version}");
        assert_eq!(service.tags, tag);
    }
    assert!(config.routes.iter().all(|r| r.tags == tag));
}

/// Runs only in the child process: replace forever until killed.
#[test]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(WRITER_DIR_ENV) else {
        return;
    };
    let store = LmdbStore::open_with_map_size(Path::new(&dir), MAP_SIZE).unwrap();
    loop {
        let next = store.version().unwrap() + 1;
        assert_eq!(store.replace(&config_for(next)).unwrap(), next);
    }
}

fn random_below(bound: u64) -> u64 {
    let bytes = *Uuid::new_v4().as_bytes();
    u64::from_le_bytes(bytes[..8].try_into().unwrap()) % bound
}

fn spawn_writer(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["crash_writer_child", "--exact", "--test-threads=1"])
        .env(WRITER_DIR_ENV, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn load_after_sigkill_returns_last_committed_config() {
    let dir: PathBuf = std::env::temp_dir().join(format!("strait-store-crash-{}", Uuid::new_v4()));
    let mut last_version = 0;
    for round in 0..6 {
        let mut child = spawn_writer(&dir);
        std::thread::sleep(Duration::from_millis(150 + random_below(400)));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();

        let store = LmdbStore::open_with_map_size(&dir, MAP_SIZE).unwrap();
        let (version, config) = store.load().unwrap();
        assert!(version >= last_version, "round {round}: {version} < {last_version}");
        assert_matches_version(version, &config);
        assert_eq!(store.version().unwrap(), version);
        // The killed writer may have held LMDB's write lock: taking it again
        // proves the lock is recovered.
        assert_eq!(store.replace(&config_for(version + 1)).unwrap(), version + 1);
        eprintln!("round {round}: recovered version {version}");
        last_version = version + 1;
    }
    assert!(last_version > 0, "the writer never committed");
    let _ = std::fs::remove_dir_all(&dir);
}
