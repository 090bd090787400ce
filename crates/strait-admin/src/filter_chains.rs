//! Kong's `filter_chains` endpoints beyond the generated CRUD (Kong's
//! `kong/api/routes/filter_chains.lua`): the filters that apply to a route
//! (`/routes/{route}/filters/{all,enabled,disabled}`), the config schema of
//! an installed filter (`/schemas/filters/{name}`), and the 400 every
//! filter-chain endpoint answers while Wasm is off.

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::schema::{filter_config_schema, wasm_enabled};
use strait_core::{Entity, EntityKind, FilterChain};

use crate::crud::find;
use crate::endpoints::Endpoint;
use crate::response::{failure, json_response, message, not_found, AdminResponse};
use crate::AdminState;

/// Which of a route's filters `/routes/{route}/filters/...` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterListing {
    All,
    Enabled,
    Disabled,
}

impl FilterListing {
    pub fn from_segment(segment: &str) -> Option<FilterListing> {
        match segment {
            "all" => Some(FilterListing::All),
            "enabled" => Some(FilterListing::Enabled),
            "disabled" => Some(FilterListing::Disabled),
            _ => None,
        }
    }

    pub fn segment(self) -> &'static str {
        match self {
            FilterListing::All => "all",
            FilterListing::Enabled => "enabled",
            FilterListing::Disabled => "disabled",
        }
    }
}

/// Kong's answer on a filter-chain endpoint while Wasm is off, `None` when
/// `endpoint` is served (Wasm on, or not such an endpoint).
pub fn refused_without_wasm(endpoint: &Endpoint) -> Option<AdminResponse> {
    let chains = EntityKind::FilterChains;
    let about_chains = match endpoint {
        Endpoint::Collection(kind) | Endpoint::Entity(kind, _) => *kind == chains,
        Endpoint::Children { child, .. } | Endpoint::Child { child, .. } => *child == chains,
        Endpoint::Parent { kind, .. } => *kind == chains,
        Endpoint::RouteFilters(..) => true,
        _ => false,
    };
    (about_chains && !wasm_enabled()).then(|| {
        message(
            StatusCode::BAD_REQUEST,
            "this endpoint is only available when wasm is enabled",
        )
    })
}

/// `GET /routes/{route}/filters/{all,enabled,disabled}`: the filters of the
/// route's service's chain, then of its own chain, each with where it comes
/// from; a filter is enabled when it and its chain are.
pub fn route_filters(state: &AdminState, route_key: &str, listing: FilterListing) -> AdminResponse {
    let route = match find(state, EntityKind::Routes, route_key) {
        Ok(Some(Entity::Route(route))) => route,
        Ok(_) => return not_found(),
        Err(response) => return response,
    };
    let chain_on =
        |field: &str, id: uuid::Uuid| match state
            .store
            .get_by_unique(EntityKind::FilterChains, field, &id.to_string())
        {
            Ok(Some(Entity::FilterChain(chain))) => Ok(Some(chain)),
            Ok(_) => Ok(None),
            Err(error) => Err(failure(&error)),
        };
    let service_chain = match route.service.map(|s| chain_on("service", s.id)).transpose() {
        Ok(chain) => chain.flatten(),
        Err(response) => return response,
    };
    let route_chain = match chain_on("route", route.id) {
        Ok(chain) => chain,
        Err(response) => return response,
    };
    let mut filters = Vec::new();
    for (chain, from) in [(service_chain, "service"), (route_chain, "route")] {
        if let Some(chain) = chain {
            list_filters(&chain, from, listing, &mut filters);
        }
    }
    json_response(StatusCode::OK, &json!({ "filters": filters }))
}

fn list_filters(chain: &FilterChain, from: &str, listing: FilterListing, out: &mut Vec<Value>) {
    for filter in &chain.filters {
        let enabled = chain.enabled && filter.enabled;
        let wanted = match listing {
            FilterListing::All => true,
            FilterListing::Enabled => enabled,
            FilterListing::Disabled => !enabled,
        };
        if wanted {
            out.push(json!({
                "name": filter.name,
                "config": filter.config,
                "from": from,
                "enabled": enabled,
                "filter_chain": { "name": chain.name, "id": chain.id },
            }));
        }
    }
}

/// `GET /schemas/filters/{name}`: the installed filter's config schema
/// (Kong's default, a string or null, when it has none).
pub fn filter_schema(name: &str) -> AdminResponse {
    match filter_config_schema(name) {
        Some(schema) => json_response(StatusCode::OK, &schema),
        None => message(StatusCode::NOT_FOUND, &format!("Filter '{name}' not found")),
    }
}
