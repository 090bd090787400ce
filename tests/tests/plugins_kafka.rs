//! `kafka-upstream` and `kafka-log` against a real Apache Kafka broker
//! (tests/src/kafka.rs: Kafka 4.1 from Maven Central, KRaft mode), with the
//! topics read back by kafka-python, a client that is not Strait's:
//! Kong's message format, SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 and
//! TLS, the log entry per request, and a broker killed under load, after
//! which every request answered 200 is in the topic and the rest got 503;
//! and the gRPC ingestion route: a client stream published message by
//! message and acknowledged back as Kafka acknowledges.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use strait_e2e::client::Conn;
use strait_e2e::grpc::{GrpcClient, Msg};
use strait_e2e::kafka::{KafkaBroker, PASSWORD, USER};
use strait_e2e::tls::LeafCert;
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{eventually, request, Gateway, GatewayOptions};

fn route(name: &str, path: &str, plugin: Value) -> Value {
    json!({ "name": name, "paths": [path], "plugins": [plugin] })
}

fn kafka_upstream(port: u16, topic: &str, extra: Value) -> Value {
    let mut config = json!({
        "bootstrap_servers": [{ "host": "127.0.0.1", "port": port }],
        "topic": topic,
        "producer_request_acks": -1,
    });
    if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
        config.extend(extra.clone());
    }
    json!({ "name": "kafka-upstream", "config": config })
}

fn config(upstream: &Upstream, routes: Vec<Value>) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{ "name": "s", "url": upstream.url("http"), "routes": routes }]
    })
}

/// The messages of `topic` once there are `count` of them.
async fn messages(broker: &KafkaBroker, topic: &str, count: usize) -> Vec<Value> {
    eventually(Duration::from_secs(20), "messages in the topic", || async move {
        let all = broker.messages(topic);
        anyhow::ensure!(all.len() >= count, "{} messages, want {count}", all.len());
        Ok(all)
    })
    .await
}

