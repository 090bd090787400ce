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

The answer echoes the last user message ("echo: <text>"), one streamed
piece per word. Usage: prompt tokens are the words of every message plus
7, completion tokens the answer's words. The last user message steers the
provider: "RATE-LIMIT" answers 429 in the provider's error format,
"CUT-STREAM" breaks a stream off after three pieces; so does the path:
/busy/<provider>/... always answers 429, /slow/<provider>/... waits 3 s. A request that breaks
the format gets 400 in the provider's error format, naming the problem.

GET /_usage lists the usage each answer reported, in order; GET /_requests
the request bodies received. Usage: llm.py PORT [KEY...] (keys as
provider=key). Prints "ready" once listening.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEYS = {"openai": "sk-openai", "azure": "azure-key", "anthropic": "sk-ant", "mistral": "mistral-key"}
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
        # /busy/<provider>/...: always 429; /slow/<provider>/...: 3 s before any answer.
        mode = url.path.split("/")[1] if url.path.split("/")[1] in ("busy", "slow") else None
        if mode:
            url = url._replace(path=url.path[len(mode) + 1:])
        provider = url.path.split("/")[1]
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
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
        else:
            raise Refused(404, f"no provider {provider}")
        if "RATE-LIMIT" in text:
            raise Refused(429, "Rate limit reached for requests", "requests")
        pieces = ("echo: " + text).split()
        usage = {"prompt": prompt_words + 7, "completion": len(pieces)}
        with LOCK:
            USAGE.append({"provider": provider, "stream": bool(body.get("stream")), **usage})
        if body.get("stream"):
            self.stream(provider, body, pieces, usage, completions, cut="CUT-STREAM" in text)
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

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream(self, provider, body, pieces, usage, completions, cut):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        if provider == "anthropic":
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
            if '"content"' in data or "text_delta" in data or '"completion"' in data:
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
