//! Every configuration entity of a snapshot in copy-on-write maps, so a
//! snapshot derived from the previous one by a delta copies only what the
//! delta touches.

use std::sync::Arc;

use strait_core::declarative::DeclarativeJson;
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
        fn owned<T: Clone>(items: Vec<&T>) -> Vec<T> {
            items.into_iter().cloned().collect()
        }
        Config {
            services: owned(by_creation(&self.services, |e| (e.created_at, e.id))),
            routes: owned(self.routes_by_creation()),
            upstreams: owned(by_creation(&self.upstreams, |e| (e.created_at, e.id))),
            targets: owned(by_creation(&self.targets, |e| (e.created_at as i64, e.id))),
            consumers: owned(by_creation(&self.consumers, |e| (e.created_at, e.id))),
            plugins: owned(by_creation(&self.plugins, |e| (e.created_at, e.id))),
            certificates: owned(by_creation(&self.certificates, |e| (e.created_at, e.id))),
            snis: owned(by_creation(&self.snis, |e| (e.created_at, e.id))),
            ca_certificates: owned(by_creation(&self.ca_certificates, |e| (e.created_at, e.id))),
            keyauth_credentials: owned(by_creation(&self.keyauth_credentials, |e| (e.created_at, e.id))),
            basicauth_credentials: owned(by_creation(&self.basicauth_credentials, |e| (e.created_at, e.id))),
            acls: owned(by_creation(&self.acls, |e| (e.created_at, e.id))),
            jwt_secrets: owned(by_creation(&self.jwt_secrets, |e| (e.created_at, e.id))),
            hmacauth_credentials: owned(by_creation(&self.hmacauth_credentials, |e| (e.created_at, e.id))),
        }
    }

    /// [`EntityState::to_config`] as a flat declarative JSON document (the
    /// text `config_to_declarative(&self.to_config())` renders), written
    /// without copying any entity.
    pub fn to_declarative_json(&self) -> Vec<u8> {
        let mut out = DeclarativeJson::new();
        for kind in EntityKind::ALL {
            match kind {
                EntityKind::Services => out.list(kind, &by_creation(&self.services, |e| (e.created_at, e.id))),
                EntityKind::Routes => out.list(kind, &self.routes_by_creation()),
                EntityKind::Upstreams => out.list(kind, &by_creation(&self.upstreams, |e| (e.created_at, e.id))),
                EntityKind::Targets => out.list(kind, &by_creation(&self.targets, |e| (e.created_at as i64, e.id))),
                EntityKind::Consumers => out.list(kind, &by_creation(&self.consumers, |e| (e.created_at, e.id))),
                EntityKind::Plugins => out.list(kind, &by_creation(&self.plugins, |e| (e.created_at, e.id))),
                EntityKind::Certificates => out.list(kind, &by_creation(&self.certificates, |e| (e.created_at, e.id))),
                EntityKind::Snis => out.list(kind, &by_creation(&self.snis, |e| (e.created_at, e.id))),
                EntityKind::CaCertificates => {
                    out.list(kind, &by_creation(&self.ca_certificates, |e| (e.created_at, e.id)))
                }
                EntityKind::KeyauthCredentials => {
                    out.list(kind, &by_creation(&self.keyauth_credentials, |e| (e.created_at, e.id)))
                }
                EntityKind::BasicauthCredentials => out.list(
                    kind,
                    &by_creation(&self.basicauth_credentials, |e| (e.created_at, e.id)),
                ),
                EntityKind::Acls => out.list(kind, &by_creation(&self.acls, |e| (e.created_at, e.id))),
                EntityKind::JwtSecrets => out.list(kind, &by_creation(&self.jwt_secrets, |e| (e.created_at, e.id))),
                EntityKind::HmacauthCredentials => {
                    out.list(kind, &by_creation(&self.hmacauth_credentials, |e| (e.created_at, e.id)))
                }
            }
        }
        out.finish()
    }

    /// Routes in creation order (they are kept behind `Arc`s).
    fn routes_by_creation(&self) -> Vec<&Route> {
        by_creation(&self.routes, |e| (e.created_at, e.id))
            .into_iter()
            .map(|route| &**route)
            .collect()
    }
}

