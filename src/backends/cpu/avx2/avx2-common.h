// Helpers shared by the AVX2 (+FMA, F16C) kernel translation units; included only by files compiled with
// the AVX2 target flags (see kernels.h for why they stay in their own namespace).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace memtile::cpu::avx2 {

using detail::act_view;

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m256i loadu(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 int16 lanes of u8 * s8 pair sums, summed again in pairs into 8 int32 lanes.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Broadcasts int16 lane k of each 128-bit half to the 8 lanes of that half.
inline __m256i bcast_i16_lane(__m256i v, int k) {
    const char lo = char(2 * k), hi = char(2 * k + 1);
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                                                   hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi));
}

// Kernel entry points, one per weight format (y layout as kernels.h's gemm_fn).
void gemm_f32(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_f16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_bf16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q8_0(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q4_0(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q4_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q5_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q6_k(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void quantize_q8_0(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);
void quantize_q8_k(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);

}  // namespace memtile::cpu::avx2
