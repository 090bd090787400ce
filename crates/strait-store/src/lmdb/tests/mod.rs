//! Tests against a real LMDB environment in a temporary directory.

mod fixtures;

use strait_core::*;
use uuid::Uuid;

use self::fixtures::*;
use super::*;
fn upsert(entity: Entity) -> ConfigChange {
    ConfigChange::Upsert { entity }
}

fn name_of(entity: Option<Entity>) -> Option<String> {
    match entity? {
        Entity::Service(s) => s.name,
        Entity::Route(r) => r.name,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn replace_then_load_round_trips() {
    let store = TempStore::new();
    assert_eq!(store.load().unwrap(), (0, Config::default()));
    let config = full_config();
    assert_eq!(store.replace(&config).unwrap(), 1);
    assert_eq!(store.load().unwrap(), (1, config.clone()));

    let mut services = vec![service("a"), service("b"), service("c")];
    services.sort_by_key(|s| s.id);
    let smaller = Config {
        services,
        ..Config::default()
    };
    assert_eq!(store.replace(&smaller).unwrap(), 2);
    assert_eq!(store.load().unwrap(), (2, smaller));
    // Indexes were rebuilt: the old configuration's keys are gone.
    let old_consumer = store.get_by_unique(EntityKind::Consumers, "username", "alice");
    assert_eq!(old_consumer.unwrap(), None);
    let by_name = store.get_by_unique(EntityKind::Services, "name", "b").unwrap();
    assert_eq!(name_of(by_name), Some("b".into()));
}

#[test]
fn versions_are_monotonic_across_reopen() {
    let mut store = TempStore::new();
    store.replace(&full_config()).unwrap();
    store.replace(&full_config()).unwrap();
    let added = store.apply(&[upsert(Entity::Service(service("x")))]).unwrap();
    assert_eq!(added, 3);
    assert_eq!(store.apply(&[]).unwrap(), 3, "an empty apply commits nothing");
    store.reopen();
    assert_eq!(store.version().unwrap(), 3);
    assert_eq!(store.replace(&Config::default()).unwrap(), 4);
    store.reopen();
    assert_eq!(store.load().unwrap(), (4, Config::default()));
}

#[test]
fn apply_keeps_unique_and_foreign_indexes_current() {
    let store = TempStore::new();
    let mut svc = service("a");
    let other = service("other");
    let mut rt = route("r1", Some(svc.id));
    let changes = [
        upsert(Entity::Route(rt.clone())),
        upsert(Entity::Service(svc.clone())),
        upsert(Entity::Service(other.clone())),
    ];
    assert_eq!(store.apply(&changes).unwrap(), 1);
    let found = store.get_by_unique(EntityKind::Services, "name", "a").unwrap();
    assert_eq!(found, Some(Entity::Service(svc.clone())));
    let routes_of = |id| store.ids_by_foreign(EntityKind::Routes, "service", id).unwrap();
    assert_eq!(routes_of(svc.id), vec![rt.id]);

    svc.name = Some("b".into());
    rt.service = Some(ForeignKey::new(other.id));
    let changes = [upsert(Entity::Service(svc.clone())), upsert(Entity::Route(rt.clone()))];
    store.apply(&changes).unwrap();
    assert_eq!(store.get_by_unique(EntityKind::Services, "name", "a").unwrap(), None);
    let renamed = store.get_by_unique(EntityKind::Services, "name", "b").unwrap();
    assert_eq!(name_of(renamed), Some("b".into()));
    assert!(routes_of(svc.id).is_empty());
    assert_eq!(routes_of(other.id), vec![rt.id]);

    // The released name can be taken by another service.
    store.apply(&[upsert(Entity::Service(service("a")))]).unwrap();
    let delete = ConfigChange::Delete {
        kind: EntityKind::Routes,
        id: rt.id,
    };
    assert_eq!(store.apply(&[delete]).unwrap(), 4);
    assert!(routes_of(other.id).is_empty());
    assert_eq!(store.get(EntityKind::Routes, rt.id).unwrap(), None);
    assert_eq!(store.get_by_unique(EntityKind::Routes, "name", "r1").unwrap(), None);
}

#[test]
fn unique_violation_leaves_nothing_written() {
    let store = TempStore::new();
    let first = service("dup");
    store.apply(&[upsert(Entity::Service(first.clone()))]).unwrap();
    let fresh = service("fresh");
    let second = service("dup");
    let changes = [
        upsert(Entity::Service(fresh.clone())),
        upsert(Entity::Service(second.clone())),
    ];
    match store.apply(&changes) {
        Err(StoreError::UniqueViolation { kind, field, value }) => {
            assert_eq!(
                (kind, field.as_str(), value.as_str()),
                (EntityKind::Services, "name", "dup")
            );
        }
        other => panic!("expected a unique violation, got {other:?}"),
    }
    assert_eq!(store.version().unwrap(), 1);
    assert_eq!(store.get(EntityKind::Services, fresh.id).unwrap(), None);
    assert_eq!(
        store.get_by_unique(EntityKind::Services, "name", "fresh").unwrap(),
        None
    );
    let holder = store.get_by_unique(EntityKind::Services, "name", "dup").unwrap();
    assert_eq!(holder.map(|e| e.id()), Some(first.id));
    assert_eq!(store.changes_since(0).unwrap().len(), 1);
}

#[test]
fn duplicate_keys_in_replace_are_rejected_and_keep_the_old_config() {
    let store = TempStore::new();
    let config = full_config();
    store.replace(&config).unwrap();
    let bad = Config {
        consumers: vec![consumer("same"), consumer("same")],
        ..Config::default()
    };
    assert!(matches!(store.replace(&bad), Err(StoreError::UniqueViolation { .. })));
    let mut plugins = full_config();
    let duplicate = Plugin {
        id: Uuid::new_v4(),
        ..plugins.plugins[0].clone()
    };
    plugins.plugins.push(duplicate);
    let error = store.replace(&plugins).unwrap_err();
    assert!(matches!(error, StoreError::UniqueViolation { ref field, .. } if field == "cache_key"));
    assert_eq!(store.load().unwrap(), (1, config));
}

/// A whole configuration is written in key order (`write::replace_all`), whatever the order of
/// its lists: every entity and index entry must be found, long names (stored as a prefix and a
/// digest) and the empty name included, and an id given twice is refused.
#[test]
fn every_table_fits_in_the_environment() {
    let tables = EntityKind::ALL.len()
        + crate::keys::UNIQUE_FIELDS.len()
        + crate::keys::FOREIGN_FIELDS.len()
        + [super::tables::META_TABLE, super::tables::CHANGELOG_TABLE].len();
    assert!(tables <= super::env::MAX_DBS as usize, "{tables} tables");
}

#[test]
fn a_route_or_a_service_has_one_filter_chain_and_keeps_it_alive() {
    let store = TempStore::new();
    let svc = service("svc");
    let rt = route("rt", Some(svc.id));
    let on_route = filter_chain(Some("on-route"), Some(rt.id), None);
    let on_service = filter_chain(None, None, Some(svc.id));
    let changes = [
        upsert(Entity::Service(svc.clone())),
        upsert(Entity::Route(rt.clone())),
        upsert(Entity::FilterChain(on_route.clone())),
        upsert(Entity::FilterChain(on_service.clone())),
    ];
    store.apply(&changes).unwrap();
    let chain_of = |field, id: Uuid| {
        store
            .get_by_unique(EntityKind::FilterChains, field, &id.to_string())
            .unwrap()
            .map(|e| e.id())
    };
    assert_eq!(chain_of("route", rt.id), Some(on_route.id));
    assert_eq!(chain_of("service", svc.id), Some(on_service.id));
    let named = store
        .get_by_unique(EntityKind::FilterChains, "name", "on-route")
        .unwrap();
    assert_eq!(named, Some(Entity::FilterChain(on_route.clone())));
    let by_route = store.ids_by_foreign(EntityKind::FilterChains, "route", rt.id).unwrap();
    assert_eq!(by_route, vec![on_route.id]);

    let second = filter_chain(None, Some(rt.id), None);
    match store.apply(&[upsert(Entity::FilterChain(second))]) {
        Err(StoreError::UniqueViolation { kind, field, value }) => {
            assert_eq!((kind, field.as_str()), (EntityKind::FilterChains, "route"));
            assert_eq!(value, rt.id.to_string());
        }
        other => panic!("expected a second chain on the route to be refused, got {other:?}"),
    }
    let delete_route = ConfigChange::Delete {
        kind: EntityKind::Routes,
        id: rt.id,
    };
    assert!(matches!(
        store.apply(std::slice::from_ref(&delete_route)),
        Err(StoreError::StillReferenced {
            child_kind: EntityKind::FilterChains,
            ..
        })
    ));
    let cascade = [
        ConfigChange::Delete {
            kind: EntityKind::FilterChains,
            id: on_route.id,
        },
        delete_route,
    ];
    store.apply(&cascade).unwrap();
    assert_eq!(chain_of("route", rt.id), None);
    assert_eq!(store.load().unwrap().1.filter_chains, vec![on_service]);
}

#[test]
fn replace_writes_every_table_in_key_order_whatever_the_lists_order() {
    let store = TempStore::new();
    let long = "n".repeat(450);
    let mut names: Vec<String> = (0..600).map(|i| format!("svc-{:04}", (i * 7919) % 600)).collect();
    names.extend([format!("{long}-b"), format!("{long}-a"), String::new()]);
    let services: Vec<Service> = names.iter().map(|name| service(name)).collect();
    let routes: Vec<Route> = (0..900)
        .map(|i| route(&format!("r{i}"), Some(services[(i * 13) % services.len()].id)))
        .collect();
    let config = Config {
        services: services.clone(),
        routes: routes.clone(),
        ..Config::default()
    };
    store.replace(&config).unwrap();
    for service in &services {
        let name = service.name.clone().unwrap();
        let found = store.get_by_unique(EntityKind::Services, "name", &name).unwrap();
        assert_eq!(found.map(|e| e.id()), Some(service.id), "service {name:?}");
    }
    for route in &routes {
        let found = store.get(EntityKind::Routes, route.id).unwrap();
        assert_eq!(found.map(|e| e.id()), Some(route.id));
    }
    let first = services[0].id;
    let mut children = store.ids_by_foreign(EntityKind::Routes, "service", first).unwrap();
    children.sort();
    let mut expected: Vec<Uuid> = routes
        .iter()
        .filter(|r| r.service.map(|s| s.id) == Some(first))
        .map(|r| r.id)
        .collect();
    expected.sort();
    assert_eq!(children, expected);

    let mut twice = config.clone();
    twice.routes.push(Route {
        name: Some("other".into()),
        ..routes[5].clone()
    });
    match store.replace(&twice) {
        Err(StoreError::UniqueViolation { kind, field, value }) => {
            assert_eq!((kind, field.as_str()), (EntityKind::Routes, "id"));
            assert_eq!(value, routes[5].id.to_string());
        }
        other => panic!("expected the id given twice to be refused, got {other:?}"),
    }
    assert_eq!(
        store.version().unwrap(),
        1,
        "the refused write left the store as it was"
    );
}

#[test]
fn credentials_are_indexed_by_key_and_consumer() {
    let store = TempStore::new();
    let config = full_config();
    store.replace(&config).unwrap();
    let owner = config.consumers[0].id;
    let by = |kind, field, value: &str| store.get_by_unique(kind, field, value).unwrap().map(|e| e.id());
    assert_eq!(
        by(EntityKind::BasicauthCredentials, "username", "alice-basic"),
        Some(config.basicauth_credentials[0].id)
    );
    assert_eq!(
        by(EntityKind::Acls, "cache_key", &format!("{owner}:admins")),
        Some(config.acls[0].id)
    );
    assert_eq!(
        by(EntityKind::JwtSecrets, "key", "alice-iss"),
        Some(config.jwt_secrets[0].id)
    );
    assert_eq!(
        by(EntityKind::HmacauthCredentials, "username", "alice-hmac"),
        Some(config.hmacauth_credentials[0].id)
    );
    for kind in [
        EntityKind::BasicauthCredentials,
        EntityKind::Acls,
        EntityKind::JwtSecrets,
        EntityKind::HmacauthCredentials,
    ] {
        assert_eq!(
            store.ids_by_foreign(kind, "consumer", owner).unwrap().len(),
            1,
            "{kind:?}"
        );
    }
    // The same group twice for one consumer breaks the ACL cache key.
    let again = acl(owner, "admins");
    let error = store.apply(&[upsert(Entity::Acl(again))]).unwrap_err();
    assert!(matches!(error, StoreError::UniqueViolation { ref field, .. } if field == "cache_key"));
    // A credential cannot outlive its consumer.
    let delete = ConfigChange::Delete {
        kind: EntityKind::Consumers,
        id: owner,
    };
    let error = store.apply(&[delete]).unwrap_err();
    assert!(matches!(error, StoreError::StillReferenced { .. }));
}

#[test]
fn foreign_keys_are_enforced_after_all_changes() {
    let store = TempStore::new();
    let svc = service("s");
    let orphan = route("orphan", Some(Uuid::new_v4()));
    let error = store.apply(&[upsert(Entity::Route(orphan))]).unwrap_err();
    assert!(matches!(
        error,
        StoreError::ForeignKey {
            parent_kind: EntityKind::Services,
            ..
        }
    ));
    let rt = route("r", Some(svc.id));
    let plug = plugin("cors", None, Some(rt.id));
    let changes = [
        upsert(Entity::Plugin(plug.clone())),
        upsert(Entity::Route(rt.clone())),
        upsert(Entity::Service(svc.clone())),
    ];
    store.apply(&changes).unwrap();
    let delete = |kind, id| ConfigChange::Delete { kind, id };
    let error = store.apply(&[delete(EntityKind::Services, svc.id)]).unwrap_err();
    assert!(matches!(
        error,
        StoreError::StillReferenced {
            child_kind: EntityKind::Routes,
            ..
        }
    ));
    let plugins_of = store.ids_by_foreign(EntityKind::Plugins, "route", rt.id).unwrap();
    assert_eq!(plugins_of, vec![plug.id]);
    // A cascade listed parent first still commits.
    let cascade = [
        delete(EntityKind::Services, svc.id),
        delete(EntityKind::Routes, rt.id),
        delete(EntityKind::Plugins, plug.id),
    ];
    assert_eq!(store.apply(&cascade).unwrap(), 2);
    assert_eq!(store.load().unwrap(), (2, Config::default()));
    let missing = store.apply(&[delete(EntityKind::Services, svc.id)]).unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }));
}