fn value(message: &Value) -> Value {
    serde_json::from_str(message["value"].as_str().unwrap_or("")).expect("the message is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_upstream_publishes_kongs_message_and_answers_after_the_ack() {
    let broker = KafkaBroker::start();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let all = json!({ "forward_method": true, "forward_uri": true, "forward_headers": true });
    gw.apply(&config(
        &upstream,
        vec![
            route("all", "/all", kafka_upstream(broker.plaintext, "requests", all)),
            route(
                "body",
                "/body",
                kafka_upstream(broker.plaintext, "bodies", json!({ "producer_request_acks": 1 })),
            ),
        ],
    ))
    .await;

    let reply = gw
        .proxy(request(
            "POST",
            "/all/orders?id=7&tag=a&tag=b",
            &[("content-type", "application/json"), ("x-team", "blue")],
            r#"{"item":"book","qty":2}"#,
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json(), json!({ "message": "message sent" }));
    let text = gw
        .proxy(request(
            "PUT",
            "/body",
            &[("content-type", "text/plain")],
            "plain words",
        ))
        .await;
    assert_eq!(text.status, 200, "{}", text.text());
    // A JSON body that does not parse is refused and never published.
    let bad = gw
        .proxy(request(
            "POST",
            "/body",
            &[("content-type", "application/json")],
            "{not json",
        ))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let form = gw
        .proxy(request(
            "POST",
            "/body",
            &[("content-type", "application/x-www-form-urlencoded")],
            "a=1&b=two+words",
        ))
        .await;
    assert_eq!(form.status, 200, "{}", form.text());
    assert_eq!(upstream.hits(), 0, "the upstream is never called");

    let published = messages(&broker, "requests", 1).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let message = value(&published[0]);
    assert_eq!(message["method"], "POST");
    assert_eq!(message["uri"], "/all/orders?id=7&tag=a&tag=b");
    assert_eq!(message["uri_args"], json!({ "id": "7", "tag": ["a", "b"] }));
    assert_eq!(message["headers"]["x-team"], "blue");
    assert_eq!(
        message["body_base64"], true,
        "JSON is not one of the raw types: {message}"
    );
    let body = base64::engine::general_purpose::STANDARD
        .decode(message["body"].as_str().unwrap_or(""))
        .expect("base64 body");
    assert_eq!(body, br#"{"item":"book","qty":2}"#);
    assert_eq!(message["body_args"], json!({ "item": "book", "qty": 2 }));

    let bodies = messages(&broker, "bodies", 2).await;
    assert_eq!(bodies.len(), 2, "the bad request was not published: {bodies:?}");
    let by_body: BTreeMap<String, Value> = bodies
        .iter()
        .map(value)
        .map(|m| (m["body"].as_str().unwrap_or("").to_string(), m))
        .collect();
    let plain = &by_body["plain words"];
    assert!(
        plain.get("body_base64").is_none() && plain.get("method").is_none(),
        "{plain}"
    );
    assert_eq!(plain["body_args"], json!({}));
    let form = by_body
        .values()
        .find(|m| m["body_base64"] == true)
        .expect("the form message");
    assert_eq!(form["body_args"], json!({ "a": "1", "b": "two words" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_scram_and_tls_reach_the_broker_and_bad_credentials_get_503() {
    let broker = KafkaBroker::start_with(Some(LeafCert::self_signed(&["127.0.0.1", "localhost"])));
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let sasl = |mechanism: &str, password: &str| json!({ "authentication": { "strategy": "sasl", "mechanism": mechanism, "user": USER, "password": password } });
    let ssl_port = broker.ssl.expect("an SSL listener");
    gw.apply(&config(
        &upstream,
        vec![
            route(
                "plain",
                "/plain",
                kafka_upstream(broker.sasl, "secured", sasl("PLAIN", PASSWORD)),
            ),
            route(
                "s256",
                "/s256",
                kafka_upstream(broker.sasl, "secured", sasl("SCRAM-SHA-256", PASSWORD)),
            ),
            route(
                "s512",
                "/s512",
                kafka_upstream(broker.sasl, "secured", sasl("SCRAM-SHA-512", PASSWORD)),
            ),
            route(
                "wrong",
                "/wrong",
                kafka_upstream(
                    broker.sasl,
                    "secured",
                    json!({ "authentication": { "strategy": "sasl", "mechanism": "SCRAM-SHA-256", "user": USER,
                                                "password": "not-it" },
                            "producer_request_retries_max_attempts": 1 }),
                ),
            ),
            route(
                "tls",
                "/tls",
                kafka_upstream(ssl_port, "secured", json!({ "security": { "ssl": true } })),
            ),
            route(
                "no-tls",
                "/no-tls",
                kafka_upstream(
                    broker.sasl,
                    "secured",
                    json!({ "timeout": 1000, "producer_request_retries_max_attempts": 0 }),
                ),
            ),
        ],
    ))
    .await;
    for path in ["/plain", "/s256", "/s512", "/tls"] {
        let reply = gw
            .proxy(request(
                "POST",
                path,
                &[("content-type", "text/plain")],
                path.to_string(),
            ))
            .await;
        assert_eq!(reply.status, 200, "{path}: {}\n{}", reply.text(), gw.log_tail());
    }
    let wrong = gw
        .proxy(request("POST", "/wrong", &[("content-type", "text/plain")], "/wrong"))
        .await;
    assert_eq!(wrong.status, 503, "{}", wrong.text());
    assert_eq!(wrong.json(), json!({ "message": "could not send message to topic" }));
    // A plaintext client on the SASL port: the broker drops it; 503, not a hang.
    let unauthenticated = gw
        .proxy(request("POST", "/no-tls", &[("content-type", "text/plain")], "/no-tls"))
        .await;
    assert_eq!(unauthenticated.status, 503, "{}", unauthenticated.text());
    assert!(
        gw.log_tail().contains("SASL authentication failed"),
        "{}",
        gw.log_tail()
    );

    let published = messages(&broker, "secured", 4).await;
    let bodies: BTreeSet<String> = published
        .iter()
        .map(value)
        .map(|m| m["body"].as_str().unwrap_or("").to_string())
        .collect();
    let want: BTreeSet<String> = ["/plain", "/s256", "/s512", "/tls"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(bodies, want, "{published:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_log_publishes_kongs_entry_for_each_request() {
    let broker = KafkaBroker::start();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let plugin = json!({ "name": "kafka-log", "config": {
        "bootstrap_servers": [{ "host": "127.0.0.1", "port": broker.plaintext }],
        "topic": "access",
    }});
    gw.apply(&config(&upstream, vec![route("logged", "/logged", plugin)]))
        .await;
    for i in 0..20 {
        let reply = gw
            .proxy(request("GET", &format!("/logged/item/{i}?q={i}"), &[], ""))
            .await;
        assert_eq!(reply.status, 200);
    }
    let entries = messages(&broker, "access", 20).await;
    assert_eq!(entries.len(), 20, "one entry per request");
    let uris: BTreeSet<String> = entries
        .iter()
        .map(value)
        .map(|e| {
            assert_eq!(e["response"]["status"], 200, "{e}");
            assert_eq!(e["route"]["name"], "logged", "{e}");
            assert!(e["latencies"]["request"].is_number(), "{e}");
            e["request"]["uri"].as_str().unwrap_or("").to_string()
        })
        .collect();
    let want: BTreeSet<String> = (0..20).map(|i| format!("/logged/item/{i}?q={i}")).collect();
    assert_eq!(uris, want);
    let status = gw.admin_get("/status").await.json();
    assert_eq!(status["logs"]["dropped_total"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_fields_are_checked_with_kongs_errors() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let post = |config: Value| {
        let body = json!({ "name": "kafka-upstream", "config": config }).to_string();
        let gw = &gw;
        async move {
            gw.admin("POST", "/plugins", &[("content-type", "application/json")], body)
                .await
        }
    };
    let missing = post(json!({ "topic": "t" })).await;
    assert_eq!(missing.status, 400, "{}", missing.text());
    assert_eq!(
        missing.json()["fields"]["config"]["bootstrap_servers"],
        "required field missing"
    );
    let acks =
        post(json!({ "topic": "t", "bootstrap_servers": [{ "host": "k", "port": 9092 }], "producer_request_acks": 2 }))
            .await;
    assert_eq!(acks.status, 400, "{}", acks.text());
    assert!(
        acks.json()["fields"]["config"]["producer_request_acks"].is_string(),
        "{}",
        acks.text()
    );
    let nothing = post(
        json!({ "topic": "t", "bootstrap_servers": [{ "host": "k", "port": 9092 }],
                                "forward_body": false }),
    )
    .await;
    assert_eq!(nothing.status, 400, "{}", nothing.text());
    assert!(
        nothing.text().contains("at least one of these fields must be true"),
        "{}",
        nothing.text()
    );
    let sasl = post(
        json!({ "topic": "t", "bootstrap_servers": [{ "host": "k", "port": 9092 }],
                             "authentication": { "strategy": "sasl", "mechanism": "PLAIN" } }),
    )
    .await;
    assert_eq!(sasl.status, 400, "{}", sasl.text());
    let ok = post(json!({ "topic": "t", "bootstrap_servers": [{ "host": "k", "port": 9092 }] })).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    let config = &ok.json()["config"];
    assert_eq!(config["producer_request_acks"], 1);
    assert_eq!(config["producer_request_limits_messages_per_request"], 200);
    assert_eq!(config["forward_body"], true);
    assert_eq!(config["timeout"], 10000);
}

/// Every request answered 200 while the broker is killed and started again
/// is in the topic afterwards (count and content); the others got 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_under_load_loses_no_acknowledged_message() {
    let mut broker = KafkaBroker::start();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let plugin = kafka_upstream(
        broker.plaintext,
        "ingest",
        json!({ "timeout": 2000, "producer_request_retries_max_attempts": 5 }),
    );
    gw.apply(&config(&upstream, vec![route("ingest", "/ingest", plugin)]))
        .await;

    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for client in 0..8 {
        let stop = stop.clone();
        let addr = gw.proxy_addr();
        clients.push(tokio::spawn(async move {
            let mut outcomes: Vec<(String, u16)> = Vec::new();
            let mut conn = Conn::h1(addr).await.expect("connect");
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("c{client}-m{n}");
                let req = request("POST", "/ingest", &[("content-type", "text/plain")], id.clone());
                match conn.send(req).await {
                    Ok(reply) => outcomes.push((id, reply.status.as_u16())),
                    Err(_) => {
                        outcomes.push((id, 0));
                        conn = Conn::h1(addr).await.expect("reconnect");
                    }
                }
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    broker.kill();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tokio::task::block_in_place(|| broker.restart());
    // Until requests succeed again, and a little longer.
    eventually(Duration::from_secs(60), "200s after the restart", || {
        let gw = &gw;
        async move {
            let reply = gw
                .proxy(request("POST", "/ingest", &[("content-type", "text/plain")], "probe"))
                .await;
            anyhow::ensure!(reply.status == 200, "{}", reply.status);
            Ok(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = BTreeSet::new();
    let mut refused = 0;
    let mut total = 0;
    for client in clients {
        for (id, status) in client.await.expect("client") {
            total += 1;
            match status {
                200 => {
                    acknowledged.insert(id);
                }
                503 => refused += 1,
                other => panic!("request {id} got {other}, not 200 or 503"),
            }
        }
    }
    assert!(refused > 0, "the kill was felt: {total} requests, none refused");
    assert!(acknowledged.len() > 100, "{} acknowledged", acknowledged.len());

    let published = tokio::task::block_in_place(|| broker.messages("ingest"));
    let mut in_topic: BTreeMap<String, usize> = BTreeMap::new();
    for message in &published {
        let body = value(message)["body"].as_str().unwrap_or("").to_string();
        *in_topic.entry(body).or_default() += 1;
    }
    let missing: Vec<&String> = acknowledged.iter().filter(|id| !in_topic.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged messages are not in the topic: {:?}",
        missing.len(),
        acknowledged.len(),
        &missing[..missing.len().min(10)]
    );
    let found = acknowledged.iter().filter(|id| in_topic.contains_key(*id)).count();
    assert_eq!(found, acknowledged.len());
    eprintln!(
        "{total} requests: {} acknowledged (all in the topic), {refused} refused with 503; {} messages in the topic",
        acknowledged.len(),
        published.len()
    );
}

/// kafka-upstream's acknowledgement of one message of a gRPC call.
#[derive(Clone, PartialEq, prost::Message)]
struct KafkaAck {
    #[prost(uint64, tag = "1")]
    sequence: u64,
    #[prost(int32, tag = "2")]
    partition: i32,
    #[prost(int64, tag = "3")]
    offset: i64,
}

fn grpc_config(upstream: &Upstream, broker_port: u16, extra: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{ "name": "ingest", "url": upstream.url("http"), "routes": [{
            "name": "ingest", "paths": ["/ingest.Ingest/"], "protocols": ["grpc", "grpcs"], "strip_path": false,
            "plugins": [kafka_upstream(broker_port, "grpc-ingest", extra)],
        }] }]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_stream_is_published_and_acknowledged_message_by_message() {
    use prost::Message as _;
    use tokio_stream::StreamExt;
    let mut broker = KafkaBroker::start();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&grpc_config(&upstream, broker.plaintext, json!({}))).await;

    let count = 3000u64;
    let mut client = GrpcClient::h2c(gw.proxy_addr()).await;
    let sent: Vec<Msg> = (0..count)
        .map(|seq| Msg {
            seq,
            payload: bytes::Bytes::from(format!("event-{seq}")),
        })
        .collect();
    let mut acks = client
        .bidi::<Msg, KafkaAck>("/ingest.Ingest/Publish", tokio_stream::iter(sent.clone()))
        .await
        .expect("the call starts");
    let mut acknowledged = BTreeMap::new();
    while let Some(ack) = acks.next().await {
        let ack = ack.expect("no error status");
        assert!(
            acknowledged.insert(ack.sequence, (ack.partition, ack.offset)).is_none(),
            "one ack per message"
        );
    }
    assert_eq!(acknowledged.len() as u64, count, "every message acknowledged");
    assert_eq!(upstream.hits(), 0, "the upstream is never called");

    // Each acknowledged (partition, offset) holds that message's bytes.
    let published = messages(&broker, "grpc-ingest", count as usize).await;
    let at: BTreeMap<(i64, i64), String> = published
        .iter()
        .map(|m| {
            (
                (
                    m["partition"].as_i64().unwrap_or(-1),
                    m["offset"].as_i64().unwrap_or(-1),
                ),
                m["base64"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for (sequence, (partition, offset)) in &acknowledged {
        let want = base64::engine::general_purpose::STANDARD.encode(sent[*sequence as usize].encode_to_vec());
        assert_eq!(at.get(&(*partition as i64, *offset)), Some(&want), "message {sequence}");
    }

    // With the broker gone the call ends with UNAVAILABLE, not a hang.
    broker.kill();
    let mut client = GrpcClient::h2c(gw.proxy_addr()).await;
    let one = vec![Msg {
        seq: 0,
        payload: bytes::Bytes::from_static(b"lost"),
    }];
    let outcome = match client
        .bidi::<Msg, KafkaAck>("/ingest.Ingest/Publish", tokio_stream::iter(one))
        .await
    {
        Ok(mut stream) => match stream.next().await {
            Some(Ok(ack)) => panic!("acknowledged with the broker down: {ack:?}"),
            Some(Err(status)) => status,
            None => panic!("the call ended OK with the broker down"),
        },
        Err(status) => status,
    };
    assert_eq!(outcome.code(), tonic::Code::Unavailable, "{outcome:?}");
    assert_eq!(outcome.message(), "could not send message to topic");
}
