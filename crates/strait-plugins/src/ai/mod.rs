//! What the AI plugins share (docs/ai.md): Kong's `llm` configuration
//! record ([`config`]), the client's OpenAI-format request checked and its
//! model settled ([`request`]), each provider's wire format both ways,
//! whole and streamed ([`providers`]), server-sent events read as they
//! arrive ([`sse`]), and the request's token accounting ([`Analytics`]),
//! which the log serializer writes as Kong's `ai` fields and prometheus
//! counts.

pub mod config;
pub mod providers;
pub mod request;
pub mod sse;
pub mod stream;
pub mod transformer;

use std::time::Instant;

use serde_json::{json, Map, Value};

/// One request's LLM accounting, kept in the request's
/// [`crate::SharedStore`] by ai-proxy from its access phase on and updated
/// as the answer arrives (chunk by chunk for a stream), so that a stream
/// the provider cut is logged with what was counted up to the cut.
#[derive(Debug, Clone)]
pub struct Analytics {
    pub plugin_id: Option<uuid::Uuid>,
    pub provider: &'static str,
    pub request_model: String,
    /// The model the provider says answered (its `model` field).
    pub response_model: Option<String>,
    pub started: Instant,
    /// From the access phase to the provider's last byte, in ms.
    pub latency_ms: Option<u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The provider's final usage report arrived (a whole answer's usage,
    /// or a stream's last report): the counts are the provider's own.
    pub exact: bool,
    /// Streamed content pieces seen (the count of a stream cut before the
    /// provider's usage arrived).
    pub streamed_pieces: u64,
    /// The stream ended as the provider's format ends it.
    pub complete: bool,
    pub input_cost: Option<f64>,
    pub output_cost: Option<f64>,
    pub log_statistics: bool,
    pub log_payloads: bool,
    pub request_payload: Option<String>,
    pub response_payload: Option<String>,
    /// Provider-specific `meta` fields (azure's instance, deployment, API
    /// version).
    pub extra_meta: Vec<(&'static str, String)>,
}

impl Analytics {
    pub fn new(provider: &'static str, request_model: String) -> Analytics {
        Analytics {
            plugin_id: None,
            provider,
            request_model,
            response_model: None,
            started: Instant::now(),
            latency_ms: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            exact: false,
            streamed_pieces: 0,
            complete: false,
            input_cost: None,
            output_cost: None,
            log_statistics: false,
            log_payloads: false,
            request_payload: None,
            response_payload: None,
            extra_meta: Vec::new(),
        }
    }

    /// The provider's usage fields, as they arrive: a later report replaces
    /// an earlier one's counts (Anthropic reports the output count so far,
    /// cumulatively); `last` when no report follows it.
    pub fn usage(&mut self, prompt: Option<u64>, completion: Option<u64>, last: bool) {
        if let Some(prompt) = prompt {
            self.prompt_tokens = prompt;
        }
        if let Some(completion) = completion {
            self.completion_tokens = completion;
        }
        self.exact |= last;
    }

    /// The answer ended (whole, or at the stream's end or cut).
    pub fn finish(&mut self) {
        self.latency_ms = Some(self.started.elapsed().as_millis() as u64);
    }

    /// The completion's tokens: the provider's last report; for a stream
    /// without it (cut before it, or a provider that sends none), each
    /// content piece counts as a token, or a partial report when it
    /// counted more.
    pub fn completion(&self) -> u64 {
        match self.exact {
            true => self.completion_tokens,
            false => self.completion_tokens.max(self.streamed_pieces),
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion())
    }

    /// Kong's cost: tokens times the configured cost per million, 0 when
    /// either cost is unset.
    pub fn cost(&self) -> f64 {
        match (self.input_cost, self.output_cost) {
            (Some(input), Some(output)) => {
                (self.prompt_tokens as f64 * input + self.completion() as f64 * output) / 1_000_000.0
            }
            _ => 0.0,
        }
    }

