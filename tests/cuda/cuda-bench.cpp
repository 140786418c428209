// Benchmarks of memtile-cuda-check (see cuda-check.cpp for the options): matvec alone, batch-1 decode of llama3-8b
// shapes against the HBM read bandwidth probed in the same run, fusion/early/prefetch A/B lists, batched decode,
// prefill and sampling.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cuda/batch-step.h"
#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/mma-pair.h"
#include "core/error.h"
#include "cuda/cuda-check-common.h"
#include "models/presets.h"
#include "quant/quant.h"
#include "support/cuda-checks.h"
#include "support/sampling-checks.h"

namespace memtile::cuda_check {

void bench(const cuda::bandwidth_probe& bw, bool sweep) {
    fmt::print("\nmatvec alone (one [n_out x n_in] product, cold weights, GB/s of weight bytes):\n");
    const dtype types[] = {dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_0, dtype::q4_0, dtype::f16, dtype::bf16};
    for (dtype t : types) {
        const double a = cuda::bench_matvec(t, 4096, 14336, 20), b = cuda::bench_matvec(t, 14336, 4096, 20),
                     c = cuda::bench_matvec(t, 4096, 4096, 20);
        fmt::print("  {:<5} 4096->14336 {:7.0f}  14336->4096 {:7.0f}  4096->4096 {:7.0f}  ({:.2f} of probe)\n",
                   dtype_name(t), a, b, c, a / bw.hbm_read_gbs);
    }
    if (sweep) {
        fmt::print("\nblock shapes (rows x warps per row), GB/s, 20 launches in one graph with PDL:\n");
        const int shapes[][2] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4}};
        struct mat {
            int64_t n_in, n_out;
        };
        const mat mats[] = {{4096, 28672}, {4096, 6144}, {4096, 4096}, {14336, 4096}, {4096, 128256}, {4096, 1024}};
        for (dtype t : {dtype::q4_k, dtype::q6_k}) {
            for (const auto& m : mats) {
                std::string line = fmt::format("  {:<5} {:>6}x{:<6}", dtype_name(t), m.n_out, m.n_in);
                for (const auto& sh : shapes)
                    line += fmt::format("  {}x{} {:4.0f}", sh[0], sh[1],
                                        cuda::bench_matvec(t, m.n_in, m.n_out, 20, sh[0], sh[1]));
                fmt::print("{}\n", line);
                std::fflush(stdout);
            }
        }
    }
    fmt::print("\nbatch-1 decode, llama3-8b shapes, random weights of each file type's tensor types:\n");
    const auto& preset = find_preset("llama3-8b");
    const file_type fts[] = {file_type::q4_k_m, file_type::q8_0, file_type::f16, file_type::q4_0, file_type::bf16};
    for (file_type ft : fts) {
        // A/B in one run: the same graph without and with programmatic dependent launch.
        for (bool pdl : {false, true}) {
            try {
                cuda::set_pdl(pdl);
                auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                const int n = 128, warm = 16;
                const double s = d->bench_decode(n, warm, 1);
                const double tps = n / s;
                const double bytes = double(d->streamed_bytes_per_token());
                const double limit = bw.hbm_read_gbs * 1e9 / bytes;
                fmt::print(
                    "  {:<7} {} tg{} {:7.1f} tok/s  {:6.2f} GB/token  {:6.0f} GB/s  limit {:6.1f} tok/s  ratio "
                    "{:.3f}\n",
                    file_type_name(ft), pdl ? "pdl   " : "no-pdl", n, tps, bytes / 1e9, bytes * tps / 1e9, limit,
                    tps / limit);
                if (pdl) fmt::print("          {}\n", d->summary());
                std::fflush(stdout);
            } catch (const std::exception& e) {
                report(false, fmt::format("bench {}: {}", file_type_name(ft), e.what()));
            }
        }
    }
}

// Batch-1 decode at depth (--depth-bench "0,4096,..."): llama3-8b shapes, Q4_K_M, Q8_0 and F16 (or --only TYPE),
// tg128 after the depth's context is prefilled; the bytes per token count the KV rows read (f16 K and V of every
// layer up to the step's position), so the ratio is against the whole step's traffic.
// Integers separated by sep ("0,4096"; "0/-1/8" with '/').
static std::vector<int> int_list(const std::string& list, char sep = ',') {
    std::vector<int> v;
    for (size_t p = 0; p <= list.size();) {
        const size_t e = std::min(list.find(sep, p), list.size());
        v.push_back(std::stoi(list.substr(p, e - p)));
        p = e + 1;
    }
    return v;
}

