//! The HTTP pieces proxy-cache reads: `Cache-Control` directives, the
//! `Expires` date and media types, parsed the way Kong's helpers do.

use std::collections::HashMap;

use http::header::HeaderValue;

/// `Cache-Control` directives by lower-case name: `Some(value)` for
/// `name=value`, `None` for a bare token.
#[derive(Debug, Default)]
pub struct Directives(HashMap<String, Option<String>>);

impl Directives {
    /// All `Cache-Control` values of a message, joined as one list.
    pub fn parse<'a>(values: impl Iterator<Item = &'a HeaderValue>) -> Directives {
        let mut map = HashMap::new();
        for value in values {
            let Ok(text) = value.to_str() else { continue };
            for item in text.split(',') {
                let item = item.trim_start();
                if item.is_empty() {
                    continue;
                }
                let (name, value) = match item.split_once('=') {
                    Some((name, value)) => (name, Some(value.trim().trim_matches('"').to_string())),
                    None => (item, None),
                };
                map.insert(name.trim().to_ascii_lowercase(), value);
            }
        }
        Directives(map)
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// A directive's numeric value (`max-age=60` → 60).
    pub fn seconds(&self, name: &str) -> Option<i64> {
        self.0.get(name)?.as_deref()?.parse().ok()
    }
}

/// Kong's `calculate_resource_ttl`: `s-maxage`, else `max-age`, else
/// `Expires` minus now; never below 0; 0 when none is given.
pub fn resource_ttl(cc: &Directives, expires: Option<&HeaderValue>, now: u64) -> u64 {
    let max_age = cc.seconds("s-maxage").or_else(|| cc.seconds("max-age")).or_else(|| {
        let at = parse_http_date(expires?.to_str().ok()?)?;
        Some(at - now as i64)
    });
    max_age.map_or(0, |age| age.max(0) as u64)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as Unix seconds.
pub fn parse_http_date(text: &str) -> Option<i64> {
    let mut words = text.split_whitespace();
    let _weekday = words.next()?;
    let day: i64 = words.next()?.parse().ok()?;
    let month = match words.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = words.next()?.parse().ok()?;
    let mut clock = words.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (clock.next()??, clock.next()??, clock.next()??);
    if words.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (UTC); rate-limiting
/// aligns its month and year windows with it too.
pub(crate) use strait_runtime::clock::days_from_civil;

/// A media type: lower-case type and subtype, parameters by lower-case name.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaType {
    pub kind: String,
    pub subtype: String,
    pub params: Vec<(String, String)>,
}

impl MediaType {
    pub fn parse(text: &str) -> Option<MediaType> {
        let mut pieces = text.split(';');
        let (kind, subtype) = pieces.next()?.trim().split_once('/')?;
        let (kind, subtype) = (kind.trim(), subtype.trim());
        if kind.is_empty() || subtype.is_empty() {
            return None;
        }
        let mut params: Vec<(String, String)> = pieces
            .filter_map(|p| {
                let (name, value) = p.split_once('=')?;
                Some((
                    name.trim().to_ascii_lowercase(),
                    value.trim().trim_matches('"').to_string(),
                ))
            })
            .collect();
        params.sort();
        Some(MediaType {
            kind: kind.to_ascii_lowercase(),
            subtype: subtype.to_ascii_lowercase(),
            params,
        })
    }

    /// Kong's content-type match: `*` wildcards for type and subtype, and
    /// exactly the same parameters (`application/json` does not match
    /// `application/json; charset=utf-8`).
    pub fn accepts(&self, actual: &MediaType) -> bool {
        (self.kind == "*" || self.kind == actual.kind)
            && (self.subtype == "*" || self.subtype == actual.subtype)
            && self.params == actual.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_tokens_and_values() {
        let values = [
            HeaderValue::from_static("public, Max-Age=60"),
            HeaderValue::from_static("no-cache"),
        ];
        let cc = Directives::parse(values.iter());
        assert_eq!(cc.seconds("max-age"), Some(60));
        assert!(cc.has("no-cache") && cc.has("public"));
        assert!(!cc.has("private"));
    }

    #[test]
    fn resource_ttl_prefers_s_maxage_then_max_age_then_expires() {
        let cc = |v: &'static str| Directives::parse([HeaderValue::from_static(v)].iter());
        assert_eq!(resource_ttl(&cc("max-age=10, s-maxage=20"), None, 0), 20);
        assert_eq!(resource_ttl(&cc("max-age=10"), None, 0), 10);
        let now = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(now, 784_111_777);
        let expires = HeaderValue::from_static("Sun, 06 Nov 1994 08:50:37 GMT");
        assert_eq!(resource_ttl(&cc("public"), Some(&expires), now as u64), 60);
        assert_eq!(resource_ttl(&cc("public"), Some(&expires), now as u64 + 120), 0);
        assert_eq!(resource_ttl(&cc("public"), None, 0), 0);
        assert_eq!(parse_http_date("not a date"), None);
    }

    #[test]
    fn media_types_match_exactly_with_wildcards() {
        let m = |t: &str| MediaType::parse(t).unwrap();
        assert!(m("application/json").accepts(&m("Application/JSON")));
        assert!(!m("application/json").accepts(&m("application/json; charset=utf-8")));
        assert!(m("application/json; charset=utf-8").accepts(&m("application/json;charset=\"utf-8\"")));
        assert!(m("text/*").accepts(&m("text/html")));
        assert!(m("*/*").accepts(&m("image/png")));
        assert!(MediaType::parse("garbage").is_none());
    }
}
