"""The official OpenAI Python SDK calling tools on catalogue models served
by native vendor adapters (Anthropic's Messages API, Gemini's
generateContent), unchanged but for its base URL and key. Run by the
end-to-end test `native_providers::the_openai_python_sdk_calls_tools_on_anthropic_and_gemini_models`,
which starts the API with fake vendor servers speaking each vendor's wire
format and checking what they are sent.

Environment: OPENAI_BASE_URL, OPENAI_API_KEY, NATIVE_MODELS (comma-separated
catalogue ids). The fakes answer a weather tool call for Paris, then, once
the conversation holds its result, a sentence quoting it; asked for JSON,
they answer {"city": "Paris", "celsius": 18}.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from sdkcheck import Checks  # noqa: E402

client = openai.OpenAI(max_retries=0, timeout=120)
MODELS = [m for m in os.environ.get("NATIVE_MODELS", "").split(",") if m]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


class Weather(BaseModel):
    city: str
    celsius: int


def tools(c, model):
    first = client.chat.completions.create(model=model, messages=QUESTION, tools=[WEATHER])
    choice = first.choices[0]
    c.equal("finish_reason", choice.finish_reason, "tool_calls", reply=first)
    calls = choice.message.tool_calls or []
    c.equal("one call", len(calls), 1, reply=first)
    if not calls:
        return
    call = calls[0]
    c.equal("function name", call.function.name, "get_weather")
    c.equal("arguments", json.loads(call.function.arguments), {"city": "Paris"})
    c.check("call id", bool(call.id), call=call)
    c.check("usage counted", first.usage and first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0,
            usage=first.usage)
    messages = QUESTION + [choice.message,
                           {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny"})}]
    second = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
    c.equal("answer after the tool result", second.choices[0].finish_reason, "stop", reply=second)
    c.check("the answer quotes the tool result", "sunny" in (second.choices[0].message.content or ""), reply=second)


def tools_stream(c, model):
    stream = client.chat.completions.create(model=model, messages=QUESTION, tools=[WEATHER], stream=True,
                                            stream_options={"include_usage": True})
    calls, finish, usage = {}, None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = delta.id or call["id"]
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    c.equal("finish_reason", finish, "tool_calls")
    c.equal("one call", sorted(calls), [0], calls=calls)
    if 0 in calls:
        c.equal("name", calls[0]["name"], "get_weather")
        c.equal("arguments", json.loads(calls[0]["arguments"] or "null"), {"city": "Paris"})
        c.check("id", bool(calls[0]["id"]), calls=calls)
    c.check("usage chunk", usage is not None and usage.total_tokens > 0, usage=usage)


def structured(c, model):
    completion = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Weather in Paris as JSON"}], response_format=Weather)
    parsed = completion.choices[0].message.parsed
    c.equal("parsed", parsed and parsed.model_dump(), {"city": "Paris", "celsius": 18}, reply=completion)


def main():
    if not MODELS:
        print("FAILED: NATIVE_MODELS names no model", flush=True)
        sys.exit(2)
    c = Checks("openai-python " + openai.__version__ + " on native adapters")
    for model in MODELS:
        for name, flow in [("tools", tools), ("tools_stream", tools_stream), ("structured", structured)]:
            c.run(f"{model} {name}", lambda checks, f=flow, m=model: f(checks, m))
    c.finish()


if __name__ == "__main__":
    main()