    /// Kong's `ai.proxy` log object: `meta`, `usage`, and `payload` when
    /// payloads are logged.
    pub fn log_fields(&self) -> Value {
        let latency = self
            .latency_ms
            .unwrap_or_else(|| self.started.elapsed().as_millis() as u64);
        let mut meta = Map::new();
        meta.insert(
            "plugin_id".into(),
            self.plugin_id.map_or(Value::Null, |id| Value::String(id.to_string())),
        );
        meta.insert("provider_name".into(), json!(self.provider));
        meta.insert("request_model".into(), json!(self.request_model));
        meta.insert(
            "response_model".into(),
            json!(self.response_model.as_deref().unwrap_or(&self.request_model)),
        );
        meta.insert("llm_latency".into(), json!(latency));
        for (name, value) in &self.extra_meta {
            meta.insert((*name).into(), json!(value));
        }
        let time_per_token = match self.completion() {
            0 => 0.0,
            n => latency as f64 / n as f64,
        };
        let mut fields = Map::new();
        fields.insert("meta".into(), Value::Object(meta));
        fields.insert(
            "usage".into(),
            json!({
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion(),
                "total_tokens": self.total_tokens(),
                "time_per_token": time_per_token,
                "cost": self.cost(),
            }),
        );
        if self.log_payloads {
            fields.insert(
                "payload".into(),
                json!({"request": self.request_payload, "response": self.response_payload}),
            );
        }
        Value::Object(fields)
    }
}

/// ai-proxy's state for one request, in its [`crate::SharedStore`]: the
/// accounting, and the stream being translated.
#[derive(Debug)]
pub struct AiRequest {
    pub analytics: Analytics,
    pub stream: Option<stream::StreamState>,
    /// Which of the plugin's providers the request went to (0: the
    /// configured one; then its fallbacks).
    pub entry: usize,
}

/// Writes Kong's `ai` fields into a log entry, when ai-proxy logs
/// statistics for this request.
pub fn add_log_fields(entry: &mut Value, shared: &crate::SharedStore) {
    let proxy = shared
        .get::<AiRequest>()
        .map(|r| ("proxy", &r.analytics))
        .filter(|(_, a)| a.log_statistics);
    let calls = shared.get::<transformer::TransformerCalls>();
    let transformers = calls
        .iter()
        .flat_map(|c| c.0.iter())
        .map(|(name, a)| (*name, a))
        .filter(|(_, a)| a.log_statistics);
    let mut namespaces = proxy.into_iter().chain(transformers).peekable();
    if namespaces.peek().is_none() {
        return;
    }
    if let Some(object) = entry.as_object_mut() {
        let ai = object.entry("ai").or_insert_with(|| Value::Object(Map::new()));
        if let Some(ai) = ai.as_object_mut() {
            for (name, analytics) in namespaces {
                ai.insert(name.into(), analytics.log_fields());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_and_fields_follow_kongs_formulas() {
        let mut a = Analytics::new("openai", "gpt-4o".into());
        a.usage(Some(25), Some(12), true);
        a.input_cost = Some(10.0);
        a.output_cost = Some(10.0);
        a.log_statistics = true;
        a.finish();
        assert!((a.cost() - 0.00037).abs() < 1e-12);
        let fields = a.log_fields();
        assert_eq!(fields["usage"]["total_tokens"], 37);
        assert_eq!(fields["meta"]["provider_name"], "openai");
        assert_eq!(fields["meta"]["response_model"], "gpt-4o");
        assert!(fields.get("payload").is_none());
    }

    #[test]
    fn a_cut_stream_counts_its_pieces() {
        let mut a = Analytics::new("openai", "m".into());
        a.streamed_pieces = 7;
        assert_eq!(a.completion(), 7);
        let mut cut = Analytics::new("anthropic", "m".into());
        cut.usage(Some(10), Some(1), false);
        cut.streamed_pieces = 3;
        assert_eq!((cut.prompt_tokens, cut.completion(), cut.exact), (10, 3, false));
        let mut whole = Analytics::new("anthropic", "m".into());
        whole.usage(Some(10), Some(2), true);
        whole.streamed_pieces = 3;
        assert_eq!((whole.prompt_tokens, whole.completion()), (10, 2));
    }
}
