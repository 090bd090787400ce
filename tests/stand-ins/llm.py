"""LLM provider stand-ins for ai-proxy's tests (tests/tests/plugins_ai.rs).

One HTTP/1.1 server answering as several providers, each under its own
path prefix, each checking a request against its provider's documented
format (method, headers, authentication, JSON shape) before answering in
that format, whole or streamed as server-sent events with the provider's
framing and usage fields:

  /openai/v1/chat/completions, /openai/v1/completions   (Authorization: Bearer)
  /azure/openai/deployments/<id>/chat/completions       (api-key, ?api-version=)
  /anthropic/v1/messages, /anthropic/v1/complete        (x-api-key, anthropic-version)
  /mistral/v1/chat/completions                          (Authorization: Bearer)
  /gemini/v1beta/models/<m>:generateContent, :streamGenerateContent?alt=sse  (x-goog-api-key)
  /ollama/api/chat, /ollama/api/generate                 (no auth; newline-delimited JSON streams)
  /cohere/v1/chat, /cohere/v1/generate                   (Authorization: Bearer; NDJSON streams)
  /hf/models/<m>/v1/chat/completions (OpenAI's format), /hf/models/<m> (text generation)
                                                        (Authorization: Bearer)
  /llama2raw                                             (llama2's raw format: inputs, parameters)
  /bedrock/model/<id>/converse, /converse-stream        (SigV4 for service bedrock, checked with
                                                         botocore's signer; AWS event-stream framing)

The answer echoes the last user message ("echo: <text>"), one streamed
piece per word. Usage: prompt tokens are the words of every message plus
7, completion tokens the answer's words. The last user message steers the
provider: "RATE-LIMIT" answers 429 in the provider's error format,
"CUT-STREAM" breaks a stream off after three pieces; so does the path:
/busy/<provider>/... always answers 429, /slow/<provider>/... waits 3 s. A request that breaks
the format gets 400 in the provider's error format, naming the problem.

POST /echo/... answers with the request body as it came (an ordinary upstream for the
transformer plugins); a system message holding "VERBATIM" makes an OpenAI-format answer the
user's text exactly. GET /_usage lists the usage each answer reported, in order; GET /_requests
the request bodies received. Usage: llm.py PORT [KEY...] (keys as
provider=key). Prints "ready" once listening.
"""

import binascii
import json
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEYS = {"openai": "sk-openai", "azure": "azure-key", "anthropic": "sk-ant", "mistral": "mistral-key",
        "gemini": "gemini-key", "cohere": "cohere-key", "hf": "hf-key"}
USAGE = []
REQUESTS = []
LOCK = threading.Lock()


