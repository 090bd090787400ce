//! Kong's configuration entities as typed values, after validation and defaults.
//!
//! Field names, types and defaults follow Kong 3.x. Foreign keys are stored as
//! `{"id": "..."}` objects exactly as Kong serialises them. These types are what
//! the store persists and what the snapshot compiler reads; raw user input is
//! checked by [`crate::schema`] before it becomes one of these.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

/// A reference to another entity, serialised as Kong does: `{"id": "<uuid>"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ForeignKey {
    pub id: Uuid,
}

impl ForeignKey {
    pub fn new(id: Uuid) -> Self {
        ForeignKey { id }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: Option<String>,
    pub retries: i64,
    pub protocol: String,
    pub host: String,
    pub port: i64,
    pub path: Option<String>,
    pub connect_timeout: i64,
    pub write_timeout: i64,
    pub read_timeout: i64,
    pub tags: Option<Vec<String>>,
    pub client_certificate: Option<ForeignKey>,
    pub tls_verify: Option<bool>,
    pub tls_verify_depth: Option<i64>,
    pub ca_certificates: Option<Vec<Uuid>>,
    pub enabled: bool,
    /// Kong 3.10's names the upstream certificate may be valid for besides
    /// the service's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_sans: Option<TlsSans>,
}

/// A service's extra subject alternative names (`tls_sans`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TlsSans {
    pub dnsnames: Option<Vec<String>>,
    pub uris: Option<Vec<String>>,
}

/// One `sources` / `destinations` entry of a route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CidrPort {
    pub ip: Option<String>,
    pub port: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: Option<String>,
    pub protocols: Vec<String>,
    pub methods: Option<Vec<String>>,
    pub hosts: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    /// Header name (lower-cased) to accepted values.
    pub headers: Option<std::collections::BTreeMap<String, Vec<String>>>,
    pub https_redirect_status_code: i64,
    pub regex_priority: i64,
    pub strip_path: bool,
    pub path_handling: String,
    pub preserve_host: bool,
    pub request_buffering: bool,
    pub response_buffering: bool,
    pub snis: Option<Vec<String>>,
    pub sources: Option<Vec<CidrPort>>,
    pub destinations: Option<Vec<CidrPort>>,
    pub tags: Option<Vec<String>>,
    pub service: Option<ForeignKey>,
    /// Kong expressions-router fields (used by the router issue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

