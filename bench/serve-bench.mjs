// Aggregate decode throughput of `memtile serve` with 1, 4 and 8 concurrent streams (OpenAI API, plain fetch).
// usage: node bench/serve-bench.mjs BASE_URL MODEL [TOKENS]
const [BASE, MODEL, TOKENS = '64'] = process.argv.slice(2);
async function one(i) {
  const res = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `bench ${i}` }], max_tokens: Number(TOKENS),
      temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  const text = await res.text();
  const usage = JSON.parse(text.split('\n\n').filter((e) => e.includes('"usage"')).at(-1).slice(6)).usage;
  return usage.completion_tokens;
}
for (const n of [1, 4, 8]) {
  const t0 = performance.now();
  const toks = (await Promise.all(Array.from({ length: n }, (_, i) => one(i)))).reduce((a, b) => a + b, 0);
  const s = (performance.now() - t0) / 1000;
  console.log(`${n} stream(s): ${toks} tokens in ${s.toFixed(2)} s = ${(toks / s).toFixed(1)} tok/s aggregate`);
}
