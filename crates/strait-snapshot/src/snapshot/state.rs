//! Every configuration entity of a snapshot in copy-on-write maps, so a
//! snapshot derived from the previous one by a delta copies only what the
//! delta touches.

use std::io::{self, Write};
use std::sync::Arc;

use strait_core::declarative::DeclarativeJson;
use strait_core::{
    Acl, BasicauthCredential, CaCertificate, Certificate, Config, ConfigChange, Consumer, ConsumerGroup,
    ConsumerGroupConsumer, Entity, EntityKind, FilterChain, HmacauthCredential, JwtSecret, Key, KeySet,
    KeyauthCredential, Oauth2Credential, Plugin as PluginEntity, Route, Service, Sni, Target, Upstream, Vault,
};
use strait_router::CowMap;
use uuid::Uuid;

#[derive(Clone, Default)]
pub(crate) struct EntityState {
    pub vaults: CowMap<Uuid, Vault>,
    pub key_sets: CowMap<Uuid, KeySet>,
    pub keys: CowMap<Uuid, Key>,
    pub consumer_groups: CowMap<Uuid, ConsumerGroup>,
    pub consumer_group_consumers: CowMap<Uuid, ConsumerGroupConsumer>,
    pub services: CowMap<Uuid, Service>,
    pub routes: CowMap<Uuid, Arc<Route>>,
    pub filter_chains: CowMap<Uuid, FilterChain>,
    pub upstreams: CowMap<Uuid, Upstream>,
    pub targets: CowMap<Uuid, Target>,
    /// Behind an `Arc`, as routes: a map slot stays small, so the empty
    /// buckets of a large map cost little (a million consumers).
    pub consumers: CowMap<Uuid, Arc<Consumer>>,
    pub plugins: CowMap<Uuid, PluginEntity>,
    pub certificates: CowMap<Uuid, Certificate>,
    pub snis: CowMap<Uuid, Sni>,
    pub ca_certificates: CowMap<Uuid, CaCertificate>,
    pub keyauth_credentials: CowMap<Uuid, Arc<KeyauthCredential>>,
    pub basicauth_credentials: CowMap<Uuid, BasicauthCredential>,
    pub acls: CowMap<Uuid, Acl>,
    pub jwt_secrets: CowMap<Uuid, JwtSecret>,
    pub hmacauth_credentials: CowMap<Uuid, HmacauthCredential>,
    pub oauth2_credentials: CowMap<Uuid, Oauth2Credential>,
}

/// The entity a change replaces or removes, if it existed.
pub(crate) type Previous = Option<Entity>;

