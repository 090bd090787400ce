//! Target health endpoints, as Kong has them: `GET /upstreams/{u}/health`
//! (targets with their health, or with `?balancer_health=1` the upstream's
//! own) and `PUT /upstreams/{u}/targets/{t}[/{address}]/healthy|unhealthy`.
//!
//! Health is runtime data read from the balancers of the snapshot being
//! served (strait-runtime's registry): marking a target changes no
//! configuration, takes no write lock and rebuilds nothing. Like Kong's,
//! the mark lasts until a health check changes it or the node restarts.

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::{Entity, EntityKind};
use strait_snapshot::balancer::{parse_target, Balancer, Peer, TargetState};

use crate::crud::nested::find_child;
use crate::crud::pagination::{encode_offset, page_ids, parse_args};
use crate::crud::{find, render};
use crate::request::{escape, Query};
use crate::response::{empty_response, failure, json_response, message, not_found, AdminResponse};
use crate::AdminState;

fn upstream(state: &AdminState, key: &str) -> Result<Entity, AdminResponse> {
    find(state, EntityKind::Upstreams, key)?.ok_or_else(not_found)
}

/// `GET /upstreams/{u}/health`.
pub fn upstream_health(state: &AdminState, key: &str, query: &Query) -> AdminResponse {
    let upstream = match upstream(state, key) {
        Ok(upstream) => upstream,
        Err(response) => return response,
    };
    let snapshot = state.publisher.current().load_full();
    let balancer = snapshot.balancer(upstream.id()).cloned();
    if query.get("balancer_health") == Some("1") {
        let data = match &balancer {
            Some(balancer) => balancer_health(balancer),
            None => json!({ "health": "HEALTHCHECKS_OFF", "balancer_health": "UNHEALTHY" }),
        };
        let mut data = data;
        data["id"] = json!(upstream.id());
        return json_response(
            StatusCode::OK,
            &json!({ "data": data, "next": null, "node_id": state.node_id }),
        );
    }
    let args = match parse_args(query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    let ids = match state
        .store
        .ids_by_foreign(EntityKind::Targets, "upstream", upstream.id())
    {
        Ok(ids) => ids,
        Err(error) => return failure(&error),
    };
    let page = match page_ids(state, EntityKind::Targets, ids, &args) {
        Ok(page) => page,
        Err(response) => return response,
    };
    let mut data = Vec::with_capacity(page.entities.len());
    for entity in &page.entities {
        let mut value = match render(state, entity) {
            Ok(value) => value,
            Err(response) => return response,
        };
        let target = value["target"].as_str().unwrap_or_default().to_string();
        let weight = value["weight"].as_u64().unwrap_or(0);
        let found = balancer
            .as_deref()
            .and_then(|b| b.peer_for(&target).map(|(_, p)| (b, p)));
        let (health, detail) = match found {
            Some((balancer, peer)) => {
                let state = balancer.state(peer);
                (state.kong_name(), target_detail(peer, state))
            }
            // Weight 0 keeps a target out of the balancer: nothing checks it.
            None => {
                let address = parse_target(&target);
                let (host, port) = address.map_or((target.clone(), 0), |a| (a.host, a.port));
                let detail = json!({
                    "host": host, "port": port, "nodeWeight": weight,
                    "weight": { "total": weight, "available": weight, "unavailable": 0 },
                    "addresses": [],
                });
                ("HEALTHCHECKS_OFF", detail)
            }
        };
        value["health"] = json!(health);
        value["data"] = detail;
        data.push(value);
    }
    let mut body = json!({ "data": data, "next": null, "node_id": state.node_id });
    if let Some(after) = page.next_after {
        let offset = encode_offset(&after.to_string());
        body["next"] = json!(args.next_link(&format!("/upstreams/{}/health", escape(key)), &offset));
        body["offset"] = json!(offset);
    }
    json_response(StatusCode::OK, &body)
}

fn target_detail(peer: &Peer, state: TargetState) -> Value {
    let available = if state == TargetState::Unhealthy {
        0
    } else {
        peer.weight
    };
    json!({
        "host": peer.address.host,
        "port": peer.address.port,
        "nodeWeight": peer.weight,
        "weight": { "total": peer.weight, "available": available, "unavailable": peer.weight - available },
        "addresses": [{
            "ip": peer.address.host,
            "port": peer.address.port,
            "weight": peer.weight,
            "health": state.kong_name(),
        }],
    })
}

/// `?balancer_health=1`: the upstream's health and its weight.
fn balancer_health(balancer: &Balancer) -> Value {
    let (total, available) = balancer.healthy_weight();
    let threshold = balancer.checks.threshold;
    let healthy = available > 0 && (available as f64) * 100.0 / (total as f64) >= threshold;
    let balancer_health = if healthy { "HEALTHY" } else { "UNHEALTHY" };
    let health = if balancer.checks.enabled() {
        balancer_health
    } else {
        "HEALTHCHECKS_OFF"
    };
    let hosts: Vec<Value> = balancer
        .peers()
        .iter()
        .map(|peer| target_detail(peer, balancer.state(peer)))
        .collect();
    json!({
        "health": health,
        "balancer_health": balancer_health,
        "details": {
            "healthy": healthy,
            "weight": { "total": total, "available": available, "unavailable": total - available },
            "hosts": hosts,
        },
    })
}

/// `PUT /upstreams/{u}/targets/{t}[/{address}]/healthy|unhealthy`.
pub fn set_target_health(
    state: &AdminState,
    upstream_key: &str,
    target_key: &str,
    address: Option<&str>,
    healthy: bool,
) -> AdminResponse {
    let upstream = match upstream(state, upstream_key) {
        Ok(upstream) => upstream,
        Err(response) => return response,
    };
    let target = match find_child(state, EntityKind::Targets, target_key, upstream.id()) {
        Ok(Some(Entity::Target(target))) if target.upstream.id == upstream.id() => target,
        Ok(_) => return not_found(),
        Err(response) => return response,
    };
    let snapshot = state.publisher.current().load_full();
    let Some(balancer) = snapshot.balancer(upstream.id()) else {
        return not_found();
    };
    let Some((_, peer)) = balancer.peer_for(&target.target) else {
        return message(
            StatusCode::BAD_REQUEST,
            &format!("target {} is not in the balancer (weight 0)", target.target),
        );
    };
    if let Some(address) = address {
        let named = parse_target(address).map(|a| a.name());
        if named.as_deref() != Some(peer.name.as_str()) && address != peer.address.host {
            return message(
                StatusCode::BAD_REQUEST,
                &format!("address {address} is not an address of target {}", target.target),
            );
        }
    }
    if peer.health.set(healthy) {
        tracing::warn!(
            upstream = %balancer.upstream_name,
            target = %peer.name,
            healthy,
            "target health set through the Admin API"
        );
    }
    empty_response(StatusCode::NO_CONTENT)
}