void bench_depth(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only,
                 const std::string& groups, const std::string& preset_name, int batch) {
    // A setting "G", "G/P", "G/P/S" or "G/P/S/K": heads per block G (cuda::set_attention_group), GQA tile loop P
    // (cuda::set_attention_pipe, -1: the default), attention splits S (MEMTILE_CUDA_SPLITS while that decoder is
    // made; absent or 0: the default count), least keys per split K (MEMTILE_CUDA_SPLIT_KEYS likewise; absent or -1:
    // the default).
    struct setting {
        int group, pipe, splits, split_keys;
        std::string name;
    };
    std::vector<setting> settings;
    for (size_t p = 0; p <= groups.size();) {
        const size_t e = std::min(groups.find(',', p), groups.size());
        const std::string tok = groups.substr(p, e - p);
        std::vector<int> f = int_list(tok, '/');
        f.resize(std::max<size_t>(f.size(), 4), 0);
        const int g = f[0], pipe = tok.find('/') == std::string::npos ? -1 : f[1], splits = f[2];
        const int keys = std::count(tok.begin(), tok.end(), '/') >= 3 ? f[3] : -1;
        settings.push_back({g, pipe, splits, keys,
                            fmt::format("{}{}{}{}", g == 0 ? std::string("auto") : std::to_string(g),
                                        pipe < 0 ? std::string() : fmt::format("/{}", pipe),
                                        splits > 0 ? fmt::format(" splits {}", splits) : std::string(),
                                        keys >= 0 ? fmt::format(" keys/split >= {}", keys) : std::string())});
        p = e + 1;
    }
    const std::vector<int> depths = int_list(list);
    const int max_depth = *std::max_element(depths.begin(), depths.end());
    const auto& preset = find_preset(preset_name);
    const double kv_per_pos = 2.0 * preset.config.n_layer * preset.config.kv_dim() * 2.0;
    fmt::print("\ndecode at depth, {} shapes (probe {:.0f} GB/s), attention heads per block setting(s) {}:\n",
               preset_name, bw.hbm_read_gbs, groups);
    for (file_type ft : {file_type::q4_k_m, file_type::q8_0, file_type::f16}) {
        if (!only.empty() && only != file_type_name(ft)) continue;
        try {
            // One decoder per setting (each captures its decode graph at load with that setting); with more than one,
            // the settings alternate twice at every depth over the same filled cache.
            std::vector<std::unique_ptr<cuda::decoder>> ds;
            for (const auto& st : settings) {
                cuda::set_attention_group(st.group);
                cuda::set_attention_pipe(st.pipe);
                if (st.splits > 0) setenv("MEMTILE_CUDA_SPLITS", std::to_string(st.splits).c_str(), 1);
                if (st.split_keys >= 0) setenv("MEMTILE_CUDA_SPLIT_KEYS", std::to_string(st.split_keys).c_str(), 1);
                ds.push_back(cuda::decoder::random(preset.config, ft, uint32_t(max_depth + 160), 11));
                unsetenv("MEMTILE_CUDA_SPLITS");
                unsetenv("MEMTILE_CUDA_SPLIT_KEYS");
                fmt::print("  setting {}: {}\n", st.name, ds.back()->summary());
            }
            cuda::set_attention_group(0);
            cuda::set_attention_pipe(-1);
            // The batched step (memtile serve) of the first setting's weights, every sequence at the depth.
            auto bd = batch > 0 ? ds[0]->make_batch(batch, uint32_t(max_depth + 160)) : nullptr;
            for (int depth : depths) {
                std::vector<int32_t> ctx(static_cast<size_t>(depth));
                for (int i = 0; i < depth; i++) ctx[size_t(i)] = int32_t((1 + uint64_t(i) * 7919) % 1000);
                for (auto& d : ds) {
                    d->reset();
                    for (size_t s0 = 0; s0 < ctx.size(); s0 += 512)
                        (void)d->forward_prefill(std::span(ctx).subspan(s0, std::min<size_t>(512, ctx.size() - s0)));
                }
                const int rounds = ds.size() > 1 ? 2 : 1;
                for (int r = 0; r < rounds; r++)
                    for (size_t k = 0; k < ds.size(); k++) {
                        const int n = 128, warm = 16;
                        const double tps = n / ds[k]->bench_decode(n, warm, 1, uint32_t(depth));
                        const double weights = double(ds[k]->streamed_bytes_per_token());
                        const double kv = kv_per_pos * (double(depth) + warm + double(n + 1) / 2.0);
                        const double limit = bw.hbm_read_gbs * 1e9 / (weights + kv);
                        fmt::print(
                            "  {:<7} heads/block {} tg{} @ d{:<6} {:7.1f} tok/s  weights {:5.2f} GB + KV {:5.2f} "
                            "GB per token  limit {:6.1f} tok/s  ratio {:.3f}\n",
                            file_type_name(ft), settings[k].name, n, depth, tps, weights / 1e9, kv / 1e9, limit,
                            tps / limit);
                        std::fflush(stdout);
                    }
                if (!bd) continue;
                const double single = 128 / ds[0]->bench_decode(128, 16, 1, uint32_t(depth));
                for (int q = 0; q < batch; q++) {
                    bd->reset(q);
                    for (size_t s0 = 0; s0 < ctx.size(); s0 += 512)
                        (void)bd->prefill(q, std::span(ctx).subspan(s0, std::min<size_t>(512, ctx.size() - s0)));
                }
                const double bs = bd->bench(batch, 64, 8, 1, uint32_t(depth));
                fmt::print("  {:<7} batch of {} @ d{:<6} {:7.1f} tok/s aggregate, {:.2f}x the single step ({:.1f})\n",
                           file_type_name(ft), batch, depth, batch * 64 / bs, batch * 64 / bs / single, single);
                std::fflush(stdout);
            }
        } catch (const std::exception& e) {
            cuda::set_attention_group(0);
            cuda::set_attention_pipe(-1);
            report(false, fmt::format("depth bench {}: {}", file_type_name(ft), e.what()));
        }
    }
}

// Q6_K A/B (session 5, branch gq6): the Q6_K and Q4_K matvecs alone on the Q4_K_M llama3-8b shapes, with sweep the
// Q6_K and Q4_K block shapes, then tg128 of Q4_K_M (Q8_0 and F16 as controls) and Q4_K_M's batched step at B=8. Only
// public entry points, so the same driver builds against another tree for a same-run comparison. n_ctx: the decoder's
// context (the batched step's slots stay 256 positions; the attention splits follow n_ctx).
void bench_q6(const cuda::bandwidth_probe& bw, bool sweep, uint32_t n_ctx) {
    struct mat {
        int64_t n_in, n_out;
    };
    const mat mats[] = {{4096, 14336}, {14336, 4096}, {4096, 4096}, {4096, 1024}, {4096, 128256}};
    fmt::print("\nq6 bench: matvec alone (GB/s of weight bytes, 20 launches in one graph), probe {:.0f} GB/s:\n",
               bw.hbm_read_gbs);
    for (dtype t : {dtype::q6_k, dtype::q4_k}) {
        std::string line = fmt::format("  {:<5}", dtype_name(t));
        for (const auto& m : mats)
            line += fmt::format("  {}->{} {:5.0f}", m.n_in, m.n_out, cuda::bench_matvec(t, m.n_in, m.n_out, 20));
        fmt::print("{}\n", line);
        std::fflush(stdout);
    }
    if (sweep) {
        const int shapes[][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 2}, {2, 4}};
        for (dtype t : {dtype::q6_k, dtype::q4_k})
            for (const auto& m : mats) {
                std::string line = fmt::format("  {} shapes {:>6}x{:<6}", dtype_name(t), m.n_out, m.n_in);
                for (const auto& sh : shapes)
                    line += fmt::format("  {}x{} {:5.0f}", sh[0], sh[1],
                                        cuda::bench_matvec(t, m.n_in, m.n_out, 20, sh[0], sh[1]));
                fmt::print("{}\n", line);
                std::fflush(stdout);
            }
    }
    const auto& preset = find_preset("llama3-8b");
    for (file_type ft : {file_type::q4_k_m, file_type::q8_0, file_type::f16}) {
        try {
            auto d = cuda::decoder::random(preset.config, ft, n_ctx, 11);
            const double s = d->bench_decode(128, 16, 1), tps = 128 / s;
            const double bytes = double(d->streamed_bytes_per_token());
            fmt::print("  q6 bench {:<7} tg128 {:7.1f} tok/s  {:5.2f} GB/token  ratio {:.3f}", file_type_name(ft), tps,
                       bytes / 1e9, tps * bytes / (bw.hbm_read_gbs * 1e9));
            if (ft == file_type::q4_k_m) {
                auto batch = d->make_batch(16, 256);
                const double b8 = 8 * 64 / batch->bench(8, 64, 8, 1);
                fmt::print("  B=8 {:.1f} tok/s ({:.2f}x)", b8, b8 / tps);
            }
            fmt::print("\n");
            std::fflush(stdout);
        } catch (const std::exception& e) {
            report(false, fmt::format("q6 bench {}: {}", file_type_name(ft), e.what()));
        }
    }
}

