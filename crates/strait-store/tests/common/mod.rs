//! Entities for the store's integration tests, validated as the Admin API
//! validates them.

use strait_core::{validate_entity, Entity, EntityKind, Route, Service};
use uuid::Uuid;

pub fn service(index: usize) -> Service {
    let input = serde_json::json!({ "name": format!("s{index}"), "host": "example.com" });
    match validate_entity(EntityKind::Services, &input, 1) {
        Ok(Entity::Service(service)) => service,
        other => panic!("a plain service: {other:?}"),
    }
}

pub fn route(index: usize, service: Uuid) -> Route {
    let input = serde_json::json!({
        "name": format!("r{index}"), "paths": [format!("/r{index}")], "service": { "id": service }
    });
    match validate_entity(EntityKind::Routes, &input, 1) {
        Ok(Entity::Route(route)) => route,
        other => panic!("a plain route: {other:?}"),
    }
}
