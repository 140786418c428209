// Device-machine driver of the CUDA backend: correctness against the CPU engine (logits per weight format,
// greedy tokens of stories260K and the default model) and batch-1 decode benchmarks of llama3-8b shapes
// against the HBM read bandwidth probed in the same run. Built by MEMTILE_DEVICE_BUILD=ON (no GoogleTest,
// CLI or server needed). Usage: memtile-cuda-check [--stories FILE.bin] [--kjv FILE.gguf] [--tmp DIR]
//                               [--no-bench] [--bench-only] [--no-decode-bench] [--only FILE_TYPE]
//                               [--sweep] [--diag] [--profile] [--sampling] [--fusion-bench] [--q6-bench]
//                               [--fusion-masks "MASK;MASK;..."] [--early-bench "LEVEL;LEVEL;..."]
//                               [--prefetch-bench "TASKS,MASK[,CARVEOUT[,LEVEL]];..."]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>

#include "backends/cpu/cpu-isa.h"
#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/mma-pair.h"
#include "core/error.h"
#include "gguf/gguf-file.h"
#include "models/llama2c-import.h"
#include "models/presets.h"
#include "models/transformer.h"
#include "quant/quant.h"
#include "support/cuda-checks.h"
#include "support/reference-model.h"
#include "support/sampling-checks.h"

using namespace memtile;