impl Route {
    /// A route with Kong's defaults and no matching fields set, for code
    /// that builds routes directly (tests, benches, fuzz targets) rather than
    /// through schema validation.
    pub fn with_kong_defaults(id: Uuid, created_at: i64) -> Route {
        Route {
            id,
            created_at,
            updated_at: created_at,
            name: None,
            protocols: vec!["http".into(), "https".into()],
            methods: None,
            hosts: None,
            paths: None,
            headers: None,
            https_redirect_status_code: 426,
            regex_priority: 0,
            strip_path: true,
            path_handling: "v0".into(),
            preserve_host: false,
            request_buffering: true,
            response_buffering: true,
            snis: None,
            sources: None,
            destinations: None,
            tags: None,
            service: None,
            expression: None,
            priority: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upstream {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: String,
    pub algorithm: String,
    pub hash_on: String,
    pub hash_fallback: String,
    pub hash_on_header: Option<String>,
    pub hash_fallback_header: Option<String>,
    pub hash_on_cookie: Option<String>,
    pub hash_on_cookie_path: String,
    pub hash_on_query_arg: Option<String>,
    pub hash_fallback_query_arg: Option<String>,
    pub hash_on_uri_capture: Option<String>,
    pub hash_fallback_uri_capture: Option<String>,
    pub slots: i64,
    pub healthchecks: Value,
    pub tags: Option<Vec<String>>,
    pub host_header: Option<String>,
    pub client_certificate: Option<ForeignKey>,
    pub use_srv_name: bool,
    /// Kong 3.10's `sticky-sessions` algorithm: the cookie naming a client's target.
    #[serde(default)]
    pub sticky_sessions_cookie: Option<String>,
    /// That cookie's path; `/` when not set.
    #[serde(default)]
    pub sticky_sessions_cookie_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub id: Uuid,
    pub created_at: f64,
    pub updated_at: f64,
    pub upstream: ForeignKey,
    pub target: String,
    pub weight: i64,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consumer {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub username: Option<String>,
    pub custom_id: Option<String>,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plugin {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: String,
    pub instance_name: Option<String>,
    pub route: Option<ForeignKey>,
    pub service: Option<ForeignKey>,
    pub consumer: Option<ForeignKey>,
    /// Kong Enterprise's consumer-group scope (decK writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<ForeignKey>,
    /// Kong Enterprise's dynamic ordering: `{"before": {"access": [names]},
    /// "after": {...}}`, applied per route when the chains are compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<Value>,
    /// Plugin configuration with the plugin schema's defaults filled in.
    pub config: Map<String, Value>,
    pub protocols: Vec<String>,
    pub enabled: bool,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub cert: String,
    pub key: String,
    pub cert_alt: Option<String>,
    pub key_alt: Option<String>,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sni {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: String,
    pub certificate: ForeignKey,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaCertificate {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub cert: String,
    pub cert_digest: Option<String>,
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyauthCredential {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub key: String,
    pub ttl: Option<i64>,
    pub tags: Option<Vec<String>>,
}

/// A basic-auth credential. `password` is never the password itself but
/// Kong's salted hash of it (see [`crate::schema::basicauth_password_hash`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BasicauthCredential {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub username: String,
    pub password: String,
    pub tags: Option<Vec<String>>,
}

/// A consumer's membership of an ACL group; unique per (consumer, group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Acl {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub group: String,
    pub tags: Option<Vec<String>>,
}

/// A JWT credential: `key` names it (the token's `iss` claim by default),
/// `secret` signs HMAC tokens, `rsa_public_key` verifies the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JwtSecret {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub key: String,
    pub secret: String,
    pub rsa_public_key: Option<String>,
    pub algorithm: String,
    pub tags: Option<Vec<String>>,
}

/// An HMAC-auth credential: `secret` is kept as given (the plugin needs it
/// to compute signatures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HmacauthCredential {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub username: String,
    pub secret: String,
    pub tags: Option<Vec<String>>,
}

/// An OAuth2 client application (Kong's `oauth2_credentials`): `client_id`
/// names it; `client_secret` is kept as given or, with `hash_secret`, as
/// Kong's PBKDF2 PHC string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Oauth2Credential {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer: ForeignKey,
    pub name: String,
    pub client_id: String,
    pub client_secret: String,
    pub hash_secret: bool,
    pub redirect_uris: Option<Vec<String>>,
    pub client_type: String,
    pub tags: Option<Vec<String>>,
}

/// A named group of consumers (Kong's `consumer_groups`): plugins may be
/// scoped to it, and ACLs may count it as a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: String,
    pub tags: Option<Vec<String>>,
}

/// A consumer's membership of a consumer group; unique per (group, consumer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerGroupConsumer {
    pub id: Uuid,
    pub created_at: i64,
    pub consumer_group: ForeignKey,
    pub consumer: ForeignKey,
}

/// A vault: a named backend for `{vault://<prefix>/<resource>[/<key>]}`
/// references (Kong's `vaults`; `name` picks the implementation, `config`
/// is that implementation's settings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vault {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub prefix: String,
    pub name: String,
    pub description: Option<String>,
    pub config: Map<String, Value>,
    pub tags: Option<Vec<String>>,
}

/// A named set of keys (Kong's `key_sets`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeySet {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: Option<String>,
    pub tags: Option<Vec<String>>,
}

/// A key given as PEM (Kong's `typedefs.pem`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPem {
    pub private_key: Option<String>,
    pub public_key: Option<String>,
}

/// A public and/or private key, as a JWK or PEM (Kong's `keys`); unique
/// per (`kid`, `set`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Key {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub set: Option<ForeignKey>,
    pub name: Option<String>,
    pub kid: String,
    pub jwk: Option<String>,
    pub pem: Option<KeyPem>,
    pub tags: Option<Vec<String>>,
}

/// One filter of a filter chain (Kong's `wasm_filter` record): a proxy-wasm
/// module by name, with its configuration as given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WasmFilter {
    pub name: String,
    /// Kong's `json` type: any JSON value (a string, or what the filter's
    /// `config_schema` accepts); `None` when absent or null.
    pub config: Option<Value>,
    pub enabled: bool,
}

