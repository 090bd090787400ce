//! A read of the whole store (a node's start, a data plane compiling its
//! cache) faults in nearly every page of the data file, and a page stays
//! mapped, resident in the node's RSS, as long as the environment is open.
//! The store reopens the environment after such a read so they are not
//! left there. Its own process: the measure is the process's mappings.
#![cfg(target_os = "linux")]

use std::path::Path;

mod common;

use common::{route, service};
use strait_core::{Config, EntityKind};
use strait_store::{LmdbStore, Store, REOPEN_AFTER_ENTITIES};
use uuid::Uuid;

/// KiB of `file` resident through this process's mappings of it.
fn resident_kib(file: &Path) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let name = file.to_str().expect("a UTF-8 path");
    let mut inside = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            inside = line.ends_with(name);
        } else if inside {
            if let Some(kib) = line.strip_prefix("Rss:") {
                total += kib.trim().trim_end_matches("kB").trim().parse::<usize>().unwrap_or(0);
            }
        }
    }
    total
}

#[test]
fn a_whole_read_leaves_the_data_file_unmapped() {
    let dir = std::env::temp_dir().join(format!("strait-store-whole-read-{}", Uuid::new_v4()));
    let store = LmdbStore::open_with_map_size(&dir, 256 << 20).unwrap();
    let mut config = Config::default();
    config.services = (0..2_000).map(service).collect();
    config.routes = (0..8_000).map(|i| route(i, config.services[i % 2_000].id)).collect();
    assert!(config.entity_count() >= REOPEN_AFTER_ENTITIES);
    store.replace(&config).unwrap();
    let data = dir.join("data.mdb");
    let file_kib = std::fs::metadata(&data).unwrap().len() as usize / 1024;
    assert!(file_kib > 4096, "a data file of {file_kib} KiB is too small to tell");

    // Entity by entity: every one once, at the stored version.
    let mut seen = Vec::new();
    let version = store.for_each_entity(|entity| seen.push(entity.id())).unwrap();
    assert_eq!(version, 1);
    let (_, loaded) = store.load().unwrap();
    let expected: Vec<Uuid> = loaded
        .services
        .iter()
        .map(|s| s.id)
        .chain(loaded.routes.iter().map(|r| r.id))
        .collect();
    let mut sorted = seen.clone();
    sorted.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(sorted, expected_sorted, "every entity once");
    assert_eq!(seen.len(), 10_000);

    // Both whole reads faulted in the file; neither leaves it resident.
    let resident = resident_kib(&data);
    assert!(
        resident < file_kib / 8,
        "{resident} KiB of a {file_kib} KiB data file still resident after whole reads"
    );
    // The store still answers, from the reopened environment.
    assert_eq!(
        store
            .get(EntityKind::Routes, config.routes[0].id)
            .unwrap()
            .map(|e| e.id()),
        Some(config.routes[0].id)
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
