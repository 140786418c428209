// AVX2 entry points of the Q8_0 and Q4_0 kernels (simd/int8-kernels-256.h) and the activation quantizers
// (Q8_0 and Q8_K, SoA layout of kernels.h), also used by the AVX-512 path.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

constexpr int k_block = 32;

float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

__m256 abs_max32(const float* x) {
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 m01 =
        _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x), mask), _mm256_and_ps(_mm256_loadu_ps(x + 8), mask));
    const __m256 m23 =
        _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 16), mask), _mm256_and_ps(_mm256_loadu_ps(x + 24), mask));
    return _mm256_max_ps(m01, m23);
}

// Rounds 32 floats times `inv_scale` to int8 (nearest, ties to even) in element order; when `sums` is given,
// stores the sums of elements 0..15 and 16..31 there.
void levels32(const float* x, __m256 inv_scale, int8_t* qs, int16_t* sums) {
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv_scale));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), inv_scale));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), inv_scale));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), inv_scale));
    if (sums) {
        sums[0] = int16_t(hsum_i32(_mm256_add_epi32(i0, i1)));
        sums[1] = int16_t(hsum_i32(_mm256_add_epi32(i2, i3)));
    }
    // packs works within 128-bit halves, leaving 4-element groups in the order 0 2 4 6 1 3 5 7 of dwords.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
}

}  // namespace

void gemm_q8_0(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<simd256::legacy_kernel<simd256::q8_0_weights, int8_ops>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_q4_0(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<simd256::legacy_kernel<simd256::q4_0_weights, int8_ops>>(w, a, n_tok, y, ys, r0, r1);
}

void quantize_q8_0(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums) {
    for (int64_t ib = 0; ib < n_in / k_block; ib++) {
        const float amax = hmax(abs_max32(x + ib * k_block));
        d[ib] = amax / 127.0f;
        levels32(x + ib * k_block, _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f), qs + ib * k_block, bsums + 2 * ib);
    }
}

void quantize_q8_k(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums) {
    constexpr int super = 256;
    for (int64_t ib = 0; ib < n_in / super; ib++) {
        const float* xb = x + ib * super;
        __m256 m = abs_max32(xb);
        for (int k = 1; k < super / k_block; k++) m = _mm256_max_ps(m, abs_max32(xb + k * k_block));
        const float amax = hmax(m);
        d[ib] = amax / 127.0f;
        const __m256 inv = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int k = 0; k < super / k_block; k++)
            levels32(xb + k * k_block, inv, qs + ib * super + k * k_block, bsums + ib * (super / 16) + 2 * k);
    }
}

}  // namespace memtile::cpu::avx2
