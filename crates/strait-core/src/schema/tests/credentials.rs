//! Consumer credentials: key-auth, basic-auth, ACLs, JWT secrets, HMAC-auth.

use serde_json::{json, Map, Value};

use super::*;

const CONSUMER_ID: &str = "6b5e5e5e-1111-4222-8333-444455556666";

const RSA_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCu6EzfxvkK4G0F31W0O9LdRVe7
whzuYCCkny7NgRlkVXaZDIZuF49pLQEaK78ja+U4PLpOiRmhb81kEN7hmqNlsZqs
yZoW8xoLylhqxu1TuHdK/Fl8SlP0NiN5rHzXOG7FDziHYgHCq7AvwC9melQpMKjg
mTIVRTZG2nxPgus9WQIDAQAB
-----END PUBLIC KEY-----
";

const ED25519_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAVeGvBWJaAzY+4Y4wJgKYBuBSAzE4ybrD/+vSI8O7wZk=
-----END PUBLIC KEY-----";

fn is_random_hex(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[test]
fn keyauth_key_is_generated_when_absent() {
    let out = valid(EntityKind::KeyauthCredentials, json!({"consumer": {"id": CONSUMER_ID}}));
    let key = out["key"].as_str().unwrap();
    assert_eq!(key.len(), 32);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(out.get("updated_at").is_none());
    let out = valid(
        EntityKind::KeyauthCredentials,
        json!({"consumer": {"id": CONSUMER_ID}, "key": "secret", "ttl": 60}),
    );
    assert_eq!((&out["key"], &out["ttl"]), (&json!("secret"), &json!(60)));
    assert_eq!(
        out["id"],
        json!(entity_id_for_key(EntityKind::KeyauthCredentials, "secret"))
    );
    assert_eq!(
        invalid(EntityKind::KeyauthCredentials, json!({"key": 5})),
        vec![
            pair("consumer", "required field missing"),
            pair("key", "expected a string")
        ]
    );
}

#[test]
fn basicauth_needs_username_and_password() {
    let out = valid(
        EntityKind::BasicauthCredentials,
        json!({"consumer": {"id": CONSUMER_ID}, "username": "bob", "password": "secret", "tags": ["t"]}),
    );
    // Validation alone keeps the password; hashing is the write's transformation.
    assert_eq!((&out["username"], &out["password"]), (&json!("bob"), &json!("secret")));
    assert_eq!(
        out["id"],
        json!(entity_id_for_key(EntityKind::BasicauthCredentials, "bob"))
    );
    assert_eq!(out["created_at"], json!(NOW));
    assert!(out.get("updated_at").is_none());
    assert_eq!(
        invalid(EntityKind::BasicauthCredentials, json!({"username": "", "password": 1})),
        vec![
            pair("consumer", "required field missing"),
            pair("username", "length must be at least 1"),
            pair("password", "expected a string"),
        ]
    );
    assert_eq!(
        invalid(
            EntityKind::BasicauthCredentials,
            json!({"consumer": {"id": "nope"}, "username": "bob", "tags": [""]})
        ),
        vec![
            pair("consumer.id", "expected a valid UUID"),
            pair("password", "required field missing"),
            pair("tags[0]", "length must be at least 1"),
        ]
    );
}

#[test]
fn basicauth_password_is_kongs_salted_sha1() {
    let consumer = uuid::Uuid::parse_str(CONSUMER_ID).unwrap();
    // printf 'secret6b5e5e5e-1111-4222-8333-444455556666' | sha1sum
    let expected = "a62079b1ddfdf2fe73e4fdfa33e731acbc293df3";
    assert_eq!(basicauth_password_hash("secret", consumer), expected);
    let input = json!({"consumer": {"id": CONSUMER_ID}, "username": "bob", "password": "secret"});
    let mut entity = validate_entity(EntityKind::BasicauthCredentials, &input, NOW).unwrap();
    transform_on_write(&mut entity, input.as_object().unwrap());
    let Entity::BasicauthCredential(stored) = &entity else {
        panic!("{entity:?}")
    };
    assert_eq!(stored.password, expected);
    // A write that leaves the password out (a PATCH of the tags) keeps the stored hash.
    transform_on_write(&mut entity, json!({"tags": ["x"]}).as_object().unwrap());
    let Entity::BasicauthCredential(stored) = &entity else {
        panic!("{entity:?}")
    };
    assert_eq!(stored.password, expected);
    // Other kinds are stored as given.
    let hmac = json!({"consumer": {"id": CONSUMER_ID}, "username": "h", "secret": "s", "password": "p"});
    let given: &Map<String, Value> = hmac.as_object().unwrap();
    let mut entity = validate_entity(
        EntityKind::HmacauthCredentials,
        &json!({"consumer": {"id": CONSUMER_ID}, "username": "h", "secret": "s"}),
        NOW,
    )
    .unwrap();
    let before = entity.clone();
    transform_on_write(&mut entity, given);
    assert_eq!(entity, before);
}

#[test]
fn acl_needs_a_group() {
    let out = valid(
        EntityKind::Acls,
        json!({"consumer": {"id": CONSUMER_ID}, "group": "admins"}),
    );
    assert_eq!(out["group"], "admins");
    assert_eq!(out["tags"], Value::Null);
    assert_eq!(endpoint_key(EntityKind::Acls), None);
    assert_eq!(
        invalid(
            EntityKind::Acls,
            json!({"consumer": {"id": CONSUMER_ID}, "group": ["a"], "name": "x"})
        ),
        vec![pair("group", "expected a string"), pair("name", "unknown field")]
    );
    assert_eq!(
        invalid(EntityKind::Acls, json!({"consumer": {"id": CONSUMER_ID}})),
        vec![pair("group", "required field missing")]
    );
}

#[test]
fn jwt_secret_defaults_and_generated_values() {
    let out = valid(EntityKind::JwtSecrets, json!({"consumer": {"id": CONSUMER_ID}}));
    assert_eq!(out["algorithm"], "HS256");
    assert!(is_random_hex(&out["key"]) && is_random_hex(&out["secret"]), "{out}");
    assert_ne!(out["key"], out["secret"]);
    assert_eq!(out["rsa_public_key"], Value::Null);
    let out = valid(
        EntityKind::JwtSecrets,
        json!({"consumer": {"id": CONSUMER_ID}, "key": "iss-1", "secret": "s3cr3t", "algorithm": "HS512"}),
    );
    assert_eq!((&out["key"], &out["secret"]), (&json!("iss-1"), &json!("s3cr3t")));
    assert_eq!(out["id"], json!(entity_id_for_key(EntityKind::JwtSecrets, "iss-1")));
    // Kong's conditional check leaves ES* out: no key needed.
    valid(
        EntityKind::JwtSecrets,
        json!({"consumer": {"id": CONSUMER_ID}, "algorithm": "ES256"}),
    );
    for algorithm in JWT_ALGORITHMS {
        assert!(JWT_ALGORITHMS_NEEDING_PUBLIC_KEY
            .iter()
            .all(|a| JWT_ALGORITHMS.contains(a)));
        let key = match *algorithm {
            "EdDSA" => ED25519_PUBLIC_KEY,
            _ => RSA_PUBLIC_KEY,
        };
        valid(
            EntityKind::JwtSecrets,
            json!({"consumer": {"id": CONSUMER_ID}, "algorithm": algorithm, "rsa_public_key": key}),
        );
    }
}

#[test]
fn jwt_secret_rejects_bad_algorithms_and_keys() {
    let errors = invalid(
        EntityKind::JwtSecrets,
        json!({"consumer": {"id": CONSUMER_ID}, "algorithm": "none", "key": 1}),
    );
    assert_eq!(errors[0], pair("key", "expected a string"));
    assert_eq!(errors[1].0, "algorithm");
    assert!(
        errors[1].1.starts_with("expected one of: HS256, HS384, HS512, RS256"),
        "{errors:?}"
    );
    assert_eq!(
        invalid(
            EntityKind::JwtSecrets,
            json!({"consumer": {"id": CONSUMER_ID}, "algorithm": "RS256"})
        ),
        vec![pair("rsa_public_key", "required field missing")]
    );
    let broken_body = RSA_PUBLIC_KEY.replace("MIGf", "MIGz");
    let truncated = RSA_PUBLIC_KEY.replace("mTIVRTZG2nxPgus9WQIDAQAB\n", "");
    for bad in [
        "not a key",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----",
        "-----BEGIN PUBLIC KEY-----\nMIGf\n-----END RSA PUBLIC KEY-----",
        broken_body.as_str(),
        truncated.as_str(),
    ] {
        assert_eq!(
            invalid(
                EntityKind::JwtSecrets,
                json!({"consumer": {"id": CONSUMER_ID}, "algorithm": "PS384", "rsa_public_key": bad})
            ),
            vec![pair("rsa_public_key", "invalid key")],
            "{bad}"
        );
    }
    // Kong checks the key only for the algorithms that use one.
    valid(
        EntityKind::JwtSecrets,
        json!({"consumer": {"id": CONSUMER_ID}, "rsa_public_key": "not a key"}),
    );
}

#[test]
fn hmacauth_secret_is_generated_when_absent() {
    let out = valid(
        EntityKind::HmacauthCredentials,
        json!({"consumer": {"id": CONSUMER_ID}, "username": "hmac-user"}),
    );
    assert!(is_random_hex(&out["secret"]), "{out}");
    assert_eq!(
        out["id"],
        json!(entity_id_for_key(EntityKind::HmacauthCredentials, "hmac-user"))
    );
    let out = valid(
        EntityKind::HmacauthCredentials,
        json!({"consumer": {"id": CONSUMER_ID}, "username": "u", "secret": "given"}),
    );
    assert_eq!(out["secret"], "given");
    assert_eq!(
        invalid(
            EntityKind::HmacauthCredentials,
            json!({"consumer": {"id": CONSUMER_ID}, "secret": ""})
        ),
        vec![
            pair("username", "required field missing"),
            pair("secret", "length must be at least 1")
        ]
    );
}

#[test]
fn credential_schemas_describe_kong_fields() {
    let names = |kind| -> Vec<String> {
        entity_schema_json(kind)["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_object().unwrap().keys().next().unwrap().clone())
            .collect()
    };
    assert_eq!(
        names(EntityKind::BasicauthCredentials),
        ["id", "created_at", "consumer", "username", "password", "tags"]
    );
    assert_eq!(
        names(EntityKind::Acls),
        ["id", "created_at", "consumer", "group", "tags"]
    );
    assert_eq!(
        names(EntityKind::JwtSecrets),
        [
            "id",
            "created_at",
            "consumer",
            "key",
            "secret",
            "rsa_public_key",
            "algorithm",
            "tags"
        ]
    );
    assert_eq!(
        names(EntityKind::HmacauthCredentials),
        ["id", "created_at", "consumer", "username", "secret", "tags"]
    );
    let jwt = entity_schema_json(EntityKind::JwtSecrets);
    assert_eq!(jwt["fields"][6]["algorithm"]["default"], "HS256");
    assert_eq!(jwt["fields"][3]["key"]["unique"], true);
    assert_eq!(jwt["fields"][4]["secret"]["auto"], true);
    let conditional = &jwt["entity_checks"][0]["conditional"];
    assert_eq!(conditional["then_field"], "rsa_public_key");
    assert_eq!(conditional["if_match"]["match_any"]["patterns"][0], "^RS256$");
    let consumer = &entity_schema_json(EntityKind::Acls)["fields"][2]["consumer"];
    assert_eq!(
        (&consumer["reference"], &consumer["required"]),
        (&json!("consumers"), &json!(true))
    );
}

#[test]
fn oauth2_credentials_generate_ids_check_uris_and_hash_secrets() {
    let out = valid(
        EntityKind::Oauth2Credentials,
        json!({"consumer": {"id": CONSUMER_ID}, "name": "app", "redirect_uris": ["https://a.example/cb"]}),
    );
    assert!(is_random_hex(&out["client_id"]), "{out}");
    assert!(is_random_hex(&out["client_secret"]), "{out}");
    assert_eq!(out["client_type"], "confidential");
    assert_eq!(out["hash_secret"], false);
    let errors = invalid(
        EntityKind::Oauth2Credentials,
        json!({"consumer": {"id": CONSUMER_ID}, "name": "app", "redirect_uris": ["nope", "https://a.example/#x"]}),
    );
    assert_eq!(
        errors,
        vec![
            pair("redirect_uris[0]", "cannot parse 'nope'"),
            pair("redirect_uris[1]", "fragment not allowed in 'https://a.example/#x'"),
        ]
    );
    assert_eq!(
        invalid(
            EntityKind::Oauth2Credentials,
            json!({"consumer": {"id": CONSUMER_ID}, "name": "app", "client_type": "secret"})
        ),
        vec![pair("client_type", "expected one of: confidential, public")]
    );

    let input = json!({"consumer": {"id": CONSUMER_ID}, "name": "app", "client_secret": "s3cret", "hash_secret": true});
    let mut entity = validate_entity(EntityKind::Oauth2Credentials, &input, NOW).unwrap();
    transform_on_write(&mut entity, input.as_object().unwrap());
    let Entity::Oauth2Credential(stored) = &entity else {
        panic!("{entity:?}")
    };
    assert!(
        stored.client_secret.starts_with("$pbkdf2-sha512$i=10000,l=32$"),
        "{}",
        stored.client_secret
    );
    assert!(oauth2_secret_verify("s3cret", &stored.client_secret));
    assert!(!oauth2_secret_verify("other", &stored.client_secret));
    // A write that leaves both fields out does not hash the hash again.
    let hashed = stored.client_secret.clone();
    transform_on_write(&mut entity, json!({"name": "renamed"}).as_object().unwrap());
    let Entity::Oauth2Credential(stored) = &entity else {
        panic!("{entity:?}")
    };
    assert_eq!(stored.client_secret, hashed);
}
