//! The Cassandra store against a real Apache Cassandra 5.0 (tests/src/cassandra.rs): the
//! Store trait's contract as the LMDB and PostgreSQL dialects keep it (versions, change log,
//! unique and foreign keys, all or nothing), two stores on one keyspace seeing each other's
//! writes, one unique name created at once from two nodes committed once, a change set too
//! large for one batch, and the rule of the Kong field report: no statement filters or uses a
//! secondary index (the source is searched, and the server's guardrails refuse both).

use std::path::Path;
use std::sync::Arc;

use strait_core::declarative::{parse_declarative, DeclarativeFormat};
use strait_core::{Config, ConfigChange, Entity, EntityKind};
use strait_e2e::cassandra::CassandraServer;
use strait_e2e::store_contract::{store_contract_holds, upsert, SET};
use strait_store::cassandra::{CassandraConfig, CassandraStore};
use strait_store::{ChangeOp, Store, StoreError};

fn settings(server: &CassandraServer) -> CassandraConfig {
    server.config()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn bootstrapped() -> (CassandraServer, CassandraConfig) {
    CassandraServer::bootstrapped()
}

fn config(yaml: &str) -> Config {
    strait_plugins::install();
    parse_declarative(yaml.as_bytes(), DeclarativeFormat::Auto, 1_700_000_000).expect("valid declarative config")
}

#[test]
fn the_store_contract_holds_on_cassandra() {
    let (_server, settings) = bootstrapped();
    let store = CassandraStore::open(settings, 10_000).expect("open");
    let set = config(SET);
    store_contract_holds(&store, &set);
    // The contract left `orders` renamed `orders-v2` at version 4.
    let mut renamed = set.services[1].clone();
    renamed.name = Some("orders-v2".into());
    // An update that keeps the name: the entity and its name row stay
    // (a batch's deletion would beat its write of the same row).
    renamed.retries = 9;
    store.apply(&[upsert(Entity::Service(renamed.clone()))]).unwrap();
    assert_eq!(
        store.get_by_unique(EntityKind::Services, "name", "orders-v2").unwrap(),
        Some(Entity::Service(renamed.clone()))
    );
    assert_eq!(
        store.get(EntityKind::Services, renamed.id).unwrap(),
        Some(Entity::Service(renamed.clone()))
    );
    // Deleted and created again in one change set: it exists.
    store
        .apply(&[
            ConfigChange::Delete {
                kind: EntityKind::Services,
                id: renamed.id,
            },
            upsert(Entity::Service(renamed.clone())),
        ])
        .unwrap();
    assert!(store
        .get_by_unique(EntityKind::Services, "name", "orders-v2")
        .unwrap()
        .is_some());
    assert_eq!(
        store.get_by_unique(EntityKind::Services, "name", "orders").unwrap(),
        None,
        "the old name is free again"
    );
    // A second replacement: the first generation is gone, the chain still
    // leads to the head.
    assert_eq!(store.replace(&set).unwrap(), 7);
    assert_eq!(store.load().unwrap().0, 7);
    match store.apply_at(6, &[upsert(Entity::Service(set.services[1].clone()))]) {
        Err(StoreError::Stale { expected: 6, found: 7 }) => {}
        other => panic!("expected stale, got {other:?}"),
    }
}

#[test]
fn two_stores_on_one_keyspace_see_each_others_writes_and_the_log_is_trimmed() {
    let (_server, settings) = bootstrapped();
    let node_a = CassandraStore::open(settings.clone(), 2).expect("open a");
    let node_b = CassandraStore::open(settings, 2).expect("open b");
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

/// The 201/409 of the issue, at the store: two nodes, four writers each,
/// all creating consumer `bob` with ids of their own: one commit.
#[test]
fn one_unique_name_created_at_once_on_two_nodes_is_committed_once() {
    let (_server, settings) = bootstrapped();
    let nodes = [
        Arc::new(CassandraStore::open(settings.clone(), 100).expect("open a")),
        Arc::new(CassandraStore::open(settings, 100).expect("open b")),
    ];
    let base = config(SET).consumers[0].clone();
    let outcomes: Vec<Result<u64, StoreError>> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let store = nodes[i % 2].clone();
                let mut bob = base.clone();
                bob.id = uuid::Uuid::new_v4();
                bob.username = Some("bob".into());
                scope.spawn(move || store.apply(&[upsert(Entity::Consumer(bob))]))
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let committed = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Err(StoreError::UniqueViolation { field, .. }) if field == "username"))
        .count();
    assert_eq!((committed, refused), (1, 7), "{outcomes:?}");
    assert_eq!(nodes[1].version().unwrap(), 1);
    assert!(nodes[0]
        .get_by_unique(EntityKind::Consumers, "username", "bob")
        .unwrap()
        .is_some());
}

