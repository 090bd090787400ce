//! Reading `hmac username="...", algorithm="...", headers="...",
//! signature="..."` exactly as Kong's regex does:
//!
//! ```text
//! \s*[Hh]mac\s*username="(.+)",\s*algorithm="(.+)",\s*headers="(.+)",\s*signature="(.+)"
//! ```
//!
//! The regex is unanchored and its groups are greedy, so each value runs
//! to the *last* separator that still lets the rest match. Backtracking
//! would cost up to cubic time on a hostile header; here each separator is
//! found once, from the right (see [`parse`]).

/// The parameters of an `hmac` authorization header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HmacParams {
    pub username: String,
    pub algorithm: String,
    /// The names listed in `headers="..."`, split on single spaces.
    pub headers: Vec<String>,
    pub signature: String,
}

/// PCRE's `\s`.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Where the separator `",\s*<name>="` starting at `at` ends, if it is one.
fn separator_end(bytes: &[u8], at: usize, name: &[u8]) -> Option<usize> {
    let rest = bytes.get(at..)?.strip_prefix(b"\",")?;
    let spaces = rest.iter().take_while(|b| is_space(**b)).count();
    let after_spaces = at + 2 + spaces;
    let rest = bytes[after_spaces..].strip_prefix(name)?.strip_prefix(b"=\"")?;
    Some(bytes.len() - rest.len())
}

/// The last separator `",\s*<name>="` whose end is at most `limit`:
/// its start and end.
fn last_separator(bytes: &[u8], name: &[u8], limit: usize) -> Option<(usize, usize)> {
    (0..bytes.len()).rev().find_map(|at| {
        separator_end(bytes, at, name)
            .filter(|end| *end <= limit)
            .map(|end| (at, end))
    })
}

/// Kong's match of `value`, or `None` when the regex does not match.
///
/// Matching from the right: the signature runs to the last `"`, which
/// must leave it one byte at least; the headers group ends at the last
/// `", signature="` that leaves room for that, and so on. A group may
/// start anywhere before its end, so these ends do not depend on where the
/// earlier groups start, and the leftmost `hmac ... username="` that starts
/// before the username's end is the match.
pub(crate) fn parse(value: &str) -> Option<HmacParams> {
    let bytes = value.as_bytes();
    let last_quote = bytes.iter().rposition(|b| *b == b'"')?;
    // Each group needs one byte at least: a group ending at `end` must start before it.
    let (signature_at, signature_start) = last_separator(bytes, b"signature", last_quote.checked_sub(1)?)?;
    let (headers_at, headers_start) = last_separator(bytes, b"headers", signature_at.checked_sub(1)?)?;
    let (algorithm_at, algorithm_start) = last_separator(bytes, b"algorithm", headers_at.checked_sub(1)?)?;
    let username_limit = algorithm_at.checked_sub(1)?;
    let username_start = (0..bytes.len()).find_map(|at| {
        let end = username_prefix_end(bytes, at)?;
        (end <= username_limit).then_some(end)
    })?;
    let text = |from: usize, to: usize| String::from_utf8_lossy(&bytes[from..to]).into_owned();
    Some(HmacParams {
        username: text(username_start, algorithm_at),
        algorithm: text(algorithm_start, headers_at),
        headers: text(headers_start, signature_at)
            .split(' ')
            .map(str::to_string)
            .collect(),
        signature: text(signature_start, last_quote),
    })
}

