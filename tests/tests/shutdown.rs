//! Signals: SIGQUIT (`strait quit`) stops accepting, lets in-flight requests finish (bounded
//! by graceful_shutdown_timeout), doesn't wait long for idle keep-alive connections, and exits
//! 0; SIGTERM and SIGINT (`strait stop`) close connections at once and exit 0.

use std::time::{Duration, Instant};

use serde_json::json;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{get, send_h1, within, Conn, Gateway, GatewayOptions, Upstream, UpstreamKind};

async fn gateway_to(up: &Upstream, options: GatewayOptions) -> Gateway {
    let gw = Gateway::start(options).await;
    let mut svc = service("s", &up.url("http"), vec![route("s", &["/s"])]);
    svc["read_timeout"] = json!(60_000);
    gw.apply(&config(vec![svc])).await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigquit_drains_in_flight_and_exits_0() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut gw = gateway_to(&up, GatewayOptions::new()).await;
    let proxy = gw.proxy_addr();
    let in_flight = tokio::spawn(async move { send_h1(proxy, get("/s/slow?ms=1500")).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(up.hits(), 1, "the slow request reached the upstream before the signal");
    gw.quit();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let fresh = tokio::time::timeout(Duration::from_secs(3), async {
        let mut conn = Conn::h1(proxy).await?;
        conn.send(get("/s/echo")).await
    })
    .await;
    if let Ok(Ok(reply)) = fresh {
        panic!(
            "a new connection was served during shutdown: {} {}",
            reply.status,
            reply.text()
        );
    }

    let reply = within(Duration::from_secs(10), "in-flight request", in_flight)
        .await
        .expect("task");
    let reply = reply.expect("the in-flight request completes");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["path"], "/slow?ms=1500");
    let status = gw.wait_exit(Duration::from_secs(10)).await.expect("exited");
    assert_eq!(status.code(), Some(0), "{}", gw.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_exits_0() {
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    gw.interrupt();
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("exited after SIGINT");
    assert_eq!(status.code(), Some(0), "{}", gw.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_bounds_a_hung_request() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut gw = gateway_to(&up, GatewayOptions::new().setting("graceful_shutdown_timeout", "1s")).await;
    let proxy = gw.proxy_addr();
    let hung = tokio::spawn(async move { send_h1(proxy, get("/s/hang")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    gw.quit();
    let status = gw
        .wait_exit(Duration::from_secs(6))
        .await
        .expect("exit within the shutdown timeout");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", gw.log_tail());
    assert!(
        took >= Duration::from_millis(700),
        "exited after {took:?}, before the 1s grace period"
    );
    assert!(took < Duration::from_secs(4), "exited only after {took:?}");
    let result = within(Duration::from_secs(5), "hung client to be released", hung)
        .await
        .expect("task");
    if let Ok(reply) = result {
        assert_ne!(reply.status, 200, "a hung upstream cannot have produced a 200");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keepalive_connections_do_not_delay_exit() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut gw = gateway_to(&up, GatewayOptions::new()).await;
    let mut h1 = Conn::h1(gw.proxy_addr()).await.expect("connect");
    assert_eq!(h1.send(get("/s/echo")).await.expect("h1").status, 200);
    let mut h2 = Conn::h2c(gw.proxy_addr()).await.expect("connect");
    assert_eq!(h2.send(get("/s/echo")).await.expect("h2c").status, 200);
    let started = Instant::now();
    gw.quit();
    let status = gw.wait_exit(Duration::from_secs(8)).await.expect("exited");
    assert_eq!(status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "idle connections held shutdown for {:?}",
        started.elapsed()
    );
    drop((h1, h2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_now_without_waiting_for_requests_in_flight() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut gw = gateway_to(&up, GatewayOptions::new()).await;
    let proxy = gw.proxy_addr();
    let in_flight = tokio::spawn(async move { send_h1(proxy, get("/s/slow?ms=5000")).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(up.hits(), 1, "the slow request reached the upstream before the signal");
    let started = Instant::now();
    gw.terminate();
    let status = gw.wait_exit(Duration::from_secs(4)).await.expect("exited at once");
    assert_eq!(status.code(), Some(0), "{}", gw.log_tail());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let reply = within(Duration::from_secs(3), "the cut request", in_flight)
        .await
        .expect("task");
    assert!(
        reply.is_err(),
        "a request in flight was cut, not answered: {:?}",
        reply.map(|r| r.status)
    );
    assert!(gw.log().contains("stopping now"), "{}", gw.log_tail());
}
