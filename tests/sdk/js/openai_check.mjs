// The official OpenAI JS SDK (pinned in package-lock.json, `npm ci`) against
// a running unigen API, unchanged except for its base URL and key (read from
// OPENAI_BASE_URL / OPENAI_API_KEY). Run by the end-to-end test
// `clients::the_openai_js_sdk_works_unchanged`, which starts the API with a
// fake upstream (../fake_upstream.py); the environment is described in
// ../sdkcheck.py. Every flow runs; each failed step is printed with the
// bodies involved, and the exit status is non-zero when any failed.
import { Buffer } from 'node:buffer';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import zlib from 'node:zlib';

import OpenAI, { toFile } from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

// Node 18 (Debian 12's) has no global File; the SDK asks for this line there.
if (!globalThis.File) globalThis.File = (await import('node:buffer')).File;

const env = process.env;
const CHAT = env.FAKE_CHAT_MODEL;
const EMBED = env.FAKE_EMBED_MODEL;
const client = new OpenAI({ maxRetries: 0, timeout: 120_000 });
const sdkVersion = JSON.parse(fs.readFileSync(new URL('./node_modules/openai/package.json', import.meta.url))).version;

// ---- step bookkeeping (as ../sdkcheck.py) ----
let passed = 0;
const failures = [];
let flowName = '?';
const only = new Set((env.CLIENT_CHECKS || '').split(',').map((s) => s.trim()).filter(Boolean));

function show(value) {
  let text;
  try {
    text = JSON.stringify(value, (k, v) => (v instanceof Headers ? Object.fromEntries(v) : v));
  } catch {
    text = String(value);
  }
  if (text === undefined) text = String(value);
  return text.length > 4000 ? `${text.slice(0, 4000)}... (${text.length} chars)` : text;
}

function check(step, condition, details = {}) {
  const name = `${flowName}: ${step}`;
  if (condition) {
    passed += 1;
    console.log(`ok: ${name}`);
    return true;
  }
  failures.push(name);
  console.log([`FAILED: ${name}`, ...Object.entries(details).map(([k, v]) => `    ${k}: ${show(v)}`)].join('\n'));
  return false;
}

const equal = (step, got, expected, details = {}) => check(step, isDeepStrictEqual(got, expected), { got, expected, ...details });

async function attempt(step, call) {
  try {
    return await call();
  } catch (error) {
    check(step, false, { raised: `${error?.constructor?.name}: ${error?.message}`, status: error?.status, server: error?.error });
    return null;
  }
}

async function run(name, flow) {
  if (only.size && !only.has(name)) return;
  flowName = name;
  console.log(`--- openai-node ${sdkVersion} / ${name}`);
  try {
    await flow();
  } catch (error) {
    failures.push(`${name}: raised ${error?.constructor?.name}`);
    console.log(`FAILED: ${name}: raised ${error?.constructor?.name}: ${error?.message}`);
    if (error?.status) console.log(`    server answered: HTTP ${error.status} ${show(error.error ?? error.body)}`);
    console.log(`    ${String(error?.stack).replace(/\n/g, '\n    ')}`);
  }
}

// ---- the fake upstream's recordings ----
const upstream = {
  async reset() {
    await fetch(`${env.FAKE_UPSTREAM_URL}/__reset`, { method: 'POST' });
  },
  async requests(p) {
    const body = await (await fetch(`${env.FAKE_UPSTREAM_URL}/__recorded`)).json();
    return body.requests.filter((r) => !p || r.path === p);
  },
  chats() {
    return this.requests('/v1/chat/completions');
  },
  embeddings() {
    return this.requests('/v1/embeddings');
  },
};

function one(items, step) {
  equal(`${step}: the upstream got exactly one request`, items.length, 1, { recorded: items });
  return items[items.length - 1] ?? { body: {}, response: {}, headers: {} };
}

