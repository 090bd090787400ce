//! `standard-webhooks` (Kong priority 760): lets through only requests
//! signed as the Standard Webhooks specification says (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `id.timestamp.body`), recent enough, with a body. Everything else is
//! Kong's 400.

mod schema;

/// `standard-webhooks` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "standard-webhooks",
    priority: 760,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(StandardWebhooks::from_config(config)?)),
};

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::hmac;
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

pub struct StandardWebhooks {
    /// `secret_v1`'s bytes as they are (no `whsec_` prefix handling, no
    /// base64 decoding: Kong keys the HMAC with the string itself).
    key: hmac::Key,
    tolerance: f64,
}

impl std::fmt::Debug for StandardWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandardWebhooks")
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

/// Why a webhook was refused (a debug log line; the client sees 400).
#[derive(Debug, PartialEq)]
enum Refused {
    MissingHeaders,
    TooOld,
    NoBody,
    BadSignature,
}

impl StandardWebhooks {
    pub fn from_config(config: &Map<String, Value>) -> Result<StandardWebhooks, PluginError> {
        let c = ConfigReader::new(config);
        let secret = c
            .string("secret_v1")?
            .ok_or_else(|| PluginError::invalid("secret_v1", "required field missing"))?;
        let tolerance = c.integer("tolerance_second", 300)?;
        if tolerance < 0 {
            return Err(PluginError::invalid("tolerance_second", "value must be greater than -1"));
        }
        Ok(StandardWebhooks {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
            tolerance: tolerance as f64,
        })
    }

    /// The message the spec signs: `id.timestamp.body`.
    fn signed_message(id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(id.len() + timestamp.len() + body.len() + 2);
        message.extend_from_slice(id.as_bytes());
        message.push(b'.');
        message.extend_from_slice(timestamp.as_bytes());
        message.push(b'.');
        message.extend_from_slice(body);
        message
    }

    /// `v1,` and the signature of `id.timestamp.body`.
    #[cfg(test)]
    fn sign(&self, id: &str, timestamp: &str, body: &[u8]) -> String {
        let tag = hmac::sign(&self.key, &Self::signed_message(id, timestamp, body));
        format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(tag.as_ref()))
    }

    fn check(&self, ctx: &RequestCtx<'_>, now: f64) -> Result<(), Refused> {
        let first = |name: &str| ctx.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()));
        let (Some(id), Some(signature), Some(timestamp)) =
            (first("webhook-id"), first("webhook-signature"), first("webhook-timestamp"))
        else {
            return Err(Refused::MissingHeaders);
        };
        // A timestamp that is not a number counts as 0 (too old); one in
        // the future passes, as in Kong.
        let seconds = crate::lua_number::parse(timestamp.trim()).unwrap_or(0.0);
        if now - seconds > self.tolerance {
            return Err(Refused::TooOld);
        }
        let body = ctx.body.as_deref().unwrap_or_default();
        if body.is_empty() {
            return Err(Refused::NoBody);
        }
        // One `v1,` signature in canonical base64, exactly: a list of several
        // is refused, as in Kong (which compares the header with the one
        // it computes). Kong signs the timestamp as Lua writes the number.
        let tag = signature
            .strip_prefix("v1,")
            .and_then(|tag| base64::engine::general_purpose::STANDARD.decode(tag).ok())
            .ok_or(Refused::BadSignature)?;
        let message = Self::signed_message(&id, &crate::lua_number::format(seconds), body);
        hmac::verify(&self.key, &message, &tag).map_err(|_| Refused::BadSignature)
    }
}

impl Plugin for StandardWebhooks {
    fn name(&self) -> &'static str {
        "standard-webhooks"
    }

    fn priority(&self) -> i32 {
        760
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_millis() as f64 / 1000.0);
        match self.check(ctx, now) {
            Ok(()) => Flow::Continue,
            Err(refused) => {
                tracing::debug!(?refused, "standard-webhooks: request refused");
                Flow::Respond(PluginResponse::message(400, "Bad request"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin() -> StandardWebhooks {
        StandardWebhooks::from_config(json!({"secret_v1": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}).as_object().expect("object"))
            .expect("valid")
    }

    #[test]
    fn the_signature_is_the_specs_hmac_over_id_timestamp_and_body() {
        // Computed with Python's hmac over the same three parts.
        let signature = plugin().sign("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", br#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,ELhqG0Ku1gwOc1f4jyKdp3SFGFLAOdJ9bvpWLciCakI=");
    }

    #[test]
    fn a_negative_tolerance_is_refused_by_field() {
        let error = StandardWebhooks::from_config(json!({"secret_v1": "s", "tolerance_second": -1}).as_object().expect("object"))
            .err()
            .map(|e| e.to_string());
        assert_eq!(error.as_deref(), Some("config.tolerance_second: value must be greater than -1"));
    }
}
