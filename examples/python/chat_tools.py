"""Chat with tools: the model asks for a tool call, the program runs the tool
and sends its result back, and the model answers with it.

With the built-in `local/echo` test model (the `gpt-4o-mini` alias) the
call's arguments are placeholders valid for the tool's schema and the answer
quotes the tool's result; a real upstream model gets the same requests.

    export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
    python chat_tools.py
"""
import json

from openai import OpenAI

client = OpenAI()
MODEL = "gpt-4o-mini"


def get_weather(city: str) -> str:
    return f"18 C and sunny in {city}"


tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
message = reply.choices[0].message
if not message.tool_calls:
    raise SystemExit(f"expected a tool call, got: {message}")
messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
for call in message.tool_calls:
    arguments = json.loads(call.function.arguments)
    print(f"tool call: {call.function.name}({arguments})")
    result = get_weather(**arguments)
    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

answer = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
text = answer.choices[0].message.content
print("answer:", text)
if "18 C and sunny" not in (text or ""):
    raise SystemExit("the answer does not use the tool's result")
print(f"tokens: {answer.usage.total_tokens}")
