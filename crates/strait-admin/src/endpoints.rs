//! The Admin API's route table: which endpoint a path names, which methods
//! it allows (for `405`, `OPTIONS` and the `Allow` header), and the list of
//! path templates behind `GET /endpoints` and the OpenAPI document.

use strait_core::EntityKind;
use strait_store::keys::FOREIGN_FIELDS;

use crate::crud::{child_relation, collection_name, kind_for_collection, nested_name, parent_relation};
use crate::filter_chains::FilterListing;

/// What a request path names.
#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    Root,
    Status,
    /// `/clustering/data-planes`: a control plane's data planes.
    ClusteringDataPlanes,
    /// `/clustering/status`: Kong's older view of the same, keyed by id.
    ClusteringStatus,
    StatusReady,
    /// `/metrics`: the prometheus exposition.
    Metrics,
    Config,
    Endpoints,
    OpenApi,
    PluginsEnabled,
    Tags,
    Tag(String),
    Schema(String),
    SchemaValidate(String),
    PluginSchema(String),
    PluginSchemaValidate,
    /// `/schemas/filters/{name}`: an installed proxy-wasm filter's config schema.
    FilterSchema(String),
    /// `/routes/{r}/filters/{all,enabled,disabled}`: the filters that apply to a route.
    RouteFilters(String, FilterListing),
    /// `/proxy-cache`: flush every proxy-cache store.
    ProxyCache,
    /// `/proxy-cache/{cache_key}`.
    ProxyCacheKey(String),
    /// `/proxy-cache/{plugin_id}/caches/{cache_key}`.
    ProxyCachePluginKey(String, String),
    Collection(EntityKind),
    Entity(EntityKind, String),
    Children {
        parent: EntityKind,
        parent_key: String,
        child: EntityKind,
        field: &'static str,
    },
    Child {
        parent: EntityKind,
        parent_key: String,
        child: EntityKind,
        field: &'static str,
        key: String,
    },
    Parent {
        kind: EntityKind,
        key: String,
        field: &'static str,
        parent: EntityKind,
    },
    /// `/consumer_groups/{g}/consumers`.
    GroupMembers(String),
    /// `/consumer_groups/{g}/consumers/{c}`.
    GroupMember(String, String),
    /// `/consumers/{c}/consumer_groups`.
    ConsumerGroupsOf(String),
    /// `/consumers/{c}/consumer_groups/{g}`.
    ConsumerGroupOf(String, String),
    /// `/oauth2_tokens`: the token store (runtime data).
    Oauth2Tokens,
    /// `/oauth2_tokens/{id or access_token}`.
    Oauth2Token(String),
    /// `/sessions`: the session plugin's stored sessions (runtime data).
    Sessions,
    /// `/sessions/{id or session_id}`.
    Session(String),
    /// `/acme`: order or renew (the acme plugin).
    Acme,
    /// `/acme/certificates`.
    AcmeCertificates,
    /// `/acme/certificates/{host}`.
    AcmeCertificate(String),
    /// `/upstreams/{u}/health`.
    UpstreamHealth(String),
    /// `/upstreams/{u}/targets/all`: every target (Kong keeps history there; Strait has none).
    TargetsAll(String),
    /// `/upstreams/{u}/targets/{t}[/{address}]/healthy|unhealthy`.
    TargetHealth {
        upstream: String,
        target: String,
        address: Option<String>,
        healthy: bool,
    },
}

pub const READ_ONLY: &str = "GET, HEAD, OPTIONS";
pub const COLLECTION: &str = "GET, HEAD, OPTIONS, POST";
pub const ENTITY: &str = "DELETE, GET, HEAD, OPTIONS, PATCH, PUT";
pub const POST_ONLY: &str = "OPTIONS, POST";
pub const DELETE_ONLY: &str = "DELETE, OPTIONS";
pub const READ_DELETE: &str = "DELETE, GET, HEAD, OPTIONS";
pub const MEMBERS: &str = "DELETE, GET, HEAD, OPTIONS, POST";
pub const PUT_ONLY: &str = "OPTIONS, PUT";

