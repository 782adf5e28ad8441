// The official Anthropic TypeScript SDK (`@anthropic-ai/sdk`, pinned in
// package-lock.json) against a running unigen API, unchanged except for its
// base URL (ANTHROPIC_BASE_URL, the service's origin) and key
// (ANTHROPIC_API_KEY, sent as x-api-key). Run by the end-to-end test
// `anthropic_messages::the_anthropic_typescript_sdk_works_unchanged`, as
// python/anthropic_check.py is: flows `offline_*` on the built-in
// `local/echo` (bridged through chat), `claude_*` on CLAUDE_MODEL (an alias
// of a model on the fake anthropic upstream), `errors` checks each error is
// the SDK's exception class for it. Each failed step is printed with the
// bodies involved; the exit status is non-zero when any failed.
import fs from 'node:fs';
import { isDeepStrictEqual } from 'node:util';

import Anthropic from '@anthropic-ai/sdk';

const ECHO = 'local/echo';
const CLAUDE = process.env.CLAUDE_MODEL;
const client = new Anthropic({ maxRetries: 0, timeout: 120_000 });
const sdkVersion = JSON.parse(fs.readFileSync(new URL('./node_modules/@anthropic-ai/sdk/package.json', import.meta.url))).version;

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
  console.log(`--- anthropic-typescript ${sdkVersion} / ${name}`);
  try {
    await flow();
  } catch (error) {
    failures.push(`${name}: raised ${error?.constructor?.name}`);
    console.log(`FAILED: ${name}: raised ${error?.constructor?.name}: ${error?.message}`);
    if (error?.status) console.log(`    server answered: HTTP ${error.status} ${JSON.stringify(error.error)}`);
  }
}

