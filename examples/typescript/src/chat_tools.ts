// Chat with tools: the model asks for a tool call, the program runs the tool
// and sends its result back, and the model answers with it. With the
// built-in `local/echo` test model (the `gpt-4o-mini` alias) the call's
// arguments are placeholders valid for the schema and the answer quotes the
// tool's result; a real upstream model gets the same requests.
//
//   export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
//   npm ci && npm run build && node dist/chat_tools.js
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";

const client = new OpenAI();
const model = "gpt-4o-mini";

function getWeather(city: string): string {
  return `18 C and sunny in ${city}`;
}

const tools: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city.",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];
const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];

const reply = await client.chat.completions.create({ model, messages, tools });
const message = reply.choices[0].message;
if (!message.tool_calls?.length) {
  console.error("expected a tool call", message);
  process.exit(1);
}
messages.push(message);
for (const call of message.tool_calls) {
  if (call.type !== "function") continue;
  const args = JSON.parse(call.function.arguments) as { city: string };
  console.log(`tool call: ${call.function.name}(${JSON.stringify(args)})`);
  messages.push({ role: "tool", tool_call_id: call.id, content: getWeather(args.city) });
}

const answer = await client.chat.completions.create({ model, messages, tools });
const text = answer.choices[0].message.content ?? "";
console.log(`answer: ${text}`);
if (!text.includes("18 C and sunny")) {
  console.error("the answer does not use the tool's result");
  process.exit(1);
}
