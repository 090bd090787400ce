//! ai-proxy end to end: the official `openai` and `anthropic` Python SDKs,
//! unmodified, against ai-proxy routes for each provider, whole and
//! streamed; the providers are stand-ins (tests/stand-ins/llm.py) that
//! check each request against the provider's documented format and answer
//! in it, usage fields included. Token counts in the log (http-log's
//! `ai.proxy`) equal what the provider reported; Kong's refusals; a
//! provider's error passed on; a stream the provider breaks off logged with
//! what was counted.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::llm::{Providers, Sdk};
use strait_e2e::sinks::HttpCollector;
use strait_e2e::{Gateway, GatewayOptions};

fn ai_proxy(provider: &str, route_type: &str, model: Option<&str>, options: Value, auth: Value) -> Value {
    let mut model_record = json!({ "provider": provider, "options": options });
    if let Some(name) = model {
        model_record["name"] = json!(name);
    }
    json!({ "name": "ai-proxy", "config": {
        "route_type": route_type, "auth": auth, "model": model_record,
        "logging": { "log_statistics": route_type != "llm/v1/completions" || provider != "anthropic",
                     "log_payloads": true },
    }})
}

fn route(name: &str, plugin: Value) -> Value {
    json!({ "name": name, "paths": [format!("/{name}")], "plugins": [plugin] })
}

struct Setup {
    gw: Gateway,
    providers: Providers,
    logs: HttpCollector,
    sdk: std::sync::Arc<std::sync::Mutex<Sdk>>,
}

