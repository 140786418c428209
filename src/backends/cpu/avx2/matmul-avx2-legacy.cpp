// AVX2 kernels for the 32-element formats Q8_0 and Q4_0 against Q8_0 activations, and the activation
// quantizers (Q8_0 and Q8_K, SoA layout of kernels.h).
//
// Integer dot of a weight block w (signed) with an activation block q (signed): maddubs multiplies unsigned
// by signed bytes, so it is fed |w| and q carrying w's sign (vpsignb); both stay within +-127 (Q4_0 levels
// are -8..7), so the 16-bit pair sums cannot saturate. Each block's 8 int32 partial sums are scaled by
// d_w * d_q in float and accumulated; one horizontal sum per row and token at the end.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

constexpr int k_block = 32;

// Block layouts (see quant/quant-formats.h): Q8_0 = f16 d + 32 int8; Q4_0 = f16 d + 16 bytes of nibbles,
// element j in the low nibble of byte j and element j + 16 in its high nibble.
struct q8_0_weights {
    static constexpr int bytes = 34;
    static __m256i levels(const uint8_t* b) { return loadu(b + 2); }
};

struct q4_0_weights {
    static constexpr int bytes = 18;
    static __m256i levels(const uint8_t* b) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    }
};

// Decode (nt = 1) spreads consecutive blocks over four accumulators: one chain of dependent FMAs per block
// would otherwise cap the rate at one block per FMA latency, below the memory stream.
template <class W>
struct legacy_kernel {
    static constexpr int tile = 4;

    template <int nt, int u>
    static void block(const uint8_t* row, int64_t ib, const int8_t* const* q, const float* const* d, __m256 (*acc)[u],
                      int k) {
        const uint8_t* b = row + ib * W::bytes;
        const __m256i w = W::levels(b);
        const __m256i aw = _mm256_abs_epi8(w);
        const float dw = load_f16(b);
        for (int j = 0; j < nt; j++) {
            const __m256i p = dot_u8s8(aw, _mm256_sign_epi8(loadu(q[j] + ib * k_block), w));
            acc[j][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * d[j][ib]), acc[j][k]);
        }
    }

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        constexpr int u = nt == 1 ? 4 : nt == 2 ? 2 : 1;
        const int64_t nb = a.n_in / k_block;
        const int8_t* q[nt];
        const float* d[nt];
        __m256 acc[nt][u];
        for (int j = 0; j < nt; j++) {
            q[j] = a.qs + (t0 + j) * a.n_in;
            d[j] = a.d + (t0 + j) * nb;
            for (int k = 0; k < u; k++) acc[j][k] = _mm256_setzero_ps();
        }
        int64_t ib = 0;
        for (; ib + u <= nb; ib += u)
            for (int k = 0; k < u; k++) block<nt, u>(row, ib + k, q, d, acc, k);
        for (; ib < nb; ib++) block<nt, u>(row, ib, q, d, acc, 0);
        for (int j = 0; j < nt; j++) {
            for (int k = 1; k < u; k++) acc[j][0] = _mm256_add_ps(acc[j][0], acc[j][k]);
            out[j] = hsum(acc[j][0]);
        }
    }
};

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
    detail::gemm_tiled<legacy_kernel<q8_0_weights>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_q4_0(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<legacy_kernel<q4_0_weights>>(w, a, n_tok, y, ys, r0, r1);
}

void quantize_q8_0(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t*) {
    for (int64_t ib = 0; ib < n_in / k_block; ib++) {
        const float amax = hmax(abs_max32(x + ib * k_block));
        d[ib] = amax / 127.0f;
        levels32(x + ib * k_block, _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f), qs + ib * k_block, nullptr);
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
