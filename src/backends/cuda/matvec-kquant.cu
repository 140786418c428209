// Decode matrix-vector kernels of the K formats (Q4_K, Q5_K, Q6_K); see matvec-common.cuh.
#include "backends/cuda/matvec-q4k.cuh"

namespace memtile::cuda::detail {

void launch_matvec_kquant(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                          float* y, bool accumulate, matvec_shape shape, cudaStream_t s) {
    switch (w.type) {
        case dtype::q4_k:
            // Staged (matvec_prefetch, k_prefetch_q4k_wo): the one task per thread of a 2 x 2 product with n_in <=
            // 4,096 (Wo) only. Else at 2 x 2 the lane pairs of matvec-q4k.cuh (set_q4k_matvec; bit-equal).
            if (shape.rows == 2 && shape.warps == 2 && w.n_in <= 4096 && (matvec_prefetch().mask & k_prefetch_q4k_wo) &&
                staged_tasks(w, shape, 0, 64) > 0)
                launch_shaped<dtype::q4_k, 0, 1>(w, x, xq, xd, xs, y, accumulate, shape, s);
            else if (!(shape.rows == 2 && shape.warps == 2 && launch_matvec_q4k(w, xq, xd, xs, y, accumulate, s)))
                launch_shaped<dtype::q4_k>(w, x, xq, xd, xs, y, accumulate, shape, s);
            break;
        case dtype::q5_k: launch_shaped<dtype::q5_k>(w, x, xq, xd, xs, y, accumulate, shape, s); break;
        default: launch_shaped<dtype::q6_k>(w, x, xq, xd, xs, y, accumulate, shape, s); break;
    }
}

}  // namespace memtile::cuda::detail
