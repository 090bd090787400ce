//! Deriving a snapshot by deltas must give what compiling the resulting
//! configuration from scratch gives.

use std::sync::Arc;

use serde_json::json;
use strait_core::declarative::{parse_declarative, DeclarativeFormat};
use strait_core::{Config, ConfigChange, Entity, EntityKind};

use super::{compile_snapshot, derive_snapshot, Snapshot};

fn parse(doc: serde_json::Value) -> Config {
    parse_declarative(doc.to_string().as_bytes(), DeclarativeFormat::Json, 1).expect("valid config")
}

fn base() -> Config {
    parse(json!({
        "_format_version": "3.0",
        "services": [
            {"name": "a", "url": "http://a.test", "routes": [{"name": "ra", "paths": ["/a"]}]},
            {"name": "b", "url": "http://pool", "routes": [{"name": "rb", "paths": ["/b"],
                "plugins": [{"name": "request-termination", "config": {"status_code": 201}}]}]}
        ],
        "upstreams": [{"name": "pool", "targets": [{"target": "127.0.0.1:1"}]}],
        "plugins": [{"name": "request-termination", "config": {"status_code": 418}}]
    }))
}

/// Route names in match order with their plugin chains.
type RouteShape = Vec<(String, Vec<&'static str>)>;
/// Service names with their balancer (`upstream:targets`).
type ServiceShape = Vec<(String, Option<String>)>;

/// Routes in match order, each with its plugin chain, and services with balancer names.
fn shape(snapshot: &Snapshot) -> (RouteShape, ServiceShape) {
    let routes = snapshot
        .router()
        .ordered_ids()
        .into_iter()
        .map(|id| {
            let config = snapshot.config();
            let name = config
                .routes
                .iter()
                .find(|r| r.id == id)
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            let chain = snapshot
                .route_runtime(id)
                .map(|r| r.plugins.names())
                .unwrap_or_default();
            (name, chain)
        })
        .collect();
    let mut services: Vec<_> = snapshot
        .config()
        .services
        .iter()
        .map(|s| {
            let runtime = snapshot.service(s.id).expect("service runtime");
            let balancer = runtime
                .balancer
                .as_ref()
                .map(|b| format!("{}:{}", b.upstream_name, b.target_count()));
            (s.name.clone().unwrap_or_default(), balancer)
        })
        .collect();
    services.sort();
    (routes, services)
}

fn assert_same(derived: &Snapshot, target: Config) {
    let compiled = compile_snapshot(0, Arc::new(target)).expect("compiles");
    assert_eq!(shape(derived), shape(&compiled));
}

#[test]
fn deltas_match_a_full_compile() {
    let start = compile_snapshot(1, Arc::new(base())).expect("compiles");
    let mut target = base();
    // Remove the global plugin, add a route to service a, add a target to the pool.
    let global = target.plugins.iter().find(|p| p.route.is_none()).expect("global").id;
    target.plugins.retain(|p| p.id != global);
    let mut extra_route = target.routes[0].clone();
    extra_route.id = uuid::Uuid::new_v4();
    extra_route.name = Some("ra2".into());
    extra_route.paths = Some(vec!["/a/longer".into()]);
    target.routes.push(extra_route.clone());
    let mut extra_target = target.targets[0].clone();
    extra_target.id = uuid::Uuid::new_v4();
    extra_target.target = "127.0.0.1:2".into();
    target.targets.push(extra_target.clone());
    let changes = vec![
        ConfigChange::Delete {
            kind: EntityKind::Plugins,
            id: global,
        },
        ConfigChange::Upsert {
            entity: Entity::Route(extra_route),
        },
        ConfigChange::Upsert {
            entity: Entity::Target(extra_target),
        },
    ];
    let derived = derive_snapshot(&start, &changes).expect("derives");
    assert_same(&derived, target);
    // The previous snapshot is untouched.
    assert_eq!(start.router().len(), 2);
    assert!(start
        .route_runtime(start.router().ordered_ids()[0])
        .is_some_and(|r| !r.plugins.is_empty()));
}

#[test]
fn a_change_that_does_not_compile_is_rejected_whole() {
    let start = compile_snapshot(1, Arc::new(base())).expect("compiles");
    let mut bad = base().plugins[0].clone();
    bad.id = uuid::Uuid::new_v4();
    bad.name = "rate-limiting".into();
    let result = derive_snapshot(
        &start,
        &[ConfigChange::Upsert {
            entity: Entity::Plugin(bad),
        }],
    );
    let error = result.expect_err("rate-limiting is not implemented");
    assert!(error.to_string().contains("not implemented"), "{error}");
}

/// A certificate-phase plugin: refuses handshakes for one name and pins
/// another name to a stored certificate.
#[derive(Debug)]
struct Pinning {
    refuse: &'static str,
    pin: (&'static str, uuid::Uuid),
}

impl strait_plugins::Plugin for Pinning {
    fn name(&self) -> &'static str {
        "pinning"
    }
    fn priority(&self) -> i32 {
        1
    }
    fn handles_certificate(&self) -> bool {
        true
    }
    fn certificate(&self, ctx: &strait_plugins::CertificateCtx<'_>) -> strait_plugins::CertificateFlow {
        match ctx.server_name {
            Some(name) if name == self.refuse => strait_plugins::CertificateFlow::Refuse,
            Some(name) if name == self.pin.0 => strait_plugins::CertificateFlow::UseCertificate(self.pin.1),
            _ => strait_plugins::CertificateFlow::Continue,
        }
    }
}

#[test]
fn certificate_phase_plugins_run_before_the_sni_lookup() {
    let site = rcgen::generate_simple_self_signed(vec!["site.example".to_string()]).expect("cert");
    let other = rcgen::generate_simple_self_signed(vec!["other.example".to_string()]).expect("cert");
    let (site_id, other_id) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let config = parse(json!({
        "_format_version": "3.0",
        "certificates": [
            {"id": site_id, "cert": site.cert.pem(), "key": site.key_pair.serialize_pem(), "snis": [{"name": "site.example"}]},
            {"id": other_id, "cert": other.cert.pem(), "key": other.key_pair.serialize_pem()}
        ]
    }));
    let mut snapshot = compile_snapshot(1, Arc::new(config)).expect("compiles");
    let default = crate::tls::certified_key(&other.cert.pem(), &other.key_pair.serialize_pem()).expect("key");
    let leaf = |key: &Arc<rustls::sign::CertifiedKey>| key.cert[0].clone();
    let site_leaf = snapshot.certificates().by_id(site_id).map(|k| leaf(&k)).expect("site");
    let other_leaf = snapshot
        .certificates()
        .by_id(other_id)
        .map(|k| leaf(&k))
        .expect("other");

    // Without certificate-phase plugins: by SNI, else the default.
    let chosen = |s: &Snapshot, name: &str| s.choose_certificate(Some(name), &default).map(|k| leaf(&k));
    assert_eq!(chosen(&snapshot, "site.example"), Some(site_leaf.clone()));
    assert_eq!(chosen(&snapshot, "blocked.example"), Some(leaf(&default)));

    let plugin = Pinning {
        refuse: "blocked.example",
        pin: ("site.example", other_id),
    };
    snapshot.compiled.global_certificate =
        Arc::new(strait_plugins::PluginChain::from_instances(vec![Arc::new(plugin)]));
    assert_eq!(
        chosen(&snapshot, "blocked.example"),
        None,
        "the plugin refused the handshake"
    );
    assert_eq!(
        chosen(&snapshot, "site.example"),
        Some(other_leaf),
        "the plugin's certificate wins over SNI"
    );
    assert_eq!(
        chosen(&snapshot, "else.example"),
        Some(leaf(&default)),
        "Continue falls through"
    );
}