const decode = (value) =>
  typeof value === 'string'
    ? Array.from(new Float32Array(Uint8Array.from(Buffer.from(value, 'base64')).buffer))
    : value;

const usageOf = (u) => ({ prompt_tokens: u?.prompt_tokens, completion_tokens: u?.completion_tokens, total_tokens: u?.total_tokens });

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: {
        location: { type: 'string' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['location', 'unit'],
      additionalProperties: false,
    },
  },
};
const TIME = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'Current time in a timezone',
    parameters: { type: 'object', properties: { timezone: { type: 'string' } }, required: ['timezone'] },
  },
};
const CalendarEvent = z.object({ name: z.string(), date: z.string(), participants: z.array(z.string()) });

function schemaErrors(value, schema) {
  const errors = [];
  if (typeof value !== 'object' || value === null) return ['not an object'];
  for (const key of schema.required ?? []) if (!(key in value)) errors.push(`missing ${key}`);
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    if (!(key in value)) continue;
    if (sub.type === 'string' && typeof value[key] !== 'string') errors.push(`${key} not a string`);
    if (sub.enum && !sub.enum.includes(value[key])) errors.push(`${key} not in enum`);
  }
  return errors;
}

function checkRelayed(step, got, seen) {
  const sent = seen.response;
  equal(`${step}: upstream model`, seen.body.model, env.UPSTREAM_CHAT_MODEL);
  equal(`${step}: upstream key`, seen.headers.authorization, `Bearer ${env.UPSTREAM_API_KEY}`);
  equal(`${step}: choices relayed whole`, got.choices, sent.choices);
  check(`${step}: our id`, String(got.id).startsWith('chatcmpl-') && got.id !== sent.id, { id: got.id, upstream: sent.id });
  equal(`${step}: our model id`, got.model, CHAT);
  equal(`${step}: system_fingerprint`, got.system_fingerprint, sent.system_fingerprint);
  equal(`${step}: usage from the upstream's`, usageOf(got.usage), usageOf(sent.usage), { usage: got.usage });
  check(`${step}: credits_used`, Number.isInteger(got.usage?.credits_used), { usage: got.usage });
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

function checkStream(step, chunks, seen, usageAsked) {
  equal(`${step}: upstream got stream true`, seen.body.stream, true);
  equal(`${step}: upstream asked for usage`, seen.body.stream_options, { include_usage: true }, { body: seen.body });
  const got = chunks.flatMap((c) => c.choices ?? []);
  const sent = seen.response.flatMap((c) => c.choices ?? []);
  equal(`${step}: every delta relayed unchanged`, got.map((c) => [c.index, c.delta]), sent.map((c) => [c.index, c.delta]));
  check(`${step}: our model on every chunk`, chunks.every((c) => c.model === CHAT), { models: [...new Set(chunks.map((c) => c.model))] });
  const withUsage = chunks.filter((c) => c.usage);
  if (usageAsked) {
    const last = chunks[chunks.length - 1];
    check(`${step}: usage chunk last, from the upstream's`,
      last?.usage && isDeepStrictEqual(usageOf(last.usage), usageOf(seen.response[seen.response.length - 1].usage)),
      { last, upstream: seen.response[seen.response.length - 1] });
  } else {
    equal(`${step}: no usage chunk`, withUsage, []);
  }
}

// ---- flows against the fake upstream ----
async function upstreamChat() {
  await upstream.reset();
  const messages = [{ role: 'developer', content: 'Answer briefly.' }, { role: 'user', content: 'Hello from JS' }];
  const { data: reply, response } = await client.chat.completions.create({ model: CHAT, messages }).withResponse();
  const seen = one(await upstream.chats(), 'chat');
  checkRelayed('chat', reply, seen);
  equal('chat: content', reply.choices[0].message.content, 'Upstream reply to: Hello from JS');
  equal('chat: messages forwarded', seen.body.messages, messages);
  equal('chat: nothing the client did not send', Object.keys(seen.body).filter((k) => !['model', 'messages', 'stream'].includes(k)), [],
    { body: seen.body });
  check('chat: x-request-id', !!response.headers.get('x-request-id'), { headers: response.headers });
  let chunks = await collect(await client.chat.completions.create({
    model: CHAT, messages: [{ role: 'user', content: 'Stream from JS' }], stream: true, stream_options: { include_usage: true },
  }));
  checkStream('stream with usage', chunks, one((await upstream.chats()).slice(1), 'stream'), true);
  equal('stream: text', chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'Upstream reply to: Stream from JS');
  await upstream.reset();
  chunks = await collect(await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content: 'No usage' }], stream: true }));
  checkStream('stream without usage', chunks, one(await upstream.chats(), 'stream'), false);
}

