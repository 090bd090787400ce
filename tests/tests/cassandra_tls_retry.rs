//! `cassandra_ssl` while the cluster is away: every statement tries to connect again, and the
//! tries share the store's forwarders instead of leaving a listening socket each (a node whose
//! Cassandra is down for an hour would otherwise run out of descriptors). Alone in its binary:
//! it counts the process's open descriptors.

use std::time::Duration;

use strait_runtime::oauth2::TokenStore;
use strait_store::cassandra::{CassandraConfig, CassandraTokens, LbPolicy, Replication};

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

#[test]
fn a_cluster_away_over_tls_costs_one_forwarder_however_often_it_is_tried() {
    // A port nobody listens on.
    let port = strait_e2e::free_port();
    let config = CassandraConfig {
        contact_points: vec![format!("127.0.0.1:{port}")],
        keyspace: "strait_away".into(),
        consistency: scylla::statement::Consistency::One,
        lb_policy: LbPolicy::RequestRoundRobin,
        local_datacenter: None,
        replication: Replication::Simple(1),
        username: None,
        password: None,
        timeout: Duration::from_millis(500),
        schema_consensus_timeout: Duration::from_secs(1),
        tls: Some(strait_store::ClientTls(
            strait_runtime::tls::client_config(false).expect("client config"),
        )),
    };
    let store = CassandraTokens::new(config).expect("store");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut counts = Vec::new();
    runtime.block_on(async {
        for _ in 0..12 {
            let error = store.token_by_access("any").await.expect_err("the cluster is away");
            assert!(error.to_string().contains("unavailable"), "{error}");
            counts.push(open_descriptors());
        }
    });
    // The first tries open the forwarder and the store's runtime; after them, nothing grows.
    assert!(counts[11] <= counts[2], "descriptors grew with the tries: {counts:?}");
}
