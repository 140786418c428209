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

// Q8_0/Q4_0 with n_in % 32 == 0, n_out % 64 == 0 (n_ff % 32 == 0) and a default shape of 1, 2 or 4 warps per row.
bool matvec_glu_q_supported(const gpu_weight& w);
// w = [gate; up] ([2 n_ff, n_in]), x quantized in groups of 32 (xq, xd, xs as the plain matvec reads them):
// h [n_ff] f32 as launch_matvec_glu, and h quantized in groups of 32 into hq, hd, hs (the layout of cuda-kernels.h),
// bit-equal to the product of default_matvec_shape followed by swiglu_kernel at q_block 32. hq, hd, hs must not alias
// xq, xd, xs (other blocks still read them).
void launch_matvec_glu_q(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                         float* hd, float* hs, cudaStream_t s);

}  // namespace memtile::cuda
