"""A fake OpenAI-compatible upstream for the client matrix
(tests/tests/e2e/clients.rs): it answers /v1/chat/completions,
/v1/embeddings and the Responses API (/v1/responses; GET and DELETE
/v1/responses/{id}) in OpenAI's wire format (JSON, or server-sent events when
`stream` is true) and records every request it gets together with what it
answered, so a check can compare both sides: what the upstream received
from unigen, and what the client received from unigen.

    python fake_upstream.py [--port 0]

prints `fake upstream listening on http://127.0.0.1:PORT` once it accepts
connections. Control endpoints (not part of OpenAI's API):

    GET  /__recorded   {"requests": [{"method", "path", "headers", "body", "response"}]}
                       `response` is the JSON body sent, or for a stream the
                       list of chunk objects sent (without the [DONE] marker)
    POST /__reset      forgets the recorded requests

Answers are deterministic functions of the request:
- tools given (tool_choice not "none", no tool result after the last user
  message): one call of the named or first tool, arguments filled from its
  JSON schema, `content: null`, finish_reason `tool_calls`; legacy
  `functions` likewise with `function_call` and finish_reason `function_call`;
- a last user message containing "please refuse": a refusal;
- `response_format` json_schema: JSON filled from the schema; json_object:
  a JSON object;
- otherwise `Upstream reply to: <last user text>` (choice i > 0 gets
  ` (choice i)` appended), or after tool results a line per result.
`n` choices, `logprobs`/`top_logprobs`, `system_fingerprint` and
`service_tier` are answered as OpenAI does. Stdlib only.
"""
import argparse
import base64
import json
import re
import struct
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CREATED = 1767225600
FINGERPRINT = "fp_fake_upstream"
DEFAULT_DIMENSIONS = 1536

_lock = threading.RLock()
_recorded = []
_counter = [0]


def next_id(prefix):
    with _lock:
        _counter[0] += 1
        return f"{prefix}{_counter[0]:06d}"


def words(text):
    return re.findall(r"\S+", text or "")


