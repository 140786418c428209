// Where the time of a decode step goes between the threads of the pool (core/thread-pool.h's pool_trace):
//   bench-pool-trace [--threads 2] [--tg 24] [--rounds 4] [--repack 0|1] [--split i,r8,...] MODEL.gguf...
// --split: the pool's chunk hand-outs to compare (thread_pool::set_split): i = interleaved, rN = ranges with N chunks
// per thread (r4: the default), hN = halving with N; each round runs every variant in turn (alternated in one process,
// the order rotated by one each round so that no variant always runs first). Each round decodes tg greedy tokens
// (bench/greedy-decode.h's prompt) with the trace installed, then the same count without it (the trace's own cost:
// compare the two tok/s). Per kind of call (the layer's q/k/v, attention, o, gate/up, down, the output matrix;
// recognized by their order in a token, llama-style models only):
//   calls per token, mean wall time of the call (publish to done) and its GB/s of weights, the caller's serial
//   work before it (the previous call's end, or the token's start, to this call's entry; mean, microseconds),
//   start = publish -> the caller's / a worker's first chunk (median, microseconds),
//   tail = first thread done -> last thread done (mean, microseconds), idle = 1 - busy chunk time ÷ (threads x call),
//   chunk GB/s: a thread's first chunk in the call, later chunks contiguous with its previous one, later chunks
//   that are not (a restart of the thread's stream), each as bytes ÷ the chunk's own wall time; "alone" and
//   "together" (>= 90 % of the chunk's time overlapped chunks of other threads: the figure of a quiet machine,
//   where the threads stream at once) apart,
//   split = how the chunks fell on the threads (most frequent counts).
// Per token: wall time, time outside parallel_for (the caller alone: norms, RoPE, KV store, activation
// quantization, sampling) and inside. Per thread of the process: CPU time and time spent waiting for a core
// (/proc/self/task/*/schedstat), so that a busy machine shows.
#include <dirent.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "greedy-decode.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "split-variants.h"

using namespace memtile;

namespace {

struct options {
    int threads = 2, tg = 24, rounds = 4;
    bool repack = true;
    std::vector<split_variant> splits = {{"r4"}};
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
}

// (run time, wait-for-a-core time) in ns per thread id of this process.
std::map<int, std::pair<double, double>> sched_stats() {
    std::map<int, std::pair<double, double>> r;
    DIR* d = opendir("/proc/self/task");
    if (!d) return r;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/schedstat");
        double run = 0, wait = 0;
        if (f >> run >> wait) r[std::atoi(e->d_name)] = {run, wait};
    }
    closedir(d);
    return r;
}

// Ticks of pool_trace::clock() per microsecond, against steady_clock over ~50 ms.
double ticks_per_us() {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t c0 = pool_trace::clock();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50)) {
    }
    const uint64_t c1 = pool_trace::clock();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return double(c1 - c0) / us;
}

enum kind { k_qkv, k_attn, k_o, k_gu, k_down, k_out, k_other, n_kinds };
const char* const kind_names[n_kinds] = {"q/k/v", "attention", "o", "gate/up", "down", "output", "other"};

struct kind_stats {
    int64_t calls = 0;
    double us = 0, bytes = 0;
    std::vector<double> caller_start, worker_start, tail, idle;
    std::vector<double> gap;  // the caller's serial work before the call: previous call's done -> this enter (us)
    // The same after a previous call that ran on the caller alone [0] or on several threads [1] (whose outputs
    // are then partly in the other core's cache when the caller reads them).
    std::vector<double> gap_after[2];
    // Chunk rates (GB/s of the chunk's own wall time): [alone, concurrent][first, next, jump]; concurrent = at
    // least 90 % of the chunk's time overlapped chunks of other threads of the same call.
    std::vector<double> gbs[2][3];
    std::map<std::string, int64_t> split;
};

struct round_result {
    double tok_s = 0, untraced_tok_s = 0;
    double token_us = 0, outside_us = 0;  // per token
};

// The matrices' bytes per kind of call, from the decode-order list of streamed matrices (llama-style: q, k, v, o,
// gate, up, down per layer, the output last).
struct call_bytes {
    bool llama = false;
    std::vector<std::array<double, n_kinds>> layer;
    double output = 0;
};

