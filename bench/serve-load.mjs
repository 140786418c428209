// Bounded load test of `memtile serve` on loopback: N concurrent clients post short chat requests (both APIs,
// some streamed, some aborted mid-stream) for a fixed time, then the script checks the server's /metrics for
// leaked slots. Prints counts by status; exits 1 on any 5xx other than 503 (queue full) or a leaked slot.
//   node bench/serve-load.mjs http://127.0.0.1:PORT MODEL [seconds=60] [clients=16]
const [base, model, seconds = '60', clients = '16'] = process.argv.slice(2);
const deadline = Date.now() + Number(seconds) * 1000;
const counts = {};
let aborted = 0, errors = 0, requests = 0;

async function one(i, k) {
    const openai = (i + k) % 2 === 0;
    const stream = k % 3 !== 0;
    const url = openai ? `${base}/v1/chat/completions` : `${base}/api/chat`;
    const body = openai
        ? {model, stream, max_tokens: 16, messages: [{role: 'user', content: `Read Psalms ${1 + (k % 150)}.`}]}
        : {model, stream, options: {num_predict: 16}, messages: [{role: 'user', content: `Read John ${1 + (k % 21)}.`}]};
    const ctrl = new AbortController();
    const abortThis = k % 7 === 3;
    requests++;
    try {
        const res = await fetch(url, {method: 'POST', body: JSON.stringify(body), signal: ctrl.signal,
                                      headers: {'content-type': 'application/json'}});
        counts[res.status] = (counts[res.status] || 0) + 1;
        if (abortThis && res.body) {
            const reader = res.body.getReader();
            await reader.read();
            ctrl.abort();
            aborted++;
            return;
        }
        await res.text();
    } catch (e) {
        if (e.name !== 'AbortError') errors++;
    }
}

async function client(i) {
    for (let k = 0; Date.now() < deadline; k++) await one(i, k);
}

await Promise.all(Array.from({length: Number(clients)}, (_, i) => client(i)));
await new Promise(r => setTimeout(r, 2000));  // let aborted generations notice the disconnect
const metrics = await (await fetch(`${base}/metrics`)).text();
const gauge = name => metrics.split('\n').filter(l => l.startsWith(name)).map(l => Number(l.split(' ').pop()))
                          .reduce((a, b) => a + b, 0);
const active = gauge('memtile_slots_active'), queued = gauge('memtile_queue_depth');
console.log(JSON.stringify({seconds: Number(seconds), clients: Number(clients), requests, by_status: counts, aborted,
                            client_errors: errors, slots_active_after: active, queue_depth_after: queued}));
const bad = Object.keys(counts).filter(s => Number(s) >= 500 && s !== '503');
process.exit(bad.length || active || queued || errors ? 1 : 0);
