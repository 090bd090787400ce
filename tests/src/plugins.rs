//! What the plugin tests share: a gateway in front of an echo upstream.

use serde_json::{json, Value};

use crate::upstream::{Upstream, UpstreamKind};
use crate::{Gateway, GatewayOptions, Reply};

/// Stands for the echo upstream's URL in configs given to [`gateway_with_echo`].
pub const UPSTREAM: &str = "UPSTREAM";

/// Starts an HTTP/1.1 echo upstream and a gateway serving `config` (every
/// `UPSTREAM` in it replaced by the upstream's URL), live when this returns.
pub async fn gateway_with_echo(config: &Value) -> (Gateway, Upstream) {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let text = config.to_string().replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&text).expect("config")).await;
    (gw, upstream)
}

/// One service `echo` (at [`UPSTREAM`]) with `routes`, and `consumers`.
pub fn echo_service(routes: Value, consumers: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "consumers": consumers,
        "services": [{ "name": "echo", "url": UPSTREAM, "routes": routes }]
    })
}

/// The request headers the echo upstream received.
pub fn echo_headers(reply: &Reply) -> Value {
    reply.json()["headers"].clone()
}
