// Device-machine driver of the CUDA backend: correctness against the CPU engine (logits per weight format,
// greedy tokens of stories260K and the default model) and batch-1 decode benchmarks of llama3-8b shapes
// against the HBM read bandwidth probed in the same run. Built by MEMTILE_DEVICE_BUILD=ON (no GoogleTest,
// CLI or server needed). Usage: memtile-cuda-check [--stories FILE.bin] [--kjv FILE.gguf] [--tmp DIR]
//                               [--no-bench] [--bench-only] [--no-decode-bench] [--only FILE_TYPE]
//                               [--sweep] [--diag] [--profile] [--profile-ctx N] (--profile's decoder context, 64;
//                               the attention splits follow it) [--sampling] [--fusion-bench] [--q6-bench]
//                               [--fusion-masks "MASK;MASK;..."] [--early-bench "LEVEL;LEVEL;..."]
//                               [--prefetch-bench "TASKS,MASK[,CARVEOUT[,LEVEL]];..."] [--norm-bench "0;1"]
//                               [--batch-step "MASK;MASK;..."] (batch-step.h knock-outs; bits 24-31: Q6_K modes)
//                               [--q6k-bench "MODE[,PARAM];..."] (set_q6k_variant; --only TYPE) [--q6k-check]
//                               [--attention-check] (the decode attention checks alone) [--greedy-only] (the
//                               greedy tokens of --stories / --kjv against the CPU engine alone) [--q6-ctx N]
//                               (--q6-bench's decoder context, 512; the attention splits follow it)
//                               [--q4k-modes "MODE;MODE;..."] (set_q4k_matvec: its checks, matvecs alone, tg128)
//                               [--depth-bench "0,4096,..."] (tg128 after that many positions; --only TYPE;
//                               --attn-groups "0,1,0/0": heads-per-block settings alternated, default "0";
//                               "G/P": also the GQA key steps P, cuda::set_attention_pipe; "G/P/S": also S
//                               attention splits; "G/P/S/K": also at least K keys per split (0: none);
//                               --depth-preset NAME: another preset's shapes; --depth-batch B:
//                               also the batched step of B sequences at each depth)
//                               [--boundary-bench "MB;MB,MB,...;..."] (cold slices, or patterns of them, read as a
//                               chain of dependent steps in every way of chaining them; 0: a step without bytes)
//                               [--boundary-forms "F,F,..."] (only these forms of --boundary-bench, and form 0)
//                               [--formats PRESET] (the per-format checks of that synthetic preset alone, no bench)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/mma-pair.h"
#include "core/error.h"
#include "cuda/cuda-check-common.h"
#include "gguf/gguf-file.h"
#include "models/llama2c-import.h"
#include "models/presets.h"
#include "models/transformer.h"
#include "quant/quant.h"
#include "support/cuda-checks.h"
#include "support/sampling-checks.h"

using namespace memtile;
using namespace memtile::cuda_check;

