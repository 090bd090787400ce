//! Certificates' `snis` pseudo-field, as Kong's certificates DAO has it:
//! writes given `snis` create, keep or delete the certificate's SNI
//! entities in the same transaction; reads list the names; a certificate
//! can be addressed by one of its SNI names.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use strait_core::{validate_entity, ConfigChange, Entity, EntityKind};
use uuid::Uuid;

use super::unix_now;
use crate::errors::{field_violation, schema_violation, unique_violation};
use crate::response::{failure, AdminResponse};
use crate::AdminState;

/// The certificate's SNI names, sorted.
pub fn sni_names(state: &AdminState, certificate: Uuid) -> Result<Vec<String>, AdminResponse> {
    let mut names = Vec::new();
    for (_, name) in snis_of(state, certificate)? {
        names.push(name);
    }
    names.sort();
    Ok(names)
}

fn snis_of(state: &AdminState, certificate: Uuid) -> Result<Vec<(Uuid, String)>, AdminResponse> {
    let ids = state
        .store
        .ids_by_foreign(EntityKind::Snis, "certificate", certificate)
        .map_err(|e| failure(&e))?;
    let mut snis = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(Entity::Sni(sni)) = state.store.get(EntityKind::Snis, id).map_err(|e| failure(&e))? {
            snis.push((sni.id, sni.name));
        }
    }
    Ok(snis)
}

/// The certificate that serves SNI `name`.
pub fn by_sni_name(state: &AdminState, name: &str) -> Result<Option<Entity>, AdminResponse> {
    let sni = state
        .store
        .get_by_unique(EntityKind::Snis, "name", name)
        .map_err(|e| failure(&e))?;
    let Some(Entity::Sni(sni)) = sni else { return Ok(None) };
    state
        .store
        .get(EntityKind::Certificates, sni.certificate.id)
        .map_err(|e| failure(&e))
}

/// Removes `snis` from a certificate's input. `None`: leave the SNIs as
/// they are; `replace` (PUT) treats an absent list as empty.
pub fn take_snis(
    kind: EntityKind,
    input: &mut Map<String, Value>,
    replace: bool,
) -> Result<Option<Vec<String>>, AdminResponse> {
    if kind != EntityKind::Certificates {
        return Ok(None);
    }
    let names = match input.remove("snis") {
        None if !replace => return Ok(None),
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(name)) => vec![name],
        Some(Value::Array(items)) => {
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(name) => names.push(name),
                    _ => return Err(field_violation("snis", "expected a string")),
                }
            }
            names
        }
        Some(_) => return Err(field_violation("snis", "expected an array")),
    };
    let mut seen = BTreeSet::new();
    for name in &names {
        if !seen.insert(name.clone()) {
            return Err(field_violation("snis", &format!("{name} is duplicated")));
        }
    }
    Ok(Some(names))
}

/// Store changes that make `certificate`'s SNIs exactly `names`.
pub fn sni_changes(
    state: &AdminState,
    certificate: &Entity,
    names: Option<Vec<String>>,
) -> Result<Vec<ConfigChange>, AdminResponse> {
    let Some(names) = names else { return Ok(Vec::new()) };
    let id = certificate.id();
    let existing = snis_of(state, id)?;
    let mut changes = Vec::new();
    for (sni_id, name) in &existing {
        if !names.contains(name) {
            changes.push(ConfigChange::Delete {
                kind: EntityKind::Snis,
                id: *sni_id,
            });
        }
    }
    for name in names {
        if existing.iter().any(|(_, held)| *held == name) {
            continue;
        }
        let holder = state
            .store
            .get_by_unique(EntityKind::Snis, "name", &name)
            .map_err(|e| failure(&e))?;
        if holder.is_some() {
            let mut fields = Map::new();
            fields.insert("name".into(), Value::String(name));
            return Err(unique_violation(fields));
        }
        let entity = sni_entity(name, id)?;
        changes.push(ConfigChange::Upsert { entity });
    }
    Ok(changes)
}

/// The SNI entity `name` of `certificate`, validated; errors under `snis`.
fn sni_entity(name: String, certificate: Uuid) -> Result<Entity, AdminResponse> {
    let input = json!({ "name": name, "certificate": { "id": certificate } });
    validate_entity(EntityKind::Snis, &input, unix_now()).map_err(|errors| {
        let errors = errors.into_iter().map(|e| e.under("snis")).collect();
        schema_violation(errors)
    })
}

/// The schema checks of a certificate's `snis` without the store: each name
/// must be a valid SNI. Whether another certificate holds one is stored
/// state, which validation leaves to the write.
pub fn check_sni_names(certificate: &Entity, names: Option<Vec<String>>) -> Result<(), AdminResponse> {
    for name in names.into_iter().flatten() {
        sni_entity(name, certificate.id())?;
    }
    Ok(())
}