impl Endpoint {
    /// Kong's `Allow` value: the methods in alphabetical order.
    pub fn allow(&self) -> &'static str {
        match self {
            Endpoint::Config => COLLECTION,
            Endpoint::SchemaValidate(_) | Endpoint::PluginSchemaValidate => POST_ONLY,
            Endpoint::ProxyCache => DELETE_ONLY,
            Endpoint::ProxyCacheKey(_) | Endpoint::ProxyCachePluginKey(..) => READ_DELETE,
            Endpoint::GroupMembers(_) | Endpoint::ConsumerGroupsOf(_) => MEMBERS,
            Endpoint::GroupMember(..) | Endpoint::ConsumerGroupOf(..) => READ_DELETE,
            Endpoint::TargetHealth { .. } => PUT_ONLY,
            // Kong serves targets only under their upstream; Strait keeps
            // the read-only top-level views.
            Endpoint::Collection(EntityKind::Targets) | Endpoint::Entity(EntityKind::Targets, _) => READ_ONLY,
            Endpoint::Collection(_) | Endpoint::Children { .. } | Endpoint::Oauth2Tokens => COLLECTION,
            Endpoint::Oauth2Token(_) => ENTITY,
            Endpoint::Session(_) => READ_DELETE,
            Endpoint::Acme => "OPTIONS, PATCH, POST",
            Endpoint::Entity(..) | Endpoint::Child { .. } | Endpoint::Parent { .. } => ENTITY,
            _ => READ_ONLY,
        }
    }

    /// True when the endpoint changes configuration for this method.
    pub fn writes(&self, method: &http::Method) -> bool {
        let entity_endpoint = matches!(
            self,
            Endpoint::Collection(_)
                | Endpoint::Entity(..)
                | Endpoint::Children { .. }
                | Endpoint::Child { .. }
                | Endpoint::Parent { .. }
                | Endpoint::Config
                | Endpoint::GroupMembers(_)
                | Endpoint::GroupMember(..)
                | Endpoint::ConsumerGroupsOf(_)
                | Endpoint::ConsumerGroupOf(..)
        );
        entity_endpoint && !matches!(*method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
    }
}

