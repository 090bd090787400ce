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
    // A plugin no build of Strait has.
    bad.name = "no-such-plugin".into();
    let result = derive_snapshot(
        &start,
        &[ConfigChange::Upsert {
            entity: Entity::Plugin(bad),
        }],
    );
    let error = result.expect_err("no such plugin");
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

fn with_consumers() -> Config {
    parse(json!({
        "_format_version": "3.0",
        "consumers": [
            {"id": "0b6fdc3e-1a2b-4c3d-8e4f-5a6b7c8d9e01", "username": "alice", "custom_id": "c-1",
             "keyauth_credentials": [{"id": "0b6fdc3e-1a2b-4c3d-8e4f-5a6b7c8d9e11", "key": "k-alice"}],
             "acls": [{"id": "0b6fdc3e-1a2b-4c3d-8e4f-5a6b7c8d9e21", "group": "g1"},
                      {"id": "0b6fdc3e-1a2b-4c3d-8e4f-5a6b7c8d9e22", "group": "g2"}]},
            {"id": "0b6fdc3e-1a2b-4c3d-8e4f-5a6b7c8d9e02", "username": "bob"}
        ]
    }))
}

/// What plugins see of each consumer and key: the prepared view (headers,
/// groups) of a consumer with groups, the row of one without (it has no
/// view), and the key index.
fn identity_shape(snapshot: &Snapshot) -> Vec<String> {
    use strait_plugins::Directory;
    let config = snapshot.config();
    let mut shape: Vec<String> = config
        .consumers
        .iter()
        .map(|c| match snapshot.consumer_view(c.id) {
            Some(view) => {
                assert!(
                    !view.groups.is_empty() || !view.consumer_groups.is_empty(),
                    "a view without groups"
                );
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?}",
                    view.consumer.as_ref().map(|c| &c.username),
                    view.id_header,
                    view.username_header,
                    view.custom_id_header,
                    view.groups,
                    view.groups_header
                )
            }
            None => format!(
                "no view: {:?} {:?}",
                c.username,
                snapshot.consumer(c.id).map(|row| &row.custom_id)
            ),
        })
        .collect();
    shape.extend(
        config
            .keyauth_credentials
            .iter()
            .map(|k| format!("{} {:?}", k.key, snapshot.keyauth_key(&k.key))),
    );
    shape.sort();
    shape
}

#[test]
fn consumer_views_and_key_index_follow_changes() {
    let start = compile_snapshot(1, Arc::new(with_consumers())).expect("compiles");
    let first = identity_shape(&start);
    assert!(
        first
            .iter()
            .any(|s| s.contains("[\"g1\", \"g2\"]") && s.contains("\"g1, g2\"")),
        "{first:?}"
    );
    let mut target = with_consumers();
    let alice = target
        .consumers
        .iter_mut()
        .find(|c| c.username.as_deref() == Some("alice"))
        .expect("alice");
    alice.username = Some("alice-renamed".into());
    alice.custom_id = None;
    let alice = alice.clone();
    let bob = target
        .consumers
        .iter()
        .find(|c| c.username.as_deref() == Some("bob"))
        .expect("bob")
        .id;
    let g1 = target.acls.iter().find(|a| a.group == "g1").expect("g1").id;
    target.acls.retain(|a| a.id != g1);
    let mut bobs_group = target.acls[0].clone();
    bobs_group.id = uuid::Uuid::new_v4();
    bobs_group.group = "g3".into();
    bobs_group.consumer = strait_core::ForeignKey::new(bob);
    target.acls.push(bobs_group.clone());
    target.keyauth_credentials[0].ttl = Some(3600);
    let key = target.keyauth_credentials[0].clone();
    // The new acl is listed before anything else changes.
    let changes = vec![
        ConfigChange::Upsert {
            entity: Entity::Acl(bobs_group),
        },
        ConfigChange::Upsert {
            entity: Entity::Consumer(alice),
        },
        ConfigChange::Delete {
            kind: EntityKind::Acls,
            id: g1,
        },
        ConfigChange::Upsert {
            entity: Entity::KeyauthCredential(key),
        },
    ];
    let derived = derive_snapshot(&start, &changes).expect("derives");
    let compiled = compile_snapshot(0, Arc::new(target.clone())).expect("compiles");
    assert_eq!(identity_shape(&derived), identity_shape(&compiled));
    assert_ne!(identity_shape(&derived), first);
    // Deleting bob (with his acl) drops his view.
    let bobs_acl = target.acls.iter().find(|a| a.consumer.id == bob).expect("bob's acl").id;
    let gone = derive_snapshot(
        &derived,
        &[
            ConfigChange::Delete {
                kind: EntityKind::Consumers,
                id: bob,
            },
            ConfigChange::Delete {
                kind: EntityKind::Acls,
                id: bobs_acl,
            },
        ],
    )
    .expect("derives");
    use strait_plugins::Directory;
    assert!(gone.consumer_view(bob).is_none());
    assert!(derived.consumer_view(bob).is_some());
}