namespace {

int failures = 0;

void report(bool ok, const std::string& what) {
    fmt::print("{} {}\n", ok ? "PASS" : "FAIL", what);
    std::fflush(stdout);
    if (!ok) failures++;
}

// Prefill (two passes, then decode steps on the KV they wrote) against the CPU engine, batched decode against
// the single-sequence decoder; with `reference` the scalar attention kernel instead of the tensor-core one.
void check_prefill_batch(const std::string& name, const std::string& path, double tol, bool batch, int n_first = 70,
                         int n_second = 60) {
    try {
        const auto r = test::compare_prefill(path, n_first, n_second, 8);
        report(r.prefill_nmse <= tol && r.decode_nmse <= tol,
               fmt::format("prefill {:<22} {}+{} tokens NMSE {:.3e}, decode after it {:.3e} (tol {:.0e})", name,
                           n_first, n_second, r.prefill_nmse, r.decode_nmse, tol));
        if (!batch) return;
        {
            auto d = cuda::decoder::load(gguf_file::open(path), 64);
            const auto [e, where] = d->make_batch(4, 64)->check_products(4);
            report(e <= 1e-5, fmt::format("products {:<22} model weights, tensor cores vs dp4a/FMA: worst NMSE {:.3e} "
                                          "({})",
                                          name, e, where));
        }
        // Tolerance as against the CPU engine: the products agree to ~1e-14 (line above), but a last-bit change
        // can flip the rounding of an int8 activation in the next layer, which quantized formats amplify.
        const auto b = test::compare_batch(path, 4, 6);
        report(b.worst_nmse <= tol && b.token_mismatches == 0,
               fmt::format("batch   {:<22} 4 sequences x {} steps vs single: NMSE {:.3e}, {} argmax mismatches", name,
                           b.steps, b.worst_nmse, b.token_mismatches));
    } catch (const std::exception& e) {
        report(false, fmt::format("prefill/batch {}: {}", name, e.what()));
    }
}

// Batched tensor-core products vs the dp4a/FMA kernels, per weight type, over shapes and batch sizes.
void check_batch_products() {
    const dtype types[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
    // The last shape (n_in 352 or 336) is not a whole number of the row-wise kernels' 64-byte units: it checks
    // the fragment-layout kernels of Q8_0/Q4_0 (352) and F16/BF16 (336); K-quants skip it (n_in % 256).
    // 8192 x 80: the width from which Q4_K's deeper rings apply (set_mma_q4k_stages modes 1 and 3).
    const int64_t shapes[][2] = {{256, 64}, {256, 512}, {768, 256}, {4096, 1040}, {8192, 80}, {352, 72}};
    for (dtype t : types) {
        double worst = 0;
        std::string where;
        const bool k_quant = t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
        try {
            // Q4_K/Q8_0/Q4_0: the pipelined kernels (default), the register-staged ones and the pipelined kernels'
            // other variants (A/B options of the batch benchmark), Q4_0's quad-shuffle kernel.
            const bool piped = t == dtype::q4_k || t == dtype::q8_0 || t == dtype::q4_0;
            // Q4_K also: the deeper rings (variants 5-7 = set_mma_q4k_stages modes 1-3).
            const int n_variants = t == dtype::q4_0 ? 5 : t == dtype::q4_k ? 8 : piped ? 4 : 1;
            const char* names[] = {"",          " register-staged", " other stages", " alt arithmetic",
                                   " shuffles", " 4 stages long",   " 4 stages",     " 3 stages long"};
            for (int v = 0; v < n_variants; v++) {
                if (v == 4 && t != dtype::q4_0) continue;
                cuda::prefill_options o;
                o.mma_previous = v == 1;
                o.mma_pipe_variant = v == 2 ? 1 : v == 3 ? 2 : 0;
                o.mma_q4_0_shuffles = v == 4;
                cuda::set_prefill_options(o);
                cuda::set_mma_q4k_stages(v >= 5 ? v - 4 : 0);
                for (const auto& sh : shapes) {
                    if (sh[0] == 352 && k_quant) continue;
                    const int64_t n_in = sh[0] == 352 && (t == dtype::f16 || t == dtype::bf16) ? 336 : sh[0];
                    for (int nb : {2, 5, 8, 9, 16}) {
                        const double e = cuda::check_batch_products(t, n_in, sh[1], nb, uint64_t(nb) * 7 + 1);
                        if (e >= worst) {
                            worst = e;
                            where = fmt::format("{}x{} B={}{}", sh[1], n_in, nb, names[v]);
                        }
                    }
                }
            }
            cuda::set_prefill_options({});
            cuda::set_mma_q4k_stages(0);
            const double tol = (t == dtype::f16 || t == dtype::bf16) ? 1e-5 : 1e-10;
            report(worst <= tol, fmt::format("batch products {:<5} tensor cores vs dp4a/FMA: worst NMSE {:.3e} ({}), "
                                             "tol {:.0e}",
                                             dtype_name(t), worst, where, tol));
        } catch (const std::exception& e) {
            report(false, fmt::format("batch products {}: {}", dtype_name(t), e.what()));
        }
    }
    // The one-launch Q4_K Q/K + Q6_K V pair of the batched step: bit-equal to the two launches, and against the
    // dp4a kernels as the products above (row counts of whole and partial 16-row tiles).
    try {
        const int64_t shapes[][3] = {{4096, 5120, 1024}, {256, 72, 40}, {768, 520, 136}};
        int64_t differ = 0;
        double worst = 0;
        std::string where = "none";
        for (const auto& sh : shapes)
            for (int nb : {2, 5, 8}) {
                const auto [n, e] = cuda::check_batch_pair(sh[0], sh[1], sh[2], nb, uint64_t(nb) * 3 + 5);
                differ += n;
                if (e >= worst) {
                    worst = e;
                    where = fmt::format("{}+{}x{} B={}", sh[1], sh[2], sh[0], nb);
                }
            }
        report(differ == 0 && worst <= 1e-10,
               fmt::format("batch products Q4_K+Q6_K one launch: {} outputs differ from the two launches, worst NMSE "
                           "vs dp4a {:.3e} ({}), tol 1e-10",
                           differ, worst, where));
    } catch (const std::exception& e) {
        report(false, fmt::format("batch products Q4_K+Q6_K one launch: {}", e.what()));
    }
}

// The decode step's fusions (cuda::set_decode_fusion) change no bit: logits of 16 steps without and with them, in
// a context of 512 (4 attention splits; where a model's shapes do not allow a fusion both runs use the kernels).
void check_fusion_bits(const std::string& name, const std::string& path) {
    try {
        // All fusions, and all but the cluster merges (which take the place of bits 2 and 128's merges).
        const unsigned masks[3] = {0u, cuda::k_decode_fusion_all,
                                   cuda::k_decode_fusion_all & ~(cuda::k_attn_cluster_k | cuda::k_attn_cluster)};
        std::vector<std::vector<float>> out[3];
        for (int k = 0; k < 3; k++) {
            cuda::set_decode_fusion(masks[k]);
            auto d = cuda::decoder::load(gguf_file::open(path), 512);
            const int nv = int(d->config().n_vocab);
            for (int i = 0; i < 16; i++) {
                const auto l = d->forward(int32_t((7 * i + 3) % nv));
                out[k].emplace_back(l.begin(), l.end());
            }
        }
        cuda::set_decode_fusion(cuda::k_decode_fusion_default);
        int differ[3] = {};
        for (int k = 1; k < 3; k++)
            for (size_t i = 0; i < out[0].size(); i++)
                if (std::memcmp(out[0][i].data(), out[k][i].data(), out[0][i].size() * sizeof(float)) != 0) differ[k]++;
        report(differ[1] == 0 && differ[2] == 0,
               fmt::format("fusion bits {:<24} 16 steps, no fusion vs all / all but the cluster merges: {} / {} steps "
                           "differ (bit-equal expected)",
                           name, differ[1], differ[2]));
    } catch (const std::exception& e) {
        cuda::set_decode_fusion(cuda::k_decode_fusion_default);
        report(false, fmt::format("fusion bits {}: {}", name, e.what()));
    }
}

// A set_matvec_prefetch setting of the benches and checks, "TASKS,MASK[,CARVEOUT[,EARLY LEVEL]]" (early level 4 unless
// given; "-1": the default setting, "0,0": off).
struct prefetch_setting {
    int tasks = 0;
    unsigned mask = 0;
    int carveout = -1, early = 4;
    std::string name;
};
prefetch_setting parse_prefetch(const std::string& v) {
    prefetch_setting p;
    p.name = v;
    const char* c = v.c_str();
    char* end = nullptr;
    p.tasks = int(std::strtol(c, &end, 10));
    if (*end == ',') p.mask = unsigned(std::strtoul(end + 1, &end, 0));
    if (*end == ',') p.carveout = int(std::strtol(end + 1, &end, 10));
    if (*end == ',') p.early = int(std::strtol(end + 1, &end, 10));
    return p;
}
void apply(const prefetch_setting& p) {
    cuda::set_matvec_prefetch(p.tasks, p.mask, p.carveout);
    cuda::set_matvec_early(p.early);
}

// Weights staged in shared memory before the PDL wait (cuda::set_matvec_prefetch) change no bit: logits of 12 steps of
// llama3-8b shapes (random weights, context 512; the staged path needs rows of more than 4 early tasks per thread, so
// the tiny models would not reach it) with staging off and with every product, the RMSNorm trigger and a carveout, at
// early level 4 and 0 (then 8 staged tasks: Q/K/V and the output rows wholly from shared memory).
void check_prefetch_bits() {
    const auto& preset = find_preset("llama3-8b");
    const prefetch_setting settings[] = {parse_prefetch("0,0"), parse_prefetch("4,447,50"),
                                         parse_prefetch("8,447,-1,0")};
    for (file_type ft : {file_type::q8_0, file_type::q4_0, file_type::q4_k_m}) {
        try {
            std::vector<std::vector<float>> out[3];
            for (int k = 0; k < 3; k++) {
                apply(settings[k]);
                auto d = cuda::decoder::random(preset.config, ft, 512, 11);
                const int nv = int(d->config().n_vocab);
                for (int i = 0; i < 12; i++) {
                    const auto l = d->forward(int32_t((7919 * i + 3) % nv));
                    out[k].emplace_back(l.begin(), l.end());
                }
            }
            apply(parse_prefetch("-1"));
            for (int k = 1; k < 3; k++) {
                int differ = 0;
                for (size_t i = 0; i < out[0].size(); i++)
                    if (std::memcmp(out[0][i].data(), out[k][i].data(), out[0][i].size() * sizeof(float)) != 0)
                        differ++;
                report(differ == 0, fmt::format("prefetch bits llama3-8b {:<5} 12 steps, staging off vs {}: {} steps "
                                                "differ (bit-equal expected)",
                                                file_type_name(ft), settings[k].name, differ));
            }
        } catch (const std::exception& e) {
            apply(parse_prefetch("-1"));
            report(false, fmt::format("prefetch bits {}: {}", file_type_name(ft), e.what()));
        }
    }
}

void check_formats(const std::string& dir) {
    struct item {
        const char* preset;
        file_type type;
        double tol;
    };
    const item items[] = {
        {"tiny", file_type::all_f32, 1e-5},       {"tiny", file_type::f16, 1e-5},
        {"tiny", file_type::bf16, 1e-5},          {"tiny", file_type::q8_0, 1e-3},
        {"tiny", file_type::q4_0, 1e-3},          {"tiny", file_type::q4_k_m, 1e-3},
        {"tiny", file_type::q5_k_m, 1e-3},        {"tiny", file_type::q6_k, 1e-3},
        {"tiny-qwen2", file_type::q8_0, 1e-3},    {"tiny-phi3", file_type::f16, 1e-5},
        {"tiny-llama3", file_type::q4_k_m, 1e-3},
    };
    for (const auto& it : items) {
        try {
            const std::string path = test::make_synthetic(dir, it.preset, it.type);
            const auto r = test::compare_logits(path, 16);
            report(r.worst_nmse <= it.tol,
                   fmt::format("logits {:<12} {:<7} worst NMSE over {} steps {:.3e} (tol {:.0e})", it.preset,
                               file_type_name(it.type), r.steps, r.worst_nmse, it.tol));
            const std::string name = fmt::format("{} {}", it.preset, file_type_name(it.type));
            check_fusion_bits(name, path);
            check_prefill_batch(name, path, it.tol, true);
            if (it.type == file_type::f16 || it.type == file_type::q4_k_m) {
                cuda::prefill_options o;
                o.reference_attention = true;
                cuda::set_prefill_options(o);
                check_prefill_batch(name + " ref-attn", path, it.tol, false);
                o = {};
                o.dequant_chunk_bytes = 1;  // slices of 128 rows: covers the slice loop
                cuda::set_prefill_options(o);
                check_prefill_batch(name + " 128-row", path, it.tol, false);
                o = {};
                o.reference_batch_products = true;
                cuda::set_prefill_options(o);
                try {
                    {
                        auto d = cuda::decoder::load(gguf_file::open(path), 64);
                        const auto [e, where] = d->make_batch(4, 64)->check_products(4);
                        report(e <= 1e-5,
                               fmt::format("products {:<22} model weights, tensor cores vs dp4a/FMA: worst NMSE {:.3e} "
                                           "({})",
                                           name, e, where));
                    }
                    const auto b = test::compare_batch(path, 4, 6);
                    report(b.worst_nmse <= it.tol && b.token_mismatches == 0,
                           fmt::format("batch   {:<22} dp4a/FMA products: NMSE {:.3e}, {} argmax mismatches", name,
                                       b.worst_nmse, b.token_mismatches));
                } catch (const std::exception& e) {
                    report(false, fmt::format("batch reference {}: {}", name, e.what()));
                }
                cuda::set_prefill_options({});
            }
        } catch (const std::exception& e) {
            report(false, fmt::format("logits {} {}: {}", it.preset, file_type_name(it.type), e.what()));
        }
    }
}

void check_matvec() {
    const dtype types[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
    struct shape {
        int64_t n_in, n_out;
    };
    const shape shapes[] = {{256, 512}, {768, 77}, {4096, 130}, {14336, 33}};
    for (dtype t : types) {
        const double tol = t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 ? 1e-10 : 1e-9;
        double worst = 0;
        std::string each;
        for (const auto& sh : shapes) {
            double e = INFINITY;
            try {
                e = test::compare_matvec(t, sh.n_in, sh.n_out, uint64_t(sh.n_in + sh.n_out));
            } catch (const std::exception& ex) {
                fmt::print("  matvec {}: {}\n", dtype_name(t), ex.what());
            }
            worst = std::max(worst, e);
            each += fmt::format(" {}x{} {:.1e}", sh.n_out, sh.n_in, e);
        }
        report(worst <= tol, fmt::format("matvec {:<5} vs CPU matmul, NMSE:{} (tol {:.0e})", dtype_name(t), each, tol));
        try {
            const double e = test::compare_embedding(t, 768, 40, 5);
            report(e <= 1e-6,
                   fmt::format("embedding {:<5} vs CPU dequantize_row, worst relative error {:.1e}", dtype_name(t), e));
        } catch (const std::exception& ex) {
            report(false, fmt::format("embedding {}: {}", dtype_name(t), ex.what()));
        }
    }
}

// The Q4_K_M products of matvec-qkm.h (pair launch and its variants, the alternative Q4_K kernels) against the CPU
// matmul and bit-equal to the plain launches; odd row counts cover the clamped last rows.
void check_qkm_products() {
    struct item {
        int64_t n_in, n_out_a, n_out_b;
        unsigned bits;
    };
    const item items[] = {{4096, 640, 128, cuda::k_qkm_pair},
                          {4096, 640, 128, cuda::k_qkm_pair | cuda::k_qkm_pair_v_last},
                          {4096, 642, 130, cuda::k_qkm_pair | cuda::k_qkm_pair_v2},
                          {4096, 640, 130, cuda::k_qkm_pair | cuda::k_qkm_pair_nocap},
                          {4096, 646, 129, cuda::k_qkm_pair | cuda::k_qkm_pair_v2 | cuda::k_qkm_pair_qk4},
                          {256, 77, 33, cuda::k_qkm_pair | cuda::k_qkm_pair_v_last | cuda::k_qkm_pair_v2},
                          {256, 8200, 0, cuda::k_qkm_gate_up_4x2},
                          {768, 77, 0, cuda::k_qkm_small_4x2},
                          {4096, 130, 33, cuda::k_qkm_small_4x2},
                          {14336, 130, 0, cuda::k_qkm_down_u4},
                          {4096, 77, 33, cuda::k_qkm_all_1x2},
                          {14336, 33, 0, cuda::k_qkm_all_1x2},
                          {14336, 31, 65, cuda::k_qkm_q6_down_64},
                          {4096, 8194, 0, cuda::k_qkm_gate_up_loop},
                          {14336, 35, 0, cuda::k_qkm_down_4x2},
                          {14336, 29, 67, cuda::k_qkm_q6_down_3},
                          {256, 8201, 0, cuda::k_qkm_gate_up_3x2},
                          {1024, 20001, 0, cuda::k_qkm_gate_up_loop},
                          {14336, 33, 0, cuda::k_qkm_down_u4}};
    for (const auto& it : items) {
        try {
            const auto r =
                test::compare_qkm_products(it.n_in, it.n_out_a, it.n_out_b, it.bits, uint64_t(it.n_in + it.bits));
            report(r.nmse <= 1e-9 && r.bit_equal,
                   fmt::format("qkm products bits {:#8x} Q4_K {}x{} + Q6_K {}x{} vs CPU matmul NMSE {:.1e} (tol 1e-9), "
                               "bit-equal to the plain launches: {}",
                               it.bits, it.n_out_a, it.n_in, it.n_out_b, it.n_in, r.nmse, r.bit_equal ? "yes" : "NO"));
        } catch (const std::exception& e) {
            report(false, fmt::format("qkm products bits {:#x}: {}", it.bits, e.what()));
        }
    }
}

void check_attention() {
    struct item {
        int n_pos, n_head, n_head_kv, head_dim;
        float amp;
        bool neox;
        int n_split;
    };
    const item items[] = {{2, 4, 2, 64, 1, false, 1},     {2, 4, 2, 64, 4, false, 1}, {2, 6, 2, 64, 4, false, 1},
                          {9, 6, 2, 64, 4, false, 1},     {9, 6, 2, 64, 4, true, 3},  {40, 32, 8, 128, 2, false, 4},
                          {130, 32, 8, 128, 4, false, 4}, {3, 4, 1, 64, 8, false, 2}, {70, 8, 2, 256, 2, true, 4}};
    for (const auto& it : items) {
        try {
            const auto r = test::compare_attention_variants(it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp,
                                                            it.neox, it.n_split, uint64_t(it.n_pos * 7 + it.n_head));
            // The merge in a thread-block cluster (variants 4, 5) against the separate kernels, also quantizing the
            // output as for a Wo reading groups of 32 / units of 256 (the last-block merge, variant 3, as well).
            int differ_q = 0;
            for (int qb : {32, 256}) {
                const auto rq =
                    test::compare_attention_variants(it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp, it.neox,
                                                     it.n_split, uint64_t(it.n_pos * 7 + it.n_head), qb);
                differ_q += rq.differ_from_0;
            }
            report(r.differ_from_0 == 0 && differ_q == 0 && std::max(r.nmse[4], r.nmse[5]) <= 1e-10,
                   fmt::format("attention cluster merge {} positions, {}/{} heads of {}, {} splits: {} of 5 folded "
                               "variants differ unquantized, {} quantized (32 / 256; bit-equal expected), NMSE {:.1e}",
                               it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.n_split, r.differ_from_0, differ_q,
                               std::max(r.nmse[4], r.nmse[5])));
            const double e = r.nmse[0];
            report(e <= 1e-10, fmt::format("attention {} positions, {}/{} heads of {}, amplitude {}, {}, {} splits: "
                                           "NMSE {:.1e}",
                                           it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp,
                                           it.neox ? "neox" : "normal", it.n_split, e));
            // RoPE + KV write folded into the attention kernel (launch_attention_rope): same bits as the two kernels.
            const double worst = std::max({r.nmse[1], r.nmse[2], r.nmse[3]});
            report(r.differ_from_0 == 0 && worst <= 1e-10,
                   fmt::format("attention folded RoPE {} positions, {}/{} heads of {}, {} splits: {} of 3 variants "
                               "differ from the separate kernels (bit-equal expected), worst NMSE {:.1e}",
                               it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.n_split, r.differ_from_0, worst));
        } catch (const std::exception& ex) {
            report(false, fmt::format("attention check: {}", ex.what()));
        }
    }
}

// Where the tiny Q8_0 logits differ from the CPU engine: repeat the comparison, and with each CPU path.
void diagnose_q8_0(const std::string& dir) {
    const std::string path = test::make_synthetic(dir, "tiny", file_type::q8_0);
    for (const char* isa : {"auto", "auto", "avx2", "scalar"}) {
        try {
            cpu::force_isa(isa);
            const auto r = test::compare_logits(path, 16);
            fmt::print("  diag tiny Q8_0, CPU path {} ({}): worst NMSE {:.3e}\n", isa, cpu::matmul_path(dtype::q8_0),
                       r.worst_nmse);
        } catch (const std::exception& e) {
            fmt::print("  diag tiny Q8_0, CPU path {}: {}\n", isa, e.what());
        }
    }
    cpu::force_isa("auto");
}

// Which engine is not deterministic: the logits of two runs of each engine on the same tokens.
void diagnose_determinism(const std::string& dir) {
    for (file_type ft : {file_type::q8_0, file_type::q5_k_m, file_type::q4_k_m, file_type::f16}) {
        const std::string path = test::make_synthetic(dir, "tiny", ft);
        auto m = transformer::load(path);
        const uint32_t V = m->config().n_vocab;
        double cc = 0, gg = 0, cg = 0;
        for (int rep = 0; rep < 3; rep++) {
            thread_pool pool(std::min(thread_pool::default_threads(), 16));
            forward_context c1(*m, 17, dtype::f16, pool), c2(*m, 17, dtype::f16, pool);
            auto g1 = cuda::decoder::load(gguf_file::open(path), 17),
                 g2 = cuda::decoder::load(gguf_file::open(path), 17);
            for (int i = 0; i < 16; i++) {
                const int32_t t = int32_t((7 + 37 * uint32_t(i)) % V);
                const auto a = c1.forward(std::span<const int32_t>(&t, 1));
                const std::vector<float> ca(a.begin(), a.end());
                const auto b = c2.forward(std::span<const int32_t>(&t, 1));
                const std::vector<float> cb(b.begin(), b.end());
                const auto x = g1->forward(t);
                const std::vector<float> ga(x.begin(), x.end());
                const auto y = g2->forward(t);
                cc = std::max(cc, test::nmse(cb, ca));
                gg = std::max(gg, test::nmse(y, ga));
                cg = std::max(cg, test::nmse(ga, ca));
            }
        }
        fmt::print("  diag tiny {:<7} 3x16 steps: CPU vs CPU {:.1e}, GPU vs GPU {:.1e}, GPU vs CPU {:.1e}\n",
                   file_type_name(ft), cc, gg, cg);
        std::fflush(stdout);
    }
}

// Every matrix of a model file through the GPU matvec and the CPU matmul (random activations), and the
// logits NMSE of the first steps.
void diagnose_model(const std::string& path) {
    auto g = gguf_file::open(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    std::string worst_line;
    double worst = 0;
    for (const auto& t : g->tensors()) {
        const dtype ok[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16};
        if (t.dims.size() < 2 || std::find(std::begin(ok), std::end(ok), t.type) == std::end(ok)) continue;
        const auto n_in = int64_t(t.dims[0]), n_out = int64_t(t.n_rows());
        std::vector<float> x(static_cast<size_t>(n_in));
        uint64_t z = 99;
        for (auto& v : x) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            v = float(int64_t(z >> 40) % 2001 - 1000) / 400.0f;
        }
        cpu::weight_view view{t.type, t.data, n_in, n_out, row_bytes(t.type, uint64_t(n_in))};
        auto pw = cpu::prepare_weight(view);
        std::vector<float> cy(static_cast<size_t>(n_out));
        cpu::matmul(*pw, x.data(), 1, cy.data(), pool);
        const auto gy = cuda::matvec_gguf_rows(t.type, t.data, n_in, n_out, x.data());
        const double e = test::nmse(gy, cy);
        if (e > 1e-10)
            fmt::print("  diag {}: {} {} {}x{} NMSE {:.1e}\n", path, t.name, dtype_name(t.type), n_out, n_in, e);
        if (e >= worst) {
            worst = e;
            worst_line = t.name;
        }
    }
    fmt::print("  diag {}: worst matvec NMSE {:.1e} ({})\n", path, worst, worst_line);
    auto m = transformer::load(path);
    forward_context ctx(*m, 8, dtype::f16, pool), ctx32(*m, 8, dtype::f32, pool);
    auto d = cuda::decoder::load(g, 8);
    test::reference_model ref(*g);
    std::string steps, steps32, ref_gpu, ref_cpu;
    std::vector<float> gpu1, cpu1;
    for (int i = 0; i < 6; i++) {
        const int32_t tok = int32_t((7 + 37 * uint32_t(i)) % m->config().n_vocab);
        const auto cl = ctx.forward(std::span<const int32_t>(&tok, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto c32 = ctx32.forward(std::span<const int32_t>(&tok, 1));
        const std::vector<float> cpu32(c32.begin(), c32.end());
        const auto gl = d->forward(tok);
        const std::vector<float> gpu(gl.begin(), gl.end());
        const std::vector<float> r = ref.step(tok);
        if (i == 1) {
            gpu1 = gpu;
            cpu1 = cpu;
        }
        steps += fmt::format(" {:.1e}", test::nmse(gpu, cpu));
        steps32 += fmt::format(" {:.1e}", test::nmse(cpu32, cpu));
        ref_gpu += fmt::format(" {:.1e}", test::nmse(gpu, r));
        ref_cpu += fmt::format(" {:.1e}", test::nmse(cpu, r));
    }
    fmt::print(
        "  diag {}: logits NMSE per step GPU vs CPU{}; CPU f32 KV vs CPU{}; GPU vs f32 reference{}; CPU vs "
        "reference{}\n",
        path, steps, steps32, ref_gpu, ref_cpu);
    // The second step's logits once more by the CPU's batch path (both tokens as one prompt).
    forward_context cb(*m, 8, dtype::f16, pool);
    const int32_t two[2] = {int32_t(7 % m->config().n_vocab), int32_t(44 % m->config().n_vocab)};
    const auto bl = cb.forward(std::span<const int32_t>(two, 2));
    const std::vector<float> batch(bl.begin(), bl.end());
    fmt::print("  diag {}: step 1 vs the CPU batch path: GPU {:.1e}, CPU decode {:.1e}\n", path,
               test::nmse(gpu1, batch), test::nmse(cpu1, batch));
}

// At the first step where greedy tokens differ: the CPU's two best logits and the GPU's values for them.
void diagnose_greedy(const std::string& path, int n) {
    auto m = transformer::load(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    forward_context ctx(*m, uint32_t(n + 1), dtype::f16, pool);
    auto d = cuda::decoder::load(gguf_file::open(path), uint32_t(n + 1));
    int32_t t = 1;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const auto cl = ctx.forward(std::span<const int32_t>(&t, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto gl = d->forward(t);
        const std::vector<float> gpu(gl.begin(), gl.end());
        worst = std::max(worst, test::nmse(gpu, cpu));
        const auto c1 = int32_t(std::max_element(cpu.begin(), cpu.end()) - cpu.begin());
        const auto g1 = int32_t(std::max_element(gpu.begin(), gpu.end()) - gpu.begin());
        if (c1 != g1) {
            fmt::print(
                "  diag greedy: step {} CPU picks {} ({:.7g} vs {} {:.7g}), GPU has {:.7g} and {:.7g}; worst NMSE "
                "so far {:.1e}\n",
                i, c1, cpu[size_t(c1)], g1, cpu[size_t(g1)], gpu[size_t(c1)], gpu[size_t(g1)], worst);
            return;
        }
        t = c1;
    }
    fmt::print("  diag greedy: {} steps equal, worst NMSE {:.1e}\n", n, worst);
}

void check_greedy(const std::string& name, const std::string& path, int n) {
    try {
        const auto r = test::compare_greedy(path, 1, n);
        std::string head;
        for (size_t i = 0; i < std::min<size_t>(12, r.gpu.size()); i++) head += fmt::format("{} ", r.gpu[i]);
        report(r.first_mismatch < 0,
               fmt::format("greedy {}: {} tokens, first mismatch {} (gpu: {}...)", name, n, r.first_mismatch, head));
    } catch (const std::exception& e) {
        report(false, fmt::format("greedy {}: {}", name, e.what()));
    }
}

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

// Q6_K A/B (session 5, branch gq6): the Q6_K and Q4_K matvecs alone on the Q4_K_M llama3-8b shapes, with sweep the
// Q6_K block shapes, then tg128 of Q4_K_M (Q8_0 and F16 as controls) and Q4_K_M's batched step at B=8. Only public
// entry points, so the same driver builds against another tree for a same-run comparison.
void bench_q6(const cuda::bandwidth_probe& bw, bool sweep) {
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
        for (const auto& m : mats) {
            std::string line = fmt::format("  q6_k shapes {:>6}x{:<6}", m.n_out, m.n_in);
            for (const auto& sh : shapes)
                line += fmt::format("  {}x{} {:5.0f}", sh[0], sh[1],
                                    cuda::bench_matvec(dtype::q6_k, m.n_in, m.n_out, 20, sh[0], sh[1]));
            fmt::print("{}\n", line);
            std::fflush(stdout);
        }
    }
    const auto& preset = find_preset("llama3-8b");
    for (file_type ft : {file_type::q4_k_m, file_type::q8_0, file_type::f16}) {
        try {
            auto d = cuda::decoder::random(preset.config, ft, 512, 11);
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

// "a;b;c" -> {"a", "b", "c"}: the benches' lists of masks or levels (semicolons, as the shell passes them quoted).
std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> v;
    for (size_t a = 0; a < s.size();) {
        const size_t b = std::min(s.find(';', a), s.size());
        v.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return v;
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
            const char* names[] = {"default",        "register-staged",
                                   "other stages",   "alt arithmetic",
                                   "separate Q/K/V", "Q4_K 4 stages (rows >= 8192)",
                                   "Q4_K 4 stages",  "Q4_K 3 stages (rows >= 8192)"};
            const std::vector<int> qkm_list = {0, 4, 5, 6, 7, 0, 4, 5, 6, 7}, other_list = {0, 1, 2, 3, 0};
            for (int variant : ft == file_type::q4_k_m ? qkm_list : other_list) {
                if (variant > 0 && !piped) continue;
                cuda::prefill_options o;
                o.mma_previous = variant == 1;
                o.mma_pipe_variant = variant == 2 || variant == 3 ? variant - 1 : 0;
                cuda::set_mma_pair(variant != 4);
                cuda::set_mma_q4k_stages(variant >= 5 ? variant - 4 : 0);
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
            const double single2 = 128 / d->bench_decode(128, 16, 1);
            fmt::print("          single-sequence graph again {:.1f} tok/s\n", single2);
        } catch (const std::exception& e) {
            report(false, fmt::format("bench batch {}: {}", file_type_name(ft), e.what()));
        }
    }
    cuda::set_prefill_options({});
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

// The GPU sampler against memtile::sampler: on given logits over the parameter sets, then through the decoder
// (append + sample vs forward + the host sampler) on real models.
void check_sampling(const std::vector<std::pair<std::string, std::string>>& models) {
    for (const auto& [n_vocab, draws] : {std::pair<int, int>{1000, 20}, {32000, 10}, {128256, 4}}) {
        try {
            const auto c = test::compare_gpu_sampler(n_vocab, draws, uint64_t(n_vocab));
            report(c.unexplained == 0 && c.near_boundary * 100 <= c.draws,
                   fmt::format("sampler vocabulary {:>6}: {} draws ({} parameter sets), {} equal to the host sampler, "
                               "{} differ near a boundary, {} otherwise {}",
                               n_vocab, c.draws, test::sampler_param_sets().size(), c.equal, c.near_boundary,
                               c.unexplained, c.first_unexplained));
        } catch (const std::exception& e) {
            report(false, fmt::format("sampler vocabulary {}: {}", n_vocab, e.what()));
        }
    }
    // Batched draws (memtile serve's steps): every parameter set as a row of a multi-row call.
    for (const auto& [n_vocab, rows, draws] :
         {std::tuple<int, int, int>{1000, 4, 20}, {32000, 8, 10}, {128256, 4, 4}, {128256, 16, 2}}) {
        for (bool with_argmax : {true, false}) {
            try {
                const auto c = test::compare_gpu_sampler_rows(n_vocab, rows, draws, uint64_t(n_vocab) + uint64_t(rows),
                                                              with_argmax);
                report(c.unexplained == 0 && c.near_boundary * 100 <= c.draws &&
                           c.draws == int(test::sampler_param_sets().size()) * draws,
                       fmt::format("batched sampler vocabulary {:>6}, {:>2} rows per call{}: {} draws, {} equal to the "
                                   "host sampler, {} differ near a boundary, {} otherwise {}",
                                   n_vocab, rows, with_argmax ? " (+argmax)" : "", c.draws, c.equal, c.near_boundary,
                                   c.unexplained, c.first_unexplained));
            } catch (const std::exception& e) {
                report(false, fmt::format("batched sampler vocabulary {}: {}", n_vocab, e.what()));
            }
        }
    }
    const auto sets = test::decoder_sampling_sets();
    // The batched decoder: step_sample vs step + the host sampler, 6 sequences with the four sets.
    for (const auto& [name, path] : models) {
        try {
            const auto r = test::compare_batch_sampling(path, 6, 48, test::decoder_sampling_params());
            report(r.differ == r.near && r.tokens > 6 * 40,
                   fmt::format("batch decoder sampling {}: 6 sequences x 48 steps, {} tokens equal, {} sequences "
                               "differ ({} near a boundary) {}",
                               name, r.tokens, r.differ, r.near, r.first));
        } catch (const std::exception& e) {
            report(false, fmt::format("batch decoder sampling {}: {}", name, e.what()));
        }
    }
    for (const auto& [name, path] : models)
        for (const auto& [set, p0] : sets)
            for (uint64_t seed : {1, 2, 3}) {
                try {
                    sampling_params p = p0;
                    p.seed = seed;
                    const auto r = test::compare_decoder_sampling(path, p, 64);
                    report(r.first_mismatch < 0 || r.near_boundary,
                           fmt::format("decoder sampling {} {} seed {}: {} tokens equal{}", name, set, seed, r.tokens,
                                       r.first_mismatch < 0 ? ""
                                       : r.near_boundary
                                           ? fmt::format(", then a difference near a boundary at {}", r.first_mismatch)
                                           : fmt::format(", then a DIFFERENCE at {}", r.first_mismatch)));
                } catch (const std::exception& e) {
                    report(false, fmt::format("decoder sampling {} {}: {}", name, set, e.what()));
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

}  // namespace

int main(int argc, char** argv) {
    std::string stories, kjv, tmp = "/tmp/memtile-cuda-check";
    bool do_bench = true, do_checks = true, do_old_bench = true, sweep = false, diag = false, profile = false;
    bool batch_bench = false, profile_batch = false;
    bool sampling_only = false, fusion_bench = false, q6_bench = false;
    std::string only, early_levels, fusion_masks, prefetch_list;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--stories" && i + 1 < argc)
            stories = argv[++i];
        else if (a == "--kjv" && i + 1 < argc)
            kjv = argv[++i];
        else if (a == "--tmp" && i + 1 < argc)
            tmp = argv[++i];
        else if (a == "--no-bench")
            do_bench = false;
        else if (a == "--bench-only")
            do_checks = false;
        else if (a == "--no-decode-bench")
            do_old_bench = false;
        else if (a == "--only" && i + 1 < argc)
            only = argv[++i];
        else if (a == "--sweep")
            sweep = true;
        else if (a == "--diag")
            diag = true;
        else if (a == "--profile")
            profile = true;
        else if (a == "--batch-bench")
            batch_bench = true;
        else if (a == "--profile-batch")
            profile_batch = true;
        else if (a == "--sampling")
            sampling_only = true;
        else if (a == "--fusion-bench")
            fusion_bench = true;
        else if (a == "--fusion-masks" && i + 1 < argc) {
            fusion_bench = true;
            fusion_masks = argv[++i];
        } else if (a == "--q6-bench")
            q6_bench = true;
        else if (a == "--early-bench" && i + 1 < argc)
            early_levels = argv[++i];
        else if (a == "--prefetch-bench" && i + 1 < argc)
            prefetch_list = argv[++i];
    }
    fmt::print("device: {}\n", cuda::device_description());
    if (cuda::device_count() == 0) {
        fmt::print("SKIPPED: no CUDA device\n");
        return 0;
    }
    if (profile) {
        // One decode step of llama3-8b shapes (Q4_K_M; kernels in order), then a few matvecs for ncu: each
        // bench_matvec(..., 1) launches its kernel 4 times.
        {
            auto d = cuda::decoder::random(find_preset("llama3-8b").config, file_type::q4_k_m, 64, 11);
            d->bench_decode(2, 0, 1);
        }
        cuda::bench_matvec(dtype::q4_k, 4096, 14336, 1);
        cuda::bench_matvec(dtype::q4_k, 14336, 4096, 1);
        cuda::bench_matvec(dtype::q8_0, 4096, 14336, 1);
        cuda::bench_matvec(dtype::f16, 4096, 14336, 1);
        return 0;
    }
    if (profile_batch) {
        // Two batched steps of 8 sequences, llama3-8b shapes, Q4_K_M, Q4_0, Q8_0 (for ncu / nsys: the mma kernels).
        for (file_type ft : {file_type::q4_k_m, file_type::q4_0, file_type::q8_0}) {
            if (!only.empty() && only != file_type_name(ft)) continue;
            auto d = cuda::decoder::random(find_preset("llama3-8b").config, ft, 64, 11);
            d->make_batch(8, 64)->bench(8, 2, 0, 1);
        }
        return 0;
    }
    if (sampling_only) {
        try {
            std::filesystem::create_directories(tmp);
            std::vector<std::pair<std::string, std::string>> models;
            models.emplace_back("tiny-llama3", test::make_synthetic(tmp, "tiny-llama3", file_type::q4_k_m));
            if (!stories.empty()) {
                models.emplace_back("stories260K", tmp + "/stories260K.gguf");
                import_llama2c(stories, models.back().second);
            }
            if (!kjv.empty()) models.emplace_back("memtile-kjv-q8_0", kjv);
            check_sampling(models);
            if (do_bench) bench_batch_sampling();
            if (do_bench && do_old_bench) bench_sampling();
        } catch (const std::exception& e) {
            report(false, e.what());
        }
        fmt::print("\n{} failure(s)\n", failures);
        return failures == 0 ? 0 : 1;
    }
    try {
        std::filesystem::create_directories(tmp);
        const auto bw = cuda::probe_bandwidth();
        fmt::print("probe: HBM read {:.0f} GB/s, L2 read {:.0f} GB/s\n", bw.hbm_read_gbs, bw.l2_read_gbs);
        if (do_checks) {
            check_batch_products();
            check_matvec();
            check_qkm_products();
            check_attention();
            if (diag) {
                diagnose_q8_0(tmp);
                diagnose_determinism(tmp);
            }
            check_formats(tmp);
            check_prefetch_bits();
            if (!stories.empty()) {
                const std::string g = tmp + "/stories260K.gguf";
                import_llama2c(stories, g);
                check_greedy("stories260K", g, 200);
                check_fusion_bits("stories260K", g);
                check_prefill_batch("stories260K", g, 1e-3, true, 100, 100);
            }
            if (!kjv.empty()) {
                check_greedy("memtile-kjv-q8_0", kjv, 200);
                check_fusion_bits("memtile-kjv-q8_0", kjv);
                check_prefill_batch("memtile-kjv-q8_0", kjv, 1e-3, true, 300, 212);
                try {
                    const int differ = test::compare_batch_groupings(kjv, 8, 24);
                    report(differ == 0, fmt::format("batch invariance memtile-kjv-q8_0: 8 sequences x 24 steps, one "
                                                    "step of 8 vs two of 4: {} logit rows differ",
                                                    differ));
                    const auto one = test::compare_batch(kjv, 1, 12);
                    report(one.worst_nmse == 0 && one.token_mismatches == 0,
                           fmt::format("batch of one memtile-kjv-q8_0: 12 steps vs single-sequence decode: NMSE "
                                       "{:.3e} (bit-equal expected)",
                                       one.worst_nmse));
                } catch (const std::exception& e) {
                    report(false, fmt::format("batch invariance kjv: {}", e.what()));
                }
                try {
                    const auto b = test::compare_batch_greedy(kjv, 8, 48);
                    report(b.mismatches == 0,
                           fmt::format("batch greedy memtile-kjv-q8_0: 8 sequences x 48 tokens, {} differ from "
                                       "single-sequence decode (first at step {})",
                                       b.mismatches, b.first_mismatch_step));
                } catch (const std::exception& e) {
                    report(false, fmt::format("batch greedy kjv: {}", e.what()));
                }
            }
            if (!kjv.empty() && diag) {
                diagnose_greedy(kjv, 200);
                diagnose_model(kjv);
                diagnose_model(test::make_synthetic(tmp, "tiny", file_type::q5_k_m));
            }
        }
        if (!prefetch_list.empty()) {
            bench_prefetch(bw, prefetch_list, only);
        } else if (!early_levels.empty()) {
            bench_early(bw, early_levels, only);
        } else if (q6_bench) {
            bench_q6(bw, sweep);
        } else if (fusion_bench) {
            bench_fusion(bw, only, fusion_masks);
        } else if (batch_bench) {
            bench_batch_decode(only);
        } else {
            if (do_bench && do_old_bench) bench(bw, sweep);
            if (do_bench) bench_prefill_batch(only);
        }
    } catch (const std::exception& e) {
        report(false, e.what());
    }
    fmt::print("\n{} failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
