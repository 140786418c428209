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
// NS: xq, xd, xs are norm parts in units of 256 (norm-fused.h) and nss / neps their unit sums of squares and epsilon:
// the RMSNorm scale is formed after the wait (norm_scale_units) and applied to each activation scale (task_q4k).
// The lean arguments of w (Q4_K / Q6_K); false where the 32-bit arithmetic does not cover it.
inline bool lean_args(const gpu_weight& w, kq_lean_args& a) {
    const int64_t d_row = w.type == dtype::q4_k ? 2 * q4k_side_row_words(w.n_in / 256) : w.n_in / 256;
    constexpr int64_t lim = int64_t(1) << 30;
    if (!w.d || w.n_out >= lim || w.q_row_bytes >= lim || w.n_in >= lim) return false;
    a = kq_lean_args{w.q, w.d, int(w.n_out), int(w.q_row_bytes), int(d_row), int(w.n_in)};
    return true;
}

template <dtype T, int R, int W, bool ONE, bool NS = false>
__device__ __forceinline__ void kq_lean_block(const kq_lean_args& a, int blk, const int8_t* xq, const float* xd,
                                              const float* xs, float* y, int accumulate, const float* nss = nullptr,
                                              float neps = 0) {
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
    [[maybe_unused]] float sc = 1.0f;
    if constexpr (NS) sc = norm_scale_units(nss, a.n_in, neps, lane);
    if constexpr (T == dtype::q4_k) {
        const int n = a.n_in >> 6;
        if constexpr (ONE) {
            if (tid < n) task_q4k<R, NS>(q, d, xq, xd, xs, tid, tid & 3, acc, sc);
        } else {
#pragma unroll 2
            for (int t = tid; t < n; t += S) task_q4k<R, NS>(q, d, xq, xd, xs, t, tid & 3, acc, sc);
        }
    } else {
        const int n = a.n_in >> 7;
        if constexpr (ONE) {
            if (tid < n) task_q6_k<R, NS>(q, d, xq, xd, tid, n, acc, sc);
        } else {
#pragma unroll 2
            for (int t = tid; t < n; t += S) task_q6_k<R, NS>(q, d, xq, xd, t, n, acc, sc);
        }
    }
    store_row_sums<R, W, int>(acc, warp, lane, group, tid, row0, a.n_out, y, accumulate);
}

}  // namespace memtile::cuda::detail