// Folds one traced decode (token boundaries in `bounds`) into the per-kind statistics.
void analyze(const pool_trace& trace, const std::vector<uint64_t>& bounds, const call_bytes& cb, int threads,
             double tpu, std::vector<kind_stats>& ks, round_result& rr, int64_t& unrecognized) {
    const int tg = int(bounds.size()) - 1;
    const size_t per_token_calls = 5 * cb.layer.size() + 1;
    const double total_us = double(bounds.back() - bounds.front()) / tpu;
    rr.tok_s = tg / total_us * 1e6;
    rr.token_us = total_us / tg;
    const size_t n_calls = std::min(trace.n_calls.load(), trace.calls.size());
    const size_t n_chunks = std::min(trace.n_chunks.load(), trace.chunks.size());
    std::map<uint64_t, std::vector<const pool_trace::chunk*>> by_call;
    for (size_t i = 0; i < n_chunks; i++) by_call[trace.chunks[i].generation].push_back(&trace.chunks[i]);
    double inside = 0;
    size_t ci = 0;
    for (int tk = 0; tk < tg; tk++) {
        std::vector<const pool_trace::call*> calls;
        while (ci < n_calls && trace.calls[ci].done <= bounds[size_t(tk) + 1]) calls.push_back(&trace.calls[ci++]);
        const bool known = cb.llama && calls.size() == per_token_calls;
        unrecognized += known ? 0 : 1;
        bool prev_shared = false;
        for (size_t j = 0; j < calls.size(); j++) {
            const pool_trace::call& cl = *calls[j];
            inside += double(cl.done - cl.enter) / tpu;
            const uint64_t prev = j > 0 ? calls[j - 1]->done : bounds[size_t(tk)];
            int k = k_other;
            double bytes = 0;
            if (known) {
                if (j + 1 == calls.size()) {
                    k = k_out;
                    bytes = cb.output;
                } else {
                    const int in_layer[5] = {k_qkv, k_attn, k_o, k_gu, k_down};
                    k = in_layer[j % 5];
                    bytes = cb.layer[j / 5][size_t(k)];
                }
            }
            kind_stats& st = ks[size_t(k)];
            const double call_us = double(cl.done - cl.publish) / tpu;
            st.calls++;
            st.us += call_us;
            st.gap.push_back(double(cl.enter - prev) / tpu);
            if (j > 0) st.gap_after[prev_shared ? 1 : 0].push_back(double(cl.enter - prev) / tpu);
            st.bytes += bytes;
            auto& chunks = by_call[cl.generation];
            std::sort(chunks.begin(), chunks.end(),
                      [](const pool_trace::chunk* x, const pool_trace::chunk* y) { return x->start < y->start; });
            std::vector<int> count(size_t(threads), 0);
            std::vector<uint64_t> first(size_t(threads), UINT64_MAX), last(size_t(threads), 0);
            std::vector<int64_t> prev_end(size_t(threads), -1);
            double busy = 0;
            for (const pool_trace::chunk* ch : chunks) {
                const size_t th = size_t(ch->thread);
                const double us = double(ch->stop - ch->start) / tpu;
                busy += us;
                if (bytes > 0 && us > 0) {
                    uint64_t overlap = 0;
                    for (const pool_trace::chunk* other : chunks)
                        if (other->thread != ch->thread && other->start < ch->stop && ch->start < other->stop)
                            overlap += std::min(other->stop, ch->stop) - std::max(other->start, ch->start);
                    const int together = double(overlap) >= 0.9 * double(ch->stop - ch->start) ? 1 : 0;
                    const int cls = count[th] == 0 ? 0 : prev_end[th] == ch->begin ? 1 : 2;
                    st.gbs[together][cls].push_back(bytes * double(ch->end - ch->begin) / double(cl.n) / us / 1e3);
                }
                prev_end[th] = ch->end;
                count[th]++;
                first[th] = std::min(first[th], ch->start);
                last[th] = std::max(last[th], ch->stop);
            }
            prev_shared = std::count(count.begin() + 1, count.end(), 0) < int(count.size()) - 1;
            if (count[0] > 0) st.caller_start.push_back(double(first[0] - cl.publish) / tpu);
            uint64_t lo = UINT64_MAX, hi = 0;
            int active = 0;
            for (size_t th = 0; th < count.size(); th++) {
                if (count[th] == 0) continue;
                active++;
                lo = std::min(lo, last[th]);
                hi = std::max(hi, last[th]);
                // Signed: a worker can see the job and stamp its chunk before the caller stamps publish.
                if (th > 0) st.worker_start.push_back(double(int64_t(first[th] - cl.publish)) / tpu);
            }
            st.tail.push_back(active > 1 ? double(hi - lo) / tpu : 0.0);
            if (call_us > 0) st.idle.push_back(1.0 - busy / (threads * call_us));
            std::string sp;
            for (size_t th = 0; th < count.size(); th++) {
                if (th) sp += '/';
                sp += std::to_string(count[th]);
            }
            st.split[sp]++;
        }
    }
    rr.outside_us = (total_us - inside) / tg;
}

