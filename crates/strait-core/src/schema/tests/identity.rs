use serde_json::json;

use super::*;

const CONSUMER_ID: &str = "6b5e5e5e-1111-4222-8333-444455556666";

#[test]
fn consumer_needs_username_or_custom_id() {
    let message = "at least one of these fields must be non-empty: 'custom_id', 'username'";
    assert_eq!(invalid(EntityKind::Consumers, json!({})), vec![pair("", message)]);
    assert_eq!(
        invalid(EntityKind::Consumers, json!({"username": ""})),
        vec![pair("username", "length must be at least 1"), pair("", message)]
    );
    valid(EntityKind::Consumers, json!({"custom_id": "c1"}));
}

#[test]
fn certificates_need_pem_cert_and_key() {
    let out = valid(
        EntityKind::Certificates,
        json!({"cert": CERT, "key": KEY, "snis": ["a.com"]}),
    );
    assert!(out.get("snis").is_none());
    assert_eq!(
        invalid(EntityKind::Certificates, json!({"cert": "x", "snis": ["1.2.3.4"]})),
        vec![
            pair("cert", "invalid certificate: expected a PEM-encoded certificate"),
            pair("key", "required field missing"),
            pair("snis[0]", "must not be an IP"),
        ]
    );
    assert_eq!(
        invalid(
            EntityKind::Certificates,
            json!({"cert": CERT, "key": KEY, "cert_alt": CERT})
        ),
        vec![pair(
            "",
            "all or none of these fields must be set: 'cert_alt', 'key_alt'"
        )]
    );
}

#[test]
fn snis_and_ca_certificates() {
    let cert = json!({"id": CONSUMER_ID});
    let out = valid(EntityKind::Snis, json!({"name": "*.a.com", "certificate": cert}));
    assert_eq!(out["name"], "*.a.com");
    assert_eq!(
        invalid(EntityKind::Snis, json!({"name": "a.*.com"})),
        vec![
            pair("name", "wildcard must be leftmost or rightmost character"),
            pair("certificate", "required field missing"),
        ]
    );
    valid(EntityKind::CaCertificates, json!({"cert": CERT}));
    assert_eq!(
        invalid(EntityKind::CaCertificates, json!({"cert": format!("{CERT}{CERT}")})),
        vec![pair("", "please submit only one certificate at a time")]
    );
    assert_eq!(
        invalid(EntityKind::CaCertificates, json!({})),
        vec![pair("cert", "required field missing")]
    );
}
