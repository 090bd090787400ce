//! Sends a parsed request to its handler: the one table from endpoint to
//! code. Methods were already checked against [`Endpoint::allow`].

use http::Method;
use strait_core::EntityKind;

use crate::crud::consumer_groups;
use crate::crud::handlers::{collection, entity};
use crate::crud::nested::{child, children, parent, Nested};
use crate::endpoints::Endpoint;
use crate::request::AdminRequest;
use crate::response::AdminResponse;
use crate::{config_endpoint, meta, proxy_cache, root, AdminState};

tokio::task_local! {
    /// Set while a GET (or HEAD) request is handled: its store reads may go
    /// to a read-only replica (`pg_ro_*`); a write's reads never do.
    static READ_REQUEST: bool;
}

/// Whether the store call being made serves a read-only request.
pub fn in_read_request() -> bool {
    READ_REQUEST.try_with(|read| *read).unwrap_or(false)
}

pub async fn handle(state: &AdminState, endpoint: Endpoint, request: &AdminRequest) -> AdminResponse {
    let read = request.method == Method::GET || request.method == Method::HEAD;
    READ_REQUEST
        .scope(read, handle_endpoint(state, endpoint, request))
        .await
}

async fn handle_endpoint(state: &AdminState, endpoint: Endpoint, request: &AdminRequest) -> AdminResponse {
    if let Some(refused) = crate::filter_chains::refused_without_wasm(&endpoint) {
        return refused;
    }
    match endpoint {
        Endpoint::Root => root::root(state),
        Endpoint::Status => root::status(state),
        Endpoint::ClusteringDataPlanes => crate::clustering::data_planes(state),
        Endpoint::ClusteringStatus => crate::clustering::status(state),
        Endpoint::StatusReady => root::ready(state),
        Endpoint::Metrics => crate::metrics::metrics(state).await,
        Endpoint::Config if request.method == Method::POST => {
            let query = request.raw_query.as_deref();
            config_endpoint::post_config(state, &request.content_type, query, &request.body).await
        }
        Endpoint::Config => config_endpoint::get_config(state),
        Endpoint::Endpoints => meta::endpoints(),
        Endpoint::OpenApi => meta::openapi(),
        Endpoint::PluginsEnabled => meta::plugins_enabled(),
        Endpoint::Tags => meta::tags(state, None, &request.query),
        Endpoint::Tag(tag) => meta::tags(state, Some(&tag), &request.query),
        Endpoint::Schema(name) => meta::entity_schema(&name),
        Endpoint::SchemaValidate(name) => meta::validate(state, &name, request),
        Endpoint::PluginSchema(name) => meta::plugin_schema(&name),
        Endpoint::PluginSchemaValidate => meta::validate(state, "plugins", request),
        Endpoint::FilterSchema(name) => crate::filter_chains::filter_schema(&name),
        Endpoint::RouteFilters(route, listing) => crate::filter_chains::route_filters(state, &route, listing),
        Endpoint::ProxyCache => proxy_cache::flush_all(),
        Endpoint::ProxyCacheKey(key) => proxy_cache::by_key(&key, &request.method),
        Endpoint::ProxyCachePluginKey(plugin, key) => proxy_cache::by_plugin(state, &plugin, &key, &request.method),
        Endpoint::UpstreamHealth(upstream) => crate::health::upstream_health(state, &upstream, &request.query),
        Endpoint::TargetsAll(upstream) => {
            let nested = Nested {
                parent_kind: EntityKind::Upstreams,
                parent_key: &upstream,
                child: EntityKind::Targets,
                field: "upstream",
            };
            children(state, nested, request).await
        }
        Endpoint::TargetHealth {
            upstream,
            target,
            address,
            healthy,
        } => crate::health::set_target_health(state, &upstream, &target, address.as_deref(), healthy),
        Endpoint::Oauth2Tokens => crate::oauth2_tokens::collection(state, request).await,
        Endpoint::Oauth2Token(key) => crate::oauth2_tokens::entity(state, &key, request).await,
        Endpoint::Sessions => crate::sessions::collection(request).await,
        Endpoint::Acme => crate::acme::acme(state, request).await,
        Endpoint::AcmeCertificates => crate::acme::certificates(state, None, request).await,
        Endpoint::AcmeCertificate(host) => crate::acme::certificates(state, Some(host), request).await,
        Endpoint::Session(key) => crate::sessions::entity(&key, request).await,
        Endpoint::Collection(kind) => collection(state, kind, request).await,
        Endpoint::Entity(EntityKind::ConsumerGroups, key) if request.method == Method::GET => {
            consumer_groups::get_group(state, &key, &request.query)
        }
        Endpoint::Entity(kind, key) => entity(state, kind, &key, request).await,
        Endpoint::GroupMembers(group) => consumer_groups::group_members(state, &group, request).await,
        Endpoint::GroupMember(group, consumer) => {
            consumer_groups::group_member(state, &group, &consumer, request).await
        }
        Endpoint::ConsumerGroupsOf(consumer) => consumer_groups::consumer_groups_of(state, &consumer, request).await,
        Endpoint::ConsumerGroupOf(consumer, group) => {
            consumer_groups::consumer_group_of(state, &consumer, &group, request).await
        }
        Endpoint::Children {
            parent: parent_kind,
            parent_key,
            child: child_kind,
            field,
        } => {
            let nested = Nested {
                parent_kind,
                parent_key: &parent_key,
                child: child_kind,
                field,
            };
            children(state, nested, request).await
        }
        Endpoint::Child {
            parent: parent_kind,
            parent_key,
            child: child_kind,
            field,
            key,
        } => {
            let nested = Nested {
                parent_kind,
                parent_key: &parent_key,
                child: child_kind,
                field,
            };
            child(state, nested, &key, request).await
        }
        Endpoint::Parent {
            kind,
            key,
            field,
            parent: parent_kind,
        } => parent(state, kind, &key, field, parent_kind, request).await,
    }
}
