//! `zipkin` (Kong priority 100000): Zipkin v2 spans for sampled requests
//! (a server span for the request, a client span for the proxying and one
//! per balancer try), trace context read from and written to the request
//! in Kong's formats (observability/propagation.rs), and the spans sent as
//! JSON arrays to `http_endpoint` from the shipping thread.

mod schema;
mod spans;

/// `zipkin` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "zipkin",
    priority: 100000,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Zipkin::from_config(config)?)),
};

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::{BatchBody, HttpSink};

use crate::config::ConfigReader;
use crate::context::{LogRecord, RequestCtx, SharedStore};
use crate::observability::propagation::{Outgoing, Propagation};
use crate::phase::{Flow, Plugin};
use crate::PluginError;

#[derive(Debug)]
pub struct Zipkin {
    propagation: Propagation,
    /// `None` without `http_endpoint`: spans are made for the headers and
    /// dropped.
    queue: Option<Arc<Queue>>,
    sample_ratio: f64,
    traceid_bytes: usize,
    method_path: bool,
    tags_header: HeaderName,
    static_tags: Vec<(String, String)>,
    include_credential: bool,
    annotations: bool,
    trace_id_header: Option<HeaderName>,
    local_service_name: String,
    default_service_name: Option<String>,
}

/// What `access` decided, kept for `log`.
#[derive(Debug, Clone)]
pub(crate) struct ZipkinRequest {
    pub trace_id: Vec<u8>,
    pub sampled: bool,
    /// The server span: its id and parent.
    pub span_id: [u8; 8],
    pub parent_id: Option<Vec<u8>>,
    /// The proxy span's id.
    pub proxy_id: [u8; 8],
    pub name: String,
    /// Tags known at access (method, host, path, protocol, static and
    /// request tags), in order.
    pub tags: Vec<(String, String)>,
    pub client_port: u16,
    /// When this plugin's access ran (first of the chain: priority 100000).
    pub access_started: std::time::Instant,
}

