//! Fuzz the expressions parser, then the router on whatever parses: no
//! input may panic or hang. `cargo +nightly fuzz run expression` (see
//! docs/routing.md#fuzzing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use support::exercise;

mod support {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use strait_core::Route;
    use strait_router::{HeaderLookup, RequestFacts, Router};

    #[derive(Debug)]
    struct Headers;

    impl HeaderLookup for Headers {
        fn values(&self, name: &str) -> Vec<&str> {
            match name {
                "x-a" => vec!["1", "Two"],
                "user-agent" => vec!["curl/8"],
                _ => Vec::new(),
            }
        }
    }

    fn route(expression: &str) -> Route {
        let mut route = blank_route();
        route.expression = Some(expression.to_string());
        route.priority = Some(1);
        route
    }

    fn blank_route() -> Route {
        Route {
            protocols: vec!["http".into()],
            ..Route::with_kong_defaults(uuid::Uuid::from_u128(1), 0)
        }
    }

    pub fn exercise(text: &str) {
        if strait_expr::parse(text).is_err() {
            return;
        }
        let Ok(router) = Router::build(&[Arc::new(route(text))]) else {
            return;
        };
        for (host, path, query) in [("a.test", "/a/b/c", "x=1&x=%41"), ("B.Test", "/", ""), ("", "", "&&=")] {
            let facts = RequestFacts {
                protocol: "https",
                method: "GET",
                host,
                port: 443,
                path,
                query,
                sni: Some("a.test"),
                headers: &Headers,
                source: Some(SocketAddr::from(([10, 0, 0, 1], 1234))),
                destination: Some(SocketAddr::from(([127, 0, 0, 1], 8443))),
            };
            let _ = router.find(&facts);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        exercise(text);
    }
});