const WEATHER = {
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

function checkMessage(step, message, model) {
  check(`${step}: id msg_...`, message.id.startsWith('msg_'), { id: message.id });
  equal(`${step}: type and role`, [message.type, message.role], ['message', 'assistant']);
  equal(`${step}: model`, message.model, model);
  check(`${step}: usage counted`, message.usage.input_tokens > 0 && message.usage.output_tokens > 0, { usage: message.usage });
}

const squeeze = (types) => types.filter((t, i) => i === 0 || t !== types[i - 1]);

await run('offline_create', async () => {
  const message = await client.messages.create({
    model: ECHO, max_tokens: 64, system: 'Be brief.', metadata: { user_id: 'user-42' },
    messages: [{ role: 'user', content: 'Hello there' }],
  });
  checkMessage('create', message, ECHO);
  equal('create: the echo', message.content.map((b) => [b.type, b.text]), [['text', 'Hello there']]);
  equal('create: stop_reason', message.stop_reason, 'end_turn');
});

await run('offline_stream', async () => {
  const stream = client.messages.stream({ model: ECHO, max_tokens: 64, messages: [{ role: 'user', content: 'Stream me, please' }] });
  let text = '';
  stream.on('text', (delta) => { text += delta; });
  const final = await stream.finalMessage();
  equal('stream: the text', text, 'Stream me, please');
  checkMessage('stream: final message', final, ECHO);
  equal('stream: stop_reason', final.stop_reason, 'end_turn');
  const raw = await client.messages.create({ model: ECHO, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Order of events' }] });
  const types = [];
  for await (const event of raw) types.push(event.type);
  equal('stream: true: the events in order', squeeze(types), [
    'message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
});

async function toolRoundTrip(model, expectText) {
  const ask = [{ role: 'user', content: 'Weather in Paris?' }];
  const first = await client.messages.create({ model, max_tokens: 256, tools: [WEATHER], messages: ask });
  equal('tools: stop_reason', first.stop_reason, 'tool_use');
  const calls = first.content.filter((b) => b.type === 'tool_use');
  if (!equal('tools: one tool_use block', calls.length, 1)) return;
  const call = calls[0];
  equal('tools: the tool', call.name, 'get_weather');
  check('tools: input has a city', typeof call.input?.city === 'string', { input: call.input });
  const final = await client.messages.create({
    model, max_tokens: 256, tools: [WEATHER], messages: [
      ...ask,
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: '18 C and sunny' }] },
    ],
  });
  equal('tools: final stop_reason', final.stop_reason, 'end_turn');
  const text = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  check('tools: the answer quotes the result', text.includes(expectText), { text });
  const streamed = await client.messages.stream({ model, max_tokens: 256, tools: [WEATHER], messages: ask }).finalMessage();
  const streamedCalls = streamed.content.filter((b) => b.type === 'tool_use');
  check('tools: streamed tool_use with its input', streamedCalls.length === 1 && isDeepStrictEqual(streamedCalls[0].input, call.input),
    { content: streamed.content });
}

await run('offline_tools', () => toolRoundTrip(ECHO, '[get_weather] 18 C and sunny'));

await run('offline_count_tokens', async () => {
  const short = await client.messages.countTokens({ model: ECHO, messages: [{ role: 'user', content: 'Hi' }] });
  const long = await client.messages.countTokens({
    model: ECHO, system: 'You are a helpful assistant.', tools: [WEATHER], messages: [{ role: 'user', content: 'Hi '.repeat(50) }],
  });
  check('count_tokens: a count', short.input_tokens > 0, { short });
  check('count_tokens: more text, more tokens', long.input_tokens > short.input_tokens + 50, { short, long });
});

await run('claude_create', async () => {
  const message = await client.messages.create({ model: CLAUDE, max_tokens: 128, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello' }] });
  checkMessage('claude create', message, process.env.CLAUDE_CATALOGUE_ID);
  equal("claude create: the fake's answer", message.content[0].text, 'Hello.');
  const final = await client.messages.stream({ model: CLAUDE, max_tokens: 128, messages: [{ role: 'user', content: 'Hello' }] }).finalMessage();
  equal('claude stream: the text', final.content[0].text, 'Hello.');
});

await run('claude_tools', () => toolRoundTrip(CLAUDE, 'The tool says'));

async function expectError(step, ErrorClass, status, kind, call) {
  try {
    await call();
  } catch (error) {
    if (!check(`${step}: raises ${ErrorClass.name}`, error instanceof ErrorClass, { raised: `${error?.constructor?.name}: ${error?.message}` })) return;
    equal(`${step}: status`, error.status, status);
    equal(`${step}: Anthropic's error shape`, [error.error?.type, error.error?.error?.type], ['error', kind]);
    return;
  }
  check(`${step}: raises ${ErrorClass.name}`, false, { raised: 'nothing' });
}

await run('errors', async () => {
  const hello = [{ role: 'user', content: 'Hello' }];
  await expectError('unknown model', Anthropic.NotFoundError, 404, 'not_found_error',
    () => client.messages.create({ model: 'claude-no-such-model', max_tokens: 8, messages: hello }));
  await expectError('top_k on a bridged model', Anthropic.BadRequestError, 400, 'invalid_request_error',
    () => client.messages.create({ model: ECHO, max_tokens: 8, top_k: 5, messages: hello }));
  const badKey = new Anthropic({ apiKey: `sk_${'0'.repeat(64)}`, maxRetries: 0 });
  await expectError('a wrong key', Anthropic.AuthenticationError, 401, 'authentication_error',
    () => badKey.messages.create({ model: ECHO, max_tokens: 8, messages: hello }));
  const noChat = new Anthropic({ apiKey: process.env.NO_CHAT_KEY, maxRetries: 0 });
  await expectError('a key without the chat scope', Anthropic.PermissionDeniedError, 403, 'permission_error',
    () => noChat.messages.create({ model: ECHO, max_tokens: 8, messages: hello }));
});

console.log(`anthropic-typescript ${sdkVersion}: ${passed} checks ok, ${failures.length} failed`);
for (const failure of failures) console.log(`  failed: ${failure}`);
process.exit(failures.length ? 1 : 0);
