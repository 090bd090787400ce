//! Kong's `headers` / `headers_upstream` settings (kong.conf): which of
//! Kong's informational headers a node sends.
//!
//! - `headers` (default `server_tokens, latency_tokens, X-Kong-Request-Id`):
//!   `server_tokens` is `Server` and `Via`; `latency_tokens` is
//!   `X-Kong-Proxy-Latency`, `X-Kong-Upstream-Latency`,
//!   `X-Kong-Response-Latency` and `X-Kong-Admin-Latency`; each of those and
//!   `X-Kong-Upstream-Status` and `X-Kong-Request-Id` may be named alone.
//! - `headers_upstream` (default `X-Kong-Request-Id`): only that header.
//!
//! As Kong parses them: entries split on commas and trimmed, names and the
//! two tokens case-insensitive, `off` (lower case) as the first entry turns
//! every header off and elsewhere is ignored, and any other entry is an error.

/// Which of Kong's headers a node sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSwitches {
    pub server: bool,
    pub via: bool,
    pub proxy_latency: bool,
    pub upstream_latency: bool,
    pub response_latency: bool,
    pub admin_latency: bool,
    pub upstream_status: bool,
    pub request_id: bool,
    /// `headers_upstream`: send `X-Kong-Request-Id` to the upstream.
    pub upstream_request_id: bool,
}

/// Kong's defaults for `headers` and `headers_upstream`.
pub const DEFAULT_HEADERS: &str = "server_tokens, latency_tokens, X-Kong-Request-Id";
pub const DEFAULT_HEADERS_UPSTREAM: &str = "X-Kong-Request-Id";

impl Default for HeaderSwitches {
    fn default() -> HeaderSwitches {
        HeaderSwitches::parse(DEFAULT_HEADERS, DEFAULT_HEADERS_UPSTREAM).expect("the defaults parse")
    }
}

/// The entries of a list setting as Kong splits them, and whether they are
/// on: `off` as the first entry turns the rest off, elsewhere it is skipped.
fn entries(value: &str) -> (impl Iterator<Item = &str>, bool) {
    let mut entries = value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .peekable();
    let on = entries.peek() != Some(&"off");
    (entries.filter(|entry| *entry != "off"), on)
}

impl HeaderSwitches {
    /// Parse the two settings; the error names the setting and the entry.
    pub fn parse(headers: &str, headers_upstream: &str) -> Result<HeaderSwitches, String> {
        let mut switches = HeaderSwitches {
            server: false,
            via: false,
            proxy_latency: false,
            upstream_latency: false,
            response_latency: false,
            admin_latency: false,
            upstream_status: false,
            request_id: false,
            upstream_request_id: false,
        };
        let (names, on) = entries(headers);
        for entry in names {
            if !switches.set(&entry.to_ascii_lowercase(), on) {
                return Err(format!("headers: invalid entry '{entry}'"));
            }
        }
        let (names, on) = entries(headers_upstream);
        for entry in names {
            if !entry.eq_ignore_ascii_case("x-kong-request-id") {
                return Err(format!("headers_upstream: invalid entry '{entry}'"));
            }
            switches.upstream_request_id = on;
        }
        Ok(switches)
    }

    /// Turn on what `entry` (lower case) names when `on`; whether it names anything.
    fn set(&mut self, entry: &str, on: bool) -> bool {
        let fields: &mut [&mut bool] = match entry {
            "server_tokens" => &mut [&mut self.server, &mut self.via],
            "latency_tokens" => &mut [
                &mut self.proxy_latency,
                &mut self.upstream_latency,
                &mut self.response_latency,
                &mut self.admin_latency,
            ],
            "server" => &mut [&mut self.server],
            "via" => &mut [&mut self.via],
            "x-kong-proxy-latency" => &mut [&mut self.proxy_latency],
            "x-kong-upstream-latency" => &mut [&mut self.upstream_latency],
            "x-kong-response-latency" => &mut [&mut self.response_latency],
            "x-kong-admin-latency" => &mut [&mut self.admin_latency],
            "x-kong-upstream-status" => &mut [&mut self.upstream_status],
            "x-kong-request-id" => &mut [&mut self.request_id],
            _ => return false,
        };
        if on {
            for field in fields {
                **field = true;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kongs() {
        let on = HeaderSwitches::default();
        assert!(on.server && on.via && on.proxy_latency && on.upstream_latency);
        assert!(on.response_latency && on.admin_latency && on.request_id && on.upstream_request_id);
        assert!(!on.upstream_status, "X-Kong-Upstream-Status is in neither token");
    }

    #[test]
    fn entries_are_case_insensitive_and_off_counts_only_first() {
        let some = HeaderSwitches::parse("serVer_TokEns, x-kOng-pRoXy-lAtency", "off").unwrap();
        assert!(some.server && some.via && some.proxy_latency);
        assert!(!some.upstream_latency && !some.request_id && !some.upstream_request_id);
        let off = HeaderSwitches::parse("off, server_tokens", "off").unwrap();
        assert_eq!(off, HeaderSwitches::parse("", "").unwrap());
        assert!(!off.server && !off.request_id);
        let later = HeaderSwitches::parse("server_tokens, off, X-Kong-Upstream-Status", "X-Kong-Request-Id").unwrap();
        assert!(later.server && later.upstream_status && later.upstream_request_id);
    }

    #[test]
    fn unknown_entries_are_refused_by_name() {
        assert_eq!(
            HeaderSwitches::parse("server_tokens, Foo-Bar", DEFAULT_HEADERS_UPSTREAM),
            Err("headers: invalid entry 'Foo-Bar'".to_string())
        );
        assert_eq!(
            HeaderSwitches::parse(DEFAULT_HEADERS, "Via"),
            Err("headers_upstream: invalid entry 'Via'".to_string())
        );
        assert!(
            HeaderSwitches::parse("OFF", "").is_err(),
            "only lower-case off, as Kong"
        );
    }
}
