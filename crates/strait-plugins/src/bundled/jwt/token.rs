//! Finding the JWT in a request (Kong's `retrieve_tokens`: query
//! arguments, then cookies, then `Bearer` headers) and decoding it (Kong's
//! `jwt_parser`: three base64url segments, JSON header and claims).

use serde_json::{Map, Value};

use super::signature::Algorithm;
use crate::auth::nginx_base64;
use crate::context::RequestCtx;

/// What the request carries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    None,
    One(String),
    /// Several different tokens.
    Many,
    /// A query argument given without a value (`?jwt`): Kong sees `true`,
    /// not a string.
    Unrecognizable,
}

/// One entry of Kong's token set.
#[derive(PartialEq, Eq)]
enum Candidate {
    Text(String),
    Flag,
}

/// Where to look, from the plugin's config.
pub(crate) struct Sources<'c> {
    pub uri_param_names: &'c [String],
    pub cookie_names: &'c [String],
    /// Lower case, `_` written as `-` (Kong's header table normalises so).
    pub header_names: &'c [String],
}

pub(crate) fn retrieve(ctx: &RequestCtx<'_>, sources: &Sources<'_>) -> Found {
    let mut set: Vec<Candidate> = Vec::new();
    let mut add = |candidate: Candidate| {
        if !set.contains(&candidate) {
            set.push(candidate);
        }
    };
    for name in sources.uri_param_names {
        for value in query_values(ctx.query(), name) {
            match value {
                Some(text) if !text.is_empty() => add(Candidate::Text(text)),
                Some(_) => {}
                None => add(Candidate::Flag),
            }
        }
    }
    for name in sources.cookie_names {
        if let Some(value) = cookie(ctx, name).filter(|v| !v.is_empty()) {
            add(Candidate::Text(value));
        }
    }
    for name in sources.header_names {
        let value = ctx
            .headers
            .get(name.as_str())
            .map(|v| String::from_utf8_lossy(v.as_bytes()));
        if let Some(token) = value.as_deref().and_then(bearer_token) {
            add(Candidate::Text(token.to_string()));
        }
    }
    let mut candidates = set.into_iter();
    match (candidates.next(), candidates.next()) {
        (None, _) => Found::None,
        (Some(Candidate::Text(token)), None) => Found::One(token),
        (Some(Candidate::Flag), None) => Found::Unrecognizable,
        (Some(_), Some(_)) => Found::Many,
    }
}

/// Every value of query argument `name`, decoded; `None` for an argument
/// written without `=` (nginx's `true`).
fn query_values<'q>(query: &'q str, name: &'q str) -> impl Iterator<Item = Option<String>> + 'q {
    query.split('&').filter_map(move |pair| {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (pair, None),
        };
        (!key.is_empty() && crate::form::decode(key) == name)
            .then(|| value.map(|v| crate::form::decode(v).into_owned()))
    })
}

/// nginx's `$cookie_<name>`: the first cookie of that name (compared
/// without case), its value up to the next `;`.
fn cookie(ctx: &RequestCtx<'_>, name: &str) -> Option<String> {
    ctx.headers.get_all(http::header::COOKIE).iter().find_map(|header| {
        let text = String::from_utf8_lossy(header.as_bytes());
        text.split(';').find_map(|pair| {
            let pair = pair.trim_start_matches(' ');
            let rest = pair.get(..name.len()).filter(|n| n.eq_ignore_ascii_case(name))?;
            let after = pair[rest.len()..].trim_start_matches(' ').strip_prefix('=')?;
            Some(after.trim_start_matches(' ').to_string())
        })
    })
}

/// PCRE's `\s`.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Kong's unanchored `\s*[Bb]earer\s+(.+)`: what follows the first
/// `Bearer`/`bearer` that has whitespace and then something after it.
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let bytes = value.as_bytes();
    let mut from = 0;
    while let Some(offset) = value[from..].find("earer") {
        let at = from + offset;
        from = at + 1;
        if at == 0 || !matches!(bytes[at - 1], b'B' | b'b') {
            continue;
        }
        let after = at + "earer".len();
        let spaces = bytes[after..].iter().take_while(|b| is_space(**b)).count();
        let rest = after + spaces;
        if spaces == 0 {
            continue;
        }
        if rest < bytes.len() {
            return Some(&value[rest..]);
        }
        if spaces >= 2 {
            // `\s+` gives its last space back so that `.+` matches.
            return Some(&value[rest - 1..]);
        }
    }
    None
}

/// A decoded token.
#[derive(Debug)]
pub(crate) struct Jwt<'t> {
    /// `header.claims`, the signed bytes.
    pub signing_input: &'t str,
    pub header: Value,
    pub claims: Value,
    pub signature: Vec<u8>,
    pub algorithm: Algorithm,
}

/// Kong's `decode_token`; the error completes "Bad token; ...".
pub(crate) fn decode(token: &str) -> Result<Jwt<'_>, &'static str> {
    let mut parts = token.splitn(3, '.');
    let (Some(header_64), Some(claims_64), Some(signature_64)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("invalid JSON");
    };
    let json = |segment: &str| nginx_base64::decode_url(segment).and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let (Some(header), Some(claims)) = (json(header_64), json(claims_64)) else {
        return Err("invalid JSON");
    };
    let algorithm = header
        .get("alg")
        .and_then(Value::as_str)
        .and_then(Algorithm::from_name)
        .ok_or("invalid alg")?;
    let signature = nginx_base64::decode_url(signature_64).ok_or("invalid signature")?;
    Ok(Jwt {
        signing_input: &token[..header_64.len() + 1 + claims_64.len()],
        header,
        claims,
        signature,
        algorithm,
    })
}

/// What the key claim holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyClaim {
    Missing,
    Empty,
    /// A value no credential can have (`true`, `null`, an object...).
    Unusable,
    Key(String),
}

impl Jwt<'_> {
    /// The claims as an object (a token whose claims are not an object
    /// has no claims).
    pub fn claims(&self) -> Option<&Map<String, Value>> {
        self.claims.as_object()
    }

    /// Kong's `claims[name] or header[name]`.
    pub fn key_claim(&self, name: &str) -> KeyClaim {
        let in_claims = self.claims().and_then(|c| c.get(name));
        let value = match in_claims {
            None | Some(Value::Bool(false)) => self.header.as_object().and_then(|h| h.get(name)),
            found => found,
        };
        match value {
            None | Some(Value::Bool(false)) => KeyClaim::Missing,
            Some(Value::String(s)) if s.is_empty() => KeyClaim::Empty,
            Some(Value::String(s)) => KeyClaim::Key(s.clone()),
            Some(Value::Number(n)) => KeyClaim::Key(lua_number(n)),
            Some(_) => KeyClaim::Unusable,
        }
    }
}

/// A JSON number as Lua's `tostring` writes it (integers without `.0`).
fn lua_number(number: &serde_json::Number) -> String {
    match number.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => number.to_string(),
    }
}
