// Decode matvecs with a fused epilogue, float formats (F16, BF16, F32); see matvec-ep.cu.
#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda::detail {

bool launch_matvec_float_ep(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                            float* y, bool accumulate, matvec_shape shape, const matvec_epilogue& ep, cudaStream_t s) {
    switch (w.type) {
        case dtype::f16: return launch_shaped_ep<dtype::f16>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        case dtype::bf16: return launch_shaped_ep<dtype::bf16>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        default: return launch_shaped_ep<dtype::f32>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
    }
}

}  // namespace memtile::cuda::detail