async fn setup() -> Setup {
    let providers = Providers::start();
    let logs = HttpCollector::start().await;
    let p = |path: &str| providers.url(path);
    let bearer = |key: &str| json!({ "header_name": "Authorization", "header_value": format!("Bearer {key}") });
    let anthropic_auth = json!({ "header_name": "x-api-key", "header_value": "sk-ant" });
    let routes = json!([
        route(
            "openai",
            ai_proxy(
                "openai",
                "llm/v1/chat",
                Some("gpt-4o"),
                json!({ "upstream_url": p("/openai/v1/chat/completions") }),
                bearer("sk-openai")
            )
        ),
        route(
            "openai-completions",
            ai_proxy(
                "openai",
                "llm/v1/completions",
                Some("gpt-3.5-turbo-instruct"),
                json!({ "upstream_url": p("/openai/v1/completions") }),
                bearer("sk-openai")
            )
        ),
        route(
            "azure",
            ai_proxy(
                "azure",
                "llm/v1/chat",
                Some("gpt-4o"),
                json!({ "azure_instance": "strait", "azure_deployment_id": "dep", "azure_api_version": "2024-10-21",
                    "upstream_url": p("/azure/openai/deployments/dep/chat/completions") }),
                json!({ "header_name": "api-key", "header_value": "azure-key" })
            )
        ),
        route(
            "anthropic",
            ai_proxy(
                "anthropic",
                "llm/v1/chat",
                Some("claude-3-5-sonnet"),
                json!({ "anthropic_version": "2023-06-01", "upstream_url": p("/anthropic/v1/messages") }),
                anthropic_auth.clone()
            )
        ),
        route(
            "anthropic-completions",
            ai_proxy(
                "anthropic",
                "llm/v1/completions",
                Some("claude-2.1"),
                json!({ "anthropic_version": "2023-06-01", "upstream_url": p("/anthropic/v1/complete") }),
                anthropic_auth.clone()
            )
        ),
        route(
            "mistral",
            ai_proxy(
                "mistral",
                "llm/v1/chat",
                Some("mistral-large"),
                json!({ "mistral_format": "openai", "upstream_url": p("/mistral/v1/chat/completions") }),
                bearer("mistral-key")
            )
        ),
        route(
            "claude",
            ai_proxy(
                "anthropic",
                "preserve",
                None,
                json!({ "anthropic_version": "2023-06-01", "upstream_url": p(""),
                    "upstream_path": "/anthropic/v1/messages" }),
                anthropic_auth.clone()
            )
        ),
        route(
            "gemini",
            ai_proxy(
                "gemini",
                "llm/v1/chat",
                Some("gemini-1.5-pro"),
                json!({ "upstream_url": p("/gemini/v1beta/models/gemini-1.5-pro:generateContent") }),
                json!({ "header_name": "x-goog-api-key", "header_value": "gemini-key" })
            )
        ),
        route(
            "bedrock",
            ai_proxy(
                "bedrock",
                "llm/v1/chat",
                Some("anthropic.claude-3-haiku-20240307-v1:0"),
                json!({ "bedrock": { "aws_region": "us-east-1" },
                    "upstream_url": p("/bedrock/model/anthropic.claude-3-haiku-20240307-v1:0/converse") }),
                json!({ "aws_access_key_id": "AKIDSTRAITTEST", "aws_secret_access_key": "strait-test-secret" })
            )
        ),
        route(
            "ollama",
            ai_proxy(
                "llama2",
                "llm/v1/chat",
                Some("llama3"),
                json!({ "llama2_format": "ollama", "upstream_url": p("/ollama/api/chat") }),
                json!({})
            )
        ),
        route(
            "ollama-completions",
            ai_proxy(
                "mistral",
                "llm/v1/completions",
                Some("mistral:7b"),
                json!({ "mistral_format": "ollama", "upstream_url": p("/ollama/api/generate") }),
                json!({})
            )
        ),
        route(
            "cohere",
            ai_proxy(
                "cohere",
                "llm/v1/chat",
                Some("command-r"),
                json!({ "upstream_url": p("/cohere/v1/chat") }),
                bearer("cohere-key")
            )
        ),
        route(
            "cohere-completions",
            ai_proxy(
                "cohere",
                "llm/v1/completions",
                Some("command"),
                json!({ "upstream_url": p("/cohere/v1/generate") }),
                bearer("cohere-key")
            )
        ),
        route(
            "hf",
            ai_proxy(
                "huggingface",
                "llm/v1/chat",
                Some("meta-llama/Llama-3.1-8B-Instruct"),
                json!({ "upstream_url": p("/hf/models/meta-llama/Llama-3.1-8B-Instruct") }),
                bearer("hf-key")
            )
        ),
        route(
            "hf-completions",
            ai_proxy(
                "huggingface",
                "llm/v1/completions",
                Some("gpt2"),
                json!({ "upstream_url": p("/hf/models/gpt2"), "huggingface": { "wait_for_model": true } }),
                bearer("hf-key")
            )
        ),
        route(
            "llama2-raw",
            ai_proxy(
                "llama2",
                "llm/v1/chat",
                Some("llama2-13b"),
                json!({ "llama2_format": "raw", "upstream_url": p("/llama2raw") }),
                json!({})
            )
        ),
        route(
            "no-model",
            ai_proxy(
                "openai",
                "llm/v1/chat",
                None,
                json!({ "upstream_url": p("/openai/v1/chat/completions") }),
                bearer("sk-openai")
            )
        ),
    ]);
    let mut deny = ai_proxy(
        "openai",
        "llm/v1/chat",
        Some("gpt-4o"),
        json!({ "upstream_url": p("/openai/v1/chat/completions") }),
        bearer("sk-openai"),
    );
    deny["config"]["response_streaming"] = json!("deny");
    let mut routes = routes.as_array().cloned().unwrap_or_default();
    routes.push(route("deny", deny));
    let fallback_to_anthropic = json!([{ "model": { "provider": "anthropic", "name": "claude-3-5-sonnet",
        "options": { "anthropic_version": "2023-06-01", "upstream_url": p("/anthropic/v1/messages") } },
        "auth": anthropic_auth.clone() }]);
    for (name, primary) in [
        ("failover", "/busy/openai/v1/chat/completions"),
        ("failover-slow", "/slow/openai/v1/chat/completions"),
    ] {
        let mut plugin = ai_proxy(
            "openai",
            "llm/v1/chat",
            Some("gpt-4o"),
            json!({ "upstream_url": p(primary) }),
            bearer("sk-openai"),
        );
        plugin["config"]["fallbacks"] = fallback_to_anthropic.clone();
        routes.push(route(name, plugin));
    }
    // A provider address naming a Kong upstream: its balancer picks the target.
    routes.push(route(
        "pooled",
        ai_proxy(
            "openai",
            "llm/v1/chat",
            Some("gpt-4o"),
            json!({ "upstream_url": "http://llm-pool/openai/v1/chat/completions" }),
            bearer("sk-openai"),
        ),
    ));
    let template = r#"{"messages":[{"role":"user","content":"Tell me about {{topic}}"}]}"#;
    routes.push(json!({ "name": "shaped", "paths": ["/shaped"], "plugins": [
        ai_proxy("openai", "llm/v1/chat", Some("gpt-4o"),
            json!({ "upstream_url": p("/openai/v1/chat/completions") }), bearer("sk-openai")),
        { "name": "ai-prompt-decorator", "config": { "prompts": {
            "prepend": [{ "role": "system", "content": "Answer briefly." }],
            "append": [{ "role": "user", "content": "Thank you." }] } } },
        { "name": "ai-prompt-guard", "config": { "deny_patterns": ["(?i)password"] } },
        { "name": "ai-prompt-template", "config": { "templates": [{ "name": "ask", "template": template }] } },
    ]}));
    let config = json!({
        "_format_version": "3.0",
        // Never reached: ai-proxy sends each request to its provider.
        // A provider that gives no head within a second is failed over.
        "services": [
            { "name": "llm", "url": "http://127.0.0.1:9", "read_timeout": 1000, "routes": routes },
            { "name": "echo", "url": p("/echo"), "routes": transformer_routes(&p) },
        ],
        "upstreams": [{ "name": "llm-pool", "targets": [{ "target": format!("127.0.0.1:{}", providers.port) }] }],
        "plugins": [
            { "name": "http-log", "config": { "http_endpoint": logs.url("/log") } },
            { "name": "prometheus", "config": { "ai_metrics": true } },
        ],
    });
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    let sdk = std::sync::Arc::new(std::sync::Mutex::new(Sdk::start()));
    Setup {
        gw,
        providers,
        logs,
        sdk,
    }
}

