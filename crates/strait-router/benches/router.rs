//! Router benches: build, match (highest-priority hit, lowest-priority hit,
//! miss) and incremental insert/remove, at 1k / 10k / 50k / 100k routes for
//! each route shape. Run: see docs/benchmarks.md#router.

mod routes;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use routes::{extremes, NoHeaders, Scenario};
use strait_router::Router;

/// The gateway's global allocator (crates/strait/src/main.rs), so build and
/// incremental numbers are what the compiler thread sees.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZES: [usize; 4] = [1_000, 10_000, 50_000, 100_000];

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    group.sample_size(10).warm_up_time(Duration::from_millis(500));
    group.sampling_mode(criterion::SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(2));
    for scenario in Scenario::ALL {
        for size in SIZES {
            let routes = scenario.routes(size);
            // Freeing the router is not building it: criterion drops the
            // outputs after timing (freeing happens on the compiler thread).
            group.bench_with_input(BenchmarkId::new(scenario.name(), size), &routes, |b, routes| {
                b.iter_with_large_drop(|| Router::build(black_box(routes)).expect("routes build"))
            });
        }
    }
    group.finish();
}

fn find(c: &mut Criterion) {
    let mut group = c.benchmark_group("match");
    group.sample_size(20).warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_millis(800));
    let headers = NoHeaders;
    for scenario in Scenario::ALL {
        for size in SIZES {
            let router = Router::build(&scenario.routes(size)).expect("routes build");
            let (first, last) = extremes(&router);
            let cases = [
                ("hit_first", scenario.request_for(first)),
                ("hit_last", scenario.request_for(last)),
                ("miss", scenario.miss()),
            ];
            for (case, request) in cases {
                let facts = request.facts(&headers);
                let expected =
                    (case != "miss").then(|| scenario.route(if case == "hit_first" { first } else { last }).id);
                let found = router.find(&facts).map(|m| m.route.id);
                assert_eq!(found, expected, "{} {size} {case}", scenario.name());
                let id = BenchmarkId::new(format!("{}/{case}", scenario.name()), size);
                group.bench_function(id, |b| b.iter(|| router.find(black_box(&facts))));
            }
        }
    }
    group.finish();
}

/// Derive a new router from a shared one with one change, as the snapshot
/// compiler does: clone (cheap) + insert, or clone + remove.
fn incremental(c: &mut Criterion) {
    let mut group = c.benchmark_group("incremental");
    group.sample_size(20).warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(1));
    for scenario in Scenario::ALL {
        let size = 50_000;
        let routes = scenario.routes(size);
        let router = Router::build(&routes).expect("routes build");
        let extra = Arc::new(scenario.route(size + 1));
        let victim = routes[size / 2].id;
        group.bench_function(BenchmarkId::new(format!("{}/insert", scenario.name()), size), |b| {
            b.iter(|| {
                let mut next = router.clone();
                next.insert(extra.clone()).expect("insert");
                next
            })
        });
        group.bench_function(BenchmarkId::new(format!("{}/remove", scenario.name()), size), |b| {
            b.iter(|| {
                let mut next = router.clone();
                assert!(next.remove(victim));
                next
            })
        });
    }
    group.finish();
}

criterion_group!(benches, build, find, incremental);
criterion_main!(benches);
