//! The unique keys and foreign keys every store dialect indexes, extracted
//! from typed entities. Backend-neutral: dialects decide how to store them.
//!
//! Derived keys follow Kong's `cache_key` rule: a plugin name is unique per
//! (route, service, consumer) scope, a target per upstream, an ACL group per
//! consumer.

use strait_core::*;
use uuid::Uuid;

/// `(kind, field)` pairs whose values are unique within a kind.
pub const UNIQUE_FIELDS: &[(EntityKind, &str)] = &[
    (EntityKind::Vaults, "prefix"),
    (EntityKind::KeySets, "name"),
    (EntityKind::Keys, "name"),
    (EntityKind::Keys, "cache_key"),
    (EntityKind::ConsumerGroups, "name"),
    (EntityKind::ConsumerGroupConsumers, "cache_key"),
    (EntityKind::CaCertificates, "cert_digest"),
    (EntityKind::Snis, "name"),
    (EntityKind::Services, "name"),
    (EntityKind::Routes, "name"),
    (EntityKind::FilterChains, "name"),
    (EntityKind::FilterChains, "route"),
    (EntityKind::FilterChains, "service"),
    (EntityKind::Upstreams, "name"),
    (EntityKind::Targets, "cache_key"),
    (EntityKind::Consumers, "username"),
    (EntityKind::Consumers, "custom_id"),
    (EntityKind::KeyauthCredentials, "key"),
    (EntityKind::BasicauthCredentials, "username"),
    (EntityKind::Acls, "cache_key"),
    (EntityKind::JwtSecrets, "key"),
    (EntityKind::HmacauthCredentials, "username"),
    (EntityKind::Oauth2Credentials, "client_id"),
    (EntityKind::Plugins, "instance_name"),
    (EntityKind::Plugins, "cache_key"),
];

/// `(kind, field, parent kind)` foreign keys with a reverse index.
pub const FOREIGN_FIELDS: &[(EntityKind, &str, EntityKind)] = &[
    (EntityKind::Keys, "set", EntityKind::KeySets),
    (
        EntityKind::ConsumerGroupConsumers,
        "consumer_group",
        EntityKind::ConsumerGroups,
    ),
    (EntityKind::ConsumerGroupConsumers, "consumer", EntityKind::Consumers),
    (EntityKind::Snis, "certificate", EntityKind::Certificates),
    (EntityKind::Routes, "service", EntityKind::Services),
    (EntityKind::FilterChains, "route", EntityKind::Routes),
    (EntityKind::FilterChains, "service", EntityKind::Services),
    (EntityKind::Targets, "upstream", EntityKind::Upstreams),
    (EntityKind::KeyauthCredentials, "consumer", EntityKind::Consumers),
    (EntityKind::BasicauthCredentials, "consumer", EntityKind::Consumers),
    (EntityKind::Acls, "consumer", EntityKind::Consumers),
    (EntityKind::JwtSecrets, "consumer", EntityKind::Consumers),
    (EntityKind::HmacauthCredentials, "consumer", EntityKind::Consumers),
    (EntityKind::Oauth2Credentials, "consumer", EntityKind::Consumers),
    (EntityKind::Plugins, "route", EntityKind::Routes),
    (EntityKind::Plugins, "service", EntityKind::Services),
    (EntityKind::Plugins, "consumer", EntityKind::Consumers),
    (EntityKind::Plugins, "consumer_group", EntityKind::ConsumerGroups),
];