#[test]
fn list_pages_in_id_order() {
    let store = TempStore::new();
    let config = Config {
        services: (0..25).map(|i| service(&format!("s{i}"))).collect(),
        ..Config::default()
    };
    store.replace(&config).unwrap();
    let mut expected: Vec<Uuid> = config.services.iter().map(|s| s.id).collect();
    expected.sort();
    let mut seen = Vec::new();
    let mut after = None;
    let mut sizes = Vec::new();
    loop {
        let page = store.list(EntityKind::Services, after, 10).unwrap();
        if page.is_empty() {
            break;
        }
        sizes.push(page.len());
        after = page.last().map(|e| e.id());
        seen.extend(page.iter().map(|e| e.id()));
    }
    assert_eq!(sizes, vec![10, 10, 5]);
    assert_eq!(seen, expected);
    assert!(store.list(EntityKind::Routes, None, 10).unwrap().is_empty());
}

#[test]
fn change_log_records_every_commit_and_is_trimmed() {
    let mut store = TempStore::new();
    store.replace(&full_config()).unwrap();
    let a = service("a");
    let b = service("b");
    let changes = [upsert(Entity::Service(a.clone())), upsert(Entity::Service(b.clone()))];
    store.apply(&changes).unwrap();
    let delete = ConfigChange::Delete {
        kind: EntityKind::Services,
        id: a.id,
    };
    store.apply(&[delete]).unwrap();
    let entry = |version, op, id| ChangeLogEntry {
        version,
        kind: EntityKind::Services,
        op,
        id,
    };
    let log = store.changes_since(0).unwrap();
    assert_eq!(log[0].op, ChangeOp::Replace);
    assert_eq!(log[0].id, None);
    let expected_tail = [
        entry(2, ChangeOp::Upsert, Some(a.id)),
        entry(2, ChangeOp::Upsert, Some(b.id)),
        entry(3, ChangeOp::Delete, Some(a.id)),
    ];
    assert_eq!(log[1..], expected_tail[..]);
    assert_eq!(store.changes_since(2).unwrap(), expected_tail[2..]);
    assert!(store.changes_since(3).unwrap().is_empty());

    store.set_change_log_limit(2);
    store.apply(&[upsert(Entity::Service(service("c")))]).unwrap();
    assert!(matches!(
        store.changes_since(1),
        Err(StoreError::ChangeLogTrimmed { oldest_complete: 2, .. })
    ));
    assert_eq!(store.changes_since(2).unwrap().len(), 2);
}

