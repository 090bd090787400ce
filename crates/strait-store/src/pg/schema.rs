//! The PostgreSQL schema, as versioned migrations.
//!
//! One table per entity kind, named as Kong names it (`services`,
//! `routes`, `keyauth_credentials`, ...): `id uuid PRIMARY KEY`, one `text
//! UNIQUE` column per unique key ([`UNIQUE_FIELDS`]: names, keys, cache
//! keys), one `<field>_id uuid` column per foreign key ([`FOREIGN_FIELDS`])
//! with a real `REFERENCES` constraint and an index on `(<field>_id, id)`,
//! and the entity itself as `entity jsonb`. Every lookup the proxy or the
//! Admin API makes is a primary key or one of those indexes.
//!
//! Foreign keys are `DEFERRABLE INITIALLY DEFERRED`: a transaction may
//! delete a parent before the children it lists with it (the Admin API
//! computes Kong's cascades and writes them in the same transaction), and
//! the database refuses at commit a transaction that would leave a child
//! pointing at nothing.
//!
//! Beside them: `config_meta` (the configuration's version and hash, one
//! row), `change_log` (what each version touched, for the other nodes),
//! and Kong's own bookkeeping tables, `schema_meta` and `locks`.

use strait_core::EntityKind;

use crate::keys::{FOREIGN_FIELDS, UNIQUE_FIELDS};

/// The subsystem every Strait migration belongs to (Kong's `core`).
pub const SUBSYSTEM: &str = "core";

/// One schema step. Migrations run in this order, each in a transaction
/// of its own, and are recorded in `schema_meta` by name.
pub struct Migration {
    pub name: &'static str,
    pub up: fn() -> String,
}

/// Every migration this build knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "000_base",
        up: base,
    },
    Migration {
        name: "001_oauth2_tokens",
        up: oauth2_tokens,
    },
    Migration {
        name: "002_filter_chains",
        up: filter_chains,
    },
    Migration {
        name: "003_runtime_kv",
        up: runtime_kv,
    },
];

/// Entity kinds whose tables a migration after `000_base` makes: `000_base`
/// must stay exactly what the databases that ran it got.
const ADDED_AFTER_BASE: &[EntityKind] = &[EntityKind::FilterChains];

/// Kong's `filter_chains` (proxy-wasm filters per route or service).
fn filter_chains() -> String {
    entity_tables_sql(&[EntityKind::FilterChains])
}

/// The OAuth2 plugin's runtime tables (never configuration: no version,
/// no change log). Every lookup the proxy makes is a primary key: the
/// SHA-256 of the access token or the code. `id` and `refresh_hash` are
/// unique indexes (the Admin API and the refresh grant); `purge_at` and
/// `expires_at` are the TTL indexes expired rows leave through in batches.
/// No foreign key to `oauth2_credentials`: replacing the configuration
/// (`POST /config`) rewrites credential rows and must not take their
/// tokens with them; a deleted application's tokens stop authenticating at
/// once and leave with their TTL.
pub const OAUTH2_TABLES: [&str; 2] = ["oauth2_tokens", "oauth2_authorization_codes"];

/// The runtime key-value store's table (`strait_runtime::kv`: server-side
/// sessions, ACME certificates). Runtime data like the OAuth2 tables: every
/// lookup is the primary key `(tbl, key)`; `expires_at` is the TTL index
/// expired rows leave through in batches.
pub const RUNTIME_KV_TABLE: &str = "runtime_kv";

fn runtime_kv() -> String {
    "\
CREATE TABLE runtime_kv (
  tbl text NOT NULL,
  key text NOT NULL,
  value bytea NOT NULL,
  expires_at bigint,
  CONSTRAINT runtime_kv_pkey PRIMARY KEY (tbl, key)
);
CREATE INDEX runtime_kv_expires_at_idx ON runtime_kv (expires_at) WHERE expires_at IS NOT NULL;
"
    .to_string()
}

fn oauth2_tokens() -> String {
    "\
CREATE TABLE oauth2_tokens (
  access_hash bytea NOT NULL,
  id uuid NOT NULL,
  refresh_hash bytea,
  created_at bigint NOT NULL,
  service_id uuid,
  credential_id uuid NOT NULL,
  token_type text NOT NULL,
  expires_in bigint NOT NULL,
  access_token text NOT NULL,
  refresh_token text,
  authenticated_userid text,
  scope text,
  ttl bigint,
  purge_at bigint,
  CONSTRAINT oauth2_tokens_pkey PRIMARY KEY (access_hash),
  CONSTRAINT oauth2_tokens_id_key UNIQUE (id),
  CONSTRAINT oauth2_tokens_refresh_hash_key UNIQUE (refresh_hash)
);
CREATE INDEX oauth2_tokens_purge_at_idx ON oauth2_tokens (purge_at) WHERE purge_at IS NOT NULL;
CREATE TABLE oauth2_authorization_codes (
  code_hash bytea PRIMARY KEY,
  expires_at bigint NOT NULL,
  code jsonb NOT NULL
);
CREATE INDEX oauth2_authorization_codes_expires_at_idx ON oauth2_authorization_codes (expires_at);
"
    .to_string()
}

