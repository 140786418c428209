// Per-core decode (n_tok = 1) kernel throughput with the weights resident in L2, repack off and on side by
// side: GB of weights per second of the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so the figure
// stays meaningful on a machine shared with other work, plus the wall-clock figure of the same runs.
// When this exceeds the DRAM read bandwidth of one core, decode on one core can be memory-bound.
//   bench-decode-kernels [n_in] [n_out]   (default 2048 x 128: 0.1 - 0.5 MB depending on the format)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "guarded-main.h"
#include "quant/quant.h"
#include "thread-clock.h"

using namespace memtile;

namespace {

struct result {
    double cpu_gbps = 0, wall_gbps = 0;
};

// Best of 5 timings of `reps` back-to-back matmuls.
result measure(const cpu::prepared_weight& w, const float* x, float* y, thread_pool& pool, uint64_t bytes) {
    const int reps = int(std::max<uint64_t>(200, (uint64_t(2) << 30) / bytes / 4));
    result r;
    for (int k = 0; k < 5; k++) {
        const double c0 = thread_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) cpu::matmul(w, x, 1, y, pool);
        const double c = thread_seconds() - c0;
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.cpu_gbps = std::max(r.cpu_gbps, double(bytes) * reps / c / 1e9);
        r.wall_gbps = std::max(r.wall_gbps, double(bytes) * reps / t / 1e9);
    }
    return r;
}

// Squared difference from the scalar reference over its squared norm (a guard against timing a wrong kernel).
double rel_err(const cpu::prepared_weight& w, const float* x, thread_pool& pool) {
    const auto& v = w.view();
    std::vector<float> got(static_cast<size_t>(v.n_out)), want(static_cast<size_t>(v.n_out));
    cpu::matmul(w, x, 1, got.data(), pool);
    cpu::matmul_ref(v, x, 1, want.data(), 0, v.n_out);
    double e = 0, n = 0;
    for (size_t i = 0; i < got.size(); i++) {
        e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        n += double(want[i]) * want[i];
    }
    return n > 0 ? e / n : e;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    const int64_t n_in = argc > 1 ? std::atoll(argv[1]) : 2048, n_out = argc > 2 ? std::atoll(argv[2]) : 128;
    if (n_in <= 0 || n_in % 256 != 0 || n_out <= 0) {
        std::fprintf(stderr, "usage: bench-decode-kernels [n_in (a multiple of 256)] [n_out]\n");
        return 2;
    }
    const dtype formats[] = {dtype::f16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k};
    std::vector<float> wf(static_cast<size_t>(n_in * n_out)), x(static_cast<size_t>(n_in)),
        y(static_cast<size_t>(n_out));
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : wf) v = dist(rng);
    for (float& v : x) v = dist(rng);
    thread_pool pool(1);
    std::printf("%lld x %lld, 1 thread; GB/s of weights per CPU-second (wall-clock in brackets)\n\n",
                static_cast<long long>(n_out), static_cast<long long>(n_in));
    std::printf(
        "| type | weights KB | repack off | repack on | on / off | error off | error on |\n"
        "|---|---|---|---|---|---|---|\n");
    for (dtype t : formats) {
        const size_t rb = size_t(row_bytes(t, uint64_t(n_in)));
        std::vector<uint8_t> q = quantize_tensor(t, wf.data(), n_out, n_in);
        const cpu::weight_view v{t, q.data(), n_in, n_out, rb};
        const uint64_t bytes = uint64_t(rb) * uint64_t(n_out);
        const auto off = cpu::prepare_weight(v, {.repack = false});
        const auto on = cpu::prepare_weight(v, {.repack = true});
        result a = measure(*off, x.data(), y.data(), pool, bytes);
        result b = measure(*on, x.data(), y.data(), pool, bytes);
        // Second round, interleaved, in case the machine's load changed during the first.
        const result a2 = measure(*off, x.data(), y.data(), pool, bytes);
        const result b2 = measure(*on, x.data(), y.data(), pool, bytes);
        a.cpu_gbps = std::max(a.cpu_gbps, a2.cpu_gbps), a.wall_gbps = std::max(a.wall_gbps, a2.wall_gbps);
        b.cpu_gbps = std::max(b.cpu_gbps, b2.cpu_gbps), b.wall_gbps = std::max(b.wall_gbps, b2.wall_gbps);
        std::printf("| %s | %.0f | %.1f (%.1f) | %.1f (%.1f)%s | %.2f | %.1e | %.1e |\n",
                    std::string(dtype_name(t)).c_str(), double(bytes) / 1024, a.cpu_gbps, a.wall_gbps, b.cpu_gbps,
                    b.wall_gbps, on->resident_bytes() ? "" : " not repacked", b.cpu_gbps / a.cpu_gbps,
                    rel_err(*off, x.data(), pool), rel_err(*on, x.data(), pool));
        std::fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