def text_of(content):
    """A message's text: a string, or the text parts of a content array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def fill(schema, defs=None, name="value"):
    """A value valid for a (JSON-schema) schema, deterministic."""
    defs = defs if defs is not None else schema.get("$defs", schema.get("definitions", {}))
    if "$ref" in schema:
        return fill(defs[schema["$ref"].split("/")[-1]], defs, name)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return fill(options[0], defs, name)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {key: fill(sub, defs, key) for key, sub in properties.items()}
    if kind == "array":
        return [fill(schema.get("items", {"type": "string"}), defs, name)]
    if kind == "integer":
        return max(3, schema.get("minimum", 3))
    if kind == "number":
        return 2.5
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"upstream {name}"


def prompt_tokens(body):
    return sum(len(words(text_of(m.get("content")))) + 3 for m in body.get("messages", []))


def logprobs_for(text, top):
    entries = []
    for i, token in enumerate(re.findall(r"\s*\S+", text)):
        entries.append({
            "token": token,
            "logprob": -0.25 * (i % 4),
            "bytes": list(token.encode()),
            "top_logprobs": [
                {"token": token if k == 0 else f"{token}#{k}", "logprob": -0.25 * (i % 4) - k, "bytes": list((token if k == 0 else f"{token}#{k}").encode())}
                for k in range(top)
            ],
        })
    return entries


def plan_chat(body):
    """What each choice answers: a list of dicts (content, tool_calls, function_call, refusal, finish)."""
    messages = body.get("messages", [])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    user_text = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
    tool_results = [m for m in messages[last_user + 1:] if m.get("role") in ("tool", "function")]
    n = body.get("n") or 1
    tools, choice = body.get("tools"), body.get("tool_choice")
    functions = body.get("functions")
    response_format = body.get("response_format") or {}
    plans = []
    for index in range(n):
        suffix = f" (choice {index})" if index else ""
        if tools and choice != "none" and not tool_results:
            named = choice["function"]["name"] if isinstance(choice, dict) else None
            tool = next((t for t in tools if t["function"]["name"] == named), tools[0])
            arguments = json.dumps(fill(tool["function"].get("parameters", {"type": "object", "properties": {}})))
            call = {"id": f"call_upstream_{index}", "type": "function",
                    "function": {"name": tool["function"]["name"], "arguments": arguments}}
            plans.append({"content": None, "tool_calls": [call], "finish": "tool_calls"})
        elif functions and body.get("function_call") != "none" and not tool_results:
            named = body["function_call"].get("name") if isinstance(body.get("function_call"), dict) else None
            function = next((f for f in functions if f["name"] == named), functions[0])
            arguments = json.dumps(fill(function.get("parameters", {"type": "object", "properties": {}})))
            plans.append({"content": None, "function_call": {"name": function["name"], "arguments": arguments},
                          "finish": "function_call"})
        elif "please refuse" in user_text:
            plans.append({"content": None, "refusal": "I can't help with that.", "finish": "stop"})
        elif response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema", {}).get("schema", {})
            plans.append({"content": json.dumps(fill(schema)), "finish": "stop"})
        elif response_format.get("type") == "json_object":
            plans.append({"content": json.dumps({"answer": f"Upstream reply to: {user_text}{suffix}"}), "finish": "stop"})
        elif tool_results:
            lines = [f"tool {m.get('tool_call_id') or m.get('name')} said: {text_of(m.get('content'))}" for m in tool_results]
            plans.append({"content": "\n".join(lines) + suffix, "finish": "stop"})
        else:
            plans.append({"content": f"Upstream reply to: {user_text}{suffix}", "finish": "stop"})
    return plans


def usage_of(body, plans):
    completion = sum(len(words(p.get("content") or p.get("refusal") or "")) + (8 if p.get("tool_calls") or p.get("function_call") else 0)
                     for p in plans)
    prompt = prompt_tokens(body)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def chat_completion(body):
    plans = plan_chat(body)
    top = body.get("top_logprobs") or 0
    choices = []
    for index, plan in enumerate(plans):
        message = {"role": "assistant", "content": plan["content"], "refusal": plan.get("refusal"), "annotations": []}
        if plan.get("tool_calls"):
            message["tool_calls"] = plan["tool_calls"]
        if plan.get("function_call"):
            message["function_call"] = plan["function_call"]
        logprobs = None
        if body.get("logprobs"):
            logprobs = {"content": logprobs_for(plan["content"] or "", top), "refusal": None}
        choices.append({"index": index, "message": message, "logprobs": logprobs, "finish_reason": plan["finish"]})
    return {"id": next_id("chatcmpl-upstream"), "object": "chat.completion", "created": CREATED,
            "model": body.get("model"), "choices": choices, "usage": usage_of(body, plans),
            "service_tier": body.get("service_tier") or "default", "system_fingerprint": FINGERPRINT}


def pieces(text, size=7):
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def chat_chunks(body):
    plans = plan_chat(body)
    top = body.get("top_logprobs") or 0
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {"id": next_id("chatcmpl-upstream"), "object": "chat.completion.chunk", "created": CREATED,
            "model": body.get("model"), "service_tier": body.get("service_tier") or "default",
            "system_fingerprint": FINGERPRINT}
    chunks = []

    def chunk(index, delta, finish=None, logprobs=None):
        c = dict(base, choices=[{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])
        if include_usage:
            c["usage"] = None
        chunks.append(c)

    for index, plan in enumerate(plans):
        first = {"role": "assistant", "content": "" if plan["content"] is not None else None, "refusal": None}
        chunk(index, first, logprobs={"content": [], "refusal": None} if body.get("logprobs") else None)
        if plan.get("tool_calls"):
            for position, call in enumerate(plan["tool_calls"]):
                chunk(index, {"tool_calls": [{"index": position, "id": call["id"], "type": "function",
                                              "function": {"name": call["function"]["name"], "arguments": ""}}]})
                for part in pieces(call["function"]["arguments"]):
                    chunk(index, {"tool_calls": [{"index": position, "function": {"arguments": part}}]})
        elif plan.get("function_call"):
            call = plan["function_call"]
            chunk(index, {"function_call": {"name": call["name"], "arguments": ""}})
            for part in pieces(call["arguments"]):
                chunk(index, {"function_call": {"arguments": part}})
        elif plan.get("refusal"):
            for part in pieces(plan["refusal"]):
                chunk(index, {"refusal": part})
        else:
            for token in re.findall(r"\s*\S+", plan["content"]) or [""]:
                logprobs = {"content": logprobs_for(token, top), "refusal": None} if body.get("logprobs") else None
                chunk(index, {"content": token}, logprobs=logprobs)
        chunk(index, {}, finish=plan["finish"])
    if include_usage:
        chunks.append(dict(base, choices=[], usage=usage_of(body, plans)))
    return chunks


def vector(item, dimensions):
    """Values exactly representable in float32, so every path compares equal."""
    seed = zlib.crc32(json.dumps(item).encode())
    return [((seed >> (k % 24)) % 64 - 32 + k % 7) / 64.0 for k in range(dimensions)]


def embeddings(body):
    raw = body.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw)):
        items = [raw]
    else:
        items = raw or []
    dimensions = body.get("dimensions") or DEFAULT_DIMENSIONS
    data, tokens = [], 0
    for index, item in enumerate(items):
        values = vector(item, dimensions)
        tokens += len(item) if isinstance(item, list) else len(words(item))
        if body.get("encoding_format") == "base64":
            encoded = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
        else:
            encoded = values
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    return {"object": "list", "data": data, "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


# ---- The Responses API (POST /v1/responses, GET/DELETE /v1/responses/{id}) ----
# Responses are held (unless `store` is false) so that `previous_response_id`
# continues one, as OpenAI's does; an unknown one is OpenAI's 400.

_held = {}


def response_items(value):
    """`input` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value or [])


