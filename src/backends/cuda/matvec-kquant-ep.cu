// Decode matvecs with a fused epilogue, K formats (Q4_K, Q5_K, Q6_K); see matvec-ep.cu.
#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda::detail {

bool launch_matvec_kquant_ep(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                             float* y, bool accumulate, matvec_shape shape, const matvec_epilogue& ep, cudaStream_t s) {
    switch (w.type) {
        case dtype::q4_k: return launch_shaped_ep<dtype::q4_k>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        case dtype::q5_k: return launch_shaped_ep<dtype::q5_k>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
        default: return launch_shaped_ep<dtype::q6_k>(w, x, xq, xd, xs, y, accumulate, shape, ep, s);
    }
}

}  // namespace memtile::cuda::detail
