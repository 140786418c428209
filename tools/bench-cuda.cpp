// memtile bench --device cuda: the GPU decode step's speed against the HBM read bandwidth probed in the
// same run (the GPU roofline), in the table form of the CPU bench.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "backends/cuda/cuda-backend.h"
#include "bench-extras.h"
#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "models/model-config.h"
#include "quant/file-type.h"

namespace memtile::cli {
namespace {

using clock_type = std::chrono::steady_clock;

struct cuda_row {
    std::string test;
    int depth = 0;
    std::vector<double> tps;
    double mean = 0, sd = 0, ttft_ms = 0, bytes_per_token = 0, gbps = 0, roofline = 0;
};

void finish(cuda_row& r, double hbm_gbps) {
    const double n = double(r.tps.size());
    r.mean = std::accumulate(r.tps.begin(), r.tps.end(), 0.0) / n;
    double v = 0;
    for (double x : r.tps) v += (x - r.mean) * (x - r.mean);
    r.sd = n > 1 ? std::sqrt(v / (n - 1)) : 0;
    r.gbps = r.bytes_per_token * r.mean / 1e9;
    r.roofline = hbm_gbps > 0 ? r.gbps / hbm_gbps : 0;
}

}  // namespace

int run_cuda_bench(const cuda_bench_options& o) {
    cuda::require_device();
    auto g = gguf_file::open(o.path, o.load);
    const model_config cfg = read_model_config(*g);
    int max_len = 1;
    for (int p : o.prompts) max_len = std::max(max_len, p);
    for (int n : o.gens) max_len = std::max(max_len, n + 16);  // 16 untimed warm-up steps before each tg run
    const int max_depth = o.depths.empty() ? 0 : *std::max_element(o.depths.begin(), o.depths.end());
    const uint32_t n_ctx = o.n_ctx ? o.n_ctx : uint32_t(max_len + max_depth + 8);
    if (uint64_t(max_len) + uint64_t(max_depth) > n_ctx)
        fail("bench", "tests of {} tokens at depth {} do not fit the context of {}", max_len, max_depth, n_ctx);
    auto dec = cuda::decoder::load(g, n_ctx);
    // The roofline denominator of this very run: the same GPU, the same clocks.
    const cuda::bandwidth_probe bw = cuda::probe_bandwidth();
    // f16 K and V rows of every layer, read once per token of context and written once per new token.
    const double kv_per_pos = 2.0 * cfg.n_layer * cfg.kv_dim() * 2.0;
    const double weights = double(dec->streamed_bytes_per_token());
    const std::string type(file_type_name(uint32_t(g->get_u64("general.file_type", 9999))));
    std::vector<cuda_row> rows;

    auto tokens_of = [&](int n, uint64_t salt) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (int i = 0; i < n; i++) t[size_t(i)] = int32_t((1 + (uint64_t(i) + salt) * 7919) % cfg.n_vocab);
        return t;
    };
    for (int depth : o.depths) {
        // The depth's context, prefilled in passes of up to 512 tokens and kept: tests truncate back to it.
        auto fill = [&] {
            dec->reset();
            const auto ctx = tokens_of(depth, 4321);
            for (size_t s0 = 0; s0 < ctx.size(); s0 += 512)
                (void)dec->forward_prefill(std::span(ctx).subspan(s0, std::min<size_t>(512, ctx.size() - s0)));
        };
        const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
        for (int p : o.prompts) {
            cuda_row r;
            r.test = fmt::format("pp{}{}", p, at);
            r.depth = depth;
            const auto tokens = tokens_of(p, 0);
            fill();
            auto once = [&] {
                dec->truncate(uint32_t(depth));
                const auto t0 = clock_type::now();
                (void)dec->forward_prefill(tokens);  // returns host logits: the pass has finished
                return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            };
            once();
            std::vector<double> ms;
            for (int i = 0; i < o.reps; i++) ms.push_back(once());
            for (double x : ms) r.tps.push_back(p * 1000.0 / x);
            r.ttft_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
            // Weights are streamed once per pass; each token reads the KV rows before it and writes its own.
            r.bytes_per_token = weights / p + kv_per_pos * (double(depth) + double(p + 1) / 2.0 + 1.0);
            finish(r, bw.hbm_read_gbs);
            rows.push_back(r);
        }
        for (int n : o.gens) {
            cuda_row r;
            r.test = fmt::format("tg{}{}", n, at);
            r.depth = depth;
            const int32_t first = 1 % int32_t(cfg.n_vocab);
            fill();
            for (int i = 0; i < o.reps; i++) r.tps.push_back(n / dec->bench_decode(n, 16, first, uint32_t(depth)));
            dec->truncate(uint32_t(depth));
            const auto t0 = clock_type::now();
            (void)dec->forward_greedy(first);
            r.ttft_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            // Positions depth + 16 .. depth + 16 + n - 1 are decoded.
            r.bytes_per_token = weights + kv_per_pos * (double(depth) + 16.0 + double(n + 1) / 2.0 + 1.0);
            finish(r, bw.hbm_read_gbs);
            rows.push_back(r);
        }
    }

    const std::string model = std::filesystem::path(o.path).filename().string();
    if (o.json) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& r : rows)
            a.push_back({{"model", model},
                         {"type", type},
                         {"device", "cuda"},
                         {"device_description", cuda::device_description()},
                         {"test", r.test},
                         {"n_depth", r.depth},
                         {"tokens_per_second", r.mean},
                         {"sd", r.sd},
                         {"bytes_per_token", r.bytes_per_token},
                         {"achieved_gbps", r.gbps},
                         {"hbm_read_gbps", bw.hbm_read_gbs},
                         {"l2_read_gbps", bw.l2_read_gbs},
                         {"roofline", r.roofline},
                         {"ttft_ms", r.ttft_ms}});
        fmt::print("{}\n", a.dump(2));
        return 0;
    }
    fmt::print("device: {}\n{}\nprobe (this run): HBM read {:.0f} GB/s, L2 read {:.0f} GB/s\n\n",
               cuda::device_description(), dec->summary(), bw.hbm_read_gbs, bw.l2_read_gbs);
    fmt::print("| model | type | device | test | t/s | bytes/token | GB/s | roofline | ttft ms |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rows)
        fmt::print("| {} | {} | cuda | {} | {:.2f} ± {:.2f} | {} | {:.1f} | {:.2f} | {:.1f} |\n", model, type, r.test,
                   r.mean, r.sd, format_bytes(uint64_t(r.bytes_per_token)), r.gbps, r.roofline, r.ttft_ms);
    fmt::print(
        "(pp: one tensor-core prefill pass after the depth's context (empty without -d), ttft = its time; tg: graph "
        "replays after 16 warm-up steps; roofline = GB/s ÷ HBM read of this run)\n");
    return 0;
}

}  // namespace memtile::cli