async function upstreamPassthrough() {
  await upstream.reset();
  const passthrough = {
    tools: [WEATHER], tool_choice: 'none', parallel_tool_calls: false, response_format: { type: 'json_object' }, n: 2,
    logprobs: true, top_logprobs: 1, seed: 11, logit_bias: { 50256: -100 }, metadata: { from: 'js' }, store: false,
    reasoning_effort: 'low', service_tier: 'default',
  };
  const interpreted = { temperature: 0.5, top_p: 0.5, max_completion_tokens: 20, frequency_penalty: 0.5, presence_penalty: 0.5, stop: 'END', user: 'js-user' };
  const reply = await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content: 'JSON' }], ...passthrough, ...interpreted });
  const seen = one(await upstream.chats(), 'pass-through');
  for (const [key, value] of Object.entries({ ...passthrough, ...interpreted })) {
    equal(`pass-through: ${key}`, seen.body[key], key === 'logit_bias' ? { 50256: -100 } : value);
  }
  check('pass-through: no max_tokens added', !('max_tokens' in seen.body), { body: seen.body });
  equal('pass-through: choices relayed', reply.choices, seen.response.choices);
}

async function upstreamTools() {
  await upstream.reset();
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const first = await client.chat.completions.create({ model: CHAT, messages, tools: [WEATHER, TIME] });
  const seen = one(await upstream.chats(), 'tool call');
  checkRelayed('tool call', first, seen);
  const message = first.choices[0].message;
  equal('tool call: content null, finish tool_calls', [message.content, first.choices[0].finish_reason], [null, 'tool_calls']);
  equal('tool call: tools forwarded', seen.body.tools, [WEATHER, TIME]);
  const call = message.tool_calls?.[0];
  if (!check('tool call: a call', !!call, { message })) return;
  await upstream.reset();
  const second = await client.chat.completions.create({
    model: CHAT, tools: [WEATHER, TIME],
    messages: [...messages, message, { role: 'tool', tool_call_id: call.id, content: '18 degrees' }],
  });
  const forwarded = one(await upstream.chats(), 'tool result').body.messages ?? [];
  equal('tool result: tool message forwarded', forwarded[2], { role: 'tool', tool_call_id: call.id, content: '18 degrees' });
  equal('tool result: answer', second.choices[0].message.content, `tool ${call.id} said: 18 degrees`);
  await upstream.reset();
  const chunks = await collect(await client.chat.completions.create({
    model: CHAT, messages, tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true,
  }));
  const streamed = one(await upstream.chats(), 'streamed tool call');
  checkStream('streamed tool call', chunks, streamed, false);
  equal('streamed tool call: delta.tool_calls relayed', chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? [])),
    streamed.response.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? [])));
  await upstream.reset();
  const runner = client.chat.completions.stream({ model: CHAT, messages, tools: [WEATHER] });
  const final = await runner.finalChatCompletion();
  equal('stream helper: assembled call', final.choices[0].message.tool_calls?.[0]?.function?.name, 'get_weather');
}

