// Decode matvec of the float formats (F16, BF16) with SwiGLU in its epilogue (docs/cuda.md, "Session 6 (branch
// gfu)"): the block's two rows are gate row p and up row p + n_ff, and its first thread writes silu(gate) * up
// (swiglu_kernel's expression), so the SwiGLU kernel and its kernel boundary disappear where the down matrix reads f32.
// No last-block tail, and a separate instantiation, so that matvec-common.cuh's kernels keep their registers. The dot
// products are the plain 2 rows x 4 warps kernel's (the same task order and sums): bit-equal to the two kernels.
#include "backends/cuda/matvec-fused.h"

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

// Block p: rows p and p + n_out / 2, 4 warps; thread tid takes tasks tid + 128 k of both rows, the first E loaded
// before griddep_wait. 8 blocks per SM (64 registers), as the plain kernel.
template <dtype T, int E>
__global__ void __launch_bounds__(128, 8) matvec_glu_kernel(gpu_weight w, const float* x, float* h) {
    constexpr int S = 128, R = 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int64_t p = blockIdx.x, n_ff = w.n_out / 2;
    const int n_tasks = int(w.n_in) / 8;
    const uint8_t* q[R] = {w.q + p * w.q_row_bytes, w.q + (p + n_ff) * w.q_row_bytes};
    float acc[R] = {0, 0};
    const float4* x4 = reinterpret_cast<const float4*>(x);
    auto load = [&](int t, task_weights<R, 1>& tw) {
#pragma unroll
        for (int r = 0; r < R; r++) tw.w[r][0] = load_stream(q[r] + 16 * t);
    };
    auto dot = [&](const task_weights<R, 1>& tw, int t) {
        const float4 x0 = __ldg(x4 + 2 * t), x1 = __ldg(x4 + 2 * t + 1);
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] += T == dtype::f16 ? dot8_f16(tw.w[r][0], x0, x1) : dot8_bf16(tw.w[r][0], x0, x1);
    };
    run_tasks<E, S, 4, task_weights<R, 1>>(tid, n_tasks, load, dot);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = warp_sum(acc[r]);
    __shared__ float part[k_block_warps][R];
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++) part[warp][r] = v[r];
    __syncthreads();
    if (tid != 0) return;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        s[r] = 0;
#pragma unroll
        for (int k = 0; k < k_block_warps; k++) s[r] += part[k][r];
    }
    h[p] = s[0] / (1.0f + expf(-s[0])) * s[1];
}

template <dtype T>
void launch_glu_type(const gpu_weight& w, const float* x, float* h, cudaStream_t s) {
    const unsigned blocks = unsigned(w.n_out / 2);
    if (matvec_early() == 4)
        launch(matvec_glu_kernel<T, 4>, blocks, 128, s, w, x, h);
    else
        launch(matvec_glu_kernel<T, 0>, blocks, 128, s, w, x, h);
}

}  // namespace
}  // namespace detail

bool matvec_glu_supported(const gpu_weight& w) {
    return (w.type == dtype::f16 || w.type == dtype::bf16) && w.n_in % 8 == 0 && w.n_out % 2 == 0;
}

void launch_matvec_glu(const gpu_weight& w, const float* x, float* h, cudaStream_t s) {
    if (w.type == dtype::f16)
        detail::launch_glu_type<dtype::f16>(w, x, h, s);
    else
        detail::launch_glu_type<dtype::bf16>(w, x, h, s);
}

}  // namespace memtile::cuda
