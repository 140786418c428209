// AVX-512 decode attention (attention-kernels.h, `decode`): 16 keys scored together per head, their 16 dot products
// reduced into one vector of scores, then the values weighted by the softmax, the next rows prefetched meanwhile.
// The other attention loops of this set are the AVX2 ones (prefill converts each K/V tile once for many queries).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/simd/attention-loops.h"
#include "backends/cpu/simd/row-prefetch.h"

namespace memtile::cpu::detail {
namespace {

constexpr int k_block_keys = 16;  // keys converted and scored together (one vector of scores)

// exp(x) for x <= 0: the AVX2 loops' polynomial (attention-avx2.cpp, exp_nonpositive) on 16 lanes, scaled by 2^n
// with vscalefps; inputs below -87 (and -inf, the scores of padding keys) give 0.
__m512 exp_nonpositive(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_max_ps(x, lo);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

// Lane j of the result: the sum of the 16 lanes of t[j]. Four halving steps, each pairing vectors by one shuffle
// pair and an add (45 operations for 16 sums), leave lane 4k + i holding t[4i + k]; one permute puts them in order.
__m512 sum_lanes16(const __m512 (&t)[16]) {
    __m512 u[8], w[4];
    for (int i = 0; i < 8; i++)  // 256-bit half 0: t[2i]'s two halves added, half 1: t[2i + 1]'s
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++)  // 128-bit lane k: t[4i + k]'s four partial sums
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
    const __m512 x0 = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xee));
    const __m512 x1 = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], 0x44), _mm512_shuffle_ps(w[2], w[3], 0xee));
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x88), _mm512_shuffle_ps(x0, x1, 0xdd));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), y);
}

// Vector traits of simd/attention-loops.h: 16 floats, 4 query rows per call.
struct v512 {
    using reg = __m512;
    static constexpr int lanes = 16, max_rows = 4;
    static reg zero() { return _mm512_setzero_ps(); }
    static reg load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
    static reg set1(float x) { return _mm512_set1_ps(x); }
    static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
    static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static reg load_aligned(const float* p) { return _mm512_load_ps(p); }
    static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
    static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
    static reg exp_nonpositive(reg x) { return detail::exp_nonpositive(x); }
    static float reduce_max(reg x) { return _mm512_reduce_max_ps(x); }
    static float reduce_add(reg x) { return _mm512_reduce_add_ps(x); }
    static reg sum_lanes(const reg (&t)[16]) { return sum_lanes16(t); }
    static reg keep_first(reg x, int n) {
        return _mm512_mask_blend_ps(__mmask16((1u << n) - 1), _mm512_set1_ps(-INFINITY), x);
    }
    static reg load_f16(const uint8_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
};

// The values pass for HG query heads of one KV head: acc[g][0..hd) (+)= sum_j p[g][j] v_j for j < n, hd = 16 NV,
// p[g] at p + g * k_decode_chunk, value row j's slice at v + j * stride (f16 or f32). Each row is converted in
// registers once and weighed for every head, the HG x NV sums kept in registers (converting the rows into a scratch
// block first, as the scores do, cost a 64-byte store per vector: 2 cycles on Zen 4).
template <int NV, int HG>
void weigh_values(const float* p, const uint8_t* v, size_t stride, bool f16, int n, float* acc, int hd, bool first) {
    __m512 a[HG][NV];
    for (int g = 0; g < HG; g++)
        for (int c = 0; c < NV; c++)
            a[g][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + size_t(g) * size_t(hd) + 16 * c);
    for (int j = 0; j < n; j++) {
        const uint8_t* r = v + size_t(j) * stride;
        for (int c = 0; c < NV; c++) {
            const __m512 x = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 32 * c)))
                                 : _mm512_loadu_ps(reinterpret_cast<const float*>(r) + 16 * c);
            for (int g = 0; g < HG; g++)
                a[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[size_t(g) * k_decode_chunk + size_t(j)]), x, a[g][c]);
        }
    }
    for (int g = 0; g < HG; g++)
        for (int c = 0; c < NV; c++) _mm512_storeu_ps(acc + size_t(g) * size_t(hd) + 16 * c, a[g][c]);
}

// weigh_values for `group` heads (in passes of up to HG) and any hd that is a multiple of 16 (slices of up to 8
// vectors).
template <int NV>
void weigh_group(const float* p, const uint8_t* v, size_t stride, bool f16, int n, float* acc, int hd, int group,
                 bool first) {
    constexpr int HG = NV <= 4 ? 4 : 2;
    int g = 0;
    for (; g + HG <= group; g += HG)
        weigh_values<NV, HG>(p + size_t(g) * k_decode_chunk, v, stride, f16, n, acc + size_t(g) * size_t(hd), hd,
                             first);
    for (; g < group; g++)
        weigh_values<NV, 1>(p + size_t(g) * k_decode_chunk, v, stride, f16, n, acc + size_t(g) * size_t(hd), hd, first);
}