/// A unique key of one entity: `(field, value)`.
pub type UniqueKey = (&'static str, String);
/// A foreign key of one entity: `(field, parent kind, parent id)`.
pub type ForeignRef = (&'static str, EntityKind, Uuid);

/// Kong's plugin uniqueness rule as one string:
/// `<name>:<route id>:<service id>:<consumer id>` with empty parts for none.
pub fn plugin_cache_key(plugin: &Plugin) -> String {
    let part = |fk: &Option<ForeignKey>| fk.map(|k| k.id.to_string()).unwrap_or_default();
    let mut key = format!(
        "{}:{}:{}:{}",
        plugin.name,
        part(&plugin.route),
        part(&plugin.service),
        part(&plugin.consumer)
    );
    // Kong Enterprise's fifth part; absent, the key is as it always was.
    if let Some(group) = plugin.consumer_group {
        key.push_str(&format!(":{}", group.id));
    }
    key
}

/// Kong's target uniqueness rule as one string: `<upstream id>:<target>`.
pub fn target_cache_key(target: &Target) -> String {
    format!("{}:{}", target.upstream.id, target.target)
}

/// Kong's ACL uniqueness rule as one string: `<consumer id>:<group>`.
pub fn acl_cache_key(consumer: Uuid, group: &str) -> String {
    format!("{consumer}:{group}")
}

/// Kong's key uniqueness rule (`cache_key = { "kid", "set" }`) as one
/// string: `<kid>:<set id>`, the set part empty for a key in no set.
pub fn key_cache_key(key: &Key) -> String {
    let set = key.set.map(|s| s.id.to_string()).unwrap_or_default();
    format!("{}:{set}", key.kid)
}

/// A membership's uniqueness rule: `<group id>:<consumer id>`.
pub fn membership_cache_key(membership: &ConsumerGroupConsumer) -> String {
    format!("{}:{}", membership.consumer_group.id, membership.consumer.id)
}

/// The unique keys `entity` holds (absent optional fields hold none).
pub fn unique_keys(entity: &Entity) -> Vec<UniqueKey> {
    fn some(field: &'static str, value: &Option<String>) -> Option<UniqueKey> {
        value.as_ref().map(|v| (field, v.clone()))
    }
    let keys = match entity {
        Entity::Vault(e) => vec![Some(("prefix", e.prefix.clone()))],
        Entity::ConsumerGroup(e) => vec![Some(("name", e.name.clone()))],
        Entity::ConsumerGroupConsumer(e) => vec![Some(("cache_key", membership_cache_key(e)))],
        Entity::KeySet(e) => vec![some("name", &e.name)],
        Entity::Key(e) => vec![some("name", &e.name), Some(("cache_key", key_cache_key(e)))],
        Entity::CaCertificate(e) => vec![some("cert_digest", &e.cert_digest)],
        Entity::Sni(e) => vec![Some(("name", e.name.clone()))],
        Entity::Service(e) => vec![some("name", &e.name)],
        Entity::Route(e) => vec![some("name", &e.name)],
        // A route or a service has at most one chain: its id is the key.
        Entity::FilterChain(e) => vec![
            some("name", &e.name),
            e.route.map(|fk| ("route", fk.id.to_string())),
            e.service.map(|fk| ("service", fk.id.to_string())),
        ],
        Entity::Upstream(e) => vec![Some(("name", e.name.clone()))],
        Entity::Target(e) => vec![Some(("cache_key", target_cache_key(e)))],
        Entity::Consumer(e) => vec![some("username", &e.username), some("custom_id", &e.custom_id)],
        Entity::KeyauthCredential(e) => vec![Some(("key", e.key.clone()))],
        Entity::BasicauthCredential(e) => vec![Some(("username", e.username.clone()))],
        Entity::Acl(e) => vec![Some(("cache_key", acl_cache_key(e.consumer.id, &e.group)))],
        Entity::JwtSecret(e) => vec![Some(("key", e.key.clone()))],
        Entity::HmacauthCredential(e) => vec![Some(("username", e.username.clone()))],
        Entity::Oauth2Credential(e) => vec![Some(("client_id", e.client_id.clone()))],
        Entity::Plugin(e) => vec![
            some("instance_name", &e.instance_name),
            Some(("cache_key", plugin_cache_key(e))),
        ],
        Entity::Certificate(_) => vec![],
    };
    keys.into_iter().flatten().collect()
}

/// The indexed foreign keys `entity` holds.
pub fn foreign_keys(entity: &Entity) -> Vec<ForeignRef> {
    fn some(field: &'static str, parent: EntityKind, fk: &Option<ForeignKey>) -> Option<ForeignRef> {
        fk.map(|k| (field, parent, k.id))
    }
    let refs = match entity {
        Entity::Sni(e) => vec![Some(("certificate", EntityKind::Certificates, e.certificate.id))],
        Entity::Key(e) => vec![some("set", EntityKind::KeySets, &e.set)],
        Entity::ConsumerGroupConsumer(e) => vec![
            Some(("consumer_group", EntityKind::ConsumerGroups, e.consumer_group.id)),
            Some(("consumer", EntityKind::Consumers, e.consumer.id)),
        ],
        Entity::Route(e) => vec![some("service", EntityKind::Services, &e.service)],
        Entity::FilterChain(e) => vec![
            some("route", EntityKind::Routes, &e.route),
            some("service", EntityKind::Services, &e.service),
        ],
        Entity::Target(e) => vec![Some(("upstream", EntityKind::Upstreams, e.upstream.id))],
        Entity::KeyauthCredential(KeyauthCredential { consumer, .. })
        | Entity::BasicauthCredential(BasicauthCredential { consumer, .. })
        | Entity::Acl(Acl { consumer, .. })
        | Entity::JwtSecret(JwtSecret { consumer, .. })
        | Entity::HmacauthCredential(HmacauthCredential { consumer, .. })
        | Entity::Oauth2Credential(Oauth2Credential { consumer, .. }) => {
            vec![Some(("consumer", EntityKind::Consumers, consumer.id))]
        }
        Entity::Plugin(e) => vec![
            some("route", EntityKind::Routes, &e.route),
            some("service", EntityKind::Services, &e.service),
            some("consumer", EntityKind::Consumers, &e.consumer),
            some("consumer_group", EntityKind::ConsumerGroups, &e.consumer_group),
        ],
        _ => vec![],
    };
    refs.into_iter().flatten().collect()
}

/// Foreign keys (child kind, field) that point at entities of `parent`.
pub fn children_of(parent: EntityKind) -> impl Iterator<Item = (EntityKind, &'static str)> {
    FOREIGN_FIELDS
        .iter()
        .filter(move |(_, _, p)| *p == parent)
        .map(|(kind, field, _)| (*kind, *field))
}

/// Run `$body` with `$list` bound to `$config`'s list of `$kind` and `$wrap`
/// to the [`Entity`] variant that holds one of its items.
macro_rules! with_list {
    ($config:expr, $kind:expr, |$list:ident, $wrap:ident| $body:expr) => {{
        let c = $config;
        match $kind {
            EntityKind::Vaults => {
                let ($list, $wrap) = (&c.vaults, Entity::Vault);
                $body
            }
            EntityKind::CaCertificates => {
                let ($list, $wrap) = (&c.ca_certificates, Entity::CaCertificate);
                $body
            }
            EntityKind::Certificates => {
                let ($list, $wrap) = (&c.certificates, Entity::Certificate);
                $body
            }
            EntityKind::Snis => {
                let ($list, $wrap) = (&c.snis, Entity::Sni);
                $body
            }
            EntityKind::KeySets => {
                let ($list, $wrap) = (&c.key_sets, Entity::KeySet);
                $body
            }
            EntityKind::Keys => {
                let ($list, $wrap) = (&c.keys, Entity::Key);
                $body
            }
            EntityKind::Services => {
                let ($list, $wrap) = (&c.services, Entity::Service);
                $body
            }
            EntityKind::Routes => {
                let ($list, $wrap) = (&c.routes, Entity::Route);
                $body
            }
            EntityKind::FilterChains => {
                let ($list, $wrap) = (&c.filter_chains, Entity::FilterChain);
                $body
            }
            EntityKind::Upstreams => {
                let ($list, $wrap) = (&c.upstreams, Entity::upstream);
                $body
            }
            EntityKind::Targets => {
                let ($list, $wrap) = (&c.targets, Entity::Target);
                $body
            }
            EntityKind::Consumers => {
                let ($list, $wrap) = (&c.consumers, Entity::Consumer);
                $body
            }
            EntityKind::ConsumerGroups => {
                let ($list, $wrap) = (&c.consumer_groups, Entity::ConsumerGroup);
                $body
            }
            EntityKind::ConsumerGroupConsumers => {
                let ($list, $wrap) = (&c.consumer_group_consumers, Entity::ConsumerGroupConsumer);
                $body
            }
            EntityKind::KeyauthCredentials => {
                let ($list, $wrap) = (&c.keyauth_credentials, Entity::KeyauthCredential);
                $body
            }
            EntityKind::BasicauthCredentials => {
                let ($list, $wrap) = (&c.basicauth_credentials, Entity::BasicauthCredential);
                $body
            }
            EntityKind::Acls => {
                let ($list, $wrap) = (&c.acls, Entity::Acl);
                $body
            }
            EntityKind::JwtSecrets => {
                let ($list, $wrap) = (&c.jwt_secrets, Entity::JwtSecret);
                $body
            }
            EntityKind::HmacauthCredentials => {
                let ($list, $wrap) = (&c.hmacauth_credentials, Entity::HmacauthCredential);
                $body
            }
            EntityKind::Oauth2Credentials => {
                let ($list, $wrap) = (&c.oauth2_credentials, Entity::Oauth2Credential);
                $body
            }
            EntityKind::Plugins => {
                let ($list, $wrap) = (&c.plugins, Entity::Plugin);
                $body
            }
        }
    }};
}

/// The ids of `config`'s entities of `kind`, in list order.
pub fn config_ids(config: &Config, kind: EntityKind) -> Vec<Uuid> {
    with_list!(config, kind, |list, _wrap| list.iter().map(|e| e.id).collect())
}

/// A copy of `config`'s entity of `kind` at `index` in that kind's list.
pub fn config_entity(config: &Config, kind: EntityKind, index: usize) -> Option<Entity> {
    with_list!(config, kind, |list, wrap| list.get(index).cloned().map(wrap))
}

/// Every entity of a configuration, kind by kind in [`EntityKind::ALL`] order.
pub fn config_entities(config: &Config) -> impl Iterator<Item = Entity> + '_ {
    EntityKind::ALL
        .into_iter()
        .flat_map(move |kind| (0..).map_while(move |index| config_entity(config, kind, index)))
}

/// The checks a whole configuration passes before a dialect replaces what
/// it stores with it: ids and unique keys once each, every parent inside
/// the configuration (nothing else survives a replacement). The
/// PostgreSQL and Cassandra dialects run it in memory, first.
pub fn check_whole(config: &Config) -> Result<(), crate::StoreError> {
    let mut ids = std::collections::HashSet::new();
    let mut uniques = std::collections::HashSet::new();
    for entity in config_entities(config) {
        let (kind, id) = (entity.kind(), entity.id());
        if !ids.insert((kind, id)) {
            let value = id.to_string();
            return Err(crate::StoreError::UniqueViolation {
                kind,
                field: "id".into(),
                value,
            });
        }
        for (field, value) in unique_keys(&entity) {
            if !uniques.insert((kind, field, value.clone())) {
                let field = field.to_string();
                return Err(crate::StoreError::UniqueViolation { kind, field, value });
            }
        }
    }
    for entity in config_entities(config) {
        for (field, parent_kind, parent) in foreign_keys(&entity) {
            if !ids.contains(&(parent_kind, parent)) {
                return Err(crate::StoreError::ForeignKey {
                    kind: entity.kind(),
                    id: entity.id(),
                    field: field.to_string(),
                    parent_kind,
                    parent,
                });
            }
        }
    }
    Ok(())
}
