//! `prometheus`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

/// Kong's `prometheus` schema: every switch off by default.
pub(super) fn schema() -> PluginSchema {
    let switch = || Field::boolean().default(json!(false));
    PluginSchema::new(vec![
        ("per_consumer", switch()),
        ("status_code_metrics", switch()),
        ("ai_metrics", switch()),
        ("latency_metrics", switch()),
        ("bandwidth_metrics", switch()),
        ("upstream_health_metrics", switch()),
    ])
    .any_protocol()
}
