"""langchain-openai (tests/sdk/requirements.txt) against a running unigen
API, unchanged: ChatOpenAI and OpenAIEmbeddings pick the base URL and key
from OPENAI_BASE_URL / OPENAI_API_KEY. Run by the end-to-end test
`clients::langchain_openai_works_unchanged` (see ../sdkcheck.py for the
environment); every flow runs and each failed step is printed with the
bodies involved.

What LangChain sends is taken from ChatOpenAI's own request builder
(`_get_request_payload`), so the upstream's body is compared with exactly
what the client put on the wire. OpenAIEmbeddings' default path tokenizes
with tiktoken (cl100k_base, read from TIKTOKEN_CACHE_DIR) and sends token-id
arrays, asking base64 through the OpenAI SDK.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import langchain_core  # noqa: E402
import langchain_openai  # noqa: E402
import tiktoken  # noqa: E402
from importlib.metadata import version  # noqa: E402
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI, OpenAIEmbeddings  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from sdkcheck import ENV, Checks, Upstream, decode_embedding, schema_errors  # noqa: E402

CHAT = ENV["FAKE_CHAT_MODEL"]
EMBED = ENV["FAKE_EMBED_MODEL"]
upstream = Upstream()


@tool
def get_weather(location: str, unit: str = "celsius") -> str:
    """Current weather in a city."""
    return f"18 degrees {unit} in {location}"


@tool
def get_time(timezone: str) -> str:
    """Current time in a timezone."""
    return "12:00"


class CalendarEvent(BaseModel):
    """An event on a calendar."""
    name: str = Field(description="What the event is")
    date: str
    participants: list[str]


ANSWER_SCHEMA = {"title": "Answer", "description": "A JSON answer", "type": "object",
                 "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def chat(**kwargs):
    return ChatOpenAI(max_retries=0, timeout=120, **kwargs)


def only(items, step, c):
    c.equal(f"{step}: the upstream got exactly one request", len(items), 1, recorded=items)
    return items[-1] if items else {"body": {}, "response": {}, "headers": {}}


def same_as_sent(c, step, body, payload):
    """The upstream body is what LangChain sent, model replaced (stream false may be left out)."""
    expected = {k: v for k, v in payload.items() if k != "model" and not (k == "stream" and v is False)}
    got = {k: v for k, v in body.items() if k != "model" and not (k == "stream" and v is False)}
    if "stream_options" in got and "stream_options" not in expected:
        got.pop("stream_options")  # asked by the service for its own metering; checked separately
    c.equal(f"{step}: the upstream got what LangChain sent", got, expected)
    c.equal(f"{step}: upstream model", body.get("model"), ENV["UPSTREAM_CHAT_MODEL"])


def usage_of(response):
    return {"input_tokens": response["usage"]["prompt_tokens"], "output_tokens": response["usage"]["completion_tokens"],
            "total_tokens": response["usage"]["total_tokens"]}


def lc_upstream_chat(c):
    llm = chat(model=CHAT)
    messages = [SystemMessage("Answer briefly."), HumanMessage("Hello from LangChain")]
    upstream.reset()
    reply = llm.invoke(messages)
    seen = only(upstream.chats(), "invoke", c)
    same_as_sent(c, "invoke", seen["body"], llm._get_request_payload(messages))
    c.equal("invoke: content", reply.content, "Upstream reply to: Hello from LangChain")
    meta = reply.response_metadata
    c.equal("invoke: model_name is our id", meta.get("model_name"), CHAT, response_metadata=meta)
    c.equal("invoke: system_fingerprint relayed", meta.get("system_fingerprint"), "fp_fake_upstream")
    c.equal("invoke: finish_reason", meta.get("finish_reason"), "stop")
    got_id = str(meta.get("id") or "")
    c.check("invoke: our id", got_id.startswith("chatcmpl-") and got_id != seen["response"]["id"],
            id=got_id, upstream_id=seen["response"]["id"])
    got_usage = {k: (reply.usage_metadata or {}).get(k) for k in ("input_tokens", "output_tokens", "total_tokens")}
    c.equal("invoke: usage from the upstream's", got_usage, usage_of(seen["response"]))
    c.equal("invoke: no sampling defaults added", sorted(k for k in seen["body"] if k in (
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "frequency_penalty", "presence_penalty", "stop", "user")),
        sorted(k for k in llm._get_request_payload(messages) if k in (
            "temperature", "top_p", "max_tokens", "max_completion_tokens", "frequency_penalty", "presence_penalty", "stop", "user")),
        upstream_body=seen["body"])


def lc_upstream_stream(c):
    for stream_usage in (True, None):
        step = "stream with usage" if stream_usage else "stream (LangChain's default: no usage asked)"
        llm = chat(model=CHAT, stream_usage=stream_usage)
        upstream.reset()
        chunks = list(llm.stream([HumanMessage("Stream through LangChain")]))
        seen = only(upstream.chats(), step, c)
        c.equal(f"{step}: upstream got stream true", seen["body"].get("stream"), True)
        c.equal(f"{step}: upstream asked for usage", seen["body"].get("stream_options"), {"include_usage": True},
                upstream_body=seen["body"])
        c.equal(f"{step}: text", "".join(ch.content for ch in chunks), "Upstream reply to: Stream through LangChain")
        with_usage = [ch.usage_metadata for ch in chunks if ch.usage_metadata]
        if stream_usage:
            got = {k: with_usage[-1].get(k) for k in ("input_tokens", "output_tokens", "total_tokens")} if with_usage else None
            c.equal(f"{step}: usage from the upstream's", got, usage_of(seen["response"][-1]))
        else:
            c.equal(f"{step}: no usage chunk", with_usage, [])
        merged = sum(chunks[1:], chunks[0]) if chunks else None
        c.equal(f"{step}: model_name", merged and merged.response_metadata.get("model_name"), CHAT)


def lc_upstream_passthrough(c):
    llm = chat(model=CHAT, temperature=0.2, top_p=0.8, max_tokens=50, frequency_penalty=0.1, presence_penalty=0.2,
               seed=5, logprobs=True, top_logprobs=2, n=2, stop=["END"], reasoning_effort="low", service_tier="default",
               store=False, model_kwargs={"user": "user-7", "parallel_tool_calls": False})
    messages = [HumanMessage("Pass it all through")]
    upstream.reset()
    result = llm.generate([messages])
    seen = only(upstream.chats(), "pass-through", c)
    payload = llm._get_request_payload(messages)
    same_as_sent(c, "pass-through", seen["body"], payload)
    generations = result.generations[0]
    c.equal("pass-through: n=2 generations", [g.text for g in generations],
            [ch["message"]["content"] for ch in seen["response"]["choices"]])
    c.equal("pass-through: logprobs relayed", [(g.generation_info or {}).get("logprobs") for g in generations],
            [ch["logprobs"] for ch in seen["response"]["choices"]])
    c.equal("pass-through: system_fingerprint", (result.llm_output or {}).get("system_fingerprint"), "fp_fake_upstream")


def tool_args(response, name):
    """The arguments the upstream sent for its first call."""
    return json.loads(response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])


def lc_upstream_tools(c):
    llm = chat(model=CHAT).bind_tools([get_weather, get_time])
    messages = [HumanMessage("What's the weather in Paris?")]
    upstream.reset()
    ai = llm.invoke(messages)
    seen = only(upstream.chats(), "bind_tools", c)
    same_as_sent(c, "bind_tools", seen["body"], llm.bound._get_request_payload(messages, **llm.kwargs))
    expected = [{"name": "get_weather", "args": tool_args(seen["response"], "get_weather"), "id": "call_upstream_0",
                 "type": "tool_call"}]
    c.equal("bind_tools: tool_calls", ai.tool_calls, expected)
    c.equal("bind_tools: finish_reason", ai.response_metadata.get("finish_reason"), "tool_calls")
    if not ai.tool_calls:
        return
    call = ai.tool_calls[0]
    messages += [ai, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    upstream.reset()
    final = llm.invoke(messages)
    seen = only(upstream.chats(), "tool result", c)
    sent = seen["body"].get("messages", [])
    c.equal("tool result: tool message forwarded", sent[2:3],
            [{"role": "tool", "tool_call_id": call["id"], "content": get_weather.invoke(call["args"])}])
    c.equal("tool result: answer", final.content, f"tool {call['id']} said: {get_weather.invoke(call['args'])}")
    upstream.reset()
    chunks = list(llm.stream([HumanMessage("Weather in Rome?")]))
    seen = only(upstream.chats(), "streamed tool call", c)
    merged = sum(chunks[1:], chunks[0]) if chunks else AIMessageChunk(content="")
    c.check("streamed tool call: tool_call_chunks", any(ch.tool_call_chunks for ch in chunks), chunks=[ch.model_dump() for ch in chunks])
    streamed = json.loads("".join(tc["function"].get("arguments") or "" for ch in seen["response"]
                                  for choice in ch.get("choices", []) for tc in choice["delta"].get("tool_calls") or []))
    c.equal("streamed tool call: assembled", [(t["name"], t["args"], t["id"]) for t in merged.tool_calls],
            [("get_weather", streamed, "call_upstream_0")])


def lc_upstream_structured(c):
    messages = [HumanMessage("Alice and Bob go to a fair on Friday.")]
    for method in ("json_schema", "function_calling"):
        upstream.reset()
        result = chat(model=CHAT).with_structured_output(CalendarEvent, method=method).invoke(messages)
        seen = only(upstream.chats(), method, c)
        body, response = seen["body"], seen["response"]
        if method == "json_schema":
            c.equal(f"{method}: response_format json_schema forwarded", (body.get("response_format") or {}).get("type"), "json_schema",
                    upstream_body=body)
            expected = json.loads(response["choices"][0]["message"]["content"] or "null")
        else:
            c.check(f"{method}: tools + tool_choice forwarded", body.get("tools") and body.get("tool_choice"), upstream_body=body)
            expected = tool_args(response, "CalendarEvent")
        c.equal(f"{method}: parsed", result.model_dump() if isinstance(result, CalendarEvent) else result, expected)
    upstream.reset()
    result = chat(model=CHAT).with_structured_output(ANSWER_SCHEMA, method="json_mode").invoke(messages)
    seen = only(upstream.chats(), "json_mode", c)
    c.equal("json_mode: response_format forwarded", seen["body"].get("response_format"), {"type": "json_object"})
    c.equal("json_mode: parsed", result, json.loads(seen["response"]["choices"][0]["message"]["content"]))


def lc_upstream_embeddings(c):
    texts = ["a cat on a mat", "a dog on a log, twice as long"]
    encoding = tiktoken.get_encoding("cl100k_base")
    for name, embeddings, expected_input in (
        ("default (token ids, base64)", OpenAIEmbeddings(model=EMBED, max_retries=0), [encoding.encode_ordinary(t) for t in texts]),
        ("dimensions", OpenAIEmbeddings(model=EMBED, dimensions=8, max_retries=0), [encoding.encode_ordinary(t) for t in texts]),
        ("strings", OpenAIEmbeddings(model=EMBED, check_embedding_ctx_length=False, max_retries=0), texts),
    ):
        upstream.reset()
        vectors = embeddings.embed_documents(texts)
        seen = only(upstream.embeddings(), name, c)
        c.equal(f"{name}: input forwarded", seen["body"].get("input"), expected_input)
        c.equal(f"{name}: upstream model", seen["body"].get("model"), ENV["UPSTREAM_EMBED_MODEL"])
        if embeddings.dimensions:
            c.equal(f"{name}: dimensions forwarded", seen["body"].get("dimensions"), embeddings.dimensions)
        c.equal(f"{name}: vectors relayed", vectors, [decode_embedding(d["embedding"]) for d in seen["response"]["data"]])
    upstream.reset()
    query = OpenAIEmbeddings(model=EMBED, max_retries=0).embed_query("where is the cat")
    seen = only(upstream.embeddings(), "embed_query", c)
    c.equal("embed_query: vector relayed", query, decode_embedding(seen["response"]["data"][0]["embedding"]))


def lc_offline_chat(c):
    reply = chat(model="local/echo").invoke([SystemMessage("Be brief."), HumanMessage("Hi local")])
    c.equal("invoke local/echo", reply.content, "Hi local")
    chunks = list(chat(model="local/echo", stream_usage=True).stream([HumanMessage("Streaming works token by token")]))
    c.check("stream local/echo", "".join(ch.content for ch in chunks) == "Streaming works token by token" and len(chunks) > 3,
            chunks=[ch.content for ch in chunks])
    c.check("stream usage", any(ch.usage_metadata for ch in chunks), chunks=[ch.usage_metadata for ch in chunks])
    result = chat(model="local/echo", n=2).generate([[HumanMessage("Twice")]])
    c.equal("n=2", [g.text for g in result.generations[0]], ["Twice", "Twice"])


def lc_offline_tools(c):
    llm = chat(model="local/echo").bind_tools([get_weather, get_time])
    messages = [HumanMessage("What's the weather in Paris?")]
    ai = llm.invoke(messages)
    schema = llm.kwargs["tools"][0]["function"]["parameters"]
    c.check("bind_tools: one call_0 of get_weather", len(ai.tool_calls) == 1 and ai.tool_calls[0]["id"] == "call_0"
            and ai.tool_calls[0]["name"] == "get_weather", message=ai.model_dump())
    if ai.tool_calls:
        c.equal("bind_tools: args valid for the schema", schema_errors(ai.tool_calls[0]["args"], schema), [],
                args=ai.tool_calls[0]["args"], schema=schema)
        call = ai.tool_calls[0]
        output = get_weather.invoke(call["args"])
        final = llm.invoke(messages + [ai, ToolMessage(output, tool_call_id=call["id"])])
        c.equal("tool result: text", final.content, f"What's the weather in Paris?\n[get_weather] {output}")
    named = chat(model="local/echo").bind_tools([get_weather, get_time], tool_choice="get_time").invoke(messages)
    c.equal("tool_choice names get_time", [t["name"] for t in named.tool_calls], ["get_time"])
    chunks = list(llm.stream(messages))
    merged = sum(chunks[1:], chunks[0]) if chunks else AIMessageChunk(content="")
    c.check("streamed tool call", len(merged.tool_calls) == 1 and merged.tool_calls[0]["id"] == "call_0"
            and not schema_errors(merged.tool_calls[0]["args"], schema), message=merged.model_dump())


def lc_offline_structured(c):
    messages = [HumanMessage("Alice and Bob go to a fair on Friday.")]
    for model in ("local/echo",):
        for method in ("json_schema", "function_calling"):
            result = chat(model=model).with_structured_output(CalendarEvent, method=method).invoke(messages)
            c.check(f"{model} {method}: a CalendarEvent", isinstance(result, CalendarEvent), result=result)
        result = chat(model=model).with_structured_output(ANSWER_SCHEMA, method="json_mode").invoke(messages)
        c.check(f"{model} json_mode: a JSON object", isinstance(result, dict), result=result)
        raw = chat(model=model).with_structured_output(CalendarEvent, method="json_schema", include_raw=True).invoke(messages)
        c.equal(f"{model} json_schema include_raw: no parsing error", raw.get("parsing_error"), None)


def lc_offline_embeddings(c):
    texts = ["a cat on a mat", "a dog on a log"]
    for model in ("local/hash-embed",):
        vectors = OpenAIEmbeddings(model=model, max_retries=0).embed_documents(texts)
        c.check(f"{model} (token ids, base64): 2 normalised vectors", len(vectors) == 2
                and abs(sum(v * v for v in vectors[0]) - 1) < 1e-4, lengths=[len(v) for v in vectors])
    by_tokens = OpenAIEmbeddings(model="local/hash-embed", max_retries=0).embed_query("a cat on a mat")
    by_text = OpenAIEmbeddings(model="local/hash-embed", check_embedding_ctx_length=False,
                               max_retries=0).embed_query("a cat on a mat")
    c.equal("strings path: same length", len(by_text), len(by_tokens))
    small = OpenAIEmbeddings(model="local/hash-embed", dimensions=32, max_retries=0).embed_query("short")
    c.equal("dimensions honoured", len(small), 32)


def lc_aliases(c):
    """E: unchanged LangChain code naming OpenAI models runs offline on the local models."""
    for model in ("gpt-4o-mini", "gpt-4.1", "gpt-3.5-turbo"):
        reply = c.attempt(f"invoke {model}", lambda: chat(model=model).invoke([HumanMessage(f"Hi {model}")]))
        if reply:
            c.equal(f"invoke {model}", reply.content, f"Hi {model}")
    ai = c.attempt("bind_tools gpt-4o-mini", lambda: chat(model="gpt-4o-mini").bind_tools([get_weather]).invoke("Weather?"))
    if ai:
        c.equal("bind_tools gpt-4o-mini", [(t["id"], t["name"]) for t in ai.tool_calls], [("call_0", "get_weather")])
    event = c.attempt("with_structured_output gpt-4o-mini", lambda: chat(model="gpt-4o-mini").with_structured_output(CalendarEvent).invoke("An event"))
    if event is not None:
        c.check("with_structured_output gpt-4o-mini", isinstance(event, CalendarEvent), result=event)
    for model in ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002"):
        vectors = c.attempt(f"OpenAIEmbeddings {model}", lambda: OpenAIEmbeddings(model=model, max_retries=0).embed_documents(["a cat", "a dog"]))
        if vectors:
            c.check(f"OpenAIEmbeddings {model}: normalised", len(vectors) == 2 and abs(sum(v * v for v in vectors[0]) - 1) < 1e-4,
                    lengths=[len(v) for v in vectors])


def main():
    c = Checks(f"langchain-openai {version('langchain-openai')} (langchain-core {langchain_core.__version__})")
    for name, flow in [("lc_upstream_chat", lc_upstream_chat), ("lc_upstream_stream", lc_upstream_stream),
                       ("lc_upstream_passthrough", lc_upstream_passthrough), ("lc_upstream_tools", lc_upstream_tools),
                       ("lc_upstream_structured", lc_upstream_structured), ("lc_upstream_embeddings", lc_upstream_embeddings),
                       ("lc_offline_chat", lc_offline_chat), ("lc_offline_tools", lc_offline_tools),
                       ("lc_offline_structured", lc_offline_structured), ("lc_offline_embeddings", lc_offline_embeddings),
                       ("lc_aliases", lc_aliases)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
