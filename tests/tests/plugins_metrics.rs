//! statsd, datadog and loggly end to end: the lines and datagrams Kong
//! 3.9 sends for real requests, read by UDP and TCP listeners in the test.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::sinks::{DatagramCollector, TcpCollector};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{eventually, get, request, Gateway, GatewayOptions};

const ROUTE_ID: &str = "20900000-0000-4000-8000-000000000001";
const CONSUMER_ID: &str = "20900000-0000-4000-8000-0000000000cc";

/// A service `billing.api` (its name has a dot) with the routes given,
/// consumer `ada` (custom_id `ada-1`) with a key.
fn config(upstream: &Upstream, routes: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "consumers": [{ "id": CONSUMER_ID, "username": "ada", "custom_id": "ada-1",
                         "keyauth_credentials": [{ "key": "ada-key" }] }],
        "services": [{ "name": "billing.api", "url": upstream.url("http"), "routes": routes }]
    })
}

async fn datagrams(udp: &DatagramCollector, at_least: usize) -> Vec<String> {
    eventually(Duration::from_secs(5), "statsd datagrams", || async {
        let got: Vec<String> = udp
            .datagrams()
            .iter()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect();
        anyhow::ensure!(got.len() >= at_least, "{} datagrams: {got:?}", got.len());
        Ok(got)
    })
    .await
}

