//! The Store trait's contract as the LMDB dialect keeps it (versions, change log, unique and
//! foreign keys, all or nothing), run against a shared-database dialect (tests/tests/pg_store.rs,
//! tests/tests/cassandra_store.rs), and the declarative set it writes.

use strait_core::{Config, ConfigChange, Entity, EntityKind};
use strait_store::{ChangeOp, Store, StoreError};

pub const SET: &str = r#"
_format_version: "3.0"
services:
- id: 00000000-0000-4000-8000-000000000001
  name: billing
  url: http://127.0.0.1:9000
  routes:
  - id: 00000000-0000-4000-8000-000000000011
    name: billing-route
    paths: [/billing]
- id: 00000000-0000-4000-8000-000000000002
  name: orders
  url: http://127.0.0.1:9001
consumers:
- id: 00000000-0000-4000-8000-000000000021
  username: alice
  keyauth_credentials:
  - id: 00000000-0000-4000-8000-000000000031
    key: alice-key
"#;

pub fn upsert(entity: Entity) -> ConfigChange {
    ConfigChange::Upsert { entity }
}

/// Runs the contract on an empty, bootstrapped `store` with `set`, [`SET`]
/// as the node parses it: it ends at version 4 (a replacement at 3, then
/// one change).
pub fn store_contract_holds(store: &dyn Store, set: &Config) {
    assert_eq!(store.version().unwrap(), 0);
    assert_eq!(store.load().unwrap().1.services.len(), 0);

    let set = set.clone();
    let service = set.services[0].clone();
    let route = set.routes[0].clone();
    let version = store
        .apply(&[
            upsert(Entity::Route(route.clone())),
            upsert(Entity::Service(service.clone())),
        ])
        .expect("a route and its service, in any order");
    assert_eq!(version, 1);
    assert_eq!(
        store.get(EntityKind::Services, service.id).unwrap(),
        Some(Entity::Service(service.clone()))
    );
    assert_eq!(
        store
            .get_by_unique(EntityKind::Routes, "name", "billing-route")
            .unwrap(),
        Some(Entity::Route(route.clone()))
    );
    assert_eq!(
        store.ids_by_foreign(EntityKind::Routes, "service", service.id).unwrap(),
        vec![route.id]
    );
    assert!(matches!(
        store.get_by_unique(EntityKind::Routes, "paths", "/x"),
        Err(StoreError::UnknownIndex { .. })
    ));

    // A unique key another entity holds: refused, nothing written.
    let mut twin = set.services[1].clone();
    twin.name = Some("billing".into());
    match store.apply(&[upsert(Entity::Service(twin.clone()))]) {
        Err(StoreError::UniqueViolation { kind, field, value }) => {
            assert_eq!(
                (kind, field.as_str(), value.as_str()),
                (EntityKind::Services, "name", "billing")
            );
        }
        other => panic!("expected a unique violation, got {other:?}"),
    }
    assert_eq!(store.version().unwrap(), 1);
    assert_eq!(store.get(EntityKind::Services, twin.id).unwrap(), None);

    // A parent that does not exist: refused, and the whole batch with it.
    let orphan_credential = set.keyauth_credentials[0].clone();
    let orders = set.services[1].clone();
    match store.apply(&[
        upsert(Entity::Service(orders.clone())),
        upsert(Entity::KeyauthCredential(orphan_credential)),
    ]) {
        Err(StoreError::ForeignKey { parent_kind, .. }) => assert_eq!(parent_kind, EntityKind::Consumers),
        other => panic!("expected a foreign key error, got {other:?}"),
    }
    assert_eq!(store.get(EntityKind::Services, orders.id).unwrap(), None);

    // A parent with children left: refused; with the child in the same
    // transaction (listed after it): done.
    match store.apply(&[ConfigChange::Delete {
        kind: EntityKind::Services,
        id: service.id,
    }]) {
        Err(StoreError::StillReferenced { child, .. }) => assert_eq!(child, route.id),
        other => panic!("expected still referenced, got {other:?}"),
    }
    match store.apply(&[ConfigChange::Delete {
        kind: EntityKind::Routes,
        id: orders.id,
    }]) {
        Err(StoreError::NotFound { .. }) => {}
        other => panic!("expected not found, got {other:?}"),
    }
    let version = store
        .apply(&[
            ConfigChange::Delete {
                kind: EntityKind::Services,
                id: service.id,
            },
            ConfigChange::Delete {
                kind: EntityKind::Routes,
                id: route.id,
            },
        ])
        .expect("cascade in one transaction");
    assert_eq!(version, 2);

    let log = store.changes_since(0).unwrap();
    let ops: Vec<(u64, ChangeOp)> = log.iter().map(|e| (e.version, e.op)).collect();
    assert_eq!(
        ops,
        vec![
            (1, ChangeOp::Upsert),
            (1, ChangeOp::Upsert),
            (2, ChangeOp::Delete),
            (2, ChangeOp::Delete)
        ]
    );
    assert_eq!(log[0].id, Some(route.id));
    assert_eq!(store.changes_since(2).unwrap(), vec![]);

    // replace: everything at once, with its hash.
    let version = store.replace_hashed(&set, Some("abc123")).expect("replace");
    assert_eq!(version, 3);
    assert_eq!(store.config_hash().unwrap().as_deref(), Some("abc123"));
    let (loaded_version, loaded) = store.load().unwrap();
    assert_eq!(loaded_version, 3);
    assert_eq!(loaded.services.len(), 2);
    assert_eq!(loaded.keyauth_credentials, set.keyauth_credentials);
    assert_eq!(store.changes_since(2).unwrap()[0].op, ChangeOp::Replace);
    assert_eq!(store.apply(&[]).unwrap(), 3, "no changes: nothing written");
    let page = store.list(EntityKind::Services, None, 1).unwrap();
    assert_eq!(page.len(), 1);
    let rest = store.list(EntityKind::Services, Some(page[0].id()), 10).unwrap();
    assert_eq!(rest.len(), 1);
    assert_ne!(rest[0].id(), page[0].id());
    // apply clears the hash, as on LMDB.
    let mut renamed = set.services[1].clone();
    renamed.name = Some("orders-v2".into());
    store.apply(&[upsert(Entity::Service(renamed))]).unwrap();
    assert_eq!(store.config_hash().unwrap(), None);
}
