//! Secret references: `{vault://<prefix>/<resource>[/<key>][?<option>=<value>][#<version>]}`
//! in the fields Kong marks `referenceable`, as Kong's `kong.vault` parses
//! them. Parsing only: the values are read by the proxy's `secrets` module
//! when a snapshot is compiled, never stored.

/// The vault implementations Strait has: Kong's `env`, and `file` (a
/// directory of one-secret files, as container orchestrators mount them).
/// A vault entity's `prefix` may not be one of these names.
pub const VAULT_NAMES: &[&str] = &["env", "file"];

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// A vault entity's `prefix`, or an implementation name (`env`).
    pub vault: String,
    /// What the vault looks up (`my-secret` in `{vault://env/my-secret}`).
    pub resource: String,
    /// When given, the resource holds a JSON object and this is the field read.
    pub key: Option<String>,
    /// Options overriding the vault's config (`?prefix=SSL_`).
    pub options: Vec<(String, String)>,
    /// `#2`: the previous value where the vault keeps one.
    pub version: Option<u32>,
}

/// Kong's `is_reference`: the shape `{vault://...}`. Values that have it are
/// references in referenceable fields and literal text elsewhere.
pub fn is_reference(value: &str) -> bool {
    value.len() > 9 && value.starts_with("{vault://") && value.ends_with('}')
}

/// Parses a reference; the error says what is wrong and quotes it.
pub fn parse_reference(reference: &str) -> Result<Reference, String> {
    if !is_reference(reference) {
        return Err(format!("not a reference [{reference}]"));
    }
    let url = &reference["{vault://".len()..reference.len() - 1];
    let (url, version) = match url.split_once('#') {
        Some((rest, version)) => match version.parse::<u32>() {
            Ok(version) => (rest, Some(version)),
            Err(_) => return Err(format!("reference url has invalid version [{reference}]")),
        },
        None => (url, None),
    };
    let (url, query) = match url.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (url, None),
    };
    let (vault, path) = url.split_once('/').unwrap_or((url, ""));
    if vault.is_empty() {
        return Err(format!("reference url is missing host [{reference}]"));
    }
    if path.is_empty() {
        return Err(format!("reference url has empty path [{reference}]"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.iter().any(|part| part.is_empty()) {
        return Err(format!("reference url has an empty path segment [{reference}]"));
    }
    let decode =
        |text: &str| percent_decode(text).ok_or_else(|| format!("reference url is badly escaped [{reference}]"));
    let (resource, key) = match parts.split_last() {
        Some((last, rest)) if !rest.is_empty() => (decode(&rest.join("/"))?, Some(decode(last)?)),
        _ => (decode(path)?, None),
    };
    let mut options = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        options.push((decode(name)?, decode(value)?));
    }
    Ok(Reference {
        vault: vault.to_string(),
        resource,
        key,
        options,
        version,
    })
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                at += 3;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Kong's vault `prefix` rule (`^[a-z][a-z%d-]-[a-z%d]+$`): lower-case
/// letters, digits and dashes, starting with a letter, not ending with a
/// dash, at least two characters.
pub fn valid_vault_prefix(prefix: &str) -> bool {
    let bytes = prefix.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    bytes.len() >= 2
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(inner)
        && bytes.last().is_some_and(|b| *b != b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_as_kong_parses_them() {
        let plain = parse_reference("{vault://env/my-secret}").unwrap();
        assert_eq!((plain.vault.as_str(), plain.resource.as_str()), ("env", "my-secret"));
        assert_eq!((plain.key, plain.version), (None, None));

        let keyed = parse_reference("{vault://my-vault/postgres/creds/password?prefix=SSL_#2}").unwrap();
        assert_eq!(keyed.vault, "my-vault");
        assert_eq!(keyed.resource, "postgres/creds");
        assert_eq!(keyed.key.as_deref(), Some("password"));
        assert_eq!(keyed.options, vec![("prefix".to_string(), "SSL_".to_string())]);
        assert_eq!(keyed.version, Some(2));

        assert_eq!(parse_reference("{vault://env/a%2Fb}").unwrap().resource, "a/b");
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        let error = |r: &str| parse_reference(r).unwrap_err();
        assert!(
            error("{vault://env}").contains("empty path"),
            "{}",
            error("{vault://env}")
        );
        assert!(error("{vault:///x}").contains("missing host"));
        assert!(error("{vault://env/x#one}").contains("invalid version"));
        assert!(error("{vault://env/a//b}").contains("empty path segment"));
        assert!(error("vault://env/x").contains("not a reference"));
        assert!(error("{vault://env/%zz}").contains("badly escaped"));
    }

    #[test]
    fn only_the_braced_shape_is_a_reference() {
        assert!(is_reference("{vault://env/x}"));
        assert!(!is_reference("{vault:/env/x}"));
        assert!(!is_reference("vault://env/x"));
        assert!(!is_reference("{vault://env/x"));
    }

    #[test]
    fn vault_prefixes_follow_kongs_pattern() {
        for good in ["my-vault", "ab", "a1", "aws-2"] {
            assert!(valid_vault_prefix(good), "{good}");
        }
        for bad in ["a", "-ab", "ab-", "Ab", "1ab", "a_b", ""] {
            assert!(!valid_vault_prefix(bad), "{bad}");
        }
    }
}
