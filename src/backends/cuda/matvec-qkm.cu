// Decode products of Q4_K_M files in other launch forms than matvec-common.cuh's one-matrix kernel
// (docs/cuda-decode-log.md, "Session 7 (branch gqkm)"), all bit-equal to it: every row's tasks, their order and the
// warp sums are those of the plain kernel at the same warps per row W (R, the rows sharing the activation loads, and
// the unrolling do not change a row's sums). Selected by bits of the decode fusion mask (qkm-bits.h):
// - k_qkm_pair: Q/K (Q4_K, 2 x 2) and V (Q6_K, W = 1) of a layer whose V has another type in one launch, blocks picking
//   their matrix by block index: the small V product (1,024 rows, 128 blocks at 6 % occupancy alone) no longer runs
//   alone, and one kernel boundary goes. Variants: k_qkm_pair_v_last (V blocks after the Q/K blocks instead of before),
//   k_qkm_pair_v2 (V at 2 rows per warp instead of 1: 80 registers), k_qkm_pair_nocap (V at 1 row per warp without the
//   cap of 64 registers: 72), k_qkm_pair_qk4 with v2 (Q/K at 4 rows x 2 warps).
// - k_qkm_small_4x2 / k_qkm_gate_up_4x2 / k_qkm_down_4x2: Q4_K products with n_out <= 8,192 and n_in < 8,192 (Wo,
// Q/K/V)
//   / n_out > 8,192 (gate/up) / n_in >= 8,192 (down) at 4 rows x 2 warps (the activation loads shared by 4 rows, 4
//   rows' loads in flight per thread); k_qkm_gate_up_3x2: gate/up at 3 x 2.
// - k_qkm_down_u4: Q4_K down at 2 x 2 with the task loop unrolled by 4 (every task of a thread in flight at once: 224
//   tasks per row over 64 threads).
// - k_qkm_all_1x2: the other Q4_K products at 1 row x 2 warps (twice the blocks, fewer registers).
// - k_qkm_q6_down_64: Q6_K products of 4 warps per row (down) capped at 64 registers (8 blocks per SM instead of 6);
//   k_qkm_q6_down_3: at 3 rows per block (1,366 blocks for 4,096 rows: ~2 waves at 5 blocks per SM instead of 2.6 at
//   6).
// - k_qkm_gate_up_loop: Q4_K gate/up (n_in <= 4,096, n_out > 8,192) in loops over row pairs, one block per resident
//   slot (matvec_q4k_loop_kernel).
// - k_qkm_lean_q4k / k_qkm_lean_q6k / k_qkm_lean_pair (session 8): the products at their default shapes / the pair in
//   matvec_kq_lean_kernel / matvec_pair_lean_kernel (32-bit index arithmetic, host constants, no task loop for one
//   task per thread: Q6_K 52 registers instead of 76-80, the pair 48 instead of 80). Q6_K and the pair default on.
#include "backends/cuda/matvec-qkm.h"

#include "backends/cuda/matvec-lean.cuh"
#include "backends/cuda/matvec-q4k.cuh"
#include "backends/cuda/matvec-q6k.h"

