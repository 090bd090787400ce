//! Consumer groups as Kong Enterprise's Admin API (and decK) use them:
//! `GET /consumer_groups/{g}` answers `{"consumer_group": ..., "consumers":
//! [...]}`, and memberships are managed from either side:
//! `/consumer_groups/{g}/consumers[/{c}]` and
//! `/consumers/{c}/consumer_groups[/{g}]`. A membership is a
//! `consumer_group_consumers` row (one per pair), written like any entity:
//! validated, committed in one transaction, live when the answer is sent.

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use strait_core::{ConfigChange, Entity, EntityKind};
use uuid::Uuid;

use super::body::{parse_body, Encoding};
use super::delete::cascade;
use super::write::{commit, prepare, Mode};
use super::{find, render};
use crate::request::{AdminRequest, Query};
use crate::response::{empty_response, failure, json_response, message, not_found, AdminResponse};
use crate::AdminState;

/// Which side of a membership the path starts from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `/consumer_groups/{g}/consumers`: the other side is consumers.
    Group,
    /// `/consumers/{c}/consumer_groups`: the other side is groups.
    Consumer,
}

impl Side {
    fn own_kind(self) -> EntityKind {
        match self {
            Side::Group => EntityKind::ConsumerGroups,
            Side::Consumer => EntityKind::Consumers,
        }
    }

    fn other_kind(self) -> EntityKind {
        match self {
            Side::Group => EntityKind::Consumers,
            Side::Consumer => EntityKind::ConsumerGroups,
        }
    }

    /// The membership field pointing at this side.
    fn own_field(self) -> &'static str {
        match self {
            Side::Group => "consumer_group",
            Side::Consumer => "consumer",
        }
    }

    fn other_field(self) -> &'static str {
        match self {
            Side::Group => "consumer",
            Side::Consumer => "consumer_group",
        }
    }

    /// The body field a `POST` names the other side with (Kong's).
    fn body_field(self) -> &'static str {
        match self {
            Side::Group => "consumer",
            Side::Consumer => "group",
        }
    }

    /// `(group, consumer)` from this side's id and the other side's.
    fn pair(self, own: Uuid, other: Uuid) -> (Uuid, Uuid) {
        match self {
            Side::Group => (own, other),
            Side::Consumer => (other, own),
        }
    }
}

fn store<T>(result: Result<T, strait_store::StoreError>) -> Result<T, AdminResponse> {
    result.map_err(|e| failure(&e))
}

fn found(state: &AdminState, kind: EntityKind, key: &str) -> Result<Entity, AdminResponse> {
    find(state, kind, key)?.ok_or_else(not_found)
}

/// The entities on the other side of `own`'s memberships, in the order
/// the memberships were made.
fn others(state: &AdminState, side: Side, own: Uuid) -> Result<Vec<Entity>, AdminResponse> {
    let ids = store(
        state
            .store
            .ids_by_foreign(EntityKind::ConsumerGroupConsumers, side.own_field(), own),
    )?;
    let mut memberships = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(Entity::ConsumerGroupConsumer(m)) = store(state.store.get(EntityKind::ConsumerGroupConsumers, id))?
        {
            memberships.push(m);
        }
    }
    memberships.sort_by_key(|m| (m.created_at, m.id));
    let mut out = Vec::with_capacity(memberships.len());
    for membership in memberships {
        let other = match side {
            Side::Group => membership.consumer.id,
            Side::Consumer => membership.consumer_group.id,
        };
        if let Some(entity) = store(state.store.get(side.other_kind(), other))? {
            out.push(entity);
        }
    }
    Ok(out)
}

fn rendered(state: &AdminState, entities: &[Entity]) -> Result<Vec<Value>, AdminResponse> {
    entities.iter().map(|e| render(state, e)).collect()
}

/// The membership of the pair, if any.
fn membership(state: &AdminState, group: Uuid, consumer: Uuid) -> Result<Option<Entity>, AdminResponse> {
    store(state.store.get_by_unique(
        EntityKind::ConsumerGroupConsumers,
        "cache_key",
        &format!("{group}:{consumer}"),
    ))
}

/// `GET /consumer_groups/{g}`: the group with its members
/// (`?list_consumers=false`: without them).
pub fn get_group(state: &AdminState, key: &str, query: &Query) -> AdminResponse {
    let result = (|| {
        let group = found(state, EntityKind::ConsumerGroups, key)?;
        let mut body = json!({ "consumer_group": render(state, &group)? });
        if query.get("list_consumers") != Some("false") {
            body["consumers"] = Value::Array(rendered(state, &others(state, Side::Group, group.id())?)?);
        }
        Ok::<_, AdminResponse>(json_response(StatusCode::OK, &body))
    })();
    result.unwrap_or_else(|response| response)
}

/// `/consumer_groups/{g}/consumers`.
pub async fn group_members(state: &AdminState, group: &str, request: &AdminRequest) -> AdminResponse {
    memberships(state, Side::Group, group, request).await
}

/// `/consumers/{c}/consumer_groups`.
pub async fn consumer_groups_of(state: &AdminState, consumer: &str, request: &AdminRequest) -> AdminResponse {
    memberships(state, Side::Consumer, consumer, request).await
}

