//! Changes to a configuration, as the store commits them and the snapshot
//! compiler applies them.
//!
//! A [`ConfigDelta`] is produced by exactly one store transaction and carries the
//! `config_version` that transaction committed. `Replace` is what `/config` and
//! a declarative file produce; `Changes` is what single Admin API writes produce
//! (one entity upserted or deleted per change, cascades listed explicitly).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::entities::*;

/// Monotonic version of the committed configuration; bumped by every
/// committed store transaction.
pub type ConfigVersion = u64;

/// One entity of any kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "entity", rename_all = "snake_case")]
pub enum Entity {
    Vault(Vault),
    KeySet(KeySet),
    Key(Key),
    ConsumerGroup(ConsumerGroup),
    ConsumerGroupConsumer(ConsumerGroupConsumer),
    Service(Service),
    Route(Route),
    FilterChain(FilterChain),
    /// Boxed: the largest entity (520 bytes, its many hash settings) would
    /// otherwise set the size of every `Entity`, and of every list of them
    /// a configuration is validated and assembled through.
    Upstream(Box<Upstream>),
    Target(Target),
    Consumer(Consumer),
    Plugin(Plugin),
    Certificate(Certificate),
    Sni(Sni),
    CaCertificate(CaCertificate),
    KeyauthCredential(KeyauthCredential),
    BasicauthCredential(BasicauthCredential),
    Acl(Acl),
    JwtSecret(JwtSecret),
    HmacauthCredential(HmacauthCredential),
    Oauth2Credential(Oauth2Credential),
}

impl Entity {
    /// An upstream as an entity (its variant holds it boxed).
    pub fn upstream(upstream: Upstream) -> Entity {
        Entity::Upstream(Box::new(upstream))
    }

    pub fn kind(&self) -> EntityKind {
        match self {
            Entity::Vault(_) => EntityKind::Vaults,
            Entity::KeySet(_) => EntityKind::KeySets,
            Entity::Key(_) => EntityKind::Keys,
            Entity::ConsumerGroup(_) => EntityKind::ConsumerGroups,
            Entity::ConsumerGroupConsumer(_) => EntityKind::ConsumerGroupConsumers,
            Entity::Service(_) => EntityKind::Services,
            Entity::Route(_) => EntityKind::Routes,
            Entity::FilterChain(_) => EntityKind::FilterChains,
            Entity::Upstream(_) => EntityKind::Upstreams,
            Entity::Target(_) => EntityKind::Targets,
            Entity::Consumer(_) => EntityKind::Consumers,
            Entity::Plugin(_) => EntityKind::Plugins,
            Entity::Certificate(_) => EntityKind::Certificates,
            Entity::Sni(_) => EntityKind::Snis,
            Entity::CaCertificate(_) => EntityKind::CaCertificates,
            Entity::KeyauthCredential(_) => EntityKind::KeyauthCredentials,
            Entity::BasicauthCredential(_) => EntityKind::BasicauthCredentials,
            Entity::Acl(_) => EntityKind::Acls,
            Entity::JwtSecret(_) => EntityKind::JwtSecrets,
            Entity::HmacauthCredential(_) => EntityKind::HmacauthCredentials,
            Entity::Oauth2Credential(_) => EntityKind::Oauth2Credentials,
        }
    }

    pub fn id(&self) -> Uuid {
        match self {
            Entity::Vault(e) => e.id,
            Entity::KeySet(e) => e.id,
            Entity::Key(e) => e.id,
            Entity::ConsumerGroup(e) => e.id,
            Entity::ConsumerGroupConsumer(e) => e.id,
            Entity::Service(e) => e.id,
            Entity::Route(e) => e.id,
            Entity::FilterChain(e) => e.id,
            Entity::Upstream(e) => e.id,
            Entity::Target(e) => e.id,
            Entity::Consumer(e) => e.id,
            Entity::Plugin(e) => e.id,
            Entity::Certificate(e) => e.id,
            Entity::Sni(e) => e.id,
            Entity::CaCertificate(e) => e.id,
            Entity::KeyauthCredential(e) => e.id,
            Entity::BasicauthCredential(e) => e.id,
            Entity::Acl(e) => e.id,
            Entity::JwtSecret(e) => e.id,
            Entity::HmacauthCredential(e) => e.id,
            Entity::Oauth2Credential(e) => e.id,
        }
    }
}

