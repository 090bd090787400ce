//! Kong 3.10 OSS compatibility, field by field: every field of every Kong
//! core entity (from `kong_fields.json`, facts read from Kong's
//! `kong/db/schema/entities/*.lua` and the bundled plugins' `daos.lua`) with
//! its status in Strait, derived from Strait's own schema so it cannot go
//! stale:
//!
//! - supported: Strait's schema has the field (type and default shown side
//!   by side with Kong's);
//! - accepted and ignored: stored and returned, without effect yet
//!   ([`IGNORED`], each with its reason);
//! - refused: a file or Admin API write using it is rejected ([`REFUSED`],
//!   [`REFUSED_ENTITIES`], each with its reason).
//!
//! `docs/kong-compatibility.md` is [`markdown`]'s output; a test fails when
//! a Kong field has no status or the committed page is stale (regenerate
//! with `STRAIT_WRITE_COMPAT=1 cargo test -p strait-core compat`).

use serde_json::Value;

use super::{definition, field::fields_to_json};
use crate::entities::EntityKind;

/// Kong's entities and fields (facts, not code): see the module docs.
pub const KONG_FIELDS: &str = include_str!("kong_fields.json");

/// Fields Strait stores and returns but does not act on yet.
pub const IGNORED: &[(&str, &str, &str)] = &[];

/// Kong entities Strait does not have: a file or write using them is
/// refused (`unknown field` at the top level; 404 on the Admin API).
pub const REFUSED_ENTITIES: &[(&str, &str)] = &[
    (
        "clustering_data_planes",
        "hybrid mode is not built yet (issue 18); Kong fills this table itself, nobody writes it",
    ),
    (
        "parameters",
        "Kong's internal node parameters (the cluster id), never written through the Admin API or a file",
    ),
    (
        "workspaces",
        "Kong OSS has the `default` workspace only: `_workspace: default` loads, there is no `/workspaces` API",
    ),
    (
        "oauth2_authorization_codes",
        "runtime data of the oauth2 plugin, kept in the token store (docs/architecture.md#runtime-data-stores), never in configuration",
    ),
    (
        "oauth2_tokens",
        "runtime data of the oauth2 plugin, kept in the token store (docs/architecture.md#runtime-data-stores): save tokens through `POST /oauth2_tokens`",
    ),
];

/// Supported fields whose schema default reads differently from Kong's
/// source, each with why they agree in effect (or where they do not).
pub const DEFAULT_NOTES: &[(&str, &str, &str)] = &[
    (
        "plugins",
        "config",
        "Kong's entity schema leaves `config` to each plugin's own schema; Strait describes the entity-level default as `{}` and fills each plugin's defaults the same way",
    ),
    (
        "routes",
        "priority",
        "Kong adds `priority` (default 0) only under `router_flavor = expressions`; Strait keeps the field in every flavor without a default, and its router reads an unset priority as 0",
    ),
    (
        "upstreams",
        "healthchecks",
        "Kong's source writes a partial default and its schema fills the rest of the record (`threshold` 0, `https_sni` and `headers` null); Strait writes the filled record, which is what Kong returns",
    ),
];

/// Kong entities Strait has only under a setting, each with what it takes.
pub const CONDITIONAL: &[(&str, &str)] = &[(
    "filter_chains",
    "proxy-wasm filter chains need `wasm = on` and filters installed, as in Kong: otherwise every write (Admin API, declarative file) is refused with Kong's `wasm support is not enabled` (or `no wasm filters are available`), and the Admin API's filter-chain endpoints answer 400",
)];

/// Kong entities Strait serves without storing them as entities.
pub const VIEWS: &[(&str, &str)] = &[(
    "tags",
    "read-only, as Kong's: `GET /tags` and `/tags/{tag}` list every tagged entity from Strait's own index",
)];

/// Entities Strait has that Kong OSS does not (Kong Enterprise's, which
/// decK reads and writes), each with why.
pub const ENTERPRISE: &[(&str, &str)] = &[
    (
        "consumer_groups",
        "Kong Enterprise's consumer groups (`/consumer_groups`, decK's `consumer_groups`): plugins scoped to a group apply to its members",
    ),
    (
        "consumer_group_consumers",
        "Kong Enterprise's memberships, managed at `/consumer_groups/{g}/consumers` and `/consumers/{c}/consumer_groups`, declared as decK's `consumers[].groups` or `consumer_groups[].consumers`",
    ),
];

