// Declarations and helpers of the AVX2 (+FMA, F16C) kernel translation units; included only by files compiled with
// the AVX2 target flags (see kernels.h for why they stay in their own namespace).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd/int8-kernels-256.h"

namespace memtile::cpu::avx2 {

using detail::act_view;

using simd256::hsum;
using simd256::hsum_i32;
using simd256::load_f16;
using simd256::loadu;

// The u8 x s8 steps of the shared integer kernels (see simd/int8-kernels-256.h) with maddubs + madd.
struct int8_ops {
    static __m256i dot_u8s8(__m256i u, __m256i s) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    }
    static __m256i dot_u8s8_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale));
    }
};

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
