// Q6_K decode products by the lean block at other register budgets (matvec-q6k.cu; set_q6k_variant in
// cuda-backend.h): launch_matvec's product of a Q6_K matrix, bit-equal to it and to the lean kernels of matvec-qkm.h.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// The mode of set_q6k_variant (or MEMTILE_CUDA_Q6K=MODE[,PARAM], read on the first call).
int q6k_variant_mode();
// y (+)= w x by the kernel that the mode selects for w (Q6_K whose default shape is 2 x 4 or 2 x 1 with one task per
// thread: by default the 2 x 4 products at 64 registers); false (nothing launched) where it leaves w to the lean
// kernels of matvec-qkm.h.
bool launch_q6k_lean(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate, cudaStream_t s);

}  // namespace memtile::cuda