/// The proxy-wasm filters that run for one route or one service (Kong's
/// `filter_chains`); exactly one of `route` and `service` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilterChain {
    pub id: Uuid,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: Option<String>,
    pub enabled: bool,
    pub route: Option<ForeignKey>,
    pub service: Option<ForeignKey>,
    pub filters: Vec<WasmFilter>,
    pub tags: Option<Vec<String>>,
}

/// Every entity kind Strait stores, in dependency order (a kind only refers
/// to kinds before it), which is also the order in which they are loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Vaults,
    CaCertificates,
    Certificates,
    Snis,
    KeySets,
    Keys,
    Services,
    Routes,
    FilterChains,
    Upstreams,
    Targets,
    Consumers,
    ConsumerGroups,
    ConsumerGroupConsumers,
    KeyauthCredentials,
    BasicauthCredentials,
    Acls,
    JwtSecrets,
    HmacauthCredentials,
    Oauth2Credentials,
    Plugins,
}

impl EntityKind {
    pub const ALL: [EntityKind; 21] = [
        EntityKind::Vaults,
        EntityKind::CaCertificates,
        EntityKind::Certificates,
        EntityKind::Snis,
        EntityKind::KeySets,
        EntityKind::Keys,
        EntityKind::Services,
        EntityKind::Routes,
        EntityKind::FilterChains,
        EntityKind::Upstreams,
        EntityKind::Targets,
        EntityKind::Consumers,
        EntityKind::ConsumerGroups,
        EntityKind::ConsumerGroupConsumers,
        EntityKind::KeyauthCredentials,
        EntityKind::BasicauthCredentials,
        EntityKind::Acls,
        EntityKind::JwtSecrets,
        EntityKind::HmacauthCredentials,
        EntityKind::Oauth2Credentials,
        EntityKind::Plugins,
    ];

    /// The table / endpoint name Kong uses (`services`, `keyauth_credentials`, ...).
    pub fn table(self) -> &'static str {
        match self {
            EntityKind::Vaults => "vaults",
            EntityKind::ConsumerGroups => "consumer_groups",
            EntityKind::ConsumerGroupConsumers => "consumer_group_consumers",
            EntityKind::KeySets => "key_sets",
            EntityKind::Keys => "keys",
            EntityKind::CaCertificates => "ca_certificates",
            EntityKind::Certificates => "certificates",
            EntityKind::Snis => "snis",
            EntityKind::Services => "services",
            EntityKind::Routes => "routes",
            EntityKind::FilterChains => "filter_chains",
            EntityKind::Upstreams => "upstreams",
            EntityKind::Targets => "targets",
            EntityKind::Consumers => "consumers",
            EntityKind::KeyauthCredentials => "keyauth_credentials",
            EntityKind::BasicauthCredentials => "basicauth_credentials",
            EntityKind::Acls => "acls",
            EntityKind::JwtSecrets => "jwt_secrets",
            EntityKind::HmacauthCredentials => "hmacauth_credentials",
            EntityKind::Oauth2Credentials => "oauth2_credentials",
            EntityKind::Plugins => "plugins",
        }
    }

    /// Kong's singular entity name as it appears in error bodies.
    pub fn singular(self) -> &'static str {
        match self {
            EntityKind::Vaults => "vault",
            EntityKind::ConsumerGroups => "consumer_group",
            EntityKind::ConsumerGroupConsumers => "consumer_group_consumer",
            EntityKind::KeySets => "key_set",
            EntityKind::Keys => "key",
            EntityKind::CaCertificates => "ca_certificate",
            EntityKind::Certificates => "certificate",
            EntityKind::Snis => "sni",
            EntityKind::Services => "service",
            EntityKind::Routes => "route",
            EntityKind::FilterChains => "filter_chain",
            EntityKind::Upstreams => "upstream",
            EntityKind::Targets => "target",
            EntityKind::Consumers => "consumer",
            EntityKind::KeyauthCredentials => "keyauth_credential",
            EntityKind::BasicauthCredentials => "basicauth_credential",
            EntityKind::Acls => "acl",
            EntityKind::JwtSecrets => "jwt_secret",
            EntityKind::HmacauthCredentials => "hmacauth_credential",
            EntityKind::Oauth2Credentials => "oauth2_credential",
            EntityKind::Plugins => "plugin",
        }
    }

    pub fn from_table(name: &str) -> Option<EntityKind> {
        EntityKind::ALL.into_iter().find(|k| k.table() == name)
    }
}

