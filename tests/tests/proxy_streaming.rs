//! Streaming and buffering between client and upstream: a client that goes away cancels its
//! upstream request; `response_buffering = false` passes server-sent events on as they are
//! written; `request_buffering` decides whether the upstream sees a body before all of it
//! arrived.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{Gateway, GatewayOptions, RawConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the scripted upstream saw of one connection.
#[derive(Debug)]
enum Seen {
    /// Bytes of the request, as they arrived.
    Bytes(Vec<u8>),
    /// The peer closed the connection.
    Closed(Instant),
}

/// An upstream that reports every read of every connection, and answers each connection
/// with `answer` (called with the stream once the request head arrived).
async fn scripted<F, Fut>(answer: F) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>)
where
    F: Fn(TcpStream, mpsc::UnboundedSender<Seen>) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let answer = answer.clone();
            let tx = tx.clone();
            tokio::spawn(answer(tcp, tx));
        }
    });
    (addr, rx)
}

/// Read until the request head ends; report what came.
async fn read_head(tcp: &mut TcpStream, tx: &mpsc::UnboundedSender<Seen>) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(Seen::Closed(Instant::now()));
                return head;
            }
            Ok(n) => {
                head.extend_from_slice(&buf[..n]);
                let _ = tx.send(Seen::Bytes(buf[..n].to_vec()));
            }
        }
    }
    head
}

/// Report every further read until the peer closes.
async fn watch(tcp: &mut TcpStream, tx: &mpsc::UnboundedSender<Seen>) {
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(Seen::Closed(Instant::now()));
                return;
            }
            Ok(n) => {
                let _ = tx.send(Seen::Bytes(buf[..n].to_vec()));
            }
        }
    }
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<Seen>, within: Duration) -> Option<Seen> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

async fn gateway_to(addr: SocketAddr, tweak: impl Fn(&mut serde_json::Value)) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut svc = service("scripted", &format!("http://{addr}"), vec![route("s", &["/s"])]);
    svc["retries"] = json!(0);
    tweak(&mut svc);
    gw.apply(&config(vec![svc])).await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_its_upstream_request() {
    // The upstream reads the request and never answers; it reports when its peer closes.
    let (addr, mut rx) = scripted(|mut tcp, tx| async move {
        read_head(&mut tcp, &tx).await;
        watch(&mut tcp, &tx).await;
    })
    .await;
    let gw = gateway_to(addr, |svc| svc["read_timeout"] = json!(60_000)).await;
    let mut client = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    client
        .write(b"GET /s/slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    loop {
        match next_event(&mut rx, Duration::from_secs(5)).await {
            Some(Seen::Bytes(bytes)) if bytes.windows(4).any(|w| w == b"\r\n\r\n") => break,
            Some(Seen::Bytes(..)) => continue,
            other => panic!("the request did not reach the upstream: {other:?}"),
        }
    }
    let gone = Instant::now();
    drop(client);
    match next_event(&mut rx, Duration::from_secs(5)).await {
        Some(Seen::Closed(at)) => assert!(at.duration_since(gone) < Duration::from_secs(2)),
        other => panic!("the upstream connection stayed open after the client left: {other:?}"),
    }
}

