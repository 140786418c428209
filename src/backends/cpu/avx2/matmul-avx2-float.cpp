// AVX2 kernels for float weights (F32, F16, BF16) against f32 activations. Each weight vector of 8 elements
// is converted to f32 once and multiplied into `nt` token accumulators with FMA. Decode (nt = 1) keeps four
// independent accumulators so the FMA latency never limits the stream; tiles keep the same four per token,
// so the summation order, and thus each result, is the same whatever the number of tokens.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

template <class L>
struct float_kernel {
    static constexpr int tile = 4;

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        constexpr int unroll = 4;  // the same for every nt: a token's sum must not depend on its batch
        const int64_t n = a.n_in;
        const float* x[nt];
        for (int j = 0; j < nt; j++) x[j] = a.f32 + (t0 + j) * n;
        __m256 acc[nt][unroll];
        for (int j = 0; j < nt; j++)
            for (int u = 0; u < unroll; u++) acc[j][u] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 * unroll <= n; i += 8 * unroll) {
            for (int u = 0; u < unroll; u++) {
                const __m256 wv = L::vec(row + (i + 8 * u) * L::bytes);
                for (int j = 0; j < nt; j++)
                    acc[j][u] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[j] + i + 8 * u), acc[j][u]);
            }
        }
        for (; i + 8 <= n; i += 8) {
            const __m256 wv = L::vec(row + i * L::bytes);
            for (int j = 0; j < nt; j++) acc[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[j] + i), acc[j][0]);
        }
        for (int j = 0; j < nt; j++) {
            for (int u = 1; u < unroll; u++) acc[j][0] = _mm256_add_ps(acc[j][0], acc[j][u]);
            float s = hsum(acc[j][0]);
            for (int64_t k = i; k < n; k++) s += L::one(row + k * L::bytes) * x[j][k];
            out[j] = s;
        }
    }
};

}  // namespace

void gemm_f32(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<float_kernel<f32_loader>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_f16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<float_kernel<f16_loader>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_bf16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<float_kernel<bf16_loader>>(w, a, n_tok, y, ys, r0, r1);
}

}  // namespace memtile::cpu::avx2
