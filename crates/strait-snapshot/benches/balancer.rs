//! Balancer benches: one pick per algorithm at 10, 100 and 1,000 targets
//! (a pick must cost the same at any target count), a pick with a tenth of
//! the targets unhealthy, and building a 1,000-target balancer. Run: see
//! docs/benchmarks.md#balancer.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use http::{HeaderMap, HeaderValue};
use serde_json::json;
use strait_core::Upstream;
use strait_snapshot::balancer::hashing::HashInput;
use strait_snapshot::balancer::{Attempts, Balancer, TargetAddress};

const SIZES: [usize; 3] = [10, 100, 1_000];
const ALGORITHMS: [&str; 4] = ["round-robin", "least-connections", "latency", "consistent-hashing"];

fn upstream(algorithm: &str) -> Upstream {
    serde_json::from_value(json!({
        "id": uuid::Uuid::new_v4(), "created_at": 0, "updated_at": 0, "name": "bench",
        "algorithm": algorithm, "hash_on": "header", "hash_fallback": "none",
        "hash_on_header": "x-user", "hash_fallback_header": null, "hash_on_cookie": null,
        "hash_on_cookie_path": "/", "hash_on_query_arg": null, "hash_fallback_query_arg": null,
        "hash_on_uri_capture": null, "hash_fallback_uri_capture": null, "slots": 10000,
        "healthchecks": strait_core::schema::default_healthchecks(), "tags": null,
        "host_header": null, "client_certificate": null, "use_srv_name": false,
    }))
    .expect("upstream")
}

/// `count` targets with weights 1..=100, so rings are not trivially uniform.
fn targets(count: usize) -> Vec<(TargetAddress, u64)> {
    (0..count)
        .map(|i| {
            let address = TargetAddress {
                host: format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                port: 8080,
            };
            (address, (i as u64 * 37) % 100 + 1)
        })
        .collect()
}

fn pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    group.sample_size(30).warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_millis(800));
    let mut headers = HeaderMap::new();
    headers.insert("x-user", HeaderValue::from_static("user-4242"));
    let input = HashInput {
        client_ip: "192.0.2.1".parse().expect("ip"),
        consumer: None,
        headers: &headers,
        path: "/",
        query: None,
        captures: &[],
    };
    for algorithm in ALGORITHMS {
        for size in SIZES {
            let balancer = Balancer::new(&upstream(algorithm), targets(size));
            group.bench_function(BenchmarkId::new(algorithm, size), |b| {
                b.iter(|| {
                    let mut attempts = Attempts::default();
                    black_box(balancer.pick(black_box(&input), &mut attempts)).map(|p| p.index)
                })
            });
        }
    }
    // A tenth of the targets down: picks walk past them.
    for algorithm in ["round-robin", "consistent-hashing"] {
        let balancer = Balancer::new(&upstream(algorithm), targets(1_000));
        for index in (0..1_000).step_by(10) {
            balancer.peer(index).health.set(false);
        }
        group.bench_function(BenchmarkId::new(format!("{algorithm}/10pct_unhealthy"), 1_000), |b| {
            b.iter(|| black_box(balancer.pick(black_box(&input), &mut Attempts::default())).map(|p| p.index))
        });
    }
    group.finish();
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    group.sample_size(10).warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    for algorithm in ["round-robin", "consistent-hashing"] {
        let upstream = upstream(algorithm);
        group.bench_function(BenchmarkId::new(algorithm, 1_000), |b| {
            b.iter_with_large_drop(|| Balancer::new(black_box(&upstream), targets(1_000)))
        });
    }
    group.finish();
}

criterion_group!(benches, pick, build);
criterion_main!(benches);
