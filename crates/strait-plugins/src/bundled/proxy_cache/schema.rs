//! `proxy-cache`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

/// Kong's `proxy-cache` schema. `strategy` has no default and only
/// `memory` exists in Kong's open-source build, as here.
pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        (
            "response_code",
            Field::array(Field::integer().between(100, 900))
                .required()
                .len_min(1)
                .default(json!([200, 301, 404])),
        ),
        (
            "request_method",
            Field::array(Field::string().one_of(&["HEAD", "GET", "POST", "PATCH", "PUT"]))
                .required()
                .default(json!(["GET", "HEAD"])),
        ),
        (
            "content_type",
            Field::array(Field::string())
                .required()
                .default(json!(["text/plain", "application/json"])),
        ),
        ("cache_ttl", Field::integer().gt(0).default(json!(300))),
        ("strategy", Field::string().required().one_of(&["memory"])),
        ("cache_control", Field::boolean().required().default(json!(false))),
        ("ignore_uri_case", Field::boolean().default(json!(false))),
        ("storage_ttl", Field::integer()),
        (
            "memory",
            Field::record(vec![(
                "dictionary_name",
                Field::string().required().default(json!("kong_db_cache")),
            )])
            .default_record(),
        ),
        ("vary_query_params", Field::array(Field::string())),
        ("vary_headers", Field::array(Field::string())),
        (
            "response_headers",
            Field::record(vec![
                ("age", Field::boolean().default(json!(true))),
                ("X-Cache-Status", Field::boolean().default(json!(true))),
                ("X-Cache-Key", Field::boolean().default(json!(true))),
            ])
            .default_record(),
        ),
    ])
    .any_protocol()
}
