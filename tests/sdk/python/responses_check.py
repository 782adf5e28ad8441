"""The official OpenAI Python SDK's Responses API (`client.responses`)
against a running unigen API, unchanged except for its base URL and key.
Run by the end-to-end test
`responses_api::the_openai_python_sdk_speaks_the_responses_api`, offline
against the built-in `local/echo` model (bridged through chat
completions). Every flow runs; each failed step is printed with the bodies
involved, and the exit status is non-zero when any failed. See
../sdkcheck.py for the environment.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from sdkcheck import Checks  # noqa: E402

MODEL = "local/echo"
client = openai.OpenAI(max_retries=0, timeout=120)

WEATHER = {
    "type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}


class Person(BaseModel):
    name: str
    age: int


def check_usage(c, step, usage):
    c.check(f"{step}: usage counts tokens", usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
            and usage.total_tokens == usage.input_tokens + usage.output_tokens, usage=usage)


def create_plain(c):
    r = client.responses.create(model=MODEL, input="Hello there", instructions="Be brief.",
                                metadata={"purpose": "check"}, max_output_tokens=64, temperature=0.5)
    c.equal("object", r.object, "response")
    c.check("id", r.id.startswith("resp_"), id=r.id)
    c.equal("status", r.status, "completed")
    c.equal("model", r.model, MODEL)
    c.equal("output_text (the echo of the user's message)", r.output_text, "Hello there")
    c.equal("one output message", [o.type for o in r.output], ["message"])
    c.equal("instructions echoed", r.instructions, "Be brief.")
    c.equal("metadata echoed", r.metadata, {"purpose": "check"})
    c.equal("max_output_tokens echoed", r.max_output_tokens, 64)
    c.equal("temperature echoed", r.temperature, 0.5)
    check_usage(c, "create", r.usage)


def stream(c):
    types, numbers, deltas = [], [], []
    with client.responses.stream(model=MODEL, input="Stream me, token by token.") as s:
        for event in s:
            types.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = s.get_final_response()
    c.equal("event order", [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]], [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"], types=types)
    c.equal("sequence numbers count from 0", numbers, list(range(len(numbers))))
    c.check("several text deltas", len(deltas) > 1, deltas=deltas)
    c.equal("deltas rebuild the text", "".join(deltas), "Stream me, token by token.")
    c.equal("final response", final.output_text, "Stream me, token by token.")
    check_usage(c, "stream", final.usage)
    stored = client.responses.retrieve(final.id)
    c.equal("a streamed response is stored", stored.output_text, final.output_text)


def tools(c):
    first = client.responses.create(model=MODEL, input="Paris", tools=[WEATHER])
    calls = [o for o in first.output if o.type == "function_call"]
    c.equal("one function call", len(calls), 1, output=first.output)
    if not calls:
        return
    call = calls[0]
    c.equal("called function", call.name, "get_weather")
    c.equal("arguments valid for the schema", json.loads(call.arguments), {"city": "Paris"})
    # The result, continuing the stored conversation.
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}])
    c.equal("answer after the tool result (previous_response_id)", second.output_text, "Paris\n[get_weather] 18 C, sunny")
    # The same round trip with the whole conversation resent (no storage).
    resent = client.responses.create(model=MODEL, store=False, tools=[WEATHER], input=[
        {"role": "user", "content": "Paris"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}])
    c.equal("answer after the tool result (resent input)", resent.output_text, "Paris\n[get_weather] 18 C, sunny")
    try:
        client.responses.retrieve(resent.id)
        c.check("store=false is not stored", False)
    except openai.NotFoundError:
        c.check("store=false is not stored", True)
    # Streamed: the call's arguments arrive as deltas.
    types, arguments = [], []
    with client.responses.stream(model=MODEL, input="Lyon", tools=[WEATHER], tool_choice="required") as s:
        for event in s:
            types.append(event.type)
            if event.type == "response.function_call_arguments.delta":
                arguments.append(event.delta)
        final = s.get_final_response()
    c.check("streamed call events", "response.function_call_arguments.done" in types, types=types)
    c.equal("streamed arguments", json.loads("".join(arguments)), {"city": "Lyon"})
    c.equal("streamed final call", [o.type for o in final.output], ["function_call"])


def parse(c):
    r = client.responses.parse(model=MODEL, input="Ada", text_format=Person)
    c.check("output_parsed is the model", isinstance(r.output_parsed, Person), parsed=r.output_parsed)
    if isinstance(r.output_parsed, Person):
        c.equal("parsed name", r.output_parsed.name, "Ada")
    r = client.responses.create(model=MODEL, input='{"a": 1}', text={"format": {"type": "json_object"}})
    c.equal("json_object", json.loads(r.output_text), {"a": 1})


def chaining(c):
    first = client.responses.create(model=MODEL, input="first turn")
    second = client.responses.create(model=MODEL, input="second turn", previous_response_id=first.id)
    c.equal("previous_response_id echoed", second.previous_response_id, first.id)
    c.equal("answers the latest turn", second.output_text, "second turn")
    items = client.responses.input_items.list(second.id)
    c.equal("input_items lists the request's items", [i.content[0].text for i in items.data], ["second turn"])
    c.check("input item ids", all(i.id for i in items.data), items=items)


def stored(c):
    r = client.responses.create(model=MODEL, input=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Keep me"}]}])
    got = client.responses.retrieve(r.id)
    c.equal("retrieve", (got.id, got.output_text, got.status), (r.id, "Keep me", "completed"))
    items = client.responses.input_items.list(r.id, order="asc")
    c.equal("input_items (asc)", [i.role for i in items.data], ["developer", "user"])
    page = client.responses.input_items.list(r.id, limit=1)
    c.equal("input_items page (desc)", ([i.role for i in page.data], page.has_more), (["user"], True))
    client.responses.delete(r.id)
    try:
        client.responses.retrieve(r.id)
        c.check("deleted", False)
    except openai.NotFoundError:
        c.check("deleted", True)


def background(c):
    r = client.responses.create(model=MODEL, input="Run me later", background=True, metadata={"k": "v"})
    c.equal("queued at creation", (r.status, r.background, r.output), ("queued", True, []))
    polls = 0
    # A client polls; the worker answers within a few of them.
    while r.status in ("queued", "in_progress") and polls < 600:
        time.sleep(0.05)
        polls += 1
        r = client.responses.retrieve(r.id)
    c.equal("completed by a worker", r.status, "completed", polls=polls)
    c.equal("its answer", r.output_text, "Run me later")
    c.equal("metadata kept", r.metadata, {"k": "v"})
    check_usage(c, "background", r.usage)
    items = client.responses.input_items.list(r.id)
    c.equal("input_items of a background response", [i.content[0].text for i in items.data], ["Run me later"])
    nxt = client.responses.create(model=MODEL, input="and after", previous_response_id=r.id)
    c.equal("continued in place", nxt.output_text, "and after")
    client.responses.delete(r.id)
    try:
        client.responses.retrieve(r.id)
        c.check("a deleted background response is gone", False)
    except openai.NotFoundError:
        c.check("a deleted background response is gone", True)


def errors(c):
    try:
        client.responses.create(model=MODEL, input="x", tools=[{"type": "file_search", "vector_store_ids": ["vs_1"]}])
        c.check("hosted tool refused", False)
    except openai.BadRequestError as e:
        c.check("hosted tool refused, naming it", "file_search" in str(e.body) and e.body.get("param") == "tools[0].type",
                body=e.body)
    try:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
        c.check("unknown previous_response_id", False)
    except openai.NotFoundError:
        c.check("unknown previous_response_id", True)


def main():
    c = Checks("openai-python " + openai.__version__ + " responses")
    for name, flow in [("create_plain", create_plain), ("stream", stream), ("tools", tools), ("parse", parse),
                       ("chaining", chaining), ("stored", stored), ("background", background),
                       ("errors", errors)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
