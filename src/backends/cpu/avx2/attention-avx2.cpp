// AVX2 + FMA + F16C inner loops of CPU attention (see attention-kernels.h). Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/attention-kernels.h"

namespace memtile::cpu::detail {
namespace {

void load_tile_avx2(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                    float* kt, float* v) {
    alignas(32) float k8[8];
    for (int j = 0; j < n; j++) {
        float* vd = v + size_t(j) * size_t(head_dim);
        for (int d = 0; d < head_dim; d += 8) {
            __m256 kv, vv;
            if (f16) {
                kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k_rows[j] + 2 * size_t(d))));
                vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v_rows[j] + 2 * size_t(d))));
            } else {
                kv = _mm256_loadu_ps(reinterpret_cast<const float*>(k_rows[j]) + d);
                vv = _mm256_loadu_ps(reinterpret_cast<const float*>(v_rows[j]) + d);
            }
            _mm256_storeu_ps(vd + d, vv);
            _mm256_store_ps(k8, kv);
            for (int i = 0; i < 8; i++) kt[size_t(d + i) * k_attention_tile + size_t(j)] = k8[i];
        }
    }
}

void score_avx2(const float* q, const float* kt, int head_dim, int n, float* sc) {
    const int n8 = (n + 7) / 8;
    __m256 acc[k_attention_tile / 8];
    for (int b = 0; b < n8; b++) acc[b] = _mm256_setzero_ps();
    for (int d = 0; d < head_dim; d++) {
        const __m256 qd = _mm256_set1_ps(q[d]);
        const float* row = kt + size_t(d) * k_attention_tile;
        for (int b = 0; b < n8; b++) acc[b] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 8 * b), acc[b]);
    }
    for (int b = 0; b < n8; b++) _mm256_storeu_ps(sc + 8 * b, acc[b]);
}

void accumulate_avx2(const float* p, const float* v, int n, int head_dim, float* acc) {
    for (int d = 0; d < head_dim; d += 32) {
        const int w = head_dim - d >= 32 ? 4 : (head_dim - d) / 8;
        __m256 a[4];
        for (int k = 0; k < w; k++) a[k] = _mm256_loadu_ps(acc + d + 8 * k);
        for (int j = 0; j < n; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const float* vj = v + size_t(j) * size_t(head_dim) + d;
            for (int k = 0; k < w; k++) a[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * k), a[k]);
        }
        for (int k = 0; k < w; k++) _mm256_storeu_ps(acc + d + 8 * k, a[k]);
    }
}

// exp(x) for x <= 0 (scores minus their maximum): x = n ln2 + r with |r| <= ln2/2, exp(r) by its Taylor
// polynomial to degree 6 (relative error about 1e-7, below f32 rounding of the sums it feeds), times 2^n
// built in the exponent bits. Inputs below -87 give 0 (as expf underflows).
__m256 exp_nonpositive(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

float exp_sum_avx2(float* sc, int n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256 sum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(sc + j), m));
        _mm256_storeu_ps(sc + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum);
    float total = 0;
    for (float v : lanes) total += v;
    if (j < n) {
        alignas(32) float tail[8] = {};
        for (int k = 0; j + k < n; k++) tail[k] = sc[j + k] - mx;
        const __m256 valid =
            _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(float(n - j)), _CMP_LT_OQ);
        const __m256 e = _mm256_and_ps(valid, exp_nonpositive(_mm256_load_ps(tail)));
        _mm256_store_ps(tail, e);
        for (int k = 0; j + k < n; k++) {
            sc[j + k] = tail[k];
            total += tail[k];
        }
    }
    return total;
}

// silu(g) = g * sigmoid(g) with t = exp(-|g|) <= 1 (never overflows): sigmoid = 1 / (1 + t) for g >= 0,
// t / (1 + t) for g < 0.
void swiglu_avx2(float* gate, const float* up, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 t = exp_nonpositive(_mm256_or_ps(g, sign));  // exp(-|g|)
        const __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
        const __m256 sig = _mm256_div_ps(_mm256_blendv_ps(one, t, neg), _mm256_add_ps(one, t));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        alignas(32) float lane[8] = {gate[i]};
        const __m256 g = _mm256_load_ps(lane);
        const __m256 t = exp_nonpositive(_mm256_or_ps(g, sign));
        const __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
        const __m256 sig = _mm256_div_ps(_mm256_blendv_ps(one, t, neg), _mm256_add_ps(one, t));
        _mm256_store_ps(lane, _mm256_mul_ps(g, sig));
        gate[i] = lane[0] * up[i];
    }
}

const attention_kernels k_avx2{load_tile_avx2, score_avx2, accumulate_avx2, exp_sum_avx2, swiglu_avx2};

}  // namespace

const attention_kernels* avx2_attention_kernels() {
    return &k_avx2;
}

}  // namespace memtile::cpu::detail