#[test]
fn long_unique_values_are_indexed_by_digest() {
    let store = TempStore::new();
    let owner = consumer("owner");
    let long_a = format!("{}a", "k".repeat(1000));
    let long_b = format!("{}b", "k".repeat(1000));
    let cred = keyauth(owner.id, &long_a);
    let changes = [
        upsert(Entity::Consumer(owner.clone())),
        upsert(Entity::KeyauthCredential(cred.clone())),
    ];
    store.apply(&changes).unwrap();
    let found = store
        .get_by_unique(EntityKind::KeyauthCredentials, "key", &long_a)
        .unwrap();
    assert_eq!(found.map(|e| e.id()), Some(cred.id));
    assert_eq!(
        store
            .get_by_unique(EntityKind::KeyauthCredentials, "key", &long_b)
            .unwrap(),
        None
    );
    let other = keyauth(owner.id, &long_b);
    store.apply(&[upsert(Entity::KeyauthCredential(other))]).unwrap();
    let same = keyauth(owner.id, &long_a);
    let error = store.apply(&[upsert(Entity::KeyauthCredential(same))]).unwrap_err();
    assert!(matches!(error, StoreError::UniqueViolation { .. }));
}

/// LMDB refuses zero-length keys: an empty unique value (which validation
/// refuses before it gets here) is still stored and found, never an error.
#[test]
fn empty_unique_values_are_indexed_apart_from_every_other_value() {
    let store = TempStore::new();
    let owner = consumer("owner");
    let empty = keyauth(owner.id, "");
    let zeros = keyauth(owner.id, &"\0".repeat(401));
    let changes = [
        upsert(Entity::Consumer(owner.clone())),
        upsert(Entity::KeyauthCredential(empty.clone())),
        upsert(Entity::KeyauthCredential(zeros.clone())),
    ];
    store.apply(&changes).unwrap();
    let found = |key: &str| {
        store
            .get_by_unique(EntityKind::KeyauthCredentials, "key", key)
            .unwrap()
            .map(|e| e.id())
    };
    assert_eq!(found(""), Some(empty.id));
    assert_eq!(found(&"\0".repeat(401)), Some(zeros.id));
    let again = keyauth(owner.id, "");
    let error = store.apply(&[upsert(Entity::KeyauthCredential(again))]).unwrap_err();
    assert!(matches!(error, StoreError::UniqueViolation { .. }));
}