/// `/consumer_groups/{g}/consumers/{c}`.
pub async fn group_member(state: &AdminState, group: &str, consumer: &str, request: &AdminRequest) -> AdminResponse {
    one_membership(state, Side::Group, group, consumer, request).await
}

/// `/consumers/{c}/consumer_groups/{g}`.
pub async fn consumer_group_of(
    state: &AdminState,
    consumer: &str,
    group: &str,
    request: &AdminRequest,
) -> AdminResponse {
    one_membership(state, Side::Consumer, consumer, group, request).await
}

async fn memberships(state: &AdminState, side: Side, key: &str, request: &AdminRequest) -> AdminResponse {
    let result = async {
        let own = found(state, side.own_kind(), key)?;
        match request.method {
            Method::POST => add(state, side, &own, request).await,
            Method::DELETE => {
                let ids = store(state.store.ids_by_foreign(
                    EntityKind::ConsumerGroupConsumers,
                    side.own_field(),
                    own.id(),
                ))?;
                let changes = ids
                    .into_iter()
                    .map(|id| ConfigChange::Delete {
                        kind: EntityKind::ConsumerGroupConsumers,
                        id,
                    })
                    .collect::<Vec<_>>();
                if !changes.is_empty() {
                    commit(state, changes, None).await?;
                }
                Ok(empty_response(StatusCode::NO_CONTENT))
            }
            _ => {
                let data = rendered(state, &others(state, side, own.id())?)?;
                Ok(json_response(
                    StatusCode::OK,
                    &json!({ "data": data, "next": Value::Null }),
                ))
            }
        }
    };
    result.await.unwrap_or_else(|response| response)
}

/// The keys a `POST` names: `{"consumer": "a"}`, `{"consumer": ["a", "b"]}`,
/// or the form `consumer=a&consumer=b`.
fn named_keys(side: Side, input: &Map<String, Value>) -> Result<Vec<String>, AdminResponse> {
    let field = side.body_field();
    let missing =
        || crate::errors::schema_violation(vec![strait_core::FieldError::new(field, "required field missing")]);
    let keys: Vec<String> = match input.get(field) {
        Some(Value::String(key)) => vec![key.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => return Err(missing()),
    };
    match keys.is_empty() {
        true => Err(missing()),
        false => Ok(keys),
    }
}

async fn add(
    state: &AdminState,
    side: Side,
    own: &Entity,
    request: &AdminRequest,
) -> Result<AdminResponse, AdminResponse> {
    let (input, _) = parse_body(request)?;
    let keys = named_keys(side, &input)?;
    let mut others = Vec::with_capacity(keys.len());
    let mut changes = Vec::with_capacity(keys.len());
    for key in &keys {
        let Some(other) = find(state, side.other_kind(), key)? else {
            let what = match side {
                Side::Group => "consumer",
                Side::Consumer => "consumer group",
            };
            return Err(message(StatusCode::NOT_FOUND, &format!("{what} '{key}' not found")));
        };
        let (group, consumer) = side.pair(own.id(), other.id());
        if membership(state, group, consumer)?.is_some() || others.iter().any(|o: &Entity| o.id() == other.id()) {
            return Err(message(
                StatusCode::CONFLICT,
                &format!("consumer is already a member of the consumer group ({key})"),
            ));
        }
        let mut fields = Map::new();
        fields.insert(side.own_field().into(), json!({ "id": own.id() }));
        fields.insert(side.other_field().into(), json!({ "id": other.id() }));
        let entity = prepare(
            state,
            EntityKind::ConsumerGroupConsumers,
            fields,
            &Mode::Insert,
            Encoding::Json,
        )?;
        changes.push(ConfigChange::Upsert { entity });
        others.push(other);
    }
    commit(state, changes, None).await?;
    let own_name = match side {
        Side::Group => "consumer_group",
        Side::Consumer => "consumer",
    };
    let others_name = match side {
        Side::Group => "consumers",
        Side::Consumer => "consumer_groups",
    };
    let body = json!({ own_name: render(state, own)?, others_name: rendered(state, &others)? });
    Ok(json_response(StatusCode::CREATED, &body))
}

async fn one_membership(
    state: &AdminState,
    side: Side,
    key: &str,
    other_key: &str,
    request: &AdminRequest,
) -> AdminResponse {
    let result = async {
        let own = found(state, side.own_kind(), key)?;
        let other = found(state, side.other_kind(), other_key)?;
        let (group, consumer) = side.pair(own.id(), other.id());
        let Some(row) = membership(state, group, consumer)? else {
            return Err(not_found());
        };
        match request.method {
            Method::DELETE => {
                commit(state, cascade(state, row.kind(), row.id())?, None).await?;
                Ok(empty_response(StatusCode::NO_CONTENT))
            }
            _ => {
                let name = match side {
                    Side::Group => "consumer",
                    Side::Consumer => "consumer_group",
                };
                Ok(json_response(StatusCode::OK, &json!({ name: render(state, &other)? })))
            }
        }
    };
    result.await.unwrap_or_else(|response| response)
}
