// Q4_K_M decode products in other launch forms (matvec-qkm.cu; docs/cuda-decode-log.md "Session 7 (branch gqkm)",
// "Session 8 (branch gkq8)"):
// bit-equal to launch_matvec of each matrix. `bits`: the decode fusion mask (cuda-backend.h).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/qkm-bits.h"

namespace memtile::cuda {

// a Q4_K, b Q6_K of one n_in (% 256 == 0), at their default shapes' warps per row (2 and 1).
bool matvec_pair_supported(const gpu_weight& a, const gpu_weight& b);
// ya = a x ([a.n_out]), yb = b x ([b.n_out]) in one launch; x quantized with q_block 256 (xq, xd, xs as launch_matvec
// reads them). bits: the k_qkm_pair_* variants (qkm-bits.h).
void launch_matvec_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const int8_t* xq,
                        const float* xd, const float* xs, unsigned bits, cudaStream_t s);
// launch_matvec's product by the alternative Q4_K or Q6_K kernel that `bits` selects for w (the other k_qkm bits of
// qkm-bits.h); false (nothing launched) where none does.
bool launch_matvec_qkm(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, unsigned bits, cudaStream_t s);

}  // namespace memtile::cuda
