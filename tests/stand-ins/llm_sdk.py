"""Official LLM SDKs, unmodified, as clients of ai-proxy routes
(tests/tests/plugins_ai.rs): the `openai` package (chat and completions,
whole and streamed) and the `anthropic` package (messages, whole and
streamed). Reads one JSON command from argv[1] (or, with `--serve`, one a line from stdin
until it closes), prints one JSON result (a line):

  {"sdk": "openai"|"anthropic", "base_url": ..., "api_key": ..., "model": ...,
   "kind": "chat"|"completions", "stream": bool, "include_usage": bool,
   "messages": [...], "prompt": ..., "max_tokens": n}

Result: {"content", "finish_reason", "usage", "id", "model", "chunks",
"headers"} or {"error": {"status", "message", "type"}}.
"""

import json
import sys


def run_openai(command):
    import openai

    client = openai.OpenAI(base_url=command["base_url"], api_key=command.get("api_key", "client-key"),
                           max_retries=0, timeout=20)
    kind = command.get("kind", "chat")
    extra = {}
    if command.get("include_usage"):
        extra["stream_options"] = {"include_usage": True}
    try:
        if kind == "completions":
            create = client.completions.with_raw_response.create
            raw = create(model=command["model"], prompt=command["prompt"], stream=command.get("stream", False),
                         **extra)
        else:
            create = client.chat.completions.with_raw_response.create
            raw = create(model=command["model"], messages=command["messages"], stream=command.get("stream", False),
                         **extra)
    except openai.APIStatusError as error:
        return {"error": {"status": error.status_code, "message": error.message,
                          "body": error.body if isinstance(error.body, (dict, list, str)) else None}}
    headers = {k.lower(): v for k, v in raw.headers.items()}
    result = raw.parse()
    if not command.get("stream"):
        choice = result.choices[0]
        content = choice.text if kind == "completions" else choice.message.content
        usage = result.usage.model_dump() if result.usage else None
        return {"content": content, "finish_reason": choice.finish_reason, "usage": usage, "id": result.id,
                "model": result.model, "chunks": 0, "headers": headers}
    text, finish, usage, chunks, ids = [], None, None, 0, set()
    try:
        for chunk in result:
            chunks += 1
            ids.add(chunk.id)
            if chunk.usage:
                usage = chunk.usage.model_dump()
            for choice in chunk.choices:
                piece = choice.text if kind == "completions" else (choice.delta.content if choice.delta else None)
                if piece:
                    text.append(piece)
                if choice.finish_reason:
                    finish = choice.finish_reason
    except Exception as error:  # a stream broken off mid-way
        return {"content": "".join(text), "finish_reason": finish, "usage": usage, "chunks": chunks,
                "broken": type(error).__name__, "headers": headers}
    return {"content": "".join(text), "finish_reason": finish, "usage": usage, "chunks": chunks,
            "ids": sorted(i for i in ids if i), "headers": headers}


def run_anthropic(command):
    import anthropic

    client = anthropic.Anthropic(base_url=command["base_url"], api_key=command.get("api_key", "client-key"),
                                 max_retries=0, timeout=20)
    try:
        if command.get("stream"):
            text, usage = [], None
            with client.messages.stream(model=command["model"], max_tokens=command.get("max_tokens", 64),
                                        messages=command["messages"]) as stream:
                for piece in stream.text_stream:
                    text.append(piece)
                message = stream.get_final_message()
            return {"content": "".join(text), "finish_reason": message.stop_reason,
                    "usage": message.usage.model_dump(), "id": message.id, "model": message.model}
        raw = client.messages.with_raw_response.create(model=command["model"],
                                                       max_tokens=command.get("max_tokens", 64),
                                                       messages=command["messages"])
        message = raw.parse()
        return {"content": "".join(b.text for b in message.content if b.type == "text"),
                "finish_reason": message.stop_reason, "usage": message.usage.model_dump(), "id": message.id,
                "model": message.model, "headers": {k.lower(): v for k, v in raw.headers.items()}}
    except anthropic.APIStatusError as error:
        return {"error": {"status": error.status_code, "message": error.message,
                          "body": error.body if isinstance(error.body, (dict, list, str)) else None}}


def run(command):
    try:
        return run_anthropic(command) if command["sdk"] == "anthropic" else run_openai(command)
    except Exception as error:  # reported to the test, never the end of the server
        return {"error": {"status": None, "message": f"{type(error).__name__}: {error}"}}


def main():
    if sys.argv[1] != "--serve":
        print(json.dumps(run(json.loads(sys.argv[1])), default=str))
        return
    # One process for a whole test: the SDKs imported once, one command a line.
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line)), default=str), flush=True)


if __name__ == "__main__":
    main()
