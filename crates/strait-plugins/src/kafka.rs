//! What `kafka-upstream` and `kafka-log` share: Kong's connection and
//! `producer_*` fields, and the producer built from them
//! (`strait_runtime::kafka`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_runtime::kafka::{Cluster, Mechanism, ProducerConfig, Sasl};

use crate::config::ConfigReader;
use crate::config_fields::port;
use crate::PluginError;

/// Kong's fields common to both plugins, in its order.
pub(crate) fn fields() -> Vec<(&'static str, Field)> {
    let positive = |default: i64| Field::integer().default(json!(default)).gt(0);
    vec![
        (
            "bootstrap_servers",
            Field::set(Field::record(vec![
                (
                    "host",
                    Field::string().required().check(strait_core::schema::formats::host),
                ),
                ("port", port()),
            ]))
            .required()
            .len_min(1),
        ),
        ("topic", Field::string().required()),
        ("timeout", positive(10000)),
        ("keepalive", positive(60000)),
        ("keepalive_enabled", Field::boolean().default(json!(false))),
        (
            "authentication",
            Field::record(vec![
                ("strategy", Field::string().one_of(&["sasl"])),
                (
                    "mechanism",
                    Field::string().one_of(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
                ),
                ("tokenauth", Field::boolean()),
                ("user", Field::string().referenceable()),
                ("password", Field::string().referenceable()),
            ])
            .default_record(),
        ),
        (
            "security",
            Field::record(vec![
                ("certificate_id", Field::string().uuid()),
                ("ssl", Field::boolean()),
            ])
            .default_record(),
        ),
        ("cluster_name", Field::string()),
        (
            "producer_request_acks",
            Field::integer().default(json!(1)).one_of_integers(&[-1, 0, 1]),
        ),
        ("producer_request_timeout", positive(2000)),
        ("producer_request_limits_messages_per_request", positive(200)),
        ("producer_request_limits_bytes_per_request", positive(1048576)),
        (
            "producer_request_retries_max_attempts",
            Field::integer().default(json!(10)).between(0, 1_000_000),
        ),
        (
            "producer_request_retries_backoff_timeout",
            Field::integer().default(json!(100)).between(0, 3_600_000),
        ),
        ("producer_async", Field::boolean().default(json!(true))),
        ("producer_async_flush_timeout", positive(1000)),
        ("producer_async_buffering_limits_messages_in_memory", positive(50000)),
    ]
}

/// The entity check both share: SASL needs a mechanism, a user and a
/// password.
pub(crate) fn check(config: &Map<String, Value>) -> Result<(), String> {
    let auth = config.get("authentication").and_then(Value::as_object);
    let strategy = auth.and_then(|a| a.get("strategy")).and_then(Value::as_str);
    if strategy == Some("sasl") {
        let has = |k: &str| {
            auth.and_then(|a| a.get(k))
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
        };
        if !has("mechanism") || !has("user") || !has("password") {
            return Err("authentication.strategy 'sasl' needs a mechanism, a user and a password".into());
        }
    }
    Ok(())
}

fn millis(c: &ConfigReader<'_>, field: &str, default: i64) -> Result<Duration, PluginError> {
    Ok(Duration::from_millis(c.integer(field, default)?.max(0) as u64))
}

/// The producer settings of a validated config.
pub(crate) fn producer_config(config: &Map<String, Value>) -> Result<Arc<ProducerConfig>, PluginError> {
    let c = ConfigReader::new(config);
    let mut bootstrap = Vec::new();
    for server in c.records("bootstrap_servers")? {
        let host = server
            .string("host")?
            .ok_or_else(|| PluginError::invalid("bootstrap_servers.host", "required field missing"))?;
        let port = u16::try_from(server.integer("port", 9092)?)
            .map_err(|_| PluginError::invalid("bootstrap_servers.port", "value should be between 0 and 65535"))?;
        bootstrap.push((host, port));
    }
    let auth = c.record("authentication")?;
    let sasl = match auth.string("strategy")?.as_deref() {
        Some("sasl") => {
            let mechanism = auth.string("mechanism")?.unwrap_or_default();
            Some(Sasl {
                mechanism: Mechanism::parse(&mechanism)
                    .ok_or_else(|| PluginError::invalid("authentication.mechanism", "unknown SASL mechanism"))?,
                user: auth.string("user")?.unwrap_or_default(),
                password: auth.string("password")?.unwrap_or_default(),
                tokenauth: auth.bool("tokenauth", false)?,
            })
        }
        _ => None,
    };
    let security = c.record("security")?;
    if security.string("certificate_id")?.is_some() {
        return Err(PluginError::invalid(
            "security.certificate_id",
            "client certificates for Kafka are not supported by Strait yet",
        ));
    }
    let cluster = Cluster {
        bootstrap,
        ssl: security.bool("ssl", false)?,
        sasl,
        timeout: millis(&c, "timeout", 10000)?,
        keepalive: millis(&c, "keepalive", 60000)?,
    };
    Ok(Arc::new(ProducerConfig {
        cluster: Arc::new(cluster),
        acks: c.integer("producer_request_acks", 1)? as i16,
        request_timeout: millis(&c, "producer_request_timeout", 2000)?,
        messages_per_request: c.integer("producer_request_limits_messages_per_request", 200)?.max(1) as usize,
        bytes_per_request: c.integer("producer_request_limits_bytes_per_request", 1048576)?.max(1) as usize,
        max_attempts: c
            .integer("producer_request_retries_max_attempts", 10)?
            .clamp(0, u32::MAX as i64) as u32,
        backoff: millis(&c, "producer_request_retries_backoff_timeout", 100)?,
        buffer_messages: c
            .integer("producer_async_buffering_limits_messages_in_memory", 50000)?
            .max(1) as usize,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kongs_fields_become_a_producer() {
        let config = json!({
            "bootstrap_servers": [{ "host": "k1", "port": 9093 }, { "host": "k2", "port": 9094 }],
            "topic": "t",
            "timeout": 500,
            "authentication": { "strategy": "sasl", "mechanism": "SCRAM-SHA-512", "user": "u", "password": "p" },
            "security": { "ssl": true },
            "producer_request_acks": -1,
        });
        let producer = producer_config(config.as_object().unwrap()).unwrap();
        assert_eq!(producer.acks, -1);
        assert_eq!(
            producer.cluster.bootstrap,
            vec![("k1".into(), 9093), ("k2".into(), 9094)]
        );
        assert!(producer.cluster.ssl);
        assert_eq!(producer.cluster.timeout, Duration::from_millis(500));
        assert_eq!(
            producer.cluster.sasl.as_ref().unwrap().mechanism,
            Mechanism::ScramSha512
        );
        assert_eq!(producer.messages_per_request, 200);
        let no_password = json!({ "authentication": { "strategy": "sasl", "mechanism": "PLAIN", "user": "u" } });
        assert!(check(no_password.as_object().unwrap()).is_err());
    }
}