/// Fields Strait's schema has beyond Kong's entity schema, each with why.
pub const EXTRA: &[(&str, &str, &str)] = &[
    (
        "upstreams",
        "sticky_sessions_cookie",
        "Kong Enterprise 3.11's cookie of the `sticky-sessions` algorithm (required with it; `hash_on` must then be `none`): its value names the client's target; a client without it, or whose target is down, is balanced round-robin and gets the cookie (docs/upstreams.md)",
    ),
    (
        "upstreams",
        "sticky_sessions_cookie_path",
        "that cookie's path (`/` when not set; no default is stored or returned, since Kong 3.9 has no such field and decK compares upstreams whole)",
    ),
    (
        "services",
        "tls_sans",
        "Kong 3.10's extra names an upstream certificate may be valid for (`dnsnames`, `uris`; go-kong's `SANs`), checked when `tls_verify` is on",
    ),
    (
        "plugins",
        "consumer_group",
        "Kong Enterprise's consumer-group scope of a plugin (decK writes it)",
    ),
    (
        "plugins",
        "ordering",
        "Kong Enterprise's dynamic plugin ordering (`{\"before\": {\"access\": [names]}, \"after\": {...}}`): applied to each route's access phase when its chain is compiled; a cycle refuses the change and names it (docs/plugins.md)",
    ),
    (
        "keyauth_credentials",
        "ttl",
        "Kong's key-auth table is declared with `ttl = true`: its Admin API takes `ttl` (seconds) on a credential",
    ),
];

/// The plugins Kong 3.9 bundles that this Strait does not run, each with
/// why: a file or Admin API write enabling one is refused with
/// `plugin '<name>' is not implemented by this version of Strait` (a
/// disabled one is stored). strait-plugins' registry tests check this list
/// against the plugins it runs.
pub const PLUGINS_NOT_RUN: &[(&str, &str)] = &[];

/// Kong fields of entities Strait has, that it refuses (`unknown field`).
pub const REFUSED: &[(&str, &str, &str)] = &[];

