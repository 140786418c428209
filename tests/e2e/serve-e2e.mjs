// End-to-end test of `memtile serve` through real clients: the openai and ollama npm packages.
// usage: node serve-e2e.mjs BASE_URL MODEL API_KEY OPENCLAW_SAMPLES_DIR
// The model has random weights, so the text is noise; the test checks protocol, determinism (greedy output
// of a request is the same alone, streamed, and among 8 concurrent streams), tools in the prompt, the prefix
// cache, cancellation and error shapes.
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import fs from 'node:fs';
import assert from 'node:assert/strict';

const [BASE, MODEL, KEY, SAMPLES] = process.argv.slice(2);
const auth = { Authorization: `Bearer ${KEY}` };
const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0 });
const ollama = new Ollama({ host: BASE, headers: auth });
const user = (content) => [{ role: 'user', content }];
const greedy = { temperature: 0, seed: 1 };
let failures = 0;

async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

async function metric(name) {
  const text = await (await fetch(`${BASE}/metrics`, { headers: auth })).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line ? Number(line.split(' ').pop()) : NaN;
}

async function waitIdle(ms = 5000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if ((await metric('memtile_slots_active')) === 0 && (await metric('memtile_queue_depth')) === 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`slots still active after ${ms} ms: ${await metric('memtile_slots_active')}`);
}

async function openaiText(content, max_tokens = 16) {
  const r = await openai.chat.completions.create({ model: MODEL, messages: user(content), max_tokens, ...greedy });
  return r.choices[0].message.content;
}

async function openaiStream(content, max_tokens = 16, extra = {}) {
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: user(content), max_tokens, stream: true, stream_options: { include_usage: true },
    ...greedy, ...extra,
  });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

async function ollamaStream(content, num_predict = 16) {
  let text = '', last = null;
  const parts = await ollama.chat({ model: MODEL, messages: user(content), stream: true, options: { num_predict, ...greedy } });
  for await (const p of parts) {
    text += p.message.content;
    last = p;
  }
  return { text, last };
}

await test('version, tags, ps, models, show', async () => {
  const v = await (await fetch(`${BASE}/api/version`)).json();
  assert.ok(v.version);
  const tags = await ollama.list();
  assert.ok(tags.models.some((m) => m.name === `${MODEL}:latest` && m.digest && m.modified_at));
  const ps = await ollama.ps();
  assert.ok(ps.models.length >= 1);
  const models = await openai.models.list();
  assert.ok(models.data.some((m) => m.id === MODEL));
  const show = await ollama.show({ model: MODEL });
  assert.ok(show.capabilities.includes('completion') && show.capabilities.includes('tools'));
  assert.match(show.parameters, /num_ctx \d+/);
  const arch = show.model_info['general.architecture'];
  assert.ok(show.model_info[`${arch}.context_length`] > 0);
});

await test('openai non-streaming and streaming agree (greedy)', async () => {
  const whole = await openai.chat.completions.create({ model: MODEL, messages: user('Say hello'), max_tokens: 12, ...greedy });
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0 && whole.usage.completion_tokens > 0);
  const s = await openaiStream('Say hello', 12);
  assert.equal(s.text, whole.choices[0].message.content);
  assert.ok(s.finish);
  assert.equal(s.usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(s.usage.completion_tokens, whole.usage.completion_tokens);
  // The same prompt again: all but the last prompt token come from the slot's KV cache.
  assert.equal(s.usage.prompt_tokens_details.cached_tokens, s.usage.prompt_tokens - 1);
});

await test('ollama non-streaming and streaming agree (greedy)', async () => {
  const whole = await ollama.chat({ model: MODEL, messages: user('Say hi'), stream: false, options: { num_predict: 12, ...greedy } });
  assert.equal(whole.done, true);
  assert.ok(whole.prompt_eval_count > 0 && whole.eval_count > 0 && whole.eval_duration > 0);
  const s = await ollamaStream('Say hi', 12);
  assert.equal(s.text, whole.message.content);
  assert.equal(s.last.done, true);
  assert.ok(['stop', 'length'].includes(s.last.done_reason));
  const g = await ollama.generate({ model: MODEL, prompt: 'Once upon', stream: false, options: { num_predict: 5 } });
  assert.equal(g.done, true);
  assert.equal(typeof g.response, 'string');
});

await test('openai /v1/completions', async () => {
  const r = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, ...greedy });
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].finish_reason);
  let n = 0;
  for await (const c of await openai.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 4, stream: true })) n++;
  assert.ok(n >= 2);
});

