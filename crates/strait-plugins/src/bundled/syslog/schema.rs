//! `syslog`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::{lua_code, no_lua};

pub(super) fn schema() -> PluginSchema {
    let severity = || {
        Field::string()
            .required()
            .default(json!("info"))
            .one_of(&["debug", "info", "notice", "warning", "err", "crit", "alert", "emerg"])
    };
    PluginSchema::new(vec![
        ("log_level", severity()),
        ("successful_severity", severity()),
        ("client_errors_severity", severity()),
        ("server_errors_severity", severity()),
        ("custom_fields_by_lua", lua_code()),
        (
            "facility",
            Field::string().required().default(json!("user")).one_of(&[
                "auth", "authpriv", "cron", "daemon", "ftp", "kern", "lpr", "mail", "news", "syslog", "user", "uucp",
                "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
            ]),
        ),
    ])
    .any_protocol()
    .check(no_lua)
}
