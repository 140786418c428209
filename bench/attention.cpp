// Decode attention at depth: what one generated token's attention costs when the context already holds many
// positions (docs/cpu.md, "Session 23"). Fills a KV cache of the model's shape with random rows, then times
// cpu::attention for one query token per layer, layer after layer as a decode step does, so the KV rows come
// from DRAM (every layer's cache together is larger than the caches), and reports ms per token, the KV bytes
// read per token and their rate.
//   bench-attention [--depth 4096] [--layers 16] [--heads 32] [--kv-heads 8] [--head-dim 64] [--threads 1]
//                   [--kv-type f16|f32] [--tokens 1] [--reps 20]
// --tokens N > 1 times a prefill block of N query tokens at the end of the context instead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/ops.h"
#include "core/thread-pool.h"
#include "guarded-main.h"
#include "kv/kv-cache.h"

namespace {

int int_arg(const char* name, const char* v, int lo, int hi) {
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (!end || *end || x < lo || x > hi)
        throw std::runtime_error(std::string(name) + " expects an integer in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got '" + v + "'");
    return int(x);
}

}  // namespace

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, [](int argc, char** argv) {
        using namespace memtile;
        int depth = 4096, layers = 16, heads = 32, kv_heads = 8, head_dim = 64, threads = 1, tokens = 1, reps = 20;
        dtype kv_type = dtype::f16;
        for (int i = 1; i < argc; i++) {
            const std::string a = argv[i];
            if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
            const char* v = argv[++i];
            if (a == "--depth")
                depth = int_arg("--depth", v, 1, 1 << 20);
            else if (a == "--layers")
                layers = int_arg("--layers", v, 1, 256);
            else if (a == "--heads")
                heads = int_arg("--heads", v, 1, 256);
            else if (a == "--kv-heads")
                kv_heads = int_arg("--kv-heads", v, 1, 256);
            else if (a == "--head-dim")
                head_dim = int_arg("--head-dim", v, 8, 512);
            else if (a == "--threads")
                threads = int_arg("--threads", v, 1, 1024);
            else if (a == "--tokens")
                tokens = int_arg("--tokens", v, 1, 4096);
            else if (a == "--reps")
                reps = int_arg("--reps", v, 1, 100000);
            else if (a == "--kv-type") {
                const std::string t = v;
                if (t != "f16" && t != "f32") throw std::runtime_error("--kv-type expects f16 or f32, got '" + t + "'");
                kv_type = t == "f16" ? dtype::f16 : dtype::f32;
            } else
                throw std::runtime_error("unknown option " + a);
        }
        if (heads % kv_heads != 0) throw std::runtime_error("--heads must be a multiple of --kv-heads");
        const int kv_dim = kv_heads * head_dim, n_ctx = depth + tokens;
        kv_cache kv(uint32_t(layers), uint32_t(n_ctx), uint32_t(kv_dim), kv_type);
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> kr(static_cast<size_t>(kv_dim)), vr(static_cast<size_t>(kv_dim));
        for (int l = 0; l < layers; l++)
            for (int p = 0; p < n_ctx; p++) {
                for (auto& x : kr) x = nd(rng);
                for (auto& x : vr) x = nd(rng);
                kv.store(uint32_t(l), uint32_t(p), kr.data(), vr.data());
            }
        kv.used = uint32_t(n_ctx);
        std::vector<float> q(size_t(tokens) * size_t(heads) * size_t(head_dim)), out(q.size());
        for (auto& x : q) x = nd(rng);
        thread_pool pool(threads);
        auto step = [&] {
            for (int l = 0; l < layers; l++)
                cpu::attention(q.data(), out.data(), tokens, depth, kv, l, heads, kv_heads, head_dim, pool);
        };
        step();  // warm-up: first touch of scratch, thread start
        std::vector<double> ms;
        for (int r = 0; r < reps; r++) {
            const auto t0 = std::chrono::steady_clock::now();
            step();
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        // Every query token reads the K and V rows of its KV head up to its own position.
        const double rows = double(tokens) * depth + double(tokens) * (tokens + 1) / 2;
        const double bytes = rows * double(kv_dim) * double(kv.elem_bytes()) * 2 * layers;
        std::printf("isa %s, %d thread(s), depth %d, %d layers x %d heads (%d KV) x %d, KV %s, %d query token(s)\n",
                    std::string(cpu::isa_name(cpu::active_isa())).c_str(), threads, depth, layers, heads, kv_heads,
                    head_dim, kv_type == dtype::f16 ? "f16" : "f32", tokens);
        std::printf("attention: %.3f ms per step (median of %d; best %.3f), KV read %.1f MB, %.2f GB/s\n", med, reps,
                    ms.front(), bytes / 1e6, bytes / med / 1e6);
        return 0;
    });
}
