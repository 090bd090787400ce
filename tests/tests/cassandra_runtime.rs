//! The runtime data on a real Apache Cassandra 5.0 (tests/src/cassandra.rs): the OAuth2
//! token store (found by access token, refresh token and id; each unique, a refused save
//! leaving nothing behind; update, revocation, paging, codes taken once, expiry by TTL)
//! and the key-value store of sessions and ACME data (TTL, tables kept apart, listing by
//! prefix across pages), rate-limiting's cluster counters (every node's count summed, the
//! newest write of a count kept), and `strait migrations up` adding these tables to a
//! keyspace bootstrapped before them.

use std::collections::BTreeSet;
use std::time::Duration;

use scylla::client::session::Session;
use strait_e2e::cassandra::CassandraServer;
use strait_runtime::kv::{KvStore, Table};
use strait_runtime::oauth2::{now, AuthCode, Drawn, OauthToken, TokenStore, TokenStoreError};
use strait_store::cassandra::{schema, CassandraKv, CassandraTokens};
use uuid::Uuid;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn token(access: &str, refresh: Option<&str>) -> OauthToken {
    OauthToken {
        id: Uuid::new_v4(),
        created_at: now(),
        service: Some(Uuid::new_v4()),
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

async fn count(session: &Session, ks: &str, table: &str) -> usize {
    let result = session
        .query_unpaged(format!("SELECT COUNT(*) FROM \"{ks}\".{table}"), ())
        .await
        .expect("count")
        .into_rows_result()
        .expect("rows");
    let (n,): (i64,) = result.first_row().expect("one row");
    n as usize
}

fn conflict_on(result: Result<(), TokenStoreError>) -> &'static str {
    match result {
        Err(TokenStoreError::Conflict { field, .. }) => field,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn tokens_are_found_by_every_key_unique_and_leave_with_their_ttl() {
    let (server, config) = CassandraServer::bootstrapped();
    let ks = server.keyspace.clone();
    let store = CassandraTokens::new(config.clone()).expect("store");
    store.check_schema().expect("schema");
    let rt = runtime();
    rt.block_on(async {
        let session = strait_store::cassandra::connect(&config).await.expect("connect");
        let t = token("access-1", Some("refresh-1"));
        store.insert_token(t.clone()).await.expect("insert");
        assert_eq!(store.token_by_access("access-1").await.unwrap(), Some(t.clone()));
        assert_eq!(store.token_by_refresh("refresh-1").await.unwrap(), Some(t.clone()));
        assert_eq!(store.token_by_id(t.id).await.unwrap(), Some(t.clone()));
        assert_eq!(store.token_by_access("access-2").await.unwrap(), None);
        assert_eq!(store.backend(), "cassandra");

        // Each unique key refused with its field, nothing left behind.
        assert_eq!(
            conflict_on(store.insert_token(token("access-1", None)).await),
            "access_token"
        );
        let mut same_id = token("access-3", None);
        same_id.id = t.id;
        assert_eq!(conflict_on(store.insert_token(same_id).await), "id");
        assert_eq!(store.token_by_access("access-3").await.unwrap(), None);
        let same_refresh = token("access-4", Some("refresh-1"));
        let refused_id = same_refresh.id;
        assert_eq!(conflict_on(store.insert_token(same_refresh).await), "refresh_token");
        assert_eq!(store.token_by_access("access-4").await.unwrap(), None);
        assert_eq!(store.token_by_id(refused_id).await.unwrap(), None);
        assert_eq!(count(&session, &ks, "oauth2_tokens").await, 1);
        assert_eq!(count(&session, &ks, "oauth2_token_ids").await, 1);
        assert_eq!(count(&session, &ks, "oauth2_refresh_tokens").await, 1);

        // Keys drawn here are written without a transaction; a client's
        // key is still checked against them.
        let drawn = token("drawn-access", Some("drawn-refresh"));
        store
            .insert_drawn_token(drawn.clone(), Drawn::ALL)
            .await
            .expect("drawn insert");
        assert_eq!(
            store.token_by_refresh("drawn-refresh").await.unwrap(),
            Some(drawn.clone())
        );
        assert_eq!(store.token_by_id(drawn.id).await.unwrap(), Some(drawn.clone()));
        assert_eq!(
            conflict_on(store.insert_token(token("drawn-access", None)).await),
            "access_token"
        );
        let fresh_id = Drawn {
            id: true,
            ..Drawn::default()
        };
        let mut chosen = token("drawn-access", None);
        assert_eq!(
            conflict_on(store.insert_drawn_token(chosen.clone(), fresh_id).await),
            "access_token"
        );
        chosen.access_token = "chosen-access".into();
        store
            .insert_drawn_token(chosen.clone(), fresh_id)
            .await
            .expect("insert");
        assert_eq!(store.token_by_id(chosen.id).await.unwrap(), Some(chosen.clone()));
        assert_eq!(store.delete_token(drawn.id).await.unwrap(), Some(drawn.clone()));
        assert_eq!(store.delete_token(chosen.id).await.unwrap(), Some(chosen));
        assert_eq!(store.token_by_access("drawn-access").await.unwrap(), None);
        assert_eq!(store.token_by_refresh("drawn-refresh").await.unwrap(), None);

        // Kong's update: new access and refresh tokens; the old keys find nothing.
        let mut updated = t.clone();
        updated.access_token = "access-1b".into();
        updated.refresh_token = Some("refresh-1b".into());
        updated.scope = Some("profile".into());
        store.replace_token(updated.clone()).await.expect("replace");
        assert_eq!(store.token_by_access("access-1").await.unwrap(), None);
        assert_eq!(store.token_by_refresh("refresh-1").await.unwrap(), None);
        assert_eq!(store.token_by_access("access-1b").await.unwrap(), Some(updated.clone()));
        assert_eq!(
            store.token_by_refresh("refresh-1b").await.unwrap(),
            Some(updated.clone())
        );
        assert_eq!(store.token_by_id(t.id).await.unwrap(), Some(updated.clone()));
        // An update in place keeps its keys.
        updated.scope = Some("email profile".into());
        store.replace_token(updated.clone()).await.expect("replace in place");
        assert_eq!(
            store.token_by_refresh("refresh-1b").await.unwrap(),
            Some(updated.clone())
        );
        let other = token("access-5", None);
        store.insert_token(other.clone()).await.expect("insert");
        let mut clash = updated.clone();
        clash.access_token = "access-5".into();
        assert_eq!(conflict_on(store.replace_token(clash).await), "access_token");
        assert_eq!(store.token_by_id(t.id).await.unwrap(), Some(updated.clone()));
        assert!(matches!(
            store.replace_token(token("nobody", None)).await,
            Err(TokenStoreError::NotFound)
        ));

        // Revocation: once.
        assert_eq!(store.delete_token(t.id).await.unwrap(), Some(updated.clone()));
        assert_eq!(store.delete_token(t.id).await.unwrap(), None);
        assert_eq!(store.token_by_access("access-1b").await.unwrap(), None);
        assert_eq!(store.token_by_refresh("refresh-1b").await.unwrap(), None);
        assert_eq!(count(&session, &ks, "oauth2_refresh_tokens").await, 0);

        // Expiry: the row's TTL is its purge time; Cassandra removes it.
        let mut short = token("access-short", None);
        short.expires_in = 1;
        store.insert_token(short.clone()).await.expect("insert");
        let mut never = token("access-never", Some("refresh-never"));
        never.expires_in = 0;
        store.insert_token(never.clone()).await.expect("insert");
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert_eq!(store.token_by_access("access-short").await.unwrap(), None);
        assert_eq!(store.token_by_id(short.id).await.unwrap(), None);
        assert_eq!(
            count(&session, &ks, "oauth2_tokens").await,
            2,
            "access-5 and access-never"
        );
        assert_eq!(store.token_by_refresh("refresh-never").await.unwrap(), Some(never));
    });
}

#[test]
fn token_pages_cover_every_token_once_and_codes_are_taken_once() {
    let (_server, config) = CassandraServer::bootstrapped();
    let store = std::sync::Arc::new(CassandraTokens::new(config).expect("store"));
    runtime().block_on(async {
        let mut saved = BTreeSet::new();
        for n in 0..25 {
            let t = token(&format!("paged-{n}"), None);
            saved.insert(t.id);
            store.insert_token(t).await.expect("insert");
        }
        let mut seen = BTreeSet::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = store.list_tokens(cursor.as_deref(), 10).await.expect("page");
            pages += 1;
            for t in &page.tokens {
                assert!(seen.insert(t.id), "{} listed twice", t.id);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, saved);
        assert_eq!(pages, 3);
        assert!(matches!(
            store.list_tokens(Some("not-a-uuid"), 10).await,
            Err(TokenStoreError::BadCursor)
        ));

        let code = AuthCode {
            id: Uuid::new_v4(),
            created_at: now(),
            service: None,
            credential: Uuid::new_v4(),
            code: "code-1".into(),
            authenticated_userid: Some("user".into()),
            scope: None,
            challenge: None,
            challenge_method: None,
            plugin: None,
        };
        store.insert_code(code.clone()).await.expect("code");
        assert!(matches!(
            store.insert_code(code.clone()).await,
            Err(TokenStoreError::Conflict { field: "code", .. })
        ));
        // Two exchanges at once: exactly one gets the code.
        let (a, b) = tokio::join!(store.take_code("code-1"), store.take_code("code-1"));
        let taken = [a.unwrap(), b.unwrap()];
        assert_eq!(taken.iter().filter(|c| c.is_some()).count(), 1, "{taken:?}");
        assert_eq!(taken.into_iter().flatten().next(), Some(code));
        assert_eq!(store.take_code("code-1").await.unwrap(), None);
    });
}

#[test]
fn sessions_and_acme_data_expire_and_list_by_prefix() {
    let (server, config) = CassandraServer::bootstrapped();
    let ks = server.keyspace.clone();
    let store = CassandraKv::new(config.clone()).expect("store");
    runtime().block_on(async {
        let session = strait_store::cassandra::connect(&config).await.expect("connect");
        assert_eq!(store.backend(), "cassandra");
        store
            .put(Table::Sessions, "s:one", b"alice".to_vec(), Some(3600))
            .await
            .unwrap();
        store.put(Table::Acme, "s:one", b"cert".to_vec(), None).await.unwrap();
        assert_eq!(
            store.get(Table::Sessions, "s:one").await.unwrap(),
            Some(b"alice".to_vec())
        );
        assert_eq!(store.get(Table::Acme, "s:one").await.unwrap(), Some(b"cert".to_vec()));
        store
            .put(Table::Sessions, "s:one", b"alice-2".to_vec(), Some(3600))
            .await
            .unwrap();
        assert_eq!(
            store.get(Table::Sessions, "s:one").await.unwrap(),
            Some(b"alice-2".to_vec())
        );
        // The row carries the entry's TTL.
        let ttl: (Option<i32>,) = session
            .query_unpaged(
                format!("SELECT TTL(value) FROM \"{ks}\".runtime_kv WHERE tbl = 'sessions' AND key = 's:one'"),
                (),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .first_row()
            .unwrap();
        assert!(ttl.0.is_some_and(|t| (3590..=3600).contains(&t)), "{ttl:?}");

        store
            .put(Table::Sessions, "s:short", b"x".to_vec(), Some(1))
            .await
            .unwrap();
        store
            .put(Table::Sessions, "s:gone", b"x".to_vec(), Some(0))
            .await
            .unwrap();
        assert_eq!(store.get(Table::Sessions, "s:gone").await.unwrap(), None);
        tokio::time::sleep(Duration::from_millis(2_200)).await;
        assert_eq!(store.get(Table::Sessions, "s:short").await.unwrap(), None);
        assert!(!store.delete(Table::Sessions, "s:short").await.unwrap());
        assert!(store.delete(Table::Acme, "s:one").await.unwrap());
        assert_eq!(store.get(Table::Acme, "s:one").await.unwrap(), None);

        // Listing: only the table and prefix asked for, every entry once across pages.
        for n in 0..30 {
            store
                .put(Table::Sessions, &format!("s:{n:02}"), vec![n], Some(3600))
                .await
                .unwrap();
            store
                .put(Table::Sessions, &format!("i:{n:02}"), vec![n], Some(3600))
                .await
                .unwrap();
            store
                .put(Table::Acme, &format!("s:{n:02}"), vec![n], None)
                .await
                .unwrap();
        }
        let mut seen = BTreeSet::new();
        let mut cursor = None;
        loop {
            let page = store.list(Table::Sessions, "s:", cursor.as_deref(), 7).await.unwrap();
            assert!(page.entries.len() <= 7);
            for (key, _) in page.entries {
                assert!(key.starts_with("s:"), "{key}");
                assert!(seen.insert(key.clone()), "{key} listed twice");
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), 31, "s:00..s:29 and s:one");
        assert!(seen.contains("s:one"));
        assert!(store.list(Table::Sessions, "s:", Some("x"), 7).await.is_err());
    });
}

#[test]
fn migrations_up_adds_the_runtime_tables_to_an_older_keyspace() {
    let (server, config) = CassandraServer::bootstrapped();
    let ks = server.keyspace.clone();
    let older = CassandraTokens::new(config.clone()).expect("store");
    runtime().block_on(async {
        let session = strait_store::cassandra::connect(&config).await.expect("connect");
        // As a keyspace bootstrapped by a build that knew only 000_base.
        for table in [
            "oauth2_tokens",
            "oauth2_token_ids",
            "oauth2_refresh_tokens",
            "oauth2_codes",
            "runtime_kv",
            "ratelimiting_metrics",
        ] {
            session
                .query_unpaged(format!("DROP TABLE \"{ks}\".{table}"), ())
                .await
                .expect("drop");
        }
        session
            .query_unpaged(
                format!("UPDATE \"{ks}\".schema_meta SET executed = ['000_base'] WHERE subsystem = 'core'"),
                (),
            )
            .await
            .expect("older");
        let refused = older.check_schema().expect_err("pending migrations");
        assert!(
            refused.to_string().contains("pending migrations (001_runtime)"),
            "{refused}"
        );
        assert_eq!(schema::up(&session, &config).await.expect("up"), vec!["001_runtime"]);
        assert_eq!(
            schema::up(&session, &config).await.expect("up again"),
            Vec::<String>::new()
        );
        match schema::state(&session, &config).await.expect("state") {
            schema::State::Executed { executed, pending } => {
                assert_eq!(executed, ["000_base", "001_runtime"]);
                assert!(pending.is_empty());
            }
            other => panic!("{other:?}"),
        }
    });
    let store = CassandraTokens::new(config).expect("store");
    store.check_schema().expect("up to date");
    runtime().block_on(async {
        store.insert_token(token("after-up", None)).await.expect("insert");
        assert!(store.token_by_access("after-up").await.unwrap().is_some());
    });
}

#[test]
fn cluster_counters_sum_the_nodes_and_keep_the_newest_count() {
    use strait_runtime::cluster_counters::{instance, stamp, ClusterCounters, CounterRow};
    let (server, config) = CassandraServer::bootstrapped();
    let ks = server.keyspace.clone();
    let counters = strait_store::cassandra::CassandraCounters::new(config.clone()).expect("counters");
    runtime().block_on(async {
        let session = strait_store::cassandra::connect(&config).await.expect("connect");
        // Another node's count of the same window, as it would write it.
        session
            .query_unpaged(
                format!(
                    "INSERT INTO \"{ks}\".ratelimiting_metrics (key, window_start, node, hits) \
                     VALUES ('r:s:1.2.3.4:hour', 3600, ?, 5) USING TTL 3660"
                ),
                (Uuid::new_v4(),),
            )
            .await
            .expect("other node");
        let row = |count: i64, stamp: i64| CounterRow {
            key: "r:s:1.2.3.4:hour".into(),
            window: 3600,
            count,
            ttl: 3660,
            stamp,
        };
        let older = stamp();
        let newer = stamp();
        assert_eq!(counters.exchange(vec![row(2, newer)]).await.unwrap(), [7]);
        // A late write of an older count changes nothing.
        assert_eq!(counters.exchange(vec![row(1, older)]).await.unwrap(), [7]);
        let other_window = CounterRow {
            window: 7200,
            ..row(1, stamp())
        };
        assert_eq!(
            counters.exchange(vec![row(3, stamp()), other_window]).await.unwrap(),
            [8, 1]
        );
        let (ttl,): (Option<i32>,) = session
            .query_unpaged(
                format!(
                    "SELECT TTL(hits) FROM \"{ks}\".ratelimiting_metrics \
                     WHERE key = 'r:s:1.2.3.4:hour' AND window_start = 3600 AND node = ?"
                ),
                (instance(),),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .first_row()
            .unwrap();
        assert!(ttl.is_some_and(|t| (3600..=3660).contains(&t)), "{ttl:?}");
    });
}
