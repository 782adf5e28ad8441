"""The official OpenAI Python SDK (tests/sdk/requirements.txt) against a
running unigen API, unchanged except for its base URL and key. Run by the
end-to-end test `clients::the_openai_python_sdk_works_unchanged`, which
starts the API with a fake upstream (../fake_upstream.py); see
../sdkcheck.py for the environment. Every flow runs; each failed step is
printed with the bodies involved, and the exit status is non-zero when
any failed.

Flows `upstream_*` use a model routed to the fake upstream and assert both
sides: what the upstream received and what the client received. Flows
`offline_*` use the built-in local models by their ids; `aliases` runs the
same calls naming OpenAI models (gpt-4o-mini, text-embedding-3-small,
dall-e-2, tts-1, whisper-1, ...), one failed step per alias.
"""
import base64
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from sdkcheck import (ENV, INTERPRETED, Checks, Upstream, decode_embedding, headers_errors,  # noqa: E402
                      make_png, plain_message, png_size, schema_errors, upstream_delta_tool_calls)

CHAT = ENV["FAKE_CHAT_MODEL"]
EMBED = ENV["FAKE_EMBED_MODEL"]
upstream = Upstream()
client = openai.OpenAI(max_retries=0, timeout=120)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["location", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}


class CalendarEvent(BaseModel):
    name: str
    date: str
    participants: list[str]
    attendees: int


def dump(value):
    return value.model_dump(exclude_unset=True) if hasattr(value, "model_dump") else value


def only(items, step, c):
    """The single recorded upstream request, or a failed step."""
    c.equal(f"{step}: the upstream got exactly one request", len(items), 1, recorded=items)
    return items[-1] if items else {"body": {}, "response": {}, "headers": {}}