namespace memtile::cuda {
namespace detail {
namespace {

// Block `blk` of a K-format product (T = Q4_K or Q6_K): the body of matvec_kernel<T, R, W> with the task loop unrolled
// by U. y[row] (+)= the row's sum, rows past n_out not stored.
template <dtype T, int R, int W, int U>
__device__ __forceinline__ void kq_block(const gpu_weight& w, int64_t blk, const int8_t* xq, const float* xd,
                                         const float* xs, float* y, int accumulate) {
    constexpr int S = 32 * W, G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int64_t row0 = (blk * G + group) * R;
    const int n_in = int(w.n_in);
    const int64_t d_row = T == dtype::q6_k ? n_in / 256 : 2 * q4k_side_row_words(n_in / 256);
    const uint8_t* q[R];
    const uint16_t* d[R];
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = min(row0 + r, w.n_out - 1);
        q[r] = w.q + row * w.q_row_bytes;
        d[r] = w.d + row * d_row;
        acc[r] = 0;
    }
    griddep_wait();
    griddep_launch();
    if constexpr (T == dtype::q4_k) {
#pragma unroll U
        for (int t = tid; t < n_in / 64; t += S) task_q4k<R>(q, d, xq, xd, xs, t, tid & 3, acc);
    } else {
#pragma unroll U
        for (int t = tid; t < n_in / 128; t += S) task_q6_k<R>(q, d, xq, xd, t, n_in / 128, acc);
    }
    store_row_sums<R, W>(acc, warp, lane, group, tid, row0, w.n_out, y, accumulate);
}

template <int R, int W>
constexpr int64_t rows_per_block() {
    return int64_t(R) * (k_block_warps / W);
}

template <dtype T, int R, int W, bool ONE>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_kq_lean_kernel(kq_lean_args a, const int8_t* xq, const float* xd, const float* xs, float* y,
                          int accumulate) {
    kq_lean_block<T, R, W, ONE>(a, int(blockIdx.x), xq, xd, xs, y, accumulate);
}
// The pair launch (matvec_pair_kernel<2, 2, true, 0>: V blocks first) with lean blocks where each thread has one task
// in both matrices (k_qkm_lean_pair).
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_pair_lean_kernel(kq_lean_args a, float* ya, kq_lean_args b, float* yb, int nb, const int8_t* xq,
                            const float* xd, const float* xs) {
    const int blk = int(blockIdx.x);
    if (blk < nb)
        kq_lean_block<dtype::q6_k, 2, 1, true>(b, blk, xq, xd, xs, yb, 0);
    else
        kq_lean_block<dtype::q4_k, 2, 2, true>(a, blk - nb, xq, xd, xs, ya, 0);
}

// The lean pair with its Q/K blocks in lane pairs (k_q4k_pair_launch of set_q4k_matvec, matvec-q4k.cuh; n_in <=
// 4,096).
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_pair_q4k_kernel(q4k_args a, float* ya, kq_lean_args b, float* yb, int nb, const int8_t* xq, const float* xd,
                           const float* xs) {
    const int blk = int(blockIdx.x);
    if (blk < nb)
        kq_lean_block<dtype::q6_k, 2, 1, true>(b, blk, xq, xd, xs, yb, 0);
    else
        q4k_lp_block<true>(a, blk - nb, xq, xd, xs, ya, 0);
}

// matvec_kq_lean_kernel at w's default shape (R = 2; W = 2 for Q4_K, 1 or 4 for Q6_K); false where the 32-bit
// arithmetic does not cover w.
bool launch_lean(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y, bool accumulate,
                 cudaStream_t s) {
    const matvec_shape shape = default_matvec_shape(w);
    kq_lean_args a;
    if (shape.rows != 2 || !lean_args(w, a)) return false;
    const int acc = accumulate ? 1 : 0;
    const int task_elems = w.type == dtype::q4_k ? 64 : 128;
    const bool one = w.n_in / task_elems <= 32 * shape.warps;
    const unsigned blocks =
        unsigned((w.n_out + 2 * (k_block_warps / shape.warps) - 1) / (2 * (k_block_warps / shape.warps)));
    auto go = [&](auto kernel) {
        launch(kernel, blocks, 32 * k_block_warps, s, a, xq, xd, xs, y, acc);
        return true;
    };
    if (w.type == dtype::q4_k && shape.warps == 2)
        return one ? go(matvec_kq_lean_kernel<dtype::q4_k, 2, 2, true>)
                   : go(matvec_kq_lean_kernel<dtype::q4_k, 2, 2, false>);
    if (w.type == dtype::q6_k && shape.warps == 4)
        return one ? go(matvec_kq_lean_kernel<dtype::q6_k, 2, 4, true>)
                   : go(matvec_kq_lean_kernel<dtype::q6_k, 2, 4, false>);
    if (w.type == dtype::q6_k && shape.warps == 1)
        return one ? go(matvec_kq_lean_kernel<dtype::q6_k, 2, 1, true>)
                   : go(matvec_kq_lean_kernel<dtype::q6_k, 2, 1, false>);
    return false;
}

// a: Q4_K at RA x 2 (ya), b: Q6_K at RB x 1 (yb); the first nb blocks take b when B_FIRST, else the last nb.
// MINB 8 caps the registers at 64 (8 blocks of 4 warps per SM, the Q4_K kernel's occupancy); 0: no cap.
template <int RA, int RB, bool B_FIRST, int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_pair_kernel(gpu_weight a, float* ya, gpu_weight b, float* yb, int64_t nb, const int8_t* xq, const float* xd,
                       const float* xs) {
    const int64_t blk = blockIdx.x;
    const int64_t na = int64_t(gridDim.x) - nb;
    const bool is_b = B_FIRST ? blk < nb : blk >= na;
    if (is_b)
        kq_block<dtype::q6_k, RB, 1, 2>(b, B_FIRST ? blk : blk - na, xq, xd, xs, yb, 0);
    else
        kq_block<dtype::q4_k, RA, 2, 2>(a, B_FIRST ? blk - nb : blk, xq, xd, xs, ya, 0);
}

// MINB as matvec_pair_kernel: 4 x 2 takes 79 registers (a cap at 64 spilled 156 bytes), 2 x 2 unrolled by 4 fits 64.
template <dtype T, int R, int W, int U, int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_kq_kernel(gpu_weight w, const int8_t* xq, const float* xd, const float* xs, float* y, int accumulate) {
    kq_block<T, R, W, U>(w, blockIdx.x, xq, xd, xs, y, accumulate);
}

// Q4_K with n_in <= 4,096 (one task per thread and row at 2 x 2) in loops over row pairs: group g of block b takes the
// pairs 2 b + g, 2 b + g + 2 gridDim.x, ... (rows 2p, 2p + 1; W = 2 warps per pair as the plain kernel, so the same
// sums). A thread's task, hence its activations, is the same for every pair: loaded once, not once per pair as the
// plain kernel's 7,168 blocks of gate/up do; the next pair's weights are loaded before the current pair's arithmetic.
// The two warps of a group exchange their sums through shared memory (double-buffered by iteration) behind a named
// barrier of 64 threads, since the groups of a block may run different numbers of pairs.
struct q4k_pair_weights {
    int4 w0[2], w1[2];
    uint32_t sm[2], dm[2];
};
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q4k_loop_kernel(gpu_weight w, const int8_t* xq, const float* xd, const float* xs, float* y, int accumulate) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp >> 1;
    const int tid = (warp & 1) * 32 + lane;
    const int n_in = int(w.n_in);
    const bool active = tid < n_in / 64;
    const int b = tid >> 2, c = tid & 3;
    const int64_t n_pairs = (w.n_out + 1) / 2, stride = 2 * int64_t(gridDim.x);
    const int64_t d_row = 2 * q4k_side_row_words(n_in / 256);
    auto load = [&](int64_t p, q4k_pair_weights& o) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = min(2 * p + r, w.n_out - 1);
            const uint8_t* q = w.q + row * w.q_row_bytes + b * 128 + 32 * c;
            const uint32_t* side = reinterpret_cast<const uint32_t*>(w.d + row * d_row);
            o.w0[r] = load_stream(q);
            o.w1[r] = load_stream(q + 16);
            o.sm[r] = __ldg(side + q4k_sm_word(b) + c);
            o.dm[r] = __ldg(side + q4k_dm_word(b));
        }
    };
    __shared__ float part[2][k_block_warps][2];
    griddep_wait();
    griddep_launch();
    int4 a0 = make_int4(0, 0, 0, 0), a1 = a0, a2 = a0, a3 = a0;
    float ad = 0;
    float2 as = make_float2(0, 0);
    if (active) {
        const int8_t* ax = xq + b * 256 + 64 * c;
        a0 = load_act(ax);
        a1 = load_act(ax + 16);
        a2 = load_act(ax + 32);
        a3 = load_act(ax + 48);
        ad = xd[b * 8 + 2 * c];
        as = *reinterpret_cast<const float2*>(xs + b * 8 + 2 * c);
    }
    int64_t p = 2 * int64_t(blockIdx.x) + group;
    q4k_pair_weights cur{}, nxt{};
    if (active && p < n_pairs) load(p, cur);
    for (int it = 0; p < n_pairs; p += stride, it ^= 1) {
        if (active && p + stride < n_pairs) load(p + stride, nxt);
        float acc[2] = {0, 0};
        if (active) {
#pragma unroll
            for (int r = 0; r < 2; r++) {  // task_q4k's arithmetic
                int lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo = __dp4a(word(cur.w0[r], k) & 0x0f0f0f0f, word(a0, k), lo);
                    lo = __dp4a(word(cur.w1[r], k) & 0x0f0f0f0f, word(a1, k), lo);
                    hi = dp4a_us(uint32_t(word(cur.w0[r], k)) & 0xf0f0f0f0u, word(a2, k), hi);
                    hi = dp4a_us(uint32_t(word(cur.w1[r], k)) & 0xf0f0f0f0u, word(a3, k), hi);
                }
                const uint32_t sm = cur.sm[r], dm = cur.dm[r];
                const int isum = lo * int(sm & 0xffu) + ((hi * int((sm >> 8) & 0xffu)) >> 4);
                const float mn = byte_float<2>(sm) * as.x + byte_float<3>(sm) * as.y;
                const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&dm));
                acc[r] += dd.x * ad * float(isum) - dd.y * mn;
            }
        }
        float v[2];
