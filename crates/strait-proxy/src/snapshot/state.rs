//! Every configuration entity of a snapshot in copy-on-write maps, so a
//! snapshot derived from the previous one by a delta copies only what the
//! delta touches.

use std::sync::Arc;

use strait_core::{
    Acl, BasicauthCredential, CaCertificate, Certificate, Config, ConfigChange, Consumer, Entity, EntityKind,
    HmacauthCredential, JwtSecret, KeyauthCredential, Plugin as PluginEntity, Route, Service, Sni, Target, Upstream,
};
use strait_router::CowMap;
use uuid::Uuid;

#[derive(Clone, Default)]
pub(crate) struct EntityState {
    pub services: CowMap<Uuid, Service>,
    pub routes: CowMap<Uuid, Arc<Route>>,
    pub upstreams: CowMap<Uuid, Upstream>,
    pub targets: CowMap<Uuid, Target>,
    pub consumers: CowMap<Uuid, Consumer>,
    pub plugins: CowMap<Uuid, PluginEntity>,
    pub certificates: CowMap<Uuid, Certificate>,
    pub snis: CowMap<Uuid, Sni>,
    pub ca_certificates: CowMap<Uuid, CaCertificate>,
    pub keyauth_credentials: CowMap<Uuid, KeyauthCredential>,
    pub basicauth_credentials: CowMap<Uuid, BasicauthCredential>,
    pub acls: CowMap<Uuid, Acl>,
    pub jwt_secrets: CowMap<Uuid, JwtSecret>,
    pub hmacauth_credentials: CowMap<Uuid, HmacauthCredential>,
}

/// The entity a change replaces or removes, if it existed.
pub(crate) type Previous = Option<Entity>;

impl EntityState {
    pub fn from_config(config: &Config) -> EntityState {
        let mut state = EntityState::default();
        for change in config_upserts(config) {
            state.apply(&change);
        }
        state
    }

    /// Apply one change; returns the entity it replaced or removed.
    pub fn apply(&mut self, change: &ConfigChange) -> Previous {
        match change {
            ConfigChange::Upsert { entity } => self.upsert(entity.clone()),
            ConfigChange::Delete { kind, id } => self.remove(*kind, *id),
        }
    }

    fn upsert(&mut self, entity: Entity) -> Previous {
        match entity {
            Entity::Service(e) => self.services.insert(e.id, e).map(Entity::Service),
            Entity::Route(e) => self
                .routes
                .insert(e.id, Arc::new(e))
                .map(|r| Entity::Route((*r).clone())),
            Entity::Upstream(e) => self.upstreams.insert(e.id, e).map(Entity::Upstream),
            Entity::Target(e) => self.targets.insert(e.id, e).map(Entity::Target),
            Entity::Consumer(e) => self.consumers.insert(e.id, e).map(Entity::Consumer),
            Entity::Plugin(e) => self.plugins.insert(e.id, e).map(Entity::Plugin),
            Entity::Certificate(e) => self.certificates.insert(e.id, e).map(Entity::Certificate),
            Entity::Sni(e) => self.snis.insert(e.id, e).map(Entity::Sni),
            Entity::CaCertificate(e) => self.ca_certificates.insert(e.id, e).map(Entity::CaCertificate),
            Entity::KeyauthCredential(e) => self.keyauth_credentials.insert(e.id, e).map(Entity::KeyauthCredential),
            Entity::BasicauthCredential(e) => self
                .basicauth_credentials
                .insert(e.id, e)
                .map(Entity::BasicauthCredential),
            Entity::Acl(e) => self.acls.insert(e.id, e).map(Entity::Acl),
            Entity::JwtSecret(e) => self.jwt_secrets.insert(e.id, e).map(Entity::JwtSecret),
            Entity::HmacauthCredential(e) => self
                .hmacauth_credentials
                .insert(e.id, e)
                .map(Entity::HmacauthCredential),
        }
    }