#[test]
fn unknown_index_is_an_error() {
    let store = TempStore::new();
    let error = store.get_by_unique(EntityKind::Services, "host", "x").unwrap_err();
    assert!(matches!(error, StoreError::UnknownIndex { .. }));
    let error = store
        .ids_by_foreign(EntityKind::Routes, "upstream", Uuid::nil())
        .unwrap_err();
    assert!(matches!(error, StoreError::UnknownIndex { .. }));
}

/// `cargo test -p strait-store --release -- --ignored --nocapture load_50k`
#[test]
#[ignore = "timing; run in release mode"]
fn load_50k_entities_is_fast() {
    let store = TempStore::new();
    let mut config = Config::default();
    config.services = (0..10_000).map(|i| service(&format!("s{i}"))).collect();
    config.routes = (0..30_000)
        .map(|i| route(&format!("r{i}"), Some(config.services[i % 10_000].id)))
        .collect();
    config.consumers = (0..5_000).map(|i| consumer(&format!("c{i}"))).collect();
    config.keyauth_credentials = (0..5_000)
        .map(|i| keyauth(config.consumers[i].id, &format!("key-{i}")))
        .collect();
    let started = std::time::Instant::now();
    store.replace(&config).unwrap();
    let replaced = started.elapsed();
    let started = std::time::Instant::now();
    let (_, loaded) = store.load().unwrap();
    let loaded_in = started.elapsed();
    println!("replace 50k: {replaced:?}, load 50k: {loaded_in:?}");
    assert_eq!(loaded.entity_count(), 50_000);
    assert!(loaded_in < std::time::Duration::from_secs(1));
}