// The Q4_K forms of cuda::set_q4k_matvec (matvec-q4k.cu): for each mode of `modes` ("0;1;..."), the Q4_K products of
// the Q4_K_M step alone (cold copies; Wo and Q/K also from a warm L2), then tg128 of Q4_K_M with each mode (the list
// twice, alternated).
void bench_q4k(const cuda::bandwidth_probe& bw, const std::string& modes) {
    const int mode0 = cuda::q4k_matvec();
    std::vector<int> list;
    for (const auto& e : split_list(modes)) list.push_back(int(std::strtol(e.c_str(), nullptr, 0)));
    if (list.empty()) list = {0, 1};
    struct mat {
        int64_t n_in, n_out;
        const char* name;
    };
    const mat mats[] = {{4096, 28672, "gate/up"},
                        {4096, 4096, "Wo"},
                        {14336, 4096, "down"},
                        {4096, 5120, "Q/K"},
                        {4096, 6144, "Q/K/V"}};
    fmt::print("\nq4k bench: Q4_K matvec alone (GB/s of weight bytes, 20 launches in one graph), probe {:.0f} GB/s:\n",
               bw.hbm_read_gbs);
    for (int pass = 0; pass < 2; pass++)
        for (int mode : list) {
            cuda::set_q4k_matvec(mode);
            std::string line = fmt::format("  mode {}", mode);
            for (const auto& m : mats)
                line += fmt::format("  {} {:5.0f}", m.name, cuda::bench_matvec(dtype::q4_k, m.n_in, m.n_out, 20));
            line += fmt::format("  warm: Wo {:5.0f}  Q/K {:5.0f}",
                                cuda::bench_matvec(dtype::q4_k, 4096, 4096, 20, 0, 0, true),
                                cuda::bench_matvec(dtype::q4_k, 4096, 5120, 20, 0, 0, true));
            fmt::print("{}\n", line);
            std::fflush(stdout);
        }
    const auto& preset = find_preset("llama3-8b");
    for (int pass = 0; pass < 2; pass++)
        for (int mode : list) {
            try {
                cuda::set_q4k_matvec(mode);
                auto d = cuda::decoder::random(preset.config, file_type::q4_k_m, 512, 11);
                const double s = d->bench_decode(128, 16, 1), tps = 128 / s;
                const double bytes = double(d->streamed_bytes_per_token());
                fmt::print("  q4k mode {} Q4_K_M tg128 {:7.1f} tok/s  {:7.1f} us/token  ratio {:.3f}\n", mode, tps,
                           1e6 / tps, tps * bytes / (bw.hbm_read_gbs * 1e9));
                std::fflush(stdout);
            } catch (const std::exception& e) {
                report(false, fmt::format("q4k bench mode {}: {}", mode, e.what()));
            }
        }
    cuda::set_q4k_matvec(mode0);
}

// Decode-step fusions (cuda::set_decode_fusion): tg128 of each file type with each mask of `masks` (default "0;2";
// the list run twice, alternated, for the drift within the run), then the batched step at B=8 (which does not use
// them) against the single-sequence graph of the first and last mask.
void bench_fusion(const cuda::bandwidth_probe& bw, const std::string& only, const std::string& masks) {
    const auto& preset = find_preset("llama3-8b");
    std::vector<unsigned> list;
    for (const auto& e : split_list(masks)) list.push_back(unsigned(std::strtoul(e.c_str(), nullptr, 0)));
    if (list.empty()) list = {0u, 2u};
    fmt::print(
        "\ndecode fusions, llama3-8b shapes, random weights, tg128 after 16, probe {:.0f} GB/s (masks of "
        "set_decode_fusion, the list twice):\n",
        bw.hbm_read_gbs);
    const file_type fts[] = {file_type::q4_k_m, file_type::q8_0, file_type::f16, file_type::q4_0, file_type::bf16};
    for (file_type ft : fts) {
        if (!only.empty() && only.find(file_type_name(ft)) == std::string::npos) continue;
        try {
            for (int pass = 0; pass < 2; pass++)
                for (unsigned v : list) {
                    cuda::set_decode_fusion(v);
                    auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                    const int n = 128, warm = 16;
                    const double s = d->bench_decode(n, warm, 1);
                    const double tps = n / s, bytes = double(d->streamed_bytes_per_token());
                    const double limit = bw.hbm_read_gbs * 1e9 / bytes;
                    fmt::print(
                        "  {:<7} fuse {:2} tg{} {:7.1f} tok/s  {:7.1f} us/token  {:5.2f} us/layer  ratio {:.3f}\n",
                        file_type_name(ft), v, n, tps, 1e6 / tps, 1e6 / tps / preset.config.n_layer, tps / limit);
                    std::fflush(stdout);
                }
            for (unsigned v : {list.front(), list.back()}) {
                cuda::set_decode_fusion(v);
                auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                const double single = 128 / d->bench_decode(128, 16, 1);
                auto batch = d->make_batch(16, 256);
                const double b8 = 8 * 64 / batch->bench(8, 64, 8, 1);
                fmt::print("  {:<7} fuse {:2} batched: single graph {:.1f} tok/s, B=8 {:.1f} tok/s ({:.2f}x)\n",
                           file_type_name(ft), v, single, b8, b8 / single);
                std::fflush(stdout);
            }
        } catch (const std::exception& e) {
            report(false, fmt::format("bench fusion {}: {}", file_type_name(ft), e.what()));
        }
    }
    cuda::set_decode_fusion(cuda::k_decode_fusion_default);
}

