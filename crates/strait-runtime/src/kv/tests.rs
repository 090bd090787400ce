use std::path::PathBuf;

use super::lmdb::LmdbKv;
use super::*;

fn store() -> (LmdbKv, PathBuf) {
    let dir = std::env::temp_dir().join(format!("strait-kv-{}", uuid::Uuid::new_v4()));
    (LmdbKv::open(&dir, 1 << 20).expect("opens"), dir)
}

fn block<T>(future: KvFuture<'_, T>) -> Result<T, KvError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

#[test]
fn entries_are_kept_per_table_replaced_and_deleted() {
    let (kv, dir) = store();
    block(kv.put(Table::Sessions, "a", b"one".to_vec(), None)).expect("put");
    block(kv.put(Table::Acme, "a", b"other".to_vec(), Some(60))).expect("put");
    assert_eq!(block(kv.get(Table::Sessions, "a")).expect("get"), Some(b"one".to_vec()));
    assert_eq!(block(kv.get(Table::Acme, "a")).expect("get"), Some(b"other".to_vec()));
    block(kv.put(Table::Sessions, "a", b"two".to_vec(), Some(60))).expect("replace");
    assert_eq!(block(kv.get(Table::Sessions, "a")).expect("get"), Some(b"two".to_vec()));
    assert!(block(kv.delete(Table::Sessions, "a")).expect("delete"));
    assert!(!block(kv.delete(Table::Sessions, "a")).expect("delete again"));
    assert_eq!(block(kv.get(Table::Sessions, "a")).expect("get"), None);
    assert_eq!(block(kv.get(Table::Acme, "a")).expect("get"), Some(b"other".to_vec()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn expired_entries_read_as_absent_and_are_purged() {
    let (kv, dir) = store();
    block(kv.put(Table::Sessions, "gone", b"x".to_vec(), Some(0))).expect("put");
    block(kv.put(Table::Sessions, "kept", b"y".to_vec(), Some(3600))).expect("put");
    assert_eq!(block(kv.get(Table::Sessions, "gone")).expect("get"), None);
    let page = block(kv.list(Table::Sessions, "", None, 10)).expect("list");
    assert_eq!(page.entries, vec![("kept".to_string(), b"y".to_vec())]);
    // The writer purges within a second or two.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    block(kv.put(Table::Sessions, "gone", b"z".to_vec(), None)).expect("put again");
    assert_eq!(
        block(kv.get(Table::Sessions, "gone")).expect("get"),
        Some(b"z".to_vec())
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn lists_page_through_a_prefix() {
    let (kv, dir) = store();
    for i in 0..5 {
        block(kv.put(Table::Acme, &format!("renew:{i}"), vec![i], None)).expect("put");
    }
    block(kv.put(Table::Acme, "other", vec![9], None)).expect("put");
    let first = block(kv.list(Table::Acme, "renew:", None, 3)).expect("list");
    assert_eq!(first.entries.len(), 3);
    let next = first.next.clone().expect("a next page");
    let second = block(kv.list(Table::Acme, "renew:", Some(&next), 3)).expect("list");
    let keys: Vec<_> = first
        .entries
        .iter()
        .chain(&second.entries)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(keys, (0..5).map(|i| format!("renew:{i}")).collect::<Vec<_>>());
    assert_eq!(second.next, None);
    assert_eq!(
        block(kv.list(Table::Acme, "renew:", Some("zzz"), 3)).err(),
        Some(KvError::BadCursor)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_memory_store_keeps_tables_apart_and_pages() {
    let kv = memory::MemoryKv::default();
    block(kv.put(Table::Acme, "a:1", b"x".to_vec(), None)).expect("put");
    block(kv.put(Table::Acme, "a:2", b"y".to_vec(), Some(60))).expect("put");
    block(kv.put(Table::Acme, "a:3", b"z".to_vec(), Some(0))).expect("put");
    block(kv.put(Table::Sessions, "a:1", b"other".to_vec(), None)).expect("put");
    assert_eq!(block(kv.get(Table::Acme, "a:1")).expect("get"), Some(b"x".to_vec()));
    assert_eq!(block(kv.get(Table::Acme, "a:3")).expect("get"), None);
    let first = block(kv.list(Table::Acme, "a:", None, 1)).expect("list");
    assert_eq!(first.entries, vec![("a:1".to_string(), b"x".to_vec())]);
    let second = block(kv.list(Table::Acme, "a:", first.next.as_deref(), 5)).expect("list");
    assert_eq!(second.entries, vec![("a:2".to_string(), b"y".to_vec())]);
    assert!(block(kv.delete(Table::Acme, "a:1")).expect("delete"));
    assert_eq!(
        block(kv.get(Table::Sessions, "a:1")).expect("get"),
        Some(b"other".to_vec())
    );
}
