//! `azure-functions`' config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("timeout", Field::number().default(json!(600000))),
        ("keepalive", Field::number().default(json!(60000))),
        ("https", Field::boolean().default(json!(true))),
        ("https_verify", Field::boolean().default(json!(false))),
        ("apikey", Field::string().referenceable()),
        ("clientid", Field::string().referenceable()),
        ("appname", Field::string().required()),
        ("hostdomain", Field::string().required().default(json!("azurewebsites.net"))),
        ("routeprefix", Field::string().default(json!("api"))),
        ("functionname", Field::string().required()),
    ])
    .any_protocol()
}