#pragma unroll
        for (int r = 0; r < 2; r++) v[r] = warp_sum(acc[r]);
        if (lane == 0) {
            part[it][warp][0] = v[0];
            part[it][warp][1] = v[1];
        }
        if (group == 0)  // constant barrier ids (a register id makes ptxas reserve all 16)
            asm volatile("bar.sync 1, 64;" ::: "memory");
        else
            asm volatile("bar.sync 2, 64;" ::: "memory");
        if (tid < 2) {
            float sum = 0;
            sum += part[it][2 * group][tid];
            sum += part[it][2 * group + 1][tid];
            const int64_t row = 2 * p + tid;
            if (row < w.n_out) y[row] = accumulate ? y[row] + sum : sum;
        }
        cur = nxt;
    }
}

template <int RA, int RB, bool B_FIRST, int MINB>
void launch_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const int8_t* xq, const float* xd,
                 const float* xs, cudaStream_t s) {
    const int64_t pa = rows_per_block<RA, 2>(), pb = rows_per_block<RB, 1>();
    const int64_t na = (a.n_out + pa - 1) / pa, nb = (b.n_out + pb - 1) / pb;
    launch(matvec_pair_kernel<RA, RB, B_FIRST, MINB>, unsigned(na + nb), 32 * k_block_warps, s, a, ya, b, yb, nb, xq,
           xd, xs);
}

}  // namespace
}  // namespace detail

