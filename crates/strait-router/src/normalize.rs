//! The request path as routes see it: Kong's normalization before routing,
//! so `/%61dmin`, `//admin`, `/a/../admin` and `/x/%2e%2e/admin` all meet the
//! rules of `/admin` instead of slipping past them to a broader route.
//!
//! 1. Percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`) are
//!    decoded; every other escape keeps its meaning and gets upper-case hex
//!    (`%2f` -> `%2F`: an encoded slash never becomes a separator).
//! 2. Runs of `/` become one.
//! 3. Dot segments are removed as RFC 3986 §5.2.4 says.
//!
//! Invalid paths (400), as nginx refuses them before Kong's router runs: a
//! `%` not followed by two hex digits, `%00`, and a `..` that would climb
//! above the root (`/../x`, `/a/%2e%2e/../x`).
//!
//! Kong also decodes escapes of characters that are neither reserved nor
//! unreserved (`%20`, UTF-8 bytes) for matching, then re-escapes them for
//! the upstream; keeping them escaped gives the upstream the same path.

use std::borrow::Cow;

/// A path with a malformed percent-escape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPath;

/// The normalized form of `raw` (an origin-form path, without the query).
/// Borrows when nothing changes, which is the common case.
pub fn normalize_path(raw: &str) -> Result<Cow<'_, str>, InvalidPath> {
    if is_normal(raw.as_bytes()) {
        return Ok(Cow::Borrowed(raw));
    }
    let decoded = decode_unreserved(raw.as_bytes())?;
    remove_dot_segments(&decoded).map(Cow::Owned)
}

/// True when no step would change `path`: no escape, no raw non-ASCII byte,
/// no empty segment, no segment that starts with a dot.
fn is_normal(path: &[u8]) -> bool {
    let mut previous = 0u8;
    for &byte in path {
        match byte {
            b'%' | 0x80.. => return false,
            b'/' if previous == b'/' => return false,
            b'.' if previous == b'/' => return false,
            _ => {}
        }
        previous = byte;
    }
    true
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

fn decode_unreserved(path: &[u8]) -> Result<String, InvalidPath> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(path.len());
    let mut at = 0;
    while at < path.len() {
        let byte = path[at];
        if byte >= 0x80 {
            // Raw non-ASCII bytes: their escaped form, so the result is ASCII.
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xF)]));
            at += 1;
            continue;
        }
        if byte != b'%' {
            out.push(char::from(byte));
            at += 1;
            continue;
        }
        let high = path.get(at + 1).copied().and_then(hex_value).ok_or(InvalidPath)?;
        let low = path.get(at + 2).copied().and_then(hex_value).ok_or(InvalidPath)?;
        let value = high << 4 | low;
        if value == 0 {
            return Err(InvalidPath);
        }
        if is_unreserved(value) {
            out.push(char::from(value));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(high)]));
            out.push(char::from(HEX[usize::from(low)]));
        }
        at += 3;
    }
    Ok(out)
}

/// Merges slashes and removes `.` and `..` segments. A trailing `/`, `/.`
/// or `/..` leaves a trailing slash, as RFC 3986's algorithm does; a `..`
/// with no segment left to remove is invalid.
fn remove_dot_segments(path: &str) -> Result<String, InvalidPath> {
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in path.split('/') {
        trailing_slash = false;
        match segment {
            "" => trailing_slash = true,
            "." => trailing_slash = true,
            ".." => {
                segments.pop().ok_or(InvalidPath)?;
                trailing_slash = true;
            }
            other => segments.push(other),
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || segments.is_empty() {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(raw: &str) -> String {
        normalize_path(raw).expect("valid").into_owned()
    }

    #[test]
    fn bypass_attempts_normalize_to_the_path_they_name() {
        for raw in [
            "/admin",
            "/%61dmin",
            "//admin",
            "/a/../admin",
            "/x/%2e%2e/admin",
            "/x/%2E%2E/admin",
            "/./admin",
            "///a/./b/../../admin",
        ] {
            assert_eq!(normal(raw), "/admin", "{raw}");
        }
        assert_eq!(normal("/admin%2e%2e/"), "/admin../");
        assert_eq!(normal("/admin/"), "/admin/");
        assert_eq!(normal("/admin/."), "/admin/");
        assert_eq!(normal("/admin/x/.."), "/admin/");
    }

    #[test]
    fn reserved_escapes_stay_encoded_with_upper_case_hex() {
        assert_eq!(normal("/a%2fb"), "/a%2Fb");
        assert_eq!(normal("/a%2F..%2Fb"), "/a%2F..%2Fb");
        assert_eq!(normal("/%7e%5F%2D"), "/~_-");
        assert_eq!(normal("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(normal("/q%3F"), "/q%3F");
        assert_eq!(normal("/caf\u{e9}"), "/caf%C3%A9");
    }

    #[test]
    fn unchanged_paths_are_borrowed() {
        for raw in ["/", "/a/b.c/d", "/a.", "/v1/x~y_z-", "/a/.well-known/x"] {
            let out = normalize_path(raw).expect("valid");
            let borrowed = matches!(out, Cow::Borrowed(_));
            assert_eq!(borrowed, !raw.contains("/."), "{raw}");
        }
        assert_eq!(normal("/a/.well-known/x"), "/a/.well-known/x");
        assert_eq!(normal("/"), "/");
    }

    #[test]
    fn malformed_escapes_are_invalid() {
        for raw in [
            "/%",
            "/%2",
            "/%zz",
            "/a%g0",
            "/%2%20",
            "/a%00b",
            "/../admin",
            "/a/../../admin",
            "/a/%2e%2e/%2E./x",
            "/..",
        ] {
            assert_eq!(normalize_path(raw), Err(InvalidPath), "{raw}");
        }
    }

    proptest::proptest! {
        /// Normal form is a fixed point, and holds no empty or dot segment.
        #[test]
        fn normalizing_twice_changes_nothing(raw in "/[a-c./%2eEfF]{0,24}") {
            if let Ok(once) = normalize_path(&raw) {
                let twice = normalize_path(&once).expect("normal form is valid");
                proptest::prop_assert_eq!(&twice, &once);
                proptest::prop_assert!(!once.contains("//"), "{once}");
                proptest::prop_assert!(!once.contains("/./") && !once.contains("/../"), "{once}");
                proptest::prop_assert!(once.starts_with('/'));
            }
        }
    }
}
