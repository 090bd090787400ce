//! Consistent hashing: what a request is hashed on (Kong's `hash_on` and
//! `hash_fallback`) and the precomputed table a hash indexes.
//!
//! The table has `slots` entries. Each target owns points on a 64-bit
//! circle (in proportion to its weight, at hashes of its own name), and
//! each slot belongs to the first point at or after the slot's position.
//! Adding a target moves only the slots its new points take over, about
//! 1/(n+1) of them; removing one moves only its own. A lookup is one
//! array index.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName};
use uuid::Uuid;

/// Points each target of average weight gets on the circle.
const POINTS_PER_TARGET: u64 = 160;
/// Most points in all: keeps building fast for thousands of targets.
const MAX_POINTS: u64 = 1 << 18;

/// One source of a hash key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashOn {
    None,
    Consumer,
    Ip,
    Header(HeaderName),
    Cookie { name: String, path: String },
    Path,
    QueryArg(String),
    UriCapture(String),
}

/// What a request offers to hash on.
pub struct HashInput<'a> {
    pub client_ip: IpAddr,
    /// The authenticated consumer, else the credential.
    pub consumer: Option<Uuid>,
    pub headers: &'a HeaderMap,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub captures: &'a [(String, String)],
}

/// A request's hash, and the cookie to set when `hash_on = cookie` had to
/// make one up (Kong sets it on the response so the client comes back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hashed {
    pub hash: u64,
    pub set_cookie: Option<String>,
}

