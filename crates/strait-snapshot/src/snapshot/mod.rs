//! The immutable view of the configuration the proxy serves from.
//!
//! A [`Snapshot`] is compiled off the proxy threads and published through
//! one `ArcSwap`; a request loads it once and keeps it to its end. Everything
//! expensive happens here: route compilation, plugin instances, TLS material,
//! balancer rings.
//!
//! Entities and compiled parts live in copy-on-write maps ([`CowMap`]), so
//! [`apply_delta`] derives the next snapshot from the previous one in time
//! proportional to the change: one route added is one router insert and one
//! plugin chain, not a rebuild. Compiling a whole configuration is the same
//! code path with every entity as an upsert into an empty snapshot.

mod derive;
mod filters;
mod identity;
mod state;

use std::sync::Arc;

use strait_core::{Config, ConfigChange, ConfigDelta, ConfigVersion, DeltaBody, EntityKind};
use strait_router::{Router, RouterError};
use uuid::Uuid;

use strait_plugins::ConsumerPlugin;

use crate::balancer::Balancer;
use crate::tls::{CertificateIndex, UpstreamTls};

use self::derive::{build_plugin_instance, note_change, rebuild, Compiled, Dirty};
pub(crate) use self::state::EntityState;

/// One problem found while compiling, naming the entity it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileProblem {
    /// e.g. `plugins[9c1f...]` or `certificates[...]`.
    pub entity: String,
    pub message: String,
}

/// Every problem that kept a configuration from compiling.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .problems.iter().map(|p| format!("{}: {}", p.entity, p.message)).collect::<Vec<_>>().join("; "))]
pub struct CompileError {
    pub problems: Vec<CompileProblem>,
}

/// A service with what is needed to reach it, prepared at compile time.
#[derive(Debug)]
pub struct ServiceRuntime {
    pub service: strait_core::Service,
    pub tls: Option<Arc<UpstreamTls>>,
    /// Present when the service host names an upstream entity.
    pub balancer: Option<Arc<Balancer>>,
    /// The service host, when it is an IP address (read once here, not per request).
    pub host_ip: Option<std::net::IpAddr>,
    /// The `Host` a request to the service's own host carries (`host`, or
    /// `host:port` off the scheme's default port), made once here.
    pub host_header: Option<http::HeaderValue>,
}

impl ServiceRuntime {
    pub fn new(service: strait_core::Service, tls: Option<Arc<UpstreamTls>>, balancer: Option<Arc<Balancer>>) -> Self {
        let host_ip = service.host.parse().ok();
        let port = service.port as u16;
        let host_header = host_header(&service.host, port, tls.is_some());
        ServiceRuntime {
            service,
            tls,
            balancer,
            host_ip,
            host_header,
        }
    }
}

/// The `Host` for a request to `name` on `port`: the name alone on the
/// scheme's default port (80, or 443 with TLS), else `name:port`.
pub fn host_header(name: &str, port: u16, tls: bool) -> Option<http::HeaderValue> {
    if port == if tls { 443 } else { 80 } {
        http::HeaderValue::from_str(name).ok()
    } else {
        http::HeaderValue::from_str(&format!("{name}:{port}")).ok()
    }
}

/// What the proxy needs for one matched route.
#[derive(Debug, Default)]
pub struct RouteRuntime {
    pub plugins: strait_plugins::PluginChain,
}

pub struct Snapshot {
    pub version: ConfigVersion,
    /// Kong's `configuration_hash`: md5 of the document the configuration
    /// came from, or of the configuration itself.
    pub hash: String,
    entities: EntityState,
    compiled: Compiled,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Snapshot(version {}, {} routes)",
            self.version,
            self.compiled.router.len()
        )
    }
}

impl Snapshot {
    /// The snapshot served before any configuration is loaded.
    pub fn empty() -> Snapshot {
        Snapshot {
            version: 0,
            hash: config_hash(&Config::default()),
            entities: EntityState::default(),
            compiled: Compiled::default(),
        }
    }

    pub fn router(&self) -> &Router {
        &self.compiled.router
    }

    pub fn service(&self, id: Uuid) -> Option<&Arc<ServiceRuntime>> {
        self.compiled.services.get(&id)
    }

