//! Test fixtures: a throw-away store directory and entity builders.

use std::path::PathBuf;

use serde_json::Map;
use strait_core::*;
use uuid::Uuid;

use crate::lmdb::LmdbStore;

/// A store in a fresh directory under the system temp dir, removed on drop.
pub(super) struct TempStore {
    dir: PathBuf,
    store: Option<LmdbStore>,
}

impl TempStore {
    pub(super) fn new() -> TempStore {
        let dir = std::env::temp_dir().join(format!("strait-store-test-{}", Uuid::new_v4()));
        let store = Some(LmdbStore::open_with_map_size(&dir, 256 << 20).unwrap());
        TempStore { dir, store }
    }

    pub(super) fn reopen(&mut self) {
        self.store = None;
        self.store = Some(LmdbStore::open_with_map_size(&self.dir, 256 << 20).unwrap());
    }

    pub(super) fn set_change_log_limit(&mut self, limit: usize) {
        let store = self.store.take().unwrap();
        self.store = Some(store.with_change_log_limit(limit));
    }
}

impl std::ops::Deref for TempStore {
    type Target = LmdbStore;
    fn deref(&self) -> &LmdbStore {
        self.store.as_ref().unwrap()
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        self.store = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn service(name: &str) -> Service {
    Service {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: Some(name.to_string()),
        retries: 5,
        protocol: "http".into(),
        host: "example.com".into(),
        port: 80,
        path: None,
        connect_timeout: 60000,
        write_timeout: 60000,
        read_timeout: 60000,
        tags: None,
        client_certificate: None,
        tls_verify: None,
        tls_verify_depth: None,
        ca_certificates: None,
        enabled: true,
        tls_sans: None,
    }
}

pub(super) fn route(name: &str, service: Option<Uuid>) -> Route {
    Route {
        name: Some(name.to_string()),
        paths: Some(vec![format!("/{name}")]),
        service: service.map(ForeignKey::new),
        ..Route::with_kong_defaults(Uuid::new_v4(), 1)
    }
}

pub(super) fn consumer(username: &str) -> Consumer {
    Consumer {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        username: Some(username.to_string()),
        custom_id: None,
        tags: Some(vec!["a".into()]),
    }
}

pub(super) fn keyauth(consumer: Uuid, key: &str) -> KeyauthCredential {
    KeyauthCredential {
        id: Uuid::new_v4(),
        created_at: 1,
        consumer: ForeignKey::new(consumer),
        key: key.to_string(),
        ttl: None,
        tags: None,
    }
}

pub(super) fn basicauth(consumer: Uuid, username: &str) -> BasicauthCredential {
    BasicauthCredential {
        id: Uuid::new_v4(),
        created_at: 1,
        consumer: ForeignKey::new(consumer),
        username: username.to_string(),
        password: "0".repeat(40),
        tags: None,
    }
}

pub(super) fn acl(consumer: Uuid, group: &str) -> Acl {
    Acl {
        id: Uuid::new_v4(),
        created_at: 1,
        consumer: ForeignKey::new(consumer),
        group: group.to_string(),
        tags: None,
    }
}

pub(super) fn jwt(consumer: Uuid, key: &str) -> JwtSecret {
    JwtSecret {
        id: Uuid::new_v4(),
        created_at: 1,
        consumer: ForeignKey::new(consumer),
        key: key.to_string(),
        secret: "s".into(),
        rsa_public_key: None,
        algorithm: "HS256".into(),
        tags: None,
    }
}

pub(super) fn hmacauth(consumer: Uuid, username: &str) -> HmacauthCredential {
    HmacauthCredential {
        id: Uuid::new_v4(),
        created_at: 1,
        consumer: ForeignKey::new(consumer),
        username: username.to_string(),
        secret: "s".into(),
        tags: None,
    }
}

pub(super) fn plugin(name: &str, service: Option<Uuid>, route: Option<Uuid>) -> Plugin {
    let mut config = Map::new();
    config.insert("minute".into(), 5.into());
    Plugin {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: name.to_string(),
        instance_name: None,
        route: route.map(ForeignKey::new),
        service: service.map(ForeignKey::new),
        consumer: None,
        consumer_group: None,
        ordering: None,
        config,
        protocols: vec!["http".into()],
        enabled: true,
        tags: None,
    }
}

pub(super) fn certificate() -> Certificate {
    Certificate {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        cert: "CERT".into(),
        key: "KEY".into(),
        cert_alt: None,
        key_alt: None,
        tags: None,
    }
}

pub(super) fn sni(name: &str, certificate: Uuid) -> Sni {
    Sni {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: name.to_string(),
        certificate: ForeignKey::new(certificate),
        tags: None,
    }
}

pub(super) fn upstream(name: &str) -> Upstream {
    Upstream {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: name.to_string(),
        algorithm: "round-robin".into(),
        hash_on: "none".into(),
        hash_fallback: "none".into(),
        hash_on_header: None,
        hash_fallback_header: None,
        hash_on_cookie: None,
        hash_on_cookie_path: "/".into(),
        hash_on_query_arg: None,
        hash_fallback_query_arg: None,
        hash_on_uri_capture: None,
        hash_fallback_uri_capture: None,
        slots: 10000,
        healthchecks: serde_json::json!({"active": {"type": "http"}}),
        tags: None,
        host_header: None,
        client_certificate: None,
        use_srv_name: false,
        sticky_sessions_cookie: None,
        sticky_sessions_cookie_path: None,
    }
}

pub(super) fn target(upstream: Uuid, address: &str) -> Target {
    Target {
        id: Uuid::new_v4(),
        created_at: 1.5,
        updated_at: 1.5,
        upstream: ForeignKey::new(upstream),
        target: address.to_string(),
        weight: 100,
        tags: None,
    }
}

/// A filter chain of one `example` filter, on a route or a service.
pub(super) fn filter_chain(name: Option<&str>, route: Option<Uuid>, service: Option<Uuid>) -> FilterChain {
    FilterChain {
        id: Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: name.map(str::to_string),
        enabled: true,
        route: route.map(ForeignKey::new),
        service: service.map(ForeignKey::new),
        filters: vec![WasmFilter {
            name: "example".into(),
            config: Some(serde_json::json!({"header": "x-example"})),
            enabled: true,
        }],
        tags: Some(vec!["wasm".into()]),
    }
}

/// One entity of every kind, wired together.
pub(super) fn full_config() -> Config {
    let svc = service("svc");
    let rt = route("rt", Some(svc.id));
    let cons = consumer("alice");
    let cert = certificate();
    let up = upstream("up");
    Config {
        plugins: vec![plugin("rate-limiting", Some(svc.id), None)],
        filter_chains: vec![filter_chain(Some("chain"), None, Some(svc.id))],
        routes: vec![rt],
        keyauth_credentials: vec![keyauth(cons.id, "secret")],
        basicauth_credentials: vec![basicauth(cons.id, "alice-basic")],
        acls: vec![acl(cons.id, "admins")],
        jwt_secrets: vec![jwt(cons.id, "alice-iss")],
        hmacauth_credentials: vec![hmacauth(cons.id, "alice-hmac")],
        consumers: vec![cons],
        snis: vec![sni("example.com", cert.id)],
        certificates: vec![cert],
        targets: vec![target(up.id, "10.0.0.1:80")],
        upstreams: vec![up],
        services: vec![svc],
        ca_certificates: vec![CaCertificate {
            id: Uuid::new_v4(),
            created_at: 1,
            updated_at: 1,
            cert: "CA".into(),
            cert_digest: Some("digest".into()),
            tags: None,
        }],
        ..Config::default()
    }
}
