//! The PostgreSQL store against a real server: the Store trait's contract
//! as the LMDB dialect keeps it (versions, change log, unique and foreign
//! keys, all or nothing), and two stores on one database seeing each
//! other's writes.

use strait_core::declarative::{parse_declarative, DeclarativeFormat};
use strait_core::{Config, ConfigChange, Entity, EntityKind};
use strait_e2e::postgres::PgServer;
use strait_e2e::store_contract::{store_contract_holds, upsert, SET};
use strait_store::pg::{PgConfig, PgStore};
use strait_store::{Store, StoreError};

fn bootstrapped() -> (PgServer, PgConfig) {
    let server = PgServer::start();
    server.bootstrap();
    let config = server.config();
    (server, config)
}

fn config(yaml: &str) -> Config {
    // Plugin configs validated (defaults filled) as the node does.
    strait_plugins::install();
    parse_declarative(yaml.as_bytes(), DeclarativeFormat::Auto, 1_700_000_000).expect("valid declarative config")
}

#[test]
fn the_store_contract_holds_on_postgres() {
    let (_server, pg) = bootstrapped();
    let store = PgStore::open(pg.clone(), 10_000).expect("open");
    store_contract_holds(&store, &config(SET));
}

/// A filter chain as the schema would give it (validation needs Wasm on).
fn filter_chain(route: Option<uuid::Uuid>, service: Option<uuid::Uuid>) -> strait_core::FilterChain {
    strait_core::FilterChain {
        id: uuid::Uuid::new_v4(),
        created_at: 1,
        updated_at: 1,
        name: None,
        enabled: true,
        route: route.map(strait_core::ForeignKey::new),
        service: service.map(strait_core::ForeignKey::new),
        filters: vec![strait_core::WasmFilter {
            name: "tests".into(),
            config: Some(serde_json::json!({"any": ["json", 1]})),
            enabled: true,
        }],
        tags: None,
    }
}

#[test]
fn filter_chains_are_keyed_by_their_route_or_service_on_postgres() {
    let (_server, pg) = bootstrapped();
    let store = PgStore::open(pg, 10_000).expect("open");
    let set = config(SET);
    let (service, route) = (set.services[0].clone(), set.routes[0].clone());
    let on_route = filter_chain(Some(route.id), None);
    let on_service = filter_chain(None, Some(service.id));
    store
        .apply(&[
            upsert(Entity::Service(service.clone())),
            upsert(Entity::Route(route.clone())),
            upsert(Entity::FilterChain(on_route.clone())),
            upsert(Entity::FilterChain(on_service.clone())),
        ])
        .expect("chains on a route and a service");
    let by_route = store
        .get_by_unique(EntityKind::FilterChains, "route", &route.id.to_string())
        .unwrap();
    assert_eq!(by_route, Some(Entity::FilterChain(on_route.clone())));
    assert_eq!(
        store
            .ids_by_foreign(EntityKind::FilterChains, "service", service.id)
            .unwrap(),
        vec![on_service.id]
    );
    match store.apply(&[upsert(Entity::FilterChain(filter_chain(Some(route.id), None)))]) {
        Err(StoreError::UniqueViolation { kind, field, value }) => {
            assert_eq!((kind, field.as_str()), (EntityKind::FilterChains, "route"));
            assert_eq!(value, route.id.to_string());
        }
        other => panic!("expected a second chain on the route to be refused, got {other:?}"),
    }
    let delete = |kind, id| ConfigChange::Delete { kind, id };
    match store.apply(&[delete(EntityKind::Routes, route.id)]) {
        Err(StoreError::StillReferenced { child, .. }) => assert_eq!(child, on_route.id),
        other => panic!("expected still referenced, got {other:?}"),
    }
    store
        .apply(&[
            delete(EntityKind::Routes, route.id),
            delete(EntityKind::FilterChains, on_route.id),
        ])
        .expect("the route with its chain");
    let mut whole = set.clone();
    whole.filter_chains = vec![on_service];
    store.replace(&whole).expect("replace");
    assert_eq!(store.load().unwrap().1.filter_chains, whole.filter_chains);
}

#[test]
fn two_stores_on_one_database_see_each_others_writes_and_the_log_is_trimmed() {
    let (_server, pg) = bootstrapped();
    let node_a = PgStore::open(pg.clone(), 2).expect("open a");
    let node_b = PgStore::open(pg, 2).expect("open b");
    let set = config(SET);
    let consumer = set.consumers[0].clone();
    node_a.apply(&[upsert(Entity::Consumer(consumer.clone()))]).unwrap();
    assert_eq!(node_b.version().unwrap(), 1);
    assert_eq!(
        node_b
            .get_by_unique(EntityKind::Consumers, "username", "alice")
            .unwrap(),
        Some(Entity::Consumer(consumer.clone()))
    );
    // Versions are handed out in order whichever node writes.
    let key = set.keyauth_credentials[0].clone();
    assert_eq!(node_b.apply(&[upsert(Entity::KeyauthCredential(key))]).unwrap(), 2);
    for name in ["a", "b"] {
        let mut changed = consumer.clone();
        changed.custom_id = Some(name.into());
        node_a.apply(&[upsert(Entity::Consumer(changed))]).unwrap();
    }
    assert_eq!(node_b.version().unwrap(), 4);
    assert!(matches!(
        node_b.changes_since(1),
        Err(StoreError::ChangeLogTrimmed { .. })
    ));
    assert_eq!(node_b.changes_since(2).unwrap().len(), 2);
}

#[test]
fn a_database_not_bootstrapped_is_refused_with_the_reason() {
    let server = PgServer::start();
    let config = server.config();
    let error = PgStore::open(config, 100).expect_err("not bootstrapped");
    assert!(error.to_string().contains("strait migrations bootstrap"), "{error}");
}

/// `pg_max_concurrent_queries`: with one slot, a statement stuck behind a
/// lock holds it, and the next one fails after `pg_semaphore_timeout`
/// (instead of opening another connection) with a message naming the
/// setting; once the slot frees, statements run again.
#[test]
fn max_concurrent_queries_bounds_the_connections_in_use() {
    let (server, mut pg) = bootstrapped();
    pg.max_concurrent_queries = 1;
    pg.semaphore_timeout = std::time::Duration::from_millis(200);
    let store = std::sync::Arc::new(PgStore::open(pg, 100).expect("open"));
    std::thread::scope(|scope| {
        let locker = scope
            .spawn(|| server.psql("BEGIN; LOCK TABLE services IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(2); COMMIT;"));
        let started = std::time::Instant::now();
        while server
            .psql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'services' AND l.granted")
            .trim()
            == "0"
        {
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "the lock was never taken");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let blocked = {
            let store = store.clone();
            scope.spawn(move || store.list(EntityKind::Services, None, 10))
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        let waited = std::time::Instant::now();
        let error = store
            .get(EntityKind::Routes, uuid::Uuid::nil())
            .expect_err("the only slot is taken");
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            waited.elapsed()
        );
        assert!(
            matches!(&error, StoreError::Unavailable(m) if m.contains("pg_max_concurrent_queries = 1")),
            "{error}"
        );
        assert_eq!(blocked.join().unwrap().expect("the blocked list ends").len(), 0);
        locker.join().unwrap();
    });
    assert_eq!(
        store.get(EntityKind::Routes, uuid::Uuid::nil()).expect("a free slot"),
        None
    );
}
