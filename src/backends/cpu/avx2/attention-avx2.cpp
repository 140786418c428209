// AVX2 + FMA + F16C inner loops of CPU attention (see attention-kernels.h). Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

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

const attention_kernels k_avx2{load_tile_avx2, score_avx2, accumulate_avx2};

}  // namespace

const attention_kernels* avx2_attention_kernels() {
    return &k_avx2;
}

}  // namespace memtile::cpu::detail