namespace {

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
            // Q4_K also: the deeper rings (variants 5-7 = set_mma_q4k_stages modes 1-3); Q4_0 the long rows' 4 and 2
            // stages (8, 9; default 8), the shorter rows' 3 (11) and Q6_K 4 halves in flight (10): set_mma_batch_tune.
            const int n_variants = t == dtype::q4_0 ? 12 : t == dtype::q4_k ? 8 : t == dtype::q6_k ? 11 : piped ? 4 : 1;
            const char* names[] = {"",          " register-staged", " other stages",  " alt arithmetic",
                                   " shuffles", " 4 stages long",   " 4 stages",      " 3 stages long",
                                   " 4 long",   " 2 long",          " 4 halves/warp", " 3 short"};
            for (int v = 0; v < n_variants; v++) {
                if ((v == 4 && t != dtype::q4_0) || (v >= 5 && v <= 7 && t != dtype::q4_k)) continue;
                if ((v == 8 || v == 9) && t != dtype::q4_0) continue;
                if ((t == dtype::q6_k && v > 0 && v < 10) || (t == dtype::q4_0 && v == 10)) continue;
                cuda::set_mma_batch_tune(v == 8 ? 4 : v == 9 ? 2 : 8, v == 10 ? 1 : 0, v == 11 ? 3 : 2);
                cuda::prefill_options o;
                o.mma_previous = v == 1;
                o.mma_pipe_variant = v == 2 ? 1 : v == 3 ? 2 : 0;
                o.mma_q4_0_shuffles = v == 4;
                cuda::set_prefill_options(o);
                cuda::set_mma_q4k_stages(v >= 5 && v <= 7 ? v - 4 : 0);
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
            cuda::set_mma_batch_tune(8, 0);
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
    // Session 11 (gbq11): the Q4_K products with their activations staged in the ring (set_mma_q4k_xs), alone and as
    // the pair's Q/K blocks: bit-equal to the kernels without (widths of 1, 3, 16 and 56 super-blocks; whole and
    // partial row tiles; 2..8 sequences).
    try {
        const int64_t shapes[][2] = {{4096, 1040}, {14336, 72}, {256, 40}, {768, 520}, {4096, 6144}};
        int64_t differ = 0;
        double worst = 0;
        std::string where = "none";
        for (const auto& sh : shapes)
            for (int nb : {2, 5, 7, 8}) {
                const auto [n, e] = cuda::check_batch_q4k_xs(sh[0], sh[1], nb, 3, uint64_t(nb) * 11 + 7);
                differ += n;
                if (e >= worst) {
                    worst = e;
                    where = fmt::format("{}x{} B={}", sh[1], sh[0], nb);
                }
            }
        // The staged pair against its two launches, which are then the staged ones checked above.
        const int mode = cuda::mma_q4k_xs();
        cuda::set_mma_q4k_xs(3);
        const int64_t pair_shapes[][3] = {{4096, 5120, 1024}, {768, 520, 136}};
        int64_t pair_differ = 0;
        for (const auto& sh : pair_shapes)
            for (int nb : {2, 5, 8}) pair_differ += cuda::check_batch_pair(sh[0], sh[1], sh[2], nb, uint64_t(nb)).first;
        cuda::set_mma_q4k_xs(mode);
        report(differ == 0 && pair_differ == 0 && worst <= 1e-10,
               fmt::format("batch products Q4_K staged activations: {} outputs differ from the kernel without, pair "
                           "{} from its two launches, worst NMSE vs dp4a {:.3e} ({}), tol 1e-10",
                           differ, pair_differ, worst, where));
    } catch (const std::exception& e) {
        report(false, fmt::format("batch products Q4_K staged activations: {}", e.what()));
    }
    // The pipelined Q6_K kernel (session 8, gbq8) in each of its modes: modes 1-5 bit-equal to the register-staged
    // kernel, all against the dp4a kernel as above. Widths: 32 halves (the output and V), 112 (the down matrix: a last
    // group of 16 halves), 12 (one partial group), 64; row counts of whole and partial 16-row tiles.
    try {
        const int64_t shapes[][2] = {{4096, 1040}, {14336, 72}, {1536, 40}, {8192, 80}};
        int64_t differ = 0;
        double worst = 0;
        std::string where = "none";
        for (int mode = 1; mode <= 10; mode++)
            for (const auto& sh : shapes)
                for (int nb : {2, 5, 8}) {
                    const auto [n, e] = cuda::check_batch_q6k_pipe(sh[0], sh[1], nb, mode, uint64_t(nb) * 5 + 3);
                    if (mode <= 5) differ += n;
                    if (e >= worst) {
                        worst = e;
                        where = fmt::format("{}x{} B={} mode {}", sh[1], sh[0], nb, mode);
                    }
                }
        report(differ == 0 && worst <= 1e-10,
               fmt::format("batch products Q6_K pipelined (10 modes): {} outputs of modes 1-5 differ from the "
                           "register-staged kernel, worst NMSE vs dp4a {:.3e} ({}), tol 1e-10",
                           differ, worst, where));
    } catch (const std::exception& e) {
        report(false, fmt::format("batch products Q6_K pipelined: {}", e.what()));
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

// The decode steps' greedy pick against a host scan (test::argmax_mismatches: ties across slices, NaN, -inf).
void check_argmax() {
    try {
        const int bad = test::argmax_mismatches(21);
        report(bad == 0,
               fmt::format("argmax  sliced rows vs host scan (ties, NaN, -inf, 6 lengths): {} of 54 rows differ", bad));
    } catch (const std::exception& e) {
        report(false, fmt::format("argmax: {}", e.what()));
    }
}

// The Q4_K lane-pair products of cuda::set_q4k_matvec (matvec-q4k.cuh), bit-equal to the plain kernel: on GGUF rows
// against the CPU engine's matmul and the plain launches (one task per thread at n_in 4,096, the loop at 14,336 and
// 20,480, partial warps at 2,816 (44 tasks), 768, 256, odd and single rows); the pair launch's Q/K (4,096: 642 + 130,
// lean pair) against the plain launches; and a decode step of llama3-8b shapes (random Q4_K_M: every Q4_K product
// class) against mode 0, logits of 6 steps.
void check_q4k_modes() {
    const int mode0 = cuda::q4k_matvec();
    const int64_t shapes[][2] = {{4096, 642}, {4096, 77}, {14336, 131}, {2816, 77}, {256, 33}, {20480, 35}, {768, 1}};
    const int modes[] = {2, 2 | 8, 2 | 32, 2 | 64 | (2 << 8)};
    for (int mode : modes) {
        double worst = 0;
        int equal = 0, n = 0;
        try {
            for (const auto& sh : shapes) {
                const auto r = test::compare_q4k_mode(sh[0], sh[1], mode, uint64_t(sh[0] + sh[1] + mode));
                worst = std::max(worst, r.nmse);
                equal += r.bit_equal ? 1 : 0;
                n++;
            }
            report(worst <= 1e-9 && equal == n,
                   fmt::format("q4k matvec mode {}: {} shapes vs CPU matmul worst NMSE {:.1e} (tol 1e-9), bit-equal to "
                               "the plain kernel: {} of {}",
                               mode, n, worst, equal, n));
        } catch (const std::exception& e) {
            report(false, fmt::format("q4k matvec mode {}: {}", mode, e.what()));
        }
    }
    try {
        const int64_t n_in = 4096, na = 642, nb = 130;
        test::uniform_source next(77);
        std::vector<float> wa(static_cast<size_t>(n_in * na)), wb(static_cast<size_t>(n_in * nb)),
            x(static_cast<size_t>(n_in));
        for (auto& v : wa) v = next() * 0.05f;
        for (auto& v : wb) v = next() * 0.05f;
        for (auto& v : x) v = next();
        const auto ra = quantize_tensor(dtype::q4_k, wa.data(), na, n_in);
        const auto rb = quantize_tensor(dtype::q6_k, wb.data(), nb, n_in);
        const unsigned bits = cuda::k_qkm_pair | cuda::k_qkm_pair_v2 | cuda::k_qkm_lean_pair;
        cuda::set_q4k_matvec(0);
        const auto plain = cuda::qkm_products_gguf(ra.data(), na, rb.data(), nb, n_in, x.data(), 0);
        int equal = 0;
        for (int mode : {2 | 32}) {
            cuda::set_q4k_matvec(mode);
            const auto got = cuda::qkm_products_gguf(ra.data(), na, rb.data(), nb, n_in, x.data(), bits);
            equal += got.size() == plain.size() && std::memcmp(got.data(), plain.data(), got.size() * 4) == 0 ? 1 : 0;
        }
        cuda::set_q4k_matvec(mode0);
        report(equal == 1, fmt::format("q4k pair launch (Q4_K 642x4096 + Q6_K 130x4096, mode 34) bit-equal to "
                                       "the plain launches: {} of 1",
                                       equal));
    } catch (const std::exception& e) {
        cuda::set_q4k_matvec(mode0);
        report(false, fmt::format("q4k pair launch: {}", e.what()));
    }
    try {
        const auto& preset = find_preset("llama3-8b");
        std::vector<std::vector<float>> ref;
        int differ[3] = {}, k = 0;
        for (int mode : {0, 2, 2 | 32, 2 | 64 | (2 << 8)}) {
            cuda::set_q4k_matvec(mode);
            auto d = cuda::decoder::random(preset.config, file_type::q4_k_m, 64, 11);
            for (int i = 0; i < 6; i++) {
                const auto l = d->forward(int32_t(3 + 11 * i));
                if (mode == 0)
                    ref.emplace_back(l.begin(), l.end());
                else if (std::memcmp(l.data(), ref[size_t(i)].data(), ref[size_t(i)].size() * 4) != 0)
                    differ[k]++;
            }
            if (mode != 0) k++;
        }
        cuda::set_q4k_matvec(mode0);
        report(differ[0] == 0 && differ[1] == 0 && differ[2] == 0,
               fmt::format("q4k decode llama3-8b Q4_K_M (random), 6 steps, modes 2 / 34 / 578 vs 0: {} / {} / {} "
                           "steps differ (bit-equal expected)",
                           differ[0], differ[1], differ[2]));
    } catch (const std::exception& e) {
        cuda::set_q4k_matvec(mode0);
        report(false, fmt::format("q4k decode: {}", e.what()));
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
                          {14336, 33, 0, cuda::k_qkm_down_u4},
                          {4096, 8194, 1025, cuda::k_qkm_lean_q4k | cuda::k_qkm_lean_q6k},
                          {14336, 131, 67, cuda::k_qkm_lean_q4k | cuda::k_qkm_lean_q6k},
                          {20480, 33, 35, cuda::k_qkm_lean_q4k | cuda::k_qkm_lean_q6k},
                          {6144, 77, 33, cuda::k_qkm_lean_q4k | cuda::k_qkm_lean_q6k},
                          {256, 5, 3, cuda::k_qkm_lean_q4k | cuda::k_qkm_lean_q6k},
                          {4096, 642, 130, cuda::k_qkm_pair | cuda::k_qkm_pair_v2 | cuda::k_qkm_lean_pair},
                          {2816, 77, 33, cuda::k_qkm_pair | cuda::k_qkm_pair_v2 | cuda::k_qkm_lean_pair},
                          {256, 33, 17, cuda::k_qkm_pair | cuda::k_qkm_pair_v2 | cuda::k_qkm_lean_pair}};
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

// The Q6_K lean products at other register budgets (cuda::set_q6k_variant; the default: the down product at 64
// registers) against the CPU matmul and bit-equal to the plain launches: the default, every (R, MINB) offered for the 2
// x 4 (n_in 8,192 .. 16,384: 2 to 4 warps with tasks) and 2 x 1 products, the combined parameter, odd row counts (the
// clamped last rows); a pair not offered must be refused.
void check_q6k_variants() {
    struct item {
        int64_t n_in, n_out_b;
        int mode, param;
    };
    const int c = 40 + 256 * 42;  // down 2 x 4 at MINB 8, 2 x 1 at MINB 10
    const item items[] = {
        {14336, 131, 0, 0},  {12288, 67, 0, 0},   {16384, 66, 0, 0},   {8192, 35, 0, 0},    {14336, 77, 1, 0},
        {14336, 131, 2, 16}, {14336, 131, 2, 32}, {14336, 35, 2, 33},  {14336, 67, 2, 38},  {14336, 67, 2, 39},
        {14336, 131, 2, 40}, {14336, 131, 2, 41}, {14336, 35, 2, 42},  {14336, 131, 2, 48}, {14336, 131, 2, 53},
        {14336, 67, 2, 54},  {4096, 1025, 4, 16}, {4096, 1025, 4, 32}, {4096, 1001, 4, 33}, {4096, 99, 4, 40},
        {4096, 1025, 4, 41}, {4096, 1025, 4, 42}, {4096, 1027, 4, 48}, {4096, 1027, 4, 56}, {4096, 1025, 4, 64},
        {256, 33, 4, 32},    {2816, 77, 4, 33},   {4096, 1025, 6, c},  {14336, 131, 6, c},  {4096, 513, 0, 0}};
    const int mode0 = cuda::q6k_variant();
    for (const auto& it : items) {
        try {
            cuda::set_q6k_variant(it.mode, it.param);
            const auto r = test::compare_qkm_products(it.n_in, 5, it.n_out_b, cuda::k_qkm_lean_q6k,
                                                      uint64_t(it.n_in + it.n_out_b + it.mode));
            cuda::set_q6k_variant(mode0);
            report(r.nmse <= 1e-9 && r.bit_equal,
                   fmt::format("q6k variant mode {} param {} Q6_K {}x{} vs CPU matmul NMSE {:.1e} (tol 1e-9), "
                               "bit-equal to the plain launches: {}",
                               it.mode, it.param, it.n_out_b, it.n_in, r.nmse, r.bit_equal ? "yes" : "NO"));
        } catch (const std::exception& e) {
            cuda::set_q6k_variant(mode0);
            report(false, fmt::format("q6k variant mode {} param {}: {}", it.mode, it.param, e.what()));
        }
    }
    bool refused = false;
    try {
        cuda::set_q6k_variant(2, 16 * 5 + 3);
        test::compare_qkm_products(14336, 5, 33, cuda::k_qkm_lean_q6k, 1);
    } catch (const std::exception&) {
        refused = true;
    }
    cuda::set_q6k_variant(mode0);
    report(refused, "q6k variant: a pair of rows and budget that is not offered (5 rows, 3 blocks per SM) is refused");
}

void check_attention() {
    struct item {
        int n_pos, n_head, n_head_kv, head_dim;
        float amp;
        bool neox;
        int n_split;
        int split_keys = 0;  // rope_params::split_keys
    };
    const item items[] = {{2, 4, 2, 64, 1, false, 1},
                          {2, 4, 2, 64, 4, false, 1},
                          {2, 6, 2, 64, 4, false, 1},
                          {9, 6, 2, 64, 4, false, 1},
                          {9, 6, 2, 64, 4, true, 3},
                          {40, 32, 8, 128, 2, false, 4},
                          {130, 32, 8, 128, 4, false, 4},
                          {3, 4, 1, 64, 8, false, 2},
                          {70, 8, 2, 256, 2, true, 4},
                          {37, 28, 4, 128, 4, false, 3},
                          {21, 14, 2, 64, 2, true, 2},
                          {600, 32, 8, 128, 2, false, 32},
                          // whole tiles of keys (the GQA blocks' batched key steps), the new key in one or not
                          {128, 32, 8, 128, 2, false, 4},
                          {200, 16, 4, 64, 2, true, 2},
                          {96, 8, 2, 32, 4, false, 1},
                          {1100, 32, 8, 128, 2, false, 8},
                          {150, 8, 2, 96, 2, true, 2},
                          // many 64-key tiles per split: the tensor-core form's ring of 3 reuses its buffers
                          {1100, 32, 8, 128, 2, false, 2},
                          {300, 8, 2, 64, 2, true, 1},
                          // at least K keys per split: the first splits of a grid sized for more keys, the last one
                          // partly filled (the new key in it) or whole; the rest empty
                          {130, 32, 8, 128, 2, false, 32, 64},
                          {128, 32, 8, 128, 2, false, 32, 64},
                          {9, 6, 2, 64, 4, false, 4, 4},
                          {600, 32, 8, 128, 2, false, 32, 128},
                          {70, 8, 2, 256, 2, true, 8, 16},
                          {21, 14, 2, 64, 2, true, 4, 8},
                          {1100, 32, 8, 128, 2, false, 8, 64}};
    for (const auto& it : items) {
        const std::string splits =
            fmt::format("{} splits{}", it.n_split,
                        it.split_keys > 0 ? fmt::format(" of >= {} keys", it.split_keys) : std::string());
        try {
            const auto r =
                test::compare_attention_variants(it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp, it.neox,
                                                 it.n_split, uint64_t(it.n_pos * 7 + it.n_head), 0, it.split_keys);
            // The merge in a thread-block cluster (variants 4, 5) against the separate kernels, also quantizing the
            // output as for a Wo reading groups of 32 / units of 256 (the last-block merge, variant 3, as well).
            int differ_q = 0, differ_g = r.differ_grouped, grouped = r.grouped;
            int mma_differ = r.mma_differ, mma_unchanged = r.mma_unchanged;
            double mma_nmse = r.mma_nmse;
            for (int qb : {32, 256}) {
                const auto rq =
                    test::compare_attention_variants(it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp, it.neox,
                                                     it.n_split, uint64_t(it.n_pos * 7 + it.n_head), qb, it.split_keys);
                differ_q += rq.differ_from_0;
                differ_g += rq.differ_grouped;
                grouped += rq.grouped;
                mma_differ += rq.mma_differ;
                mma_unchanged += rq.mma_unchanged;
                mma_nmse = std::max(mma_nmse, rq.mma_nmse);
            }
            report(differ_g == 0,
                   fmt::format("attention GQA blocks {} positions, {}/{} heads of {}, {}: {} of {} "
                               "(variant, heads per block, key steps, q_block) differ from one head per block "
                               "(bit-equal expected)",
                               it.n_pos, it.n_head, it.n_head_kv, it.head_dim, splits, differ_g, grouped));
            // Unquantized and quantized (32 / 256) runs; at least one must differ from one head per block, or the
            // tensor-core form did not run.
            if (r.mma_runs > 0)
                report(mma_nmse <= 1e-4 && mma_differ == 0 && mma_unchanged < 3 * r.mma_runs,
                       fmt::format("attention GQA tensor-core key steps {} positions, {}/{} heads of {}, {}: "
                                   "worst NMSE {:.1e} against one head per block over {} runs (tol 1e-4), {} of them "
                                   "bit-equal to it; {} folded runs differ from the separate kernels' (bit-equal "
                                   "expected)",
                                   it.n_pos, it.n_head, it.n_head_kv, it.head_dim, splits, mma_nmse, 3 * r.mma_runs,
                                   mma_unchanged, mma_differ));
            report(r.differ_from_0 == 0 && differ_q == 0 && std::max(r.nmse[4], r.nmse[5]) <= 1e-10,
                   fmt::format("attention cluster merge {} positions, {}/{} heads of {}, {}: {} of 5 folded "
                               "variants differ unquantized, {} quantized (32 / 256; bit-equal expected), NMSE {:.1e}",
                               it.n_pos, it.n_head, it.n_head_kv, it.head_dim, splits, r.differ_from_0, differ_q,
                               std::max(r.nmse[4], r.nmse[5])));
            const double e = r.nmse[0];
            report(e <= 1e-10, fmt::format("attention {} positions, {}/{} heads of {}, amplitude {}, {}, {}: "
                                           "NMSE {:.1e}",
                                           it.n_pos, it.n_head, it.n_head_kv, it.head_dim, it.amp,
                                           it.neox ? "neox" : "normal", splits, e));
            // RoPE + KV write folded into the attention kernel (launch_attention_rope): same bits as the two kernels.
            const double worst = std::max({r.nmse[1], r.nmse[2], r.nmse[3]});
            report(r.differ_from_0 == 0 && worst <= 1e-10,
                   fmt::format("attention folded RoPE {} positions, {}/{} heads of {}, {}: {} of 3 variants "
                               "differ from the separate kernels (bit-equal expected), worst NMSE {:.1e}",
                               it.n_pos, it.n_head, it.n_head_kv, it.head_dim, splits, r.differ_from_0, worst));
        } catch (const std::exception& ex) {
            report(false, fmt::format("attention check: {}", ex.what()));
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

// A decoder context from the command line: a whole number of positions in 2..k_max_ctx, nothing after it.
constexpr unsigned long k_max_ctx = 1ul << 20;
bool parse_positions(const char* arg, uint32_t& out) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(arg, &end, 10);
    if (end == arg || *end || arg[0] == '-' || n < 2 || n > k_max_ctx) return false;
    out = uint32_t(n);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string stories, kjv, tmp = "/tmp/memtile-cuda-check";
    bool do_bench = true, do_checks = true, do_old_bench = true, sweep = false, diag = false, profile = false;
    bool batch_bench = false, profile_batch = false;
    uint32_t profile_ctx = 64;
    uint32_t q6_ctx = 512;
    bool sampling_only = false, fusion_bench = false, q6_bench = false, q6k_check = false, attn_check = false,
         greedy_only = false;
    std::string only, early_levels, fusion_masks, prefetch_list, batch_masks, norm_list, q6k_list, q4k_modes,
        boundary_list, boundary_forms;
    std::string depth_list, attn_groups = "0", depth_preset = "llama3-8b", formats_preset;
    int depth_batch = 0;
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
        else if (a == "--profile-ctx" && i + 1 < argc) {
            if (!parse_positions(argv[++i], profile_ctx)) {
                fmt::print(stderr, "--profile-ctx: expected a context of 2..{} positions, got '{}'\n", k_max_ctx,
                           argv[i]);
                return 2;
            }
        } else if (a == "--profile-batch")
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
        else if (a == "--q6-ctx" && i + 1 < argc) {
            q6_bench = true;
            if (!parse_positions(argv[++i], q6_ctx)) {
                fmt::print(stderr, "--q6-ctx: expected a context of 2..{} positions, got '{}'\n", k_max_ctx, argv[i]);
                return 2;
            }
        } else if (a == "--early-bench" && i + 1 < argc)
            early_levels = argv[++i];
        else if (a == "--prefetch-bench" && i + 1 < argc)
            prefetch_list = argv[++i];
        else if (a == "--batch-step" && i + 1 < argc)
            batch_masks = argv[++i];
        else if (a == "--norm-bench" && i + 1 < argc)
            norm_list = argv[++i];
        else if (a == "--q6k-bench" && i + 1 < argc)
            q6k_list = argv[++i];
        else if (a == "--q6k-check")
            q6k_check = true;
        else if (a == "--attention-check")
            attn_check = true;
        else if (a == "--greedy-only")
            greedy_only = true;
        else if (a == "--boundary-bench" && i + 1 < argc)
            boundary_list = argv[++i];
        else if (a == "--boundary-forms" && i + 1 < argc)
            boundary_forms = argv[++i];
        else if (a == "--q4k-modes" && i + 1 < argc)
            q4k_modes = argv[++i];
        else if (a == "--depth-bench" && i + 1 < argc)
            depth_list = argv[++i];
        else if (a == "--attn-groups" && i + 1 < argc)
            attn_groups = argv[++i];
        else if (a == "--depth-preset" && i + 1 < argc)
            depth_preset = argv[++i];
        else if (a == "--formats" && i + 1 < argc) {
            formats_preset = argv[++i];
            do_bench = false;
        } else if (a == "--depth-batch" && i + 1 < argc) {
            char* end = nullptr;
            const long b = std::strtol(argv[++i], &end, 10);
            if (!end || *end || b < 1 || b > 16) {
                fmt::print(stderr, "--depth-batch expects a sequence count in 1..16, got '{}'\n", argv[i]);
                return 2;
            }
            depth_batch = int(b);
        }
    }
    fmt::print("device: {}\n", cuda::device_description());
    if (cuda::device_count() == 0) {
        fmt::print("SKIPPED: no CUDA device\n");
        return 0;
    }
    if (profile) {
        // One decode step of llama3-8b shapes per type (Q4_K_M and Q8_0, or --only TYPE; kernels in order), then a
        // few matvecs for ncu: each bench_matvec(..., 1) launches its kernel 4 times.
        for (file_type ft : {file_type::q4_k_m, file_type::q8_0, file_type::q4_0, file_type::f16}) {
            if (only.empty() ? (ft == file_type::q4_0 || ft == file_type::f16) : only != file_type_name(ft)) continue;
            auto d = cuda::decoder::random(find_preset("llama3-8b").config, ft, profile_ctx, 11);
            d->bench_decode(1, 0, 1);
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
        if (!formats_preset.empty()) {
            check_formats(tmp, formats_preset);
        } else if (attn_check) {
            check_attention();
        } else if (greedy_only) {
            if (!stories.empty()) {
                const std::string g = tmp + "/stories260K.gguf";
                import_llama2c(stories, g);
                check_greedy("stories260K", g, 200);
            }
            if (!kjv.empty()) check_greedy("memtile-kjv-q8_0", kjv, 200);
        } else if (q6k_check) {
            check_q6k_variants();
        } else if (do_checks) {
            check_batch_products();
            check_matvec();
            check_argmax();
            check_qkm_products();
            check_q6k_variants();
            check_q4k_modes();
            check_attention();
            if (diag) {
                diagnose_q8_0(tmp);
                diagnose_determinism(tmp);
            }
            check_formats(tmp);
            check_prefetch_bits();
            check_norm_bits(kjv);
            check_norm_k(tmp);
            check_norm_load_bits(kjv);
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
        if (!boundary_list.empty()) {
            bench_boundary(bw, boundary_list, boundary_forms);
        } else if (!depth_list.empty()) {
            bench_depth(bw, depth_list, only, attn_groups, depth_preset, depth_batch);
        } else if (!q4k_modes.empty()) {
            if (!do_checks) check_q4k_modes();
            bench_q4k(bw, q4k_modes);
        } else if (!batch_masks.empty()) {
            bench_batch_step(only, batch_masks);
        } else if (!q6k_list.empty()) {
            bench_q6k(bw, q6k_list, only);
        } else if (!norm_list.empty()) {
            bench_norm(bw, norm_list, only);
        } else if (!prefetch_list.empty()) {
            bench_prefetch(bw, prefetch_list, only);
        } else if (!early_levels.empty()) {
            bench_early(bw, early_levels, only);
        } else if (q6_bench) {
            bench_q6(bw, sweep, q6_ctx);
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
