//! The encodings Kong's OAuth2 endpoints use: a PKCE challenge's
//! base64url form, the sorted form encoding of `encode_args`, and a
//! redirect URI with parameters merged into its query or fragment.

use super::*;

/// Kong's base64url round trip of a PKCE challenge: a challenge that
/// decodes is re-encoded canonically (unpadded, URL alphabet).
pub(super) fn canonical_challenge(challenge: &str) -> String {
    let standard: String = challenge
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    let padded = match standard.len() % 4 {
        2 => format!("{standard}=="),
        3 => format!("{standard}="),
        _ => standard,
    };
    match STANDARD.decode(padded) {
        Ok(bytes) => URL_SAFE_NO_PAD.encode(bytes),
        Err(_) => challenge.to_string(),
    }
}

pub(super) fn sha256_base64url(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, text.as_bytes()))
}

/// `application/x-www-form-urlencoded` with keys sorted, as Kong's
/// `encode_args` writes them.
fn encode_args(args: &Map<String, Value>) -> String {
    let mut pairs: Vec<(&str, String)> = args
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.as_str(), text)
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    crate::form::serialize(pairs.iter().map(|(k, v)| (*k, v.as_str())))
}

/// `redirect_uri` with `params` merged into its query (or, for the
/// implicit grant, its fragment).
pub(super) fn redirect_with(redirect_uri: &str, params: &Map<String, Value>, in_fragment: bool) -> String {
    let (before_fragment, fragment) = match redirect_uri.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (redirect_uri, None),
    };
    let (base, query) = match before_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_fragment, None),
    };
    let existing = if in_fragment { fragment } else { query };
    let mut merged = Map::new();
    for (k, v) in crate::form::pairs(existing.unwrap_or("")) {
        merged.insert(k.into_owned(), json!(v.into_owned()));
    }
    for (k, v) in params {
        merged.insert(k.clone(), v.clone());
    }
    let encoded = encode_args(&merged);
    let mut out = base.to_string();
    match (in_fragment, query) {
        (true, Some(q)) => {
            out.push('?');
            out.push_str(q);
        }
        (false, _) if !encoded.is_empty() => {
            out.push('?');
            out.push_str(&encoded);
        }
        _ => {}
    }
    match (in_fragment, fragment) {
        (true, _) => {
            out.push('#');
            out.push_str(&encoded);
        }
        (false, Some(f)) => {
            out.push('#');
            out.push_str(f);
        }
        _ => {}
    }
    out
}
