//! Invalid declarative configs, shared by the CLI (`strait config validate`) and Admin API
//! (`POST /config`) tests so both paths are held to the same cases.

/// One invalid config and what the error report must mention.
pub struct BadInput {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    /// Content-Type for `POST /config`.
    pub content_type: &'static str,
    /// A `path` that `strait config validate` must print (its lines are `path: message`).
    pub cli_path: Option<&'static str>,
    /// A word the Admin API's 400 body must contain (field name or offending value).
    pub admin_mentions: Option<&'static str>,
}

const YAML: &str = "application/x-yaml";
const JSON: &str = "application/json";

fn yaml(name: &'static str, text: &str, cli_path: Option<&'static str>, admin: Option<&'static str>) -> BadInput {
    BadInput {
        name,
        bytes: text.as_bytes().to_vec(),
        content_type: YAML,
        cli_path,
        admin_mentions: admin,
    }
}

/// The shared table of bad inputs.
pub fn bad_inputs() -> Vec<BadInput> {
    vec![
        yaml(
            "malformed_yaml",
            "_format_version: \"3.0\"\nservices:\n  - name: a\n    url: http://127.0.0.1:9\n   routes: [\n",
            None,
            None,
        ),
        BadInput {
            name: "malformed_json",
            bytes: br#"{"_format_version": "3.0", "services": [{"name": "a", "url": "#.to_vec(),
            content_type: JSON,
            cli_path: None,
            admin_mentions: None,
        },
        yaml(
            "unknown_field",
            "_format_version: \"3.0\"\nservices:\n  - name: a\n    url: http://127.0.0.1:9\n    colour: blue\n",
            Some("services[0].colour"),
            Some("colour"),
        ),
        yaml(
            "wrong_type",
            "_format_version: \"3.0\"\nservices:\n  - name: a\n    host: 127.0.0.1\n    port: eighty\n",
            Some("services[0].port"),
            Some("port"),
        ),
        yaml(
            "dangling_service_reference",
            "_format_version: \"3.0\"\nroutes:\n  - name: r\n    paths: [/x]\n    service: nope\n",
            Some("routes[0].service"),
            Some("nope"),
        ),
        yaml(
            "duplicate_names",
            "_format_version: \"3.0\"\nservices:\n  - name: dup\n    url: http://127.0.0.1:9\n  - name: dup\n    url: http://127.0.0.1:10\n",
            Some("services[1]"),
            Some("dup"),
        ),
        yaml(
            "invalid_regex_path",
            "_format_version: \"3.0\"\nservices:\n  - name: a\n    url: http://127.0.0.1:9\n    routes:\n      - name: r\n        paths: [\"~/bad([\"]\n",
            Some("services[0].routes[0].paths[0]"),
            Some("paths"),
        ),
        BadInput {
            name: "non_utf8_bytes",
            bytes: b"_format_version: \"3.0\"\nservices:\n  - name: \xff\xfe\xfd\n    url: http://127.0.0.1:9\n".to_vec(),
            content_type: YAML,
            cli_path: None,
            admin_mentions: None,
        },
    ]
}
