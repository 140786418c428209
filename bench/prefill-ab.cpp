// Prefill speed with the register-blocked GEMM (avx2/gemm-avx2.h) against the per-row kernels, side by
// side in one run (A/B interleaved rep by rep, best of reps), so a busy machine slows both alike.
//   bench-prefill-ab layer [--threads 1,2] [--reps 3] [--formats F16,Q8_0,...] [--repack on]
//       one TinyLlama-1.1B layer of matmuls (q/k/v/o, gate/up, down) per format: GFLOP/s at 64 and 512 tokens
//   bench-prefill-ab model [--threads 1,2] [--reps 2] [--tokens 64,512] [--repack on] MODEL.gguf...
//       whole-model forward (pp tok/s), as bench-decode-roofline measures prefill
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "quant/file-type.h"
#include "quant/quant.h"

using namespace memtile;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// CPU seconds of the whole process: on a machine shared with other jobs this counts only the time the
// threads actually ran (worker spinning included, so it is meaningful for 1 thread only).
// tok/cpu-s = tokens per CPU second of the process: the 1-thread figure least disturbed by other jobs.
double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    size_t a = 0;
    while (a < s.size()) {
        size_t b = s.find(',', a);
        if (b == std::string::npos) b = s.size();
        v.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return v;
}

std::vector<int> split_ints(const std::string& s) {
    std::vector<int> v;
    for (const auto& p : split(s)) v.push_back(std::stoi(p));
    return v;
}

struct shape {
    int64_t n_out, n_in;
};
const shape k_layer[] = {{2048, 2048}, {256, 2048},  {256, 2048}, {2048, 2048},
                         {5632, 2048}, {5632, 2048}, {2048, 5632}};

struct layer_matrix {
    shape s;
    std::vector<uint8_t> data;
    std::unique_ptr<cpu::prepared_weight> w;
};

std::vector<layer_matrix> build_layer(dtype t, bool repack) {
    std::vector<layer_matrix> layer;
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (const shape& s : k_layer) {
        std::vector<float> f(size_t(s.n_out * s.n_in));
        for (float& v : f) v = dist(rng);
        layer_matrix m{s, {}, nullptr};
        if (t == dtype::f32) {
            m.data.resize(f.size() * 4);
            std::memcpy(m.data.data(), f.data(), m.data.size());
        } else {
            m.data = quantize_tensor(t, f.data(), s.n_out, s.n_in);
        }
        m.w = cpu::prepare_weight({t, m.data.data(), s.n_in, s.n_out, size_t(row_bytes(t, uint64_t(s.n_in)))},
                                  {.repack = repack});
        layer.push_back(std::move(m));
    }
    return layer;
}

int run_layer(const std::vector<int>& threads, int reps, const std::vector<std::string>& formats, bool repack) {
    fmt::print(
        "| type | threads | tokens | per-row GFLOP/s | GEMM GFLOP/s | GEMM / per-row | per-row GFLOP/cpu-s | "
        "GEMM GFLOP/cpu-s |\n|---|---|---|---|---|---|---|---|\n");
    std::vector<float> x(size_t(512 * 5632)), y(size_t(512 * 5632));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    for (const auto& name : formats) {
        const auto parsed = dtype_from_name(name);
        if (!parsed) {
            fmt::print(stderr, "unknown format {}\n", name);
            return 2;
        }
        const dtype t = *parsed;
        const auto layer = build_layer(t, repack);
        for (int th : threads) {
            thread_pool pool(th);
            for (int64_t n_tok : {int64_t(64), int64_t(512)}) {
                double best[2] = {0, 0}, best_cpu[2] = {0, 0};
                for (int rep = 0; rep < reps; rep++) {
                    for (int gemm = 0; gemm < 2; gemm++) {
                        cpu::set_prefill_gemm(gemm == 1);
                        double flop = 0;
                        const double c0 = process_cpu_seconds();
                        const auto t0 = std::chrono::steady_clock::now();
                        for (const auto& m : layer) {
                            cpu::matmul(*m.w, x.data(), n_tok, y.data(), pool);
                            flop += 2.0 * double(m.s.n_in) * double(m.s.n_out) * double(n_tok);
                        }
                        best[gemm] = std::max(best[gemm], flop / seconds_since(t0) / 1e9);
                        best_cpu[gemm] = std::max(best_cpu[gemm], flop / (process_cpu_seconds() - c0) / 1e9);
                    }
                }
                cpu::set_prefill_gemm(true);
                fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.1f} | {:.1f} |\n", name, th, n_tok, best[0],
                           best[1], best[1] / best[0], best_cpu[0], best_cpu[1]);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}

std::vector<int32_t> tokens(int n, uint32_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) t[size_t(i)] = int32_t((uint64_t(i) * 7919 + 13) % vocab);
    return t;
}

int run_model(const std::vector<int>& threads, int reps, const std::vector<int>& n_tokens,
              const std::vector<std::string>& models, bool repack) {
    fmt::print(
        "| model | type | threads | tokens | per-row tok/s | GEMM tok/s | GEMM / per-row | per-row tok/cpu-s | "
        "GEMM tok/cpu-s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& path : models) {
        auto m = transformer::load(path, {.load = {}, .repack = repack ? repack_mode::on : repack_mode::off});
        const std::string type(file_type_name(uint32_t(m->file().get_u64("general.file_type", 0))));
        for (int th : threads) {
            thread_pool pool(th);
            for (int n : n_tokens) {
                double best[2] = {0, 0}, best_cpu[2] = {0, 0};
                for (int rep = 0; rep < reps; rep++) {
                    for (int gemm = 0; gemm < 2; gemm++) {
                        cpu::set_prefill_gemm(gemm == 1);
                        forward_context ctx(*m, 1024, dtype::f16, pool);
                        const double c0 = process_cpu_seconds();
                        const auto t0 = std::chrono::steady_clock::now();
                        ctx.forward(tokens(n, m->config().n_vocab));
                        best[gemm] = std::max(best[gemm], n / seconds_since(t0));
                        best_cpu[gemm] = std::max(best_cpu[gemm], n / (process_cpu_seconds() - c0));
                    }
                }
                cpu::set_prefill_gemm(true);
                fmt::print("| {} | {} | {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.1f} | {:.1f} |\n", m->config().name,
                           type, th, n, best[0], best[1], best[1] / best[0], best_cpu[0], best_cpu[1]);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    if (argc < 2 || (std::string(argv[1]) != "layer" && std::string(argv[1]) != "model")) {
        fmt::print(stderr,
                   "usage: bench-prefill-ab layer|model [--threads 1,2] [--reps N] [--formats ...] "
                   "[--tokens 64,512] [MODEL.gguf...]\n");
        return 2;
    }
    const std::string mode = argv[1];
    std::vector<int> threads = {1, 2}, n_tokens = {64, 512};
    int reps = mode == "layer" ? 3 : 2;
    std::vector<std::string> formats = {"F16", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}, models;
    bool repack = false;
    for (int i = 2; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc)
            threads = split_ints(argv[++i]);
        else if (a == "--reps" && i + 1 < argc)
            reps = std::stoi(argv[++i]);
        else if (a == "--formats" && i + 1 < argc)
            formats = split(argv[++i]);
        else if (a == "--repack" && i + 1 < argc)
            repack = std::string(argv[++i]) == "on";
        else if (a == "--tokens" && i + 1 < argc)
            n_tokens = split_ints(argv[++i]);
        else
            models.push_back(a);
    }
    return mode == "layer" ? run_layer(threads, reps, formats, repack)
                           : run_model(threads, reps, n_tokens, models, repack);
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