    /// Every upstream's balancer (the health checker probes their targets).
    pub fn balancers(&self) -> impl Iterator<Item = &Arc<Balancer>> {
        self.compiled.balancers.values()
    }

    /// The balancer of the upstream with this id.
    pub fn balancer(&self, upstream: Uuid) -> Option<&Arc<Balancer>> {
        let name = self.entities.upstreams.get(&upstream)?.name.to_ascii_lowercase();
        self.compiled.balancers.get(name.as_str())
    }

    /// The balancer of the upstream named `name` (a plugin's target may
    /// name an upstream, as a service's host may).
    pub fn balancer_named(&self, name: &str) -> Option<&Arc<Balancer>> {
        match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => self.compiled.balancers.get(name.to_ascii_lowercase().as_str()),
            false => self.compiled.balancers.get(name),
        }
    }

    /// Labels for metrics (Kong's prometheus plugin): a route's name, else
    /// its id.
    pub fn route_label(&self, id: Uuid) -> Option<String> {
        let route = self.entities.routes.get(&id)?;
        Some(route.name.clone().unwrap_or_else(|| id.to_string()))
    }

    /// A service's name, else its host.
    pub fn service_label(&self, id: Uuid) -> Option<String> {
        let service = self.entities.services.get(&id)?;
        Some(service.name.clone().unwrap_or_else(|| service.host.clone()))
    }

    /// A consumer's username, else its custom_id, else its id.
    pub fn consumer_label(&self, id: Uuid) -> Option<String> {
        let consumer = self.entities.consumers.get(&id)?;
        Some(
            consumer
                .username
                .clone()
                .or_else(|| consumer.custom_id.clone())
                .unwrap_or_else(|| id.to_string()),
        )
    }

    /// Every target with its upstream's name and its health for metrics
    /// (`healthy`, `unhealthy`, `healthchecks_off`), sorted.
    pub fn target_states(&self) -> Vec<(String, String, &'static str)> {
        let mut out: Vec<(String, String, &'static str)> = self
            .entities
            .targets
            .values()
            .filter_map(|t| {
                let upstream = self.entities.upstreams.get(&t.upstream.id)?;
                let state = self
                    .balancer(upstream.id)
                    .and_then(|b| b.peer_for(&t.target).map(|(_, peer)| b.state(peer)))
                    .map_or("healthchecks_off", |state| state.metric_name());
                Some((upstream.name.clone(), t.target.clone(), state))
            })
            .collect();
        out.sort();
        out
    }

    /// The configs of the enabled plugins named `name`.
    pub fn plugin_configs<'s>(
        &'s self,
        name: &'s str,
    ) -> impl Iterator<Item = &'s serde_json::Map<String, serde_json::Value>> + 's {
        self.entities
            .plugins
            .values()
            .filter(move |p| p.name == name && p.enabled)
            .map(|p| &p.config)
    }

    /// The route's plugin chain; `None` when no plugin applies to it.
    pub fn route_runtime(&self, id: Uuid) -> Option<&Arc<RouteRuntime>> {
        self.compiled.routes.get(&id)
    }

    /// Every `certificates` entity's key (OCSP stapling looks them over).
    pub fn served_certificates(&self) -> Vec<Arc<rustls::sign::CertifiedKey>> {
        self.compiled.certificates.all().cloned().collect()
    }

    /// The certificate for a TLS handshake with `server_name`: global
    /// certificate-phase plugins first (they may pick a stored certificate
    /// or refuse the handshake, `None`), then the certificate whose SNI
    /// matches, then `default`.
    pub fn choose_certificate(
        &self,
        server_name: Option<&str>,
        default: &Arc<rustls::sign::CertifiedKey>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        // Looked up once: the plugins learn whether an SNI entity serves the
        // name, and the handshake falls back to it.
        let by_name = server_name.and_then(|name| self.compiled.certificates.resolve(name));
        let chain = &self.compiled.global_certificate;
        if !chain.is_empty() {
            let ctx = strait_plugins::CertificateCtx {
                server_name,
                has_sni_certificate: by_name.is_some(),
            };
            match chain.certificate(&ctx) {
                strait_plugins::CertificateFlow::Refuse => return None,
                strait_plugins::CertificateFlow::UseKey(key) => return Some(key),
                strait_plugins::CertificateFlow::UseCertificate(id) => {
                    if let Some(key) = self.compiled.certificates.by_id(id) {
                        return Some(key);
                    }
                }
                strait_plugins::CertificateFlow::Continue => {}
            }
        }
        Some(by_name.unwrap_or_else(|| default.clone()))
    }

    /// Plugins configured for `consumer`.
    pub fn consumer_plugins(&self, consumer: Uuid) -> &[ConsumerPlugin] {
        self.compiled
            .identities
            .consumer_plugins
            .get(&consumer)
            .map(|list| list.as_slice())
            .unwrap_or(&[])
    }

    /// The changes that turn this snapshot's configuration into `config`
    /// (see `EntityState::diff`); `generated` is the timestamp parsing gave
    /// entities that had none (the running timestamps are adopted into
    /// `config` where those stand).
    pub fn diff(&self, config: &mut Config, generated: i64) -> Vec<ConfigChange> {
        self.entities.diff(config, generated)
    }

    /// The changes that remove `gone` and upsert `part` (see
    /// `EntityState::changes_to`).
    pub fn changes_to(&self, part: &mut Config, gone: &[(EntityKind, Uuid)], generated: i64) -> Vec<ConfigChange> {
        self.entities.changes_to(part, gone, generated)
    }

    /// The entity of `kind` with `id` in this configuration (a copy).
    pub fn entity(&self, kind: strait_core::EntityKind, id: Uuid) -> Option<strait_core::Entity> {
        self.entities.get(kind, id)
    }

    pub fn certificates(&self) -> &CertificateIndex {
        &self.compiled.certificates
    }

    /// The whole configuration as plain lists (built on demand: O(entities)).
    pub fn config(&self) -> Config {
        self.entities.to_config()
    }

    /// [`Snapshot::config`] as a flat declarative JSON document, written
    /// into `out` as it is rendered, without copying the entities (the text
    /// need never be whole in memory); the first error of `out` stops it.
    pub fn write_config_json<W: std::io::Write>(&self, out: W) -> std::io::Result<W> {
        let document = strait_core::declarative::DeclarativeJson::writing_to(out)?;
        self.entities.write_declarative_json(document)?.end()
    }

    /// Names of the plugins enabled anywhere in this configuration.
    pub fn enabled_plugin_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entities.plugins.values().map(|p| p.name.clone()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    pub fn entity_count(&self) -> usize {
        let e = &self.entities;
        e.services.len()
            + e.routes.len()
            + e.filter_chains.len()
            + e.upstreams.len()
            + e.targets.len()
            + e.consumers.len()
            + e.plugins.len()
            + e.certificates.len()
            + e.snis.len()
            + e.ca_certificates.len()
            + e.keyauth_credentials.len()
            + e.basicauth_credentials.len()
            + e.acls.len()
            + e.jwt_secrets.len()
            + e.hmacauth_credentials.len()
            + e.oauth2_credentials.len()
    }
}