/// Where `[Hh]mac\s*username="` starting at `at` ends.
fn username_prefix_end(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at..)?;
    if !matches!(rest.first(), Some(b'H' | b'h')) {
        return None;
    }
    let rest = rest[1..].strip_prefix(b"mac")?;
    let spaces = rest.iter().take_while(|b| is_space(**b)).count();
    let rest = rest[spaces..].strip_prefix(b"username=\"")?;
    Some(bytes.len() - rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(username: &str, algorithm: &str, headers: &[&str], signature: &str) -> Option<HmacParams> {
        Some(HmacParams {
            username: username.into(),
            algorithm: algorithm.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            signature: signature.into(),
        })
    }

    #[test]
    fn reads_the_usual_form() {
        let value = r#"hmac username="bob", algorithm="hmac-sha256", headers="date request-line", signature="c2ln""#;
        assert_eq!(
            parse(value),
            params("bob", "hmac-sha256", &["date", "request-line"], "c2ln")
        );
        let value = r#"  Hmac username="bob",algorithm="hmac-sha1",	headers="x-date",signature="s""#;
        assert_eq!(parse(value), params("bob", "hmac-sha1", &["x-date"], "s"));
        let value = r#"hmacusername="bob", algorithm="a", headers="h", signature="s""#;
        assert_eq!(parse(value), params("bob", "a", &["h"], "s"));
    }

    #[test]
    fn groups_are_greedy_like_the_regex() {
        // The signature runs to the last quote.
        let value = r#"hmac username="bob", algorithm="a", headers="h", signature="s", extra="x""#;
        assert_eq!(parse(value), params("bob", "a", &["h"], r#"s", extra="x"#));
        // A username may contain what looks like a separator.
        let value = r#"hmac username="a", algorithm="b", algorithm="c", headers="h", signature="s""#;
        assert_eq!(parse(value), params(r#"a", algorithm="b"#, "c", &["h"], "s"));
        // Consecutive spaces in headers give empty names, as Kong's splitn does.
        let value = r#"hmac username="u", algorithm="a", headers="date  host", signature="s""#;
        assert_eq!(parse(value), params("u", "a", &["date", "", "host"], "s"));
        // Leading text is skipped: the regex is not anchored.
        let value = r#"Signature hmac username="u", algorithm="a", headers="h", signature="s""#;
        assert_eq!(parse(value).map(|p| p.username), Some("u".into()));
    }

    #[test]
    fn refuses_what_the_regex_refuses() {
        for value in [
            "",
            "hmac",
            r#"HMAC username="u", algorithm="a", headers="h", signature="s""#,
            r#"hmac username="", algorithm="a", headers="h", signature="s""#,
            r#"hmac username="u", algorithm="a", headers="h", signature="""#,
            r#"hmac username="u", headers="h", algorithm="a", signature="s""#,
            r#"hmac username="u", algorithm="a", headers="h", signature="s"#,
            r#"Basic dXNlcjpwYXNz"#,
        ] {
            assert_eq!(parse(value), None, "{value}");
        }
    }

    /// Compares with the regex itself (the `regex` crate's leftmost-first
    /// greedy matching is PCRE's for this pattern) on generated headers.
    #[test]
    fn agrees_with_the_regex_on_generated_headers() {
        let regex = regex::Regex::new(
            r#"(?-u:\s)*[Hh]mac(?-u:\s)*username="(.+)",(?-u:\s)*algorithm="(.+)",(?-u:\s)*headers="(.+)",(?-u:\s)*signature="(.+)""#,
        )
        .expect("regex");
        let pieces = [
            "hmac ",
            "Hmac",
            "username=\"",
            "algorithm=\"",
            "headers=\"",
            "signature=\"",
            "\",",
            "\", ",
            "\"",
            " ",
            "\t",
            "a",
            "b c",
            "=",
            ",",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |below: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % below
        };
        let mut matched = 0;
        for _ in 0..20_000 {
            // The pattern's own skeleton, groups of 0 to 3 random pieces,
            // and now and then a skeleton part replaced by a random piece.
            let skeleton = [
                "hmac",
                " ",
                "username=\"",
                "",
                "\", ",
                "algorithm=\"",
                "",
                "\",",
                "headers=\"",
                "",
                "\",\t",
                "signature=\"",
                "",
                "\"",
                "",
            ];
            let mut value = String::new();
            for part in skeleton {
                if part.is_empty() || next(12) == 0 {
                    for _ in 0..next(4) {
                        value.push_str(pieces[next(pieces.len())]);
                    }
                } else {
                    value.push_str(part);
                }
            }
            let expected = regex.captures(&value).map(|c| {
                let group = |i: usize| c.get(i).expect("group").as_str().to_string();
                HmacParams {
                    username: group(1),
                    algorithm: group(2),
                    headers: group(3).split(' ').map(str::to_string).collect(),
                    signature: group(4),
                }
            });
            matched += usize::from(expected.is_some());
            assert_eq!(parse(&value), expected, "{value:?}");
        }
        assert!(matched > 1000, "only {matched} generated headers matched");
    }

    #[test]
    fn hostile_headers_take_linear_time() {
        let value = format!(
            "hmac username=\"{}",
            "\", algorithm=\"\", headers=\"\", signature=\"".repeat(2000)
        );
        let started = std::time::Instant::now();
        let _ = parse(&value);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