using namespace detail;

bool matvec_pair_supported(const gpu_weight& a, const gpu_weight& b) {
    // The plain kernel's warps per row (Q4_K 2, Q6_K 1), so that the pair is bit-equal to the two launches.
    return a.type == dtype::q4_k && b.type == dtype::q6_k && a.n_in == b.n_in && a.n_in % 256 == 0 &&
           default_matvec_shape(a).warps == 2 && default_matvec_shape(b).warps == 1;
}

void launch_matvec_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const int8_t* xq,
                        const float* xd, const float* xs, unsigned bits, cudaStream_t s) {
    const bool b_last = bits & k_qkm_pair_v_last;
    if ((bits & k_qkm_pair_qk4) && (bits & k_qkm_pair_v2)) {  // Q/K at 4 x 2, V 2 x 1, V first
        return launch_pair<4, 2, true, 0>(a, ya, b, yb, xq, xd, xs, s);
    }
    kq_lean_args la, lb;
    if ((bits & k_qkm_lean_pair) && (bits & k_qkm_pair_v2) && !b_last && !(bits & k_qkm_pair_qk4) && a.n_in <= 4096 &&
        lean_args(a, la) && lean_args(b, lb)) {  // n_in <= 4,096: Q4_K <= 64 tasks over 2 warps, Q6_K <= 32 over 1
        const int na = int((a.n_out + 3) / 4), nb = int((b.n_out + 7) / 8);
        const int q4k = q4k_matvec_mode();
        q4k_args qa;
        if ((q4k & k_q4k_lane_pairs) && (q4k & k_q4k_pair_launch) && q4k_args_of(a, qa))
            return launch(matvec_pair_q4k_kernel, unsigned(na + nb), 32 * k_block_warps, s, qa, ya, lb, yb, nb, xq, xd,
                          xs);
        return launch(matvec_pair_lean_kernel, unsigned(na + nb), 32 * k_block_warps, s, la, ya, lb, yb, nb, xq, xd,
                      xs);
    }
    if (bits & k_qkm_pair_v2) {  // V 2 x 1 without a cap: 80 registers, 6 blocks per SM (capped at 80, ptxas spilled)
        if (b_last) return launch_pair<2, 2, false, 0>(a, ya, b, yb, xq, xd, xs, s);
        return launch_pair<2, 2, true, 0>(a, ya, b, yb, xq, xd, xs, s);
    }
    if (bits & k_qkm_pair_nocap) {  // V 1 x 1 without the register cap: 72 registers, 7 blocks per SM
        if (b_last) return launch_pair<2, 1, false, 0>(a, ya, b, yb, xq, xd, xs, s);
        return launch_pair<2, 1, true, 0>(a, ya, b, yb, xq, xd, xs, s);
    }
    // V 1 x 1 at 64 registers (8 blocks per SM, the plain Q4_K kernel's occupancy; ptxas spills 16 bytes)
    if (b_last) return launch_pair<2, 1, false, 8>(a, ya, b, yb, xq, xd, xs, s);
    launch_pair<2, 1, true, 8>(a, ya, b, yb, xq, xd, xs, s);
}

