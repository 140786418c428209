// AVX2 + FMA + F16C inner loops of CPU attention (see attention-kernels.h). Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/simd/attention-loops.h"
#include "backends/cpu/simd/row-prefetch.h"

namespace memtile::cpu::detail {
namespace {

// 8 key rows of 8 elements each (row j at rows[j]) transposed: out[i] holds element i of the 8 rows.
void transpose8(const __m256 (&r)[8], __m256 (&out)[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {  // rows 0-3 (h = 0) and 4-7
        const __m256* th = t + 4 * h;
        u[4 * h] = _mm256_shuffle_ps(th[0], th[2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(th[0], th[2], 0xee);
        u[4 * h + 2] = _mm256_shuffle_ps(th[1], th[3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(th[1], th[3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        out[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        out[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

__m256 load8(const uint8_t* row, bool f16, int d) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t(d))))
               : _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
}

// Keys in groups of 8 transposed in registers (8 x 8 blocks; a short last group padded with zero keys), values
// converted row by row. Storing the keys transposed element by element took a fifth of the prefill attention.
void load_tile_avx2(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                    float* kt, float* v) {
    for (int j = 0; j < n; j++) {
        float* vd = v + size_t(j) * size_t(head_dim);
        for (int d = 0; d < head_dim; d += 8) _mm256_storeu_ps(vd + d, load8(v_rows[j], f16, d));
    }
    for (int j0 = 0; j0 < n; j0 += 8) {
        const int nb = std::min(8, n - j0);
        for (int d = 0; d < head_dim; d += 8) {
            __m256 r[8], c[8];
            for (int j = 0; j < 8; j++) r[j] = j < nb ? load8(k_rows[j0 + j], f16, d) : _mm256_setzero_ps();
            transpose8(r, c);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(kt + size_t(d + i) * k_attention_tile + size_t(j0), c[i]);
        }
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

// The largest and the sum of the 8 lanes (the sum in lane order, as the scalar loops it replaced).
float lane_max(__m256 v) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    float m = lanes[0];
    for (float x : lanes) m = std::max(m, x);
    return m;
}
float lane_sum(__m256 v) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    float total = 0;
    for (float x : lanes) total += x;
    return total;
}

// The online-softmax step of attention-kernels.h for up to k_score_rows rows of a tile (64 keys = 8 vectors).
void softmax_avx2(float* sc, int rows, const int* nj, float* m, float* l, float* corr) {
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < rows; r++) {
        float* s = sc + size_t(r) * k_attention_tile;
        const int n = std::max(nj[r], 0);
        if (n == 0) {
            std::memset(s, 0, sizeof(float) * k_attention_tile);
            corr[r] = 1.0f;
            continue;
        }
        __m256 x[k_attention_tile / 8];
        __m256 mx = _mm256_set1_ps(m[r]);
        for (int b = 0; b < k_attention_tile / 8; b++) {
            const __m256 valid = _mm256_cmp_ps(lane, _mm256_set1_ps(float(n - 8 * b)), _CMP_LT_OQ);
            x[b] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + 8 * b), valid);
            mx = _mm256_max_ps(mx, x[b]);
        }
        const float mh = lane_max(mx);
        const __m256 mv = _mm256_set1_ps(mh);
        __m256 sum = _mm256_setzero_ps();
        for (int b = 0; b < k_attention_tile / 8; b++) {
            const __m256 e = exp_nonpositive(_mm256_sub_ps(x[b], mv));  // dropped keys: -inf, so 0
            _mm256_storeu_ps(s + 8 * b, e);
            sum = _mm256_add_ps(sum, e);
        }
        const float total = lane_sum(sum);
        corr[r] = std::exp(m[r] - mh);  // 0 on the row's first keys (m = -inf)
        l[r] = l[r] * corr[r] + total;
        m[r] = mh;
    }
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

// Decode (attention-kernels.h): avx512/attention-avx512.cpp's loops on 8 lanes.
constexpr int k_block_keys = 8;

// Lane j of the result: the sum of the 8 lanes of t[j].
__m256 sum_lanes8(const __m256 (&t)[8]) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));  // halves: t0..t3
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(t[4], t[5]), _mm256_hadd_ps(t[6], t[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// Vector traits of simd/attention-loops.h: 8 floats, 2 query rows per call (16 registers).
struct v256 {
    using reg = __m256;
    static constexpr int lanes = 8, max_rows = 2;
    static reg zero() { return _mm256_setzero_ps(); }
    static reg load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
    static reg set1(float x) { return _mm256_set1_ps(x); }
    static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
    static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static reg load_aligned(const float* p) { return _mm256_load_ps(p); }
    static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
    static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
    static reg exp_nonpositive(reg x) { return detail::exp_nonpositive(x); }
    static float reduce_max(reg x) { return lane_max(x); }
    static float reduce_add(reg x) { return lane_sum(x); }
    static reg sum_lanes(const reg (&t)[8]) { return sum_lanes8(t); }
    static reg keep_first(reg x, int n) {
        const reg valid = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(float(n)), _CMP_LT_OQ);
        return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x, valid);
    }
    static reg load_f16(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
};

template <int W>
void weigh_values(const float* p, const float* rows, int n, int stride, float* acc, bool first) {
    __m256 a[W];
    for (int w = 0; w < W; w++) a[w] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 8 * w);
    for (int j = 0; j < n; j++) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        const float* r = rows + size_t(j) * size_t(stride);
        for (int w = 0; w < W; w++) a[w] = _mm256_fmadd_ps(pj, _mm256_load_ps(r + 8 * w), a[w]);
    }
    for (int w = 0; w < W; w++) _mm256_storeu_ps(acc + 8 * w, a[w]);
}

void weigh_values_any(const float* p, const float* rows, int n, int hd, int stride, float* acc, bool first) {
    for (int d0 = 0; d0 < hd; d0 += 64) {
        const float* r = rows + d0;
        float* a = acc + d0;
        switch (std::min(8, (hd - d0) / 8)) {
            case 1: weigh_values<1>(p, r, n, stride, a, first); break;
            case 2: weigh_values<2>(p, r, n, stride, a, first); break;
            case 3: weigh_values<3>(p, r, n, stride, a, first); break;
            case 4: weigh_values<4>(p, r, n, stride, a, first); break;
            case 5: weigh_values<5>(p, r, n, stride, a, first); break;
            case 6: weigh_values<6>(p, r, n, stride, a, first); break;
            case 7: weigh_values<7>(p, r, n, stride, a, first); break;
            default: weigh_values<8>(p, r, n, stride, a, first); break;
        }
    }
}

void decode_avx2(const float* q, int n_kv, int group, const uint8_t* k, const uint8_t* v, size_t stride, bool f16,
                 int hd, int n, float* sc, float* m, float* l, float* acc) {
    // The scores and softmax of simd/attention-loops.h; then each KV head's value slice of a block converted into
    // L1 ([8][hd] f32) and weighed for its group's heads, the next block prefetched meanwhile.
    const int n_q = n_kv * group;
    const size_t head_bytes = size_t(hd) * (f16 ? 2 : 4);
    float* rows = aligned_scratch<v256>(size_t(k_block_keys) * size_t(hd));
    row_prefetcher pf;
    const int per = int((size_t(k_block_keys) * stride / 64 + size_t(n_q) - 1) / size_t(n_q));
    decode_scores<v256>(q, n_kv, group, k, v, stride, f16, hd, n, sc, rows, pf, per);
    chunk_softmax<v256>(sc, n_q, n, m, l);
    for (int j0 = 0; j0 < n; j0 += k_block_keys) {
        const int nb = std::min(k_block_keys, n - j0);
        if (j0 + k_block_keys < n)
            pf.start(v + size_t(j0 + k_block_keys) * stride, size_t(std::min(k_block_keys, n - j0 - nb)) * stride);
        else
            pf.start(k + size_t(n) * stride, size_t(k_block_keys) * stride);
        for (int h = 0; h < n_q; h++) {
            if (h % group == 0)
                load_rows<v256, k_block_keys, false>(v + size_t(j0) * stride + size_t(h / group) * head_bytes, stride,
                                                     f16, hd, nb, rows);
            pf.step(per);
            weigh_values_any(sc + size_t(h) * k_decode_chunk + j0, rows, nb, hd, hd, acc + size_t(h) * size_t(hd),
                             j0 == 0);
        }
    }
}

const attention_kernels k_avx2{load_tile_avx2, score<v256>, softmax_avx2, accumulate<v256>, swiglu_avx2, decode_avx2};

}  // namespace

const attention_kernels* avx2_attention_kernels() {
    return &k_avx2;
}

}  // namespace memtile::cpu::detail
