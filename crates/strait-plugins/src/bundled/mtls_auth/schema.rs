//! `mtls-auth`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::bool_default;

/// Kong Enterprise's `mtls-auth`, with its fields and defaults.
pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        (
            "ca_certificates",
            Field::array(Field::string().uuid()).default(json!([])),
        ),
        ("skip_consumer_lookup", bool_default(false)),
        (
            "consumer_by",
            Field::array(Field::string().one_of(&["username", "custom_id"])).default(json!(["username", "custom_id"])),
        ),
        ("anonymous", Field::string()),
        ("default_consumer", Field::string()),
        (
            "authenticated_group_by",
            Field::string().one_of(&["CN", "DN"]).default(json!("CN")),
        ),
        (
            "revocation_check_mode",
            Field::string()
                .one_of(&["SKIP", "IGNORE_CA_ERROR", "STRICT"])
                .default(json!("IGNORE_CA_ERROR")),
        ),
        ("http_timeout", Field::integer().default(json!(30000))),
        ("cert_cache_ttl", Field::integer().default(json!(60000))),
        ("send_ca_dn", bool_default(false)),
        ("allow_partial_chain", bool_default(false)),
        ("http_proxy_host", Field::string()),
        ("http_proxy_port", Field::integer()),
        ("https_proxy_host", Field::string()),
        ("https_proxy_port", Field::integer()),
    ])
    .no_consumer()
}
