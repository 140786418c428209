// AVX-512 kernels for float weights (F32, F16, BF16) against f32 activations: 16 elements per zmm vector,
// converted to f32 once and multiplied into `nt` token accumulators with FMA; the row tail (n_in not a
// multiple of 16) uses masked loads. Decode (nt = 1) keeps four independent accumulators.
#include "backends/cpu/avx512/avx512-common.h"

namespace memtile::cpu::avx512 {
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
        __m512 acc[nt][unroll];
        for (int j = 0; j < nt; j++)
            for (int u = 0; u < unroll; u++) acc[j][u] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 * unroll <= n; i += 16 * unroll) {
            for (int u = 0; u < unroll; u++) {
                const __m512 wv = L::vec(row + (i + 16 * u) * L::bytes);
                for (int j = 0; j < nt; j++)
                    acc[j][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[j] + i + 16 * u), acc[j][u]);
            }
        }
        for (; i + 16 <= n; i += 16) {
            const __m512 wv = L::vec(row + i * L::bytes);
            for (int j = 0; j < nt; j++) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[j] + i), acc[j][0]);
        }
        if (i < n) {
            const __mmask16 m = __mmask16((1u << (n - i)) - 1);
            const __m512 wv = L::masked(row + i * L::bytes, m);
            for (int j = 0; j < nt; j++) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x[j] + i), acc[j][0]);
        }
        for (int j = 0; j < nt; j++) {
            for (int u = 1; u < unroll; u++) acc[j][0] = _mm512_add_ps(acc[j][0], acc[j][u]);
            out[j] = _mm512_reduce_add_ps(acc[j][0]);
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

}  // namespace memtile::cpu::avx512