async function upstreamStructured() {
  await upstream.reset();
  const completion = await client.chat.completions.parse({
    model: CHAT, messages: [{ role: 'user', content: 'Alice and Bob go to a fair on Friday.' }],
    response_format: zodResponseFormat(CalendarEvent, 'event'),
  });
  const seen = one(await upstream.chats(), 'zodResponseFormat');
  equal('zodResponseFormat: json_schema forwarded', seen.body.response_format?.type, 'json_schema');
  equal('zodResponseFormat: parsed', completion.choices[0].message.parsed, JSON.parse(seen.response.choices[0].message.content));
}

async function upstreamChoices() {
  await upstream.reset();
  const reply = await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content: 'Three' }], n: 3, logprobs: true, top_logprobs: 2 });
  const seen = one(await upstream.chats(), 'n=3');
  checkRelayed('n=3', reply, seen);
  equal('n=3: indexes', reply.choices.map((c) => c.index), [0, 1, 2]);
  await upstream.reset();
  const refusal = await client.chat.completions.create({ model: CHAT, messages: [{ role: 'user', content: 'please refuse' }] });
  one(await upstream.chats(), 'refusal');
  equal('refusal relayed', [refusal.choices[0].message.refusal, refusal.choices[0].message.content], ["I can't help with that.", null]);
}

async function upstreamEmbeddings() {
  const cases = [
    ['SDK default (base64)', { input: ['a cat', 'a dog'] }],
    ['float', { input: 'one', encoding_format: 'float' }],
    ['dimensions', { input: 'short', dimensions: 8 }],
    ['token ids', { input: [[1820, 8415], [389]] }],
  ];
  for (const [name, params] of cases) {
    await upstream.reset();
    const result = await client.embeddings.create({ model: EMBED, ...params });
    const seen = one(await upstream.embeddings(), name);
    equal(`embeddings ${name}: input forwarded`, seen.body.input, params.input);
    equal(`embeddings ${name}: upstream model`, seen.body.model, env.UPSTREAM_EMBED_MODEL);
    if (params.dimensions) equal(`embeddings ${name}: dimensions forwarded`, seen.body.dimensions, params.dimensions);
    equal(`embeddings ${name}: vectors relayed`, result.data.map((d) => decode(d.embedding)), seen.response.data.map((d) => decode(d.embedding)));
    equal(`embeddings ${name}: our model`, result.model, EMBED);
  }
}

// ---- offline flows (built-in models, OpenAI aliases) ----
async function offlineChat() {
  const reply = await client.chat.completions.create({ model: 'local/echo', messages: [{ role: 'developer', content: 'x' }, { role: 'user', content: 'Hi local' }] });
  equal('chat local/echo (developer role accepted)', reply.choices[0].message.content, 'Hi local');
  const chunks = await collect(await client.chat.completions.create({
    model: 'local/echo', messages: [{ role: 'user', content: 'Streaming works token by token' }], stream: true, stream_options: { include_usage: true },
  }));
  equal('stream', chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'Streaming works token by token');
  check('stream usage', !!chunks[chunks.length - 1]?.usage, { last: chunks[chunks.length - 1] });
  const two = await client.chat.completions.create({ model: 'local/echo', messages: [{ role: 'user', content: 'Twice' }], n: 2 });
  equal('n=2', two.choices.map((c) => c.message.content), ['Twice', 'Twice']);
}