/// A field's status in Strait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Supported,
    Ignored(&'static str),
    Refused(&'static str),
    /// No status: the test fails.
    Missing,
}

/// One Kong field, its Kong description and Strait's.
#[derive(Debug)]
pub struct Row {
    pub entity: String,
    pub field: String,
    pub kong: Value,
    pub strait: Option<Value>,
    pub status: Status,
}

impl Row {
    /// Kong's and Strait's defaults differ (a missing default is `null`).
    pub fn default_differs(&self) -> bool {
        let default = |field: Option<&Value>| field.and_then(|f| f.get("default")).cloned().unwrap_or(Value::Null);
        self.strait.is_some() && default(Some(&self.kong)) != default(self.strait.as_ref())
    }
}

/// Strait's description of `kind`'s field `name` (Kong's `/schemas` shape).
fn strait_field(kind: EntityKind, name: &str) -> Option<Value> {
    let fields = fields_to_json(&definition(kind).fields);
    fields.as_array()?.iter().find_map(|field| field.get(name).cloned())
}

/// Every Kong field with its status, in Kong's order.
pub fn rows() -> Vec<Row> {
    let kong: Value = serde_json::from_str(KONG_FIELDS).expect("kong_fields.json is JSON");
    let mut rows = Vec::new();
    let Some(entities) = kong["entities"].as_object() else {
        return rows;
    };
    for (entity, description) in entities {
        let kind = EntityKind::from_table(entity);
        let refused_entity = REFUSED_ENTITIES.iter().find(|(name, _)| name == entity);
        let view = VIEWS.iter().any(|(name, _)| name == entity);
        for field in description["fields"].as_array().into_iter().flatten() {
            let name = field["name"].as_str().unwrap_or_default().to_string();
            let strait = kind.and_then(|kind| strait_field(kind, &name));
            let status = match (&strait, refused_entity) {
                (_, Some((_, reason))) => Status::Refused(reason),
                (None, None) if view => Status::Supported,
                (Some(_), None) => match IGNORED.iter().find(|(e, f, _)| e == entity && *f == name) {
                    Some((_, _, reason)) => Status::Ignored(reason),
                    None => Status::Supported,
                },
                (None, None) => match REFUSED.iter().find(|(e, f, _)| e == entity && *f == name) {
                    Some((_, _, reason)) => Status::Refused(reason),
                    None => Status::Missing,
                },
            };
            rows.push(Row {
                entity: entity.clone(),
                field: name,
                kong: field.clone(),
                strait,
                status,
            });
        }
    }
    rows
}

/// A field description in one line: `type`, `default …`, `required`.
fn describe(field: &Value) -> String {
    let mut out = field["type"].as_str().unwrap_or("?").to_string();
    if field.get("required").and_then(Value::as_bool) == Some(true) {
        out.push_str(", required");
    }
    match field.get("default") {
        None | Some(Value::Null) => {}
        Some(default) => out.push_str(&format!(", default `{default}`")),
    }
    out
}

/// The page `docs/kong-compatibility.md`.
pub fn markdown() -> String {
    let kong: Value = serde_json::from_str(KONG_FIELDS).expect("kong_fields.json is JSON");
    let rows = rows();
    let count = |wanted: fn(&Status) -> bool| rows.iter().filter(|row| wanted(&row.status)).count();
    let mut out = String::new();
    out.push_str("# Kong compatibility, field by field\n\n");
    out.push_str("<!-- generated by `STRAIT_WRITE_COMPAT=1 cargo test -p strait-core compat` from\n");
    out.push_str("     crates/strait-core/src/schema/compat.rs; edit that, not this page -->\n\n");
    out.push_str(&format!(
        "Every field of every Kong OSS core entity (Kong/kong at `{}`, `kong/db/schema/entities/*.lua` \
         and the bundled plugins' `daos.lua`), with its status in Strait, taken from Strait's own \
         schema code. A test fails when a Kong field has no status, or when this page is stale.\n\n",
        kong["kong_commit"].as_str().unwrap_or("?")
    ));
    out.push_str(&format!(
        "{} fields: {} supported, {} accepted and ignored, {} refused.\n\n",
        rows.len(),
        count(|s| *s == Status::Supported),
        count(|s| matches!(s, Status::Ignored(_))),
        count(|s| matches!(s, Status::Refused(_))),
    ));
    out.push_str("Beyond Kong OSS, Strait has these Kong Enterprise entities and fields:\n\n");
    for (entity, why) in ENTERPRISE {
        let fields: Vec<String> = EntityKind::from_table(entity)
            .map(|kind| {
                definition(kind)
                    .fields
                    .iter()
                    .map(|(name, _)| format!("`{name}`"))
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!("- `{entity}` ({}): {why}.\n", fields.join(", ")));
    }
    for (entity, field, why) in EXTRA {
        out.push_str(&format!("- `{entity}.{field}`: {why}.\n"));
    }
    out.push('\n');
    out.push_str("- **supported**: Strait's schema has the field; Kong's and Strait's type and default are shown.\n");
    out.push_str("- **accepted, ignored**: stored and returned, not acted on yet; the reason says why.\n");
    out.push_str("- **refused**: a declarative file or Admin API write using it is rejected; the reason says why.\n\n");
    let mut entity = "";
    for row in &rows {
        if row.entity != entity {
            entity = &row.entity;
            let refused = REFUSED_ENTITIES.iter().find(|(name, _)| *name == entity);
            let view = VIEWS.iter().find(|(name, _)| *name == entity);
            let condition = CONDITIONAL.iter().find(|(name, _)| *name == entity);
            let entity_note = match (refused, view, condition) {
                (Some((_, reason)), _, _) => format!("\n\nThe whole entity is refused: {reason}."),
                (None, Some((_, how)), _) => format!("\n\nServed as a view: {how}."),
                (None, None, Some((_, what))) => format!("\n\nSupported under a setting: {what}."),
                (None, None, None) => String::new(),
            };
            out.push_str(&format!(
                "## {entity}\n\nKong source: `{}`.{entity_note}\n\n| field | Kong | Strait | status |\n|---|---|---|---|\n",
                kong["entities"][entity]["source"].as_str().unwrap_or("?")
            ));
        }
        let entity_refused = REFUSED_ENTITIES.iter().any(|(name, _)| *name == row.entity);
        let status = match &row.status {
            Status::Supported if row.default_differs() => match DEFAULT_NOTES
                .iter()
                .find(|(e, f, _)| *e == row.entity && *f == row.field)
            {
                Some((_, _, note)) => format!("supported; default: {note}"),
                None => "supported, **default differs**".to_string(),
            },
            Status::Supported => "supported".to_string(),
            Status::Ignored(reason) => format!("accepted, ignored: {reason}"),
            Status::Refused(_) if entity_refused => "refused (the entity)".to_string(),
            Status::Refused(reason) => format!("refused: {reason}"),
            Status::Missing => "**no status**".to_string(),
        };
        let strait = row.strait.as_ref().map_or("–".to_string(), describe);
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            row.field,
            describe(&row.kong).replace('|', "\\|"),
            strait.replace('|', "\\|"),
            status
        ));
        if rows
            .iter()
            .rev()
            .find(|r| r.entity == row.entity)
            .is_some_and(|last| std::ptr::eq(last, row))
        {
            out.push('\n');
        }
    }
    out.push_str(&plugins_markdown());
    out.push('\n');
    out.push_str(&super::deck_testdata::markdown());
    out
}