def check_relayed_completion(c, step, completion, seen):
    got, sent = dump(completion), seen["response"]
    c.equal(f"{step}: upstream asked for the upstream model", seen["body"].get("model"), ENV["UPSTREAM_CHAT_MODEL"])
    c.equal(f"{step}: upstream got the upstream key", seen["headers"].get("authorization"),
            f"Bearer {ENV['UPSTREAM_API_KEY']}", headers=seen["headers"])
    c.check(f"{step}: the client's key never reaches the upstream",
            ENV["OPENAI_API_KEY"] not in json.dumps(seen["headers"]), headers=seen["headers"])
    c.equal(f"{step}: choices relayed whole", got.get("choices"), sent["choices"])
    c.check(f"{step}: our id", str(got.get("id", "")).startswith("chatcmpl-") and got.get("id") != sent["id"],
            client_id=got.get("id"), upstream_id=sent["id"])
    c.equal(f"{step}: our model id", got.get("model"), CHAT)
    c.equal(f"{step}: system_fingerprint relayed", got.get("system_fingerprint"), sent["system_fingerprint"])
    usage = got.get("usage") or {}
    c.equal(f"{step}: usage from the upstream's",
            {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
            {k: sent["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}, usage=usage)
    c.check(f"{step}: usage.credits_used", isinstance(usage.get("credits_used"), int), usage=usage)


def upstream_chat(c):
    upstream.reset()
    messages = [{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": "Hello upstream"}]
    reply = client.chat.completions.create(model=CHAT, messages=messages)
    seen = only(upstream.chats(), "chat", c)
    check_relayed_completion(c, "chat", reply, seen)
    c.equal("chat: content", reply.choices[0].message.content, "Upstream reply to: Hello upstream")
    c.equal("chat: developer message forwarded", seen["body"].get("messages"), messages)
    unsent = sorted(k for k in seen["body"] if k not in ("model", "messages", "stream"))
    c.equal("chat: no field the client did not send (no default temperature/max_tokens...)", unsent, [],
            upstream_body=seen["body"])
    c.check("chat: not streamed upstream", not seen["body"].get("stream"), upstream_body=seen["body"])


def collect(stream):
    return [dump(chunk) for chunk in stream]


def check_relayed_stream(c, step, chunks, seen, usage_asked):
    sent = seen["response"]
    c.equal(f"{step}: upstream got stream true", seen["body"].get("stream"), True, upstream_body=seen["body"])
    c.equal(f"{step}: upstream asked for usage", seen["body"].get("stream_options"), {"include_usage": True},
            upstream_body=seen["body"])
    got_choices = [ch for chunk in chunks for ch in chunk.get("choices", [])]
    sent_choices = [ch for chunk in sent for ch in chunk.get("choices", [])]
    c.equal(f"{step}: every delta relayed unchanged", [(ch["index"], ch["delta"]) for ch in got_choices],
            [(ch["index"], ch["delta"]) for ch in sent_choices])
    c.equal(f"{step}: finish reasons relayed", [(ch["index"], ch.get("finish_reason")) for ch in got_choices if ch.get("finish_reason")],
            [(ch["index"], ch["finish_reason"]) for ch in sent_choices if ch.get("finish_reason")])
    c.check(f"{step}: our model id on every chunk", all(chunk.get("model") == CHAT for chunk in chunks),
            models=sorted({chunk.get("model") for chunk in chunks}))
    ids = {chunk.get("id") for chunk in chunks}
    c.check(f"{step}: one id of ours", len(ids) == 1 and str(next(iter(ids))).startswith("chatcmpl-")
            and next(iter(ids)) != sent[0]["id"], ids=sorted(map(str, ids)))
    with_usage = [chunk for chunk in chunks if chunk.get("usage")]
    if usage_asked:
        upstream_usage = sent[-1]["usage"]
        usage = with_usage[-1]["usage"] if with_usage else {}
        c.check(f"{step}: the usage chunk comes last, from the upstream's usage",
                with_usage and with_usage[-1] is chunks[-1] and not chunks[-1].get("choices")
                and all(usage.get(k) == upstream_usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
                and isinstance(usage.get("credits_used"), int),
                usage_chunks=with_usage, upstream_usage=upstream_usage)
    else:
        c.equal(f"{step}: no usage chunk when the client did not ask for one", with_usage, [])


def upstream_stream(c):
    upstream.reset()
    chunks = collect(client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Stream from upstream please"}],
        stream=True, stream_options={"include_usage": True}))
    seen = only(upstream.chats(), "stream", c)
    check_relayed_stream(c, "stream with usage", chunks, seen, True)
    text = "".join(ch["delta"].get("content") or "" for chunk in chunks for ch in chunk.get("choices", []))
    c.equal("stream with usage: text", text, "Upstream reply to: Stream from upstream please")
    upstream.reset()
    chunks = collect(client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "No usage this time"}], stream=True))
    seen = only(upstream.chats(), "stream", c)
    check_relayed_stream(c, "stream without usage", chunks, seen, False)


def upstream_passthrough(c):
    upstream.reset()
    passthrough = {
        "tools": [WEATHER, TIME], "tool_choice": "none", "parallel_tool_calls": False,
        "response_format": {"type": "json_object"}, "n": 2, "logprobs": True, "top_logprobs": 2, "seed": 7,
        "logit_bias": {"50256": -100}, "metadata": {"trace": "client-matrix"}, "store": False,
        "reasoning_effort": "low", "service_tier": "default"}
    interpreted = {"temperature": 0.3, "top_p": 0.9, "max_completion_tokens": 40, "frequency_penalty": 0.1,
                   "presence_penalty": 0.2, "stop": ["\n\n"], "user": "user-123"}
    messages = [{"role": "developer", "content": "Reply in JSON."}, {"role": "user", "content": "Pass these through"}]
    reply = client.chat.completions.create(model=CHAT, messages=messages, **passthrough, **interpreted)
    seen = only(upstream.chats(), "pass-through", c)
    body = seen["body"]
    for key, value in passthrough.items():
        c.equal(f"pass-through: {key} forwarded unchanged", body.get(key, "<absent>"), value)
    for key, value in interpreted.items():
        c.equal(f"pass-through: {key} forwarded as sent", body.get(key, "<absent>"), value)
    c.check("pass-through: max_tokens not added next to max_completion_tokens", "max_tokens" not in body,
            upstream_body=body)
    c.equal("pass-through: model replaced", body.get("model"), ENV["UPSTREAM_CHAT_MODEL"])
    c.equal("pass-through: messages (developer role) forwarded", body.get("messages"), messages)
    c.equal("pass-through: both choices relayed", dump(reply).get("choices"), seen["response"]["choices"])
    upstream.reset()
    client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "max_tokens alone"}], max_tokens=30)
    body = only(upstream.chats(), "max_tokens", c)["body"]
    c.equal("max_tokens: forwarded alone", {k: body.get(k) for k in INTERPRETED if k in body}, {"max_tokens": 30},
            upstream_body=body)