#[test]
fn the_written_config_json_is_the_declarative_text_of_the_config() {
    let mut config = base();
    let consumers = with_consumers();
    config.consumers = consumers.consumers;
    config.keyauth_credentials = consumers.keyauth_credentials;
    config.acls = consumers.acls;
    let snapshot = compile_snapshot(1, Arc::new(config)).expect("compiles");
    let expected = strait_core::declarative::config_to_declarative(&snapshot.config()).to_string();
    let written = snapshot.write_config_json(Vec::new()).expect("a Vec takes every byte");
    assert_eq!(String::from_utf8(written).expect("utf-8"), expected);
    assert!(expected.contains(r#""keyauth_credentials":["#) && expected.contains(r#""routes":["#));
}

/// The same document parsed later (other generated timestamps) is no change, and the
/// running timestamps are adopted into it; a changed, a new and a removed entity are
/// exactly the changes, deletes first.
#[test]
fn diff_reports_only_real_changes_and_adopts_generated_timestamps() {
    let document = |route_b_path: &str, extra_consumer: bool| {
        let mut doc = json!({
            "_format_version": "3.0",
            "services": [
                {"name": "a", "url": "http://a.test", "routes": [{"name": "ra", "paths": ["/a"]}]},
                {"name": "b", "url": "http://b.test", "routes": [{"name": "rb", "paths": [route_b_path]}]}
            ],
            "consumers": [{"username": "gone"}]
        });
        if extra_consumer {
            doc["consumers"] = json!([{"username": "new"}]);
        }
        doc.to_string()
    };
    let running = compile_snapshot(
        1,
        Arc::new(parse(serde_json::from_str(&document("/b", false)).unwrap())),
    )
    .expect("compiles");
    let later = |text: String| parse_declarative(text.as_bytes(), DeclarativeFormat::Json, 99).expect("valid config");

    let mut same = later(document("/b", false));
    assert!(running.diff(&mut same, 99).is_empty());
    assert!(same.routes.iter().all(|r| r.created_at == 1 && r.updated_at == 1));
    assert!(same.services.iter().all(|s| s.created_at == 1));

    let mut other = later(document("/b2", true));
    let changes = running.diff(&mut other, 99);
    let shown: Vec<String> = changes
        .iter()
        .map(|change| match change {
            ConfigChange::Delete { kind, .. } => format!("delete {}", kind.table()),
            ConfigChange::Upsert {
                entity: Entity::Route(r),
            } => {
                format!("upsert route {:?} created {}", r.paths, r.created_at)
            }
            ConfigChange::Upsert {
                entity: Entity::Consumer(c),
            } => {
                format!("upsert consumer {:?} created {}", c.username, c.created_at)
            }
            ConfigChange::Upsert { entity } => format!("upsert {}", entity.kind().table()),
        })
        .collect();
    assert_eq!(
        shown,
        [
            "delete consumers",
            "upsert route Some([\"/b2\"]) created 1",
            "upsert consumer Some(\"new\") created 99",
        ]
    );
}

/// What the stand-in Wasm host was asked to build: each route's filters
/// with their scope.
type FilterBuilds = std::sync::Mutex<Vec<(Vec<String>, strait_plugins::filters::FilterScope)>>;

/// The stand-in for a built filter chain.
#[derive(Debug)]
struct WasmChain;

impl strait_plugins::Plugin for WasmChain {
    fn name(&self) -> &'static str {
        "proxy-wasm"
    }
    fn priority(&self) -> i32 {
        0
    }
}

fn filter_chain(
    name: &str,
    on: (Option<uuid::Uuid>, Option<uuid::Uuid>),
    filters: &[(&str, bool)],
) -> strait_core::FilterChain {
    strait_core::FilterChain {
        id: uuid::Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: Some(name.into()),
        enabled: true,
        route: on.0.map(strait_core::ForeignKey::new),
        service: on.1.map(strait_core::ForeignKey::new),
        filters: filters
            .iter()
            .map(|(name, enabled)| strait_core::WasmFilter {
                name: name.to_string(),
                config: Some(json!(name)),
                enabled: *enabled,
            })
            .collect(),
        tags: None,
    }
}

/// The only test that installs a filter-chain factory (it is process-wide):
/// first without one, as a node with `wasm = off`, then with a stand-in.
#[test]
fn routes_run_their_services_filters_then_their_own() {
    use strait_plugins::filters::{set_filter_chain_factory, FilterScope};

    let mut config = base();
    let service_a = config
        .services
        .iter()
        .find(|s| s.name.as_deref() == Some("a"))
        .unwrap()
        .id;
    let route = |name: &str| {
        config
            .routes
            .iter()
            .find(|r| r.name.as_deref() == Some(name))
            .unwrap()
            .id
    };
    let (ra, rb) = (route("ra"), route("rb"));
    let mut on_rb = filter_chain("on-rb", (Some(rb), None), &[("x", true)]);
    on_rb.enabled = false;
    config.filter_chains = vec![
        filter_chain("on-a", (None, Some(service_a)), &[("s1", true), ("s2", false)]),
        filter_chain("on-ra", (Some(ra), None), &[("r1", true)]),
        on_rb,
    ];

    let error = compile_snapshot(1, Arc::new(config.clone())).expect_err("no Wasm host");
    assert_eq!(
        error.problems,
        vec![super::CompileProblem {
            entity: "filter_chains[on-ra]".into(),
            message: "wasm support is not enabled".into(),
        }]
    );

    let builds: Arc<FilterBuilds> = Arc::default();
    let seen = builds.clone();
    set_filter_chain_factory(Arc::new(move |specs, scope| {
        let names = specs.iter().map(|s| s.name.clone()).collect();
        seen.lock().unwrap().push((names, scope));
        Ok(Arc::new(WasmChain) as Arc<dyn strait_plugins::Plugin>)
    }));
    let snapshot = compile_snapshot(1, Arc::new(config.clone())).expect("compiles");
    let chain_of = |snapshot: &Snapshot, id| {
        snapshot
            .route_runtime(id)
            .map(|r| r.plugins.names())
            .unwrap_or_default()
    };
    assert!(
        chain_of(&snapshot, ra).contains(&"proxy-wasm"),
        "{:?}",
        chain_of(&snapshot, ra)
    );
    assert!(
        !chain_of(&snapshot, rb).contains(&"proxy-wasm"),
        "a disabled chain adds nothing"
    );
    let scope = FilterScope {
        route: Some(ra),
        service: Some(service_a),
    };
    assert_eq!(
        *builds.lock().unwrap(),
        vec![(vec!["s1".to_string(), "r1".to_string()], scope)]
    );

    // Rebuilding every route's chain (a global plugin went) builds no
    // filter anew: the route's filters and scope are the same.
    let global = config
        .plugins
        .iter()
        .find(|p| p.route.is_none() && p.service.is_none())
        .unwrap()
        .id;
    let without_global = derive_snapshot(
        &snapshot,
        &[ConfigChange::Delete {
            kind: EntityKind::Plugins,
            id: global,
        }],
    )
    .expect("derives");
    assert_eq!(builds.lock().unwrap().len(), 1);
    assert!(chain_of(&without_global, ra).contains(&"proxy-wasm"));

    // Disabling the route's chain leaves the service's filters; deleting
    // the service's chain too leaves none.
    builds.lock().unwrap().clear();
    let mut off = config.filter_chains[1].clone();
    off.enabled = false;
    let derived = derive_snapshot(
        &snapshot,
        &[ConfigChange::Upsert {
            entity: Entity::FilterChain(off),
        }],
    )
    .expect("derives");
    assert_eq!(*builds.lock().unwrap(), vec![(vec!["s1".to_string()], scope)]);
    let service_chain = config.filter_chains[0].id;
    let derived = derive_snapshot(
        &derived,
        &[ConfigChange::Delete {
            kind: EntityKind::FilterChains,
            id: service_chain,
        }],
    )
    .expect("derives");
    assert!(!chain_of(&derived, ra).contains(&"proxy-wasm"));
    assert_eq!(builds.lock().unwrap().len(), 1, "nothing left to build");
}
