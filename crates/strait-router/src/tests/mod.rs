//! Router tests: unit tests per route style, incremental updates, and the
//! property tests that compare the index with a naive linear reference.

mod analysis;
mod expressions;
mod incremental;
mod properties;
mod reference;
mod traditional;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use strait_core::Route;
use uuid::Uuid;

use crate::{HeaderLookup, RequestFacts, Router};

#[derive(Debug, Default, Clone)]
pub(crate) struct Headers(pub BTreeMap<String, Vec<String>>);

impl Headers {
    pub(crate) fn with(mut self, name: &str, value: &str) -> Headers {
        self.0.entry(name.to_string()).or_default().push(value.to_string());
        self
    }
}

impl HeaderLookup for Headers {
    fn values(&self, name: &str) -> Vec<&str> {
        self.0
            .get(name)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

pub(crate) fn route(name: &str, created_at: i64) -> Route {
    Route {
        name: Some(name.to_string()),
        ..Route::with_kong_defaults(Uuid::new_v4(), created_at)
    }
}

pub(crate) fn with_paths(mut r: Route, paths: &[&str]) -> Route {
    r.paths = Some(paths.iter().map(|p| p.to_string()).collect());
    r
}

pub(crate) fn with_hosts(mut r: Route, hosts: &[&str]) -> Route {
    r.hosts = Some(hosts.iter().map(|p| p.to_string()).collect());
    r
}

pub(crate) fn expression(name: &str, expr: &str, priority: i64) -> Route {
    let mut r = route(name, 0);
    r.expression = Some(expr.to_string());
    r.priority = Some(priority);
    r
}

/// A request to build facts from.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub protocol: &'static str,
    pub method: String,
    pub host: String,
    pub port: u16,
    pub path: String,
    pub query: String,
    pub sni: Option<String>,
    pub headers: Headers,
    pub source: Option<SocketAddr>,
    pub destination: Option<SocketAddr>,
}

impl Req {
    pub(crate) fn get(host: &str, path: &str) -> Req {
        Req {
            protocol: "http",
            method: "GET".into(),
            host: host.into(),
            port: 8000,
            path: path.into(),
            query: String::new(),
            sni: None,
            headers: Headers::default(),
            source: Some(SocketAddr::from(([10, 0, 0, 1], 40000))),
            destination: Some(SocketAddr::from(([127, 0, 0, 1], 8000))),
        }
    }

    pub(crate) fn facts(&self) -> RequestFacts<'_> {
        RequestFacts {
            protocol: self.protocol,
            method: &self.method,
            host: &self.host,
            port: self.port,
            path: &self.path,
            query: &self.query,
            sni: self.sni.as_deref(),
            headers: &self.headers,
            source: self.source,
            destination: self.destination,
        }
    }

    pub(crate) fn name_in(&self, router: &Router) -> Option<String> {
        router.find(&self.facts()).and_then(|m| m.route.name.clone())
    }
}

pub(crate) fn build(routes: Vec<Route>) -> Router {
    match Router::build(&routes.into_iter().map(Arc::new).collect::<Vec<_>>()) {
        Ok(router) => router,
        Err(err) => panic!("routes compile: {err}"),
    }
}
