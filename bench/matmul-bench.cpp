// Decode and prefill throughput of the CPU matmul per weight format, against the memory read bandwidth
// measured in the same run with the same thread count.
//
// Weights: a stack of TinyLlama-1.1B layers (E 2048, FF 5632, 4 KV heads of 64: q/o 2048x2048, k/v
// 256x2048, gate/up 5632x2048, down 2048x5632), as many layers as make >= 256 MB in the format, so decode
// streams from DRAM. Rows are random Gaussian weights quantized with quantize_rows; to keep set-up short,
// 64 distinct rows per row length are quantized and repeated (speed does not depend on the values).
// Decode: every matrix of the stack once with n_tok = 1, GB/s = weight bytes / time (best and median of
// reps). Prefill: one layer with n_tok = 64 and 512, GFLOP/s = 2 * n_in * n_out * n_tok / time.
// Usage: bench-matmul-bench [threads...] (default 1 2); MEMTILE_ISA=avx2|scalar forces a path;
// MEMTILE_BENCH_REPACK=1 prepares weights with repack on; MEMTILE_BENCH_FORMATS=Q4_K,Q8_0 picks formats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "guarded-main.h"
#include "observe/bandwidth.h"
#include "quant/quant.h"

using namespace memtile;

namespace {

struct shape {
    int64_t n_out, n_in;
};
const shape k_layer[] = {{2048, 2048}, {256, 2048},  {256, 2048}, {2048, 2048},
                         {5632, 2048}, {5632, 2048}, {2048, 5632}};
constexpr uint64_t k_min_bytes = 256ull << 20;

struct aligned_bytes {
    uint8_t* p = nullptr;
    explicit aligned_bytes(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
    ~aligned_bytes() { std::free(p); }
    aligned_bytes(const aligned_bytes&) = delete;
    aligned_bytes(aligned_bytes&& o) noexcept : p(o.p) { o.p = nullptr; }
};

struct matrix {
    shape s;
    aligned_bytes data;
    std::unique_ptr<cpu::prepared_weight> w;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 64 quantized random rows of length n_in in format t, used as the source pattern of every matrix.
std::vector<uint8_t> pattern_rows(dtype t, int64_t n_in) {
    std::vector<float> f(size_t(64 * n_in));
    std::mt19937 rng{uint32_t(n_in)};
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (float& v : f) v = dist(rng);
    if (t == dtype::f32) {
        std::vector<uint8_t> b(f.size() * 4);
        std::memcpy(b.data(), f.data(), b.size());
        return b;
    }
    std::vector<uint8_t> b(size_t(64 * row_bytes(t, uint64_t(n_in))));
    quantize_rows(t, f.data(), b.data(), 64, n_in);
    return b;
}

std::vector<matrix> build_stack(dtype t, bool repack, uint64_t& total_bytes, uint64_t& layer_bytes) {
    const std::vector<uint8_t> p2048 = pattern_rows(t, 2048), p5632 = pattern_rows(t, 5632);
    layer_bytes = 0;
    for (const shape& s : k_layer) layer_bytes += uint64_t(s.n_out) * row_bytes(t, uint64_t(s.n_in));
    const uint64_t layers = (k_min_bytes + layer_bytes - 1) / layer_bytes;
    std::vector<matrix> stack;
    total_bytes = 0;
    for (uint64_t l = 0; l < layers; l++) {
        for (const shape& s : k_layer) {
            const size_t rb = size_t(row_bytes(t, uint64_t(s.n_in)));
            const std::vector<uint8_t>& pat = s.n_in == 2048 ? p2048 : p5632;
            matrix m{s, aligned_bytes(rb * size_t(s.n_out)), nullptr};
            for (int64_t r = 0; r < s.n_out; r++)
                std::memcpy(m.data.p + size_t(r) * rb, pat.data() + size_t(r % 64) * rb, rb);
            m.w = cpu::prepare_weight({t, m.data.p, s.n_in, s.n_out, rb}, {.repack = repack});
            total_bytes += rb * size_t(s.n_out);
            stack.push_back(std::move(m));
        }
    }
    return stack;
}

struct row_result {
    double decode_best = 0, decode_median = 0, pp64 = 0, pp512 = 0;
};

row_result run_format(std::vector<matrix>& stack, uint64_t total_bytes, thread_pool& pool) {
    row_result r;
    const int64_t max_tok = 512, max_in = 5632, max_out = 5632;
    std::vector<float> x(size_t(max_tok * max_in));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    aligned_bytes ybuf(size_t(max_tok * max_out) * sizeof(float));
    float* y = reinterpret_cast<float*>(ybuf.p);

    std::vector<double> gbps;
    for (int rep = 0; rep < 7; rep++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (matrix& m : stack) cpu::matmul(*m.w, x.data(), 1, y, pool);
        if (rep > 0) gbps.push_back(double(total_bytes) / seconds_since(t0) / 1e9);  // rep 0 warms up
    }
    std::sort(gbps.begin(), gbps.end());
    r.decode_best = gbps.back();
    r.decode_median = gbps[gbps.size() / 2];

    for (int64_t n_tok : {int64_t(64), int64_t(512)}) {
        double best = 0;
        for (int rep = 0; rep < (n_tok == 64 ? 3 : 2); rep++) {
            double flop = 0;
            const auto t0 = std::chrono::steady_clock::now();
            for (size_t i = 0; i < std::size(k_layer); i++) {
                cpu::matmul(*stack[i].w, x.data(), n_tok, y, pool);
                flop += 2.0 * double(stack[i].s.n_in) * double(stack[i].s.n_out) * double(n_tok);
            }
            best = std::max(best, flop / seconds_since(t0) / 1e9);
        }
        (n_tok == 64 ? r.pp64 : r.pp512) = best;
    }
    return r;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    std::vector<int> thread_counts;
    for (int i = 1; i < argc; i++) thread_counts.push_back(std::atoi(argv[i]));
    if (thread_counts.empty()) thread_counts = {1, 2};
    const bool repack = std::getenv("MEMTILE_BENCH_REPACK") && std::string(std::getenv("MEMTILE_BENCH_REPACK")) == "1";
    const std::string only = std::getenv("MEMTILE_BENCH_FORMATS") ? std::getenv("MEMTILE_BENCH_FORMATS") : "";
    const dtype formats[] = {dtype::f32,  dtype::f16,  dtype::bf16, dtype::q8_0,
                             dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k};

    std::printf(
        "isa %s, repack %s; decode = weight GB streamed per second (best / median of 6), read = "
        "STREAM-style read of 1 GiB in this run\n\n",
        std::string(cpu::isa_name(cpu::active_isa())).c_str(), repack ? "on" : "off");
    std::printf(
        "| type | threads | weights MB | path | decode GB/s best | median | read GB/s | best / read | "
        "median / read | pp64 GFLOP/s | pp512 GFLOP/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (dtype t : formats) {
        const std::string name(dtype_name(t));
        if (!only.empty() && ("," + only + ",").find("," + name + ",") == std::string::npos) continue;
        uint64_t total = 0, layer = 0;
        std::vector<matrix> stack = build_stack(t, repack, total, layer);
        for (int th : thread_counts) {
            thread_pool pool(th);
            const double read = measure_read_gbps(th, size_t(1) << 30, 5);
            const row_result r = run_format(stack, total, pool);
            std::printf("| %s | %d | %.0f | %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.1f | %.1f |\n", name.c_str(), th,
                        double(total) / 1e6, cpu::matmul_path(t).c_str(), r.decode_best, r.decode_median, read,
                        r.decode_best / read, r.decode_median / read, r.pp64, r.pp512);
            std::fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