class Refused(Exception):
    def __init__(self, status, message, kind="invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def words(value):
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(words(part.get("text", "")) for part in value if isinstance(part, dict))
    return 0


def last_user_text(messages):
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
                if texts:
                    return " ".join(texts)
                results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
                if results:
                    return "tool result " + str(results[0].get("content"))
    return ""


def check_openai(body, completions):
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused(400, "you must provide a model parameter")
    if "top_k" in body:
        raise Refused(400, "Unrecognized request argument supplied: top_k")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise Refused(400, "stream: expected a boolean")
    if "stream_options" in body and body.get("stream") is not True:
        raise Refused(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
    if completions:
        if not isinstance(body.get("prompt"), str):
            raise Refused(400, "prompt: expected a string")
        return body["prompt"], words(body["prompt"])
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: expected a non-empty array")
    for at, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise Refused(400, f"messages[{at}].role: invalid value {role!r}")
        content = message.get("content")
        if content is None and not (role == "assistant" and message.get("tool_calls")):
            raise Refused(400, f"messages[{at}].content: required")
    return last_user_text(messages), sum(words(m.get("content")) for m in messages)


ANTHROPIC_FIELDS = {
    "model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "metadata", "tools", "tool_choice",
}


def check_anthropic(headers, body, completions):
    if headers.get("anthropic-version") != "2023-06-01":
        raise Refused(400, "anthropic-version: header is required (2023-06-01)")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused(400, "model: Field required")
    if completions:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.startswith("\n\nHuman:") or not prompt.endswith("\n\nAssistant:"):
            raise Refused(400, 'prompt: must start with "\\n\\nHuman:" and end with "\\n\\nAssistant:"')
        if not isinstance(body.get("max_tokens_to_sample"), int):
            raise Refused(400, "max_tokens_to_sample: Field required")
        text = prompt[len("\n\nHuman:"):-len("\n\nAssistant:")].strip()
        return text, words(text)
    extra = set(body) - ANTHROPIC_FIELDS
    if extra:
        raise Refused(400, f"{sorted(extra)[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise Refused(400, "max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: at least one message is required")
    for at, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            raise Refused(400, f"messages.{at}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") not in ("text", "image", "tool_use", "tool_result"):
                    raise Refused(400, f"messages.{at}.content: unknown block type {block.get('type')!r}")
        elif not isinstance(content, str):
            raise Refused(400, f"messages.{at}.content: Input should be a string or a list of blocks")
    if "system" in body and not isinstance(body["system"], (str, list)):
        raise Refused(400, "system: Input should be a string")
    prompt = sum(words(m.get("content")) for m in messages) + words(body.get("system", ""))
    return last_user_text(messages), prompt


GEMINI_FIELDS = {"contents", "systemInstruction", "generationConfig", "tools", "toolConfig", "safetySettings"}
GEMINI_GENERATION = {"maxOutputTokens", "temperature", "topK", "topP", "stopSequences", "candidateCount"}
GEMINI_PARTS = {"text", "inlineData", "fileData", "functionCall", "functionResponse"}


def check_gemini(body):
    extra = set(body) - GEMINI_FIELDS
    if extra:
        raise Refused(400, f'Invalid JSON payload received. Unknown name "{sorted(extra)[0]}"')
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Refused(400, "contents is not specified")
    for at, content in enumerate(contents):
        if content.get("role") not in ("user", "model"):
            raise Refused(400, f"contents[{at}].role: Please use a valid role: user, model.")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise Refused(400, f"contents[{at}].parts: must not be empty")
        for part in parts:
            if len(set(part) & GEMINI_PARTS) != 1:
                raise Refused(400, f"contents[{at}].parts: a part holds exactly one of {sorted(GEMINI_PARTS)}")
    system = body.get("systemInstruction")
    if system is not None and not isinstance(system.get("parts"), list):
        raise Refused(400, "systemInstruction.parts: required")
    extra = set(body.get("generationConfig", {})) - GEMINI_GENERATION
    if extra:
        raise Refused(400, f'Invalid JSON payload received. Unknown name "{sorted(extra)[0]}" at generation_config')
    text = ""
    for content in reversed(contents):
        if content["role"] == "user":
            text = " ".join(p.get("text", "") for p in content["parts"] if "text" in p)
            break
    prompt = sum(words(" ".join(p.get("text", "") for p in c["parts"])) for c in contents)
    if system:
        prompt += words(" ".join(p.get("text", "") for p in system["parts"]))
    return text, prompt


AWS_KEYS = {"AKIDSTRAITTEST": "strait-test-secret"}
CONVERSE_FIELDS = {"messages", "system", "inferenceConfig", "toolConfig", "additionalModelRequestFields",
                   "guardrailConfig", "additionalModelResponseFieldPaths", "promptVariables"}
CONVERSE_INFERENCE = {"maxTokens", "temperature", "topP", "stopSequences"}
CONVERSE_BLOCKS = {"text", "image", "document", "toolUse", "toolResult", "guardContent"}


def verify_sigv4(handler, body):
    """The request's Signature Version 4 for service bedrock, recomputed with botocore."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    auth = handler.headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization"
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    key, _, region, service, _ = fields["Credential"].split("/")
    if service != "bedrock":
        return "signed for service %s" % service
    secret = AWS_KEYS.get(key)
    if secret is None:
        return "unknown access key %s" % key
    signed = fields["SignedHeaders"].split(";")
    headers = {name: handler.headers.get(name) for name in signed}
    request = AWSRequest(method="POST", url="http://%s%s" % (handler.headers.get("host"), handler.path),
                         data=body, headers=headers)
    request.context["timestamp"] = handler.headers.get("x-amz-date")
    signer = SigV4Auth(Credentials(key, secret), "bedrock", region)
    canonical = signer.canonical_request(request)
    if signer.signature(signer.string_to_sign(request, canonical), request) != fields["Signature"]:
        return "signature mismatch; botocore's canonical request was:\n" + canonical
    return None


def check_converse(body):
    extra = set(body) - CONVERSE_FIELDS
    if extra:
        raise Refused(400, f"Malformed input request: extraneous key [{sorted(extra)[0]}] is not permitted")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: at least one message is required")
    for at, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            raise Refused(400, f"messages.{at}.role: must be user or assistant")
        for block in message.get("content", []):
            if len(set(block) & CONVERSE_BLOCKS) != 1:
                raise Refused(400, f"messages.{at}.content: a block holds exactly one of {sorted(CONVERSE_BLOCKS)}")
    extra = set(body.get("inferenceConfig", {})) - CONVERSE_INFERENCE
    if extra:
        raise Refused(400, f"inferenceConfig: unknown field {sorted(extra)[0]}")
    for block in body.get("system", []):
        if "text" not in block:
            raise Refused(400, "system: blocks need text")
    text = ""
    for message in reversed(messages):
        if message["role"] == "user":
            text = " ".join(b["text"] for b in message["content"] if "text" in b)
            break
    prompt = sum(words(" ".join(b.get("text", "") for b in m["content"])) for m in messages)
    prompt += sum(words(b.get("text", "")) for b in body.get("system", []))
    return text, prompt


def aws_frame(event_type, payload):
    """One AWS event-stream message (both CRC-32s)."""
    headers = b""
    for name, value in ((":message-type", "event"), (":event-type", event_type),
                        (":content-type", "application/json")):
        headers += struct.pack(">B", len(name)) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
    data = json.dumps(payload).encode()
    total = 12 + len(headers) + len(data) + 4
    prelude = struct.pack(">II", total, len(headers))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + data
    return message + struct.pack(">I", binascii.crc32(message))


COHERE_CHAT = {"model", "message", "chat_history", "preamble", "temperature", "max_tokens", "p", "k",
               "stop_sequences", "stream", "seed"}
COHERE_GENERATE = {"model", "prompt", "temperature", "max_tokens", "p", "k", "stop_sequences", "stream", "seed"}


def check_cohere(body, generate):
    extra = set(body) - (COHERE_GENERATE if generate else COHERE_CHAT)
    if extra:
        raise Refused(400, f"invalid request: unknown field {sorted(extra)[0]}")
    if not isinstance(body.get("stream"), bool):
        raise Refused(400, "stream: this stand-in wants it explicit")
    if generate:
        if not isinstance(body.get("prompt"), str):
            raise Refused(400, "invalid request: prompt must be a string")
        return body["prompt"], words(body["prompt"])
    if not isinstance(body.get("message"), str):
        raise Refused(400, "invalid request: message must be a string")
    for turn in body.get("chat_history", []):
        if turn.get("role") not in ("USER", "CHATBOT", "SYSTEM") or not isinstance(turn.get("message"), str):
            raise Refused(400, "invalid request: chat_history turns are {role: USER|CHATBOT|SYSTEM, message}")
    prompt = words(body["message"]) + sum(words(t["message"]) for t in body.get("chat_history", []))
    prompt += words(body.get("preamble", ""))
    return body["message"], prompt


OLLAMA_FIELDS = {"model", "messages", "prompt", "stream", "options", "tools", "tool_choice", "format", "keep_alive"}
OLLAMA_OPTIONS = {"num_predict", "temperature", "top_p", "top_k", "seed", "stop"}


def check_ollama(body, generate):
    extra = set(body) - OLLAMA_FIELDS
    if extra:
        raise Refused(400, f"json: unknown field \"{sorted(extra)[0]}\"")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused(400, "model is required")
    if not isinstance(body.get("stream"), bool):
        raise Refused(400, "stream: this stand-in wants it explicit")
    extra = set(body.get("options") or {}) - OLLAMA_OPTIONS
    if extra:
        raise Refused(400, f"options: unknown option {sorted(extra)[0]}")
    if generate:
        if not isinstance(body.get("prompt"), str):
            raise Refused(400, "prompt is required")
        return body["prompt"], words(body["prompt"])
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages are required")
    for message in messages:
        if message.get("role") not in ("system", "user", "assistant", "tool") or not isinstance(message.get("content"), str):
            raise Refused(400, "invalid message")
    return last_user_text(messages), sum(words(m["content"]) for m in messages)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/_usage":
            with LOCK:
                self.send_json(200, USAGE)
        elif self.path == "/_requests":
            with LOCK:
                self.send_json(200, REQUESTS)
        else:
            self.send_json(404, {"error": "not found"})

    def send_json(self, status, value, extra=()):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, header in extra:
            self.send_header(name, header)
        self.end_headers()
        self.wfile.write(data)

    def refuse(self, provider, refused):
        if provider == "anthropic":
            kind = {401: "authentication_error", 429: "rate_limit_error"}.get(refused.status, "invalid_request_error")
            self.send_json(refused.status, {"type": "error", "error": {"type": kind, "message": refused.message}})
        else:
            code = "rate_limit_exceeded" if refused.status == 429 else None
            self.send_json(refused.status, {"error": {"message": refused.message, "type": refused.kind,
                                                      "param": None, "code": code}})

    def do_POST(self):
        url = urlsplit(self.path)
        if url.path.startswith("/echo"):
            # An ordinary upstream: the request body back, as it came.
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        # /busy/<provider>/...: always 429; /slow/<provider>/...: 3 s before any answer.
        mode = url.path.split("/")[1] if url.path.split("/")[1] in ("busy", "slow") else None
        if mode:
            url = url._replace(path=url.path[len(mode) + 1:])
        provider = url.path.split("/")[1]
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        self.raw_body = raw
        try:
            if self.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                raise Refused(400, "content-type must be application/json")
            try:
                body = json.loads(raw)
            except ValueError:
                raise Refused(400, "We could not parse the JSON body of your request.")
            with LOCK:
                REQUESTS.append({"path": url.path, "query": url.query, "body": body, "mode": mode,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
            if mode == "slow":
                time.sleep(3)
            if mode == "busy":
                raise Refused(429, "Rate limit reached for requests", "requests")
            self.answer(provider, url, body)
        except Refused as refused:
            self.refuse(provider, refused)

    def answer(self, provider, url, body):
        headers = {k.lower(): v for k, v in self.headers.items()}
        key = KEYS.get(provider)
        if provider in ("openai", "mistral"):
            if headers.get("authorization") != f"Bearer {key}":
                raise Refused(401, "Incorrect API key provided", "invalid_api_key")
            completions = url.path.endswith("/v1/completions")
            text, prompt_words = check_openai(body, completions)
        elif provider == "azure":
            if headers.get("api-key") != key:
                raise Refused(401, "Access denied due to invalid subscription key")
            if not parse_qs(url.query).get("api-version"):
                raise Refused(404, "Resource not found")
            completions = url.path.endswith("/completions") and not url.path.endswith("/chat/completions")
            text, prompt_words = check_openai(body, completions)
        elif provider == "anthropic":
            if headers.get("x-api-key") != key:
                raise Refused(401, "invalid x-api-key")
            completions = url.path.endswith("/v1/complete")
            text, prompt_words = check_anthropic(headers, body, completions)
        elif provider == "hf":
            if headers.get("authorization") != f"Bearer {key}":
                raise Refused(401, "Invalid credentials in Authorization header")
            if url.path.endswith("/v1/chat/completions"):
                completions = False
                text, prompt_words = check_openai(body, False)
                provider = "openai"
            else:
                completions = True
                extra = set(body) - {"inputs", "parameters", "options", "stream"}
                if extra or not isinstance(body.get("inputs"), str):
                    raise Refused(400, "Input validation error: inputs must be a string, no other fields")
                bad = set(body.get("parameters", {})) - {"max_new_tokens", "temperature", "top_p", "top_k", "stop",
                                                         "details", "return_full_text"}
                if bad:
                    raise Refused(400, f"Input validation error: unknown parameter {sorted(bad)[0]}")
                text, prompt_words = body["inputs"], 0
                pieces = ("echo: " + text).split()
                with LOCK:
                    USAGE.append({"provider": "hf", "stream": bool(body.get("stream")), "prompt": 0,
                                  "completion": len(pieces)})
                self.hf_generate(body, pieces)
                return
        elif provider == "llama2raw":
            if set(body) != {"inputs", "parameters"} or not isinstance(body["inputs"], str):
                raise Refused(400, "raw format: inputs and parameters only")
            inputs = body["inputs"]
            if not inputs.startswith("<s>") or not inputs.endswith("[/INST]"):
                raise Refused(400, "raw format: a Llama 2 prompt is <s>[INST] ... [/INST]")
            head = inputs.rsplit("[/INST]", 1)[0]
            cut = max(head.rfind(m) + len(m) if head.rfind(m) >= 0 else 0 for m in ("<</SYS>>", "<<SYS>>", "[INST]"))
            text = head[cut:].strip()
            pieces = ("echo: " + text).split()
            usage = {"prompt": words(inputs), "completion": len(pieces)}
            with LOCK:
                USAGE.append({"provider": "llama2raw", "stream": False, **usage})
            self.send_json(200, {"data": [{"generated_text": inputs + " " + " ".join(pieces)}],
                                 "usage": {"prompt_tokens": usage["prompt"], "completion_tokens": usage["completion"]}})
            return
        elif provider == "cohere":
            if headers.get("authorization") != f"Bearer {key}":
                raise Refused(401, "invalid api token")
            completions = url.path.endswith("/v1/generate")
            if not completions and not url.path.endswith("/v1/chat"):
                raise Refused(404, "not found")
            text, prompt_words = check_cohere(body, completions)
        elif provider == "ollama":
            generate = url.path.endswith("/api/generate")
            if not generate and not url.path.endswith("/api/chat"):
                raise Refused(404, "404 page not found")
            completions = generate
            text, prompt_words = check_ollama(body, generate)
        elif provider == "bedrock":
            problem = verify_sigv4(self, self.raw_body)
            if problem:
                raise Refused(403, problem)
            streaming = url.path.endswith("/converse-stream")
            if not streaming and not url.path.endswith("/converse"):
                raise Refused(404, "unknown operation")
            completions = False
            text, prompt_words = check_converse(body)
            body["stream"] = streaming
        elif provider == "gemini":
            if headers.get("x-goog-api-key") != key:
                raise Refused(403, "API key not valid. Please pass a valid API key.")
            streaming = url.path.endswith(":streamGenerateContent")
            if not streaming and not url.path.endswith(":generateContent"):
                raise Refused(404, "method not found")
            if streaming and parse_qs(url.query).get("alt") != ["sse"]:
                raise Refused(400, "this stand-in streams server-sent events only (alt=sse)")
            completions = False
            text, prompt_words = check_gemini(body)
            body["stream"] = streaming
        else:
            raise Refused(404, f"no provider {provider}")
        if "RATE-LIMIT" in text:
            raise Refused(429, "Rate limit reached for requests", "requests")
        pieces = ("echo: " + text).split()
        system = " ".join(str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system")
        if "VERBATIM" in system:
            # Answers with the user's text exactly (the transformer tests' instructions).
            pieces = [text]
        usage = {"prompt": prompt_words + 7, "completion": len(pieces)}
        with LOCK:
            USAGE.append({"provider": provider, "stream": bool(body.get("stream")), **usage})
        if body.get("stream") and provider == "bedrock":
            self.bedrock_stream(pieces, usage, cut="CUT-STREAM" in text)
        elif provider == "ollama":
            self.ollama(body, pieces, usage, completions)
        elif provider == "cohere":
            self.cohere(body, pieces, usage, completions)
        elif body.get("stream"):
            self.stream(provider, body, pieces, usage, completions, cut="CUT-STREAM" in text)
        elif provider == "gemini":
            self.send_json(200, self.gemini_answer(pieces, usage, "STOP", usage["completion"]))
        elif provider == "bedrock":
            self.send_json(200, {"output": {"message": {"role": "assistant", "content": [{"text": " ".join(pieces)}]}},
                                 "stopReason": "end_turn", "metrics": {"latencyMs": 1},
                                 "usage": {"inputTokens": usage["prompt"], "outputTokens": usage["completion"],
                                           "totalTokens": usage["prompt"] + usage["completion"]}})
        elif provider == "anthropic":
            self.whole_anthropic(body, pieces, usage, completions)
        else:
            self.whole_openai(body, pieces, usage, completions)

    def whole_openai(self, body, pieces, usage, completions):
        text = " ".join(pieces)
        choice = {"index": 0, "finish_reason": "stop", "logprobs": None}
        if completions:
            choice["text"] = text
        else:
            choice["message"] = {"role": "assistant", "content": text}
        self.send_json(200, {
            "id": "chatcmpl-standin", "object": "text_completion" if completions else "chat.completion",
            "created": int(time.time()), "model": body["model"] + "-2024", "choices": [choice],
            "usage": {"prompt_tokens": usage["prompt"], "completion_tokens": usage["completion"],
                      "total_tokens": usage["prompt"] + usage["completion"]},
        }, extra=[("set-cookie", "provider-session=1")])

    def whole_anthropic(self, body, pieces, usage, completions):
        text = " ".join(pieces)
        if completions:
            self.send_json(200, {"type": "completion", "id": "compl_standin", "completion": text,
                                 "stop_reason": "stop_sequence", "model": body["model"]})
            return
        self.send_json(200, {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": body["model"] + "-2024",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt"], "output_tokens": usage["completion"]},
        })

    def hf_generate(self, body, pieces):
        details = {"finish_reason": "eos_token", "generated_tokens": len(pieces), "seed": None}
        text = " ".join(pieces)
        if not body.get("stream"):
            self.send_json(200, [{"generated_text": text, "details": details}])
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for at, piece in enumerate(pieces):
            part = piece if at == len(pieces) - 1 else piece + " "
            event = {"token": {"id": at, "text": part, "logprob": 0.0, "special": False},
                     "generated_text": None, "details": None}
            self.chunk(f"data:{json.dumps(event)}\n\n".encode())
        last = {"token": {"id": 2, "text": "</s>", "logprob": 0.0, "special": True},
                "generated_text": text, "details": details}
        self.chunk(f"data:{json.dumps(last)}\n\n".encode())
        self.wfile.write(b"0\r\n\r\n")

    def cohere(self, body, pieces, usage, generate):
        meta = {"billed_units": {"input_tokens": usage["prompt"], "output_tokens": usage["completion"]}}
        text = " ".join(pieces)
        whole = ({"id": "gen-1", "prompt": body["prompt"], "meta": meta,
                  "generations": [{"id": "g", "text": text, "finish_reason": "COMPLETE"}]} if generate else
                 {"response_id": "r-1", "text": text, "generation_id": "gen-1", "finish_reason": "COMPLETE",
                  "meta": meta})
        if not body["stream"]:
            self.send_json(200, whole)
            return
        self.send_response(200)
        self.send_header("content-type", "application/stream+json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        lines = [] if generate else [{"is_finished": False, "event_type": "stream-start", "generation_id": "gen-1"}]
        for at, piece in enumerate(pieces):
            part = piece if at == len(pieces) - 1 else piece + " "
            lines.append({"is_finished": False, "text": part} if generate else
                         {"is_finished": False, "event_type": "text-generation", "text": part})
        end = {"is_finished": True, "finish_reason": "COMPLETE", "response": whole}
        if not generate:
            end["event_type"] = "stream-end"
        lines.append(end)
        for line in lines:
            encoded = (json.dumps(line) + "\n").encode()
            self.chunk(encoded[:11])
            self.chunk(encoded[11:])
        self.wfile.write(b"0\r\n\r\n")

    def ollama(self, body, pieces, usage, generate):
        def line(text, done):
            out = {"model": body["model"], "created_at": "2026-11-30T00:00:00Z", "done": done}
            if generate:
                out["response"] = text
            else:
                out["message"] = {"role": "assistant", "content": text}
            if done:
                out.update({"done_reason": "stop", "prompt_eval_count": usage["prompt"],
                            "eval_count": usage["completion"]})
            return out
        if not body["stream"]:
            self.send_json(200, line(" ".join(pieces), True))
            return
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for at, piece in enumerate(pieces):
            text = piece if at == len(pieces) - 1 else piece + " "
            encoded = (json.dumps(line(text, False)) + "\n").encode()
            self.chunk(encoded[:9])
            self.chunk(encoded[9:])
        self.chunk((json.dumps(line("", True)) + "\n").encode())
        self.wfile.write(b"0\r\n\r\n")

    def bedrock_stream(self, pieces, usage, cut):
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        frames = [aws_frame("messageStart", {"role": "assistant"})]
        for at, piece in enumerate(pieces):
            text = piece if at == len(pieces) - 1 else piece + " "
            frames.append(aws_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}}))
        frames += [aws_frame("contentBlockStop", {"contentBlockIndex": 0}),
                   aws_frame("messageStop", {"stopReason": "end_turn"}),
                   aws_frame("metadata", {"usage": {"inputTokens": usage["prompt"], "outputTokens": usage["completion"],
                                                    "totalTokens": usage["prompt"] + usage["completion"]},
                                          "metrics": {"latencyMs": 1}})]
        for at, frame in enumerate(frames):
            # Frames split across writes as networks split them.
            self.chunk(frame[:7])
            self.chunk(frame[7:])
            if cut and at >= 3:
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
        self.wfile.write(b"0\r\n\r\n")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream(self, provider, body, pieces, usage, completions, cut):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        if provider == "gemini":
            events = self.gemini_events(pieces, usage)
        elif provider == "anthropic":
            events = self.anthropic_completion_events(body, pieces) if completions else \
                self.anthropic_events(body, pieces, usage)
        else:
            events = self.openai_events(provider, body, pieces, usage, completions)
        sent_pieces = 0
        for name, data in events:
            frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
            # Events split across writes as networks split them.
            encoded = frame.encode()
            middle = len(encoded) // 2
            self.chunk(encoded[:middle])
            self.chunk(encoded[middle:])
            if any(piece in data for piece in pieces):
                sent_pieces += 1
            if cut and sent_pieces >= 4:
                # Broken off: no last chunk, the connection closed.
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
        self.wfile.write(b"0\r\n\r\n")

    def openai_events(self, provider, body, pieces, usage, completions):
        model = body["model"] + "-2024"
        base = {"id": "chatcmpl-standin", "object": "text_completion" if completions else "chat.completion.chunk",
                "created": int(time.time()), "model": model}
        if not completions:
            yield "", json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                       "finish_reason": None}]})
        for at, piece in enumerate(pieces):
            text = piece if at == len(pieces) - 1 else piece + " "
            choice = {"index": 0, "text": text} if completions else {"index": 0, "delta": {"content": text}}
            yield "", json.dumps({**base, "choices": [{**choice, "finish_reason": None}]})
        totals = {"prompt_tokens": usage["prompt"], "completion_tokens": usage["completion"],
                  "total_tokens": usage["prompt"] + usage["completion"]}
        last = {"index": 0, "text": ""} if completions else {"index": 0, "delta": {}}
        if provider == "mistral":
            # Mistral puts usage on its last chunk, asked or not.
            yield "", json.dumps({**base, "choices": [{**last, "finish_reason": "stop"}], "usage": totals})
        else:
            yield "", json.dumps({**base, "choices": [{**last, "finish_reason": "stop"}]})
        if provider != "mistral" and (body.get("stream_options") or {}).get("include_usage"):
            yield "", json.dumps({**base, "choices": [], "usage": {
                "prompt_tokens": usage["prompt"], "completion_tokens": usage["completion"],
                "total_tokens": usage["prompt"] + usage["completion"]}})
        yield "", "[DONE]"

    def gemini_answer(self, pieces, usage, finish, sent):
        candidate = {"content": {"role": "model", "parts": [{"text": " ".join(pieces)}]}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "modelVersion": "gemini-1.5-pro-002", "responseId": "resp-standin",
                "usageMetadata": {"promptTokenCount": usage["prompt"], "candidatesTokenCount": sent,
                                  "totalTokenCount": usage["prompt"] + sent}}

    def gemini_events(self, pieces, usage):
        for at, piece in enumerate(pieces):
            text = piece if at == len(pieces) - 1 else piece + " "
            last = at == len(pieces) - 1
            answer = self.gemini_answer([text], usage, "STOP" if last else None, at + 1)
            answer["candidates"][0]["content"]["parts"] = [{"text": text}]
            yield "", json.dumps(answer)

    def anthropic_completion_events(self, body, pieces):
        # The legacy Text Completions stream: `completion` events, the last
        # with its stop reason.
        for at, piece in enumerate(pieces):
            text = (" " if at else "") + piece
            yield "completion", json.dumps({"type": "completion", "completion": text, "stop_reason": None,
                                            "model": body["model"]})
        yield "completion", json.dumps({"type": "completion", "completion": "", "stop_reason": "stop_sequence",
                                        "model": body["model"]})

    def anthropic_events(self, body, pieces, usage):
        model = body["model"] + "-2024"
        yield "message_start", json.dumps({"type": "message_start", "message": {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt"], "output_tokens": 1}}})
        yield "content_block_start", json.dumps({"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}})
        yield "ping", json.dumps({"type": "ping"})
        for at, piece in enumerate(pieces):
            text = piece if at == len(pieces) - 1 else piece + " "
            yield "content_block_delta", json.dumps({"type": "content_block_delta", "index": 0,
                                                     "delta": {"type": "text_delta", "text": text}})
        yield "content_block_stop", json.dumps({"type": "content_block_stop", "index": 0})
        yield "message_delta", json.dumps({"type": "message_delta",
                                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                           "usage": {"output_tokens": usage["completion"]}})
        yield "message_stop", json.dumps({"type": "message_stop"})


def main():
    port = int(sys.argv[1])
    for pair in sys.argv[2:]:
        provider, key = pair.split("=", 1)
        KEYS[provider] = key
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