void print_variant(const options& o, const split_variant& v, const std::vector<kind_stats>& ks,
                   const std::vector<round_result>& rounds) {
    std::printf(
        "\nsplit %s\n\n| round | tok/s traced | tok/s untraced | token us | outside parallel_for us |\n"
        "|---|---|---|---|---|\n",
        v.name.c_str());
    double token_us = 0;
    for (size_t r = 0; r < rounds.size(); r++) {
        std::printf("| %zu | %.2f | %.2f | %.0f | %.0f (%.1f %%) |\n", r + 1, rounds[r].tok_s, rounds[r].untraced_tok_s,
                    rounds[r].token_us, rounds[r].outside_us, 100 * rounds[r].outside_us / rounds[r].token_us);
        token_us += rounds[r].token_us / double(rounds.size());
    }
    const double tokens = double(rounds.size()) * o.tg;
    std::printf(
        "\n| call | per token | us (share of token) | GB/s | serial before us: mean (median after a caller-only / a "
        "shared call, counts) | start caller / worker us | tail us | "
        "idle | chunk GB/s "
        "alone: first / next / jump (counts) | together: first / next / jump (counts) | split |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < n_kinds; k++) {
        const kind_stats& st = ks[size_t(k)];
        if (st.calls == 0) continue;
        std::vector<std::pair<int64_t, std::string>> sp;
        for (const auto& [name, n] : st.split) sp.push_back({n, name});
        std::sort(sp.rbegin(), sp.rend());
        std::string splits;
        for (size_t i = 0; i < std::min<size_t>(3, sp.size()); i++) {
            if (i) splits += ", ";
            splits +=
                sp[i].second + " " + std::to_string(int(100.0 * double(sp[i].first) / double(st.calls) + 0.5)) + "%";
        }
        std::string rates[2];
        for (int t = 0; t < 2; t++) {
            char b[160];
            std::snprintf(b, sizeof b, "%.1f / %.1f / %.1f (%zu/%zu/%zu)", median(st.gbs[t][0]), median(st.gbs[t][1]),
                          median(st.gbs[t][2]), st.gbs[t][0].size(), st.gbs[t][1].size(), st.gbs[t][2].size());
            rates[t] = b;
        }
        std::printf(
            "| %s | %.1f | %.1f (%.1f %%) | %.1f | %.2f (%.2f / %.2f, %zu/%zu) | %.2f / %.2f | %.2f | %.3f | %s | %s "
            "| %s |\n",
            kind_names[k], double(st.calls) / tokens, st.us / double(st.calls), 100 * st.us / tokens / token_us,
            st.us > 0 ? st.bytes / st.us / 1e3 : 0.0, mean(st.gap), median(st.gap_after[0]), median(st.gap_after[1]),
            st.gap_after[0].size(), st.gap_after[1].size(), median(st.caller_start), median(st.worker_start),
            mean(st.tail), mean(st.idle), rates[0].c_str(), rates[1].c_str(), splits.c_str());
    }
}

