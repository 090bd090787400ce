//! `file-log`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::{lua_code, no_lua};

/// Kong's file-log path rule: no leading or trailing space, none of `*&%\``.
fn file_path(value: &str) -> Result<(), String> {
    let bad = |c: char| matches!(c, '*' | '&' | '%' | '`' | '\\');
    let first = value.chars().next();
    let last = value.chars().last();
    let valid = value.chars().count() >= 2
        && !value.chars().any(bad)
        && !first.is_some_and(char::is_whitespace)
        && !last.is_some_and(char::is_whitespace);
    if valid {
        Ok(())
    } else {
        Err("not a valid filename".into())
    }
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("path", Field::string().required().check(file_path)),
        ("reopen", Field::boolean().required().default(json!(false))),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_follow_kong_rule() {
        assert!(file_path("/var/log/strait.log").is_ok());
        assert!(file_path(" /tmp/x").is_err());
        assert!(file_path("/tmp/a*b").is_err());
        assert!(file_path("/tmp/x ").is_err());
    }
}
