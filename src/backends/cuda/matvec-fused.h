// Decode matvec of the float formats with SwiGLU in its epilogue (matvec-fused.cu): bit-equal to the gate/up product
// followed by swiglu_kernel.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// F16/BF16 with n_in % 8 == 0 and an even n_out.
bool matvec_glu_supported(const gpu_weight& w);
// w = [gate; up] ([2 n_ff, n_in]), x [n_in] f32: h[i] = silu(gate_i . x) * (up_i . x), h [n_ff] f32.
void launch_matvec_glu(const gpu_weight& w, const float* x, float* h, cudaStream_t s);

}  // namespace memtile::cuda