// The Q6_K lean products at other register budgets (cuda::set_q6k_variant): each entry of `list`
// ("MODE[,ROWS PER WARP]", e.g. "0;1;5;1,1"; the list run twice, alternated) gives the Q6_K products alone through the
// decode step's launch (GB/s of weight bytes, 20 launches in one graph: the down matrix with cold weights and with
// every launch on one copy, the output matrix cold), then tg128 of Q4_K_M (`--only TYPE`: that file type instead).
void bench_q6k(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    const int mode0 = cuda::q6k_variant();
    const unsigned bits = cuda::k_decode_fusion_default;
    fmt::print(
        "\nQ6_K product variants (set_q6k_variant), llama3-8b shapes, random weights, tg128 after 16, probe {:.0f} "
        "GB/s:\n",
        bw.hbm_read_gbs);
    const file_type ft = only.empty() ? file_type::q4_k_m : file_type_from_name(only).value_or(file_type::q4_k_m);
    for (int pass = 0; pass < 2; pass++)
        for (const auto& e : split_list(list)) {
            try {
                char* end = nullptr;
                const int mode = int(std::strtol(e.c_str(), &end, 0));
                const int param = end && *end == ',' ? int(std::strtol(end + 1, nullptr, 0)) : 0;
                cuda::set_q6k_variant(mode, param);
                const double down = cuda::bench_matvec_bits(dtype::q6_k, 14336, 4096, 20, bits, false);
                const double down_warm = cuda::bench_matvec_bits(dtype::q6_k, 14336, 4096, 20, bits, true);
                const double out = cuda::bench_matvec_bits(dtype::q6_k, 4096, 128256, 20, bits, false);
                auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                const double tps = 128 / d->bench_decode(128, 16, 1);
                const double bytes = double(d->streamed_bytes_per_token());
                fmt::print(
                    "  q6k {:<6} down {:5.0f} warm {:5.0f} output {:5.0f} GB/s  {:<7} tg128 {:7.1f} tok/s  {:6.2f} "
                    "us/layer  ratio {:.3f}\n",
                    e, down, down_warm, out, file_type_name(ft), tps, 1e6 / tps / preset.config.n_layer,
                    tps * bytes / (bw.hbm_read_gbs * 1e9));
                std::fflush(stdout);
            } catch (const std::exception& ex) {
                report(false, fmt::format("bench q6k {}: {}", e, ex.what()));
            }
        }
    cuda::set_q6k_variant(mode0);
}

// The RMSNorm from parts (cuda::set_norm_fusion) in the decode step: tg128 of each file type in each listed mode (e.g.
// "0;1;2", the list run twice, alternated); `--only TYPE` picks one file type.
void bench_norm(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    const int mode0 = cuda::norm_fusion();
    fmt::print(
        "\nRMSNorm from parts (modes of set_norm_fusion), llama3-8b shapes, random weights, tg128 after 16, probe "
        "{:.0f} GB/s:\n",
        bw.hbm_read_gbs);
    const file_type fts[] = {file_type::q8_0, file_type::q4_0, file_type::q4_k_m, file_type::f16};
    for (file_type ft : fts) {
        if (!only.empty() && only.find(file_type_name(ft)) == std::string::npos) continue;
        for (int pass = 0; pass < 2; pass++)
            for (const auto& e : split_list(list)) {
                try {
                    cuda::set_norm_fusion(int(std::strtol(e.c_str(), nullptr, 10)));
                    auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                    const double tps = 128 / d->bench_decode(128, 16, 1);
                    const double bytes = double(d->streamed_bytes_per_token());
                    fmt::print("  {:<7} norm {} tg128 {:7.1f} tok/s  {:6.2f} us/layer  ratio {:.3f}",
                               file_type_name(ft), e, tps, 1e6 / tps / preset.config.n_layer,
                               tps * bytes / (bw.hbm_read_gbs * 1e9));
                    if (ft == file_type::q4_k_m) {  // the batched step's norms follow the mode (K formats: bit 4)
                        auto batch = d->make_batch(16, 256);
                        fmt::print("  B=8 {:.1f} tok/s", 8 * 64 / batch->bench(8, 64, 8, 1));
                    }
                    fmt::print("\n");
                    std::fflush(stdout);
                } catch (const std::exception& ex) {
                    report(false, fmt::format("bench norm {} {}: {}", e, file_type_name(ft), ex.what()));
                }
            }
    }
    cuda::set_norm_fusion(mode0);
}

// Weight loads before the PDL wait (cuda::set_matvec_early) in the decode step: tg128 of each file type at each listed
// level, the list run twice (alternated, for the drift within the run); `--only TYPE` picks one file type.
void bench_early(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    std::vector<int> levels;
    for (const auto& e : split_list(list)) levels.push_back(int(std::strtol(e.c_str(), nullptr, 10)));
    fmt::print("\nearly weight loads, llama3-8b shapes, random weights, tg128 after 16, probe {:.0f} GB/s:\n",
               bw.hbm_read_gbs);
    const file_type fts[] = {file_type::q4_k_m, file_type::q8_0, file_type::f16, file_type::bf16, file_type::q4_0};
    for (file_type ft : fts) {
        if (!only.empty() && only != file_type_name(ft)) continue;
        for (int pass = 0; pass < 2; pass++)
            for (int level : levels) {
                try {
                    cuda::set_matvec_early(level);
                    auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                    const double tps = 128 / d->bench_decode(128, 16, 1);
                    const double bytes = double(d->streamed_bytes_per_token());
                    fmt::print("  {:<7} early {} tg128 {:7.1f} tok/s  {:6.2f} us/layer  ratio {:.3f}\n",
                               file_type_name(ft), level, tps, 1e6 / tps / preset.config.n_layer,
                               tps * bytes / (bw.hbm_read_gbs * 1e9));
                    std::fflush(stdout);
                } catch (const std::exception& e) {
                    report(false, fmt::format("bench early {} {}: {}", level, file_type_name(ft), e.what()));
                }
            }
    }
    cuda::set_matvec_early(4);
}