/// Kong's bookkeeping tables, made by `bootstrap` before any migration.
pub const BOOKKEEPING: &str = "\
CREATE TABLE IF NOT EXISTS schema_meta (
  key text,
  subsystem text,
  last_executed text,
  executed text[],
  pending text[],
  PRIMARY KEY (key, subsystem)
);
CREATE TABLE IF NOT EXISTS locks (
  key text PRIMARY KEY,
  owner text,
  ttl timestamp with time zone
);
CREATE INDEX IF NOT EXISTS locks_ttl_idx ON locks (ttl);
";

/// The column a foreign key `field` lives in (Kong's `<field>_id`).
pub fn foreign_column(field: &str) -> String {
    format!("{field}_id")
}

/// The column a unique key `field` lives in.
pub fn unique_column(field: &str) -> String {
    field.to_string()
}

/// Quote an identifier (every name here is ours, but quoting keeps words
/// such as `key` or `set` from meaning anything to SQL).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One entity kind's table: its key columns and every statement the store
/// runs on it, written once (not per entity written or read).
pub struct Table {
    pub kind: EntityKind,
    /// Unique keys, in column order: `(field, column)`.
    pub unique: Vec<(&'static str, String)>,
    /// Foreign keys, in column order: `(field, column)`.
    pub foreign: Vec<(&'static str, String)>,
    /// `$1` id, then one parameter per unique and foreign column, then the
    /// entity's JSON as text.
    pub upsert: String,
    pub select_by_id: String,
    pub exists: String,
    pub delete: String,
    pub select_all: String,
    pub page_first: String,
    pub page_after: String,
    /// Per unique field: the entity holding a value.
    pub by_unique: Vec<(&'static str, String)>,
    /// Per foreign field: the children's ids in id order, and the first one.
    pub ids_by: Vec<(&'static str, String)>,
    pub first_child_by: Vec<(&'static str, String)>,
}

impl Table {
    fn new(kind: EntityKind) -> Table {
        let name = ident(kind.table());
        let unique: Vec<(&'static str, String)> = UNIQUE_FIELDS
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, field)| (*field, ident(&unique_column(field))))
            .collect();
        let foreign: Vec<(&'static str, String)> = FOREIGN_FIELDS
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, field, _)| (*field, ident(&foreign_column(field))))
            .collect();
        let columns: Vec<&str> = std::iter::once("id")
            .chain(unique.iter().chain(&foreign).map(|(_, column)| column.as_str()))
            .chain(std::iter::once("entity"))
            .collect();
        let placeholders: Vec<String> = (1..=columns.len())
            .map(|n| match n == columns.len() {
                true => format!("${n}::text::jsonb"),
                false => format!("${n}"),
            })
            .collect();
        let updates: Vec<String> = columns[1..].iter().map(|c| format!("{c} = EXCLUDED.{c}")).collect();
        let upsert = format!(
            "INSERT INTO {name} ({}) VALUES ({}) ON CONFLICT (id) DO UPDATE SET {}",
            columns.join(", "),
            placeholders.join(", "),
            updates.join(", ")
        );
        let by_unique = unique
            .iter()
            .map(|(field, column)| {
                (
                    *field,
                    format!("SELECT id, entity::text FROM {name} WHERE {column} = $1"),
                )
            })
            .collect();
        let ids_by = foreign
            .iter()
            .map(|(field, column)| (*field, format!("SELECT id FROM {name} WHERE {column} = $1 ORDER BY id")))
            .collect();
        let first_child_by = foreign
            .iter()
            .map(|(field, column)| {
                let sql = format!("SELECT id FROM {name} WHERE {column} = $1 ORDER BY id LIMIT 1");
                (*field, sql)
            })
            .collect();
        Table {
            kind,
            upsert,
            select_by_id: format!("SELECT entity::text FROM {name} WHERE id = $1"),
            exists: format!("SELECT 1 FROM {name} WHERE id = $1"),
            delete: format!("DELETE FROM {name} WHERE id = $1"),
            select_all: format!("SELECT id, entity::text FROM {name} ORDER BY id"),
            page_first: format!("SELECT id, entity::text FROM {name} ORDER BY id LIMIT $1"),
            page_after: format!("SELECT id, entity::text FROM {name} WHERE id > $1 ORDER BY id LIMIT $2"),
            by_unique,
            ids_by,
            first_child_by,
            unique,
            foreign,
        }
    }

    /// The statement for `field` in one of the per-field lists.
    pub fn for_field<'t>(list: &'t [(&'static str, String)], field: &str) -> Option<&'t str> {
        list.iter().find(|(f, _)| *f == field).map(|(_, sql)| sql.as_str())
    }
}

/// The table of `kind`.
pub fn table(kind: EntityKind) -> &'static Table {
    static TABLES: std::sync::LazyLock<Vec<Table>> =
        std::sync::LazyLock::new(|| EntityKind::ALL.iter().map(|kind| Table::new(*kind)).collect());
    TABLES
        .iter()
        .find(|t| t.kind == kind)
        .expect("every kind in EntityKind::ALL has a table")
}

fn base() -> String {
    let kinds: Vec<EntityKind> = EntityKind::ALL
        .into_iter()
        .filter(|kind| !ADDED_AFTER_BASE.contains(kind))
        .collect();
    let mut sql = entity_tables_sql(&kinds);
    sql.push_str(
        "\
CREATE TABLE config_meta (
  key text PRIMARY KEY,
  version bigint NOT NULL,
  hash text
);
INSERT INTO config_meta (key, version, hash) VALUES ('config', 0, NULL);
CREATE TABLE change_log (
  version bigint NOT NULL,
  seq integer NOT NULL,
  kind text NOT NULL,
  op text NOT NULL,
  id uuid,
  PRIMARY KEY (version, seq)
);
",
    );
    sql
}

/// The tables of `kinds`, then the foreign-key constraints and indexes of
/// their foreign keys (whose parents exist by then).
fn entity_tables_sql(kinds: &[EntityKind]) -> String {
    let mut sql = String::new();
    for &kind in kinds {
        let t = table(kind);
        sql.push_str(&format!(
            "CREATE TABLE {} (\n  id uuid PRIMARY KEY",
            ident(kind.table())
        ));
        for (_, column) in &t.unique {
            sql.push_str(&format!(",\n  {column} text UNIQUE"));
        }
        for (_, column) in &t.foreign {
            sql.push_str(&format!(",\n  {column} uuid"));
        }
        sql.push_str(",\n  entity jsonb NOT NULL\n);\n");
    }
    // Constraints after every table exists: parents are not always created
    // before their children in EntityKind::ALL's order.
    for (kind, field, parent) in FOREIGN_FIELDS.iter().filter(|(kind, _, _)| kinds.contains(kind)) {
        let table = kind.table();
        let column = foreign_column(field);
        sql.push_str(&format!(
            "ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} (id) DEFERRABLE INITIALLY DEFERRED;\n",
            ident(table),
            ident(&format!("{table}_{column}_fkey")),
            ident(&column),
            ident(parent.table()),
        ));
        sql.push_str(&format!(
            "CREATE INDEX {} ON {} ({}, id);\n",
            ident(&format!("{table}_{column}_idx")),
            ident(table),
            ident(&column),
        ));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_table_and_every_key_a_column() {
        let sql: String = MIGRATIONS.iter().map(|m| (m.up)()).collect();
        for kind in EntityKind::ALL {
            assert!(
                sql.contains(&format!("CREATE TABLE \"{}\" (", kind.table())),
                "{kind:?}"
            );
        }
        assert!(sql.contains("\"service_id\" uuid"));
        assert!(sql.contains("\"name\" text UNIQUE"));
        assert!(sql.contains(
            "ALTER TABLE \"routes\" ADD CONSTRAINT \"routes_service_id_fkey\" FOREIGN KEY (\"service_id\") \
             REFERENCES \"services\" (id) DEFERRABLE INITIALLY DEFERRED;"
        ));
        assert!(sql.contains("CREATE INDEX \"plugins_consumer_id_idx\" ON \"plugins\" (\"consumer_id\", id);"));
    }

    #[test]
    fn a_kind_added_after_the_base_is_made_by_its_own_migration_only() {
        let base = (MIGRATIONS[0].up)();
        assert!(!base.contains("filter_chains"), "000_base must stay what databases ran");
        let added = (MIGRATIONS[2].up)();
        assert!(added.starts_with("CREATE TABLE \"filter_chains\" (\n  id uuid PRIMARY KEY"));
        for column in [
            "\"name\" text UNIQUE",
            "\"route\" text UNIQUE",
            "\"service\" text UNIQUE",
            "\"route_id\" uuid",
        ] {
            assert!(added.contains(column), "{column} in {added}");
        }
        assert!(added.contains(
            "ALTER TABLE \"filter_chains\" ADD CONSTRAINT \"filter_chains_service_id_fkey\" FOREIGN KEY \
             (\"service_id\") REFERENCES \"services\" (id) DEFERRABLE INITIALLY DEFERRED;"
        ));
        assert!(
            !added.contains("routes_service_id_fkey"),
            "only the new table's constraints"
        );
    }

    #[test]
    fn migration_names_are_unique_and_ordered() {
        let names: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
    }
}