/// The values of `map` in creation order (`created_at`, then id): the order
/// lists and exports show.
fn by_creation<T: Clone>(map: &CowMap<Uuid, T>, key: impl Fn(&T) -> (i64, Uuid)) -> Vec<&T> {
    let mut items: Vec<&T> = map.values().collect();
    items.sort_by_key(|item| key(item));
    items
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

/// Timestamps of `entity` equal to `generated` (the ones parsing filled
/// in because the document had none) take the running entity's values.
fn adopt_timestamps(entity: &mut Entity, old: &Entity, generated: i64) {
    fn adopt<T: PartialEq + Copy>(new: &mut T, old: T, generated: T) {
        if *new == generated {
            *new = old;
        }
    }
    macro_rules! both {
        ($new:expr, $old:expr) => {{
            adopt(&mut $new.created_at, $old.created_at, generated);
            adopt(&mut $new.updated_at, $old.updated_at, generated);
        }};
    }
    match (entity, old) {
        (Entity::Service(n), Entity::Service(o)) => both!(n, o),
        (Entity::Route(n), Entity::Route(o)) => both!(n, o),
        (Entity::Upstream(n), Entity::Upstream(o)) => both!(n, o),
        (Entity::Target(n), Entity::Target(o)) => {
            adopt(&mut n.created_at, o.created_at, generated as f64);
            adopt(&mut n.updated_at, o.updated_at, generated as f64);
        }
        (Entity::Consumer(n), Entity::Consumer(o)) => both!(n, o),
        (Entity::Plugin(n), Entity::Plugin(o)) => both!(n, o),
        (Entity::Certificate(n), Entity::Certificate(o)) => both!(n, o),
        (Entity::Sni(n), Entity::Sni(o)) => both!(n, o),
        (Entity::CaCertificate(n), Entity::CaCertificate(o)) => both!(n, o),
        (Entity::KeyauthCredential(n), Entity::KeyauthCredential(o)) => {
            adopt(&mut n.created_at, o.created_at, generated)
        }
        (Entity::BasicauthCredential(n), Entity::BasicauthCredential(o)) => {
            adopt(&mut n.created_at, o.created_at, generated)
        }
        (Entity::Acl(n), Entity::Acl(o)) => adopt(&mut n.created_at, o.created_at, generated),
        (Entity::JwtSecret(n), Entity::JwtSecret(o)) => adopt(&mut n.created_at, o.created_at, generated),
        (Entity::HmacauthCredential(n), Entity::HmacauthCredential(o)) => {
            adopt(&mut n.created_at, o.created_at, generated)
        }
        _ => {}
    }
}

impl EntityState {
    /// The running entity of `kind` with `id`, cloned.
    fn get_entity(&self, kind: EntityKind, id: Uuid) -> Option<Entity> {
        Some(match kind {
            EntityKind::Services => Entity::Service(self.services.get(&id)?.clone()),
            EntityKind::Routes => Entity::Route((**self.routes.get(&id)?).clone()),
            EntityKind::Upstreams => Entity::Upstream(self.upstreams.get(&id)?.clone()),
            EntityKind::Targets => Entity::Target(self.targets.get(&id)?.clone()),
            EntityKind::Consumers => Entity::Consumer(self.consumers.get(&id)?.clone()),
            EntityKind::Plugins => Entity::Plugin(self.plugins.get(&id)?.clone()),
            EntityKind::Certificates => Entity::Certificate(self.certificates.get(&id)?.clone()),
            EntityKind::Snis => Entity::Sni(self.snis.get(&id)?.clone()),
            EntityKind::CaCertificates => Entity::CaCertificate(self.ca_certificates.get(&id)?.clone()),
            EntityKind::KeyauthCredentials => Entity::KeyauthCredential(self.keyauth_credentials.get(&id)?.clone()),
            EntityKind::BasicauthCredentials => {
                Entity::BasicauthCredential(self.basicauth_credentials.get(&id)?.clone())
            }
            EntityKind::Acls => Entity::Acl(self.acls.get(&id)?.clone()),
            EntityKind::JwtSecrets => Entity::JwtSecret(self.jwt_secrets.get(&id)?.clone()),
            EntityKind::HmacauthCredentials => Entity::HmacauthCredential(self.hmacauth_credentials.get(&id)?.clone()),
        })
    }

    /// Ids of every entity of `kind`.
    fn ids(&self, kind: EntityKind) -> Vec<Uuid> {
        fn keys<T: Clone>(map: &CowMap<Uuid, T>) -> Vec<Uuid> {
            map.iter().map(|(id, _)| *id).collect()
        }
        match kind {
            EntityKind::Services => keys(&self.services),
            EntityKind::Routes => keys(&self.routes),
            EntityKind::Upstreams => keys(&self.upstreams),
            EntityKind::Targets => keys(&self.targets),
            EntityKind::Consumers => keys(&self.consumers),
            EntityKind::Plugins => keys(&self.plugins),
            EntityKind::Certificates => keys(&self.certificates),
            EntityKind::Snis => keys(&self.snis),
            EntityKind::CaCertificates => keys(&self.ca_certificates),
            EntityKind::KeyauthCredentials => keys(&self.keyauth_credentials),
            EntityKind::BasicauthCredentials => keys(&self.basicauth_credentials),
            EntityKind::Acls => keys(&self.acls),
            EntityKind::JwtSecrets => keys(&self.jwt_secrets),
            EntityKind::HmacauthCredentials => keys(&self.hmacauth_credentials),
        }
    }

    /// The changes that turn these entities into `config`: deletes of what
    /// is gone (children before parents, so a freed name can be reused),
    /// then upserts of what is new or different (parents first). An entity
    /// that differs only by timestamps parsing generated (`generated`) is
    /// not a change and keeps its timestamps.
    pub fn diff(&self, config: &Config, generated: i64) -> Vec<ConfigChange> {
        let upserts = config_upserts(config);
        let mut wanted: std::collections::HashMap<EntityKind, std::collections::HashSet<Uuid>> =
            std::collections::HashMap::new();
        for change in &upserts {
            if let ConfigChange::Upsert { entity } = change {
                wanted.entry(entity.kind()).or_default().insert(entity.id());
            }
        }
        let mut changes = Vec::new();
        for kind in DELETE_ORDER {
            let keep = wanted.get(&kind);
            let mut gone: Vec<Uuid> = self
                .ids(kind)
                .into_iter()
                .filter(|id| !keep.is_some_and(|k| k.contains(id)))
                .collect();
            gone.sort_unstable();
            changes.extend(gone.into_iter().map(|id| ConfigChange::Delete { kind, id }));
        }
        for change in upserts {
            let ConfigChange::Upsert { mut entity } = change else {
                continue;
            };
            if let Some(old) = self.get_entity(entity.kind(), entity.id()) {
                adopt_timestamps(&mut entity, &old, generated);
                if entity == old {
                    continue;
                }
            }
            changes.push(ConfigChange::Upsert { entity });
        }
        changes
    }
}

/// Kinds with children before their parents.
const DELETE_ORDER: [EntityKind; 14] = [
    EntityKind::Plugins,
    EntityKind::HmacauthCredentials,
    EntityKind::JwtSecrets,
    EntityKind::Acls,
    EntityKind::BasicauthCredentials,
    EntityKind::KeyauthCredentials,
    EntityKind::Consumers,
    EntityKind::Targets,
    EntityKind::Upstreams,
    EntityKind::Routes,
    EntityKind::Services,
    EntityKind::Snis,
    EntityKind::Certificates,
    EntityKind::CaCertificates,
];
