use std::path::PathBuf;

use uuid::Uuid;

use super::lmdb::LmdbTokens;
use super::*;

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strait-oauth2-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn token(access: &str, refresh: Option<&str>) -> OauthToken {
    OauthToken {
        id: Uuid::new_v4(),
        created_at: now(),
        service: None,
        credential: Uuid::new_v4(),
        token_type: "bearer".into(),
        expires_in: 7200,
        access_token: access.into(),
        refresh_token: refresh.map(str::to_string),
        authenticated_userid: Some("user".into()),
        scope: Some("email".into()),
        ttl: None,
    }
}

fn block<T>(future: StoreFuture<'_, T>) -> Result<T, TokenStoreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn tokens_are_found_by_access_refresh_and_id_and_unique() {
    let path = dir();
    let store = LmdbTokens::open(&path, 1 << 26).unwrap();
    let t = token("access-1", Some("refresh-1"));
    block(store.insert_token(t.clone())).unwrap();
    assert_eq!(block(store.token_by_access("access-1")).unwrap(), Some(t.clone()));
    assert_eq!(block(store.token_by_refresh("refresh-1")).unwrap(), Some(t.clone()));
    assert_eq!(block(store.token_by_id(t.id)).unwrap(), Some(t.clone()));
    assert_eq!(block(store.token_by_access("access-2")).unwrap(), None);

    let same_access = token("access-1", None);
    assert!(matches!(
        block(store.insert_token(same_access)),
        Err(TokenStoreError::Conflict {
            field: "access_token",
            ..
        })
    ));
    let same_refresh = token("access-3", Some("refresh-1"));
    assert!(matches!(
        block(store.insert_token(same_refresh)),
        Err(TokenStoreError::Conflict {
            field: "refresh_token",
            ..
        })
    ));
    // A refused write left nothing behind.
    assert_eq!(block(store.token_by_access("access-3")).unwrap(), None);
    assert_eq!(store.token_count().unwrap(), 1);

    // Replacing moves every index.
    let mut moved = t.clone();
    moved.access_token = "access-9".into();
    moved.refresh_token = Some("refresh-9".into());
    block(store.replace_token(moved.clone())).unwrap();
    assert_eq!(block(store.token_by_access("access-1")).unwrap(), None);
    assert_eq!(block(store.token_by_refresh("refresh-1")).unwrap(), None);
    assert_eq!(block(store.token_by_refresh("refresh-9")).unwrap(), Some(moved.clone()));
    assert_eq!(block(store.token_by_id(t.id)).unwrap(), Some(moved.clone()));

    assert_eq!(block(store.delete_token(t.id)).unwrap(), Some(moved));
    assert_eq!(block(store.token_by_access("access-9")).unwrap(), None);
    assert_eq!(block(store.token_by_refresh("refresh-9")).unwrap(), None);
    assert_eq!(store.token_count().unwrap(), 0);
    drop(store);
    let _ = std::fs::remove_dir_all(path);
}

#[test]
fn codes_are_taken_once() {
    let path = dir();
    let store = LmdbTokens::open(&path, 1 << 26).unwrap();
    let code = AuthCode {
        id: Uuid::new_v4(),
        created_at: now(),
        service: None,
        credential: Uuid::new_v4(),
        code: "the-code".into(),
        authenticated_userid: Some("u".into()),
        scope: None,
        challenge: None,
        challenge_method: None,
        plugin: None,
    };
    block(store.insert_code(code.clone())).unwrap();
    assert_eq!(block(store.take_code("the-code")).unwrap(), Some(code));
    assert_eq!(block(store.take_code("the-code")).unwrap(), None);
    drop(store);
    let _ = std::fs::remove_dir_all(path);
}

#[test]
fn expired_rows_leave_through_the_ttl_index() {
    let path = dir();
    let store = LmdbTokens::open(&path, 1 << 26).unwrap();
    let mut short = token("short", Some("short-refresh"));
    short.ttl = Some(1);
    short.created_at = now() - 5;
    let kept = token("kept", None);
    block(store.insert_token(short.clone())).unwrap();
    block(store.insert_token(kept.clone())).unwrap();
    // Past its TTL it is gone to readers at once ...
    assert_eq!(block(store.token_by_access("short")).unwrap(), None);
    // ... and from the disk within the writer's purge period.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.token_count().unwrap() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the expired token was never purged"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(block(store.token_by_access("kept")).unwrap(), Some(kept));
    drop(store);
    let _ = std::fs::remove_dir_all(path);
}

#[test]
fn listing_pages_through_every_token() {
    let path = dir();
    let store = LmdbTokens::open(&path, 1 << 26).unwrap();
    for i in 0..25 {
        block(store.insert_token(token(&format!("a{i}"), None))).unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = block(store.list_tokens(cursor.as_deref(), 10)).unwrap();
        assert!(page.tokens.len() <= 10);
        seen.extend(page.tokens.into_iter().map(|t| t.access_token));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 25);
    assert!(matches!(
        block(store.list_tokens(Some("nope"), 10)),
        Err(TokenStoreError::BadCursor)
    ));
    drop(store);
    let _ = std::fs::remove_dir_all(path);
}

#[test]
fn random_tokens_are_32_url_safe_characters() {
    let a = random_token();
    assert_eq!(a.len(), 32);
    assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    assert_ne!(a, random_token());
}
