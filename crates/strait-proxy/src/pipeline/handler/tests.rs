use super::hop_by_hop::{hop_index, strip_hop_by_hop_keeping, HOP_BY_HOP};
use super::*;
use crate::pipeline::forward::keeps_path;
use strait_router::upstream_path;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_static(value));
    }
    map
}

#[test]
fn a_path_kept_as_it_is_is_the_path_upstream_path_gives() {
    let paths = ["/", "/a", "/a/", "/a/b", "//x", "/a//b", "/%2F"];
    let matched = [None, Some(""), Some("/"), Some("/a"), Some("/a/")];
    let services = [None, Some("/"), Some("/s"), Some("/s/")];
    let mut kept = 0;
    for path in paths {
        for m in matched {
            for service in services {
                for strip in [false, true] {
                    for handling in ["v0", "v1"] {
                        if keeps_path(service, path, m, strip) {
                            kept += 1;
                            assert_eq!(
                                upstream_path(service, path, m, strip, handling),
                                path,
                                "service {service:?}, matched {m:?}, strip {strip}, {handling}"
                            );
                        }
                    }
                }
            }
        }
    }
    // Most requests take the short way: no service path, nothing stripped.
    assert!(kept >= 60, "{kept}");
    assert!(!keeps_path(None, "//x", Some("/"), true));
    assert!(!keeps_path(Some("/s"), "/a", None, false));
}

#[test]
fn headers_a_connection_header_names_are_hop_by_hop() {
    let mut map = headers(&[
        ("connection", "Keep-Alive, X-Secret , ,bad name"),
        ("x-secret", "1"),
        ("keep-alive", "timeout=5"),
        ("upgrade", "h2c"),
        ("te", "gzip, Trailers"),
        ("x-end-to-end", "kept"),
    ]);
    strip_hop_by_hop(&mut map);
    let left: Vec<(&str, &str)> = map
        .iter()
        .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
        .collect();
    assert_eq!(left, [("x-end-to-end", "kept"), ("te", "trailers")]);
}

#[test]
fn hop_index_is_the_position_in_the_list() {
    for (at, name) in HOP_BY_HOP.iter().enumerate() {
        assert_eq!(hop_index(name), Some(at), "{name}");
        let spelled = HeaderName::from_bytes(name.as_str().to_uppercase().as_bytes()).unwrap();
        assert_eq!(hop_index(&spelled), Some(at), "{spelled}");
    }
    assert_eq!(hop_index(&header::HOST), None);
    assert_eq!(hop_index(&HeaderName::from_static("keep-alive-x")), None);
}

#[test]
fn a_response_keeps_no_te_and_drops_only_the_hop_fields_it_has() {
    let mut map = headers(&[("te", "trailers"), ("content-type", "text/plain")]);
    strip_hop_by_hop_keeping(&mut map, false);
    assert!(!map.contains_key("te"));
    let mut map = headers(&[
        ("connection", "keep-alive"),
        ("server", "origin"),
        ("content-length", "2"),
    ]);
    strip_hop_by_hop_keeping(&mut map, false);
    let mut left: Vec<&str> = map.keys().map(|name| name.as_str()).collect();
    left.sort();
    assert_eq!(left, ["content-length", "server"]);
}

#[test]
fn only_te_trailers_is_kept_as_it_is_and_other_te_values_are_cut_to_it() {
    let mut map = headers(&[("te", "trailers"), ("content-type", "application/grpc")]);
    strip_hop_by_hop(&mut map);
    assert_eq!(map.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);
    assert_eq!(map.len(), 2);
    for extra in [("te", "gzip"), ("proxy-connection", "keep-alive")] {
        let mut map = headers(&[("te", "trailers"), extra]);
        strip_hop_by_hop(&mut map);
        assert_eq!(map.get_all("te").iter().collect::<Vec<_>>(), ["trailers"], "{extra:?}");
        assert_eq!(map.len(), 1, "{extra:?}");
    }
    let mut map = headers(&[("te", "Trailers, deflate")]);
    strip_hop_by_hop(&mut map);
    assert_eq!(map.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);
}

#[test]
fn two_lengths_or_length_beside_chunked_are_ambiguous() {
    assert_eq!(ambiguous_framing(&headers(&[("content-length", "3")])), None);
    assert_eq!(ambiguous_framing(&headers(&[("transfer-encoding", "chunked")])), None);
    assert!(ambiguous_framing(&headers(&[("content-length", "3"), ("content-length", "3")])).is_some());
    assert!(ambiguous_framing(&headers(&[("content-length", "3"), ("transfer-encoding", "chunked")])).is_some());
}
