//! Secret references resolved when a snapshot compiles: the `env` vault
//! (Kong's: `{vault://env/my-secret}` reads `MY_SECRET`) and the `file`
//! vault (a directory of one-secret files, as Kubernetes and Docker mount
//! them), each usable directly by name or through a `vaults` entity whose
//! `prefix` names it and whose `config` sets it up.
//!
//! Entities keep the reference; only compiled parts (TLS keys, plugin
//! instances) hold values. Error messages name the field and the reference,
//! never a value. Values are fingerprinted so the refresh job can tell
//! when a rotated secret needs a rebuild without keeping a second copy.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Component, Path, PathBuf};
use std::sync::RwLock;

use serde_json::{Map, Value};
use strait_core::vault::{parse_reference, Reference};
use strait_core::{Entity, Vault};
use strait_router::CowMap;
use uuid::Uuid;

use crate::snapshot::EntityState;

/// Node-wide defaults of the vault implementations, used by references
/// that name an implementation directly (`{vault://file/...}`): Kong's
/// `vault_env_prefix`, and `vault_file_base_path`.
#[derive(Debug, Clone, Default)]
pub struct VaultDefaults {
    pub env_prefix: Option<String>,
    pub file_base_path: Option<PathBuf>,
}

static DEFAULTS: RwLock<Option<VaultDefaults>> = RwLock::new(None);

/// Sets the node's vault defaults (read at every resolution).
pub fn set_defaults(defaults: VaultDefaults) {
    if let Ok(mut slot) = DEFAULTS.write() {
        *slot = Some(defaults);
    }
}

fn defaults() -> VaultDefaults {
    DEFAULTS.read().ok().and_then(|d| d.clone()).unwrap_or_default()
}

/// The largest secret file read (a certificate chain fits many times).
const MAX_FILE_SECRET: u64 = 1 << 20;

/// The value `reference` stands for, reading the vaults of `vaults`.
pub(crate) fn resolve(reference: &str, vaults: &CowMap<Uuid, Vault>) -> Result<String, String> {
    let parsed = parse_reference(reference)?;
    let entity = vaults.values().find(|v| v.prefix == parsed.vault);
    let (implementation, mut config) = match entity {
        Some(vault) => (vault.name.as_str(), vault.config.clone()),
        None if strait_core::vault::VAULT_NAMES.contains(&parsed.vault.as_str()) => (parsed.vault.as_str(), Map::new()),
        None => return Err(format!("vault '{}' not found", parsed.vault)),
    };
    for (name, value) in &parsed.options {
        config.insert(name.clone(), Value::String(value.clone()));
    }
    let raw = match implementation {
        "env" => read_env(&config, &parsed)?,
        "file" => read_file(&config, &parsed)?,
        other => return Err(format!("vault '{other}' is not installed")),
    };
    match &parsed.key {
        None => Ok(raw),
        Some(key) => select_key(&raw, key),
    }
}

fn config_text<'a>(config: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    config.get(name).and_then(Value::as_str)
}