impl Setup {
    /// Runs an SDK command and returns its result.
    async fn sdk(&self, command: Value) -> Value {
        let sdk = self.sdk.clone();
        tokio::task::spawn_blocking(move || sdk.lock().unwrap_or_else(|p| p.into_inner()).run(&command))
            .await
            .expect("join")
    }

    fn base(&self, route: &str) -> String {
        format!("{}/{route}", self.gw.proxy_url())
    }

    /// The `n`th log entry of the tests' requests (0-based; the harness's
    /// own requests left out), waited for.
    async fn log(&self, n: usize) -> Value {
        for _ in 0..200 {
            let entries: Vec<Value> = self
                .logs
                .received()
                .iter()
                .flat_map(|r| match r.json() {
                    Value::Array(items) => items,
                    other => vec![other],
                })
                .filter(|e| !e["request"]["uri"].as_str().unwrap_or_default().starts_with("/__e2e"))
                .collect();
            if let Some(entry) = entries.get(n) {
                return entry.clone();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("log entry {n} did not arrive");
    }
}

/// Routes to an ordinary upstream (the stand-in's `/echo`) whose request or
/// response an LLM rewrites.
fn transformer_routes(p: &dyn Fn(&str) -> String) -> Value {
    let llm = json!({ "route_type": "llm/v1/chat",
        "auth": { "header_name": "Authorization", "header_value": "Bearer sk-openai" },
        "model": { "provider": "openai", "name": "gpt-4o-mini",
                   "options": { "upstream_url": p("/openai/v1/chat/completions") } },
        "logging": { "log_statistics": true } });
    json!([
        { "name": "rewrite-request", "paths": ["/rewrite-request"], "plugins": [{ "name": "ai-request-transformer",
            "config": { "prompt": "Rewrite it.", "llm": llm.clone() } }] },
        { "name": "extract-request", "paths": ["/extract-request"], "plugins": [{ "name": "ai-request-transformer",
            "config": { "prompt": "Rewrite it.", "transformation_extract_pattern": "HELLO \\w+", "llm": llm.clone() } }] },
        { "name": "rewrite-response", "paths": ["/rewrite-response"], "plugins": [{ "name": "ai-response-transformer",
            "config": { "prompt": "Rewrite it.", "llm": llm.clone() } }] },
        { "name": "instructed-response", "paths": ["/instructed-response"], "plugins": [{ "name": "ai-response-transformer",
            "config": { "prompt": "VERBATIM", "parse_llm_response_json_instructions": true, "llm": llm } }] },
    ])
}

fn chat(text: &str) -> Value {
    json!([{ "role": "system", "content": "You echo." }, { "role": "user", "content": text }])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_reach_every_provider_whole_and_streamed_with_exact_token_counts() {
    let s = setup().await;
    let mut logged = 0;
    let mut expected = std::collections::BTreeMap::new();
    for (route, kind, sdk_name) in [
        ("openai", "chat", "openai"),
        ("openai-completions", "completions", "openai"),
        ("azure", "chat", "openai"),
        ("anthropic", "chat", "openai"),
        ("anthropic-completions", "completions", "openai"),
        ("mistral", "chat", "openai"),
        ("gemini", "chat", "openai"),
        ("bedrock", "chat", "openai"),
        ("ollama", "chat", "openai"),
        ("ollama-completions", "completions", "openai"),
        ("cohere", "chat", "openai"),
        ("cohere-completions", "completions", "openai"),
        ("hf", "chat", "openai"),
        ("hf-completions", "completions", "openai"),
        ("llama2-raw", "chat", "openai"),
        ("claude", "chat", "anthropic"),
    ] {
        for stream in [false, true] {
            for include_usage in [false, true] {
                if include_usage && (!stream || sdk_name == "anthropic") {
                    continue;
                }
                let text = format!("hello from {route} stream {stream} usage {include_usage}");
                let model = match route {
                    "openai-completions" => "gpt-3.5-turbo-instruct",
                    "ollama-completions" => "mistral:7b",
                    "cohere-completions" => "command",
                    "hf-completions" => "gpt2",
                    "claude" => "claude-3-5-sonnet",
                    _ => "ignored-by-the-route",
                };
                // Anthropic's API takes no system message among the messages.
                let messages = match sdk_name {
                    "anthropic" => json!([{ "role": "user", "content": text }]),
                    _ => chat(&text),
                };
                let mut command = json!({ "sdk": sdk_name, "base_url": s.base(route), "model": model,
                    "kind": kind, "stream": stream, "include_usage": include_usage, "messages": messages,
                    "prompt": text });
                if !matches!(
                    route,
                    "openai-completions" | "ollama-completions" | "cohere-completions" | "hf-completions" | "claude"
                ) {
                    // The configured model wins; the SDK must send one.
                    command["model"] = json!("");
                }
                let result = s.sdk(command).await;
                let context = format!("{route} stream={stream} include_usage={include_usage}: {result}");
                if route == "llama2-raw" && stream {
                    // No stream in llama2's raw format: refused, as a client can read.
                    assert_eq!(result["error"]["status"], 400, "{context}");
                    assert_eq!(s.log(logged).await["response"]["status"], 400);
                    logged += 1;
                    continue;
                }
                assert!(result.get("error").is_none(), "{context}");
                assert_eq!(result["content"], format!("echo: {text}"), "{context}");
                let finish = if sdk_name == "anthropic" { "end_turn" } else { "stop" };
                if route != "anthropic-completions" || !stream {
                    assert_eq!(result["finish_reason"], finish, "{context}");
                }
                let reported = s.providers.usage().await;
                let provider_usage = reported.last().expect("the provider answered").clone();
                let (prompt, completion) = (provider_usage["prompt"].clone(), provider_usage["completion"].clone());
                // What the client sees of usage: whole answers and streams
                // that asked for it carry the provider's counts.
                if !stream || include_usage || sdk_name == "anthropic" {
                    let usage = &result["usage"];
                    let (p, c) = match sdk_name {
                        "anthropic" => (&usage["input_tokens"], &usage["output_tokens"]),
                        _ => (&usage["prompt_tokens"], &usage["completion_tokens"]),
                    };
                    if route != "anthropic-completions" {
                        assert_eq!((p, c), (&prompt, &completion), "{context}");
                    }
                } else if route != "mistral" {
                    // (Mistral puts usage on its last chunk, asked or not.)
                    assert!(
                        result["usage"].is_null(),
                        "a usage chunk the client did not ask for: {context}"
                    );
                }
                let entry = s.log(logged).await;
                logged += 1;
                let ai = &entry["ai"]["proxy"];
                if route == "anthropic-completions" {
                    assert!(entry.get("ai").is_none(), "Kong logs no statistics there: {entry}");
                    continue;
                }
                assert_eq!(ai["usage"]["prompt_tokens"], prompt, "{context}: {entry}");
                assert_eq!(ai["usage"]["completion_tokens"], completion, "{context}: {ai}");
                assert_eq!(
                    ai["usage"]["total_tokens"],
                    prompt.as_u64().unwrap() + completion.as_u64().unwrap()
                );
                assert_eq!(
                    ai["meta"]["provider_name"],
                    if route == "claude" {
                        "anthropic"
                    } else {
                        match route {
                            "azure" => "azure",
                            "anthropic" => "anthropic",
                            "mistral" => "mistral",
                            "gemini" => "gemini",
                            "bedrock" => "bedrock",
                            "ollama" => "llama2",
                            "ollama-completions" => "mistral",
                            "cohere" | "cohere-completions" => "cohere",
                            "hf" | "hf-completions" => "huggingface",
                            "llama2-raw" => "llama2",
                            _ => "openai",
                        }
                    }
                );
                assert!(ai["payload"]["request"].is_string(), "{ai}");
                assert_eq!(entry["response"]["status"], 200);
                let model = ai["meta"]["request_model"].as_str().unwrap_or_default().to_string();
                let provider = ai["meta"]["provider_name"].as_str().unwrap_or_default().to_string();
                let sums = expected.entry((provider, model)).or_insert((0u64, 0u64, 0u64));
                sums.0 += 1;
                sums.1 += prompt.as_u64().unwrap_or_default();
                sums.2 += completion.as_u64().unwrap_or_default();
            }
        }
    }
    // /metrics counts what the log reported, by provider and model.
    let metrics = s.gw.admin_get("/metrics").await.text();
    for ((provider, model), (requests, prompt, completion)) in expected {
        let labels = format!(
            "ai_provider=\"{provider}\",ai_model=\"{model}\",cache_status=\"\",vector_db=\"\",embeddings_provider=\"\",embeddings_model=\"\""
        );
        for (line, value) in [
            (
                format!("kong_ai_llm_requests_total{{{labels},workspace=\"default\"}}"),
                requests,
            ),
            (
                format!("kong_ai_llm_tokens_total{{{labels},token_type=\"prompt_tokens\",workspace=\"default\"}}"),
                prompt,
            ),
            (
                format!("kong_ai_llm_tokens_total{{{labels},token_type=\"completion_tokens\",workspace=\"default\"}}"),
                completion,
            ),
            (
                format!("kong_ai_llm_tokens_total{{{labels},token_type=\"total_tokens\",workspace=\"default\"}}"),
                prompt + completion,
            ),
        ] {
            if value == 0 {
                // Kong's exporter adds no token count of 0 (no line for it).
                assert!(!metrics.lines().any(|l| l.starts_with(&line)), "{line}");
                continue;
            }
            assert!(
                metrics.lines().any(|l| l == format!("{line} {value}")),
                "{line} {value} not in:\n{}",
                metrics
                    .lines()
                    .filter(|l| l.contains("ai_llm"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kongs_refusals_and_the_providers_errors() {
    let s = setup().await;
    let post = |route: &str, body: Value| {
        let url = format!("{}/v1/chat/completions", s.base(route));
        async move {
            let body = body.to_string();
            tokio::task::spawn_blocking(move || {
                let out = std::process::Command::new("curl")
                    .args([
                        "-s",
                        "-o",
                        "-",
                        "-w",
                        "\n%{http_code}\n%header{x-kong-llm-model}",
                        "-X",
                        "POST",
                        "-H",
                        "content-type: application/json",
                        "--data-binary",
                        &body,
                        &url,
                    ])
                    .output()
                    .expect("curl");
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let mut lines = text.rsplitn(3, '\n');
                let model = lines.next().unwrap_or_default().to_string();
                let status: u16 = lines.next().unwrap_or_default().parse().unwrap_or(0);
                let body = lines.next().unwrap_or_default().to_string();
                (status, body, model)
            })
            .await
            .expect("join")
        }
    };
    let message = |body: &str| -> String {
        serde_json::from_str::<Value>(body).map_or_else(
            |_| body.to_string(),
            |v| v["error"]["message"].as_str().unwrap_or_default().to_string(),
        )
    };
    let msgs = chat("hi");
    for (route, body, status, expected) in [
        (
            "openai",
            json!("not an object"),
            400,
            "content-type header does not match request body, or bad JSON formatting",
        ),
        (
            "openai",
            json!({ "messages": [] }),
            400,
            "request body doesn't contain valid prompts",
        ),
        (
            "openai",
            json!({ "model": "gpt-3.5", "messages": msgs }),
            400,
            "cannot use own model - must be: gpt-4o",
        ),
        (
            "no-model",
            json!({ "messages": msgs }),
            400,
            "model parameter not found in request, nor in gateway configuration",
        ),
        (
            "openai-completions",
            json!({ "messages": msgs }),
            400,
            "[llm/v1/chat] message format is not compatible with [llm/v1/completions] route type",
        ),
        (
            "deny",
            json!({ "messages": msgs, "stream": true }),
            400,
            "response streaming is not enabled for this LLM",
        ),
    ] {
        let (got, text, _) = post(route, body).await;
        assert_eq!((got, message(&text).as_str()), (status, expected), "{route}: {text}");
    }
    let (got, text, model) = post("no-model", json!({ "model": "gpt-4o-mini", "messages": msgs })).await;
    assert_eq!(got, 200, "{text}");
    assert_eq!(model, "openai/gpt-4o-mini", "X-Kong-LLM-Model");
    // The provider's own error, in its own format, goes on as it came.
    let (got, text, model) = post("openai", json!({ "messages": chat("please RATE-LIMIT me") })).await;
    assert_eq!(got, 429);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["code"],
        "rate_limit_exceeded"
    );
    assert_eq!(model, "", "no model header on an error");
    let (got, text, _) = post("anthropic", json!({ "messages": chat("RATE-LIMIT again") })).await;
    assert_eq!(got, 429);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["type"],
        "rate_limit_error"
    );
    let sdk_error = s
        .sdk(json!({ "sdk": "openai", "base_url": s.base("anthropic"), "model": "",
        "messages": chat("RATE-LIMIT via the SDK") }))
        .await;
    assert_eq!(sdk_error["error"]["status"], 429, "{sdk_error}");
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_provider_breaks_off_is_logged_with_what_was_counted() {
    let s = setup().await;
    for (n, route) in ["openai", "anthropic", "bedrock"].into_iter().enumerate() {
        let result = s
            .sdk(
                json!({ "sdk": "openai", "base_url": s.base(route), "model": "", "stream": true,
            "messages": chat("one two three four five six seven CUT-STREAM") }),
            )
            .await;
        assert!(
            result["broken"].is_string() || result["finish_reason"].is_null(),
            "{route}: {result}"
        );
        // Each event went on as it came: the pieces before the break
        // reached the client.
        assert!(
            result["content"].as_str().unwrap_or_default().starts_with("echo: one"),
            "{route}: {result}"
        );
        let entry = s.log(n).await;
        let usage = &entry["ai"]["proxy"]["usage"];
        let counted = usage["completion_tokens"].as_u64().unwrap_or_default();
        assert!(
            (3..=5).contains(&counted),
            "{route}: pieces streamed before the cut: {usage}; the client saw {result}"
        );
        if route == "anthropic" {
            // message_start's input count arrived before the cut.
            let provider = s.providers.usage().await;
            assert_eq!(usage["prompt_tokens"], provider[n]["prompt"], "{usage}");
        }
    }
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_plugins_shape_what_reaches_the_provider() {
    let s = setup().await;
    let result = s
        .sdk(json!({ "sdk": "openai", "base_url": s.base("shaped"), "model": "",
        "messages": [{ "role": "user", "content": "hello shaped" }] }))
        .await;
    assert_eq!(result["content"], "echo: Thank you.", "{result}");
    let seen = s.providers.requests().await;
    let roles_and_contents = |request: &Value| -> Vec<(String, String)> {
        request["body"]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or_default().into(),
                    m["content"].as_str().unwrap_or_default().into(),
                )
            })
            .collect()
    };
    assert_eq!(
        roles_and_contents(seen.last().expect("a request")),
        vec![
            ("system".to_string(), "Answer briefly.".to_string()),
            ("user".into(), "hello shaped".into()),
            ("user".into(), "Thank you.".into()),
        ]
    );
    let templated = sdk_raw(
        &s,
        "shaped",
        json!({ "messages": "{template://ask}", "properties": { "topic": "rust" } }),
    )
    .await;
    assert_eq!(templated.0, 200, "{}", templated.1);
    let seen = s.providers.requests().await;
    assert_eq!(
        roles_and_contents(seen.last().expect("a request"))[1].1,
        "Tell me about rust"
    );
    let guarded = sdk_raw(
        &s,
        "shaped",
        json!({ "messages": [{ "role": "user", "content": "my PassWord is 1234" }] }),
    )
    .await;
    assert_eq!(guarded, (400, r#"{"error":{"message":"bad request"}}"#.to_string()));
    assert_eq!(
        s.providers.requests().await.len(),
        seen.len(),
        "the guard kept it from the provider"
    );
    let missing = sdk_raw(&s, "shaped", json!({ "messages": "{template://ask}" })).await;
    assert_eq!(
        missing,
        (
            400,
            r#"{"error":{"message":"missing template parameters: [topic]"}}"#.to_string()
        )
    );
    drop(s);
}

/// A JSON POST to `route`, its status and body.
async fn sdk_raw(s: &Setup, route: &str, body: Value) -> (u16, String) {
    let reply =
        s.gw.proxy(strait_e2e::request(
            "POST",
            &format!("/{route}/v1/chat/completions"),
            &[("content-type", "application/json")],
            body.to_string(),
        ))
        .await;
    (reply.status.as_u16(), reply.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_refuses_or_stalls_is_failed_over_to_the_next() {
    let s = setup().await;
    let mut logged = 0;
    for (route, primary_mode) in [("failover", "busy"), ("failover-slow", "slow")] {
        let before = s.providers.requests().await.len();
        let result = s
            .sdk(
                json!({ "sdk": "openai", "base_url": s.base(route), "model": "", "stream": true,
            "include_usage": true, "messages": chat(&format!("fail over from {primary_mode}")) }),
            )
            .await;
        // One clean stream, from the second provider.
        assert_eq!(
            result["content"],
            format!("echo: fail over from {primary_mode}"),
            "{result}"
        );
        assert_eq!(result["finish_reason"], "stop", "{result}");
        assert!(result.get("broken").is_none(), "{result}");
        let usage = s.providers.usage().await;
        let answered = usage.last().expect("the fallback answered");
        assert_eq!(answered["provider"], "anthropic");
        assert_eq!(result["usage"]["prompt_tokens"], answered["prompt"], "{result}");
        assert_eq!(result["usage"]["completion_tokens"], answered["completion"], "{result}");
        let seen = s.providers.requests().await;
        let tried: Vec<(Value, Value)> = seen[before..]
            .iter()
            .map(|r| (r["mode"].clone(), r["path"].clone()))
            .collect();
        assert_eq!(
            tried,
            vec![
                (json!(primary_mode), json!("/openai/v1/chat/completions")),
                (json!(null), json!("/anthropic/v1/messages"))
            ]
        );
        let entry = s.log(logged).await;
        logged += 1;
        assert_eq!(entry["ai"]["proxy"]["meta"]["provider_name"], "anthropic", "{entry}");
        assert_eq!(
            entry["ai"]["proxy"]["usage"]["completion_tokens"],
            answered["completion"]
        );
        // The provider that failed sits out its cool-down: the next request
        // goes to the fallback at once.
        let before = seen.len();
        let again = s
            .sdk(json!({ "sdk": "openai", "base_url": s.base(route), "model": "",
            "messages": chat("straight to the fallback") }))
            .await;
        assert_eq!(again["content"], "echo: straight to the fallback", "{again}");
        let seen = s.providers.requests().await;
        assert_eq!(seen.len(), before + 1, "only the fallback was asked");
        assert_eq!(seen.last().unwrap()["path"], "/anthropic/v1/messages");
        s.log(logged).await;
        logged += 1;
    }
    let pooled = s
        .sdk(json!({ "sdk": "openai", "base_url": s.base("pooled"), "model": "",
        "messages": chat("through the pool") }))
        .await;
    assert_eq!(pooled["content"], "echo: through the pool", "{pooled}");
    let seen = s.providers.requests().await;
    // The target's address as Host, as for a service whose host names an
    // upstream (an upstream's host_header would replace it).
    assert_eq!(
        seen.last().unwrap()["headers"]["host"],
        format!("127.0.0.1:{}", s.providers.port)
    );
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transformers_have_an_llm_rewrite_requests_and_responses() {
    let s = setup().await;
    let post = |path: &str, body: &str| {
        s.gw.proxy(strait_e2e::request(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.to_string(),
        ))
    };
    // The upstream (an echo) receives the LLM's rewrite of the body.
    let rewritten = post("/rewrite-request", "hello world").await;
    assert_eq!(rewritten.status, 200, "{}", rewritten.text());
    assert_eq!(rewritten.text(), "echo: hello world");
    let sent = s.providers.requests().await;
    let llm_call = sent
        .iter()
        .rev()
        .find(|r| r["path"] == "/openai/v1/chat/completions")
        .expect("the LLM call");
    assert_eq!(
        llm_call["body"]["messages"][0],
        json!({ "role": "system", "content": "Rewrite it." })
    );
    assert_eq!(
        llm_call["body"]["messages"][1],
        json!({ "role": "user", "content": "hello world" })
    );
    assert_eq!(llm_call["headers"]["authorization"], "Bearer sk-openai");
    // The first match of the pattern (case-insensitive) is kept.
    let extracted = post("/extract-request", "hello there friend").await;
    assert_eq!(extracted.text(), "hello there");
    // The client receives the LLM's rewrite of the upstream's answer.
    let answer = post("/rewrite-response", "upstream says hi").await;
    assert_eq!(
        (answer.status.as_u16(), answer.text()),
        (200, "echo: upstream says hi".to_string())
    );
    // Instructions: status, headers and body from the LLM's JSON.
    let instructions = r#"{"status": 201, "headers": {"x-rewritten": "yes"}, "body": "done"}"#;
    let instructed = post("/instructed-response", instructions).await;
    assert_eq!(instructed.status, 201, "{}", instructed.text());
    assert_eq!(instructed.header("x-rewritten").as_deref(), Some("yes"));
    assert_eq!(instructed.text(), "done");
    let broken = post("/instructed-response", "not json").await;
    assert_eq!(broken.status, 500);
    assert!(
        broken
            .text()
            .contains("failed to parse JSON response instructions from AI backend"),
        "{}",
        broken.text()
    );
    // A provider error is Kong's 400.
    let refused = post("/rewrite-request", "please RATE-LIMIT").await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json(),
        json!({ "error": { "message": "failed to introspect request with AI service: status code 429" } })
    );
    // The calls' accounting is logged under each plugin's name.
    let mut found = false;
    for n in 0..7 {
        let entry = s.log(n).await;
        if entry["route"]["name"] == "rewrite-request" {
            let usage = &entry["ai"]["ai-request-transformer"]["usage"];
            assert!(usage["prompt_tokens"].as_u64().unwrap_or_default() > 0, "{entry}");
            found = true;
            break;
        }
    }
    assert!(found, "the request transformer's call was logged");
    drop(s);
}