async function offlineTools() {
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const reply = await client.chat.completions.create({ model: 'local/echo', messages, tools: [WEATHER, TIME] });
  const message = reply.choices[0].message;
  const call = message.tool_calls?.[0];
  check('tool call: call_0 get_weather, content null', message.tool_calls?.length === 1 && call.id === 'call_0' && call.function.name === 'get_weather'
    && message.content === null && reply.choices[0].finish_reason === 'tool_calls', { message, finish: reply.choices[0].finish_reason });
  if (call) {
    let args;
    try { args = JSON.parse(call.function.arguments); } catch { args = null; }
    equal('tool call: arguments valid', schemaErrors(args, WEATHER.function.parameters), [], { arguments: call.function.arguments });
    const final = await client.chat.completions.create({
      model: 'local/echo', tools: [WEATHER, TIME], messages: [...messages, message, { role: 'tool', tool_call_id: call.id, content: '18 degrees' }],
    });
    equal('tool result: text', final.choices[0].message.content, 'Weather in Paris?\n[get_weather] 18 degrees');
  }
  const chunks = await collect(await client.chat.completions.create({ model: 'local/echo', messages, tools: [WEATHER], stream: true }));
  const deltas = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
  let args = null;
  try { args = JSON.parse(deltas.map((d) => d.function?.arguments ?? '').join('')); } catch { /* reported below */ }
  check('streamed tool call', deltas[0]?.id === 'call_0' && deltas[0]?.function?.name === 'get_weather' && schemaErrors(args, WEATHER.function.parameters).length === 0,
    { deltas });
  const parsed = await client.chat.completions.parse({
    model: 'local/echo', messages: [{ role: 'user', content: 'Alice and Bob go to a fair on Friday.' }],
    response_format: zodResponseFormat(CalendarEvent, 'event'),
  });
  check('zodResponseFormat offline: parsed', CalendarEvent.safeParse(parsed.choices[0].message.parsed).success, { message: parsed.choices[0].message });
}

async function offlineEmbeddings() {
  const base64 = await client.embeddings.create({ model: 'local/hash-embed', input: ['a cat', 'a dog'] });
  const floats = await client.embeddings.create({ model: 'local/hash-embed', input: ['a cat', 'a dog'], encoding_format: 'float' });
  check('base64 default decoded = float', base64.data.length === 2 && base64.data[0].embedding.every((v, i) => Math.abs(v - floats.data[0].embedding[i]) < 1e-6),
    { base64: base64.data[0].embedding.slice(0, 4), float: floats.data[0].embedding.slice(0, 4) });
  const small = await client.embeddings.create({ model: 'local/hash-embed', input: 'x', dimensions: 16, encoding_format: 'float' });
  equal('dimensions honoured', small.data[0].embedding.length, 16);
  const tokens = await client.embeddings.create({ model: 'local/hash-embed', input: [[1, 2, 3], [4]] });
  equal('token ids', tokens.data.length, 2);
}

function png(width, height, rgba) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type), data]);
    const sum = Buffer.alloc(4); sum.writeUInt32BE(crc(body));
    return Buffer.concat([len, body, sum]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0); header.writeUInt32BE(height, 4); header[8] = 8; header[9] = 6;
  const rows = [];
  for (let y = 0; y < height; y++) {
    rows.push(Buffer.from([0]));
    for (let x = 0; x < width; x++) rows.push(Buffer.from(rgba(x, y)));
  }
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))), chunk('IEND', Buffer.alloc(0))]);
}

const pngSize = (buf) => (buf.subarray(1, 4).toString() === 'PNG' ? [buf.readUInt32BE(16), buf.readUInt32BE(20)] : null);