def upstream_legacy_functions(c):
    upstream.reset()
    functions = [WEATHER["function"]]
    reply = client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        functions=functions, function_call={"name": "get_weather"})
    seen = only(upstream.chats(), "functions", c)
    c.equal("functions: forwarded unchanged", seen["body"].get("functions"), functions)
    c.equal("functions: function_call forwarded", seen["body"].get("function_call"), {"name": "get_weather"})
    c.equal("functions: function_call relayed", dump(reply.choices[0].message).get("function_call"),
            seen["response"]["choices"][0]["message"]["function_call"])
    c.equal("functions: finish_reason", reply.choices[0].finish_reason, "function_call")


def upstream_tools(c):
    upstream.reset()
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = client.chat.completions.create(model=CHAT, messages=messages, tools=[WEATHER, TIME],
                                           tool_choice="auto", parallel_tool_calls=True)
    seen = only(upstream.chats(), "tools", c)
    check_relayed_completion(c, "tool call", first, seen)
    message = first.choices[0].message
    c.equal("tool call: content null", message.content, None, message=message)
    c.equal("tool call: finish_reason", first.choices[0].finish_reason, "tool_calls")
    c.equal("tool call: tools forwarded", seen["body"].get("tools"), [WEATHER, TIME])
    c.equal("tool call: tool_choice forwarded", seen["body"].get("tool_choice"), "auto")
    c.equal("tool call: parallel_tool_calls forwarded", seen["body"].get("parallel_tool_calls"), True)
    calls = message.tool_calls or []
    if not c.check("tool call: one call", len(calls) == 1, message=message):
        return
    arguments = json.loads(calls[0].function.arguments)
    messages += [message.model_dump(exclude_unset=True, exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "18 degrees and sunny"}]
    upstream.reset()
    second = client.chat.completions.create(model=CHAT, messages=messages, tools=[WEATHER, TIME])
    seen = only(upstream.chats(), "tool result", c)
    forwarded = seen["body"].get("messages", [])
    c.equal("tool result: assistant tool_calls forwarded", forwarded[1:2] and forwarded[1].get("tool_calls"),
            [{"id": calls[0].id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(arguments)}}],
            forwarded=forwarded)
    c.equal("tool result: tool message forwarded", forwarded[2:3],
            [{"role": "tool", "tool_call_id": calls[0].id, "content": "18 degrees and sunny"}])
    c.equal("tool result: answer relayed", second.choices[0].message.content,
            f"tool {calls[0].id} said: 18 degrees and sunny")


def upstream_tools_stream(c):
    upstream.reset()
    chunks = collect(client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}}, stream=True))
    seen = only(upstream.chats(), "streamed tool call", c)
    check_relayed_stream(c, "streamed tool call", chunks, seen, False)
    got = [tc for chunk in chunks for ch in chunk.get("choices", []) for tc in (ch["delta"].get("tool_calls") or [])]
    c.equal("streamed tool call: delta.tool_calls relayed unchanged", got, upstream_delta_tool_calls(seen["response"]))
    # The SDK's streaming helper assembles the same call.
    upstream.reset()
    with client.chat.completions.stream(model=CHAT, messages=[{"role": "user", "content": "Time in Tokyo?"}],
                                        tools=[TIME]) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    sent = upstream.chats()[-1]["response"]
    expected = json.loads("".join(tc["function"].get("arguments") or "" for tc in upstream_delta_tool_calls(sent)))
    c.equal("stream helper: assembled tool call", (call.id, call.function.name, json.loads(call.function.arguments)),
            ("call_upstream_0", "get_time", expected))


def upstream_structured(c):
    upstream.reset()
    completion = client.chat.completions.parse(
        model=CHAT, messages=[{"role": "user", "content": "Alice and Bob go to a fair on Friday."}],
        response_format=CalendarEvent)
    seen = only(upstream.chats(), "parse", c)
    response_format = seen["body"].get("response_format", {})
    c.equal("parse: json_schema forwarded", response_format.get("type"), "json_schema", upstream_body=seen["body"])
    c.equal("parse: schema forwarded", (response_format.get("json_schema") or {}).get("schema"),
            openai.lib._pydantic.to_strict_json_schema(CalendarEvent))
    parsed = completion.choices[0].message.parsed
    c.equal("parse: parsed object", parsed and parsed.model_dump(),
            json.loads(seen["response"]["choices"][0]["message"]["content"]))