/// The endpoint `segments` (decoded path segments) name, if any.
pub fn parse(segments: &[String]) -> Option<Endpoint> {
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let fixed = match parts.as_slice() {
        [] => Endpoint::Root,
        ["status"] => Endpoint::Status,
        ["clustering", "data-planes"] => Endpoint::ClusteringDataPlanes,
        ["clustering", "status"] => Endpoint::ClusteringStatus,
        ["status", "ready"] => Endpoint::StatusReady,
        ["metrics"] => Endpoint::Metrics,
        ["config"] => Endpoint::Config,
        ["endpoints"] => Endpoint::Endpoints,
        ["openapi.json"] => Endpoint::OpenApi,
        ["plugins", "enabled"] => Endpoint::PluginsEnabled,
        ["tags"] => Endpoint::Tags,
        ["tags", tag] => Endpoint::Tag(tag.to_string()),
        ["schemas", "plugins", "validate"] => Endpoint::PluginSchemaValidate,
        ["schemas", "plugins", name] => Endpoint::PluginSchema(name.to_string()),
        ["schemas", "filters", name] => Endpoint::FilterSchema(name.to_string()),
        ["schemas", name, "validate"] => Endpoint::SchemaValidate(name.to_string()),
        ["schemas", name] => Endpoint::Schema(name.to_string()),
        ["proxy-cache"] => Endpoint::ProxyCache,
        ["proxy-cache", key] => Endpoint::ProxyCacheKey(key.to_string()),
        ["proxy-cache", plugin, "caches", key] => Endpoint::ProxyCachePluginKey(plugin.to_string(), key.to_string()),
        ["consumer_groups", group, "consumers"] => Endpoint::GroupMembers(group.to_string()),
        ["consumer_groups", group, "consumers", consumer] => {
            Endpoint::GroupMember(group.to_string(), consumer.to_string())
        }
        ["consumers", consumer, "consumer_groups"] => Endpoint::ConsumerGroupsOf(consumer.to_string()),
        ["consumers", consumer, "consumer_groups", group] => {
            Endpoint::ConsumerGroupOf(consumer.to_string(), group.to_string())
        }
        ["oauth2_tokens"] => Endpoint::Oauth2Tokens,
        ["oauth2_tokens", key] => Endpoint::Oauth2Token(key.to_string()),
        ["sessions"] => Endpoint::Sessions,
        ["sessions", key] => Endpoint::Session(key.to_string()),
        ["acme"] => Endpoint::Acme,
        ["acme", "certificates"] => Endpoint::AcmeCertificates,
        ["acme", "certificates", host] => Endpoint::AcmeCertificate(host.to_string()),
        ["routes", route, "filters", listing] => {
            Endpoint::RouteFilters(route.to_string(), FilterListing::from_segment(listing)?)
        }
        ["upstreams", upstream, "health"] => Endpoint::UpstreamHealth(upstream.to_string()),
        ["upstreams", upstream, "targets", "all"] => Endpoint::TargetsAll(upstream.to_string()),
        ["upstreams", upstream, "targets", target, state @ ("healthy" | "unhealthy")] => Endpoint::TargetHealth {
            upstream: upstream.to_string(),
            target: target.to_string(),
            address: None,
            healthy: *state == "healthy",
        },
        ["upstreams", upstream, "targets", target, address, state @ ("healthy" | "unhealthy")] => {
            Endpoint::TargetHealth {
                upstream: upstream.to_string(),
                target: target.to_string(),
                address: Some(address.to_string()),
                healthy: *state == "healthy",
            }
        }
        _ => return parse_entity_path(&parts),
    };
    Some(fixed)
}

fn parse_entity_path(parts: &[&str]) -> Option<Endpoint> {
    let kind = kind_for_collection(parts.first()?)?;
    let key = |i: usize| parts.get(i).map(|s| s.to_string());
    match parts.len() {
        1 => Some(Endpoint::Collection(kind)),
        2 => Some(Endpoint::Entity(kind, key(1)?)),
        3 => {
            if let Some((child, field)) = child_relation(kind, parts[2]) {
                return Some(Endpoint::Children {
                    parent: kind,
                    parent_key: key(1)?,
                    child,
                    field,
                });
            }
            let (field, parent) = parent_relation(kind, parts[2]).filter(|_| exposes_parent(kind))?;
            Some(Endpoint::Parent {
                kind,
                key: key(1)?,
                field,
                parent,
            })
        }
        4 => {
            let (child, field) = child_relation(kind, parts[2])?;
            Some(Endpoint::Child {
                parent: kind,
                parent_key: key(1)?,
                child,
                field,
                key: key(3)?,
            })
        }
        _ => None,
    }
}

/// Memberships have no endpoints of their own: they are managed from the
/// group's or the consumer's side, as in Kong.
pub fn has_collection(kind: EntityKind) -> bool {
    kind != EntityKind::ConsumerGroupConsumers
}

/// Kong disables `/snis/{id}/certificate` and `/targets/{id}/upstream`.
fn exposes_parent(kind: EntityKind) -> bool {
    !matches!(kind, EntityKind::Snis | EntityKind::Targets)
}