async function offlineImagesAudio() {
  const image = await client.images.generate({ model: 'local/procedural-v1', prompt: 'a lighthouse', size: '512x512', response_format: 'b64_json' });
  const bytes = Buffer.from(image.data?.[0]?.b64_json ?? '', 'base64');
  equal('images.generate b64_json: 512x512 PNG', pngSize(bytes), [512, 512]);
  const source = bytes.length ? bytes : png(64, 64, () => [200, 30, 30, 255]);
  const mask = png(512, 512, (x, y) => [0, 0, 0, x > 128 && x < 384 && y > 128 && y < 384 ? 0 : 255]);
  const edited = await client.images.edit({
    model: 'local/classic-edit', prompt: 'add a moon', response_format: 'b64_json',
    image: await toFile(source, 'source.png', { type: 'image/png' }), mask: await toFile(mask, 'mask.png', { type: 'image/png' }),
  });
  check('images.edit multipart', Buffer.from(edited.data?.[0]?.b64_json ?? '', 'base64').length > 1000, { data: edited.data });
  const magic = {};
  for (const format of ['wav', 'flac', 'pcm']) {
    const speech = await attempt(`speech ${format}`, () =>
      client.audio.speech.create({ model: 'local/espeak', voice: 'alloy', input: 'Hello world from the JS client.', response_format: format }));
    magic[format] = speech ? Buffer.from(await speech.arrayBuffer()) : Buffer.alloc(0);
  }
  equal('speech wav/flac magic', [magic.wav.subarray(0, 4).toString(), magic.flac.subarray(0, 4).toString()], ['RIFF', 'fLaC']);
  check('speech pcm: raw samples', magic.pcm.length > 10000 && magic.pcm.length % 2 === 0 && !['RIFF', 'fLaC'].includes(magic.pcm.subarray(0, 4).toString()),
    { head: magic.pcm.subarray(0, 8).toString('hex'), length: magic.pcm.length });
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'unigen-js-')), 'speech.wav');
  fs.writeFileSync(file, magic.wav);
  const text = await client.audio.transcriptions.create({ file: fs.createReadStream(file), model: 'local/whisper-tiny-en' });
  check('transcriptions multipart', /hello world/i.test(text.text ?? ''), { text });
  const verbose = await client.audio.transcriptions.create({ file: fs.createReadStream(file), model: 'local/whisper-tiny-en', response_format: 'verbose_json' });
  check('transcriptions verbose_json', /hello/i.test(verbose.text ?? '') && verbose.duration > 1 && Array.isArray(verbose.segments) && !!verbose.language, { verbose });
  const translation = await client.audio.translations.create({ file: await toFile(fs.readFileSync(file), 'speech.wav'), model: 'local/whisper-tiny-en' });
  check('translations multipart', /hello/i.test(translation.text ?? ''), { translation });
}

async function models() {
  const model = await client.models.retrieve('local/echo');
  equal('models.retrieve with a slash', model.id, 'local/echo');
}