// Weights staged in shared memory before the PDL wait (cuda::set_matvec_prefetch): tg128 of each file type with each
// setting of `list` ("TASKS,MASK[,CARVEOUT[,EARLY]]", ';'-separated), the list run twice (alternated); `--only TYPE`.
void bench_prefetch(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    std::vector<prefetch_setting> settings;
    for (const auto& e : split_list(list)) settings.push_back(parse_prefetch(e));
    fmt::print("\nstaged weights, llama3-8b shapes, random weights, tg128 after 16, probe {:.0f} GB/s:\n",
               bw.hbm_read_gbs);
    const file_type fts[] = {file_type::q8_0, file_type::q4_0, file_type::q4_k_m, file_type::f16, file_type::bf16};
    for (file_type ft : fts) {
        if (!only.empty() && only.find(file_type_name(ft)) == std::string::npos) continue;
        for (int pass = 0; pass < 2; pass++)
            for (const auto& p : settings) {
                try {
                    apply(p);
                    auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                    const double tps = 128 / d->bench_decode(128, 16, 1);
                    const double bytes = double(d->streamed_bytes_per_token());
                    fmt::print("  {:<7} prefetch {:<12} tg128 {:7.1f} tok/s  {:6.2f} us/layer  ratio {:.3f}\n",
                               file_type_name(ft), p.name, tps, 1e6 / tps / preset.config.n_layer,
                               tps * bytes / (bw.hbm_read_gbs * 1e9));
                    std::fflush(stdout);
                } catch (const std::exception& e) {
                    report(false, fmt::format("bench prefetch {} {}: {}", p.name, file_type_name(ft), e.what()));
                }
            }
    }
    apply(parse_prefetch("-1"));
}

// Batched decode alone: aggregate tok/s of B sequences per step vs the single-sequence graph of the same
// decoder, per file type, with the MMA kernels' two unroll settings side by side (A/B in one run).
void bench_batch_decode(const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    fmt::print("\nbatched decode, llama3-8b shapes, random weights (64 steps after 8, contexts of 256):\n");
    const file_type fts[] = {file_type::q4_k_m, file_type::q8_0, file_type::f16, file_type::bf16, file_type::q4_0};
    for (file_type ft : fts) {
        if (!only.empty() && only != file_type_name(ft)) continue;
        try {
            auto d = cuda::decoder::random(preset.config, ft, 512, 11);
            const double single = 128 / d->bench_decode(128, 16, 1);
            fmt::print("  {:<7} single-sequence graph {:.1f} tok/s\n", file_type_name(ft), single);
            // Default (Q4_K/Q8_0/Q4_0: the pipelined kernels), the register-staged kernels before them, the pipelined
            // kernels' other stage/occupancy choice and their alternative arithmetic (F16/BF16: the default only).
            const bool piped = ft == file_type::q8_0 || ft == file_type::q4_0 || ft == file_type::q4_k_m;
            // Q4_K_M: the default (Q/K/V of the more-bits layers in one launch) alternated with variant 4, Q/K and V as
            // two launches (the step before), and 5-7, Q4_K's deeper rings (set_mma_q4k_stages modes 1-3; the older
            // variants are in docs/cuda-prefill-batch-log.md).
            const char* names[] = {"default",
                                   "register-staged",
                                   "other stages",
                                   "alt arithmetic",
                                   "separate Q/K/V",
                                   "Q4_K 4 stages (rows >= 8192)",
                                   "Q4_K 4 stages",
                                   "Q4_K 3 stages (rows >= 8192)",
                                   "Q6_K 4 halves (output)",
                                   "Q4_0 4 stages (rows >= 8192)",
                                   "Q4_0 2 stages (rows >= 8192, before gq4b)",
                                   "Q4_0 3 stages (rows < 8192)",
                                   "Q6_K 4 halves (all)",
                                   "Q6_K register-staged (before gbq8)",
                                   "Q6_K pipe 3 stages 3 blocks (short rows), long rows register-staged",
                                   "Q6_K pipe int sums (short rows), long rows register-staged",
                                   "Q6_K pipe int sums (long rows), short rows register-staged",
                                   "Q6_K pipe int sums 4 stages 2 blocks",
                                   "Q6_K pipe int sums 4 stages 3 blocks",
                                   "Q6_K pipe int sums 3 stages 3 blocks (long rows too)"};
            // Session 8 (gbq8), set_mma_q6k_pipe(short rows, long rows): 13 the register-staged Q6_K kernel (main
            // before), 14-19 other modes for the output/V (short) and down (long) rows (default: the pipelined kernel
            // with integer sums, mode 6 for the short rows, since session 9 (gbt9) mode 10 for the long rows; 17 is
            // mode 7 there, the default before).
            const int q6_short[] = {6, 0, 4, 6, 0, 7, 8, 6}, q6_long[] = {7, 0, 0, 0, 6, 7, 8, 6};
            // Session 7 (gq4b), set_mma_batch_tune: 8 the Q6_K output product with 4 halves per warp (12: every Q6_K
            // product), 9/10 Q4_0's down matrix with 4/2 stages instead of the default 8, 11 Q4_0's shorter rows
            // with 3.
            const std::vector<int> qkm_list = {0, 13, 14, 15, 16, 17, 18, 19, 0, 13, 14, 15, 16, 17, 18, 19},
                                   q4_0_list = {0, 13, 18, 0, 13, 18}, other_list = {0, 1, 2, 3, 0};
            const bool q40 = ft == file_type::q4_0;
            for (int variant : ft == file_type::q4_k_m ? qkm_list : q40 ? q4_0_list : other_list) {
                if (variant > 0 && !piped) continue;
                cuda::prefill_options o;
                o.mma_previous = variant == 1;
                o.mma_pipe_variant = variant == 2 || variant == 3 ? variant - 1 : 0;
                cuda::set_mma_pair(variant != 4);
                cuda::set_mma_q4k_stages(variant >= 5 && variant <= 7 ? variant - 4 : 0);
                cuda::set_mma_batch_tune(variant == 9    ? 4
                                         : variant == 10 ? 2
                                                         : 8,
                                         variant == 8    ? 2
                                         : variant == 12 ? 1
                                                         : 0,
                                         variant == 11 ? 3 : 2);
                cuda::set_mma_q6k_pipe(variant >= 13 ? q6_short[variant - 12] : -1,
                                       variant >= 13 ? q6_long[variant - 12] : -1);
                cuda::set_prefill_options(o);
                auto batch = d->make_batch(16, 256);
                fmt::print("          {}:", names[variant]);
                for (int b : {1, 2, 4, 8, 16}) {
                    const double bs = batch->bench(b, 64, 8, 1);
                    fmt::print(" B={} {:.0f} ({:.2f}x)", b, b * 64 / bs, b * 64 / bs / single);
                }
                fmt::print("\n");
                std::fflush(stdout);
            }
            cuda::set_prefill_options({});
            cuda::set_mma_pair(true);
            cuda::set_mma_q4k_stages(0);
            cuda::set_mma_batch_tune(8, 0);
            cuda::set_mma_q6k_pipe(-1, -1);
            const double single2 = 128 / d->bench_decode(128, 16, 1);
            fmt::print("          single-sequence graph again {:.1f} tok/s\n", single2);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench batch {}: {}", file_type_name(ft), e.what()));
        }
    }
    cuda::set_prefill_options({});
}

