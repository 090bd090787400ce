//! Declarative config tests: parsing and forms here, errors in `errors.rs`.

mod credentials;
mod errors;
mod filter_chains;
mod groups;
mod info;
mod memo;

use serde_json::json;

use super::*;
use crate::schema::entity_id_for_key;
use crate::EntityKind;

const NOW: i64 = 1_700_000_000;
const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

fn parse_yaml(text: &str) -> Config {
    match parse_declarative(text.as_bytes(), DeclarativeFormat::Yaml, NOW) {
        Ok(config) => config,
        Err(error) => panic!("unexpected errors:\n{error}"),
    }
}

fn parse_json(value: serde_json::Value) -> Result<Config, ConfigError> {
    parse_declarative(value.to_string().as_bytes(), DeclarativeFormat::Json, NOW)
}

const NESTED: &str = r#"
_format_version: "3.0"
_transform: true
_comment: ignored
services:
  - name: users
    url: http://users.internal:8080/api
    routes:
      - name: users-route
        paths: ["/users"]
        plugins:
          - name: key-auth
    plugins:
      - name: rate-limiting
        config: { minute: 10 }
upstreams:
  - name: users.internal
    targets:
      - target: 10.0.0.1
      - target: 10.0.0.2:9000
        weight: 50
consumers:
  - username: alice
    keyauth_credentials:
      - key: alice-key
    plugins:
      - name: rate-limiting
        config: { minute: 5 }
certificates:
  - cert: |
      -----BEGIN CERTIFICATE-----
      MIIB
      -----END CERTIFICATE-----
    key: |
      -----BEGIN PRIVATE KEY-----
      MIIE
      -----END PRIVATE KEY-----
    snis:
      - example.com
      - name: "*.example.com"
"#;

#[test]
fn nested_yaml_is_flattened_and_linked() {
    let config = parse_yaml(NESTED);
    assert_eq!(config.services.len(), 1);
    let service = &config.services[0];
    assert_eq!((service.host.as_str(), service.port), ("users.internal", 8080));
    let route = &config.routes[0];
    assert_eq!(route.service.map(|s| s.id), Some(service.id));
    assert_eq!(config.plugins.len(), 3);
    let key_auth = config.plugins.iter().find(|p| p.name == "key-auth").unwrap();
    assert_eq!(key_auth.route.map(|r| r.id), Some(route.id));
    assert_eq!(key_auth.service, None);
    let consumer = &config.consumers[0];
    let consumer_plugin = config.plugins.iter().find(|p| p.consumer.is_some()).unwrap();
    assert_eq!(consumer_plugin.consumer.map(|c| c.id), Some(consumer.id));
    assert_eq!(config.keyauth_credentials[0].consumer.id, consumer.id);
    let upstream = &config.upstreams[0];
    let targets: Vec<_> = config
        .targets
        .iter()
        .map(|t| (t.target.as_str(), t.weight, t.upstream.id))
        .collect();
    assert_eq!(
        targets,
        vec![("10.0.0.1:8000", 100, upstream.id), ("10.0.0.2:9000", 50, upstream.id)]
    );
    let snis: Vec<_> = config
        .snis
        .iter()
        .map(|s| (s.name.as_str(), s.certificate.id))
        .collect();
    let cert_id = config.certificates[0].id;
    assert_eq!(snis, vec![("example.com", cert_id), ("*.example.com", cert_id)]);
}

#[test]
fn flat_json_resolves_references_by_name_id_and_record() {
    let service_id = "6b5e5e5e-1111-4222-8333-444455556666";
    let config = parse_json(json!({
        "_format_version": "3.0",
        "services": [{"name": "a", "host": "a.internal"}, {"id": service_id, "host": "b.internal"}],
        "routes": [
            {"name": "r1", "paths": ["/a"], "service": "a"},
            {"name": "r2", "paths": ["/b"], "service": service_id},
            {"name": "r3", "paths": ["/c"], "service": {"name": "a"}},
            {"name": "r4", "paths": ["/d"], "service": {"id": service_id}},
        ],
        "consumers": [{"username": "bob"}],
        "plugins": [
            {"name": "request-termination", "route": "r1", "consumer": {"username": "bob"}},
            {"name": "request-termination", "service": "a"},
        ],
        "upstreams": [{"name": "up"}],
        "targets": [{"target": "h:1", "upstream": "up"}],
        "certificates": [{"id": "7b5e5e5e-1111-4222-8333-444455556666", "cert": CERT, "key": KEY}],
        "snis": [{"name": "x.com", "certificate": "7b5e5e5e-1111-4222-8333-444455556666"}],
        "keyauth_credentials": [{"consumer": "bob", "key": "k"}],
    }))
    .unwrap();
    let a = config.services[0].id;
    let b = config.services[1].id;
    let links: Vec<_> = config.routes.iter().map(|r| r.service.unwrap().id).collect();
    assert_eq!(links, vec![a, b, a, b]);
    assert_eq!(config.plugins[0].route.unwrap().id, config.routes[0].id);
    assert_eq!(config.plugins[0].consumer.unwrap().id, config.consumers[0].id);
    assert_eq!(config.plugins[1].service.unwrap().id, a);
    assert_eq!(config.targets[0].upstream.id, config.upstreams[0].id);
    assert_eq!(config.snis[0].certificate.id, config.certificates[0].id);
    assert_eq!(config.keyauth_credentials[0].consumer.id, config.consumers[0].id);
}

#[test]
fn ids_are_deterministic_across_parses() {
    let first = parse_yaml(NESTED);
    let second = parse_yaml(NESTED);
    assert_eq!(first, second);
    assert_eq!(first.services[0].id, entity_id_for_key(EntityKind::Services, "users"));
    assert_eq!(first.consumers[0].id, entity_id_for_key(EntityKind::Consumers, "alice"));
}

#[test]
fn identical_unnamed_entities_get_distinct_ids() {
    let config = parse_json(json!({
        "_format_version": "3.0",
        "ca_certificates": [{"cert": CERT}, {"cert": CERT}],
    }))
    .unwrap();
    assert_ne!(config.ca_certificates[0].id, config.ca_certificates[1].id);
}

#[test]
fn round_trip_through_flat_json_is_lossless() {
    let config = parse_yaml(NESTED);
    let document = config_to_declarative(&config);
    assert_eq!(document["_format_version"], "3.0");
    assert!(document.get("routes").is_some() && document.get("ca_certificates").is_none());
    let again = parse_json(document.clone()).unwrap();
    assert_eq!(again, config);
    let text = serde_json::to_vec(&document).unwrap();
    let auto = parse_declarative(&text, DeclarativeFormat::Auto, NOW + 100).unwrap();
    assert_eq!(auto, config);
}

#[test]
fn every_accepted_format_version_parses() {
    for version in ["1.1", "2.1", "3.0"] {
        let text = format!("_format_version: \"{version}\"\n_workspace: default\n_ignore: [1]\n");
        assert_eq!(parse_yaml(&text), Config::default());
    }
}

#[test]
fn auto_sniffs_json_and_yaml() {
    let json_text = br#"  {"_format_version": "3.0", "consumers": [{"username": "a"}]}"#;
    let config = parse_declarative(json_text, DeclarativeFormat::Auto, NOW).unwrap();
    assert_eq!(config.consumers.len(), 1);
    let yaml_text = b"_format_version: '3.0'\nconsumers:\n  - username: a\n";
    let config = parse_declarative(yaml_text, DeclarativeFormat::Auto, NOW).unwrap();
    assert_eq!(config.consumers[0].username.as_deref(), Some("a"));
}
