//! Entities as the stores keep them: the JSON of each typed entity, the
//! same for every dialect (LMDB values, PostgreSQL `jsonb` columns).

use strait_core::{Config, Entity, EntityKind};
use uuid::Uuid;

use crate::StoreError;

/// A record that does not decode, named by table and key (an id when the
/// key is one).
pub(crate) fn corrupt(table: &str, key: &[u8], reason: impl ToString) -> StoreError {
    let id = Uuid::from_slice(key)
        .map(|id| id.to_string())
        .unwrap_or_else(|_| String::from_utf8_lossy(key).into_owned());
    StoreError::Corrupt {
        table: table.to_string(),
        id,
        reason: reason.to_string(),
    }
}

/// JSON of the typed entity inside `entity` (no kind tag: the table says it).
pub(crate) fn encode_entity(entity: &Entity) -> Result<Vec<u8>, StoreError> {
    let encoded = match entity {
        Entity::Vault(e) => serde_json::to_vec(e),
        Entity::KeySet(e) => serde_json::to_vec(e),
        Entity::Key(e) => serde_json::to_vec(e),
        Entity::ConsumerGroup(e) => serde_json::to_vec(e),
        Entity::ConsumerGroupConsumer(e) => serde_json::to_vec(e),
        Entity::Service(e) => serde_json::to_vec(e),
        Entity::Route(e) => serde_json::to_vec(e),
        Entity::FilterChain(e) => serde_json::to_vec(e),
        Entity::Upstream(e) => serde_json::to_vec(e),
        Entity::Target(e) => serde_json::to_vec(e),
        Entity::Consumer(e) => serde_json::to_vec(e),
        Entity::Plugin(e) => serde_json::to_vec(e),
        Entity::Certificate(e) => serde_json::to_vec(e),
        Entity::Sni(e) => serde_json::to_vec(e),
        Entity::CaCertificate(e) => serde_json::to_vec(e),
        Entity::KeyauthCredential(e) => serde_json::to_vec(e),
        Entity::BasicauthCredential(e) => serde_json::to_vec(e),
        Entity::Acl(e) => serde_json::to_vec(e),
        Entity::JwtSecret(e) => serde_json::to_vec(e),
        Entity::HmacauthCredential(e) => serde_json::to_vec(e),
        Entity::Oauth2Credential(e) => serde_json::to_vec(e),
    };
    encoded.map_err(StoreError::Encode)
}

/// Decode a stored entity of `kind` and check that it is stored under its id.
pub(crate) fn decode_entity(kind: EntityKind, key: &[u8], bytes: &[u8]) -> Result<Entity, StoreError> {
    let table = kind.table();
    let decoded = match kind {
        EntityKind::Vaults => serde_json::from_slice(bytes).map(Entity::Vault),
        EntityKind::KeySets => serde_json::from_slice(bytes).map(Entity::KeySet),
        EntityKind::Keys => serde_json::from_slice(bytes).map(Entity::Key),
        EntityKind::ConsumerGroups => serde_json::from_slice(bytes).map(Entity::ConsumerGroup),
        EntityKind::ConsumerGroupConsumers => serde_json::from_slice(bytes).map(Entity::ConsumerGroupConsumer),
        EntityKind::Services => serde_json::from_slice(bytes).map(Entity::Service),
        EntityKind::Routes => serde_json::from_slice(bytes).map(Entity::Route),
        EntityKind::FilterChains => serde_json::from_slice(bytes).map(Entity::FilterChain),
        EntityKind::Upstreams => serde_json::from_slice(bytes).map(Entity::Upstream),
        EntityKind::Targets => serde_json::from_slice(bytes).map(Entity::Target),
        EntityKind::Consumers => serde_json::from_slice(bytes).map(Entity::Consumer),
        EntityKind::Plugins => serde_json::from_slice(bytes).map(Entity::Plugin),
        EntityKind::Certificates => serde_json::from_slice(bytes).map(Entity::Certificate),
        EntityKind::Snis => serde_json::from_slice(bytes).map(Entity::Sni),
        EntityKind::CaCertificates => serde_json::from_slice(bytes).map(Entity::CaCertificate),
        EntityKind::KeyauthCredentials => serde_json::from_slice(bytes).map(Entity::KeyauthCredential),
        EntityKind::BasicauthCredentials => serde_json::from_slice(bytes).map(Entity::BasicauthCredential),
        EntityKind::Acls => serde_json::from_slice(bytes).map(Entity::Acl),
        EntityKind::JwtSecrets => serde_json::from_slice(bytes).map(Entity::JwtSecret),
        EntityKind::HmacauthCredentials => serde_json::from_slice(bytes).map(Entity::HmacauthCredential),
        EntityKind::Oauth2Credentials => serde_json::from_slice(bytes).map(Entity::Oauth2Credential),
    };
    let entity = decoded.map_err(|error| corrupt(table, key, error))?;
    if entity.id().as_bytes().as_slice() != key {
        return Err(corrupt(table, key, "entity id differs from its key"));
    }
    Ok(entity)
}

/// Add `entity` to the list of its kind in `config`.
pub(crate) fn push_entity(config: &mut Config, entity: Entity) {
    config.push(entity);
}