/// One change inside a transaction. Entities are kept inline: changes are
/// short-lived and boxing every upsert would cost an allocation per change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)]
pub enum ConfigChange {
    Upsert { entity: Entity },
    Delete { kind: EntityKind, id: Uuid },
}

/// What one committed store transaction changed.
#[derive(Debug, Clone)]
pub enum DeltaBody {
    /// The whole configuration was replaced (`/config`, declarative file, startup).
    Replace(Arc<Config>),
    /// Individual entity changes, in the order they were committed.
    Changes(Vec<ConfigChange>),
}

/// A committed change with the version it produced.
#[derive(Debug, Clone)]
pub struct ConfigDelta {
    pub version: ConfigVersion,
    pub body: DeltaBody,
}

impl Config {
    /// Add `entity` to the list of its kind, without looking for an
    /// entity with its id (a configuration being assembled, not changed).
    pub fn push(&mut self, entity: Entity) {
        match entity {
            Entity::Vault(e) => self.vaults.push(e),
            Entity::KeySet(e) => self.key_sets.push(e),
            Entity::Key(e) => self.keys.push(e),
            Entity::ConsumerGroup(e) => self.consumer_groups.push(e),
            Entity::ConsumerGroupConsumer(e) => self.consumer_group_consumers.push(e),
            Entity::Service(e) => self.services.push(e),
            Entity::Route(e) => self.routes.push(e),
            Entity::FilterChain(e) => self.filter_chains.push(e),
            Entity::Upstream(e) => self.upstreams.push(*e),
            Entity::Target(e) => self.targets.push(e),
            Entity::Consumer(e) => self.consumers.push(e),
            Entity::Plugin(e) => self.plugins.push(e),
            Entity::Certificate(e) => self.certificates.push(e),
            Entity::Sni(e) => self.snis.push(e),
            Entity::CaCertificate(e) => self.ca_certificates.push(e),
            Entity::KeyauthCredential(e) => self.keyauth_credentials.push(e),
            Entity::BasicauthCredential(e) => self.basicauth_credentials.push(e),
            Entity::Acl(e) => self.acls.push(e),
            Entity::JwtSecret(e) => self.jwt_secrets.push(e),
            Entity::HmacauthCredential(e) => self.hmacauth_credentials.push(e),
            Entity::Oauth2Credential(e) => self.oauth2_credentials.push(e),
        }
    }

    /// Apply entity changes to a configuration value. Used by the snapshot
    /// compiler to keep its copy of the configuration current.
    pub fn apply_changes(&mut self, changes: &[ConfigChange]) {
        for change in changes {
            match change {
                ConfigChange::Upsert { entity } => self.upsert(entity.clone()),
                ConfigChange::Delete { kind, id } => self.remove(*kind, *id),
            }
        }
    }