/// More changes than one batch may carry: written as a new generation,
/// still one version, still logged change by change.
#[test]
fn a_change_set_larger_than_a_batch_is_one_version() {
    let (_server, settings) = bootstrapped();
    let store = CassandraStore::open(settings, 100).expect("open");
    let set = config(SET);
    store.replace(&set).unwrap();
    let template = set.consumers[0].clone();
    let changes: Vec<ConfigChange> = (0..400)
        .map(|i| {
            let mut consumer = template.clone();
            consumer.id = uuid::Uuid::new_v4();
            consumer.username = Some(format!("user-{i:04}-{}", "x".repeat(100)));
            upsert(Entity::Consumer(consumer))
        })
        .collect();
    assert_eq!(store.apply(&changes).unwrap(), 2);
    let (version, loaded) = store.load().unwrap();
    assert_eq!((version, loaded.consumers.len(), loaded.services.len()), (2, 401, 2));
    let log = store.changes_since(1).unwrap();
    assert_eq!(log.len(), 400);
    assert!(log.iter().all(|e| e.version == 2 && e.op == ChangeOp::Upsert));
    assert!(store
        .get_by_unique(
            EntityKind::Consumers,
            "username",
            &format!("user-0399-{}", "x".repeat(100))
        )
        .unwrap()
        .is_some());
}

#[test]
fn a_keyspace_not_bootstrapped_is_refused_with_the_reason() {
    let server = CassandraServer::start();
    let error = CassandraStore::open(settings(&server), 100).expect_err("not bootstrapped");
    assert!(error.to_string().contains("strait migrations bootstrap"), "{error}");
}

/// Every CQL statement Strait sends is in crates/strait-store/src/cassandra/: none filters,
/// creates an index or a view. And the test server refuses both (its guardrails), so every
/// Cassandra test passing also shows none was sent.
#[test]
fn no_statement_filters_or_uses_a_secondary_index() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/strait-store/src/cassandra");
    let mut searched = 0;
    for entry in std::fs::read_dir(&dir).expect("the Cassandra dialect's sources") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("source").to_ascii_uppercase();
        // Doc comments name the rule itself; statements are in string literals.
        let code: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for forbidden in [
            "ALLOW FILTERING",
            "CREATE INDEX",
            "CREATE CUSTOM INDEX",
            "MATERIALIZED VIEW",
        ] {
            assert!(!code.contains(forbidden), "{} has {forbidden}", path.display());
        }
        searched += 1;
    }
    assert!(searched >= 3, "searched {searched} files");
    let (_server, settings) = bootstrapped();
    runtime().block_on(async {
        let session = strait_store::cassandra::connect(&settings).await.expect("connect");
        let ks = &settings.keyspace;
        let filtering = session
            .query_unpaged(
                format!("SELECT * FROM {ks}.config WHERE body = 0x00 ALLOW FILTERING"),
                (),
            )
            .await;
        let refused = filtering
            .expect_err("the server let ALLOW FILTERING through")
            .to_string();
        assert!(refused.contains("Guardrail allow_filtering"), "{refused}");
        let index = session
            .query_unpaged(format!("CREATE INDEX ON {ks}.config (body)"), ())
            .await;
        let refused = index
            .expect_err("the server let a secondary index be created")
            .to_string();
        assert!(refused.contains("Guardrail secondary_indexes"), "{refused}");
    });
}
