// Early-load plans of the Q8_0 Wo and Q/K/V products of the decode step (matvec-plan.cu; set_early_plan in
// cuda-backend.h, docs/cuda-decode-log.md "Session 10 (branch gq8a10)"): how many of a thread's tasks each block loads
// before its PDL wait, chosen per block, optionally after a short sleep, instead of the early level of every block.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda::detail {

// The plan's kernel for a Q8_0 product of the decode step where a plan is set for its class (Wo: n_in < 8,192,
// n_out <= n_in; Q/K/V: n_in < 8,192, n_in < n_out <= 3 n_in) and `shape` is that class's default (Wo 2 x 2, Q/K/V
// 1 x 1): launched and true; else false (the caller launches the plain kernel). Bit-equal to matvec_kernel.
bool launch_q8_0_planned(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate,
                         matvec_shape shape, cudaStream_t s);

}  // namespace memtile::cuda::detail