void weigh_any(const float* p, const uint8_t* v, size_t stride, bool f16, int n, float* acc, int hd, int group,
               bool first) {
    const size_t elem = f16 ? 2 : 4;
    for (int d0 = 0; d0 < hd; d0 += 128) {
        const uint8_t* vs = v + size_t(d0) * elem;
        float* a = acc + d0;
        switch (std::min(8, (hd - d0) / 16)) {
            case 1: weigh_group<1>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 2: weigh_group<2>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 3: weigh_group<3>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 4: weigh_group<4>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 5: weigh_group<5>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 6: weigh_group<6>(p, vs, stride, f16, n, a, hd, group, first); break;
            case 7: weigh_group<7>(p, vs, stride, f16, n, a, hd, group, first); break;
            default: weigh_group<8>(p, vs, stride, f16, n, a, hd, group, first); break;
        }
    }
}

void decode_avx512(const float* q, int n_kv, int group, const uint8_t* k, const uint8_t* v, size_t stride, bool f16,
                   int hd, int n, float* sc, float* m, float* l, float* acc) {
    // The scores and softmax of simd/attention-loops.h; then the values, whose rows weigh_values converts in
    // registers (no 64-byte scratch stores: 2 cycles each on Zen 4), the next block prefetched meanwhile.
    const int n_q = n_kv * group;
    const size_t head_bytes = size_t(hd) * (f16 ? 2 : 4);
    float* rows = aligned_scratch<v512>(size_t(k_block_keys) * size_t(hd));
    row_prefetcher pf;
    const int per = int((size_t(k_block_keys) * stride / 64 + size_t(n_q) - 1) / size_t(n_q));
    decode_scores<v512>(q, n_kv, group, k, v, stride, f16, hd, n, sc, rows, pf, per);
    chunk_softmax<v512>(sc, n_q, n, m, l);
    for (int j0 = 0; j0 < n; j0 += k_block_keys) {
        const int nb = std::min(k_block_keys, n - j0);
        // The next block of V, or after the last one the first K block of the next chunk (the thread's next job
        // where the pool hands out ranges; past the cache's filled rows the prefetches only waste a few lines).
        if (j0 + k_block_keys < n)
            pf.start(v + size_t(j0 + k_block_keys) * stride, size_t(std::min(k_block_keys, n - j0 - nb)) * stride);
        else
            pf.start(k + size_t(n) * stride, size_t(k_block_keys) * stride);
        for (int kvh = 0; kvh < n_kv; kvh++) {
            pf.step(per * group);
            weigh_any(sc + size_t(kvh * group) * k_decode_chunk + j0,
                      v + size_t(j0) * stride + size_t(kvh) * head_bytes, stride, f16, nb,
                      acc + size_t(kvh * group) * size_t(hd), hd, group, j0 == 0);
        }
    }
}

// The prefill's online-softmax step (attention-kernels.h) on 16 lanes: a tile's 64 keys in 4 vectors per row (score
// and accumulate are simd/attention-loops.h's with v512).
void softmax_avx512(float* sc, int rows, const int* nj, float* m, float* l, float* corr) {
    for (int r = 0; r < rows; r++) {
        float* s = sc + size_t(r) * k_attention_tile;
        const int n = std::max(nj[r], 0);
        __m512 x[4];
        __m512 mx = _mm512_set1_ps(m[r]);
        for (int b = 0; b < 4; b++) {
            const int valid = std::clamp(n - 16 * b, 0, 16);
            x[b] = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), __mmask16((1u << valid) - 1), s + 16 * b);
            mx = _mm512_max_ps(mx, x[b]);
        }
        if (n == 0) {
            for (int b = 0; b < 4; b++) _mm512_storeu_ps(s + 16 * b, _mm512_setzero_ps());
            corr[r] = 1.0f;
            continue;
        }
        const float mh = _mm512_reduce_max_ps(mx);
        const __m512 mv = _mm512_set1_ps(mh);
        __m512 sum = _mm512_setzero_ps();
        for (int b = 0; b < 4; b++) {
            const __m512 e = exp_nonpositive(_mm512_sub_ps(x[b], mv));  // dropped keys: -inf, so 0
            _mm512_storeu_ps(s + 16 * b, e);
            sum = _mm512_add_ps(sum, e);
        }
        corr[r] = std::exp(m[r] - mh);  // 0 on the row's first keys (m = -inf)
        l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum);
        m[r] = mh;
    }
}

}  // namespace

const attention_kernels* avx512_attention_kernels() {
    static const attention_kernels set = [] {
        attention_kernels s = *avx2_attention_kernels();
        s.score = score<v512>;
        s.softmax = softmax_avx512;
        s.accumulate = accumulate<v512>;
        s.decode = decode_avx512;
        return s;
    }();
    return &set;
}

}  // namespace memtile::cpu::detail
