// 1-thread decode speed of the x8 K-format kernels (--repack on) with the weights in L2 and from DRAM, plus a hash
// of the output bits, so two builds can be compared for speed and for bit-identical results (session 11).
//   bench-k-decode [rounds] [formats] [prefetch bytes]   (default 3 rounds, Q4_K,Q5_K,Q6_K, the default prefetch)
// L2: one 2048-wide matrix of 256 rows (0.30-0.43 MB). DRAM: TinyLlama-shaped layers (q, k, v, o, gate, up, down)
// in one packed arena (as a loaded model), >= 256 MB, every matrix once per pass. GB of packed weights per second of
// the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), best and median over the rounds; the hash is FNV-1a over the
// outputs of one pass of each set.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "guarded-main.h"
#include "quant/quant.h"
#include "thread-clock.h"

using namespace memtile;

namespace {

struct shape {
    int64_t n_out, n_in;
};
const shape k_layer[] = {{2048, 2048}, {256, 2048},  {256, 2048}, {2048, 2048},
                         {5632, 2048}, {5632, 2048}, {2048, 5632}};

// 64 quantized random rows of length n_in, repeated as the rows of every matrix (speed does not depend on values).
std::vector<uint8_t> pattern_rows(dtype t, int64_t n_in) {
    std::vector<float> f(size_t(64 * n_in));
    std::mt19937 rng{uint32_t(n_in)};
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (float& v : f) v = dist(rng);
    std::vector<uint8_t> b(size_t(64 * row_bytes(t, uint64_t(n_in))));
    quantize_rows(t, f.data(), b.data(), 64, n_in);
    return b;
}

struct weight_set {
    std::vector<std::vector<uint8_t>> files;
    std::vector<std::unique_ptr<cpu::prepared_weight>> w;
    uint64_t bytes = 0;
};

void add_matrix(weight_set& s, dtype t, shape sh, const std::vector<uint8_t>& pat,
                const std::shared_ptr<cpu::packed_arena>& arena) {
    const size_t rb = size_t(row_bytes(t, uint64_t(sh.n_in)));
    std::vector<uint8_t> f(rb * size_t(sh.n_out));
    for (int64_t r = 0; r < sh.n_out; r++) std::memcpy(f.data() + size_t(r) * rb, pat.data() + size_t(r % 64) * rb, rb);
    const cpu::weight_view v{t, f.data(), sh.n_in, sh.n_out, rb};
    s.w.push_back(cpu::prepare_weight(v, {.repack = true, .arena = arena}));
    s.bytes += s.w.back()->streamed().size();
    s.files.push_back(std::move(f));
}

uint64_t fnv(const float* y, int64_t n, uint64_t h) {
    const auto* p = reinterpret_cast<const uint8_t*>(y);
    for (int64_t i = 0; i < n * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// GB per CPU-second of `passes` passes over the set; y gets the last pass's outputs.
double pass_gbps(const weight_set& s, const float* x, float* y, thread_pool& pool, int passes) {
    const double c0 = thread_seconds();
    for (int p = 0; p < passes; p++)
        for (const auto& w : s.w) cpu::matmul(*w, x, 1, y, pool);
    return double(s.bytes) * passes / (thread_seconds() - c0) / 1e9;
}

uint64_t set_hash(const weight_set& s, const float* x, float* y, thread_pool& pool) {
    uint64_t h = 1469598103934665603ull;
    for (const auto& w : s.w) {
        cpu::matmul(*w, x, 1, y, pool);
        h = fnv(y, w->view().n_out, h);
    }
    return h;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
    const std::string only = argc > 2 ? argv[2] : "Q4_K,Q5_K,Q6_K";
    const dtype formats[] = {dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_0, dtype::q4_0};
    if (argc > 3) cpu::set_decode_prefetch(std::atoll(argv[3]));
    thread_pool pool(1);
    std::vector<float> x(5632);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    std::vector<float> y(5632);
    std::printf("| type | L2 GB/cpu-s best / median | DRAM GB/cpu-s best / median | DRAM MB | hash L2 | hash DRAM |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (dtype t : formats) {
        const std::string name(dtype_name(t));
        if (("," + only + ",").find("," + name + ",") == std::string::npos) continue;
        const std::vector<uint8_t> p2048 = pattern_rows(t, 2048), p5632 = pattern_rows(t, 5632);
        weight_set l2;
        add_matrix(l2, t, {256, 2048}, p2048, nullptr);
        uint64_t layer = 0;
        for (const shape& s : k_layer)
            layer += cpu::packed_bytes({t, nullptr, s.n_in, s.n_out, size_t(row_bytes(t, uint64_t(s.n_in)))},
                                       {.repack = true});
        const uint64_t layers = ((256ull << 20) + layer - 1) / layer;
        auto arena = std::make_shared<cpu::packed_arena>(size_t(layers * layer));
        weight_set dram;
        for (uint64_t l = 0; l < layers; l++)
            for (const shape& s : k_layer) add_matrix(dram, t, s, s.n_in == 2048 ? p2048 : p5632, arena);
        const uint64_t h_l2 = set_hash(l2, x.data(), y.data(), pool), h_dram = set_hash(dram, x.data(), y.data(), pool);
        std::vector<double> a, b;
        const int l2_passes = int(std::max<uint64_t>(200, (uint64_t(1) << 30) / l2.bytes));
        for (int r = 0; r < rounds; r++) {
            a.push_back(pass_gbps(l2, x.data(), y.data(), pool, l2_passes));
            b.push_back(pass_gbps(dram, x.data(), y.data(), pool, 3));
        }
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        std::printf("| %s | %.1f / %.1f | %.1f / %.1f | %.0f | %016llx | %016llx |\n", name.c_str(), a.back(),
                    a[a.size() / 2], b.back(), b[b.size() / 2], double(dram.bytes) / 1e6,
                    static_cast<unsigned long long>(h_l2), static_cast<unsigned long long>(h_dram));
        std::fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
