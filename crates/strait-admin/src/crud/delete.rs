//! Deletes with Kong's cascades, all in the one transaction of the delete:
//! a consumer takes its credentials and consumer-scoped plugins, a route or
//! service its plugins, an upstream its targets, a certificate its SNIs.
//! A service still used by routes is refused, as Kong refuses it.

use std::collections::BTreeSet;

use http::StatusCode;
use strait_core::{ConfigChange, Entity, EntityKind};
use strait_store::keys::children_of;
use uuid::Uuid;

use super::write::commit;
use crate::errors::still_referenced;
use crate::response::{empty_response, failure, AdminResponse};
use crate::AdminState;

/// Children that keep their parent alive instead of being deleted with it.
fn restricts(parent: EntityKind, child: EntityKind) -> bool {
    parent == EntityKind::Services && child == EntityKind::Routes
}

/// The delete of `kind`/`id` and of everything that cascades from it.
pub fn cascade(state: &AdminState, kind: EntityKind, id: Uuid) -> Result<Vec<ConfigChange>, AdminResponse> {
    let mut seen = BTreeSet::new();
    let mut changes = Vec::new();
    collect(state, kind, id, &mut seen, &mut changes)?;
    Ok(changes)
}

fn collect(
    state: &AdminState,
    kind: EntityKind,
    id: Uuid,
    seen: &mut BTreeSet<(EntityKind, Uuid)>,
    changes: &mut Vec<ConfigChange>,
) -> Result<(), AdminResponse> {
    if !seen.insert((kind, id)) {
        return Ok(());
    }
    for (child_kind, field) in children_of(kind) {
        let children = state
            .store
            .ids_by_foreign(child_kind, field, id)
            .map_err(|e| failure(&e))?;
        if !children.is_empty() && restricts(kind, child_kind) {
            return Err(still_referenced(kind, child_kind));
        }
        for child in children {
            collect(state, child_kind, child, seen, changes)?;
        }
    }
    changes.push(ConfigChange::Delete { kind, id });
    Ok(())
}

/// Deletes `entity` and its cascade; 204 once the proxy no longer serves it.
pub async fn delete_entity(state: &AdminState, entity: &Entity) -> AdminResponse {
    let result = async {
        let changes = cascade(state, entity.kind(), entity.id())?;
        commit(state, changes, None).await
    };
    match result.await {
        Ok(()) => empty_response(StatusCode::NO_CONTENT),
        Err(response) => response,
    }
}