/// md5 hex of the canonical JSON of a configuration.
pub fn config_hash(config: &Config) -> String {
    use md5::{Digest, Md5};
    let json = serde_json::to_vec(config).unwrap_or_default();
    Md5::digest(&json).iter().map(|b| format!("{b:02x}")).collect()
}

/// The hash after entity changes: md5 of the previous hash and the changes,
/// so it moves with every change at a cost proportional to the change.
fn chained_hash(previous: &str, changes: &[ConfigChange]) -> String {
    use md5::{Digest, Md5};
    let mut hasher = Md5::new();
    hasher.update(previous.as_bytes());
    hasher.update(serde_json::to_vec(changes).unwrap_or_default());
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A route the router rejected, named by id (the message names it too).
fn route_problem(error: &RouterError) -> CompileProblem {
    CompileProblem {
        entity: format!("routes[{}]", error.route().id),
        message: error.to_string(),
    }
}

/// Compile a whole configuration into a snapshot, or list every problem.
pub fn compile_snapshot(version: ConfigVersion, config: Arc<Config>) -> Result<Snapshot, CompileError> {
    compile_snapshot_hashed(version, config, None)
}

/// [`compile_snapshot`] with the configuration's hash when the caller has
/// it (the input's md5 for a declarative load, the stored hash at start):
/// hashing the canonical JSON of a large configuration costs about as much
/// as building its router.
pub fn compile_snapshot_hashed(
    version: ConfigVersion,
    config: Arc<Config>,
    hash: Option<String>,
) -> Result<Snapshot, CompileError> {
    let entities = EntityState::from_config(&config);
    let hash = hash.unwrap_or_else(|| config_hash(&config));
    compile_state(version, entities, hash)
}

/// A whole configuration assembled part by part (a data plane's transfer
/// from its control plane): each entity goes straight into the state, so
/// the configuration is never held twice, and the snapshot is compiled
/// once, at the end.
#[derive(Default)]
pub struct SnapshotBuilder {
    entities: EntityState,
}

impl SnapshotBuilder {
    pub fn add(&mut self, entity: strait_core::Entity) {
        self.entities.upsert(entity);
    }

    /// The snapshot of everything added, at `version` with `hash`.
    pub fn finish(self, version: ConfigVersion, hash: String) -> Result<Snapshot, CompileError> {
        compile_state(version, self.entities, hash)
    }
}

fn compile_state(version: ConfigVersion, entities: EntityState, hash: String) -> Result<Snapshot, CompileError> {
    let mut problems = Vec::new();
    let routes: Vec<_> = entities.routes.values().cloned().collect();
    let router = Router::build_all(&routes).unwrap_or_else(|errors| {
        problems.extend(errors.iter().map(route_problem));
        Router::default()
    });
    let mut compiled = Compiled {
        router,
        ..Compiled::default()
    };
    let plugin_ids: Vec<Uuid> = entities.plugins.iter().map(|(id, _)| *id).collect();
    for id in plugin_ids {
        build_plugin_instance(&mut compiled, &entities, id, &mut problems);
    }
    compiled.identities = identity::Identities::build(&entities, &compiled.plugin_instances);
    rebuild(&mut compiled, &entities, Dirty::everything(), &mut problems);
    finish(version, hash, entities, compiled, problems)
}

fn finish(
    version: ConfigVersion,
    hash: String,
    entities: EntityState,
    compiled: Compiled,
    problems: Vec<CompileProblem>,
) -> Result<Snapshot, CompileError> {
    if !problems.is_empty() {
        return Err(CompileError { problems });
    }
    Ok(Snapshot {
        version,
        hash,
        entities,
        compiled,
    })
}

impl Snapshot {
    /// When a secret reference in use now resolves to another value (a
    /// rotated file, a vault's new version), the snapshot with every holder
    /// of a reference rebuilt: same version and hash, new TLS keys and
    /// plugin instances. `None`: nothing rotated. A reference that no
    /// longer resolves keeps its last value (and is logged, never shown).
    pub fn refresh_secrets(&self) -> Option<Result<Snapshot, CompileError>> {
        if self.compiled.secrets.is_empty() {
            return None;
        }
        let now = crate::secrets::fingerprints(&self.entities);
        let mut rotated = 0;
        for (reference, value) in &now {
            match value {
                Err(why) => tracing::warn!(
                    reference,
                    why,
                    "secret reference does not resolve; its last value stays"
                ),
                Ok(_) if self.compiled.secrets.get(reference) != Some(value) => rotated += 1,
                Ok(_) => {}
            }
        }
        if rotated == 0 || now.values().any(Result::is_err) {
            return None;
        }
        tracing::info!(rotated, "secrets rotated; rebuilding what uses them");
        let mut compiled = self.compiled.clone();
        let mut problems = Vec::new();
        rebuild(&mut compiled, &self.entities, Dirty::secrets(), &mut problems);
        Some(finish(
            self.version,
            self.hash.clone(),
            self.entities.clone(),
            compiled,
            problems,
        ))
    }
}

/// Derive the snapshot that `changes` produce from `previous`, touching only
/// what they name. The version is the previous one until the caller sets it.
pub fn derive_snapshot(previous: &Snapshot, changes: &[ConfigChange]) -> Result<Snapshot, CompileError> {
    let mut entities = previous.entities.clone();
    let mut compiled = previous.compiled.clone();
    let mut dirty = Dirty::default();
    let mut problems = Vec::new();
    for change in changes {
        let replaced = entities.apply(change);
        note_change(&mut compiled, &entities, change, &replaced, &mut dirty, &mut problems);
    }
    rebuild(&mut compiled, &entities, dirty, &mut problems);
    finish(
        previous.version,
        chained_hash(&previous.hash, changes),
        entities,
        compiled,
        problems,
    )
}

/// Apply a committed change to the previous snapshot.
pub fn apply_delta(previous: &Snapshot, delta: &ConfigDelta) -> Result<Snapshot, CompileError> {
    let mut snapshot = match &delta.body {
        DeltaBody::Replace(config) => compile_snapshot(delta.version, config.clone())?,
        DeltaBody::Changes(changes) => derive_snapshot(previous, changes)?,
    };
    snapshot.version = delta.version;
    Ok(snapshot)
}

impl strait_plugins::Directory for Snapshot {
    fn consumer(&self, id: Uuid) -> Option<&strait_core::Consumer> {
        self.entities.consumers.get(&id).map(|c| &**c)
    }

    fn consumer_by_id_or_username(&self, value: &str) -> Option<&strait_core::Consumer> {
        let by_id = Uuid::parse_str(value)
            .ok()
            .and_then(|id| self.entities.consumers.get(&id))
            .map(|c| &**c);
        by_id.or_else(|| {
            let id = self.compiled.identities.consumers_by_username.get(value)?;
            self.entities.consumers.get(id).map(|c| &**c)
        })
    }

    fn ca_certificate_pem(&self, id: Uuid) -> Option<&str> {
        self.entities.ca_certificates.get(&id).map(|ca| ca.cert.as_str())
    }

    fn consumer_by_custom_id(&self, custom_id: &str) -> Option<&strait_core::Consumer> {
        let id = self.compiled.identities.consumers_by_custom_id.get(custom_id)?;
        self.entities.consumers.get(id).map(|c| &**c)
    }

    fn keyauth_credential(&self, key: &str) -> Option<&strait_core::KeyauthCredential> {
        let found = self.compiled.identities.keyauth_by_key.get(key)?;
        self.entities.keyauth_credentials.get(&found.credential).map(|c| &**c)
    }

    fn keyauth_key(&self, key: &str) -> Option<strait_plugins::KeyauthKey> {
        self.compiled.identities.keyauth_by_key.get(key).cloned()
    }

    fn basicauth_credential(&self, username: &str) -> Option<&strait_core::BasicauthCredential> {
        let id = self.compiled.identities.basicauth_by_username.get(username)?;
        self.entities.basicauth_credentials.get(id)
    }

    fn jwt_secret(&self, key: &str) -> Option<&strait_core::JwtSecret> {
        let id = self.compiled.identities.jwt_by_key.get(key)?;
        self.entities.jwt_secrets.get(id)
    }

    fn hmacauth_credential(&self, username: &str) -> Option<&strait_core::HmacauthCredential> {
        let id = self.compiled.identities.hmacauth_by_username.get(username)?;
        self.entities.hmacauth_credentials.get(id)
    }

    fn oauth2_credential(&self, client_id: &str) -> Option<&strait_core::Oauth2Credential> {
        let id = self.compiled.identities.oauth2_by_client_id.get(client_id)?;
        self.entities.oauth2_credentials.get(id)
    }

    fn oauth2_credential_by_id(&self, id: Uuid) -> Option<&strait_core::Oauth2Credential> {
        self.entities.oauth2_credentials.get(&id)
    }

    fn consumer_view(&self, consumer: Uuid) -> Option<&strait_plugins::ConsumerView> {
        self.compiled.identities.consumer_views.get(&consumer).map(|v| &**v)
    }

    fn consumer_plugins(&self, consumer: Uuid) -> &[ConsumerPlugin] {
        Snapshot::consumer_plugins(self, consumer)
    }

    fn route(&self, id: Uuid) -> Option<&strait_core::Route> {
        self.entities.routes.get(&id).map(|r| &**r)
    }

    fn service(&self, id: Uuid) -> Option<&strait_core::Service> {
        self.entities.services.get(&id)
    }
}

/// Lookups compiled parts need from the entities (TLS material, targets).
impl EntityState {
    pub(crate) fn certificate(&self, id: Uuid) -> Option<&strait_core::Certificate> {
        self.certificates.get(&id)
    }

    pub(crate) fn ca_certificate(&self, id: Uuid) -> Option<&strait_core::CaCertificate> {
        self.ca_certificates.get(&id)
    }
}

#[cfg(test)]
mod tests;