#[test]
fn reads_during_reopening_writes_all_succeed() {
    let store = TempStore::new();
    let big = |tag: &str| Config {
        services: (0..REOPEN_AFTER_ENTITIES)
            .map(|i| service(&format!("{tag}{i}")))
            .collect(),
        ..Config::default()
    };
    store.replace(&big("a")).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut reads = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let version = store.version().unwrap();
                        let (loaded, config) = store.load().unwrap();
                        assert!(loaded >= version);
                        assert_eq!(config.services.len(), REOPEN_AFTER_ENTITIES);
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for round in 0..10 {
            let tag = if round % 2 == 0 { "b" } else { "a" };
            assert_eq!(store.replace(&big(tag)).unwrap(), round + 2);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
    });
    // The last round wrote the "a" set again; its indexes are the live ones.
    let found = store.get_by_unique(EntityKind::Services, "name", "a0").unwrap();
    assert_eq!(name_of(found), Some("a0".into()));
    assert_eq!(store.get_by_unique(EntityKind::Services, "name", "b0").unwrap(), None);
}

#[test]
fn a_whole_configuration_in_parts_is_that_configuration() {
    let store = TempStore::new();
    let config = full_config();
    let entities: Vec<Entity> = crate::keys::config_entities(&config).collect();
    store.replace(&Config::default()).unwrap();
    for part in entities.chunks(3) {
        store.add_part(part).unwrap();
    }
    let (_, loaded) = store.load().unwrap();
    assert_eq!(loaded, config);
    // Indexed as `replace` indexes it.
    let owner = &config.consumers[0];
    let by_name = store
        .get_by_unique(EntityKind::Consumers, "username", owner.username.as_deref().unwrap())
        .unwrap();
    assert_eq!(by_name.map(|e| e.id()), Some(owner.id));
    let key = &config.keyauth_credentials[0];
    let by_key = store
        .get_by_unique(EntityKind::KeyauthCredentials, "key", &key.key)
        .unwrap();
    assert_eq!(by_key.map(|e| e.id()), Some(key.id));
    assert_eq!(
        store
            .ids_by_foreign(EntityKind::KeyauthCredentials, "consumer", key.consumer.id)
            .unwrap(),
        vec![key.id]
    );
}

#[test]
fn a_part_with_an_id_already_written_or_a_missing_parent_writes_nothing() {
    let store = TempStore::new();
    store.replace(&Config::default()).unwrap();
    let a = service("a");
    store.add_part(&[Entity::Service(a.clone())]).unwrap();
    let version = store.version().unwrap();

    let beside = route("beside", Some(a.id));
    let again = [Entity::Route(beside.clone()), Entity::Service(a.clone())];
    let error = store.add_part(&again).unwrap_err();
    assert!(
        matches!(error, StoreError::UniqueViolation { ref field, .. } if field == "id"),
        "{error:?}"
    );
    assert_eq!(store.get(EntityKind::Routes, beside.id).unwrap(), None);
    assert_eq!(store.get_by_unique(EntityKind::Routes, "name", "beside").unwrap(), None);

    let orphan = route("orphan", Some(Uuid::new_v4()));
    let error = store.add_part(&[Entity::Route(orphan.clone())]).unwrap_err();
    assert!(matches!(error, StoreError::ForeignKey { .. }), "{error:?}");
    assert_eq!(store.get(EntityKind::Routes, orphan.id).unwrap(), None);
    assert_eq!(store.version().unwrap(), version, "nothing committed");
}
