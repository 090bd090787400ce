//! gRPC through the gateway against a real gRPC upstream (tonic): every kind of call
//! over h2c and TLS, long bidi streams acknowledged in order, many small messages to a
//! slow upstream, and a fast client streaming 200 MB to a slow reader with the gateway's
//! memory bounded by flow control.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use strait_e2e::declarative::config;
use strait_e2e::grpc::{emit_request, frame, summary_of, unprocessed, GrpcClient, GrpcUpstream, Msg, SERVICE};
use strait_e2e::{Gateway, GatewayOptions};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

fn grpc_config(upstream: &GrpcUpstream) -> Value {
    let mut cfg = config(vec![]);
    cfg["services"] = json!([{ "name": "stream", "url": upstream.url(), "read_timeout": 60_000,
        "write_timeout": 60_000,
        "routes": [{ "name": "stream", "paths": [format!("/{SERVICE}/")],
            "protocols": ["grpc", "grpcs"], "strip_path": false }] }]);
    cfg
}

async fn gateway_for(upstream: &GrpcUpstream) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&grpc_config(upstream)).await;
    gw
}

/// The head of a gRPC call to `method`, for a raw HTTP/2 client.
fn raw_call(method: &str) -> http::Request<()> {
    http::Request::post(format!("http://gateway/{SERVICE}/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

fn msg(seq: u64, size: usize) -> Msg {
    Msg {
        seq,
        payload: Bytes::from(vec![b'm'; size]),
    }
}

/// Unary, client-streaming, server-streaming and bidi calls, all answered by the upstream.
async fn every_kind_of_call(mut client: GrpcClient, upstream: &GrpcUpstream) {
    let echoed = client.unary(msg(7, 300)).await.expect("unary");
    assert_eq!((echoed.seq, echoed.payload.len()), (7, 300));

    let sent = tokio_stream::iter((0..500).map(|seq| msg(seq, 1000)));
    let summary = client.collect(sent).await.expect("client streaming");
    assert_eq!((summary.count, summary.bytes, summary.last_seq), (500, 500_000, 499));

    let mut emitted = client.emit(2000, 700).await.expect("server streaming");
    let mut next = 0;
    while let Some(msg) = emitted.message().await.expect("server stream message") {
        assert_eq!((msg.seq, msg.payload.len()), (next, 700));
        next += 1;
    }
    assert_eq!(next, 2000);

    let mut acks = client
        .ack(tokio_stream::iter((0..300).map(|seq| msg(seq, 64))))
        .await
        .expect("bidi");
    let mut acked = 0;
    while let Some(ack) = acks.message().await.expect("ack") {
        assert_eq!(ack.seq, acked);
        acked += 1;
    }
    assert_eq!(acked, 300);
    assert_eq!(upstream.calls(), 4, "every call reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_call_over_h2c() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway_for(&upstream).await;
    every_kind_of_call(GrpcClient::h2c(gw.proxy_addr()).await, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_call_over_tls_to_a_tls_upstream() {
    let upstream = GrpcUpstream::start_tls().await;
    let gw = gateway_for(&upstream).await;
    every_kind_of_call(GrpcClient::tls(gw.proxy_tls_addr()).await, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_on_one_bidi_stream_are_acked_in_order() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway_for(&upstream).await;
    let mut client = GrpcClient::h2c(gw.proxy_addr()).await;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let sender = tokio::spawn(async move {
        for seq in 0..10_000 {
            if tx.send(msg(seq, 32)).await.is_err() {
                break;
            }
        }
    });
    let mut acks = client.ack(ReceiverStream::new(rx)).await.expect("bidi call");
    let mut expected = 0;
    while let Some(ack) = acks.message().await.expect("ack") {
        assert_eq!(ack.seq, expected, "acks arrive in order");
        expected += 1;
    }
    assert_eq!(expected, 10_000);
    sender.await.expect("sender");
}

/// `grpc-timeout` bounds the whole call: a bidi stream still open at its deadline ends
/// with DEADLINE_EXCEEDED (after the messages acked before it), the upstream's stream is
/// cancelled rather than left running, and the connection serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidi_stream_open_at_its_deadline_ends_with_deadline_exceeded() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway_for(&upstream).await;
    let mut client = GrpcClient::h2c(gw.proxy_addr()).await;
    let started = Instant::now();
    // One message, then the client keeps its side open and says nothing more.
    let held_open = tokio_stream::iter([msg(1, 16)]).chain(tokio_stream::pending());
    let mut acks = client
        .ack_within(held_open, Some(Duration::from_millis(600)))
        .await
        .expect("bidi call");
    let first = acks.message().await.expect("first ack").expect("an ack");
    assert_eq!(first.seq, 1);
    assert_eq!(upstream.open_acks(), 1);
    let ended = acks.message().await.expect_err("the deadline ends the call");
    let elapsed = started.elapsed();
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert!(
        elapsed >= Duration::from_millis(550) && elapsed < Duration::from_secs(5),
        "ended after {elapsed:?}"
    );
    let cancelled = Instant::now() + Duration::from_secs(5);
    while upstream.open_acks() > 0 {
        assert!(Instant::now() < cancelled, "the upstream stream was never cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A call without a deadline on the same connection runs to its end.
    let mut acks = client
        .ack(tokio_stream::iter((0..3).map(|seq| msg(seq, 8))))
        .await
        .expect("next call");
    let mut acked = 0;
    while acks.message().await.expect("ack").is_some() {
        acked += 1;
    }
    assert_eq!(acked, 3);
}

/// An upstream that takes two streams per connection: six bidi streams held open at once
/// through the gateway all make progress, on three upstream connections (a stream over
/// the limit does not wait for another to end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_upstreams_limit_open_another_connection() {
    let upstream = GrpcUpstream::start_limited(2).await;
    let gw = Gateway::start(GatewayOptions::new().setting("worker_threads", "1")).await;
    gw.apply(&grpc_config(&upstream)).await;
    let client = GrpcClient::h2c(gw.proxy_addr()).await;
    let mut held = Vec::new();
    for stream in 0..6u64 {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(msg(stream, 8)).await.expect("queue");
        let mut acks = client.clone().ack(ReceiverStream::new(rx)).await.expect("bidi call");
        let first = tokio::time::timeout(Duration::from_secs(5), acks.message())
            .await
            .unwrap_or_else(|_| panic!("stream {stream} waited for a free upstream stream"))
            .expect("ack")
            .expect("an ack");
        assert_eq!(first.seq, stream);
        held.push((tx, acks));
    }
    assert_eq!(upstream.connections(), 3, "two streams per upstream connection");
    for (stream, (tx, mut acks)) in held.into_iter().enumerate() {
        tx.send(msg(100 + stream as u64, 8)).await.expect("queue");
        drop(tx);
        assert_eq!(
            acks.message().await.expect("ack").expect("an ack").seq,
            100 + stream as u64
        );
        assert!(acks.message().await.expect("end").is_none());
    }
}

/// A client that sends every message in its own small DATA frame, faster than the
/// upstream reads: the frames wait in the gateway (in bytes, bounded by the stream's
/// window), and the connection is never closed with GOAWAY `too_many_data_frames`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_frames_to_a_slow_upstream_keep_the_connection() {
    let upstream = GrpcUpstream::start().await;
    upstream.set_read_rate(400_000);
    let gw = gateway_for(&upstream).await;
    let tcp = tokio::net::TcpStream::connect(gw.proxy_addr()).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = raw_call("Collect");
    let (response, mut send) = client.send_request(request, false).expect("send request");
    const MESSAGES: u64 = 40_000;
    let started = Instant::now();
    for seq in 0..MESSAGES {
        let framed = frame(&msg(seq + 1, 8));
        send.reserve_capacity(framed.len());
        while send.capacity() < framed.len() {
            match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                other => {
                    let reset = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
                    panic!(
                        "stream closed after {seq} messages: {other:?}, {reset:?}\n{}",
                        gw.log_tail()
                    )
                }
            }
        }
        send.send_data(framed, false).expect("send a small DATA frame");
    }
    send.send_data(Bytes::new(), true).expect("end the stream");
    let sent_in = started.elapsed();
    let response = response.await.expect("response: the connection was kept");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("response body");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.expect("trailers").expect("grpc trailers");
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    let summary = summary_of(&bytes).expect("a Summary");
    assert_eq!((summary.count, summary.last_seq), (MESSAGES, MESSAGES));
    // The slow reader did hold the sender back for a while: frames really waited.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    // The same connection still takes calls.
    let again = raw_call("Unary");
    let mut client = client.ready().await.expect("connection still usable");
    let (response, mut send) = client.send_request(again, false).expect("second call");
    send.send_data(frame(&msg(1, 1)), true).expect("send");
    assert_eq!(response.await.expect("second response").status(), 200);
    eprintln!(
        "{MESSAGES} small frames sent in {sent_in:?}, answered after {:?}",
        started.elapsed()
    );
    driver.abort();
}

/// The other way: an upstream streaming small messages, each in its own DATA frame, to a
/// client that does not read for a while. The frames wait in the gateway in bytes (the
/// upstream stream's window), the upstream connection is not closed with GOAWAY
/// `too_many_data_frames`, and every message arrives once the client reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_frames_from_the_upstream_to_a_slow_client_keep_the_upstream_connection() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway_for(&upstream).await;
    let tcp = tokio::net::TcpStream::connect(gw.proxy_addr()).await.expect("connect");
    // This client takes any number of small frames: only the gateway's own limits are tested.
    let (client, connection) = h2::client::Builder::new()
        .data_frame_budget(usize::MAX / 2)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("h2 handshake");
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = raw_call("Emit");
    let (response, mut send) = client.send_request(request, false).expect("send request");
    const MESSAGES: u64 = 100_000;
    send.send_data(emit_request(MESSAGES, 8, true), true).expect("send");
    let response = response.await.expect("response head");
    assert_eq!(response.status(), 200);
    // Not reading: the client's 64 KiB window fills, then the gateway's inbox for the
    // upstream stream fills to its window, and the upstream waits.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut body = response.into_body();
    let mut bytes = 0usize;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap_or_else(|e| panic!("response body: {e:?}\n{}", gw.log_tail()));
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes += chunk.len();
    }
    let trailers = body.trailers().await.expect("trailers").expect("grpc trailers");
    assert_eq!(
        trailers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..]),
        "{trailers:?}"
    );
    // Every message: 5 bytes of gRPC framing, then seq (tag + varint) and 8 bytes of payload.
    let expected: usize = (0..MESSAGES)
        .map(|seq| 5 + if seq == 0 { 0 } else { 1 + varint_len(seq) } + 2 + 8)
        .sum();
    assert_eq!(bytes, expected);
    driver.abort();
}

fn varint_len(mut value: u64) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

/// A client streams 200 MB as fast as it can to an upstream that reads 40 MB/s: flow
/// control holds the client back, and the gateway's memory stays within 64 MB of what
/// it was before the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_client_and_a_slow_reader_keep_gateway_memory_bounded() {
    let upstream = GrpcUpstream::start().await;
    let rate = 40_000_000;
    upstream.set_read_rate(rate);
    let gw = Arc::new(gateway_for(&upstream).await);
    let mut client = GrpcClient::h2c(gw.proxy_addr()).await;
    // Warm the path up, then take the baseline.
    client.unary(msg(0, 10)).await.expect("warm-up call");
    let base = gw.rss_kib();
    let peak = Arc::new(AtomicU64::new(base));
    let peak_buffered = Arc::new(AtomicU64::new(0));
    let sampler = {
        let gw = gw.clone();
        let peak = peak.clone();
        let peak_buffered = peak_buffered.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(gw.rss_kib(), Ordering::Relaxed);
                peak_buffered.fetch_max(buffered_bytes(&gw).await, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    const SIZE: usize = 16 * 1024;
    const COUNT: u64 = 200 * 1024 * 1024 / SIZE as u64;
    let payload = Bytes::from(vec![b'p'; SIZE]);
    let msgs = tokio_stream::iter(0..COUNT).map(move |seq| Msg {
        seq,
        payload: payload.clone(),
    });
    let started = Instant::now();
    let summary = client.collect(msgs).await.expect("200 MB client stream");
    let took = started.elapsed();
    sampler.abort();
    assert_eq!(summary.count, COUNT);
    assert_eq!(summary.bytes, COUNT * SIZE as u64);
    let expected = Duration::from_secs_f64((COUNT * SIZE as u64) as f64 / rate as f64);
    assert!(
        took >= expected.mul_f64(0.9),
        "the reader's pace bounds the call: {took:?}"
    );
    let grown_mib = (peak.load(Ordering::Relaxed) - base) / 1024;
    let buffered = peak_buffered.load(Ordering::Relaxed);
    eprintln!(
        "200 MB in {took:?}; gateway RSS {base} KiB before, peak +{grown_mib} MiB; {buffered} bytes buffered at most"
    );
    assert!(grown_mib < 64, "gateway RSS grew by {grown_mib} MiB");
    // The metric saw the stream's inbox fill, never past the stream's 1 MiB window,
    // and empty again once the call was over.
    assert!(buffered > 0 && buffered <= 1 << 20, "{buffered}");
    assert_eq!(buffered_bytes(&gw).await, 0);
}

/// `strait_http2_buffered_bytes` from the status listener's `/metrics`.
async fn buffered_bytes(gw: &Gateway) -> u64 {
    let reply = strait_e2e::send_h1(gw.status_addr(), strait_e2e::get("/metrics"))
        .await
        .expect("scrape");
    reply
        .text()
        .lines()
        .find(|line| line.starts_with("strait_http2_buffered_bytes{"))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .expect("strait_http2_buffered_bytes in /metrics")
}

/// `http2_max_connection_age`: a tonic channel making calls without pause across several
/// ages gets GOAWAY, reconnects, and loses no call; a bidi stream in flight across the age
/// is acknowledged to its end within the grace. A call the server never processed (hyper
/// cancelled it unsent, or the GOAWAY's last stream id is below it) is retried, as gRPC
/// clients do (transparent retry); every call is answered by the upstream exactly once, so
/// a retry of a call that had been processed would fail the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_loses_no_call_at_max_age() {
    let upstream = GrpcUpstream::start().await;
    let gw = Gateway::start(
        GatewayOptions::new()
            .setting("http2_max_connection_age", "1")
            .setting("http2_max_connection_age_grace", "5s"),
    )
    .await;
    gw.apply(&grpc_config(&upstream)).await;
    let accepted = |status: Value| status["server"]["connections_accepted"].as_u64().unwrap_or(0);
    let before = accepted(gw.admin_get("/status").await.json());
    let client = GrpcClient::h2c(gw.proxy_addr()).await;

    // A bidi stream spread over 1.8 s: 90 messages, one every 20 ms.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut acks = client.clone().ack(ReceiverStream::new(rx)).await.expect("bidi call");
    let pacer = tokio::spawn(async move {
        for seq in 0..90 {
            tx.send(msg(seq, 16)).await.expect("queue");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });

    // Four callers, unary calls back to back for 3.5 s (three ages and more).
    let ok = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for caller in 0..4u64 {
        let mut client = client.clone();
        let ok = ok.clone();
        callers.push(tokio::spawn(async move {
            let until = Instant::now() + Duration::from_millis(3500);
            let (mut failed, mut retried) = (Vec::new(), 0u64);
            let mut seq = 0;
            while Instant::now() < until {
                match client.unary(msg(caller * 1_000_000 + seq, 32)).await {
                    Ok(echo) if echo.seq == caller * 1_000_000 + seq => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(status) if unprocessed(&status) => {
                        retried += 1;
                        continue;
                    }
                    other => failed.push(format!("{other:?}")),
                }
                seq += 1;
            }
            (failed, retried)
        }));
    }
    let mut acked = 0;
    while let Some(ack) = acks.message().await.expect("the stream in flight is not cut") {
        assert_eq!(ack.seq, acked);
        acked += 1;
    }
    assert_eq!(acked, 90, "every message of the stream across the age is acked");
    pacer.await.expect("pacer");
    let mut retried = 0;
    for caller in callers {
        let (failed, unsent) = caller.await.expect("caller");
        assert!(failed.is_empty(), "failed calls: {failed:?}");
        retried += unsent;
    }
    let reconnects = accepted(gw.admin_get("/status").await.json()) - before;
    let ok = ok.load(Ordering::Relaxed);
    eprintln!("max age 1 s: {ok} calls, {reconnects} connections, {retried} unprocessed and retried");
    // Counted where the upstream answers, not where a request's head arrives: hyper's
    // client can fail a call as unsent (the GOAWAY's NO_ERROR) after opening its stream
    // (a GOAWAY read between `send_request` and its next `poll_ready`), then reset it
    // before any of its message left. The gateway forwards that head, so the upstream
    // sees a call that never carried a message; it must never answer one twice.
    assert_eq!(
        upstream.unary_answered(),
        ok,
        "each call reached the upstream's handler once"
    );
    assert!(ok > 100, "the callers kept calling");
    assert!(
        reconnects >= 3,
        "the client was made to reconnect: {reconnects} connections"
    );
}