// The batched step's masks (cuda::set_batch_step: knock-outs and variants, batch-step.h), the list twice (alternated):
// us per step of 8 sequences and per layer (a knock-out's saving = the default's us minus its us); masks without
// knock-out bits also B=2, 4, 16; bits 24-27 / 28-31 of a mask, when not 0, are set_mma_q6k_pipe's modes for the short
// / long rows (mma-pair.h), bits 16-23 set_mma_q4k_xs's mode + 1 (session 11; 0: the process's default). Q4_0 and
// Q4_K_M (`only`: the file types whose name contains it).
void bench_batch_step(const std::string& only, const std::string& masks) {
    const auto& preset = find_preset("llama3-8b");
    const int xs_mode = cuda::mma_q4k_xs();
    std::vector<unsigned> list;
    for (const auto& e : split_list(masks)) list.push_back(unsigned(std::strtoul(e.c_str(), nullptr, 0)));
    if (list.empty()) list = {cuda::k_batch_step_default};
    fmt::print(
        "\nbatched step masks, llama3-8b shapes, random weights (64 steps after 8, contexts of 256), the list "
        "twice:\n");
    for (file_type ft : {file_type::q4_0, file_type::q4_k_m}) {
        if (!only.empty() && std::string(file_type_name(ft)).find(only) == std::string::npos) continue;
        try {
            auto d = cuda::decoder::random(preset.config, ft, 512, 11);
            const double single = 128 / d->bench_decode(128, 16, 1);
            fmt::print("  {:<7} single-sequence graph {:.1f} tok/s ({:.1f} us/token)\n", file_type_name(ft), single,
                       1e6 / single);
            for (int pass = 0; pass < 2; pass++)
                for (unsigned m : list) {
                    cuda::set_batch_step(m & 0xffffu);
                    cuda::set_mma_q6k_pipe(m >> 24 & 15 ? int(m >> 24 & 15) : -1, m >> 28 ? int(m >> 28) : -1);
                    cuda::set_mma_q4k_xs(m >> 16 & 255 ? int(m >> 16 & 255) - 1 : xs_mode);
                    auto batch = d->make_batch(16, 256);
                    const double s8 = batch->bench(8, 64, 8, 1) / 64;
                    fmt::print("    mask {:#7x}: B=8 {:8.1f} us/step {:6.2f} us/layer {:7.0f} tok/s ({:.3f}x)", m,
                               1e6 * s8, 1e6 * s8 / preset.config.n_layer, 8 / s8, 8 / s8 / single);
                    if ((m & cuda::k_batch_ko_all) == 0)
                        for (int b : {2, 4, 16}) {
                            const double bs = batch->bench(b, 64, 8, 1);
                            fmt::print("  B={} {:.0f} ({:.2f}x)", b, b * 64 / bs, b * 64 / bs / single);
                        }
                    fmt::print("\n");
                    std::fflush(stdout);
                }
            const double single2 = 128 / d->bench_decode(128, 16, 1);
            fmt::print("    single-sequence graph again {:.1f} tok/s\n", single2);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench batch step {}: {}", file_type_name(ft), e.what()));
        }
    }
    cuda::set_batch_step(cuda::k_batch_step_default);
    cuda::set_mma_q6k_pipe(-1, -1);
    cuda::set_mma_q4k_xs(xs_mode);
}

