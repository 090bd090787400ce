use serde_json::json;

use super::*;

fn document(url: &str, paths: &[&str]) -> Vec<u8> {
    let routes: Vec<Value> = paths
        .iter()
        .map(|path| json!({"name": format!("r{}", &path[1..]), "paths": [path], "plugins": [{"name": "key-auth"}]}))
        .collect();
    let consumers: Vec<Value> = (0..5).map(|n| json!({"username": format!("u{n}")})).collect();
    serde_json::to_vec(&json!({
        "_format_version": "3.0",
        "services": [{"name": "s", "url": url, "routes": routes}, {"name": "t", "url": url}],
        "consumers": consumers
    }))
    .unwrap()
}

fn memo_of(bytes: &[u8]) -> Memo {
    match super::super::parse_declarative_memo(
        bytes,
        super::super::DeclarativeFormat::Json,
        0,
        RouterFlavor::Expressions,
        None,
    ) {
        Ok(super::super::Parsed::Whole(_, Some(memo))) => memo,
        _ => panic!("not memorized"),
    }
}

/// (items taken from the memo unread, items read).
fn taken(bytes: &[u8], memo: &Memo) -> (usize, usize) {
    let items = scan(bytes, Some(memo)).expect("scanned").items;
    let taken = items.iter().filter(|item| item.kept.is_some()).count();
    (taken, items.len() - taken)
}

const PATHS: [&str; 6] = ["/a", "/b", "/c", "/d", "/e", "/f"];

#[test]
fn unchanged_subtrees_are_taken_unread() {
    let base = document("http://x", &PATHS);
    let memo = memo_of(&base);
    // The same document: each top-level item whole (the services with
    // their routes and plugins, the consumers).
    assert_eq!(taken(&base, &memo), (memo.items(), 0));
    // One route edited: its service and that route (with its plugin)
    // are read; the other routes are taken.
    let mut paths = PATHS;
    paths[2] = "/changed";
    assert_eq!(taken(&document("http://x", &paths), &memo), (memo.items() - 3, 3));
    // A route inserted: the scan finds its place again after it.
    let inserted = ["/a", "/b", "/new", "/c", "/d", "/e", "/f"];
    let (kept, read) = taken(&document("http://x", &inserted), &memo);
    assert!(read <= 3 + 2, "read {read}, kept {kept}");
}

#[test]
fn nested_items_are_not_taken_under_an_edited_parent() {
    let memo = memo_of(&document("http://x", &PATHS));
    // The service's own bytes changed: its routes' bytes did not, but
    // they are nested under another item now and must be read.
    let (kept, read) = taken(&document("http://y", &PATHS), &memo);
    assert_eq!(read, 1 + 2 * PATHS.len() + 1, "kept {kept}");
}
