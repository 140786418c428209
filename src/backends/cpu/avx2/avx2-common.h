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

// Requests the cache lines of [p, p + n) into L2 (prefetcht1; t0 and nta measured slower, docs/cpu-log-s3-s6.md).
template <int n>
void prefetch_l2(const uint8_t* p) {
    for (int o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
}

// Loaders of 8 float-format weights as one f32 vector (vec) or of one weight (one), shared by the per-row
// kernels (matmul-avx2-float.cpp) and the prefill GEMM (gemm-avx2-float.cpp), which must convert alike.
struct f32_loader {
    static __m256 vec(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
    static float one(const uint8_t* p) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    static constexpr int bytes = 4;
    static constexpr dtype type = dtype::f32;
};

struct f16_loader {
    static __m256 vec(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float one(const uint8_t* p) { return load_f16(p); }
    static constexpr int bytes = 2;
    static constexpr dtype type = dtype::f16;
};

// bf16 is the top half of an f32: widen to 32 bits and shift into place.
struct bf16_loader {
    static __m256 vec(const uint8_t* p) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    static float one(const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t bits = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
    static constexpr int bytes = 2;
    static constexpr dtype type = dtype::bf16;
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
// The float layouts of repack.h (32-row groups; matmul-avx2-float-x32.cpp), as kernels.h's gemv_x8_fn and
// gemm_x8_fn.
void gemv_x32_f32(const uint8_t*, size_t, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemv_x32_f16(const uint8_t*, size_t, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemv_x32_bf16(const uint8_t*, size_t, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_x32_f32(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_x32_f16(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_x32_bf16(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void quantize_q8_0(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);
void quantize_q8_k(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);

}  // namespace memtile::cpu::avx2
