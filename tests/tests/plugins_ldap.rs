//! ldap-auth end to end against a real OpenLDAP `slapd` (tests/src/ldap.rs):
//! binds over plain LDAP, LDAPS and StartTLS, Kong's answers for missing,
//! wrong and unverifiable credentials and for an unreachable directory,
//! the anonymous fallback, and the verdict cache outliving the server.

use base64::Engine as _;
use serde_json::json;
use strait_e2e::ldap::{Slapd, BASE_DN};
use strait_e2e::plugins::{echo_headers, echo_service, gateway_with_echo};
use strait_e2e::{free_port, get, request};

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldap_auth_binds_against_slapd_plain_ldaps_and_starttls() {
    let mut slapd = Slapd::start(&[("alice", "wonderland"), ("bob", "builder")]);
    let ldap = |path: &str, extra: serde_json::Value| {
        let mut config = json!({ "ldap_host": "localhost", "ldap_port": slapd.port, "base_dn": BASE_DN,
                                 "attribute": "cn", "cache_ttl": 600 });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        json!({ "name": path.trim_start_matches('/'), "paths": [path],
                "plugins": [{ "name": "ldap-auth", "config": config }] })
    };
    let routes = json!([
        ldap("/plain", json!({ "hide_credentials": true })),
        ldap("/ldaps", json!({ "ldaps": true, "ldap_port": slapd.ldaps_port })),
        ldap("/starttls", json!({ "start_tls": true })),
        ldap(
            "/verified",
            json!({ "ldaps": true, "ldap_port": slapd.ldaps_port, "verify_ldap_host": true })
        ),
        ldap("/realm", json!({ "header_type": "basic", "realm": "corp" })),
        ldap("/anon", json!({ "anonymous": "guest" })),
        ldap("/down", json!({ "ldap_port": free_port() }))
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([{ "username": "guest" }]))).await;
    let with = |path: &str, header: &str, value: String| {
        let gw = &gw;
        let path = path.to_string();
        let header = header.to_string();
        async move {
            gw.proxy(request("GET", &path, &[(header.as_str(), value.as_str())], ""))
                .await
        }
    };

    // No credentials: Kong's 401 and its challenge.
    let missing = gw.proxy(get("/plain")).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.json(), json!({ "message": "Unauthorized" }));
    assert_eq!(missing.header("www-authenticate").as_deref(), Some("LDAP"));

    // The right password over each transport.
    let good = format!("ldap {}", basic("alice", "wonderland"));
    let passed = with("/plain", "authorization", good.clone()).await;
    assert_eq!(passed.status, 200, "{}", passed.text());
    let seen = echo_headers(&passed);
    assert_eq!(seen["x-credential-identifier"], "alice");
    assert!(seen.get("authorization").is_none(), "hide_credentials removes it");
    assert!(seen.get("x-consumer-id").is_none() && seen.get("x-anonymous-consumer").is_none());
    for path in ["/ldaps", "/starttls"] {
        let reply = with(path, "authorization", good.clone()).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        assert_eq!(
            echo_headers(&reply)["authorization"],
            good.as_str(),
            "{path} keeps the header"
        );
    }
    // Proxy-Authorization counts too.
    let proxied = with(
        "/starttls",
        "proxy-authorization",
        format!("LDAP {}", basic("bob", "builder")),
    )
    .await;
    assert_eq!(proxied.status, 200, "{}", proxied.text());

    // A wrong password, an unverifiable server certificate: 401.
    let wrong = with(
        "/plain",
        "authorization",
        format!("ldap {}", basic("alice", "looking-glass")),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.json(), json!({ "message": "Unauthorized" }));
    let unverified = with("/verified", "authorization", good.clone()).await;
    assert_eq!(unverified.status, 401, "{}", unverified.text());

    // Another header type and a realm.
    let realm = gw.proxy(get("/realm")).await;
    assert_eq!(
        realm.header("www-authenticate").as_deref(),
        Some("basic realm=\"corp\"")
    );
    let realm_ok = with(
        "/realm",
        "authorization",
        format!("Basic {}", basic("alice", "wonderland")),
    )
    .await;
    assert_eq!(realm_ok.status, 200);

    // A failed login falls back to the anonymous consumer.
    let anon = with("/anon", "authorization", format!("ldap {}", basic("alice", "nope"))).await;
    assert_eq!(anon.status, 200, "{}", anon.text());
    let seen = echo_headers(&anon);
    assert_eq!(seen["x-anonymous-consumer"], "true");
    assert_eq!(seen["x-consumer-username"], "guest");

    // A directory that cannot be reached: Kong's 500.
    let down = with("/down", "authorization", good.clone()).await;
    assert_eq!(down.status, 500);
    assert_eq!(down.json(), json!({ "message": "An unexpected error occurred" }));

    // Verdicts are cached for cache_ttl: with the server stopped, the
    // known password still passes and the known wrong one still fails;
    // a new one cannot be checked (500).
    slapd.stop();
    assert_eq!(with("/plain", "authorization", good.clone()).await.status, 200);
    let wrong = with(
        "/plain",
        "authorization",
        format!("ldap {}", basic("alice", "looking-glass")),
    )
    .await;
    assert_eq!(wrong.status, 401);
    let unknown = with("/plain", "authorization", format!("ldap {}", basic("bob", "builder"))).await;
    assert_eq!(unknown.status, 500);
    // Back up: kept connections were lost with it; new ones are made.
    slapd.restart();
    let again = with(
        "/starttls",
        "authorization",
        format!("ldap {}", basic("alice", "wonderland2")),
    )
    .await;
    assert_eq!(again.status, 401, "{}", again.text());

    // ldaps and start_tls together are refused.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "ldap-auth", "config": { "ldap_host": "localhost", "base_dn": BASE_DN, "attribute": "cn",
                    "ldaps": true, "start_tls": true } })
            .to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(
        refused
            .text()
            .contains("'ldaps' and 'start_tls' cannot be enabled simultaneously"),
        "{}",
        refused.text()
    );
}
