//! LMDB keeps the pages a write transaction dirtied (allocated with the C
//! `malloc`) until its environment closes; the store reopens it after a
//! large write so they go back. One test per process: the C heap counters
//! are global.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::{route, service};
use strait_core::Config;
use strait_store::{LmdbStore, Store, REOPEN_AFTER_ENTITIES};
use uuid::Uuid;

/// Bytes the C heap has handed out and not had back (from its arenas and
/// as separate maps: glibc moves a size between the two as it adapts its
/// threshold).
fn c_heap_in_use() -> usize {
    // SAFETY: `mallinfo2` takes nothing and returns a plain struct.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

#[test]
fn a_large_write_leaves_no_dirty_pages_in_the_c_heap() {
    let dir = std::env::temp_dir().join(format!("strait-store-dirty-{}", Uuid::new_v4()));
    let store = LmdbStore::open_with_map_size(&dir, 256 << 20).unwrap();
    let mut config = Config::default();
    config.services = (0..2_000).map(service).collect();
    config.routes = (0..4_000).map(|i| route(i, config.services[i % 2_000].id)).collect();
    assert!(config.entity_count() >= REOPEN_AFTER_ENTITIES);

    // One small write first, so LMDB's per-environment buffers exist.
    store.replace(&Config::default()).unwrap();
    let before = c_heap_in_use();
    store.replace(&config).unwrap();
    let after = c_heap_in_use();
    // Without the reopen the write's ~2,000 dirty pages (8 MB) stay.
    let kept = after.saturating_sub(before);
    assert!(
        kept < 1 << 20,
        "the C heap kept {kept} bytes after a write of 6,000 entities"
    );
    // And the store still answers, from the reopened environment.
    let (version, loaded) = store.load().unwrap();
    assert_eq!((version, loaded.entity_count()), (2, 6_000));
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