void bench_prefill_batch(const std::string& only) {
    const auto& preset = find_preset("llama3-8b");
    fmt::print(
        "\ncuBLAS f16 GEMM alone, 512 tokens (TFLOPS): 4096->6144 {:.0f}, 4096->4096 {:.0f}, 4096->28672 {:.0f}, "
        "14336->4096 {:.0f}\n",
        cuda::bench_gemm_f16(512, 4096, 6144, 10), cuda::bench_gemm_f16(512, 4096, 4096, 10),
        cuda::bench_gemm_f16(512, 4096, 28672, 10), cuda::bench_gemm_f16(512, 14336, 4096, 10));
    fmt::print("\nprefill pp512, llama3-8b shapes, random weights (median of 3 after a warm-up):\n");
    const file_type fts[] = {file_type::q4_k_m, file_type::f16, file_type::q8_0, file_type::bf16, file_type::q4_0};
    for (file_type ft : fts) {
        if (!only.empty() && only != file_type_name(ft)) continue;
        try {
            auto d = cuda::decoder::random(preset.config, ft, 1024, 11);
            const double s = d->bench_prefill(512, 3);
            const auto& c = preset.config;
            const double layer_params = double(c.n_embd) * double(c.q_dim() + 2 * c.kv_dim()) +
                                        double(c.q_dim()) * c.n_embd + 3.0 * c.n_embd * c.n_ff;
            const double tflops = 2.0 * 512 * layer_params * c.n_layer / s / 1e12;
            fmt::print("  {:<7} pp512 {:8.0f} tok/s  ({:.2f} ms, layer GEMMs {:.0f} TFLOPS)\n", file_type_name(ft),
                       512 / s, s * 1e3, tflops);
            if (ft == file_type::q4_k_m || ft == file_type::f16) {
                cuda::prefill_options o;
                o.dequant_chunk_bytes = 1ull << 40;  // whole matrices
                cuda::set_prefill_options(o);
                const double s_whole = d->bench_prefill(512, 3);
                o = {};
                o.reference_attention = true;
                cuda::set_prefill_options(o);
                const double s_ref = d->bench_prefill(512, 1);
                cuda::set_prefill_options({});
                const double s2 = d->bench_prefill(512, 3);
                const double s_long = d->bench_prefill(1024, 2);
                fmt::print(
                    "          same run: whole-matrix dequant {:.0f} tok/s, scalar attention {:.0f} tok/s, "
                    "default again {:.0f} tok/s, pp1024 {:.0f} tok/s\n",
                    512 / s_whole, 512 / s_ref, 512 / s2, 1024 / s_long);
            }
            // Batched decode: aggregate tok/s of b sequences per step vs the batch-1 decode graph.
            const double single = 128 / d->bench_decode(128, 16, 1);
            auto batch = d->make_batch(16, 256);
            fmt::print("          decode: single-sequence graph {:.1f} tok/s; batched aggregate:", single);
            for (int b : {1, 2, 4, 8, 16}) {
                const double bs = batch->bench(b, 64, 8, 1);
                fmt::print(" B={} {:.0f} ({:.2f}x)", b, b * 64 / bs, b * 64 / bs / single);
            }
            cuda::prefill_options o;
            o.reference_batch_products = true;
            cuda::set_prefill_options(o);
            auto ref = d->make_batch(16, 256);
            fmt::print("; dp4a/FMA products:");
            for (int b : {2, 4, 8, 16}) {
                const double rs = ref->bench(b, 64, 8, 1);
                fmt::print(" B={} {:.0f} ({:.2f}x)", b, b * 64 / rs, b * 64 / rs / single);
            }
            cuda::set_prefill_options({});
            fmt::print("\n");
            std::fflush(stdout);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench prefill/batch {}: {}", file_type_name(ft), e.what()));
        }
    }
}

// Decode tok/s of one sequence (random Q4_K_M weights, host loop as memtile run drives it): greedy through the
// graph's argmax, default sampling on the GPU, default sampling on the host (logits copied back), interleaved
// in rounds; and the time of one GPU draw alone.
void bench_sampling() {
    for (const char* name : {"llama3.2-1b", "llama3-8b"}) {
        try {
            const auto& c = find_preset(name).config;
            const int V = int(c.n_vocab);
            auto ls = cuda::logits_sampler::create(V);
            ls->set_logits(test::test_logits(V, 0, 1));
            sampling_params p_def, p_all, p_greedy_pen;
            p_all.top_k = 0;
            p_greedy_pen.temperature = 0;
            p_greedy_pen.repeat_penalty = 1.1f;
            sampling_draw dd;
            std::string per_draw;
            for (const auto& [what, p] : {std::pair<const char*, sampling_params>{"default", p_def},
                                          {"top-k off", p_all},
                                          {"greedy+repeat", p_greedy_pen}}) {
                sampler s(p);
                for (int t = 0; t < 64; t++) s.accept(t * 7);
                s.next_draw(dd);
                per_draw += fmt::format(" {} {:.1f} us;", what, ls->bench(dd, 200) * 1e6);
            }
            auto d = cuda::decoder::random(c, file_type::q4_k_m, 1024, 11);
            const int n = 128, rounds = 3;
            double secs[3] = {0, 0, 0};
            using clk = std::chrono::steady_clock;
            for (int r = 0; r < rounds; r++)
                for (int v = 0; v < 3; v++) {
                    d->reset();
                    sampler s(p_def);
                    sampling_draw draw;
                    const int32_t prompt[1] = {1};
                    int32_t tok = 1;
                    const auto t0 = clk::now();
                    if (v == 0) {
                        for (int i = 0; i < n; i++) tok = d->forward_greedy(tok);
                    } else if (v == 1) {
                        d->append(prompt);
                        for (int i = 0; i < n; i++) {
                            s.next_draw(draw);
                            tok = d->sample(draw);
                            s.accept(tok);
                            d->append(std::span<const int32_t>(&tok, 1));
                        }
                    } else {
                        auto logits = d->forward(1);
                        for (int i = 0; i < n; i++) {
                            tok = s.sample(logits);
                            s.accept(tok);
                            logits = d->forward(tok);
                        }
                    }
                    secs[v] += std::chrono::duration<double>(clk::now() - t0).count();
                }
            const double g = rounds * n / secs[0], ds = rounds * n / secs[1], hs = rounds * n / secs[2];
            fmt::print(
                "  sampling {:<12} Q4_K_M random weights, vocabulary {}: decode tok/s greedy (graph argmax) "
                "{:.1f}, default sampling on the GPU {:.1f} ({:.3f}x greedy), on the host {:.1f} ({:.3f}x "
                "greedy); GPU over host {:.3f}x; one GPU draw:{}\n",
                name, V, g, ds, ds / g, hs, hs / g, ds / hs, per_draw);
            std::fflush(stdout);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench sampling {}: {}", name, e.what()));
        }
    }
}