/// Kong's env vault: `<prefix><resource>`, dashes as underscores, upper
/// case; version 2 is `<NAME>_PREVIOUS`.
fn read_env(config: &Map<String, Value>, reference: &Reference) -> Result<String, String> {
    let prefix = config_text(config, "prefix")
        .map(str::to_string)
        .or_else(|| defaults().env_prefix)
        .unwrap_or_default();
    let mut name = format!("{prefix}{}", reference.resource)
        .replace('-', "_")
        .to_ascii_uppercase();
    if reference.version == Some(2) {
        name.push_str("_PREVIOUS");
    }
    match std::env::var(&name) {
        Ok(value) => Ok(value),
        Err(std::env::VarError::NotPresent) => Err(format!("environment variable {name} is not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("environment variable {name} is not UTF-8")),
    }
}

/// The file vault: `<base_path>/<resource>`, one trailing newline dropped
/// (what `echo` and most secret tools leave). A resource cannot leave the
/// base directory.
fn read_file(config: &Map<String, Value>, reference: &Reference) -> Result<String, String> {
    if reference.version.is_some() {
        return Err("the file vault keeps no versions".to_string());
    }
    let base = config_text(config, "base_path")
        .map(PathBuf::from)
        .or_else(|| defaults().file_base_path)
        .ok_or("the file vault has no base_path (set vault_file_base_path)")?;
    let relative = Path::new(&reference.resource);
    if !relative.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!("file resource '{}' leaves the base path", reference.resource));
    }
    let path = base.join(relative);
    let shown = path.display();
    let file = std::fs::File::open(&path).map_err(|e| format!("cannot read {shown}: {}", e.kind()))?;
    let mut bytes = Vec::new();
    use std::io::Read;
    file.take(MAX_FILE_SECRET + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {}", e.kind()))?;
    if bytes.len() as u64 > MAX_FILE_SECRET {
        return Err(format!("{shown} is larger than {MAX_FILE_SECRET} bytes"));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

/// Kong's `/<key>` suffix: the secret is a flat JSON object, `key` one of
/// its string fields.
fn select_key(raw: &str, key: &str) -> Result<String, String> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(raw) else {
        return Err(format!("the secret is not a JSON object, so it has no key '{key}'"));
    };
    match object.get(key) {
        Some(Value::String(value)) => Ok(value.clone()),
        Some(_) => Err(format!("subfield {key} of the secret is not a string")),
        None => Err(format!("subfield {key} not found in JSON secret")),
    }
}

/// `entity` with its references resolved (`Ok(None)`: it has none). The
/// error names the field and the reference.
pub(crate) fn resolved(entity: &Entity, vaults: &CowMap<Uuid, Vault>) -> Result<Option<Entity>, String> {
    strait_core::schema::resolve_references(entity, |_, reference| {
        resolve(reference, vaults).map_err(|why| format!("could not resolve {reference}: {why}"))
    })
    .map_err(|error| match error.path.is_empty() {
        true => error.message,
        false => format!("{}: {}", error.path, error.message),
    })
}

/// Whether a certificate has a reference in any of its key or cert fields.
pub(crate) fn certificate_has_reference(cert: &strait_core::Certificate) -> bool {
    use strait_core::vault::is_reference;
    [
        Some(&cert.cert),
        Some(&cert.key),
        cert.cert_alt.as_ref(),
        cert.key_alt.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|v| is_reference(v))
}

/// The entities of `state` that may hold references (certificates and
/// plugins that do, every key).
fn holders(state: &EntityState) -> Vec<Entity> {
    let certificates = state
        .certificates
        .values()
        .filter(|c| certificate_has_reference(c))
        .cloned()
        .map(Entity::Certificate);
    let keys = state.keys.values().cloned().map(Entity::Key);
    let plugins = state
        .plugins
        .values()
        .filter(|p| strait_core::schema::plugin_has_references(p))
        .cloned()
        .map(Entity::Plugin);
    certificates.chain(keys).chain(plugins).collect()
}

/// What each reference in use resolves to now, fingerprinted (`Err`: why
/// it does not resolve).
pub(crate) type Fingerprints = BTreeMap<String, Result<u64, String>>;

pub(crate) fn fingerprints(state: &EntityState) -> Fingerprints {
    let mut out = Fingerprints::new();
    for entity in holders(state) {
        for (_, reference) in strait_core::schema::references_in(&entity) {
            if out.contains_key(&reference) {
                continue;
            }
            let value = resolve(&reference, &state.vaults).map(|value| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                value.hash(&mut hasher);
                hasher.finish()
            });
            out.insert(reference, value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vaults(list: Vec<Vault>) -> CowMap<Uuid, Vault> {
        let mut map = CowMap::default();
        for vault in list {
            map.insert(vault.id, vault);
        }
        map
    }

    fn vault(prefix: &str, name: &str, config: Value) -> Vault {
        Vault {
            id: Uuid::new_v4(),
            created_at: 1,
            updated_at: 1,
            prefix: prefix.into(),
            name: name.into(),
            description: None,
            config: config.as_object().cloned().unwrap_or_default(),
            tags: None,
        }
    }

    #[test]
    fn env_references_read_kongs_variable_names() {
        std::env::set_var("STRAIT_T_DB_PASSWORD", "hunter2");
        std::env::set_var("STRAIT_T_DB_PASSWORD_PREVIOUS", "hunter1");
        std::env::set_var("STRAIT_T_CREDS", r#"{"user":"u1","n":3}"#);
        let none = vaults(vec![]);
        assert_eq!(resolve("{vault://env/strait-t-db-password}", &none).unwrap(), "hunter2");
        assert_eq!(
            resolve("{vault://env/strait-t-db-password#2}", &none).unwrap(),
            "hunter1"
        );
        assert_eq!(resolve("{vault://env/strait_t_creds/user}", &none).unwrap(), "u1");
        assert!(resolve("{vault://env/strait_t_creds/n}", &none)
            .unwrap_err()
            .contains("not a string"));
        assert!(resolve("{vault://env/strait_t_creds/x}", &none)
            .unwrap_err()
            .contains("not found"));
        let missing = resolve("{vault://env/strait-t-nope}", &none).unwrap_err();
        assert_eq!(missing, "environment variable STRAIT_T_NOPE is not set");

        let prefixed = vaults(vec![vault("my-env", "env", json!({"prefix": "strait-t-"}))]);
        assert_eq!(resolve("{vault://my-env/db-password}", &prefixed).unwrap(), "hunter2");
        assert_eq!(
            resolve("{vault://env/db-password?prefix=STRAIT_T_}", &none).unwrap(),
            "hunter2"
        );
        assert!(resolve("{vault://other/x}", &prefixed)
            .unwrap_err()
            .contains("vault 'other' not found"));
    }

    #[test]
    fn file_references_stay_in_their_directory() {
        let dir = std::env::temp_dir().join(format!("strait-secrets-{}", Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("db")).unwrap();
        std::fs::write(dir.join("db/password"), "s3cret\n").unwrap();
        let files = vaults(vec![vault(
            "files",
            "file",
            json!({"base_path": dir.to_str().unwrap()}),
        )]);
        assert_eq!(resolve("{vault://files/db%2Fpassword}", &files).unwrap(), "s3cret");
        let escape = resolve("{vault://files/..%2Fetc%2Fpasswd}", &files).unwrap_err();
        assert!(escape.contains("leaves the base path"), "{escape}");
        let missing = resolve("{vault://files/nope}", &files).unwrap_err();
        assert!(
            missing.contains("cannot read") && missing.contains("not found"),
            "{missing}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