def upstream_choices(c):
    upstream.reset()
    reply = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Three ways"}],
                                           n=3, logprobs=True, top_logprobs=2)
    seen = only(upstream.chats(), "n=3", c)
    c.equal("n=3: upstream got n and logprobs", {k: seen["body"].get(k) for k in ("n", "logprobs", "top_logprobs")},
            {"n": 3, "logprobs": True, "top_logprobs": 2})
    check_relayed_completion(c, "n=3", reply, seen)
    c.equal("n=3: three choices", [ch.index for ch in reply.choices], [0, 1, 2])
    c.check("n=3: logprobs relayed", reply.choices[2].logprobs is not None and len(reply.choices[2].logprobs.content) > 2
            and len(reply.choices[2].logprobs.content[0].top_logprobs) == 2, choice=reply.choices[2])
    upstream.reset()
    chunks = collect(client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Two streams"}], n=2, logprobs=True, top_logprobs=1,
        stream=True, stream_options={"include_usage": True}))
    seen = only(upstream.chats(), "streamed n=2", c)
    check_relayed_stream(c, "streamed n=2", chunks, seen, True)
    for index in (0, 1):
        text = "".join(ch["delta"].get("content") or "" for chunk in chunks for ch in chunk.get("choices", [])
                       if ch["index"] == index)
        c.equal(f"streamed n=2: choice {index} text", text,
                "Upstream reply to: Two streams" + (f" (choice {index})" if index else ""))
    got_logprobs = [ch.get("logprobs") for chunk in chunks for ch in chunk.get("choices", [])]
    sent_logprobs = [ch.get("logprobs") for chunk in seen["response"] for ch in chunk.get("choices", [])]
    c.equal("streamed n=2: logprobs relayed", got_logprobs, sent_logprobs)


def upstream_refusal(c):
    upstream.reset()
    reply = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "please refuse this"}])
    seen = only(upstream.chats(), "refusal", c)
    check_relayed_completion(c, "refusal", reply, seen)
    c.equal("refusal: message.refusal", reply.choices[0].message.refusal, "I can't help with that.")
    c.equal("refusal: content null", reply.choices[0].message.content, None)


def upstream_embeddings(c):
    cases = [
        ("SDK default (base64)", {"input": ["a cat on a mat", "a dog on a log"]}),
        ("float", {"input": "one string", "encoding_format": "float"}),
        ("dimensions", {"input": ["short"], "dimensions": 8}),
        ("token ids", {"input": [[1820, 8415, 389], [5679, 389]]}),
        ("one token array", {"input": [1820, 8415, 389], "encoding_format": "float"}),
    ]
    for name, params in cases:
        upstream.reset()
        result = client.embeddings.create(model=EMBED, **params)
        seen = only(upstream.embeddings(), name, c)
        body = seen["body"]
        c.equal(f"embeddings {name}: input forwarded", body.get("input"), params["input"])
        c.equal(f"embeddings {name}: upstream model", body.get("model"), ENV["UPSTREAM_EMBED_MODEL"])
        c.check(f"embeddings {name}: encoding_format float or base64 upstream",
                body.get("encoding_format") in ("float", "base64"), upstream_body=body)
        if "dimensions" in params:
            c.equal(f"embeddings {name}: dimensions forwarded", body.get("dimensions"), params["dimensions"])
        expected = [decode_embedding(d["embedding"]) for d in seen["response"]["data"]]
        got = [list(d.embedding) for d in result.data]
        c.equal(f"embeddings {name}: vectors relayed", got, expected)
        c.equal(f"embeddings {name}: our model id", result.model, EMBED)
        c.equal(f"embeddings {name}: usage", result.usage.prompt_tokens, seen["response"]["usage"]["prompt_tokens"])
    # The wire format itself: base64 asked, base64 answered (decoded here, as the SDK does).
    raw = client.embeddings.with_raw_response.create(model=EMBED, input="raw", encoding_format="base64")
    data = json.loads(raw.text)["data"][0]["embedding"]
    c.check("embeddings base64: answered as a base64 string", isinstance(data, str), embedding=str(data)[:200])


