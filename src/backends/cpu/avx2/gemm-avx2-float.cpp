// Prefill GEMM for F32, F16 and BF16 weights (driver and design in gemm-avx2.h). A panel holds R rows
// converted to f32 once per token block, interleaved by 8-element unit: panel[(unit * R + row) * 8 + lane].
// The micro-kernel keeps R x T = 4 x 3 accumulators: per unit it loads 3 token vectors and 4 weight vectors
// for 12 FMAs (Zen 3: 2 FMA pipes, 2 vector loads per cycle), all from L1 within a K slice.
// Numerics mirror float_kernel in matmul-avx2-float.cpp: 4 accumulators over 8-element units (unit i into
// accumulator i % 4, units past the last whole group of 4 into accumulator 0), added in order, horizontal
// sum, then the scalar products of the elements past the last whole unit.
#include "backends/cpu/avx2/gemm-avx2.h"

namespace memtile::cpu::avx2 {
namespace {

template <class S>
struct float_panel {
    static constexpr int R = 4, T = 3, n_acc = 4;
    // 64 units = 512 elements: a 8 KiB panel slice and 3 x 2 KiB of tokens per tile stay in L1.
    static constexpr int64_t slice = 64;
    static int64_t units(int64_t n_in) { return n_in / 8; }
    // 64 tokens x 512 elements x 4 bytes = 128 KiB of activations per slice, in L2 while the tiles pass.
    static int64_t token_block(int64_t) { return 63; }
    static size_t panel_bytes(int64_t n_in) { return size_t(units(n_in)) * R * 32; }

    static void pack(const weight_view& w, int64_t row0, int n_rows, uint8_t* panel) {
        float* p = reinterpret_cast<float*>(panel);
        const int64_t nu = units(w.n_in);
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) {
                for (int64_t u = 0; u < nu; u++) _mm256_store_ps(p + (u * R + r) * 8, _mm256_setzero_ps());
                continue;
            }
            const uint8_t* row = w.data + size_t(row0 + r) * w.row_bytes;
            for (int64_t u = 0; u < nu; u++) _mm256_store_ps(p + (u * R + r) * 8, S::vec(row + u * 8 * S::bytes));
        }
    }

    static void run(const uint8_t* panel, const act_view& a, int64_t n_in, const int64_t* tok, int64_t u0, int64_t u1,
                    int64_t step, __m256* acc_mem) {
        const float* p = reinterpret_cast<const float*>(panel);
        const float* x[T];
        for (int j = 0; j < T; j++) x[j] = a.f32 + tok[j] * n_in;
        __m256 acc[R][T];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < T; j++) acc[r][j] = acc_mem[r * T + j];
        for (int64_t u = u0; u < u1; u += step) {
            __m256 xv[T];
            for (int j = 0; j < T; j++) xv[j] = _mm256_loadu_ps(x[j] + u * 8);
            for (int r = 0; r < R; r++) {
                const __m256 wv = _mm256_load_ps(p + (u * R + r) * 8);
                for (int j = 0; j < T; j++) acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int j = 0; j < T; j++) acc_mem[r * T + j] = acc[r][j];
    }

    static float tail(const weight_view& w, int64_t row, const act_view& a, int64_t t, float s) {
        const uint8_t* wr = w.data + size_t(row) * w.row_bytes;
        const float* x = a.f32 + t * w.n_in;
        for (int64_t k = units(w.n_in) * 8; k < w.n_in; k++) s += S::one(wr + k * S::bytes) * x[k];
        return s;
    }
};

}  // namespace

void gemm_panel_f32(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                    int64_t r1) {
    gemm_panels<float_panel<f32_loader>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_f16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                    int64_t r1) {
    gemm_panels<float_panel<f16_loader>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_bf16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_panels<float_panel<bf16_loader>>(w, a, n_tok, y, ys, r0, r1);
}

}  // namespace memtile::cpu::avx2