bool launch_matvec_qkm(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, unsigned bits, cudaStream_t s) {
    if (w.n_in % 256 != 0) return false;
    // The lean Q6_K products at the register budgets of matvec-q6k.h (the down product's default; set_q6k_variant).
    if ((bits & k_qkm_lean_q6k) && launch_q6k_lean(w, xq, xd, y, accumulate, s)) return true;
    const int acc = accumulate ? 1 : 0;
    auto run = [&](auto kernel, int64_t rows_per_block) {
        launch(kernel, unsigned((w.n_out + rows_per_block - 1) / rows_per_block), 32 * k_block_warps, s, w, xq, xd, xs,
               y, acc);
        return true;
    };
    const int warps = default_matvec_shape(w).warps;
    if ((bits & (w.type == dtype::q4_k ? k_qkm_lean_q4k : k_qkm_lean_q6k)) &&
        (w.type == dtype::q4_k || w.type == dtype::q6_k) && launch_lean(w, xq, xd, xs, y, accumulate, s))
        return true;
    if (w.type == dtype::q6_k && warps == 4 && (bits & k_qkm_q6_down_3))
        return run(matvec_kq_kernel<dtype::q6_k, 3, 4, 2, 0>, rows_per_block<3, 4>());
    if (w.type == dtype::q6_k && warps == 4 && (bits & k_qkm_q6_down_64))
        return run(matvec_kq_kernel<dtype::q6_k, 2, 4, 2, 8>, rows_per_block<2, 4>());
    if (w.type != dtype::q4_k || warps != 2) return false;
    if ((bits & k_qkm_gate_up_loop) && w.n_in <= 4096 && w.n_out > 8192) {
        // As many blocks as are resident at once (7 per SM at 72 registers), at most one per 2 pairs.
        static int resident = 0;
        if (!resident) {
            int sms = 0, per_sm = 0;
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_q4k_loop_kernel, 32 * k_block_warps, 0);
            resident = std::max(1, sms * per_sm);
        }
        const int64_t blocks = std::min<int64_t>((w.n_out + 3) / 4, resident);
        launch(matvec_q4k_loop_kernel, unsigned(blocks), 32 * k_block_warps, s, w, xq, xd, xs, y, acc);
        return true;
    }
    if ((bits & k_qkm_gate_up_3x2) && w.n_in < 8192 && w.n_out > 8192)
        return run(matvec_kq_kernel<dtype::q4_k, 3, 2, 2, 0>, rows_per_block<3, 2>());
    if (bits & (w.n_in >= 8192 ? k_qkm_down_4x2 : w.n_out > 8192 ? k_qkm_gate_up_4x2 : k_qkm_small_4x2))
        return run(matvec_kq_kernel<dtype::q4_k, 4, 2, 2, 0>, rows_per_block<4, 2>());
    if ((bits & k_qkm_down_u4) && w.n_in >= 8192)
        return run(matvec_kq_kernel<dtype::q4_k, 2, 2, 4, 8>, rows_per_block<2, 2>());
    if (bits & k_qkm_all_1x2) return run(matvec_kq_kernel<dtype::q4_k, 1, 2, 2, 0>, rows_per_block<1, 2>());
    return false;
}

}  // namespace memtile::cuda
