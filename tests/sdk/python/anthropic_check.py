"""The official Anthropic Python SDK (tests/sdk/requirements.txt) against a
running unigen API, unchanged except for its base URL (ANTHROPIC_BASE_URL,
the service's origin) and key (ANTHROPIC_API_KEY, sent as x-api-key). Run
by the end-to-end test
`anthropic_messages::the_anthropic_python_sdk_works_unchanged`; see
../sdkcheck.py for the environment. Every flow runs; each failed step is
printed with the bodies involved, and the exit status is non-zero when any
failed.

Flows `offline_*` use the built-in `local/echo` model (bridged through
chat); flows `claude_*` use CLAUDE_MODEL, an alias of a catalogue model on
an anthropic upstream (a fake speaking Anthropic's wire format, which the
Rust test inspects afterwards); `errors` checks that each error is raised as
the SDK's exception class for it.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import anthropic  # noqa: E402

from sdkcheck import Checks  # noqa: E402

ECHO = "local/echo"
CLAUDE = os.environ["CLAUDE_MODEL"]
client = anthropic.Anthropic(max_retries=0, timeout=120)

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

ORDER = ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
         "message_delta", "message_stop"]


def squeeze(types):
    """Event types with repeats collapsed (deltas of one block)."""
    out = []
    for kind in types:
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def check_message(c, step, message, model):
    c.check(f"{step}: a Message", isinstance(message, anthropic.types.Message), got=repr(message))
    c.check(f"{step}: id msg_...", message.id.startswith("msg_"), id=message.id)
    c.equal(f"{step}: type", message.type, "message")
    c.equal(f"{step}: role", message.role, "assistant")
    c.equal(f"{step}: model", message.model, model)
    c.check(f"{step}: usage counted", message.usage.input_tokens > 0 and message.usage.output_tokens > 0,
            usage=message.usage.model_dump())


def offline_create(c):
    message = client.messages.create(
        model=ECHO, max_tokens=64, system="Be brief.",
        messages=[{"role": "user", "content": "Hello there"}],
        metadata={"user_id": "user-42"}, stop_sequences=["NEVER"])
    check_message(c, "create", message, ECHO)
    c.equal("create: the echo", [b.model_dump() for b in message.content],
            [{"type": "text", "text": "Hello there", "citations": None}])
    c.equal("create: stop_reason", message.stop_reason, "end_turn")
    short = client.messages.create(model=ECHO, max_tokens=2,
                                   messages=[{"role": "user", "content": "one two three four five"}])
    c.equal("max_tokens: stop_reason", short.stop_reason, "max_tokens")
    c.equal("max_tokens: output tokens", short.usage.output_tokens, 2)
    image = client.messages.create(model="local/echo-vision", max_tokens=64, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "text", "text": "What is this?"}]}])
    c.equal("images: the text is answered", image.content[0].text, "What is this?")


def offline_stream(c):
    with client.messages.stream(model=ECHO, max_tokens=64,
                                messages=[{"role": "user", "content": "Stream me, please"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    c.equal("stream: the text", text, "Stream me, please")
    check_message(c, "stream: final message", final, ECHO)
    c.equal("stream: final content", final.content[0].text, "Stream me, please")
    c.equal("stream: stop_reason", final.stop_reason, "end_turn")
    events = list(client.messages.create(model=ECHO, max_tokens=64, stream=True,
                                         messages=[{"role": "user", "content": "Order of events"}]))
    c.equal("stream=True: the events in order", squeeze([e.type for e in events]), ORDER)


def tool_round_trip(c, model, expect_text):
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model=model, max_tokens=256, tools=[WEATHER], messages=ask)
    c.equal("tools: stop_reason", first.stop_reason, "tool_use")
    calls = [b for b in first.content if b.type == "tool_use"]
    if not c.equal("tools: one tool_use block", len(calls), 1, content=[b.model_dump() for b in first.content]):
        return
    call = calls[0]
    c.equal("tools: the tool's name", call.name, "get_weather")
    c.check("tools: input is an object with a city", isinstance(call.input, dict) and "city" in call.input,
            input=call.input)
    conversation = ask + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 C and sunny"}]},
    ]
    final = client.messages.create(model=model, max_tokens=256, tools=[WEATHER], messages=conversation)
    c.equal("tools: final stop_reason", final.stop_reason, "end_turn")
    text = "".join(b.text for b in final.content if b.type == "text")
    c.check("tools: the answer quotes the result", expect_text in text, text=text)
    forced = client.messages.create(model=model, max_tokens=256, tools=[WEATHER], messages=ask,
                                    tool_choice={"type": "tool", "name": "get_weather"})
    c.check("tools: tool_choice tool calls it", any(b.type == "tool_use" for b in forced.content),
            content=[b.model_dump() for b in forced.content])
    with client.messages.stream(model=model, max_tokens=256, tools=[WEATHER], messages=ask) as stream:
        streamed = stream.get_final_message()
    streamed_calls = [b for b in streamed.content if b.type == "tool_use"]
    c.check("tools: streamed tool_use with its input", len(streamed_calls) == 1
            and streamed_calls[0].input == call.input, content=[b.model_dump() for b in streamed.content])
    c.equal("tools: streamed stop_reason", streamed.stop_reason, "tool_use")


def offline_tools(c):
    tool_round_trip(c, ECHO, "[get_weather] 18 C and sunny")


def offline_count_tokens(c):
    short = client.messages.count_tokens(model=ECHO, messages=[{"role": "user", "content": "Hi"}])
    long = client.messages.count_tokens(model=ECHO, system="You are a helpful assistant.", tools=[WEATHER],
                                        messages=[{"role": "user", "content": "Hi " * 50}])
    c.check("count_tokens: a count", short.input_tokens > 0, got=short.model_dump())
    c.check("count_tokens: more text, more tokens", long.input_tokens > short.input_tokens + 50,
            short=short.input_tokens, long=long.input_tokens)


def claude_create(c):
    message = client.messages.create(model=CLAUDE, max_tokens=128, system="Be brief.",
                                     messages=[{"role": "user", "content": "Hello"}])
    check_message(c, "claude create", message, os.environ["CLAUDE_CATALOGUE_ID"])
    c.equal("claude create: the fake's answer", message.content[0].text, "Hello.")
    with client.messages.stream(model=CLAUDE, max_tokens=128,
                                messages=[{"role": "user", "content": "Hello"}]) as stream:
        text = "".join(stream.text_stream)
    c.equal("claude stream: the text", text, "Hello.")


def claude_tools(c):
    tool_round_trip(c, CLAUDE, "The tool says")


def expect_error(c, step, exception, status, kind, call):
    try:
        call()
    except exception as error:
        c.equal(f"{step}: status", error.status_code, status)
        body = error.body if isinstance(error.body, dict) else {}
        c.equal(f"{step}: Anthropic's error shape", (body.get("type"), body.get("error", {}).get("type")),
                ("error", kind), body=error.body)
        return
    except Exception as error:  # noqa: BLE001
        c.check(f"{step}: raises {exception.__name__}", False, raised=f"{type(error).__name__}: {error}")
        return
    c.check(f"{step}: raises {exception.__name__}", False, raised="nothing")


def errors(c):
    hello = [{"role": "user", "content": "Hello"}]
    expect_error(c, "unknown model", anthropic.NotFoundError, 404, "not_found_error",
                 lambda: client.messages.create(model="claude-no-such-model", max_tokens=8, messages=hello))
    expect_error(c, "top_k on a bridged model", anthropic.BadRequestError, 400, "invalid_request_error",
                 lambda: client.messages.create(model=ECHO, max_tokens=8, messages=hello, extra_body={"top_k": 5}))
    expect_error(c, "a bad role", anthropic.BadRequestError, 400, "invalid_request_error",
                 lambda: client.messages.create(model=ECHO, max_tokens=8,
                                                messages=[{"role": "robot", "content": "x"}]))
    bad_key = anthropic.Anthropic(api_key="sk_" + "0" * 64, max_retries=0)
    expect_error(c, "a wrong key", anthropic.AuthenticationError, 401, "authentication_error",
                 lambda: bad_key.messages.create(model=ECHO, max_tokens=8, messages=hello))
    no_chat = anthropic.Anthropic(api_key=os.environ["NO_CHAT_KEY"], max_retries=0)
    expect_error(c, "a key without the chat scope", anthropic.PermissionDeniedError, 403, "permission_error",
                 lambda: no_chat.messages.create(model=ECHO, max_tokens=8, messages=hello))


checks = Checks("anthropic-python")
checks.run("offline_create", offline_create)
checks.run("offline_stream", offline_stream)
checks.run("offline_tools", offline_tools)
checks.run("offline_count_tokens", offline_count_tokens)
checks.run("claude_create", claude_create)
checks.run("claude_tools", claude_tools)
checks.run("errors", errors)
checks.finish()
