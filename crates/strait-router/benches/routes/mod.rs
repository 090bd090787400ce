//! Route sets and requests for the router benches (shared by `router` and
//! `router_memory`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use strait_core::Route;
use strait_router::{HeaderLookup, RequestFacts, Router};
use uuid::Uuid;

/// The route shapes the issue asks for.
#[derive(Debug, Clone, Copy)]
pub enum Scenario {
    /// `paths: ["/svc{i}/api"]`.
    Prefix,
    /// `hosts: ["h{i}.example.com"]`, `paths: ["/api/v{i%10}"]`.
    HostPath,
    /// Prefix routes, every tenth one a regex path `~/re{i}/(?<id>\d+)$`.
    RegexMix,
    /// Like `RegexMix`, but no two regexes share what follows their leading
    /// text (`~/rd{i}/(?<id>\d+)/v{i}$`), so each is compiled on its own.
    RegexDistinct,
    /// `http.host == "e{i}.example.com" && http.path ^= "/p{i%100}" && http.method == "GET"`.
    Expression,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::Prefix,
        Scenario::HostPath,
        Scenario::RegexMix,
        Scenario::RegexDistinct,
        Scenario::Expression,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Prefix => "prefix",
            Scenario::HostPath => "host_path",
            Scenario::RegexMix => "regex_mix",
            Scenario::RegexDistinct => "regex_distinct",
            Scenario::Expression => "expression",
        }
    }

    pub fn route(self, i: usize) -> Route {
        let mut r = base_route(i);
        match self {
            Scenario::Prefix => r.paths = Some(vec![format!("/svc{i}/api")]),
            Scenario::HostPath => {
                r.hosts = Some(vec![format!("h{i}.example.com")]);
                r.paths = Some(vec![format!("/api/v{}", i % 10)]);
            }
            Scenario::RegexMix if i.is_multiple_of(10) => r.paths = Some(vec![format!(r"~/re{i}/(?<id>\d+)$")]),
            Scenario::RegexDistinct if i.is_multiple_of(10) => {
                r.paths = Some(vec![format!(r"~/rd{i}/(?<id>\d+)/v{i}$")])
            }
            Scenario::RegexMix | Scenario::RegexDistinct => r.paths = Some(vec![format!("/svc{i}/api")]),
            Scenario::Expression => {
                r.expression = Some(format!(
                    r#"http.host == "e{i}.example.com" && http.path ^= "/p{}" && http.method == "GET""#,
                    i % 100
                ));
                r.priority = Some((i % 1000) as i64);
            }
        }
        r
    }

    pub fn routes(self, count: usize) -> Vec<Arc<Route>> {
        (0..count).map(|i| Arc::new(self.route(i))).collect()
    }

    /// A request that the route `i` matches.
    pub fn request_for(self, i: usize) -> Request {
        match self {
            Scenario::Prefix => Request::new("any.test", format!("/svc{i}/api/items")),
            Scenario::HostPath => Request::new(&format!("h{i}.example.com"), format!("/api/v{}/items", i % 10)),
            Scenario::RegexMix if i.is_multiple_of(10) => Request::new("any.test", format!("/re{i}/42")),
            Scenario::RegexDistinct if i.is_multiple_of(10) => Request::new("any.test", format!("/rd{i}/42/v{i}")),
            Scenario::RegexMix | Scenario::RegexDistinct => Request::new("any.test", format!("/svc{i}/api/items")),
            Scenario::Expression => Request::new(&format!("e{i}.example.com"), format!("/p{}/items", i % 100)),
        }
    }

    /// A request no route matches (close to the routes, so the index is exercised).
    pub fn miss(self) -> Request {
        match self {
            Scenario::Prefix | Scenario::RegexMix | Scenario::RegexDistinct => {
                Request::new("any.test", "/svc-none/api/items".into())
            }
            Scenario::HostPath => Request::new("h1.example.com", "/web/v1/items".into()),
            Scenario::Expression => Request::new("e1.example.com", "/q1/items".into()),
        }
    }
}

fn base_route(i: usize) -> Route {
    Route::with_kong_defaults(Uuid::from_u128(0x5eed_0000_0000_0000 + i as u128), i as i64)
}

#[derive(Debug, Default)]
pub struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn values(&self, _name: &str) -> Vec<&str> {
        Vec::new()
    }
}

/// An owned request to borrow facts from.
#[derive(Debug, Clone)]
pub struct Request {
    pub host: String,
    pub path: String,
}

impl Request {
    fn new(host: &str, path: String) -> Request {
        Request {
            host: host.to_string(),
            path,
        }
    }

    pub fn facts<'a>(&'a self, headers: &'a NoHeaders) -> RequestFacts<'a> {
        RequestFacts {
            protocol: "http",
            method: "GET",
            host: &self.host,
            port: 8000,
            path: &self.path,
            query: "",
            sni: None,
            headers,
            source: Some(SocketAddr::from(([10, 0, 0, 1], 40000))),
            destination: Some(SocketAddr::from(([127, 0, 0, 1], 8000))),
        }
    }
}

/// Route number `i` of a generated set, from its id.
pub fn index_of(id: Uuid) -> usize {
    id.as_u128().saturating_sub(0x5eed_0000_0000_0000) as usize
}

/// The route numbers of the highest- and lowest-priority routes.
pub fn extremes(router: &Router) -> (usize, usize) {
    let ids = router.ordered_ids();
    let first = ids.first().map_or(0, |id| index_of(*id));
    let last = ids.last().map_or(0, |id| index_of(*id));
    (first, last)
}