/// Every path template with its allowed methods, Kong's `{param}` style,
/// sorted the way Kong's `/endpoints` sorts (segment by segment).
pub fn templates() -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = vec![
        ("/".into(), READ_ONLY),
        ("/config".into(), COLLECTION),
        ("/endpoints".into(), READ_ONLY),
        ("/openapi.json".into(), READ_ONLY),
        ("/plugins/enabled".into(), READ_ONLY),
        ("/proxy-cache".into(), DELETE_ONLY),
        ("/proxy-cache/{cache_key}".into(), READ_DELETE),
        ("/proxy-cache/{plugin_id}/caches/{cache_key}".into(), READ_DELETE),
        ("/schemas/plugins/validate".into(), POST_ONLY),
        ("/schemas/plugins/{name}".into(), READ_ONLY),
        ("/schemas/filters/{name}".into(), READ_ONLY),
        ("/schemas/{db_entity_name}/validate".into(), POST_ONLY),
        ("/schemas/{name}".into(), READ_ONLY),
        ("/status".into(), READ_ONLY),
        ("/clustering/data-planes".into(), READ_ONLY),
        ("/clustering/status".into(), READ_ONLY),
        ("/status/ready".into(), READ_ONLY),
        ("/metrics".into(), READ_ONLY),
        ("/oauth2_tokens".into(), COLLECTION),
        ("/oauth2_tokens/{oauth2_tokens}".into(), ENTITY),
        ("/sessions".into(), READ_ONLY),
        ("/sessions/{sessions}".into(), READ_DELETE),
        ("/acme".into(), "OPTIONS, PATCH, POST"),
        ("/acme/certificates".into(), READ_ONLY),
        ("/acme/certificates/{certificates}".into(), READ_ONLY),
        ("/tags".into(), READ_ONLY),
        ("/tags/{tags}".into(), READ_ONLY),
        ("/routes/{routes}/filters/all".into(), READ_ONLY),
        ("/routes/{routes}/filters/enabled".into(), READ_ONLY),
        ("/routes/{routes}/filters/disabled".into(), READ_ONLY),
        ("/upstreams/{upstreams}/health".into(), READ_ONLY),
        ("/upstreams/{upstreams}/targets/all".into(), READ_ONLY),
        ("/upstreams/{upstreams}/targets/{targets}/healthy".into(), PUT_ONLY),
        ("/upstreams/{upstreams}/targets/{targets}/unhealthy".into(), PUT_ONLY),
        (
            "/upstreams/{upstreams}/targets/{targets}/{address}/healthy".into(),
            PUT_ONLY,
        ),
        (
            "/upstreams/{upstreams}/targets/{targets}/{address}/unhealthy".into(),
            PUT_ONLY,
        ),
    ];
    out.extend([
        ("/consumer_groups/{consumer_groups}/consumers".into(), MEMBERS),
        (
            "/consumer_groups/{consumer_groups}/consumers/{consumers}".into(),
            READ_DELETE,
        ),
        ("/consumers/{consumers}/consumer_groups".into(), MEMBERS),
        (
            "/consumers/{consumers}/consumer_groups/{consumer_groups}".into(),
            READ_DELETE,
        ),
    ]);
    for kind in EntityKind::ALL.into_iter().filter(|k| has_collection(*k)) {
        let name = collection_name(kind);
        let table = kind.table();
        let targets = kind == EntityKind::Targets;
        out.push((format!("/{name}"), if targets { READ_ONLY } else { COLLECTION }));
        out.push((format!("/{name}/{{{table}}}"), if targets { READ_ONLY } else { ENTITY }));
    }
    for (child, field, parent) in FOREIGN_FIELDS.iter().filter(|(child, _, _)| has_collection(*child)) {
        let (parent_name, parent_table) = (collection_name(*parent), parent.table());
        let (nested, child_table) = (nested_name(*child), child.table());
        out.push((format!("/{parent_name}/{{{parent_table}}}/{nested}"), COLLECTION));
        out.push((
            format!("/{parent_name}/{{{parent_table}}}/{nested}/{{{child_table}}}"),
            ENTITY,
        ));
        if exposes_parent(*child) {
            out.push((
                format!("/{}/{{{child_table}}}/{field}", collection_name(*child)),
                ENTITY,
            ));
        }
    }
    out.sort_by_key(|(path, _)| path.replace('/', "\u{0}"));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_path(path: &str) -> Option<Endpoint> {
        let segments: Vec<String> = path.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
        parse(&segments)
    }

    #[test]
    fn paths_name_endpoints() {
        assert_eq!(
            parse_path("/services"),
            Some(Endpoint::Collection(EntityKind::Services))
        );
        assert_eq!(parse_path("/plugins/enabled"), Some(Endpoint::PluginsEnabled));
        assert!(matches!(
            parse_path("/consumers/bob/key-auth/k1"),
            Some(Endpoint::Child {
                child: EntityKind::KeyauthCredentials,
                ..
            })
        ));
        assert!(matches!(
            parse_path("/routes/r/service"),
            Some(Endpoint::Parent {
                parent: EntityKind::Services,
                ..
            })
        ));
        assert!(matches!(
            parse_path("/services/s/routes"),
            Some(Endpoint::Children {
                child: EntityKind::Routes,
                ..
            })
        ));
        assert_eq!(parse_path("/snis/x/certificate"), None);
        assert_eq!(parse_path("/nothing"), None);
        assert_eq!(parse_path("/keyauth_credentials"), None);
        for (path, kind) in [
            ("/consumers/bob/basic-auth/u", EntityKind::BasicauthCredentials),
            ("/consumers/bob/acls/admins", EntityKind::Acls),
            ("/consumers/bob/jwt/k", EntityKind::JwtSecrets),
            ("/consumers/bob/hmac-auth/u", EntityKind::HmacauthCredentials),
        ] {
            assert!(
                matches!(parse_path(path), Some(Endpoint::Child { child, .. }) if child == kind),
                "{path}"
            );
        }
        for path in ["/basic-auths", "/acls", "/jwts", "/hmac-auths"] {
            assert!(matches!(parse_path(path), Some(Endpoint::Collection(_))), "{path}");
        }
        assert_eq!(parse_path("/basicauth_credentials"), None);
        assert_eq!(
            parse_path("/routes/r/filters/enabled"),
            Some(Endpoint::RouteFilters("r".into(), FilterListing::Enabled))
        );
        assert_eq!(parse_path("/routes/r/filters/some"), None);
        assert_eq!(
            parse_path("/schemas/filters/f"),
            Some(Endpoint::FilterSchema("f".into()))
        );
        assert_eq!(
            parse_path("/filter-chains"),
            Some(Endpoint::Collection(EntityKind::FilterChains))
        );
        assert!(matches!(
            parse_path("/services/s/filter-chains/c"),
            Some(Endpoint::Child {
                child: EntityKind::FilterChains,
                field: "service",
                ..
            })
        ));
        assert!(matches!(
            parse_path("/filter-chains/c/route"),
            Some(Endpoint::Parent {
                parent: EntityKind::Routes,
                ..
            })
        ));
    }

    #[test]
    fn templates_list_nested_endpoints() {
        let paths: Vec<String> = templates().into_iter().map(|(p, _)| p).collect();
        for expected in [
            "/consumers/{consumers}/key-auth/{keyauth_credentials}",
            "/routes/{routes}/service",
            "/upstreams/{upstreams}/targets",
            "/key-auths/{keyauth_credentials}/consumer",
            "/consumers/{consumers}/basic-auth/{basicauth_credentials}",
            "/basic-auths/{basicauth_credentials}/consumer",
            "/consumers/{consumers}/acls/{acls}",
            "/acls/{acls}/consumer",
            "/consumers/{consumers}/jwt/{jwt_secrets}",
            "/jwts/{jwt_secrets}/consumer",
            "/consumers/{consumers}/hmac-auth/{hmacauth_credentials}",
            "/hmac-auths/{hmacauth_credentials}/consumer",
        ] {
            assert!(paths.iter().any(|p| p == expected), "{expected} in {paths:?}");
        }
    }
}