/// An upstream answering server-sent events: one event, a pause, another, then the end.
async fn events(mut tcp: TcpStream, tx: mpsc::UnboundedSender<Seen>, headers: &'static str) {
    read_head(&mut tcp, &tx).await;
    let head =
        format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{headers}transfer-encoding: chunked\r\n\r\n");
    let _ = tcp.write_all(head.as_bytes()).await;
    let _ = tcp.write_all(b"d\r\ndata: first\n\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = tcp.write_all(b"e\r\ndata: second\n\n\r\n0\r\n\r\n").await;
    watch(&mut tcp, &tx).await;
}

/// When the first event reached the client, counted from the request, and what had arrived.
async fn first_event_after(gw: &Gateway, host: &str) -> (Duration, String) {
    let mut client = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let sent = Instant::now();
    client
        .write(format!("GET /s/events HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let stream = client.stream_mut();
    while !String::from_utf8_lossy(&seen).contains("data: first") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an event within 5 s")
            .expect("read");
        assert!(
            n > 0,
            "closed before the first event: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    (sent.elapsed(), String::from_utf8_lossy(&seen).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_flush_at_once_without_response_buffering() {
    let (plain, _rx) = scripted(|tcp, tx| events(tcp, tx, "")).await;
    let (opted_out, _rx2) = scripted(|tcp, tx| events(tcp, tx, "x-accel-buffering: no\r\n")).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let route = |name: &str, buffering: bool| json!({ "name": name, "paths": ["/s"], "response_buffering": buffering });
    let svc = |name: &str, addr: SocketAddr, host: &str, buffering: bool| {
        let mut route = route(name, buffering);
        route["hosts"] = json!([host]);
        json!({ "name": name, "url": format!("http://{addr}"), "routes": [route] })
    };
    let mut cfg = config(vec![]);
    cfg["services"] = json!([
        svc("unbuffered", plain, "unbuffered.test", false),
        svc("buffered", plain, "buffered.test", true),
        svc("opted-out", opted_out, "opted-out.test", true),
    ]);
    gw.apply(&cfg).await;
    let unbuffered = first_event_after(&gw, "unbuffered.test").await;
    assert!(
        unbuffered.0 < Duration::from_millis(500),
        "with response_buffering=false the first event must not wait for the second: {unbuffered:?}"
    );
    let buffered = first_event_after(&gw, "buffered.test").await;
    assert!(
        buffered.0 >= Duration::from_millis(700) && buffered.1.contains("data: second"),
        "response_buffering=true (Kong's default) passes small writes on in blocks: {buffered:?}"
    );
    let opted_out = first_event_after(&gw, "opted-out.test").await;
    assert!(
        opted_out.0 < Duration::from_millis(500),
        "X-Accel-Buffering: no: {opted_out:?}"
    );
    assert!(
        !opted_out.1.to_ascii_lowercase().contains("x-accel-buffering"),
        "{}",
        opted_out.1
    );
}

/// The upstream's view of a request whose body the client sends in two parts, 600 ms
/// apart: when the first body byte reached the upstream, counted from the first part.
async fn first_body_byte_after(gw: &Gateway, rx: &mut mpsc::UnboundedReceiver<Seen>, host: &str) -> Duration {
    let mut client = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let head = format!("POST /s/upload HTTP/1.1\r\nHost: {host}\r\ncontent-length: 10\r\n\r\nhello");
    let sent = Instant::now();
    client.write(head.as_bytes()).await.expect("write");
    let second = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        client.write(b"world").await.expect("write");
        client
    });
    let mut seen = Vec::new();
    let arrived = loop {
        match next_event(rx, Duration::from_secs(5)).await {
            Some(Seen::Bytes(bytes)) => {
                seen.extend_from_slice(&bytes);
                let text = String::from_utf8_lossy(&seen);
                if let Some((_, body)) = text.split_once("\r\n\r\n") {
                    if !body.is_empty() {
                        break sent.elapsed();
                    }
                }
            }
            other => panic!("no body reached the upstream: {other:?}"),
        }
    };
    drop(second.await);
    arrived
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_buffering_holds_the_body_until_it_is_complete() {
    let (addr, mut rx) = scripted(|mut tcp, tx| async move {
        read_head(&mut tcp, &tx).await;
        watch(&mut tcp, &tx).await;
    })
    .await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let svc = |name: &str, buffering: bool| {
        json!({ "name": name, "url": format!("http://{addr}"), "retries": 0,
            "routes": [{ "name": name, "paths": ["/s"], "hosts": [format!("{name}.test")],
                "request_buffering": buffering }] })
    };
    let mut cfg = config(vec![]);
    cfg["services"] = json!([svc("streamed", false), svc("buffered", true)]);
    gw.apply(&cfg).await;
    let streamed = first_body_byte_after(&gw, &mut rx, "streamed.test").await;
    assert!(
        streamed < Duration::from_millis(400),
        "request_buffering=false streams: {streamed:?}"
    );
    // Drain the first connection's close before the next request.
    while let Some(event) = next_event(&mut rx, Duration::from_millis(300)).await {
        drop(event);
    }
    let buffered = first_body_byte_after(&gw, &mut rx, "buffered.test").await;
    assert!(
        buffered >= Duration::from_millis(550),
        "request_buffering=true sends nothing before the whole body: {buffered:?}"
    );
}
