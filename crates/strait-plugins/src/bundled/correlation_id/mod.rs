//! `correlation-id` (Kong priority 100001): give each request an id in a
//! header (kept when the client sent one), optionally echoed to the client.

mod schema;

/// `correlation-id` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "correlation-id",
    priority: 100001,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(CorrelationId::from_config(config)?)),
};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::config::ConfigReader;
use crate::context::{RequestCtx, ResponseCtx};
use crate::phase::{Flow, Plugin};
use crate::PluginError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Generator {
    Uuid,
    UuidCounter,
    Tracker,
}

#[derive(Debug)]
pub struct CorrelationId {
    header: HeaderName,
    generator: Generator,
    echo_downstream: bool,
}

/// The id this request carries, for the response.
struct CorrelationValue(HeaderValue);

/// Kong's `uuid#counter`: one uuid per process, then a counter.
fn process_uuid() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| Uuid::new_v4().to_string())
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl CorrelationId {
    pub fn from_config(config: &Map<String, Value>) -> Result<CorrelationId, PluginError> {
        let c = ConfigReader::new(config);
        let name = c.string("header_name")?.unwrap_or_else(|| "Kong-Request-ID".into());
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| PluginError::invalid("header_name", format!("'{name}' is not a valid header")))?;
        let generator = match c.string("generator")?.as_deref().unwrap_or("uuid#counter") {
            "uuid" => Generator::Uuid,
            "uuid#counter" => Generator::UuidCounter,
            "tracker" => Generator::Tracker,
            other => {
                return Err(PluginError::invalid(
                    "generator",
                    format!("unknown generator '{other}'"),
                ))
            }
        };
        Ok(CorrelationId {
            header,
            generator,
            echo_downstream: c.bool("echo_downstream", false)?,
        })
    }

    fn generate(&self, ctx: &RequestCtx<'_>) -> String {
        match self.generator {
            Generator::Uuid => Uuid::new_v4().to_string(),
            Generator::UuidCounter => {
                let n = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
                format!("{}#{n}", process_uuid())
            }
            Generator::Tracker => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                let n = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
                format!(
                    "{}-{}-{}-{n}-{:.3}",
                    ctx.host,
                    std::process::id(),
                    ctx.client_ip,
                    now.as_secs_f64()
                )
            }
        }
    }
}

impl Plugin for CorrelationId {
    fn name(&self) -> &'static str {
        "correlation-id"
    }

    fn priority(&self) -> i32 {
        100_001
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let existing = ctx.headers.get(&self.header).filter(|v| !v.is_empty()).cloned();
        let value = match existing {
            Some(value) => value,
            None => {
                let Ok(value) = HeaderValue::from_str(&self.generate(ctx)) else {
                    return Flow::Continue;
                };
                ctx.headers.insert(self.header.clone(), value.clone());
                value
            }
        };
        if self.echo_downstream {
            ctx.shared.insert(CorrelationValue(value));
        }
        Flow::Continue
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        if !self.echo_downstream {
            return;
        }
        if let Some(CorrelationValue(value)) = ctx.shared.get::<CorrelationValue>() {
            ctx.headers.insert(self.header.clone(), value.clone());
        }
    }
}
