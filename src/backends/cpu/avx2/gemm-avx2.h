// Register-blocked matrix-matrix products (prefill, n_tok >= k_gemm_min_tokens) on AVX2 + FMA: the driver
// of the integer formats (gemm-avx2-int8.cpp). The float formats (gemm-avx2-float.cpp) have their own loop
// nest since session 6 (row blocks and K slices outside the panels, operands laid out pass by pass); the
// entry points of both are declared at the end.
//
// Why: the per-row kernels (gemm_tiled) load one weight vector and one activation vector per multiply, with
// 4 tokens per weight row; both streams come from L2, so prefill ran at about a fifth of the FMA / maddubs
// peak. Here a format policy F first packs a panel of F::R rows (the whole row length) into a per-thread
// buffer in a kernel-friendly form (f32 for the float formats; unpacked int8/u8 levels and expanded scales
// for the integer ones), once per token block, so the per-format unpacking is paid once for up to hundreds of
// tokens. A micro-kernel then holds F::R x F::T accumulators in registers: each loaded weight vector feeds
// F::T tokens and each activation vector F::R rows.
//
// Bit-identical results whatever the batch: the server batches sequences into one matmul and each must get
// the logits it would get alone, so each (row, token) result here is the same sequence of IEEE operations
// as the per-row kernel of the same format (simd/int8-kernels-256.h, matmul-avx2-float.cpp). Those keep
// F::n_acc float accumulators per token (4 for F32/F16/BF16 and Q8_0/Q4_0: unit i goes to accumulator
// i % 4, the units after the last whole group of 4 to accumulator 0; 1 for the K formats) and add them in
// order at the end. The driver reproduces that with one pass per accumulator (units u, u + 4, ...), each
// pass over one K slice at a time, and keeps the per-(row, token, accumulator) partial vectors in a
// buffer between slices. Integer sums within a unit are exact, so only their lane layout must match.
// Any change to the summation order of those kernels must be mirrored here; cpu-matmul-test checks it.
//
// Loop nest per thread (its rows [r0, r1)): token blocks of F::token_block(n_in) tokens (their activations
// stay in L2) > panels of R rows (packed once per block) > K slices of F::slice units (the panel slice stays
// in L1 while every token tile of the block passes over it) > token tiles of T > accumulator passes.
// A last partial tile repeats its last valid token and a last partial panel has zero rows; both results
// are dropped.
#pragma once

#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

// F provides:
//   R, T, n_acc, units(n_in), slice, token_block(n_in), panel_bytes(n_in)
//   pack(w, row0, n_rows, panel)                      panel of rows row0.. (rows >= n_rows zeroed)
//   run(panel, a, n_in, tok[T], u_begin, u_end, u_step, acc[R * T])   accumulates units into acc
//   tail(w, row, a, token, sum) -> sum               scalar part after the last whole unit (float formats)
template <class F>
void gemm_panels(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    constexpr int R = F::R, T = F::T, NA = F::n_acc;
    const int64_t n_in = w.n_in;
    const int64_t nu = F::units(n_in);
    const int64_t nu_main = nu / NA * NA;
    // Token blocks of about F::token_block tokens, of equal size: a short last block would repack every
    // panel for a few tokens (pp64 with blocks of 63 packed the whole matrix twice, the second time for one).
    const int64_t tb_wanted = F::token_block(n_in), n_blocks_r = (n_tok + tb_wanted / 2) / tb_wanted;
    const int64_t n_blocks = n_blocks_r > 0 ? n_blocks_r : 1;
    const int64_t block = ((n_tok + n_blocks - 1) / n_blocks + T - 1) / T * T;
    const size_t panel_bytes = (F::panel_bytes(n_in) + 63) / 64 * 64;
    // [tile][acc][row][token of tile] vectors
    const size_t part_vectors = size_t(block / T) * NA * R * T;
    uint8_t* scratch = detail::gemm_scratch(panel_bytes + part_vectors * sizeof(__m256));
    uint8_t* panel = scratch;
    __m256* part = reinterpret_cast<__m256*>(scratch + panel_bytes);

    for (int64_t tb = 0; tb < n_tok; tb += block) {
        const int64_t nt = n_tok - tb < block ? n_tok - tb : block;
        const int64_t n_tiles = (nt + T - 1) / T;
        for (int64_t rp = r0; rp < r1; rp += R) {
            const int n_rows = int(r1 - rp < R ? r1 - rp : R);
            F::pack(w, rp, n_rows, panel);
            for (size_t k = 0; k < size_t(n_tiles) * NA * R * T; k++) part[k] = _mm256_setzero_ps();
            const auto tile_tokens = [&](int64_t tile, int64_t* tok) {
                for (int j = 0; j < T; j++) {
                    const int64_t t = tile * T + j;
                    tok[j] = tb + (t < nt ? t : nt - 1);
                }
            };
            for (int64_t s0 = 0; s0 < nu_main; s0 += F::slice) {
                const int64_t s1 = s0 + F::slice < nu_main ? s0 + F::slice : nu_main;
                for (int64_t tile = 0; tile < n_tiles; tile++) {
                    int64_t tok[T];
                    tile_tokens(tile, tok);
                    for (int u = 0; u < NA; u++)
                        F::run(panel, a, n_in, tok, s0 + u, s1, NA, part + (size_t(tile) * NA + u) * R * T);
                }
            }
            if (nu_main < nu) {
                for (int64_t tile = 0; tile < n_tiles; tile++) {
                    int64_t tok[T];
                    tile_tokens(tile, tok);
                    F::run(panel, a, n_in, tok, nu_main, nu, 1, part + size_t(tile) * NA * R * T);
                }
            }
            for (int64_t t = 0; t < nt; t++) {
                const __m256* pt = part + size_t(t / T) * NA * R * T + t % T;
                for (int r = 0; r < n_rows; r++) {
                    __m256 s = pt[r * T];
                    for (int u = 1; u < NA; u++) s = _mm256_add_ps(s, pt[(u * R + r) * T]);
                    y[(tb + t) * ys + rp + r] = F::tail(w, rp + r, a, tb + t, hsum(s));
                }
            }
        }
    }
}

}  // namespace

void gemm_panel_f32(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_f16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_bf16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_q8_0(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_q4_0(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_q4_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_q5_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_panel_q6_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);

}  // namespace memtile::cpu::avx2
