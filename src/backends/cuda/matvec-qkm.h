// Q4_K_M decode products in other launch forms (matvec-qkm.cu; docs/cuda-decode-log.md "Session 7 (branch gqkm)"):
// bit-equal to launch_matvec of each matrix. `bits`: the decode fusion mask (cuda-backend.h).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// a Q4_K, b Q6_K of one n_in (% 256 == 0), at their default shapes' warps per row (2 and 1).
bool matvec_pair_supported(const gpu_weight& a, const gpu_weight& b);
// ya = a x ([a.n_out]), yb = b x ([b.n_out]) in one launch; x quantized with q_block 256 (xq, xd, xs as launch_matvec
// reads them). bits 64: b's blocks after a's (else before); 128: b at 2 rows per warp (else 1); 2048: no register cap;
// 32768 with 128: a at 4 rows per group.
void launch_matvec_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const int8_t* xq,
                        const float* xd, const float* xs, unsigned bits, cudaStream_t s);
// launch_matvec's product with an alternative Q4_K kernel where `bits` selects one for w (n_in < 8,192 at 4 rows x 2
// warps: 256 where n_out > 8,192, 1024 where n_out <= 8,192, 65536 where n_in >= 8,192; 512: n_in >= 8,192 with 4 tasks
// per thread in flight; 4096: the other Q4_K ones at 1 row x 2 warps; 16384: gate/up in loops over row pairs; 262144:
// gate/up at 3 x 2) or Q6_K kernel (4 warps per row; 8192: at 64 registers, 131072: 3 rows per block); false (nothing
// launched) otherwise.
bool launch_matvec_qkm(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, unsigned bits, cudaStream_t s);

}  // namespace memtile::cuda
