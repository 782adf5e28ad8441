"""The OpenAI Agents SDK (PyPI `openai-agents`, tests/sdk/requirements.txt)
against a running unigen API, unchanged except for its base URL and key
(OPENAI_BASE_URL, OPENAI_API_KEY): an agent with a function tool runs to its
final output over the Responses API (Runner.run and Runner.run_streamed),
offline against the built-in `local/echo` model (by its alias
`gpt-4o-mini`), which calls the tool once and then answers with its result. Run by the end-to-end test
`responses_api::the_openai_agents_sdk_runs_an_agent_with_a_function_tool`.
See ../sdkcheck.py for the environment.
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agents  # noqa: E402
from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402

from sdkcheck import Checks  # noqa: E402

# Traces would go to OpenAI's servers: nothing leaves the machine.
set_tracing_disabled(True)
# One event loop for every flow: the SDK's default client is bound to the
# loop it was first used on.
LOOP = asyncio.new_event_loop()

CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLS.append(city)
    return f"18 C and sunny in {city}"


def agent():
    # The SDK reads `prefix/name` as a provider prefix: the agent names the
    # OpenAI alias of local/echo in the default catalogue.
    return Agent(name="Weather", instructions="Answer with the weather.", model="gpt-4o-mini", tools=[get_weather])


def run(c):
    CALLS.clear()
    result = LOOP.run_until_complete(Runner.run(agent(), "Paris"))
    c.equal("the tool ran once, with the model's arguments", CALLS, ["Paris"])
    c.equal("final output", result.final_output, "Paris\n[get_weather] 18 C and sunny in Paris")
    kinds = [item.type for item in result.new_items]
    c.equal("run items", kinds, ["tool_call_item", "tool_call_output_item", "message_output_item"])
    usage = result.context_wrapper.usage
    c.check("usage summed over both model calls", usage.requests == 2 and usage.total_tokens > 0, usage=str(usage))


def run_streamed(c):
    CALLS.clear()

    async def go():
        result = Runner.run_streamed(agent(), "Lyon")
        kinds, deltas = [], []
        async for event in result.stream_events():
            kinds.append(event.type)
            if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
                deltas.append(event.data.delta)
        return result, kinds, deltas

    result, kinds, deltas = LOOP.run_until_complete(go())
    c.equal("the tool ran once", CALLS, ["Lyon"])
    c.equal("final output", result.final_output, "Lyon\n[get_weather] 18 C and sunny in Lyon")
    c.check("raw Responses events were streamed", "raw_response_event" in kinds and "run_item_stream_event" in kinds,
            kinds=sorted(set(kinds)))
    c.equal("text deltas rebuild the answer", "".join(deltas), result.final_output)


def main():
    c = Checks("openai-agents " + agents.__version__)
    for name, flow in [("run", run), ("run_streamed", run_streamed)]:
        c.run(name, flow)
    c.finish()


if __name__ == "__main__":
    main()