def item_text(item):
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def plan_response(body):
    """One output item of a Responses request: a call of the first (or the
    named) function tool, or text answering the last user message or the
    function call outputs after it."""
    items = response_items(body.get("input"))
    last_user = max((i for i, it in enumerate(items) if it.get("role") == "user"), default=-1)
    user_text = item_text(items[last_user]) if last_user >= 0 else ""
    outputs = [it for it in items[last_user + 1:] if it.get("type") == "function_call_output"]
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    choice = body.get("tool_choice")
    if tools and choice != "none" and not outputs:
        named = choice.get("name") if isinstance(choice, dict) else None
        tool = next((t for t in tools if t["name"] == named), tools[0])
        arguments = json.dumps(fill(tool.get("parameters") or {"type": "object", "properties": {}}))
        return {"type": "function_call", "id": next_id("fc_upstream"), "call_id": next_id("call_upstream"),
                "name": tool["name"], "arguments": arguments, "status": "completed"}
    if outputs:
        text = "\n".join(f"tool {o.get('call_id')} said: {o.get('output')}" for o in outputs)
    else:
        text = f"Upstream reply to: {user_text}"
    return {"type": "message", "id": next_id("msg_upstream"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def response_object(body, response_id, status, output, usage):
    return {
        "id": response_id, "object": "response", "created_at": CREATED, "status": status,
        "background": False, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None, "model": body.get("model"), "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "service_tier": "default",
        "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "top_p": body.get("top_p", 1.0), "truncation": "disabled",
        "usage": usage, "user": None, "metadata": body.get("metadata") or {},
    }


def response_usage(body, item):
    prompt = sum(len(words(item_text(it))) + 3 for it in response_items(body.get("input")))
    said = item.get("arguments") or item_text(item)
    completion = len(words(said)) + (8 if item["type"] == "function_call" else 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def create_response(body):
    """The `response`, or an OpenAI error (status, body)."""
    previous = body.get("previous_response_id")
    if previous is not None and previous not in _held:
        return 400, {"error": {"message": f"Previous response with id '{previous}' not found.",
                               "type": "invalid_request_error", "param": "previous_response_id",
                               "code": "previous_response_not_found"}}
    item = plan_response(body)
    response = response_object(body, next_id("resp_upstream"), "completed", [item], response_usage(body, item))
    if body.get("store", True):
        with _lock:
            _held[response["id"]] = response
    return 200, response


def response_events(response, body):
    """OpenAI's typed events of a whole `response`, numbered from 0."""
    events = []

    def emit(kind, **fields):
        events.append(dict(type=kind, sequence_number=len(events), **fields))

    start = dict(response, status="in_progress", output=[], usage=None)
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        if item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item=dict(item, arguments="", status="in_progress"))
            for part in pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=part)
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 name=item["name"], arguments=item["arguments"])
        else:
            text = item["content"][0]["text"]
            emit("response.output_item.added", output_index=index, item=dict(item, content=[], status="in_progress"))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)
            for token in re.findall(r"\s*\S+", text) or [""]:
                emit("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=token, logprobs=[])
            emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                 text=text, logprobs=[])
            emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                 part=item["content"][0])
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return events


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", next_id("req_upstream"))
        self.send_header("openai-processing-ms", "3")
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, chunks):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", next_id("req_upstream"))
        self.end_headers()
        for event in [json.dumps(c) for c in chunks] + ["[DONE]"]:
            data = f"data: {event}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def send_typed_events(self, events):
        """Server-sent events with `event:` names (the Responses API's)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", next_id("req_upstream"))
        self.end_headers()
        for event in events:
            data = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return {"__raw__": raw[:2000].decode("latin-1")}

    def record(self, body, response):
        with _lock:
            _recorded.append({"method": self.command, "path": self.path,
                              "headers": {k.lower(): v for k, v in self.headers.items()},
                              "body": body, "response": response})

    def do_GET(self):
        if self.path == "/__recorded":
            with _lock:
                recorded = list(_recorded)
            return self.send_json(200, {"requests": recorded})
        if self.path == "/health":
            return self.send_json(200, {"ok": True})
        if self.path.startswith("/v1/responses/"):
            with _lock:
                held = _held.get(self.path.rsplit("/", 1)[1])
            answer = held or {"error": {"message": "No response found.", "type": "invalid_request_error",
                                        "param": None, "code": None}}
            self.record(None, answer)
            return self.send_json(200 if held else 404, answer)
        self.record(None, None)
        self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error",
                                       "param": None, "code": None}})

    def do_DELETE(self):
        if self.path.startswith("/v1/responses/"):
            response_id = self.path.rsplit("/", 1)[1]
            with _lock:
                held = _held.pop(response_id, None)
            answer = {"id": response_id, "object": "response.deleted", "deleted": True} if held else \
                {"error": {"message": "No response found.", "type": "invalid_request_error", "param": None, "code": None}}
            self.record(None, answer)
            return self.send_json(200 if held else 404, answer)
        self.record(None, None)
        self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error",
                                       "param": None, "code": None}})

    def do_POST(self):
        body = self.read_body()
        if self.path == "/__reset":
            with _lock:
                _recorded.clear()
            return self.send_json(200, {"ok": True})
        if self.path == "/v1/chat/completions" and isinstance(body, dict):
            if body.get("stream"):
                chunks = chat_chunks(body)
                self.record(body, chunks)
                return self.send_events(chunks)
            answer = chat_completion(body)
            self.record(body, answer)
            return self.send_json(200, answer)
        if self.path == "/v1/responses" and isinstance(body, dict):
            status, answer = create_response(body)
            if status == 200 and body.get("stream"):
                events = response_events(answer, body)
                self.record(body, events)
                return self.send_typed_events(events)
            self.record(body, answer)
            return self.send_json(status, answer)
        if self.path == "/v1/embeddings" and isinstance(body, dict):
            answer = embeddings(body)
            self.record(body, answer)
            return self.send_json(200, answer)
        error = {"error": {"message": f"the fake upstream has no {self.path}", "type": "invalid_request_error",
                           "param": None, "code": "unknown_url"}}
        self.record(body, error)
        self.send_json(404, error)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"fake upstream listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