impl EntityState {
    pub fn from_config(config: &Config) -> EntityState {
        let mut state = EntityState::default();
        for entity in config_entities(config) {
            state.upsert(entity);
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

    pub(crate) fn upsert(&mut self, entity: Entity) -> Previous {
        match entity {
            Entity::Vault(e) => self.vaults.insert(e.id, e).map(Entity::Vault),
            Entity::KeySet(e) => self.key_sets.insert(e.id, e).map(Entity::KeySet),
            Entity::Key(e) => self.keys.insert(e.id, e).map(Entity::Key),
            Entity::ConsumerGroup(e) => self.consumer_groups.insert(e.id, e).map(Entity::ConsumerGroup),
            Entity::ConsumerGroupConsumer(e) => self
                .consumer_group_consumers
                .insert(e.id, e)
                .map(Entity::ConsumerGroupConsumer),
            Entity::Service(e) => self.services.insert(e.id, e).map(Entity::Service),
            Entity::Route(e) => self
                .routes
                .insert(e.id, Arc::new(e))
                .map(|r| Entity::Route((*r).clone())),
            Entity::FilterChain(e) => self.filter_chains.insert(e.id, e).map(Entity::FilterChain),
            Entity::Upstream(e) => self.upstreams.insert(e.id, *e).map(Entity::upstream),
            Entity::Target(e) => self.targets.insert(e.id, e).map(Entity::Target),
            Entity::Consumer(e) => self
                .consumers
                .insert(e.id, Arc::new(e))
                .map(|c| Entity::Consumer(Arc::unwrap_or_clone(c))),
            Entity::Plugin(e) => self.plugins.insert(e.id, e).map(Entity::Plugin),
            Entity::Certificate(e) => self.certificates.insert(e.id, e).map(Entity::Certificate),
            Entity::Sni(e) => self.snis.insert(e.id, e).map(Entity::Sni),
            Entity::CaCertificate(e) => self.ca_certificates.insert(e.id, e).map(Entity::CaCertificate),
            Entity::KeyauthCredential(e) => self
                .keyauth_credentials
                .insert(e.id, Arc::new(e))
                .map(|c| Entity::KeyauthCredential(Arc::unwrap_or_clone(c))),
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
            Entity::Oauth2Credential(e) => self.oauth2_credentials.insert(e.id, e).map(Entity::Oauth2Credential),
        }
    }

    /// The entity of `kind` with `id`, if there is one.
    pub fn get(&self, kind: EntityKind, id: Uuid) -> Option<Entity> {
        match kind {
            EntityKind::Vaults => self.vaults.get(&id).cloned().map(Entity::Vault),
            EntityKind::KeySets => self.key_sets.get(&id).cloned().map(Entity::KeySet),
            EntityKind::Keys => self.keys.get(&id).cloned().map(Entity::Key),
            EntityKind::ConsumerGroups => self.consumer_groups.get(&id).cloned().map(Entity::ConsumerGroup),
            EntityKind::ConsumerGroupConsumers => self
                .consumer_group_consumers
                .get(&id)
                .cloned()
                .map(Entity::ConsumerGroupConsumer),
            EntityKind::Services => self.services.get(&id).cloned().map(Entity::Service),
            EntityKind::Routes => self.routes.get(&id).map(|r| Entity::Route((**r).clone())),
            EntityKind::FilterChains => self.filter_chains.get(&id).cloned().map(Entity::FilterChain),
            EntityKind::Upstreams => self.upstreams.get(&id).cloned().map(Entity::upstream),
            EntityKind::Targets => self.targets.get(&id).cloned().map(Entity::Target),
            EntityKind::Consumers => self.consumers.get(&id).map(|c| Entity::Consumer((**c).clone())),
            EntityKind::Plugins => self.plugins.get(&id).cloned().map(Entity::Plugin),
            EntityKind::Certificates => self.certificates.get(&id).cloned().map(Entity::Certificate),
            EntityKind::Snis => self.snis.get(&id).cloned().map(Entity::Sni),
            EntityKind::CaCertificates => self.ca_certificates.get(&id).cloned().map(Entity::CaCertificate),
            EntityKind::KeyauthCredentials => self
                .keyauth_credentials
                .get(&id)
                .map(|c| Entity::KeyauthCredential((**c).clone())),
            EntityKind::BasicauthCredentials => self
                .basicauth_credentials
                .get(&id)
                .cloned()
                .map(Entity::BasicauthCredential),
            EntityKind::Acls => self.acls.get(&id).cloned().map(Entity::Acl),
            EntityKind::JwtSecrets => self.jwt_secrets.get(&id).cloned().map(Entity::JwtSecret),
            EntityKind::HmacauthCredentials => self
                .hmacauth_credentials
                .get(&id)
                .cloned()
                .map(Entity::HmacauthCredential),
            EntityKind::Oauth2Credentials => self.oauth2_credentials.get(&id).cloned().map(Entity::Oauth2Credential),
        }
    }

    fn remove(&mut self, kind: EntityKind, id: Uuid) -> Previous {
        match kind {
            EntityKind::Vaults => self.vaults.remove(&id).map(Entity::Vault),
            EntityKind::KeySets => self.key_sets.remove(&id).map(Entity::KeySet),
            EntityKind::Keys => self.keys.remove(&id).map(Entity::Key),
            EntityKind::ConsumerGroups => self.consumer_groups.remove(&id).map(Entity::ConsumerGroup),
            EntityKind::ConsumerGroupConsumers => self
                .consumer_group_consumers
                .remove(&id)
                .map(Entity::ConsumerGroupConsumer),
            EntityKind::Services => self.services.remove(&id).map(Entity::Service),
            EntityKind::Routes => self.routes.remove(&id).map(|r| Entity::Route((*r).clone())),
            EntityKind::FilterChains => self.filter_chains.remove(&id).map(Entity::FilterChain),
            EntityKind::Upstreams => self.upstreams.remove(&id).map(Entity::upstream),
            EntityKind::Targets => self.targets.remove(&id).map(Entity::Target),
            EntityKind::Consumers => self
                .consumers
                .remove(&id)
                .map(|c| Entity::Consumer(Arc::unwrap_or_clone(c))),
            EntityKind::Plugins => self.plugins.remove(&id).map(Entity::Plugin),
            EntityKind::Certificates => self.certificates.remove(&id).map(Entity::Certificate),
            EntityKind::Snis => self.snis.remove(&id).map(Entity::Sni),
            EntityKind::CaCertificates => self.ca_certificates.remove(&id).map(Entity::CaCertificate),
            EntityKind::KeyauthCredentials => self
                .keyauth_credentials
                .remove(&id)
                .map(|c| Entity::KeyauthCredential(Arc::unwrap_or_clone(c))),
            EntityKind::BasicauthCredentials => self.basicauth_credentials.remove(&id).map(Entity::BasicauthCredential),
            EntityKind::Acls => self.acls.remove(&id).map(Entity::Acl),
            EntityKind::JwtSecrets => self.jwt_secrets.remove(&id).map(Entity::JwtSecret),
            EntityKind::HmacauthCredentials => self.hmacauth_credentials.remove(&id).map(Entity::HmacauthCredential),
            EntityKind::Oauth2Credentials => self.oauth2_credentials.remove(&id).map(Entity::Oauth2Credential),
        }
    }

    /// The whole configuration as plain lists, each in (created_at, id) order.
    pub fn to_config(&self) -> Config {
        fn owned<T: Clone>(items: Vec<&T>) -> Vec<T> {
            items.into_iter().cloned().collect()
        }
        Config {
            vaults: owned(by_creation(&self.vaults, |e| (e.created_at, e.id))),
            key_sets: owned(by_creation(&self.key_sets, |e| (e.created_at, e.id))),
            keys: owned(by_creation(&self.keys, |e| (e.created_at, e.id))),
            consumer_groups: owned(by_creation(&self.consumer_groups, |e| (e.created_at, e.id))),
            consumer_group_consumers: owned(by_creation(&self.consumer_group_consumers, |e| (e.created_at, e.id))),
            services: owned(by_creation(&self.services, |e| (e.created_at, e.id))),
            routes: owned(self.routes_by_creation()),
            filter_chains: owned(by_creation(&self.filter_chains, |e| (e.created_at, e.id))),
            upstreams: owned(by_creation(&self.upstreams, |e| (e.created_at, e.id))),
            targets: owned(by_creation(&self.targets, |e| (e.created_at as i64, e.id))),
            consumers: owned(by_creation_shared(&self.consumers, |e| (e.created_at, e.id))),
            plugins: owned(by_creation(&self.plugins, |e| (e.created_at, e.id))),
            certificates: owned(by_creation(&self.certificates, |e| (e.created_at, e.id))),
            snis: owned(by_creation(&self.snis, |e| (e.created_at, e.id))),
            ca_certificates: owned(by_creation(&self.ca_certificates, |e| (e.created_at, e.id))),
            keyauth_credentials: owned(by_creation_shared(&self.keyauth_credentials, |e| (e.created_at, e.id))),
            basicauth_credentials: owned(by_creation(&self.basicauth_credentials, |e| (e.created_at, e.id))),
            acls: owned(by_creation(&self.acls, |e| (e.created_at, e.id))),
            jwt_secrets: owned(by_creation(&self.jwt_secrets, |e| (e.created_at, e.id))),
            hmacauth_credentials: owned(by_creation(&self.hmacauth_credentials, |e| (e.created_at, e.id))),
            oauth2_credentials: owned(by_creation(&self.oauth2_credentials, |e| (e.created_at, e.id))),
        }
    }

    /// [`EntityState::to_config`] as a flat declarative JSON document (the
    /// text `config_to_declarative(&self.to_config())` renders) written into
    /// `out` without copying any entity, kind by kind in [`EntityKind::ALL`]
    /// order; the first error of the writer stops it.
    pub fn write_declarative_json<W: Write>(&self, mut out: DeclarativeJson<W>) -> io::Result<DeclarativeJson<W>> {
        for kind in EntityKind::ALL {
            match kind {
                EntityKind::Vaults => out.list(kind, &by_creation(&self.vaults, |e| (e.created_at, e.id))),
                EntityKind::KeySets => out.list(kind, &by_creation(&self.key_sets, |e| (e.created_at, e.id))),
                EntityKind::Keys => out.list(kind, &by_creation(&self.keys, |e| (e.created_at, e.id))),
                EntityKind::ConsumerGroups => {
                    out.list(kind, &by_creation(&self.consumer_groups, |e| (e.created_at, e.id)))
                }
                EntityKind::ConsumerGroupConsumers => out.list(
                    kind,
                    &by_creation(&self.consumer_group_consumers, |e| (e.created_at, e.id)),
                ),
                EntityKind::Services => out.list(kind, &by_creation(&self.services, |e| (e.created_at, e.id))),
                EntityKind::Routes => out.list(kind, &self.routes_by_creation()),
                EntityKind::FilterChains => out.list(kind, &by_creation(&self.filter_chains, |e| (e.created_at, e.id))),
                EntityKind::Upstreams => out.list(kind, &by_creation(&self.upstreams, |e| (e.created_at, e.id))),
                EntityKind::Targets => out.list(kind, &by_creation(&self.targets, |e| (e.created_at as i64, e.id))),
                EntityKind::Consumers => out.list(kind, &by_creation_shared(&self.consumers, |e| (e.created_at, e.id))),
                EntityKind::Plugins => out.list(kind, &by_creation(&self.plugins, |e| (e.created_at, e.id))),
                EntityKind::Certificates => out.list(kind, &by_creation(&self.certificates, |e| (e.created_at, e.id))),
                EntityKind::Snis => out.list(kind, &by_creation(&self.snis, |e| (e.created_at, e.id))),
                EntityKind::CaCertificates => {
                    out.list(kind, &by_creation(&self.ca_certificates, |e| (e.created_at, e.id)))
                }
                EntityKind::KeyauthCredentials => out.list(
                    kind,
                    &by_creation_shared(&self.keyauth_credentials, |e| (e.created_at, e.id)),
                ),
                EntityKind::BasicauthCredentials => out.list(
                    kind,
                    &by_creation(&self.basicauth_credentials, |e| (e.created_at, e.id)),
                ),
                EntityKind::Acls => out.list(kind, &by_creation(&self.acls, |e| (e.created_at, e.id))),
                EntityKind::JwtSecrets => out.list(kind, &by_creation(&self.jwt_secrets, |e| (e.created_at, e.id))),
                EntityKind::HmacauthCredentials => {
                    out.list(kind, &by_creation(&self.hmacauth_credentials, |e| (e.created_at, e.id)))
                }
                EntityKind::Oauth2Credentials => {
                    out.list(kind, &by_creation(&self.oauth2_credentials, |e| (e.created_at, e.id)))
                }
            }?;
        }
        Ok(out)
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

/// [`by_creation`] for a map whose values are shared (`Arc`).
fn by_creation_shared<T>(map: &CowMap<Uuid, Arc<T>>, key: impl Fn(&T) -> (i64, Uuid)) -> Vec<&T> {
    let mut items: Vec<&T> = map.values().map(|v| &**v).collect();
    items.sort_by_key(|item| key(item));
    items
}

/// Every entity of a configuration, parents before children, each a copy
/// made as it is taken (never a list of them all: a million consumers'
/// copies would sit beside the configuration and the state being built).
fn config_entities(config: &Config) -> impl Iterator<Item = Entity> + '_ {
    std::iter::empty()
        .chain(config.vaults.iter().cloned().map(Entity::Vault))
        .chain(config.ca_certificates.iter().cloned().map(Entity::CaCertificate))
        .chain(config.certificates.iter().cloned().map(Entity::Certificate))
        .chain(config.snis.iter().cloned().map(Entity::Sni))
        .chain(config.key_sets.iter().cloned().map(Entity::KeySet))
        .chain(config.keys.iter().cloned().map(Entity::Key))
        .chain(config.services.iter().cloned().map(Entity::Service))
        .chain(config.routes.iter().cloned().map(Entity::Route))
        .chain(config.filter_chains.iter().cloned().map(Entity::FilterChain))
        .chain(config.upstreams.iter().cloned().map(Entity::upstream))
        .chain(config.targets.iter().cloned().map(Entity::Target))
        .chain(config.consumers.iter().cloned().map(Entity::Consumer))
        .chain(config.consumer_groups.iter().cloned().map(Entity::ConsumerGroup))
        .chain(
            config
                .consumer_group_consumers
                .iter()
                .cloned()
                .map(Entity::ConsumerGroupConsumer),
        )
        .chain(
            config
                .keyauth_credentials
                .iter()
                .cloned()
                .map(Entity::KeyauthCredential),
        )
        .chain(
            config
                .basicauth_credentials
                .iter()
                .cloned()
                .map(Entity::BasicauthCredential),
        )
        .chain(config.acls.iter().cloned().map(Entity::Acl))
        .chain(config.jwt_secrets.iter().cloned().map(Entity::JwtSecret))
        .chain(
            config
                .hmacauth_credentials
                .iter()
                .cloned()
                .map(Entity::HmacauthCredential),
        )
        .chain(config.oauth2_credentials.iter().cloned().map(Entity::Oauth2Credential))
        .chain(config.plugins.iter().cloned().map(Entity::Plugin))
}

/// An entity type as the diff sees it.
trait Diffed: Clone + PartialEq {
    fn id(&self) -> Uuid;
    /// Timestamps equal to `generated` (the ones parsing filled in because
    /// the document had none) take `old`'s values.
    fn adopt_stamps(&mut self, old: &Self, generated: i64);
}

fn adopt<T: PartialEq + Copy>(new: &mut T, old: T, generated: T) {
    if *new == generated {
        *new = old;
    }
}

macro_rules! diffed {
    (created and updated: $($kind:ty),*) => {$(
        impl Diffed for $kind {
            fn id(&self) -> Uuid {
                self.id
            }
            fn adopt_stamps(&mut self, old: &Self, generated: i64) {
                adopt(&mut self.created_at, old.created_at, generated);
                adopt(&mut self.updated_at, old.updated_at, generated);
            }
        }
    )*};
    (created: $($kind:ty),*) => {$(
        impl Diffed for $kind {
            fn id(&self) -> Uuid {
                self.id
            }
            fn adopt_stamps(&mut self, old: &Self, generated: i64) {
                adopt(&mut self.created_at, old.created_at, generated);
            }
        }
    )*};
}

diffed!(created and updated: Service, Route, FilterChain, Upstream, Consumer, PluginEntity, Certificate, Sni, CaCertificate, Vault, KeySet, Key, ConsumerGroup);
diffed!(created: ConsumerGroupConsumer, KeyauthCredential, BasicauthCredential, Acl, JwtSecret, HmacauthCredential, Oauth2Credential);

impl Diffed for Target {
    fn id(&self) -> Uuid {
        self.id
    }
    fn adopt_stamps(&mut self, old: &Self, generated: i64) {
        adopt(&mut self.created_at, old.created_at, generated as f64);
        adopt(&mut self.updated_at, old.updated_at, generated as f64);
    }
}

/// Ids `running` holds and `wanted` lacks, sorted.
fn gone<R: Clone, T: Diffed>(running: &CowMap<Uuid, R>, wanted: &[T]) -> Vec<Uuid> {
    let keep: std::collections::HashSet<Uuid> = wanted.iter().map(Diffed::id).collect();
    let mut gone: Vec<Uuid> = running
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !keep.contains(id))
        .collect();
    gone.sort_unstable();
    gone
}

/// How the diff reads a running entity: routes are kept behind `Arc`s.
trait Running<T> {
    fn running(&self, id: &Uuid) -> Option<&T>;
}

impl<T: Clone> Running<T> for CowMap<Uuid, T> {
    fn running(&self, id: &Uuid) -> Option<&T> {
        self.get(id)
    }
}

impl<T> Running<T> for CowMap<Uuid, Arc<T>> {
    fn running(&self, id: &Uuid) -> Option<&T> {
        self.get(id).map(|shared| &**shared)
    }
}

/// Upserts of the entities of `wanted` that are new or differ from their
/// running version once generated timestamps are adopted (in place). Only
/// those are copied: an unchanged entity is compared where it lies.
fn changed<T: Diffed>(
    wanted: &mut [T],
    running: &impl Running<T>,
    generated: i64,
    wrap: fn(T) -> Entity,
    out: &mut Vec<ConfigChange>,
) {
    for entity in wanted.iter_mut() {
        if let Some(old) = running.running(&entity.id()) {
            entity.adopt_stamps(old, generated);
            if *entity == *old {
                continue;
            }
        }
        out.push(ConfigChange::Upsert {
            entity: wrap(entity.clone()),
        });
    }
}

impl EntityState {
    /// The changes that turn these entities into `config`: deletes of what
    /// is gone (children before parents, so a freed name can be reused),
    /// then upserts of what is new or different (parents first). An entity
    /// that differs only by timestamps parsing generated (`generated`) is
    /// not a change and keeps its timestamps: they are adopted into
    /// `config` in place, and only changed entities are copied.
    pub fn diff(&self, config: &mut Config, generated: i64) -> Vec<ConfigChange> {
        let mut changes = Vec::new();
        for kind in DELETE_ORDER {
            let gone = match kind {
                EntityKind::Vaults => gone(&self.vaults, &config.vaults),
                EntityKind::KeySets => gone(&self.key_sets, &config.key_sets),
                EntityKind::Keys => gone(&self.keys, &config.keys),
                EntityKind::ConsumerGroups => gone(&self.consumer_groups, &config.consumer_groups),
                EntityKind::ConsumerGroupConsumers => {
                    gone(&self.consumer_group_consumers, &config.consumer_group_consumers)
                }
                EntityKind::Services => gone(&self.services, &config.services),
                EntityKind::Routes => gone(&self.routes, &config.routes),
                EntityKind::FilterChains => gone(&self.filter_chains, &config.filter_chains),
                EntityKind::Upstreams => gone(&self.upstreams, &config.upstreams),
                EntityKind::Targets => gone(&self.targets, &config.targets),
                EntityKind::Consumers => gone(&self.consumers, &config.consumers),
                EntityKind::Plugins => gone(&self.plugins, &config.plugins),
                EntityKind::Certificates => gone(&self.certificates, &config.certificates),
                EntityKind::Snis => gone(&self.snis, &config.snis),
                EntityKind::CaCertificates => gone(&self.ca_certificates, &config.ca_certificates),
                EntityKind::KeyauthCredentials => gone(&self.keyauth_credentials, &config.keyauth_credentials),
                EntityKind::BasicauthCredentials => gone(&self.basicauth_credentials, &config.basicauth_credentials),
                EntityKind::Acls => gone(&self.acls, &config.acls),
                EntityKind::JwtSecrets => gone(&self.jwt_secrets, &config.jwt_secrets),
                EntityKind::HmacauthCredentials => gone(&self.hmacauth_credentials, &config.hmacauth_credentials),
                EntityKind::Oauth2Credentials => gone(&self.oauth2_credentials, &config.oauth2_credentials),
            };
            changes.extend(gone.into_iter().map(|id| ConfigChange::Delete { kind, id }));
        }
        self.upsert_changed(config, generated, &mut changes);
        changes
    }
}

impl EntityState {
    /// The changes that turn these entities into the configuration that
    /// has `gone`'s entities removed and `part`'s upserted: deletes of
    /// `gone` (children before parents), then upserts of `part`'s entities
    /// that are new or different once generated timestamps are adopted (as
    /// in [`EntityState::diff`]).
    pub fn changes_to(&self, part: &mut Config, gone: &[(EntityKind, Uuid)], generated: i64) -> Vec<ConfigChange> {
        let mut changes = Vec::with_capacity(gone.len() + part.entity_count());
        for kind in DELETE_ORDER {
            let mut ids: Vec<Uuid> = gone.iter().filter(|(k, _)| *k == kind).map(|(_, id)| *id).collect();
            ids.sort_unstable();
            changes.extend(ids.into_iter().map(|id| ConfigChange::Delete { kind, id }));
        }
        self.upsert_changed(part, generated, &mut changes);
        changes
    }
}

impl EntityState {
    /// Upserts (parents first) of `config`'s entities that are new or differ
    /// from the running ones once generated timestamps are adopted.
    fn upsert_changed(&self, config: &mut Config, generated: i64, changes: &mut Vec<ConfigChange>) {
        macro_rules! upserts {
            ($($field:ident => $variant:ident),* $(,)?) => {
                $(changed(&mut config.$field, &self.$field, generated, Entity::$variant, changes);)*
            };
        }
        upserts!(
            vaults => Vault,
            ca_certificates => CaCertificate,
            certificates => Certificate,
            snis => Sni,
            key_sets => KeySet,
            keys => Key,
            services => Service,
            routes => Route,
            filter_chains => FilterChain,
            upstreams => upstream,
            targets => Target,
            consumers => Consumer,
            consumer_groups => ConsumerGroup,
            consumer_group_consumers => ConsumerGroupConsumer,
            keyauth_credentials => KeyauthCredential,
            basicauth_credentials => BasicauthCredential,
            acls => Acl,
            jwt_secrets => JwtSecret,
            hmacauth_credentials => HmacauthCredential,
            oauth2_credentials => Oauth2Credential,
            plugins => Plugin,
        );
    }
}

/// Kinds with children before their parents.
const DELETE_ORDER: [EntityKind; 21] = [
    EntityKind::Plugins,
    EntityKind::FilterChains,
    EntityKind::ConsumerGroupConsumers,
    EntityKind::Oauth2Credentials,
    EntityKind::HmacauthCredentials,
    EntityKind::JwtSecrets,
    EntityKind::Acls,
    EntityKind::BasicauthCredentials,
    EntityKind::KeyauthCredentials,
    EntityKind::ConsumerGroups,
    EntityKind::Consumers,
    EntityKind::Targets,
    EntityKind::Upstreams,
    EntityKind::Routes,
    EntityKind::Services,
    EntityKind::Keys,
    EntityKind::KeySets,
    EntityKind::Snis,
    EntityKind::Certificates,
    EntityKind::CaCertificates,
    EntityKind::Vaults,
];