const tools = [{ type: 'function', function: { name: 'read', description: 'Read a file from the workspace',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } }];

await test('tools are rendered into the prompt and a tool result round-trips (ollama)', async () => {
  const base = { model: MODEL, stream: false, options: { num_predict: 4, ...greedy } };
  const plain = await ollama.chat({ ...base, messages: user('Read hello.txt') });
  const withTools = await ollama.chat({ ...base, messages: user('Read hello.txt'), tools });
  assert.ok(withTools.prompt_eval_count > plain.prompt_eval_count + 20, `${withTools.prompt_eval_count} vs ${plain.prompt_eval_count}`);
  const messages = [...user('Read hello.txt'),
    { role: 'assistant', content: '', tool_calls: [{ function: { name: 'read', arguments: { path: 'hello.txt' } } }] },
    { role: 'tool', content: 'The secret word is pineapple.', tool_name: 'read' },
    { role: 'user', content: 'What is the word?' }, { role: 'user', content: 'Answer briefly.' }];
  const after = await ollama.chat({ ...base, messages, tools });
  assert.equal(after.done, true);
  assert.ok(after.prompt_eval_count > withTools.prompt_eval_count + 10);
  assert.ok(after.prompt_cache_count > 0, 'the second turn reuses the first turn\'s prefix');
});

await test('tools and a tool result round-trip (openai, content null, string arguments)', async () => {
  const messages = [...user('Read hello.txt'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'callfake1', type: 'function', function: { name: 'read', arguments: '{"path":"hello.txt"}' } }] },
    { role: 'tool', tool_call_id: 'callfake1', content: 'The secret word is pineapple.' },
    { role: 'user', content: [{ type: 'text', text: 'What is the word?' }] }];
  const s = await openaiStream(null, 4, { messages, tools, tool_choice: 'auto' });
  assert.ok(s.finish);
  assert.ok(s.usage.prompt_tokens > 50);
});

await test('abort mid-stream frees the slot (openai and ollama)', async () => {
  await waitIdle();
  const stream = await openai.chat.completions.create({ model: MODEL, messages: user('Tell a long story'), max_tokens: 100000, stream: true });
  let n = 0;
  for await (const _ of stream) if (++n === 3) break;  // breaking out of the loop aborts the request
  await waitIdle(3000);
  const parts = await ollama.chat({ model: MODEL, messages: user('Tell a long story'), stream: true, options: { num_predict: 100000 } });
  n = 0;
  try {
    for await (const _ of parts) {
      if (++n === 3) {
        parts.abort();
        break;
      }
    }
  } catch (e) {
    assert.equal(e.name, 'AbortError');
  }
  await waitIdle(3000);
});

await test('8 concurrent streams equal the same requests run alone', async () => {
  const prompts = Array.from({ length: 8 }, (_, i) => `Stream number ${i}: ${'abc '.repeat(i)}go`);
  const alone = [];
  for (const p of prompts) alone.push(await openaiText(p, 20));
  const t0 = Date.now();
  const together = await Promise.all(prompts.map((p, i) => (i % 2 ? ollamaStream(p, 20).then((r) => r.text) : openaiStream(p, 20).then((r) => r.text))));
  for (let i = 0; i < 8; i++) assert.equal(together[i], alone[i], `stream ${i}`);
  const batch = await metric('memtile_decode_batch_size');
  console.log(`     8 streams in ${Date.now() - t0} ms; last batch ${batch}`);
});

await test('queue full gives 503 with a message', async () => {
  await waitIdle();
  const ctrl = new AbortController();
  const reqs = Array.from({ length: 14 }, () => fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, signal: ctrl.signal,
    body: JSON.stringify({ model: MODEL, messages: user('long'), max_tokens: 100000, stream: true }),
  }));
  const statuses = [];
  for (const r of reqs) {
    const res = await r;
    statuses.push(res.status);
    if (res.status === 503) assert.match((await res.json()).error.message, /busy/);
  }
  ctrl.abort();
  assert.ok(statuses.includes(503), statuses.join(','));
  assert.ok(!statuses.some((s) => s >= 500 && s !== 503), statuses.join(','));
  await waitIdle(5000);
});