/// A complete configuration: every entity, validated, defaults filled in,
/// foreign keys resolved to ids. This is what `/config` replaces atomically
/// and what the store persists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub vaults: Vec<Vault>,
    #[serde(default)]
    pub key_sets: Vec<KeySet>,
    #[serde(default)]
    pub keys: Vec<Key>,
    #[serde(default)]
    pub consumer_groups: Vec<ConsumerGroup>,
    #[serde(default)]
    pub consumer_group_consumers: Vec<ConsumerGroupConsumer>,
    pub services: Vec<Service>,
    pub routes: Vec<Route>,
    #[serde(default)]
    pub filter_chains: Vec<FilterChain>,
    pub upstreams: Vec<Upstream>,
    pub targets: Vec<Target>,
    pub consumers: Vec<Consumer>,
    pub plugins: Vec<Plugin>,
    pub certificates: Vec<Certificate>,
    pub snis: Vec<Sni>,
    pub ca_certificates: Vec<CaCertificate>,
    pub keyauth_credentials: Vec<KeyauthCredential>,
    pub basicauth_credentials: Vec<BasicauthCredential>,
    pub acls: Vec<Acl>,
    pub jwt_secrets: Vec<JwtSecret>,
    pub hmacauth_credentials: Vec<HmacauthCredential>,
    #[serde(default)]
    pub oauth2_credentials: Vec<Oauth2Credential>,
}

impl Config {
    /// Number of entities of every kind together.
    pub fn entity_count(&self) -> usize {
        self.vaults.len()
            + self.key_sets.len()
            + self.keys.len()
            + self.consumer_groups.len()
            + self.consumer_group_consumers.len()
            + self.services.len()
            + self.routes.len()
            + self.filter_chains.len()
            + self.upstreams.len()
            + self.targets.len()
            + self.consumers.len()
            + self.plugins.len()
            + self.certificates.len()
            + self.snis.len()
            + self.ca_certificates.len()
            + self.keyauth_credentials.len()
            + self.basicauth_credentials.len()
            + self.acls.len()
            + self.jwt_secrets.len()
            + self.hmacauth_credentials.len()
            + self.oauth2_credentials.len()
    }

    /// The entities of one kind as JSON objects, in stored order.
    pub fn entities_json(&self, kind: EntityKind) -> Vec<Value> {
        fn to_values<T: Serialize>(items: &[T]) -> Vec<Value> {
            items
                .iter()
                .map(|item| serde_json::to_value(item).unwrap_or(Value::Null))
                .collect()
        }
        match kind {
            EntityKind::Vaults => to_values(&self.vaults),
            EntityKind::KeySets => to_values(&self.key_sets),
            EntityKind::Keys => to_values(&self.keys),
            EntityKind::ConsumerGroups => to_values(&self.consumer_groups),
            EntityKind::ConsumerGroupConsumers => to_values(&self.consumer_group_consumers),
            EntityKind::Services => to_values(&self.services),
            EntityKind::Routes => to_values(&self.routes),
            EntityKind::FilterChains => to_values(&self.filter_chains),
            EntityKind::Upstreams => to_values(&self.upstreams),
            EntityKind::Targets => to_values(&self.targets),
            EntityKind::Consumers => to_values(&self.consumers),
            EntityKind::Plugins => to_values(&self.plugins),
            EntityKind::Certificates => to_values(&self.certificates),
            EntityKind::Snis => to_values(&self.snis),
            EntityKind::CaCertificates => to_values(&self.ca_certificates),
            EntityKind::KeyauthCredentials => to_values(&self.keyauth_credentials),
            EntityKind::BasicauthCredentials => to_values(&self.basicauth_credentials),
            EntityKind::Acls => to_values(&self.acls),
            EntityKind::JwtSecrets => to_values(&self.jwt_secrets),
            EntityKind::HmacauthCredentials => to_values(&self.hmacauth_credentials),
            EntityKind::Oauth2Credentials => to_values(&self.oauth2_credentials),
        }
    }
}
