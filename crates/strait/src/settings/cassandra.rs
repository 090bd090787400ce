//! `database = cassandra`: Kong 2.x's `cassandra_*` settings, checked into
//! the store's [`CassandraConfig`].

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use strait_store::cassandra::{parse_consistency, CassandraConfig, LbPolicy, Replication};

use super::{parse_number, parse_switch, RawSettings};

fn factor(key: &str, text: &str) -> Result<u32> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|f| *f > 0)
        .ok_or_else(|| anyhow!("{key}: expected a replication factor above 0, got {text:?}"))
}

pub fn cassandra_config(raw: &RawSettings) -> Result<CassandraConfig> {
    let port: u16 = raw.get("cassandra_port").trim().parse().map_err(|_| {
        anyhow!(
            "cassandra_port: expected a port number, got {:?}",
            raw.get("cassandra_port")
        )
    })?;
    let contact_points: Vec<String> = raw
        .get("cassandra_contact_points")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|host| match host.contains(':') && !host.starts_with('[') {
            // An IPv6 address: bracketed, with the port.
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        })
        .collect();
    if contact_points.is_empty() {
        bail!("cassandra_contact_points: must name at least one host");
    }
    let keyspace = raw.get("cassandra_keyspace").trim().to_string();
    if keyspace.is_empty() || keyspace.len() > 48 || !keyspace.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("cassandra_keyspace: expected 1 to 48 letters, digits or underscores, got {keyspace:?}");
    }
    let consistency = parse_consistency(raw.get("cassandra_consistency").trim()).ok_or_else(|| {
        anyhow!(
            "cassandra_consistency: expected ONE, TWO, THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM or LOCAL_ONE, got {:?}",
            raw.get("cassandra_consistency")
        )
    })?;
    let lb_policy = LbPolicy::parse(raw.get("cassandra_lb_policy").trim()).ok_or_else(|| {
        anyhow!(
            "cassandra_lb_policy: expected RoundRobin, RequestRoundRobin, DCAwareRoundRobin or RequestDCAwareRoundRobin, got {:?}",
            raw.get("cassandra_lb_policy")
        )
    })?;
    let local_datacenter = Some(raw.get("cassandra_local_datacenter").trim().to_string()).filter(|d| !d.is_empty());
    if lb_policy.dc_aware() && local_datacenter.is_none() {
        bail!(
            "cassandra_local_datacenter: must be set with cassandra_lb_policy = {}",
            raw.get("cassandra_lb_policy")
        );
    }
    let replication = match raw.get("cassandra_repl_strategy").trim() {
        "SimpleStrategy" => Replication::Simple(factor("cassandra_repl_factor", raw.get("cassandra_repl_factor"))?),
        "NetworkTopologyStrategy" => {
            let mut dcs = Vec::new();
            for entry in raw
                .get("cassandra_data_centers")
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
            {
                let (dc, f) = entry
                    .split_once(':')
                    .ok_or_else(|| anyhow!("cassandra_data_centers: expected name:factor entries, got {entry:?}"))?;
                dcs.push((dc.trim().to_string(), factor("cassandra_data_centers", f)?));
            }
            if dcs.is_empty() {
                bail!("cassandra_data_centers: must name at least one data center with NetworkTopologyStrategy");
            }
            Replication::NetworkTopology(dcs)
        }
        other => bail!("cassandra_repl_strategy: expected SimpleStrategy or NetworkTopologyStrategy, got {other:?}"),
    };
    let ssl = parse_switch("cassandra_ssl", raw.get("cassandra_ssl"))?;
    let verify = parse_switch("cassandra_ssl_verify", raw.get("cassandra_ssl_verify"))?;
    // `cassandra_ssl_verify` checks each node's chain against the system's
    // roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` name others) and its name;
    // off, the connections are encrypted but the nodes unchecked.
    let tls = match ssl {
        true => Some(strait_store::ClientTls(
            strait_runtime::tls::client_config(verify).map_err(|e| anyhow!("cassandra_ssl: {e}"))?,
        )),
        false => None,
    };
    let timeout = parse_number("cassandra_timeout", raw.get("cassandra_timeout"))?;
    if timeout == 0 {
        bail!("cassandra_timeout: must be at least 1 millisecond");
    }
    let consensus = parse_number(
        "cassandra_schema_consensus_timeout",
        raw.get("cassandra_schema_consensus_timeout"),
    )?;
    let text = |key: &str| Some(raw.get(key).to_string()).filter(|v| !v.is_empty());
    Ok(CassandraConfig {
        contact_points,
        keyspace,
        consistency,
        lb_policy,
        local_datacenter,
        replication,
        // A password without a user means nothing: no authentication.
        username: text("cassandra_password").and(text("cassandra_username")),
        password: text("cassandra_password"),
        timeout: Duration::from_millis(timeout as u64),
        schema_consensus_timeout: Duration::from_millis(consensus.max(1) as u64),
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> RawSettings {
        let env = pairs
            .iter()
            .map(|(k, v)| (format!("STRAIT_{}", k.to_ascii_uppercase()), v.to_string()));
        RawSettings::load(None, env).expect("settings")
    }

    #[test]
    fn kongs_defaults_and_errors() {
        let config = cassandra_config(&raw(&[])).expect("defaults");
        assert_eq!(config.contact_points, vec!["127.0.0.1:9042".to_string()]);
        assert_eq!(config.keyspace, "kong");
        assert_eq!(config.replication, Replication::Simple(1));
        assert_eq!(config.username, None, "no password: no authentication");
        let config = cassandra_config(&raw(&[
            ("cassandra_contact_points", "10.0.0.1, 10.0.0.2"),
            ("cassandra_port", "9142"),
            ("cassandra_repl_strategy", "NetworkTopologyStrategy"),
            ("cassandra_data_centers", "east:3,west:2"),
            ("cassandra_lb_policy", "RequestDCAwareRoundRobin"),
            ("cassandra_local_datacenter", "east"),
            ("cassandra_password", "s3"),
        ]))
        .expect("two data centers");
        assert_eq!(
            config.contact_points,
            vec!["10.0.0.1:9142".to_string(), "10.0.0.2:9142".to_string()]
        );
        assert_eq!(
            config.replication,
            Replication::NetworkTopology(vec![("east".into(), 3), ("west".into(), 2)])
        );
        assert_eq!(config.username.as_deref(), Some("kong"));
        assert!(config.tls.is_none());
        let tls = cassandra_config(&raw(&[("cassandra_ssl", "on")])).expect("ssl");
        assert!(tls.tls.is_some());
        for (key, value, message) in [
            ("cassandra_consistency", "MOST", "cassandra_consistency"),
            ("cassandra_lb_policy", "DCAwareRoundRobin", "cassandra_local_datacenter"),
            ("cassandra_keyspace", "bad-name", "cassandra_keyspace"),
            ("cassandra_repl_factor", "0", "cassandra_repl_factor"),
            ("cassandra_ssl", "maybe", "cassandra_ssl"),
        ] {
            let error = cassandra_config(&raw(&[(key, value)])).expect_err(key).to_string();
            assert!(error.starts_with(message), "{key}: {error}");
        }
    }
}
