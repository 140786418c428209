// The lean K-format block (Q4_K / Q6_K decode products with 32-bit index arithmetic), shared by matvec-qkm.cu's lean
// kernels and matvec-q6k.cu's register-budget variants, so that both run the same tasks, order and sums (bit-equal).
#pragma once

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda::detail {

// The K-format product with 32-bit index arithmetic and per-launch constants from the host (k_qkm_lean_q4k /
// k_qkm_lean_q6k): kq_block's tasks, order and sums (bit-equal), with less work outside the tasks. kq_block derives a
// row's pointers in 64-bit arithmetic from gpu_weight (clamps, the side-array stride with its divisions, the null check
// of d); for a product of one task per thread (gate/up, Wo, Q/K/V, the Q6_K down and output) that prologue and the
// unrolled loop's remainder handling are about as many instructions as the task itself (SASS of the 2 x 2 Q4_K kernel:
// ~70 before the first load, ~175 for the one task, ~30 after), and the Q4_K gate/up is half issue-busy (ncu).
// ONE: at most one task per thread and row (n_tasks <= 32 W): no loop.
struct kq_lean_args {
    const uint8_t* q;   // row r at q + r row_bytes
    const uint16_t* d;  // row r at d + r d_row (Q4_K: its side words, Q6_K: its f16 scales)
    int n_out, row_bytes, d_row, n_in;
};
template <dtype T, int R, int W, bool ONE>
__device__ __forceinline__ void kq_lean_block(const kq_lean_args& a, int blk, const int8_t* xq, const float* xd,
                                              const float* xs, float* y, int accumulate) {
    constexpr int S = 32 * W, G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int row0 = (blk * G + group) * R;
    const uint8_t* q[R];
    const uint16_t* d[R];
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        q[r] = a.q + size_t(row) * unsigned(a.row_bytes);
        d[r] = a.d + size_t(row) * unsigned(a.d_row);
        acc[r] = 0;
    }
    griddep_wait();
    griddep_launch();
    if constexpr (T == dtype::q4_k) {
        const int n = a.n_in >> 6;
        if constexpr (ONE) {
            if (tid < n) task_q4k<R>(q, d, xq, xd, xs, tid, tid & 3, acc);
        } else {
#pragma unroll 2
            for (int t = tid; t < n; t += S) task_q4k<R>(q, d, xq, xd, xs, t, tid & 3, acc);
        }
    } else {
        const int n = a.n_in >> 7;
        if constexpr (ONE) {
            if (tid < n) task_q6_k<R>(q, d, xq, xd, tid, n, acc);
        } else {
#pragma unroll 2
            for (int t = tid; t < n; t += S) task_q6_k<R>(q, d, xq, xd, t, n, acc);
        }
    }
    store_row_sums<R, W, int>(acc, warp, lane, group, tid, row0, a.n_out, y, accumulate);
}

}  // namespace memtile::cuda::detail
