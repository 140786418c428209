// Greedy decode of a loaded model for the decode benchmarks: tg tokens after a fixed 8-token prompt in a context of
// 1,024 f16 positions; the generated tokens go to `out` (so that variants can be compared token for token).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread-pool.h"
#include "models/transformer.h"
#include "thread-clock.h"

namespace memtile::bench {

struct decode_rate {
    double wall = 0;  // tokens per second of wall-clock time
    double cpu = 0;   // tokens per second of the calling thread's CPU time
};

inline decode_rate greedy_decode(const transformer& m, thread_pool& pool, int tg, std::vector<int32_t>& out) {
    forward_context ctx(m, 1024, dtype::f16, pool);
    std::vector<int32_t> prompt(8);
    for (int i = 0; i < 8; i++) prompt[size_t(i)] = int32_t((uint64_t(i) * 7919 + 13) % m.config().n_vocab);
    ctx.forward(prompt);
    int32_t t = 1;
    out.clear();
    const double c0 = thread_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tg; i++) {
        auto l = ctx.forward(std::span<const int32_t>(&t, 1));
        t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        out.push_back(t);
    }
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {tg / w, tg / (thread_seconds() - c0)};
}

}  // namespace memtile::bench