def offline_chat(c):
    reply = client.chat.completions.create(model="local/echo", messages=[
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hello local"}])
    c.equal("chat local/echo (developer role accepted)", reply.choices[0].message.content, "Hello local")
    pieces, usage = [], None
    for chunk in client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "Streaming works token by token"}],
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    c.check("stream", "".join(pieces) == "Streaming works token by token" and len(pieces) > 3, pieces=pieces)
    c.check("stream usage", usage is not None and usage.completion_tokens == len(pieces), usage=usage)
    reply = client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "Twice"}], n=2)
    c.equal("n=2: two identical choices", [(ch.index, ch.message.content) for ch in reply.choices], [(0, "Twice"), (1, "Twice")])


def offline_tools(c):
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    reply = client.chat.completions.create(model="local/echo", messages=messages, tools=[WEATHER, TIME])
    message = reply.choices[0].message
    calls = message.tool_calls or []
    c.check("tool call: one call of the first tool", len(calls) == 1 and calls[0].id == "call_0" and calls[0].type == "function"
            and calls[0].function.name == "get_weather", message=message)
    c.equal("tool call: content null", message.content, None)
    c.equal("tool call: finish_reason", reply.choices[0].finish_reason, "tool_calls")
    if calls:
        arguments = json.loads(calls[0].function.arguments)
        c.equal("tool call: arguments valid for the schema", schema_errors(arguments, WEATHER["function"]["parameters"]), [],
                arguments=arguments)
    named = client.chat.completions.create(model="local/echo", messages=messages, tools=[WEATHER, TIME],
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
    call = (named.choices[0].message.tool_calls or [None])[0]
    c.check("tool_choice names the tool", call is not None and call.function.name == "get_time"
            and not schema_errors(json.loads(call.function.arguments), TIME["function"]["parameters"]), message=named.choices[0].message)
    none = client.chat.completions.create(model="local/echo", messages=messages, tools=[WEATHER], tool_choice="none")
    c.equal("tool_choice none: text", (none.choices[0].message.content, none.choices[0].message.tool_calls),
            ("What's the weather in Paris?", None))
    if not calls:
        return
    messages += [message.model_dump(exclude_unset=True, exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "18 degrees and sunny"}]
    final = client.chat.completions.create(model="local/echo", messages=messages, tools=[WEATHER, TIME])
    c.equal("tool result: text answer", (final.choices[0].message.content, final.choices[0].finish_reason),
            ("What's the weather in Paris?\n[get_weather] 18 degrees and sunny", "stop"))


def offline_tools_stream(c):
    deltas, finish = [], None
    for chunk in client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "Weather?"}],
                                                tools=[WEATHER], stream=True):
        for choice in chunk.choices:
            deltas += [tc.model_dump(exclude_unset=True) for tc in (choice.delta.tool_calls or [])]
            finish = choice.finish_reason or finish
    c.check("streamed tool call: delta.tool_calls chunks", bool(deltas) and deltas[0].get("id") == "call_0"
            and deltas[0].get("function", {}).get("name") == "get_weather", deltas=deltas)
    arguments = "".join((d.get("function") or {}).get("arguments") or "" for d in deltas)
    try:
        parsed = json.loads(arguments)
        errors = schema_errors(parsed, WEATHER["function"]["parameters"])
    except ValueError as error:
        errors = [f"not JSON: {error}"]
    c.equal("streamed tool call: arguments valid", errors, [], arguments=arguments)
    c.equal("streamed tool call: finish_reason", finish, "tool_calls")
    with client.chat.completions.stream(model="local/echo", messages=[{"role": "user", "content": "Weather?"}],
                                        tools=[openai.pydantic_function_tool(CalendarEvent)]) as stream:
        final = stream.get_final_completion()
    call = (final.choices[0].message.tool_calls or [None])[0]
    c.check("stream helper + pydantic_function_tool: parsed arguments",
            call is not None and isinstance(call.function.parsed_arguments, CalendarEvent), message=final.choices[0].message)