    fn upsert(&mut self, entity: Entity) {
        fn put<T, F: Fn(&T) -> Uuid>(items: &mut Vec<T>, item: T, id_of: F) {
            let id = id_of(&item);
            match items.iter_mut().find(|existing| id_of(existing) == id) {
                Some(slot) => *slot = item,
                None => items.push(item),
            }
        }
        match entity {
            Entity::Vault(e) => put(&mut self.vaults, e, |x| x.id),
            Entity::KeySet(e) => put(&mut self.key_sets, e, |x| x.id),
            Entity::Key(e) => put(&mut self.keys, e, |x| x.id),
            Entity::ConsumerGroup(e) => put(&mut self.consumer_groups, e, |x| x.id),
            Entity::ConsumerGroupConsumer(e) => put(&mut self.consumer_group_consumers, e, |x| x.id),
            Entity::Service(e) => put(&mut self.services, e, |x| x.id),
            Entity::Route(e) => put(&mut self.routes, e, |x| x.id),
            Entity::FilterChain(e) => put(&mut self.filter_chains, e, |x| x.id),
            Entity::Upstream(e) => put(&mut self.upstreams, *e, |x| x.id),
            Entity::Target(e) => put(&mut self.targets, e, |x| x.id),
            Entity::Consumer(e) => put(&mut self.consumers, e, |x| x.id),
            Entity::Plugin(e) => put(&mut self.plugins, e, |x| x.id),
            Entity::Certificate(e) => put(&mut self.certificates, e, |x| x.id),
            Entity::Sni(e) => put(&mut self.snis, e, |x| x.id),
            Entity::CaCertificate(e) => put(&mut self.ca_certificates, e, |x| x.id),
            Entity::KeyauthCredential(e) => put(&mut self.keyauth_credentials, e, |x| x.id),
            Entity::BasicauthCredential(e) => put(&mut self.basicauth_credentials, e, |x| x.id),
            Entity::Acl(e) => put(&mut self.acls, e, |x| x.id),
            Entity::JwtSecret(e) => put(&mut self.jwt_secrets, e, |x| x.id),
            Entity::HmacauthCredential(e) => put(&mut self.hmacauth_credentials, e, |x| x.id),
            Entity::Oauth2Credential(e) => put(&mut self.oauth2_credentials, e, |x| x.id),
        }
    }

    fn remove(&mut self, kind: EntityKind, id: Uuid) {
        match kind {
            EntityKind::Vaults => self.vaults.retain(|x| x.id != id),
            EntityKind::KeySets => self.key_sets.retain(|x| x.id != id),
            EntityKind::Keys => self.keys.retain(|x| x.id != id),
            EntityKind::ConsumerGroups => self.consumer_groups.retain(|x| x.id != id),
            EntityKind::ConsumerGroupConsumers => self.consumer_group_consumers.retain(|x| x.id != id),
            EntityKind::Services => self.services.retain(|x| x.id != id),
            EntityKind::Routes => self.routes.retain(|x| x.id != id),
            EntityKind::FilterChains => self.filter_chains.retain(|x| x.id != id),
            EntityKind::Upstreams => self.upstreams.retain(|x| x.id != id),
            EntityKind::Targets => self.targets.retain(|x| x.id != id),
            EntityKind::Consumers => self.consumers.retain(|x| x.id != id),
            EntityKind::Plugins => self.plugins.retain(|x| x.id != id),
            EntityKind::Certificates => self.certificates.retain(|x| x.id != id),
            EntityKind::Snis => self.snis.retain(|x| x.id != id),
            EntityKind::CaCertificates => self.ca_certificates.retain(|x| x.id != id),
            EntityKind::KeyauthCredentials => self.keyauth_credentials.retain(|x| x.id != id),
            EntityKind::BasicauthCredentials => self.basicauth_credentials.retain(|x| x.id != id),
            EntityKind::Acls => self.acls.retain(|x| x.id != id),
            EntityKind::JwtSecrets => self.jwt_secrets.retain(|x| x.id != id),
            EntityKind::HmacauthCredentials => self.hmacauth_credentials.retain(|x| x.id != id),
            EntityKind::Oauth2Credentials => self.oauth2_credentials.retain(|x| x.id != id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every list a configuration is validated, diffed and assembled through
    /// holds `Entity` values: the largest variant sets their size. Upstream
    /// (520 bytes inline) is boxed so that Route, the entity there are most
    /// of, does: 50,000 routes start with 1,850 fewer page faults and the
    /// 10k/10k push peaks about 7 MB lower (docs/benchmarks.md).
    #[test]
    fn an_entity_is_no_larger_than_a_route_and_its_tag() {
        let entity = std::mem::size_of::<Entity>();
        let route = std::mem::size_of::<Route>();
        assert!(entity <= route + 8, "Entity is {entity} bytes, Route {route}");
    }
}
