//! The named LMDB databases and how keys and values are laid out in them.
//!
//! - `<table>`: 16-byte id -> JSON of the typed entity.
//! - `<table>:<field>`: unique value (long values: 400-byte prefix ++ MD5) -> 16-byte id.
//! - `<table>:by:<field>`: parent id ++ child id -> empty.
//! - `meta`: `config_version`, `changelog_floor` -> u64 big-endian; `config_hash` -> md5 hex.
//! - `changelog`: version u64 BE ++ sequence u32 BE -> JSON [`LogRecord`].

use std::borrow::Cow;
use std::collections::HashMap;

use heed::types::Bytes;
use heed::{Database, Env, RoTxn, RwTxn, WithoutTls};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use strait_core::EntityKind;

use crate::codec::corrupt;
use uuid::Uuid;

use crate::keys::{FOREIGN_FIELDS, UNIQUE_FIELDS};
use crate::{ChangeOp, StoreError};

pub(super) type Db = Database<Bytes, Bytes>;

pub(super) const META_TABLE: &str = "meta";
pub(super) const CHANGELOG_TABLE: &str = "changelog";
pub(super) const CONFIG_VERSION: &[u8] = b"config_version";
/// md5 of the declarative document the current configuration was loaded from.
pub(super) const CONFIG_HASH: &[u8] = b"config_hash";
/// Highest version some of whose change log entries were trimmed.
pub(super) const CHANGELOG_FLOOR: &[u8] = b"changelog_floor";

/// Unique values longer than this are stored as a prefix plus a digest, to
/// stay under LMDB's key size limit.
const MAX_RAW_UNIQUE_KEY: usize = 400;

/// Handles to every database of the environment.
pub(super) struct Tables {
    entities: HashMap<EntityKind, Db>,
    unique: HashMap<(EntityKind, &'static str), Db>,
    foreign: HashMap<(EntityKind, &'static str), Db>,
    pub meta: Db,
    pub changelog: Db,
}

impl Tables {
    /// Create (or open) every database in one write transaction.
    pub fn create(env: &Env<WithoutTls>) -> Result<Tables, StoreError> {
        let mut txn = env.write_txn()?;
        let mut db = |name: &str| env.create_database::<Bytes, Bytes>(&mut txn, Some(name));
        let mut entities = HashMap::new();
        for kind in EntityKind::ALL {
            entities.insert(kind, db(kind.table())?);
        }
        let mut unique = HashMap::new();
        for &(kind, field) in UNIQUE_FIELDS {
            unique.insert((kind, field), db(&format!("{}:{field}", kind.table()))?);
        }
        let mut foreign = HashMap::new();
        for &(kind, field, _) in FOREIGN_FIELDS {
            foreign.insert((kind, field), db(&format!("{}:by:{field}", kind.table()))?);
        }
        let meta = db(META_TABLE)?;
        let changelog = db(CHANGELOG_TABLE)?;
        txn.commit()?;
        Ok(Tables {
            entities,
            unique,
            foreign,
            meta,
            changelog,
        })
    }

    pub fn entity(&self, kind: EntityKind) -> Db {
        // Every kind got a table in `create`.
        self.entities[&kind]
    }

    /// Entity tables and index tables: everything `replace` clears.
    pub fn config_tables(&self) -> impl Iterator<Item = Db> + '_ {
        let indexes = self.unique.values().chain(self.foreign.values());
        self.entities.values().chain(indexes).copied()
    }

    pub fn unique(&self, kind: EntityKind, field: &str) -> Result<Db, StoreError> {
        lookup(&self.unique, kind, field)
    }

    pub fn foreign(&self, kind: EntityKind, field: &str) -> Result<Db, StoreError> {
        lookup(&self.foreign, kind, field)
    }
}

fn lookup(map: &HashMap<(EntityKind, &'static str), Db>, kind: EntityKind, field: &str) -> Result<Db, StoreError> {
    map.iter()
        .find(|((k, f), _)| *k == kind && *f == field)
        .map(|(_, db)| *db)
        .ok_or_else(|| StoreError::UnknownIndex {
            kind,
            field: field.to_string(),
        })
}

/// Key of a unique index entry. Short values are stored as they are; long
/// ones as a fixed-length prefix ++ MD5, a length no raw key can have; the
/// empty value (LMDB refuses zero-length keys) as zeros of another length
/// no raw or hashed key has. Validation refuses empty unique values, so
/// that last form is only a guard: no input reaches LMDB as a bad key.
pub(super) fn unique_index_key(value: &str) -> Cow<'_, [u8]> {
    const EMPTY_VALUE_KEY: [u8; MAX_RAW_UNIQUE_KEY + 1] = [0; MAX_RAW_UNIQUE_KEY + 1];
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Cow::Borrowed(&EMPTY_VALUE_KEY);
    }
    if bytes.len() <= MAX_RAW_UNIQUE_KEY {
        return Cow::Borrowed(bytes);
    }
    let mut key = bytes[..MAX_RAW_UNIQUE_KEY].to_vec();
    key.extend_from_slice(&Md5::digest(bytes));
    Cow::Owned(key)
}

/// Key of a foreign-key index entry: parent id ++ child id.
pub(super) fn foreign_index_key(parent: Uuid, child: Uuid) -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(parent.as_bytes());
    key[16..].copy_from_slice(child.as_bytes());
    key
}

pub(super) fn changelog_key(version: u64, seq: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&version.to_be_bytes());
    key[8..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// The value of a change log entry; the version lives in the key.
#[derive(Serialize, Deserialize)]
pub(super) struct LogRecord {
    pub kind: EntityKind,
    pub op: ChangeOp,
    pub id: Option<Uuid>,
}

pub(super) fn decode_uuid(table: &str, bytes: &[u8]) -> Result<Uuid, StoreError> {
    Uuid::from_slice(bytes).map_err(|_| corrupt(table, bytes, "expected a 16-byte id"))
}

pub(super) fn decode_u64(table: &str, key: &[u8], bytes: &[u8]) -> Result<u64, StoreError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| corrupt(table, key, "expected a u64"))?;
    Ok(u64::from_be_bytes(array))
}

/// Read a u64 from `meta` (0 when absent).
pub(super) fn read_meta(tables: &Tables, txn: &RoTxn, key: &[u8]) -> Result<u64, StoreError> {
    match tables.meta.get(txn, key)? {
        Some(bytes) => decode_u64(META_TABLE, key, bytes),
        None => Ok(0),
    }
}

pub(super) fn write_meta(tables: &Tables, txn: &mut RwTxn, key: &[u8], value: u64) -> Result<(), StoreError> {
    Ok(tables.meta.put(txn, key, &value.to_be_bytes())?)
}