def offline_structured(c):
    for model in ("local/echo",):
        completion = client.chat.completions.parse(
            model=model, messages=[{"role": "user", "content": "Alice and Bob go to a fair on Friday."}],
            response_format=CalendarEvent)
        parsed = completion.choices[0].message.parsed
        c.check(f"parse {model}: a CalendarEvent", isinstance(parsed, CalendarEvent),
                content=completion.choices[0].message.content)
    reply = client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "JSON please"}],
                                           response_format={"type": "json_object"})
    try:
        value = json.loads(reply.choices[0].message.content)
    except (TypeError, ValueError):
        value = None
    c.check("json_object: a JSON object", isinstance(value, dict), content=reply.choices[0].message.content)


def offline_embeddings(c):
    texts = ["a cat on a mat", "a dog on a log"]
    default = client.embeddings.create(model="local/hash-embed", input=texts)
    vectors = [d.embedding for d in default.data]
    c.check("base64 default: 2 normalised vectors", len(vectors) == 2
            and abs(sum(v * v for v in vectors[0]) - 1) < 1e-4, lengths=[len(v) for v in vectors])
    floats = client.embeddings.create(model="local/hash-embed", input=texts, encoding_format="float")
    default = client.embeddings.create(model="local/hash-embed", input=texts)
    c.check("float and base64 agree", all(abs(a - b) < 1e-6 for x, y in zip(floats.data, default.data)
                                          for a, b in zip(x.embedding, y.embedding)), float=floats.data[0].embedding[:4],
            base64=default.data[0].embedding[:4])
    raw = client.embeddings.with_raw_response.create(model="local/hash-embed", input="raw", encoding_format="base64")
    c.check("base64 on the wire", isinstance(json.loads(raw.text)["data"][0]["embedding"], str), body=raw.text[:300])
    small = client.embeddings.create(model="local/hash-embed", input="dimensions", dimensions=64)
    c.equal("dimensions honoured", len(small.data[0].embedding), 64)
    tokens = client.embeddings.create(model="local/hash-embed", input=[[1820, 8415, 389], [5679]])
    c.equal("token-id arrays", len(tokens.data), 2)
    one = client.embeddings.create(model="local/hash-embed", input=[1820, 8415, 389])
    c.equal("one token array", len(one.data), 1)


def offline_images(c):
    image = client.images.generate(model="local/procedural-v1", prompt="a lighthouse at dusk", size="512x512", n=1,
                                   response_format="b64_json")
    data = base64.b64decode(image.data[0].b64_json or "")
    c.equal("images.generate b64_json: a 512x512 PNG", png_size(data), (512, 512))
    url_image = client.images.generate(model="local/procedural-hd", prompt="a red fox", size="512x512")
    c.check("images.generate url", (url_image.data[0].url or "").startswith("http"), data=url_image.data)
    folder = tempfile.mkdtemp()
    source = os.path.join(folder, "source.png")
    mask = os.path.join(folder, "mask.png")
    with open(source, "wb") as f:
        f.write(data or make_png(512, 512, lambda x, y: (200, 30, 30, 255)))
    with open(mask, "wb") as f:
        f.write(make_png(512, 512, lambda x, y: (0, 0, 0, 0 if 128 <= x < 384 and 128 <= y < 384 else 255)))
    with open(source, "rb") as image_file, open(mask, "rb") as mask_file:
        edited = client.images.edit(model="local/classic-edit", image=image_file, mask=mask_file, prompt="add a moon",
                                    response_format="b64_json")
    edited_bytes = base64.b64decode(edited.data[0].b64_json or "")
    c.check("images.edit multipart: an image back", len(edited_bytes) > 1000 and (png_size(edited_bytes) or edited_bytes[:2] == b"\xff\xd8"),
            head=edited_bytes[:16])
    with open(source, "rb") as image_file:
        edited = client.images.edit(image=image_file, prompt="make it night")
    c.check("images.edit without mask or model", bool(edited.data) and bool(edited.data[0].b64_json or edited.data[0].url),
            data=edited.data)


