// Decode matrix-vector kernels of the float formats (F16, BF16, F32); see matvec-common.cuh.
#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda::detail {

void launch_matvec_float(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                         float* y, bool accumulate, matvec_shape shape, cudaStream_t s) {
    switch (w.type) {
        case dtype::f16: launch_early<dtype::f16>(w, x, xq, xd, xs, y, accumulate, shape, s); break;
        case dtype::bf16: launch_early<dtype::bf16>(w, x, xq, xd, xs, y, accumulate, shape, s); break;
        default: launch_shaped<dtype::f32>(w, x, xq, xd, xs, y, accumulate, shape, s); break;
    }
}

}  // namespace memtile::cuda::detail