impl HashOn {
    /// Kong's `hash_on`-style fields: `kind` with its parameter fields.
    pub fn from_fields(
        kind: &str,
        header: Option<&str>,
        cookie: Option<&str>,
        cookie_path: &str,
        query_arg: Option<&str>,
        uri_capture: Option<&str>,
    ) -> HashOn {
        match kind {
            "consumer" => HashOn::Consumer,
            "ip" => HashOn::Ip,
            "header" => header
                .and_then(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                .map_or(HashOn::None, HashOn::Header),
            "cookie" => cookie.map_or(HashOn::None, |name| HashOn::Cookie {
                name: name.to_string(),
                path: cookie_path.to_string(),
            }),
            "path" => HashOn::Path,
            "query_arg" => query_arg.map_or(HashOn::None, |a| HashOn::QueryArg(a.to_string())),
            "uri_capture" => uri_capture.map_or(HashOn::None, |c| HashOn::UriCapture(c.to_string())),
            _ => HashOn::None,
        }
    }

    /// The key this source gives for `input`, if any. A missing cookie
    /// gives a new random key and the cookie that carries it.
    fn key(&self, input: &HashInput<'_>) -> Option<(String, Option<String>)> {
        let found = match self {
            HashOn::None => return None,
            HashOn::Consumer => input.consumer.map(|id| id.to_string()),
            HashOn::Ip => Some(input.client_ip.to_string()),
            HashOn::Header(name) => {
                let values: Vec<&str> = input
                    .headers
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                (!values.is_empty()).then(|| values.join(", "))
            }
            HashOn::Cookie { name, path } => {
                return Some(match cookie(input.headers, name) {
                    Some(value) => (value.to_string(), None),
                    None => {
                        let value = Uuid::new_v4().to_string();
                        let header = format!("{name}={value}; Path={path}; Same-Site=Lax; HttpOnly");
                        (value, Some(header))
                    }
                });
            }
            HashOn::Path => Some(input.path.to_string()),
            HashOn::QueryArg(name) => query_arg(input.query.unwrap_or(""), name),
            HashOn::UriCapture(group) => input
                .captures
                .iter()
                .find(|(name, _)| name == group)
                .map(|(_, value)| value.clone()),
        };
        found.map(|key| (key, None))
    }
}

/// The hash of `input` by `primary`, else by `fallback`; `None` when neither gives a key.
pub fn hash_request(primary: &HashOn, fallback: &HashOn, input: &HashInput<'_>) -> Option<Hashed> {
    let (key, set_cookie) = primary.key(input).or_else(|| fallback.key(input))?;
    Some(Hashed {
        hash: hash64(key.as_bytes()),
        set_cookie,
    })
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
}

/// Every value of query argument `name`, comma-joined (as Kong joins repeats).
fn query_arg(query: &str, name: &str) -> Option<String> {
    let values: Vec<&str> = query
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then_some(value)
        })
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// FNV-1a with a final mix (splitmix64): stable across processes and
/// versions, so a key keeps its target when the node restarts.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Build the slot table for targets `(name, weight)`; each entry is an
/// index into the list. Empty when no target has weight.
pub fn build_table(targets: &[(&str, u64)], slots: usize) -> Vec<u32> {
    let total: u64 = targets.iter().map(|(_, w)| *w).sum();
    if total == 0 || slots == 0 {
        return Vec::new();
    }
    let budget = (POINTS_PER_TARGET * targets.len() as u64).min(MAX_POINTS);
    let mut points: Vec<(u64, u32)> = Vec::with_capacity(budget as usize + targets.len());
    for (index, (name, weight)) in targets.iter().enumerate() {
        if *weight == 0 {
            continue;
        }
        let count = ((u128::from(*weight) * u128::from(budget)) / u128::from(total)).max(1) as u64;
        for point in 0..count {
            let label = format!("{name}#{point}");
            points.push((hash64(label.as_bytes()), index as u32));
        }
    }
    // Ties (vanishingly rare) go to the lower index, whatever the input order.
    points.sort_unstable();
    let mut table = Vec::with_capacity(slots);
    let mut next = 0;
    for slot in 0..slots {
        let position = ((slot as u128) << 64) / slots as u128;
        while next < points.len() && u128::from(points[next].0) < position {
            next += 1;
        }
        // Past the last point, the circle wraps to the first.
        table.push(points.get(next).unwrap_or(&points[0]).1);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    fn table(names: &[String], slots: usize) -> Vec<u32> {
        let targets: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 100)).collect();
        build_table(&targets, slots)
    }

    #[test]
    fn adding_one_of_n_targets_moves_about_one_nth_of_the_slots() {
        let four = names(4);
        let five = names(5);
        let before = table(&four, 10_000);
        let after = table(&five, 10_000);
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        // Every slot that moved went to the new target.
        assert!(before.iter().zip(&after).all(|(a, b)| a == b || *b == 4));
        let share = moved as f64 / 10_000.0;
        assert!((0.12..=0.28).contains(&share), "moved {share}");
        // Shares stay near even.
        for index in 0..5u32 {
            let own = after.iter().filter(|&&t| t == index).count() as f64 / 10_000.0;
            assert!((0.12..=0.28).contains(&own), "target {index}: {own}");
        }
    }

    #[test]
    fn weights_set_the_shares_and_zero_weight_gets_none() {
        let targets = [("a:1", 300), ("b:1", 100), ("c:1", 0)];
        let table = build_table(&targets, 10_000);
        let a = table.iter().filter(|&&t| t == 0).count() as f64 / 10_000.0;
        assert!((0.65..=0.85).contains(&a), "a: {a}");
        assert!(!table.contains(&2));
    }

    #[test]
    fn keys_come_from_the_configured_source_then_the_fallback() {
        let mut headers = HeaderMap::new();
        headers.append("x-user", HeaderValue::from_static("alice"));
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; session=s42"));
        let input = HashInput {
            client_ip: "192.0.2.7".parse().unwrap(),
            consumer: None,
            headers: &headers,
            path: "/p",
            query: Some("x=1&user=bob&user=carol"),
            captures: &[("id".to_string(), "7".to_string())],
        };
        let hash = |on: HashOn, fallback: HashOn| hash_request(&on, &fallback, &input).map(|h| h.hash);
        let header = HashOn::Header(HeaderName::from_static("x-user"));
        assert_eq!(hash(header.clone(), HashOn::None), Some(hash64(b"alice")));
        assert_eq!(hash(HashOn::Consumer, HashOn::Ip), Some(hash64(b"192.0.2.7")));
        assert_eq!(hash(HashOn::Consumer, HashOn::None), None);
        assert_eq!(
            hash(HashOn::QueryArg("user".into()), HashOn::None),
            Some(hash64(b"bob,carol"))
        );
        assert_eq!(hash(HashOn::UriCapture("id".into()), HashOn::None), Some(hash64(b"7")));
        assert_eq!(hash(HashOn::Path, HashOn::None), Some(hash64(b"/p")));
        let cookie_on = |name: &str| HashOn::Cookie {
            name: name.into(),
            path: "/".into(),
        };
        let present = hash_request(&cookie_on("session"), &HashOn::None, &input).unwrap();
        assert_eq!(
            present,
            Hashed {
                hash: hash64(b"s42"),
                set_cookie: None
            }
        );
        let made = hash_request(&cookie_on("other"), &HashOn::None, &input).unwrap();
        let set = made.set_cookie.expect("a new cookie");
        assert!(set.starts_with("other=") && set.contains("; Path=/;"), "{set}");
    }
}
