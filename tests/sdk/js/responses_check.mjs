// The official OpenAI JS SDK's Responses API (`client.responses`) against a
// running unigen API, unchanged except for its base URL and key (read from
// OPENAI_BASE_URL / OPENAI_API_KEY), offline against the built-in
// `local/echo` model. Run by the end-to-end test
// `responses_api::the_openai_js_sdk_speaks_the_responses_api`; the
// environment is described in ../sdkcheck.py. Every flow runs; each failed
// step is printed with the bodies involved, and the exit status is non-zero
// when any failed.
import fs from 'node:fs';
import { isDeepStrictEqual } from 'node:util';

import OpenAI from 'openai';

const MODEL = 'local/echo';
const client = new OpenAI({ maxRetries: 0, timeout: 120_000 });
const sdkVersion = JSON.parse(fs.readFileSync(new URL('./node_modules/openai/package.json', import.meta.url))).version;

let passed = 0;
const failures = [];
let flowName = '?';

function check(step, condition, details = {}) {
  const name = `${flowName}: ${step}`;
  if (condition) {
    passed += 1;
    console.log(`ok: ${name}`);
    return true;
  }
  failures.push(name);
  console.log([`FAILED: ${name}`, ...Object.entries(details).map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`)].join('\n'));
  return false;
}

const equal = (step, got, expected) => check(step, isDeepStrictEqual(got, expected), { got, expected });

async function run(name, flow) {
  flowName = name;
  console.log(`--- openai-node ${sdkVersion} responses / ${name}`);
  try {
    await flow();
  } catch (error) {
    failures.push(`${name}: raised ${error?.constructor?.name}`);
    console.log(`FAILED: ${name}: raised ${error?.constructor?.name}: ${error?.message}`);
    if (error?.status) console.log(`    server answered: HTTP ${error.status} ${JSON.stringify(error.error)}`);
  }
}

const WEATHER = {
  type: 'function', name: 'get_weather', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
};

await run('create', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Hello there', instructions: 'Be brief.' });
  equal('status', r.status, 'completed');
  equal('output_text', r.output_text, 'Hello there');
  check('usage', r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens && r.usage.output_tokens > 0, { usage: r.usage });
});

await run('stream', async () => {
  const stream = client.responses.stream({ model: MODEL, input: 'Stream me, token by token.' });
  const types = [];
  const deltas = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') deltas.push(event.delta);
  }
  const final = await stream.finalResponse();
  equal('first and last events', [types[0], types[1], types.at(-1)], ['response.created', 'response.in_progress', 'response.completed']);
  equal('deltas rebuild the text', deltas.join(''), 'Stream me, token by token.');
  equal('final response', final.output_text, 'Stream me, token by token.');
});

await run('tools', async () => {
  const first = await client.responses.create({ model: MODEL, input: 'Paris', tools: [WEATHER] });
  const call = first.output.find((o) => o.type === 'function_call');
  equal('function call', [call?.name, JSON.parse(call?.arguments ?? 'null')], ['get_weather', { city: 'Paris' }]);
  const second = await client.responses.create({
    model: MODEL, tools: [WEATHER], previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '18 C' }],
  });
  equal('answer after the result', second.output_text, 'Paris\n[get_weather] 18 C');
});

console.log(`openai-node ${sdkVersion} responses: ${passed} checks ok, ${failures.length} failed`);
for (const failure of failures) console.log(`  failed: ${failure}`);
process.exit(failures.length ? 1 : 0);