def offline_audio(c):
    sentence = "Hello world, this is the client matrix speaking."
    for fmt, magic in (("wav", b"RIFF"), ("mp3", None), ("flac", b"fLaC"), ("pcm", None)):
        audio = c.attempt(f"speech {fmt}", lambda: client.audio.speech.create(
            model="local/espeak", voice="alloy", input=sentence, response_format=fmt).read())
        if audio is None:
            continue
        if magic:
            c.equal(f"speech {fmt}: magic bytes", audio[:4], magic)
        elif fmt == "pcm":
            c.check("speech pcm: raw 16-bit samples, no container", len(audio) > 10_000 and len(audio) % 2 == 0
                    and audio[:4] not in (b"RIFF", b"fLaC", b"OggS", b"ID3\x03", b"ID3\x04"), head=audio[:16], length=len(audio))
        else:
            c.check("speech mp3", len(audio) > 1000 and (audio[:3] == b"ID3" or audio[0] == 0xFF), head=audio[:16])
    wav = client.audio.speech.create(model="local/espeak", voice="nova", input=sentence, response_format="wav").read()
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "speech.wav")
    with open(path, "wb") as f:
        f.write(wav)
    with open(path, "rb") as f:
        text = client.audio.transcriptions.create(file=f, model="local/whisper-tiny-en")
    # Whisper tiny.en hears espeak's "Hello" as "The lore" at times: the
    # words it does hear every time are checked.
    heard = lambda said: "world" in said.lower() and "matrix" in said.lower()
    c.check("transcriptions multipart (json)", heard(text.text), text=text.text)
    with open(path, "rb") as f:
        verbose = client.audio.transcriptions.create(file=f, model="local/whisper-tiny-en", response_format="verbose_json",
                                                     timestamp_granularities=["segment"])
    c.check("transcriptions verbose_json", heard(verbose.text) and verbose.duration and verbose.duration > 1
            and bool(verbose.segments) and verbose.language, verbose=verbose)
    with open(path, "rb") as f:
        plain = client.audio.transcriptions.create(file=f, model="local/whisper-tiny-en", response_format="text")
    c.check("transcriptions text", heard(str(plain)), text=plain)
    with open(path, "rb") as f:
        translation = client.audio.translations.create(file=f, model="local/whisper-tiny-en")
    c.check("translations multipart", heard(translation.text), text=translation.text)


def models(c):
    ids = [m.id for m in client.models.list().data]
    c.check("models.list", "local/echo" in ids and "local/hash-embed" in ids, ids=ids)
    model = client.models.retrieve("local/echo")
    c.equal("models.retrieve with a slash", model.id, "local/echo")


def headers(c):
    raw = client.chat.completions.with_raw_response.create(model="local/echo", messages=[{"role": "user", "content": "hi"}])
    completion = raw.parse()
    c.equal("headers", headers_errors(raw.headers), [], headers=dict(raw.headers))
    c.equal("_request_id is x-request-id", completion._request_id, raw.headers.get("x-request-id"))
    raw = client.chat.completions.with_raw_response.create(model="local/echo", messages=[{"role": "user", "content": "hi"}],
                                                           extra_headers={"X-Request-Id": "req-client-matrix-1"})
    c.equal("a client x-request-id is echoed", raw.headers.get("x-request-id"), "req-client-matrix-1")
    raw = client.embeddings.with_raw_response.create(model="local/hash-embed", input="hi")
    c.equal("headers on embeddings", headers_errors(raw.headers), [], headers=dict(raw.headers))


def errors(c):
    try:
        answer = client.get("/chat/completions", cast_to=object)
        c.check("GET /chat/completions is refused", False, answer=answer)
    except openai.APIStatusError as error:
        body = error.response.json() if error.response.headers.get("content-type", "").startswith("application/json") else {}
        c.equal("405 status", error.status_code, 405, body=error.response.text)
        c.check("405 Allow header", "POST" in error.response.headers.get("allow", ""), headers=dict(error.response.headers))
        c.check("405 error shape", isinstance(body.get("error"), dict)
                and {"message", "type", "code", "param"} <= set(body["error"]), body=error.response.text)
    try:
        reply = client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "x"}], n="2")
        c.check("n as a string is refused", False, answer=reply)
    except openai.BadRequestError as error:
        body = error.response.json()
        c.check("JSON type error: 400 with param n and a plain message", error.status_code == 400
                and body.get("error", {}).get("param") == "n" and plain_message(body.get("error", {}).get("message")),
                body=body)
    try:
        client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "x"}], temperature=3)
        c.check("bad temperature raises", False)
    except openai.BadRequestError as error:
        c.check("bad temperature: BadRequestError", error.status_code == 400 and "temperature" in str(error), error=str(error))
    bad = openai.OpenAI(api_key="sk_" + "0" * 64, max_retries=0)
    try:
        bad.models.list()
        c.check("bad key raises", False)
    except openai.AuthenticationError as error:
        c.equal("bad key: AuthenticationError", error.status_code, 401)


