"""The official OpenAI Python SDK's Responses API (`client.responses`)
against a running unigen API whose model `NATIVE_MODEL` sits on an upstream
that speaks the Responses API natively (`responses = true`): the fake
upstream (../fake_upstream.py) records every body it gets, and each flow
checks that what the SDK sent reached the upstream unchanged but for the
model's name, and that the SDK got the upstream's answer (with the
catalogue's model name). Run by the end-to-end test
`responses_api::a_native_responses_upstream_gets_the_sdks_requests_unchanged`.

Environment: OPENAI_BASE_URL, OPENAI_API_KEY, FAKE_UPSTREAM_URL,
NATIVE_MODEL (catalogue id), UPSTREAM_CHAT_MODEL (the upstream's name).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import httpx  # noqa: E402
import openai  # noqa: E402

from sdkcheck import Checks, Upstream  # noqa: E402

MODEL = os.environ["NATIVE_MODEL"]
UPSTREAM_MODEL = os.environ["UPSTREAM_CHAT_MODEL"]

# What the SDK sends, captured on its own HTTP client (the SDK is unchanged).
sent = []


def capture(request):
    if request.method == "POST" and request.url.path.endswith("/responses"):
        sent.append(json.loads(request.content))


client = openai.OpenAI(max_retries=0, timeout=120,
                       http_client=httpx.Client(event_hooks={"request": [capture]}, trust_env=False))
upstream = Upstream()

WEATHER = {
    "type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}


def forwarded_unchanged(c, step):
    """The last body the SDK sent reached the upstream as sent, but for `model`."""
    received = upstream.requests("/v1/responses")
    if not c.check(f"{step}: reached the upstream", bool(received) and bool(sent), received=len(received)):
        return None
    last = received[-1]
    expected = dict(sent[-1], model=UPSTREAM_MODEL)
    c.equal(f"{step}: forwarded unchanged but for the model", last["body"], expected)
    c.equal(f"{step}: the upstream's key", last["headers"].get("authorization"),
            f"Bearer {os.environ['UPSTREAM_API_KEY']}")
    return last


def create(c):
    r = client.responses.create(
        model=MODEL, input="Hello there", instructions="Be brief.", metadata={"purpose": "native"},
        max_output_tokens=64, temperature=0.5, include=["message.output_text.logprobs"], truncation="auto",
        tools=[{"type": "web_search"}], reasoning={"effort": "low", "summary": "auto"})
    last = forwarded_unchanged(c, "create")
    if last is None:
        return
    answer = last["response"]
    c.equal("the upstream's response id", r.id, answer["id"])
    c.equal("the catalogue's model name", r.model, MODEL)
    c.equal("the upstream's answer", r.output_text, "Upstream reply to: Hello there")
    c.equal("the upstream's usage", (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens),
            (answer["usage"]["input_tokens"], answer["usage"]["output_tokens"], answer["usage"]["total_tokens"]))
    got = client.responses.retrieve(r.id)
    c.equal("stored here, retrieved by the upstream's id", (got.id, got.output_text, got.model),
            (r.id, r.output_text, MODEL))
    items = client.responses.input_items.list(r.id)
    c.equal("input_items", [i.content[0].text for i in items.data], ["Hello there"])
    print(f"USAGE create {answer['usage']['input_tokens']} {answer['usage']['output_tokens']}", flush=True)


def stream(c):
    types, numbers, deltas = [], [], []
    with client.responses.stream(model=MODEL, input="Stream me, token by token.") as s:
        for event in s:
            types.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = s.get_final_response()
    last = forwarded_unchanged(c, "stream")
    if last is None:
        return
    c.equal("stream: true forwarded", last["body"].get("stream"), True)
    c.equal("the upstream's events, in order", types, [e["type"] for e in last["response"]])
    c.equal("the upstream's sequence numbers", numbers, list(range(len(numbers))))
    c.equal("deltas rebuild the text", "".join(deltas), "Upstream reply to: Stream me, token by token.")
    c.equal("final response: the catalogue's model name", final.model, MODEL)
    completed = last["response"][-1]["response"]
    c.equal("final response: the upstream's id and usage", (final.id, final.usage.output_tokens),
            (completed["id"], completed["usage"]["output_tokens"]))
    stored = client.responses.retrieve(final.id)
    c.equal("a streamed response is stored", stored.output_text, final.output_text)
    print(f"USAGE stream {completed['usage']['input_tokens']} {completed['usage']['output_tokens']}", flush=True)


def tools(c):
    first = client.responses.create(model=MODEL, input="Paris", tools=[WEATHER])
    forwarded_unchanged(c, "tool call")
    calls = [o for o in first.output if o.type == "function_call"]
    c.equal("one function call", len(calls), 1, output=first.output)
    if not calls:
        return
    call = calls[0]
    c.equal("arguments from the schema", json.loads(call.arguments), {"city": "upstream city"})
    # The result, continuing the conversation the upstream holds.
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}])
    last = forwarded_unchanged(c, "tool result")
    if last is not None:
        c.equal("previous_response_id forwarded as sent", last["body"].get("previous_response_id"), first.id)
    c.equal("answer after the tool result", second.output_text, f"tool {call.call_id} said: 18 C, sunny")
    # Streamed: the call's arguments arrive as the upstream's deltas.
    arguments = []
    with client.responses.stream(model=MODEL, input="Lyon", tools=[WEATHER]) as s:
        for event in s:
            if event.type == "response.function_call_arguments.delta":
                arguments.append(event.delta)
        final = s.get_final_response()
    forwarded_unchanged(c, "streamed tool call")
    c.equal("streamed arguments", json.loads("".join(arguments)), {"city": "upstream city"})
    c.equal("streamed final call", [o.type for o in final.output], ["function_call"])


def delete(c):
    r = client.responses.create(model=MODEL, input="Forget me")
    deleted = client.responses.delete(r.id)
    c.check("deleted", deleted is None or getattr(deleted, "deleted", True))
    try:
        client.responses.retrieve(r.id)
        c.check("gone here", False)
    except openai.NotFoundError:
        c.check("gone here", True)
    gone = [q for q in upstream.requests(f"/v1/responses/{r.id}") if q["method"] == "DELETE"]
    c.equal("deleted upstream too", [q["response"].get("deleted") for q in gone], [True])


def not_stored(c):
    r = client.responses.create(model=MODEL, input="Do not keep", store=False)
    forwarded_unchanged(c, "store=false")
    try:
        client.responses.retrieve(r.id)
        c.check("store=false is not stored", False)
    except openai.NotFoundError:
        c.check("store=false is not stored", True)


def errors(c):
    try:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
        c.check("unknown previous_response_id", False)
    except openai.NotFoundError as e:
        c.check("unknown previous_response_id: 404, never forwarded", "resp_missing" in str(e.body), body=e.body)
    try:
        client.responses.create(model=MODEL, input="x", extra_body={"store": "no"})
        c.check("a bad field the service reads", False)
    except openai.BadRequestError as e:
        c.equal("a bad field the service reads is named", e.body.get("param"), "store")


def main():
    c = Checks("openai-python " + openai.__version__ + " native responses")
    upstream.reset()
    for name, flow in [("create", create), ("stream", stream), ("tools", tools), ("delete", delete),
                       ("not_stored", not_stored), ("errors", errors)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
