//! `http2_max_connection_age` (with ±10% jitter), its grace, and
//! `http2_max_requests_per_connection`: a client connection is asked to go (GOAWAY on HTTP/2,
//! `Connection: close` on HTTP/1.1) and what is in flight finishes.

use std::time::{Duration, Instant};

use strait_e2e::declarative::{config, route, service};
use strait_e2e::h2_raw::{frame, header_block, RawH2, StreamOutcome, HEADERS};
use strait_e2e::{get, Conn, Gateway, GatewayOptions, Upstream, UpstreamKind};

async fn gateway(settings: &[(&str, &str)]) -> (Gateway, Upstream) {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut options = GatewayOptions::new();
    for (key, value) in settings {
        options = options.setting(key, value);
    }
    let gw = Gateway::start(options).await;
    gw.apply(&config(vec![service("s", &up.url("http"), vec![route("s", &["/s"])])]))
        .await;
    (gw, up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_get_goaway_at_a_jittered_age_and_streams_in_flight_finish() {
    let (gw, _up) = gateway(&[
        ("http2_max_connection_age", "1"),
        ("http2_max_connection_age_grace", "5s"),
    ])
    .await;
    let addr = gw.proxy_addr();

    // One connection with a call in flight across the age: GOAWAY first, then its answer.
    let mut busy = RawH2::connect(addr).await.expect("connect");
    let block = header_block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/s/slow?ms=1600"),
        (":authority", "age.test"),
    ]);
    busy.send(&frame(HEADERS, 0x5, 1, &block)).await.expect("send");

    // 100 idle connections: when each is told to go.
    let started = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..100 {
        let mut conn = RawH2::connect(addr).await.expect("connect");
        waits.push(tokio::spawn(async move {
            match conn.outcome_of(1, Duration::from_secs(4)).await {
                StreamOutcome::GoAway(0) => Some(Instant::now()),
                _ => None,
            }
        }));
    }
    let mut ages = Vec::new();
    for wait in waits {
        let at = wait
            .await
            .expect("task")
            .expect("a GOAWAY (NO_ERROR) for every connection");
        ages.push(at.duration_since(started).as_secs_f64());
    }
    let min = ages.iter().copied().fold(f64::MAX, f64::min);
    let max = ages.iter().copied().fold(f64::MIN, f64::max);
    // Connections were opened over a few ms; the age is 1 s ±10%.
    assert!(min >= 0.85 && max <= 1.3, "GOAWAY between {min:.3} and {max:.3} s");
    assert!(max - min >= 0.08, "jitter spreads them: {min:.3} .. {max:.3} s");

    assert_eq!(
        busy.outcome_of(1, Duration::from_secs(3)).await,
        StreamOutcome::GoAway(0)
    );
    assert_eq!(
        busy.outcome_of(1, Duration::from_secs(4)).await,
        StreamOutcome::Response(Some(200)),
        "the call in flight finishes within the grace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_connections_close_after_their_age_or_their_requests() {
    let (gw, _up) = gateway(&[("http2_max_connection_age", "1")]).await;
    let mut conn = Conn::h1(gw.proxy_addr()).await.expect("connect");
    let early = conn.send(get("/s/echo")).await.expect("request");
    assert_eq!(early.header("connection"), None, "kept alive while young");
    let late = conn.send(get("/s/slow?ms=1500")).await.expect("request");
    assert_eq!(late.status, 200);
    assert_eq!(late.header("connection").as_deref(), Some("close"), "aged out");

    let (gw, _up) = gateway(&[("http2_max_requests_per_connection", "3")]).await;
    let mut conn = Conn::h1(gw.proxy_addr()).await.expect("connect");
    for n in 1..=3 {
        let reply = conn.send(get("/s/echo")).await.expect("request");
        let close = reply.header("connection");
        assert_eq!(close.as_deref() == Some("close"), n == 3, "request {n}: {close:?}");
    }
}