await test('errors: unknown model 404, bad JSON 400, wrong types 400, no key 401, too large 413, too long 400', async () => {
  await assert.rejects(openai.chat.completions.create({ model: 'nope', messages: user('x') }), (e) => e.status === 404);
  await assert.rejects(ollama.chat({ model: 'nope', messages: user('x') }), (e) => e.status_code === 404);
  const post = (path, body, headers = auth) => fetch(`${BASE}${path}`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body });
  let r = await post('/v1/chat/completions', '{"model":');
  assert.equal(r.status, 400);
  assert.ok((await r.json()).error.message);
  r = await post('/api/chat', JSON.stringify({ model: MODEL, messages: 'hi' }));
  assert.equal(r.status, 400);
  assert.equal(typeof (await r.json()).error, 'string');
  r = await post('/v1/chat/completions', JSON.stringify({ model: MODEL, messages: user('x') }), {});
  assert.equal(r.status, 401);
  r = await post('/api/chat', JSON.stringify({ model: MODEL, messages: user('x') }), { Authorization: 'Bearer wrong' });
  assert.equal(r.status, 401);
  r = await post('/v1/chat/completions', JSON.stringify({ model: MODEL, messages: user('x'.repeat(3 << 20)) }));
  assert.equal(r.status, 413);
  const long = 'word '.repeat(30000);
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: user(long) }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded');
  r = await post('/api/chat', JSON.stringify({ model: MODEL, messages: user(long) }));
  assert.equal(r.status, 400);
  assert.match((await r.json()).error, /context/);
});

async function replayOllama(file) {
  const body = JSON.parse(fs.readFileSync(`${SAMPLES}/${file}`, 'utf8'));
  body.model = `${MODEL}:latest`;
  body.options = { ...body.options, num_predict: 16 };  // random weights: keep the reply short
  const res = await fetch(`${BASE}/api/chat`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const lines = (await res.text()).trim().split('\n').map((l) => JSON.parse(l));
  for (const l of lines) {
    assert.ok(!('error' in l), l.error);
    assert.equal(typeof l.message.content, 'string');
  }
  const last = lines.at(-1);
  assert.equal(last.done, true);
  assert.ok(last.done_reason && last.prompt_eval_count > 1000 && last.eval_count >= 0, JSON.stringify(last));
  return last;
}

async function replayOpenAI(file) {
  const body = JSON.parse(fs.readFileSync(`${SAMPLES}/${file}`, 'utf8'));
  body.model = MODEL;
  body.max_completion_tokens = 16;
  const res = await fetch(`${BASE}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  assert.ok(chunks.some((c) => c.choices[0]?.finish_reason), 'a finish_reason');
  for (const c of chunks) if (c.choices.length) assert.ok('delta' in c.choices[0]);
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.prompt_tokens > 1000);
  return usage.usage;
}

if (process.env.MEMTILE_E2E_SKIP_REPLAY) console.log('skip replay of OpenClaw requests (MEMTILE_E2E_SKIP_REPLAY is set)');
else await test('replay OpenClaw requests (fields OpenClaw reads, prefix cache on the second turn)', async () => {
  const first = await replayOllama('sample_ollama_chat.json');
  const second = await replayOllama('sample_ollama_chat_after_tool.json');
  assert.ok(second.prompt_cache_count > first.prompt_eval_count / 2, `cached ${second.prompt_cache_count}`);
  console.log(`     ollama: turn 1 ${first.prompt_eval_count} prompt tokens, ${(first.prompt_eval_duration / 1e6).toFixed(0)} ms prefill; ` +
    `turn 2 ${second.prompt_eval_count} (${second.prompt_cache_count} cached), ${(second.prompt_eval_duration / 1e6).toFixed(0)} ms prefill`);
  const u1 = await replayOpenAI('sample_openai_chat.json');
  const u2 = await replayOpenAI('sample_openai_chat_after_tool.json');
  assert.ok(u2.prompt_tokens_details.cached_tokens > u1.prompt_tokens / 2);
  console.log(`     openai: turn 1 ${u1.prompt_tokens} prompt tokens; turn 2 ${u2.prompt_tokens} (${u2.prompt_tokens_details.cached_tokens} cached)`);
});

await test('metrics are Prometheus text with the server series', async () => {
  const text = await (await fetch(`${BASE}/metrics`, { headers: auth })).text();
  for (const m of ['memtile_requests_total', 'memtile_prompt_tokens_total', 'memtile_prompt_tokens_cached_total',
    'memtile_generated_tokens_total', 'memtile_time_to_first_token_seconds_bucket', 'memtile_token_latency_seconds_bucket',
    'memtile_decode_tokens_per_second', 'memtile_kv_cells_used', 'memtile_queue_depth', 'memtile_roofline_percent'])
    assert.ok(text.includes(m), m);
  assert.ok((await metric('memtile_prompt_tokens_cached_total')) > 0);
});

console.log(failures ? `${failures} test(s) failed` : 'all end-to-end tests passed');
process.exit(failures ? 1 : 0);
