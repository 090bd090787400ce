//! Snapshot swaps are atomic: configs posted while clients send requests cause no failed request.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use strait_e2e::declarative::{answering, config, route, service};
use strait_e2e::{get, within, Conn, Gateway, GatewayOptions, Upstream, UpstreamKind};

/// Generation `n`: `/live` always proxies to the upstream; `/gen` answers `gen{n}`; the number of
/// extra routes varies so every swap really changes the router.
fn generation(upstream_url: &str, n: usize) -> Value {
    let mut routes = vec![
        route("live", &["/live"]),
        answering(route("gen", &["/gen"]), &format!("gen{n}")),
    ];
    for i in 0..(n % 7) * 5 {
        routes.push(answering(
            route(&format!("extra{i}"), &[&format!("/extra{i}")]),
            "extra",
        ));
    }
    config(vec![service("live", upstream_url, routes)])
}

/// The body is the upstream's echo (and not, say, an error page with status 200).
fn is_echo(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|value| value["path"].is_string())
}

#[derive(Clone, Copy, Debug)]
enum ClientKind {
    KeepAlive,
    H2c,
    ConnectionPerRequest,
}

async fn client_loop(
    kind: ClientKind,
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
) {
    let connect = || async {
        match kind {
            ClientKind::H2c => Conn::h2c(addr).await,
            _ => Conn::h1(addr).await,
        }
    };
    let mut conn = connect().await.expect("connect");
    let mut i = 0usize;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        if matches!(kind, ClientKind::ConnectionPerRequest) {
            conn = connect().await.expect("connect");
        }
        match conn.send(get(&format!("/live/echo?client={kind:?}&i={i}"))).await {
            Ok(reply) if reply.status == 200 && is_echo(&reply.body) => {
                ok.fetch_add(1, Ordering::SeqCst);
            }
            Ok(reply) => failures
                .lock()
                .unwrap()
                .push(format!("{kind:?} #{i}: {} {}", reply.status, reply.text())),
            Err(e) => {
                failures.lock().unwrap().push(format!("{kind:?} #{i}: {e:#}"));
                conn = connect().await.expect("reconnect");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_swaps_under_load_fail_no_request() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&generation(&up.url("http"), 0)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let kinds = [
        ClientKind::KeepAlive,
        ClientKind::KeepAlive,
        ClientKind::H2c,
        ClientKind::ConnectionPerRequest,
    ];
    let clients: Vec<_> = kinds
        .iter()
        .map(|kind| {
            tokio::spawn(client_loop(
                *kind,
                gw.proxy_addr(),
                stop.clone(),
                ok.clone(),
                failures.clone(),
            ))
        })
        .collect();

    within(Duration::from_secs(60), "posting 20 configs", async {
        for n in 1..=20 {
            let body = generation(&up.url("http"), n).to_string().into_bytes();
            let reply = gw.post_config_as("/config", "application/json", body).await;
            assert_eq!(reply.status, 201, "generation {n}: {}", reply.text());
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        within(Duration::from_secs(20), "client loop to stop", client)
            .await
            .expect("client task");
    }

    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failed requests, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let ok = ok.load(Ordering::SeqCst);
    assert!(ok >= 40, "only {ok} requests completed in ~3 s");
    let proxy = gw.proxy_addr();
    strait_e2e::eventually(Duration::from_secs(5), "last generation served", || async move {
        let reply = strait_e2e::send_h1(proxy, get("/gen")).await?;
        anyhow::ensure!(reply.message().as_deref() == Some("gen20"), "served {}", reply.text());
        Ok(())
    })
    .await;
}
