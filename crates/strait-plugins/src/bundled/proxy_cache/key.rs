//! Kong's cache key: the SHA-256 (hex) of
//! `prefix|method|path|query part|header part`, where the prefix is
//! `consumer:route`, `route` or `default`, the query part lists the
//! request's arguments (all of them sorted by name, or only
//! `vary_query_params` in the configured order) and the header part the
//! `vary_headers` present. Repeated values are sorted and joined with `,`;
//! an argument without `=` is its bare name.

use std::collections::BTreeMap;

use http::HeaderMap;
use ring::digest;
use uuid::Uuid;

use crate::form::decode;

/// What the key is built from.
pub struct KeyParts<'a> {
    pub consumer: Option<Uuid>,
    pub route: Option<Uuid>,
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
}

/// Which arguments and headers vary the key.
#[derive(Debug, Default)]
pub struct Vary {
    /// None: every query argument.
    pub query_params: Option<Vec<String>>,
    pub headers: Vec<String>,
}

/// One argument's values: `None` stands for an argument without `=`.
type Values = Vec<Option<String>>;

fn query_args(query: &str) -> BTreeMap<String, Values> {
    let mut args: BTreeMap<String, Values> = BTreeMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.split_once('=') {
            Some((name, value)) => (decode(name), Some(decode(value).into_owned())),
            None => (decode(pair), None),
        };
        args.entry(name.into_owned()).or_default().push(value);
    }
    args
}

/// `field=value`, `field=a,b` (sorted) or the bare `field`.
fn component(field: &str, values: &Values) -> String {
    match values.as_slice() {
        [None] => field.to_string(),
        [Some(value)] => format!("{field}={value}"),
        many => {
            let mut texts: Vec<&str> = many.iter().map(|v| v.as_deref().unwrap_or("true")).collect();
            texts.sort_unstable();
            format!("{field}={}", texts.join(","))
        }
    }
}

fn params_part(query: &str, vary: &Vary) -> String {
    let args = query_args(query);
    let parts: Vec<String> = match &vary.query_params {
        None => args.iter().map(|(name, values)| component(name, values)).collect(),
        Some(fields) => fields
            .iter()
            .filter_map(|field| args.get(field).map(|values| component(field, values)))
            .collect(),
    };
    parts.join(":")
}

fn headers_part(headers: &HeaderMap, vary: &Vary) -> String {
    let parts: Vec<String> = vary
        .headers
        .iter()
        .filter_map(|field| {
            let values: Values = headers
                .get_all(field.as_str())
                .iter()
                .map(|v| Some(String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            (!values.is_empty()).then(|| component(field, &values))
        })
        .collect();
    parts.join(":")
}

/// The hex cache key of a request.
pub fn build(parts: &KeyParts<'_>, vary: &Vary) -> String {
    let prefix = match (parts.consumer, parts.route) {
        (Some(consumer), Some(route)) => format!("{consumer}:{route}"),
        (_, Some(route)) => route.to_string(),
        _ => "default".to_string(),
    };
    let text = format!(
        "{prefix}|{}|{}|{}|{}",
        parts.method,
        parts.path,
        params_part(parts.query, vary),
        headers_part(parts.headers, vary)
    );
    let digest = digest::digest(&digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(query: &str, headers: &HeaderMap, vary: &Vary) -> String {
        build(
            &KeyParts {
                consumer: None,
                route: None,
                method: "GET",
                path: "/a",
                query,
                headers,
            },
            vary,
        )
    }

    #[test]
    fn argument_order_does_not_change_the_key() {
        let h = HeaderMap::new();
        let vary = Vary::default();
        assert_eq!(key("a=1&b=2", &h, &vary), key("b=2&a=1", &h, &vary));
        assert_eq!(key("a=2&a=1", &h, &vary), key("a=1&a=2", &h, &vary));
        assert_ne!(key("a=1", &h, &vary), key("a=2", &h, &vary));
        assert_ne!(key("a", &h, &vary), key("a=", &h, &vary));
        assert_eq!(key("a=1", &h, &vary).len(), 64);
    }

    #[test]
    fn only_the_varying_arguments_and_headers_count() {
        let vary = Vary {
            query_params: Some(vec!["a".into()]),
            headers: vec!["x-tenant".into()],
        };
        let empty = HeaderMap::new();
        assert_eq!(key("a=1&b=2", &empty, &vary), key("a=1&b=3", &empty, &vary));
        let mut tenant = HeaderMap::new();
        tenant.insert("x-tenant", "t1".parse().unwrap());
        let mut other = HeaderMap::new();
        other.insert("x-other", "t1".parse().unwrap());
        assert_ne!(key("a=1", &tenant, &vary), key("a=1", &empty, &vary));
        assert_eq!(key("a=1", &other, &vary), key("a=1", &empty, &vary));
    }

    #[test]
    fn the_key_is_sha256_of_kongs_text() {
        // sha256("default|GET|/a||")
        let expected: String = digest::digest(&digest::SHA256, b"default|GET|/a||")
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(key("", &HeaderMap::new(), &Vary::default()), expected);
    }
}
