use super::*;

#[test]
fn redirects_merge_parameters_sorted() {
    let mut params = Map::new();
    params.insert("state".into(), json!("s 1"));
    params.insert("code".into(), json!("abc"));
    assert_eq!(
        redirect_with("https://app.example/cb?x=1", &params, false),
        "https://app.example/cb?code=abc&state=s%201&x=1"
    );
    assert_eq!(
        redirect_with("https://app.example/cb?x=1", &params, true),
        "https://app.example/cb?x=1#code=abc&state=s%201"
    );
}

#[test]
fn pkce_challenges_are_canonical() {
    // RFC 7636 appendix B.
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    assert_eq!(
        sha256_base64url(verifier),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
    assert_eq!(
        canonical_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
}