    fn remove(&mut self, kind: EntityKind, id: Uuid) -> Previous {
        match kind {
            EntityKind::Services => self.services.remove(&id).map(Entity::Service),
            EntityKind::Routes => self.routes.remove(&id).map(|r| Entity::Route((*r).clone())),
            EntityKind::Upstreams => self.upstreams.remove(&id).map(Entity::Upstream),
            EntityKind::Targets => self.targets.remove(&id).map(Entity::Target),
            EntityKind::Consumers => self.consumers.remove(&id).map(Entity::Consumer),
            EntityKind::Plugins => self.plugins.remove(&id).map(Entity::Plugin),
            EntityKind::Certificates => self.certificates.remove(&id).map(Entity::Certificate),
            EntityKind::Snis => self.snis.remove(&id).map(Entity::Sni),
            EntityKind::CaCertificates => self.ca_certificates.remove(&id).map(Entity::CaCertificate),
            EntityKind::KeyauthCredentials => self.keyauth_credentials.remove(&id).map(Entity::KeyauthCredential),
            EntityKind::BasicauthCredentials => self.basicauth_credentials.remove(&id).map(Entity::BasicauthCredential),
            EntityKind::Acls => self.acls.remove(&id).map(Entity::Acl),
            EntityKind::JwtSecrets => self.jwt_secrets.remove(&id).map(Entity::JwtSecret),
            EntityKind::HmacauthCredentials => self.hmacauth_credentials.remove(&id).map(Entity::HmacauthCredential),
        }
    }

    /// The whole configuration as plain lists, each in (created_at, id) order.
    pub fn to_config(&self) -> Config {
        fn sorted<T: Clone>(map: &CowMap<Uuid, T>, key: impl Fn(&T) -> (i64, Uuid)) -> Vec<T> {
            let mut items: Vec<T> = map.values().cloned().collect();
            items.sort_by_key(|item| key(item));
            items
        }
        Config {
            services: sorted(&self.services, |e| (e.created_at, e.id)),
            routes: sorted(&self.routes, |e| (e.created_at, e.id))
                .into_iter()
                .map(|r| (*r).clone())
                .collect(),
            upstreams: sorted(&self.upstreams, |e| (e.created_at, e.id)),
            targets: sorted(&self.targets, |e| (e.created_at as i64, e.id)),
            consumers: sorted(&self.consumers, |e| (e.created_at, e.id)),
            plugins: sorted(&self.plugins, |e| (e.created_at, e.id)),
            certificates: sorted(&self.certificates, |e| (e.created_at, e.id)),
            snis: sorted(&self.snis, |e| (e.created_at, e.id)),
            ca_certificates: sorted(&self.ca_certificates, |e| (e.created_at, e.id)),
            keyauth_credentials: sorted(&self.keyauth_credentials, |e| (e.created_at, e.id)),
            basicauth_credentials: sorted(&self.basicauth_credentials, |e| (e.created_at, e.id)),
            acls: sorted(&self.acls, |e| (e.created_at, e.id)),
            jwt_secrets: sorted(&self.jwt_secrets, |e| (e.created_at, e.id)),
            hmacauth_credentials: sorted(&self.hmacauth_credentials, |e| (e.created_at, e.id)),
        }
    }
}

/// A configuration as a list of upserts, parents before children.
pub(crate) fn config_upserts(config: &Config) -> Vec<ConfigChange> {
    let upsert = |entity| ConfigChange::Upsert { entity };
    let mut changes = Vec::with_capacity(config.entity_count());
    changes.extend(
        config
            .ca_certificates
            .iter()
            .cloned()
            .map(Entity::CaCertificate)
            .map(upsert),
    );
    changes.extend(config.certificates.iter().cloned().map(Entity::Certificate).map(upsert));
    changes.extend(config.snis.iter().cloned().map(Entity::Sni).map(upsert));
    changes.extend(config.services.iter().cloned().map(Entity::Service).map(upsert));
    changes.extend(config.routes.iter().cloned().map(Entity::Route).map(upsert));
    changes.extend(config.upstreams.iter().cloned().map(Entity::Upstream).map(upsert));
    changes.extend(config.targets.iter().cloned().map(Entity::Target).map(upsert));
    changes.extend(config.consumers.iter().cloned().map(Entity::Consumer).map(upsert));
    changes.extend(
        config
            .keyauth_credentials
            .iter()
            .cloned()
            .map(Entity::KeyauthCredential)
            .map(upsert),
    );
    changes.extend(
        config
            .basicauth_credentials
            .iter()
            .cloned()
            .map(Entity::BasicauthCredential)
            .map(upsert),
    );
    changes.extend(config.acls.iter().cloned().map(Entity::Acl).map(upsert));
    changes.extend(config.jwt_secrets.iter().cloned().map(Entity::JwtSecret).map(upsert));
    changes.extend(
        config
            .hmacauth_credentials
            .iter()
            .cloned()
            .map(Entity::HmacauthCredential)
            .map(upsert),
    );
    changes.extend(config.plugins.iter().cloned().map(Entity::Plugin).map(upsert));
    changes
}