fn random_id() -> [u8; 8] {
    loop {
        let id = strait_runtime::random::next_u64().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// `Zipkin-Tags: a=b;c=d` as `(name, value)` pairs (Kong's request_tags).
fn request_tags(value: &str) -> Vec<(String, String)> {
    value
        .split(';')
        .filter_map(|item| {
            let (name, value) = item.split_once('=')?;
            let (name, value) = (name.trim(), value.trim());
            (!name.is_empty() && !name.contains(char::is_whitespace) && !value.is_empty())
                .then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

impl Zipkin {
    pub fn from_config(config: &Map<String, Value>) -> Result<Zipkin, PluginError> {
        let c = ConfigReader::new(config);
        let queue = match c.string("http_endpoint")? {
            None => None,
            Some(url) => {
                let (mut target, _) = crate::bundled::http_log::endpoint("http_endpoint", &url)?;
                let millis = |field: &str, default: i64| c.integer(field, default).map(|v| v.max(0) as u64);
                target.timeout = Duration::from_millis(
                    (millis("connect_timeout", 2000)? + millis("send_timeout", 5000)? + millis("read_timeout", 5000)?)
                        .max(1),
                );
                target
                    .headers
                    .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                let params = crate::observability::queue_params(&c)?;
                let name = format!("zipkin:{url}:{:?}:{params:?}", target.timeout);
                Some(Queue::shared(name, &params, move || {
                    Box::new(HttpSink::new(target, BatchBody::JsonArray))
                }))
            }
        };
        let header_name = |field: &str| -> Result<Option<HeaderName>, PluginError> {
            c.string(field)?
                .map(|name| {
                    HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                        .map_err(|_| PluginError::invalid(field, "invalid header name"))
                })
                .transpose()
        };
        let static_tags = c
            .records("static_tags")?
            .iter()
            .map(|tag| Ok((tag.string("name")?.unwrap_or_default(), tag.string("value")?.unwrap_or_default())))
            .collect::<Result<Vec<_>, PluginError>>()?;
        let traceid_bytes = match c.integer("traceid_byte_count", 16)? {
            8 => 8,
            _ => 16,
        };
        Ok(Zipkin {
            propagation: Propagation::from_config(config)?,
            queue,
            sample_ratio: c.number("sample_ratio", 0.001)?,
            traceid_bytes,
            method_path: c.string("http_span_name")?.as_deref() == Some("method_path"),
            tags_header: header_name("tags_header")?.unwrap_or(HeaderName::from_static("zipkin-tags")),
            static_tags,
            include_credential: c.bool("include_credential", true)?,
            annotations: c.string("phase_duration_flavor")?.as_deref() != Some("tags"),
            trace_id_header: header_name("http_response_header_for_traceid")?,
            local_service_name: c.string("local_service_name")?.unwrap_or_else(|| "kong".into()),
            default_service_name: c.string("default_service_name")?,
        })
    }
}

impl Plugin for Zipkin {
    fn name(&self) -> &'static str {
        "zipkin"
    }

    fn priority(&self) -> i32 {
        100000
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let access_started = std::time::Instant::now();
        let (found, named) = self.propagation.extract_named(ctx.headers);
        let sampled = match found.should_sample {
            Some(sampled) => sampled,
            None => ((strait_runtime::random::next_u64() >> 11) as f64 / (1u64 << 53) as f64) < self.sample_ratio,
        };
        // The ids live on the stack: an unsampled request (most of them)
        // allocates only the values of the headers it sends on.
        let mut own_trace = [0u8; 16];
        let trace_id: &[u8] = match found.trace_id.as_deref() {
            Some(id) => id,
            None => {
                own_trace[..8].copy_from_slice(&strait_runtime::random::next_u64().to_be_bytes());
                if self.traceid_bytes == 16 {
                    own_trace[8..].copy_from_slice(&strait_runtime::random::next_u64().to_be_bytes());
                }
                &own_trace[..self.traceid_bytes]
            }
        };
        // b3 and jaeger share the caller's span; the others name the parent.
        let (span_id, parent_id) = match found.reuse_span_id {
            true => (
                found
                    .span_id
                    .as_deref()
                    .and_then(|s| <[u8; 8]>::try_from(s).ok())
                    .unwrap_or_else(random_id),
                found.parent_id.as_deref(),
            ),
            false => (random_id(), found.span_id.as_deref()),
        };
        let proxy_id = random_id();
        // The span's name and tags matter only to a sampled request, read
        // from the request as it came (before the trace headers are set).
        let mut tags = Vec::new();
        let mut name = String::new();
        if sampled {
            name = match self.method_path {
                true => format!("{} {}", ctx.method.as_str(), ctx.path()),
                false => ctx.method.as_str().to_string(),
            };
            let protocol = match ctx.http_version {
                http::Version::HTTP_10 => "HTTP/1.0",
                http::Version::HTTP_2 => "HTTP/2.0",
                http::Version::HTTP_3 => "HTTP/3.0",
                _ => "HTTP/1.1",
            };
            tags.push(("lc".to_string(), "kong".to_string()));
            tags.push(("http.method".to_string(), ctx.method.as_str().to_string()));
            tags.push(("http.host".to_string(), ctx.host.to_string()));
            tags.push(("http.path".to_string(), ctx.path().to_string()));
            tags.push(("http.protocol".to_string(), protocol.to_string()));
            tags.extend(self.static_tags.iter().cloned());
            for value in ctx.headers.get_all(&self.tags_header) {
                tags.extend(request_tags(&String::from_utf8_lossy(value.as_bytes())));
            }
        }
        let outgoing = Outgoing {
            trace_id,
            trace_id_size: found.trace_id_size,
            span_id: &proxy_id,
            parent_id: Some(&span_id),
            should_sample: Some(sampled),
            flags: found.flags.as_deref(),
            single_header: found.single_header,
            baggage: &found.baggage,
        };
        // A request that names no trace field (most) gets the fields
        // beside its map, written by the encoder: no map insert.
        let beside = !named;
        self.propagation
            .inject(found.format, &outgoing, ctx.headers, beside.then_some(&mut ctx.identity));
        if let Some(name) = &self.trace_id_header {
            if let Ok(value) = HeaderValue::from_str(&crate::observability::propagation::hex(trace_id)) {
                ctx.response_headers.push(name, &value);
            }
        }
        // An unsampled request sends no span: nothing of it is kept.
        if !sampled {
            return Flow::Continue;
        }
        ctx.shared.insert(ZipkinRequest {
            trace_id: trace_id.to_vec(),
            sampled,
            span_id,
            parent_id: parent_id.map(<[u8]>::to_vec),
            proxy_id,
            name,
            tags,
            client_port: ctx.client_port,
            access_started,
        });
        ctx.shared.insert(crate::WantsLogDetails);
        Flow::Continue
    }

    fn logs(&self) -> bool {
        true
    }

    /// The log details (request start, tries, upstream timing) of sampled
    /// requests only: an unsampled one costs the headers and nothing else.
    fn serializes_on_demand(&self) -> bool {
        true
    }

    /// An unsampled request sends no span.
    fn logs_only_on_demand(&self) -> bool {
        true
    }

    fn reads_entities(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let (Some(queue), Some(request)) = (&self.queue, shared.get::<ZipkinRequest>()) else {
            return;
        };
        if !request.sampled {
            return;
        }
        let Some(details) = record.details.as_deref() else {
            return;
        };
        for span in spans::spans(self, request, record, details, shared) {
            queue.push(span);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upstream request's fields after a chain's access phase with the
    /// fields held beside the map (the proxy's requests): the map, and the
    /// lines beside it.
    fn run(plugins: Vec<Arc<dyn Plugin>>, client: &[(&str, &str)]) -> (http::HeaderMap, String) {
        let directory = crate::auth::test_support::TestDirectory::default();
        let chain = crate::PluginChain::from_instances(plugins);
        let mut request = crate::auth::test_support::TestRequest::new("GET", "/");
        for (name, value) in client {
            request = request.header(name, value);
        }
        let mut ctx = request.ctx(&directory);
        ctx.identity = crate::IdentityFields::beside();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(runtime.block_on(chain.access(&mut ctx)), Flow::Continue);
        let lines = String::from_utf8(ctx.identity.added_lines().to_vec()).unwrap();
        drop(ctx);
        (request.headers, lines)
    }

    fn zipkin() -> Arc<dyn Plugin> {
        Arc::new(Zipkin::from_config(serde_json::json!({ "sample_ratio": 0, "header_type": "preserve", "default_header_type": "b3" }).as_object().unwrap()).unwrap())
    }

    /// A request that names no trace field gets zipkin's beside the map (the
    /// encoder writes them); one that does, or a later plugin that may read
    /// them, finds them in the map.
    #[test]
    fn trace_fields_wait_beside_the_map_until_a_plugin_may_read_them() {
        let (headers, lines) = run(vec![zipkin()], &[("accept", "*/*")]);
        assert!(headers.get("x-b3-traceid").is_none(), "{headers:?}");
        let names: Vec<&str> = lines.split("\r\n").filter_map(|l| l.split_once(": ")).map(|(n, _)| n).collect();
        assert_eq!(names, ["x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid", "x-b3-sampled"]);
        assert!(lines.contains("x-b3-sampled: 0\r\n"), "{lines}");
        let trace = lines.split("\r\n").next().unwrap().trim_start_matches("x-b3-traceid: ");
        assert!(trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()), "{trace}");

        // A client's trace: the fields replace its own in the map.
        let (headers, lines) = run(
            vec![zipkin()],
            &[("x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124"), ("x-b3-spanid", "a2fb4a1d1a96d312")],
        );
        assert_eq!(lines, "");
        assert_eq!(headers["x-b3-traceid"], "463ac35c9f6413ad48485a3953bb6124");
        assert_eq!(headers.get_all("x-b3-spanid").iter().count(), 1);
        assert_ne!(headers["x-b3-spanid"], "a2fb4a1d1a96d312", "the proxy span's id");

        // A later plugin that reads request fields sees them in the map.
        let renames = crate::bundled::request_transformer::RequestTransformer::from_config(
            serde_json::json!({ "rename": { "headers": ["x-b3-sampled:x-sampled"] } })
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let (headers, lines) = run(vec![zipkin(), Arc::new(renames)], &[]);
        assert_eq!(lines, "");
        assert_eq!(headers["x-sampled"], "0");
        assert!(headers.get("x-b3-sampled").is_none());
        assert_eq!(headers["x-b3-traceid"].len(), 32);
    }

    #[test]
    fn request_tags_are_name_value_pairs() {
        assert_eq!(
            request_tags("team=payments; tier = gold;bad;=x; x y=z"),
            vec![("team".into(), "payments".into()), ("tier".into(), "gold".into())]
        );
    }
}
