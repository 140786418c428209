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

}  // namespace memtile::cpu::avx512
