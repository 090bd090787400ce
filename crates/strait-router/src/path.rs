//! The path sent upstream: Kong's `strip_path` and `path_handling` rules.

/// Join the service path and what remains of the request path.
///
/// `matched` is the part of the request path the route matched; with
/// `strip_path` it is removed before joining. `v0` drops one slash when the
/// service path ends with `/` and the remainder starts with one; `v1` joins
/// the two as they are (so `/s/` + `/req` gives `/s//req`), as Kong documents
/// for `path_handling`.
pub fn upstream_path(
    service_path: Option<&str>,
    request_path: &str,
    matched: Option<&str>,
    strip_path: bool,
    path_handling: &str,
) -> String {
    let remainder = match (strip_path, matched) {
        (true, Some(m)) => request_path.strip_prefix(m).unwrap_or(request_path),
        _ => request_path,
    };
    let service_path = service_path.unwrap_or("/");
    if remainder.is_empty() {
        return service_path.to_string();
    }
    if service_path == "/" {
        return if remainder.starts_with('/') {
            remainder.to_string()
        } else {
            format!("/{remainder}")
        };
    }
    let service_slash = service_path.ends_with('/');
    let remainder_slash = remainder.starts_with('/');
    match (path_handling, service_slash, remainder_slash) {
        ("v0", true, true) => format!("{service_path}{}", &remainder[1..]),
        _ => format!("{service_path}{remainder}"),
    }
}