async function headers() {
  const { data, response, request_id: requestId } = await client.chat.completions
    .create({ model: 'local/echo', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  const missing = ['x-request-id', 'openai-processing-ms', 'x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests']
    .filter((h) => !response.headers.get(h));
  equal('headers', missing, [], { headers: response.headers });
  check('request_id / _request_id', requestId && requestId === response.headers.get('x-request-id') && data._request_id === requestId,
    { requestId, header: response.headers.get('x-request-id'), _request_id: data._request_id });
  const echoed = await client.chat.completions.create({ model: 'local/echo', messages: [{ role: 'user', content: 'hi' }] },
    { headers: { 'X-Request-Id': 'req-js-matrix-1' } }).withResponse();
  equal('client x-request-id echoed', echoed.response.headers.get('x-request-id'), 'req-js-matrix-1');
}

async function errors() {
  try {
    await client.get('/chat/completions');
    check('GET /chat/completions refused', false);
  } catch (error) {
    equal('405', error.status, 405, { error: error.error });
    check('405 Allow', (error.headers?.get?.('allow') ?? '').includes('POST'), { headers: error.headers });
    check('405 error shape', ['message', 'type', 'code', 'param'].every((k) => error.error && k in error.error), { error: error.error });
  }
  try {
    const answer = await client.chat.completions.create({ model: 'local/echo', messages: [{ role: 'user', content: 'x' }], n: '2' });
    check('n as a string refused', false, { answer });
  } catch (error) {
    check('JSON type error: 400 param n, plain message', error.status === 400 && error.error?.param === 'n'
      && !/at line \d+ column \d+|invalid type: /.test(error.error?.message ?? ''), { status: error.status, error: error.error });
  }
  try {
    await new OpenAI({ apiKey: `sk_${'0'.repeat(64)}`, maxRetries: 0 }).models.list();
    check('bad key refused', false);
  } catch (error) {
    check('bad key: AuthenticationError', error instanceof OpenAI.AuthenticationError && error.status === 401, { status: error.status });
  }
}

// E: unchanged code naming OpenAI models runs offline on the local models.
async function aliases() {
  for (const model of ['gpt-4o-mini', 'gpt-4o', 'gpt-4.1-mini', 'gpt-4.1', 'gpt-3.5-turbo']) {
    const reply = await attempt(`chat ${model}`, () => client.chat.completions.create({ model, messages: [{ role: 'user', content: `Hi ${model}` }] }));
    if (reply) equal(`chat ${model}`, reply.choices[0].message.content, `Hi ${model}`);
  }
  const tools = await attempt('tools gpt-4o-mini', () => client.chat.completions.create({
    model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER] }));
  if (tools) equal('tools gpt-4o-mini: call_0', tools.choices[0].message.tool_calls?.map((t) => [t.id, t.function.name]), [['call_0', 'get_weather']]);
  for (const model of ['text-embedding-3-small', 'text-embedding-3-large', 'text-embedding-ada-002']) {
    const result = await attempt(`embeddings ${model}`, () => client.embeddings.create({ model, input: ['a cat', 'a dog'] }));
    if (result) equal(`embeddings ${model}: two vectors`, result.data.length, 2);
  }
  for (const [model, size] of [['dall-e-2', '512x512'], ['dall-e-3', '1024x1024'], ['gpt-image-1', '1024x1024']]) {
    const image = await attempt(`images.generate ${model}`, () => client.images.generate({ model, prompt: 'a fox', size, response_format: 'b64_json' }));
    if (image) equal(`images.generate ${model}: PNG size`, pngSize(Buffer.from(image.data?.[0]?.b64_json ?? '', 'base64')), size.split('x').map(Number));
  }
  for (const model of ['dall-e-2', 'gpt-image-1']) {
    const edited = await attempt(`images.edit ${model}`, async () => client.images.edit({
      model, prompt: 'a moon', response_format: 'b64_json', image: await toFile(png(64, 64, () => [200, 30, 30, 255]), 'a.png', { type: 'image/png' }) }));
    if (edited) check(`images.edit ${model}: an image`, !!edited.data?.[0]?.b64_json, { data: edited.data });
  }
  let wav = null;
  for (const model of ['tts-1', 'tts-1-hd']) {
    const speech = await attempt(`speech ${model}`, () => client.audio.speech.create({ model, voice: 'alloy', input: 'Hello world from the aliases.', response_format: 'wav' }));
    if (speech) {
      wav = Buffer.from(await speech.arrayBuffer());
      equal(`speech ${model}: wav`, wav.subarray(0, 4).toString(), 'RIFF');
    }
  }
  if (wav) {
    const text = await attempt('transcriptions whisper-1', async () => client.audio.transcriptions.create({ file: await toFile(wav, 'a.wav'), model: 'whisper-1' }));
    if (text) check('transcriptions whisper-1', /hello/i.test(text.text ?? ''), { text });
  }
}

for (const [name, flow] of [
  ['upstream_chat', upstreamChat], ['upstream_passthrough', upstreamPassthrough], ['upstream_tools', upstreamTools],
  ['upstream_structured', upstreamStructured], ['upstream_choices', upstreamChoices], ['upstream_embeddings', upstreamEmbeddings],
  ['offline_chat', offlineChat], ['offline_tools', offlineTools], ['offline_embeddings', offlineEmbeddings],
  ['offline_images_audio', offlineImagesAudio], ['models', models], ['headers', headers], ['errors', errors],
  ['aliases', aliases],
]) {
  await run(name, flow);
}
console.log(`openai-node ${sdkVersion}: ${passed} checks ok, ${failures.length} failed`);
for (const f of failures) console.log(`  failed: ${f}`);
process.exit(failures.length ? 1 : 0);