def aliases(c):
    """E: unchanged code naming OpenAI models runs offline on the local models."""
    for model in ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "gpt-4.1", "gpt-3.5-turbo"):
        reply = c.attempt(f"chat {model}", lambda: client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Hello {model}"}]))
        if reply:
            c.equal(f"chat {model}", reply.choices[0].message.content, f"Hello {model}")
    reply = c.attempt("tools gpt-4o-mini", lambda: client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER]))
    if reply:
        c.equal("tools gpt-4o-mini: call_0", [(t.id, t.function.name) for t in reply.choices[0].message.tool_calls or []],
                [("call_0", "get_weather")])
    parsed = c.attempt("parse gpt-4o-mini", lambda: client.chat.completions.parse(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "An event"}], response_format=CalendarEvent))
    if parsed:
        c.check("parse gpt-4o-mini", isinstance(parsed.choices[0].message.parsed, CalendarEvent), message=parsed.choices[0].message)
    for model in ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002"):
        result = c.attempt(f"embeddings {model}", lambda: client.embeddings.create(model=model, input=["a cat", "a dog"]))
        if result:
            c.check(f"embeddings {model}: normalised", len(result.data) == 2
                    and abs(sum(v * v for v in result.data[0].embedding) - 1) < 1e-4, lengths=[len(d.embedding) for d in result.data])
    for model, size in (("dall-e-2", "512x512"), ("dall-e-3", "1024x1024"), ("gpt-image-1", "1024x1024")):
        image = c.attempt(f"images.generate {model}", lambda: client.images.generate(
            model=model, prompt="a lighthouse", size=size, response_format="b64_json"))
        if image:
            c.equal(f"images.generate {model}: b64_json PNG", png_size(base64.b64decode(image.data[0].b64_json or "")),
                    tuple(int(x) for x in size.split("x")))
    folder = tempfile.mkdtemp()
    source = os.path.join(folder, "source.png")
    with open(source, "wb") as f:
        f.write(make_png(64, 64, lambda x, y: (200, 30, 30, 255)))
    for model in ("dall-e-2", "gpt-image-1"):
        def edit():
            with open(source, "rb") as image_file:
                return client.images.edit(model=model, image=image_file, prompt="add a moon", response_format="b64_json")
        edited = c.attempt(f"images.edit {model}", edit)
        if edited:
            c.check(f"images.edit {model}: an image", bool(edited.data and edited.data[0].b64_json), data=edited.data)
    wav = None
    for model in ("tts-1", "tts-1-hd"):
        audio = c.attempt(f"speech {model}", lambda: client.audio.speech.create(
            model=model, voice="alloy", input="Hello world from the aliases.", response_format="wav").read())
        if audio:
            c.equal(f"speech {model}: wav", audio[:4], b"RIFF")
            wav = audio
    if wav:
        path = os.path.join(folder, "speech.wav")
        with open(path, "wb") as f:
            f.write(wav)

        def transcribe():
            with open(path, "rb") as f:
                return client.audio.transcriptions.create(file=f, model="whisper-1")
        text = c.attempt("transcriptions whisper-1", transcribe)
        if text:
            c.check("transcriptions whisper-1", "hello" in text.text.lower(), text=text.text)


def main():
    c = Checks("openai-python " + openai.__version__)
    for name, flow in [("upstream_chat", upstream_chat), ("upstream_stream", upstream_stream),
                       ("upstream_passthrough", upstream_passthrough), ("upstream_legacy_functions", upstream_legacy_functions),
                       ("upstream_tools", upstream_tools), ("upstream_tools_stream", upstream_tools_stream),
                       ("upstream_structured", upstream_structured), ("upstream_choices", upstream_choices),
                       ("upstream_refusal", upstream_refusal), ("upstream_embeddings", upstream_embeddings),
                       ("offline_chat", offline_chat), ("offline_tools", offline_tools),
                       ("offline_tools_stream", offline_tools_stream), ("offline_structured", offline_structured),
                       ("offline_embeddings", offline_embeddings), ("offline_images", offline_images),
                       ("offline_audio", offline_audio), ("models", models), ("headers", headers),
                       ("errors", errors), ("aliases", aliases)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