fn value_of<'a>(lines: &'a [String], name: &str) -> Option<&'a str> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(':')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_sends_kongs_default_metrics_per_service_and_consumer() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let udp = DatagramCollector::udp().await;
    let port = udp.udp.expect("udp").port();
    let routes = json!([
        { "id": ROUTE_ID, "name": "pay", "paths": ["/pay"], "plugins": [
            { "name": "key-auth", "config": {} },
            { "name": "statsd", "config": { "host": "127.0.0.1", "port": port } }
        ] }
    ]);
    gw.apply(&config(&upstream, routes)).await;
    let reply = gw.proxy(request("GET", "/pay/now", &[("apikey", "ada-key")], "")).await;
    assert_eq!(reply.status, 200);
    // Twelve lines (shdict_usage has nothing to report in Strait), a datagram each.
    let lines = datagrams(&udp, 12).await;
    assert_eq!(lines.len(), 12, "{lines:#?}");
    let scope = "kong.service.billing_api";
    assert_eq!(value_of(&lines, &format!("{scope}.request.count")), Some("1|c"));
    assert_eq!(value_of(&lines, &format!("{scope}.status.200")), Some("1|c"));
    assert_eq!(value_of(&lines, &format!("{scope}.user.uniques")), Some("ada-1|s"));
    assert_eq!(
        value_of(&lines, &format!("{scope}.user.ada-1.request.count")),
        Some("1|c")
    );
    assert_eq!(value_of(&lines, &format!("{scope}.user.ada-1.status.200")), Some("1|c"));
    assert_eq!(
        value_of(
            &lines,
            &format!("{scope}.workspace.00000000-0000-0000-0000-000000000000.status.200")
        ),
        Some("1|c")
    );
    assert_eq!(
        value_of(&lines, &format!("kong.route.{ROUTE_ID}.user.ada-1.status.200")),
        Some("1|c")
    );
    for timer in ["latency", "upstream_latency", "kong_latency"] {
        let value = value_of(&lines, &format!("{scope}.{timer}")).unwrap_or_else(|| panic!("{timer}: {lines:#?}"));
        let ms = value.strip_suffix("|ms").expect("a timer");
        assert!(ms.parse::<u64>().is_ok(), "{timer}: {value}");
    }
    let size = value_of(&lines, &format!("{scope}.request.size")).expect("request size");
    assert!(
        size.ends_with("|c") && size.trim_end_matches("|c").parse::<u64>().unwrap() > 20,
        "{size}"
    );
    assert!(value_of(&lines, &format!("{scope}.response.size")).is_some());

    // A refused request is counted with its status, without a user and
    // without an upstream latency (Kong's -1 is not sent).
    let refused = gw.proxy(get("/pay/now")).await;
    assert_eq!(refused.status, 401);
    let lines = datagrams(&udp, 12 + 7).await;
    let refused: Vec<&String> = lines[12..].iter().collect();
    assert_eq!(refused.len(), 7, "{refused:#?}");
    assert!(refused.contains(&&format!("{scope}.status.401:1|c")), "{refused:#?}");
    assert!(
        !refused
            .iter()
            .any(|l| l.contains("user") || l.contains("upstream_latency")),
        "{refused:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_tags_packs_filters_statuses_and_speaks_tcp() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let tagged = DatagramCollector::udp().await;
    let packed = DatagramCollector::udp().await;
    let tcp = TcpCollector::start().await;
    let metrics = json!([
        { "name": "request_count", "stat_type": "counter", "sample_rate": 0.5 },
        { "name": "status_count", "stat_type": "counter", "sample_rate": 1 },
        { "name": "latency", "stat_type": "histogram", "service_identifier": "service_host" }
    ]);
    let routes = json!([
        { "name": "tagged", "paths": ["/tagged"], "plugins": [{ "name": "statsd", "config": {
            "host": "127.0.0.1", "port": tagged.udp.expect("udp").port(), "metrics": metrics, "tag_style": "dogstatsd",
            "prefix": "edge" } }] },
        { "name": "packed", "paths": ["/packed"], "plugins": [{ "name": "statsd", "config": {
            "host": "127.0.0.1", "port": packed.udp.expect("udp").port(), "metrics": metrics,
            "udp_packet_size": 1000, "allow_status_codes": ["200-299"] } }] },
        { "name": "tcp", "paths": ["/tcp"], "plugins": [{ "name": "statsd", "config": {
            "host": "127.0.0.1", "port": tcp.addr.port(), "metrics": metrics, "use_tcp": true } }] }
    ]);
    gw.apply(&config(&upstream, routes)).await;

    assert_eq!(gw.proxy(get("/tagged")).await.status, 200);
    let lines = datagrams(&tagged, 2).await;
    // status_count has no tagged form; the other two carry the tags.
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .replace('.', "_");
    let tags = format!("route:tagged,workspace:00000000-0000-0000-0000-000000000000,node:{node},status:200");
    assert_eq!(
        lines[0],
        format!("edge.request.count:1|c|@0.5|#service:billing.api,{tags}")
    );
    let latency = lines[1].strip_prefix("edge.latency:").expect("latency");
    assert!(latency.ends_with(&format!("|h|#service:127.0.0.1,{tags}")), "{latency}");

    // Packed, and merged per flush window: however 22 requests (and a 404, not counted) fall
    // into windows, the counters add up to 22 in far fewer lines, every latency is a line of
    // its own, and the lines share datagrams of at most 1000 bytes.
    assert_eq!(gw.proxy(get("/packed/status/404")).await.status, 404);
    for _ in 0..22 {
        assert_eq!(gw.proxy(get("/packed")).await.status, 200);
    }
    let sum = |lines: &[String], name: &str, suffix: &str| -> (u64, usize) {
        let values: Vec<u64> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(name)?.strip_suffix(suffix)?.parse().ok())
            .collect();
        (values.iter().sum(), values.len())
    };
    let (packets, lines) = eventually(Duration::from_secs(5), "packed statsd lines", || async {
        let packets: Vec<String> = packed
            .datagrams()
            .iter()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect();
        let lines: Vec<String> = packets.iter().flat_map(|p| p.split('\n').map(str::to_string)).collect();
        let (count, _) = sum(&lines, "kong.service.billing_api.request.count:", "|c|@0.5");
        anyhow::ensure!(count == 22, "{count} requests counted: {lines:#?}");
        Ok((packets, lines))
    })
    .await;
    let (count, count_lines) = sum(&lines, "kong.service.billing_api.request.count:", "|c|@0.5");
    let (ok, ok_lines) = sum(&lines, "kong.service.billing_api.status.200:", "|c");
    assert_eq!((count, ok), (22, 22), "{lines:#?}");
    assert!(count_lines <= 4 && ok_lines == count_lines, "not merged: {lines:#?}");
    let latencies = lines
        .iter()
        .filter(|l| l.starts_with("kong.service.127_0_0_1.latency:"))
        .count();
    assert_eq!(latencies, 22, "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("status.404")), "{lines:#?}");
    assert!(packets.iter().all(|p| p.len() <= 1000), "{packets:#?}");
    assert!(packets.len() < lines.len() / 4, "not packed: {packets:#?}");

    // TCP: every line ends with a newline, on one connection.
    for _ in 0..2 {
        assert_eq!(gw.proxy(get("/tcp")).await.status, 200);
    }
    let lines = eventually(Duration::from_secs(5), "statsd tcp lines", || async {
        let lines = tcp.lines();
        anyhow::ensure!(lines.len() == 6, "{lines:?}");
        Ok(lines)
    })
    .await;
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.as_str() == "kong.service.billing_api.status.200:1|c")
            .count(),
        2
    );
    assert_eq!(tcp.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datadog_sends_dogstatsd_lines_with_kongs_tags() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let udp = DatagramCollector::udp().await;
    let port = udp.udp.expect("udp").port();
    let routes = json!([
        { "name": "dd", "paths": ["/dd"], "plugins": [
            { "name": "key-auth", "config": { "anonymous": null } },
            { "name": "datadog", "config": { "host": "127.0.0.1", "port": port } }
        ] },
        { "name": "custom", "paths": ["/custom"], "plugins": [
            { "name": "datadog", "config": { "host": "127.0.0.1", "port": port, "prefix": "gw",
              "service_name_tag": "svc", "status_tag": "code",
              "metrics": [{ "name": "request_count", "stat_type": "counter", "sample_rate": 1,
                            "tags": ["team:payments", "tier"], "consumer_identifier": "consumer_id" },
                          { "name": "upstream_latency", "stat_type": "distribution" }] } }
        ] }
    ]);
    gw.apply(&config(&upstream, routes)).await;
    assert_eq!(
        gw.proxy(request("GET", "/dd", &[("apikey", "ada-key")], ""))
            .await
            .status,
        200
    );
    let lines = datagrams(&udp, 6).await;
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert_eq!(
        lines[0],
        "kong.request.count:1|c|#name:billing_api,status:200,consumer:ada-1,app:kong"
    );
    for (line, stat) in lines[1..].iter().zip([
        "latency",
        "request.size",
        "response.size",
        "upstream_latency",
        "kong_latency",
    ]) {
        let rest = line
            .strip_prefix(&format!("kong.{stat}:"))
            .unwrap_or_else(|| panic!("{stat}: {line}"));
        assert!(
            rest.ends_with("|ms|#name:billing_api,status:200,consumer:ada-1,app:kong"),
            "{line}"
        );
    }

    // Custom tags and names; no consumer on this route, so no consumer tag.
    assert_eq!(gw.proxy(get("/custom")).await.status, 200);
    let lines = datagrams(&udp, 8).await;
    assert_eq!(
        lines[6],
        "gw.request.count:1|c|#svc:billing_api,code:200,team:payments,tier"
    );
    assert!(
        lines[7].starts_with("gw.upstream_latency:") && lines[7].ends_with("|d|#svc:billing_api,code:200"),
        "{}",
        lines[7]
    );

    // A tag ending with ':' is refused, as Kong's pattern says.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "datadog", "config": { "metrics": [
                { "name": "latency", "stat_type": "timer", "tags": ["team:"] }] } })
            .to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    // And a counter needs its sample rate.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "statsd", "config": { "metrics": [
                { "name": "request_count", "stat_type": "counter" }] } })
            .to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("sample_rate"), "{}", refused.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loggly_sends_a_syslog_datagram_per_request_at_or_above_its_level() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let udp = DatagramCollector::udp().await;
    let routes = json!([
        { "name": "logged", "paths": ["/logged"], "plugins": [{ "name": "loggly", "config": {
            "host": "127.0.0.1", "port": udp.udp.expect("udp").port(), "key": "CUSTOMER-TOKEN",
            "tags": ["kong", "edge"], "log_level": "warning",
            "client_errors_severity": "warning", "server_errors_severity": "crit" } }] }
    ]);
    gw.apply(&config(&upstream, routes)).await;
    // A success (info) is below the level: not sent. 404 (warning) and 500 (crit) are.
    assert_eq!(gw.proxy(get("/logged")).await.status, 200);
    assert_eq!(gw.proxy(get("/logged/status/404")).await.status, 404);
    assert_eq!(gw.proxy(get("/logged/status/500")).await.status, 500);
    let got = datagrams(&udp, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();
    for (datagram, (pri, status)) in got.iter().zip([(12, 404), (10, 500)]) {
        let (head, entry) = datagram
            .split_once("] ")
            .unwrap_or_else(|| panic!("no structured data: {datagram}"));
        let fields: Vec<&str> = head.split(' ').collect();
        assert_eq!(fields[0], format!("<{pri}>1"), "{datagram}");
        assert!(
            fields[1].len() == 20 && fields[1].ends_with('Z') && fields[1].as_bytes()[10] == b'T',
            "{datagram}"
        );
        assert_eq!(
            fields[2..],
            [
                host.as_str(),
                "kong",
                "-",
                "-",
                "[CUSTOMER-TOKEN@41058",
                "tag=\"kong\"",
                "tag=\"edge\""
            ]
        );
        let entry: Value = serde_json::from_str(entry).expect("Kong's entry as JSON");
        assert_eq!(entry["response"]["status"], status);
        assert_eq!(entry["service"]["name"], "billing.api");
    }
}