int model_mode(const options& o, const std::string& path) {
    model_options mo;
    mo.repack = o.repack ? repack_mode::on : repack_mode::off;
    thread_pool pool(o.threads);
    const auto m = transformer::load(path, mo, &pool);
    const auto& c = m->config();
    const auto sw = m->streamed_weights();
    const size_t L = c.n_layer;
    call_bytes cb;
    cb.llama = sw.size() == 7 * L + 1;
    if (cb.llama) {
        cb.layer.assign(L, std::array<double, n_kinds>{});
        for (size_t l = 0; l < L; l++) {
            auto& b = cb.layer[l];
            b[k_qkv] = double(sw[7 * l].size() + sw[7 * l + 1].size() + sw[7 * l + 2].size());
            b[k_o] = double(sw[7 * l + 3].size());
            b[k_gu] = double(sw[7 * l + 4].size() + sw[7 * l + 5].size());
            b[k_down] = double(sw[7 * l + 6].size());
        }
        cb.output = double(sw.back().size());
    }
    const double tpu = ticks_per_us();
    std::vector<int32_t> toks, ref;
    bench::greedy_decode(*m, pool, 4, toks);

    const size_t per_token_calls = 5 * L + 1;
    pool_trace trace(size_t(o.tg + 16) * (per_token_calls + 8), size_t(o.tg + 16) * (per_token_calls + 8) * 64);
    const size_t nv = o.splits.size();
    std::vector<std::vector<kind_stats>> ks(nv, std::vector<kind_stats>(n_kinds));
    std::vector<std::vector<round_result>> rounds(nv);
    int64_t unrecognized = 0, dropped = 0;
    bool same = true;
    const auto s0 = sched_stats();
    for (int r = 0; r < o.rounds; r++)
        for (size_t k = 0; k < nv; k++) {
            const size_t vi = (k + size_t(r)) % nv;  // the order rotates by round, so no variant always runs first
            const split_variant& v = o.splits[vi];
            pool.set_split(v.split, v.chunks);
            round_result rr;
            {
                forward_context ctx(*m, 1024, dtype::f16, pool);
                std::vector<int32_t> prompt(8);
                for (int i = 0; i < 8; i++) prompt[size_t(i)] = int32_t((uint64_t(i) * 7919 + 13) % c.n_vocab);
                ctx.forward(prompt);
                int32_t t = 1;
                trace.clear();
                pool.set_trace(&trace);
                std::vector<uint64_t> bounds{pool_trace::clock()};
                for (int i = 0; i < o.tg; i++) {
                    auto l = ctx.forward(std::span<const int32_t>(&t, 1));
                    t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
                    bounds.push_back(pool_trace::clock());
                }
                pool.set_trace(nullptr);
                dropped += int64_t(trace.dropped.load());
                analyze(trace, bounds, cb, o.threads, tpu, ks[vi], rr, unrecognized);
            }
            rr.untraced_tok_s = bench::greedy_decode(*m, pool, o.tg, toks).wall;
            if (ref.empty()) ref = toks;
            same = same && toks == ref;
            rounds[vi].push_back(rr);
        }
    pool.set_split(thread_pool::k_default_split);
    const auto s1 = sched_stats();

    const auto slash = path.find_last_of('/');
    std::printf("\n%s, %d thread(s), repack %s, %d rounds x tg %d, variants alternated%s%s\n",
                path.substr(slash == std::string::npos ? 0 : slash + 1).c_str(), o.threads, o.repack ? "on" : "off",
                o.rounds, o.tg, cb.llama ? "" : " (not a llama-style list of matrices: calls not classified)",
                same ? "" : "; TOKENS DIFFER");
    for (size_t vi = 0; vi < nv; vi++) print_variant(o, o.splits[vi], ks[vi], rounds[vi]);
    if (unrecognized || dropped)
        std::printf("\n%lld token(s) with an unexpected call count, %lld record(s) dropped\n",
                    static_cast<long long>(unrecognized), static_cast<long long>(dropped));
    std::printf("\n| thread id | CPU s | waiting for a core s |\n|---|---|---|\n");
    for (const auto& [tid, v] : s1) {
        const auto it = s0.find(tid);
        const double run = v.first - (it == s0.end() ? 0 : it->second.first);
        const double wait = v.second - (it == s0.end() ? 0 : it->second.second);
        if (run > 1e6) std::printf("| %d | %.3f | %.3f |\n", tid, run / 1e9, wait / 1e9);
    }
    std::fflush(stdout);
    return 0;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    options o;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        if (a == "--threads" && has)
            o.threads = std::max(1, std::atoi(argv[++i]));
        else if (a == "--tg" && has)
            o.tg = std::max(1, std::atoi(argv[++i]));
        else if (a == "--rounds" && has)
            o.rounds = std::max(1, std::atoi(argv[++i]));
        else if (a == "--repack" && has)
            o.repack = std::atoi(argv[++i]) != 0;
        else if (a == "--split" && has)
            o.splits = parse_splits(argv[++i]);
        else if (!a.empty() && a[0] != '-')
            paths.push_back(a);
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            paths.clear();
            break;
        }
    }
    if (paths.empty()) {
        std::fprintf(stderr,
                     "usage: bench-pool-trace [--threads 2] [--tg 24] [--rounds 4] [--repack 0|1] [--split i,r8,...] "
                     "MODEL.gguf...\n");
        return 2;
    }
    for (const auto& p : paths) model_mode(o, p);
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