// One batched draw call (device_sampler::sample_rows, default parameters with a repeat penalty window) against
// b single draws and the host sampler on the same b rows (host time excludes copying [b, n_vocab] back).
void bench_batch_sampling() {
    for (int V : {32000, 128256})
        for (int b : {4, 8}) {
            try {
                auto ls = cuda::logits_sampler::create(V);
                std::vector<float> rows(size_t(b) * size_t(V));
                for (int r = 0; r < b; r++) {
                    const auto l = test::test_logits(V, 0, uint64_t(r) + 1);
                    std::copy(l.begin(), l.end(), rows.begin() + std::ptrdiff_t(size_t(r) * size_t(V)));
                }
                sampling_params p;
                p.repeat_penalty = 1.1f;
                std::vector<sampler> host;
                std::vector<sampling_draw> draws(static_cast<size_t>(b));
                for (int r = 0; r < b; r++) {
                    p.seed = uint64_t(r);
                    host.emplace_back(p);
                    for (int t = 0; t < 64; t++) host.back().accept((t * 7 + r) % V);
                    sampler(host.back()).next_draw(draws[size_t(r)]);
                }
                ls->sample_rows(rows, draws, true);
                const double batched = ls->bench_rows(draws, 100);
                ls->set_logits({rows.data(), size_t(V)});
                const double single = ls->bench(draws[0], 100);
                const int reps = 20;
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < reps; i++)
                    for (int r = 0; r < b; r++)
                        host[size_t(r)].sample({rows.data() + size_t(r) * size_t(V), size_t(V)});
                const double on_host =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
                fmt::print(
                    "  batched sampling vocabulary {:>6}, {} rows: one sample_rows call {:.1f} us ({:.1f} us a "
                    "row), {} single draws {:.1f} us, host sampler on the {} rows {:.1f} us (without the copy)\n",
                    V, b, batched * 1e6, batched * 1e6 / b, b, single * b * 1e6, b, on_host * 1e6);
                std::fflush(stdout);
            } catch (const std::exception& e) {
                report(false, fmt::format("bench batched sampling {}: {}", V, e.what()));
            }
        }
}

}  // namespace memtile::cuda_check

namespace memtile::cuda_check {

// --boundary-bench "P;P;...": bench_boundaries per entry P, a slice size in MB (1e6 bytes, at most 1,024; 0: steps
// without bytes) or a pattern "MB,MB,..." of a step's slices, repeated to about 2 GiB (at least 16 slices, at most 512
// unless the pattern is longer; slices that total less than 256 MB, which the L2 could partly hold, are refused); every
// form alternated (or only those of form_list, "1,2,..."; form 0 always runs first). GB/s (ratio to the probe), us per
// slice, and each form's us per slice above form 0's (what a boundary costs in that form).
void bench_boundary(const cuda::bandwidth_probe& bw, const std::string& list, const std::string& form_list) {
    const char* names[cuda::k_boundary_forms] = {"one launch",
                                                 "PDL chain",
                                                 "PDL, loads early",
                                                 "no PDL",
                                                 "barrier",
                                                 "barrier, early",
                                                 "persistent, none",
                                                 "wide, barrier",
                                                 "wide, flat barrier",
                                                 "wide, flat, early",
                                                 "wide, none",
                                                 "wide, flat, backoff",
                                                 "cp.async ring, flat",
                                                 "bulk ring, flat",
                                                 "cp.async ring, defer",
                                                 "bulk ring, defer",
                                                 "bulk ring, none"};
    std::vector<int> forms{0};
    if (form_list.empty())
        for (int f = 1; f < cuda::k_boundary_forms; f++) forms.push_back(f);
    for (const auto& item : split_list(form_list, ',')) {
        char* end = nullptr;
        const long f = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || f < 0 || f >= cuda::k_boundary_forms)
            fail("check", "--boundary-forms: '{}' is not a form 0..{}", item, cuda::k_boundary_forms - 1);
        if (std::find(forms.begin(), forms.end(), int(f)) == forms.end()) forms.push_back(int(f));
    }
    fmt::print(
        "\nboundary bench: slices of cold bytes read one after another, each step reading the previous one's "
        "output; probe {:.0f} GB/s\n",
        bw.hbm_read_gbs);
    for (const auto& e : split_list(list)) {
        std::vector<uint64_t> pattern;
        uint64_t pattern_bytes = 0;
        for (const auto& item : split_list(e, ',')) {
            char* end = nullptr;
            const double mb = std::strtod(item.c_str(), &end);
            if (item.empty() || *end || !(mb >= 0) || mb > 1024)
                fail("check", "--boundary-bench: slice size '{}' of '{}' is not 0..1024 MB", item, e);
            pattern.push_back(uint64_t(mb * 1e6));
            pattern_bytes += pattern.back();
        }
        if (pattern.empty()) fail("check", "--boundary-bench: an empty entry in '{}'", list);
        const size_t len = pattern.size();
        const size_t by_bytes = pattern_bytes ? size_t((uint64_t(2) << 30) / pattern_bytes + 1) : 256 / len + 1;
        const size_t repeats = std::max((15 + len) / len, std::min(by_bytes, std::max<size_t>(1, 512 / len)));
        if (pattern_bytes && double(pattern_bytes) * double(repeats) < 256e6)
            fail("check", "--boundary-bench: the slices of '{}' total {:.0f} MB; at least 256 MB keep them out of L2",
                 e, double(pattern_bytes) * double(repeats) / 1e6);
        std::vector<uint64_t> slices;
        for (size_t r = 0; r < repeats; r++) slices.insert(slices.end(), pattern.begin(), pattern.end());
        const auto res = cuda::bench_boundaries(slices, forms, 5);
        fmt::print("  slices {} MB x {} ({} slices, {:.0f} MB):\n", e, repeats, slices.size(),
                   double(pattern_bytes) * double(repeats) / 1e6);
        for (size_t k = 0; k < forms.size(); k++) {
            const std::string grid =
                res[k].blocks ? fmt::format("  ({} blocks x {})", res[k].blocks, res[k].threads) : std::string();
            fmt::print("    {:19s} {:6.0f} GB/s ({:.3f})  {:8.2f} us/slice  {:+6.2f} us/slice above one launch{}\n",
                       names[forms[k]], res[k].gbs, res[k].gbs / bw.hbm_read_gbs, res[k].us_per_slice,
                       res[k].us_per_slice - res[0].us_per_slice, grid);
        }
        std::fflush(stdout);
    }
}

}  // namespace memtile::cuda_check
