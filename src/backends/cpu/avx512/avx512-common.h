// Declarations of the AVX-512 (F, BW, VL, DQ, VNNI) kernel translation units; included only by files
// compiled with those target flags (see kernels.h for why).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace memtile::cpu::avx512 {

using detail::act_view;

void gemm_f32(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_f16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_bf16(const weight_view&, const act_view&, int64_t, float*, int64_t, int64_t, int64_t);

// Prefill of the float layouts of repack.h (32-row groups; matmul-avx512-float-x32.cpp), as kernels.h's gemm_x8_fn.
void gemm_x32_f32(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_x32_f16(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_x32_bf16(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);

// AMX (matmul-avx512-amx.cpp; only where cpu::amx_usable()): as kernels.h's gemm_x8_fn for the Q8_0, Q4_0 and
// K-quant x8 layouts, over the whole tiles of 16 tokens in [t0, t1) (the caller takes the rest).
void gemm_q8_0_amx(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q4_0_amx(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q4_k_amx(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q5_k_amx(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
void gemm_q6_k_amx(const uint8_t*, size_t, const act_view&, int64_t, int64_t, float*, int64_t, int64_t, int64_t);

// 16 consecutive float-format elements widened to f32 (exact): vec a whole vector, masked the first lanes of m.
struct f32_loader {
    static __m512 vec(const uint8_t* p) { return _mm512_loadu_ps(p); }
    static __m512 masked(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
    static constexpr int bytes = 4;
};

struct f16_loader {
    static __m512 vec(const uint8_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static __m512 masked(const uint8_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
    static constexpr int bytes = 2;
};

// bf16 is the top half of an f32: widen to 32 bits and shift into place.
struct bf16_loader {
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 vec(const uint8_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static __m512 masked(const uint8_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
    static constexpr int bytes = 2;
};

}  // namespace memtile::cpu::avx512