/// The bundled plugins section: each plugin Kong 3.9 bundles, run or not.
fn plugins_markdown() -> String {
    let mut names: Vec<&str> = super::BUNDLED_PLUGINS.to_vec();
    names.sort_unstable();
    let refused = names
        .iter()
        .filter(|n| PLUGINS_NOT_RUN.iter().any(|(p, _)| p == *n))
        .count();
    let mut out = format!(
        "## Bundled plugins\n\nKong 3.9 bundles {} plugins; Strait runs {} of them (docs/plugins.md describes \
         each, and what differs) and refuses {}:\n\n| plugin | status |\n|---|---|\n",
        names.len(),
        names.len() - refused,
        refused
    );
    for name in names {
        let status = match PLUGINS_NOT_RUN.iter().find(|(p, _)| *p == name) {
            Some((_, why)) => format!("refused: {why}"),
            None => "runs".to_string(),
        };
        out.push_str(&format!("| `{name}` | {status} |\n"));
    }
    out.push_str(
        "\nBeyond them, Strait runs Kong Enterprise's `kafka-upstream` and `kafka-log`, with Kong's fields \
         (docs/plugins.md, \"Kafka\").\n",
    );
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kong_field_has_a_status() {
        let missing: Vec<String> = rows()
            .into_iter()
            .filter(|row| row.status == Status::Missing)
            .map(|row| format!("{}.{}", row.entity, row.field))
            .collect();
        assert!(
            missing.is_empty(),
            "Kong fields without a status in compat.rs: {missing:?}"
        );
    }

    #[test]
    fn supported_fields_default_as_kongs() {
        let differ: Vec<String> = rows()
            .into_iter()
            .filter(|row| row.default_differs())
            .filter(|row| {
                !DEFAULT_NOTES
                    .iter()
                    .any(|(e, f, _)| *e == row.entity && *f == row.field)
            })
            .map(|row| {
                format!(
                    "{}.{}: Kong {} / Strait {}",
                    row.entity,
                    row.field,
                    row.kong["default"],
                    row.strait.as_ref().map_or(Value::Null, |s| s["default"].clone())
                )
            })
            .collect();
        assert!(differ.is_empty(), "defaults differ from Kong's: {differ:#?}");
    }

    #[test]
    fn every_strait_field_is_a_kong_field() {
        let kong: Value = serde_json::from_str(KONG_FIELDS).unwrap();
        for kind in EntityKind::ALL {
            if ENTERPRISE.iter().any(|(name, _)| *name == kind.table()) {
                assert!(
                    kong["entities"][kind.table()].is_null(),
                    "{} is in Kong OSS now: remove it from ENTERPRISE",
                    kind.table()
                );
                continue;
            }
            let Some(fields) = kong["entities"][kind.table()]["fields"].as_array() else {
                panic!("{} missing from kong_fields.json", kind.table());
            };
            for (name, _) in &definition(kind).fields {
                let extra = EXTRA.iter().any(|(e, f, _)| *e == kind.table() && f == name);
                assert!(
                    extra || fields.iter().any(|f| f["name"] == *name),
                    "{}.{name} is not a Kong field (list it in EXTRA with why)",
                    kind.table()
                );
            }
        }
    }

    #[test]
    fn every_status_names_a_kong_field() {
        let rows = rows();
        for (entity, field, _) in IGNORED.iter().chain(REFUSED).chain(DEFAULT_NOTES) {
            assert!(
                rows.iter().any(|row| row.entity == *entity && row.field == *field),
                "{entity}.{field} has a status but is not a Kong field"
            );
        }
    }

    #[test]
    fn compat_page_is_current() {
        let generated = markdown();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/kong-compatibility.md");
        if std::env::var_os("STRAIT_WRITE_COMPAT").is_some() {
            std::fs::write(path, &generated).expect("write docs/kong-compatibility.md");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/kong-compatibility.md is stale: run STRAIT_WRITE_COMPAT=1 cargo test -p strait-core compat"
        );
    }
}
