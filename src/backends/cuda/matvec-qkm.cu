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
#include "backends/cuda/matvec-qkm.h"

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

// Q4_K tasks in lane pairs (k_qkm_q4k_half), bit-equal to task_q4k's loop: the warp's 32 consecutive tasks base + j
// read 1 KB of quants (task t at byte 32 t of the row), which task_q4k's two 16-byte loads per lane take at a 32-byte
// stride (half of every sector per load instruction). Here lane l loads piece l & 1 (bytes 16 (l & 1) ..) of tasks
// base + l / 2 (A: bytes 16 l ..) and base + 16 + l / 2 (B: 512 + 16 l ..), so each load instruction reads 512
// contiguous bytes, and the activations of those half tasks likewise. A half task's integer sum lo sc0 + (hi sc1 >> 4)
// is exact and the two halves add to task_q4k's isum (hi is a multiple of 16 in both), so one shuffle gives each lane
// the whole isum of the task it owns (even lanes A, odd lanes B), whose float term (q4k_term) it adds to acc: lane l's
// acc is then exactly lane own(l)'s acc of task_q4k's loop (the same terms in the same order), and unpermute_q4k_half
// moves it there before the warp sum. wbase: the warp's first task (its offset in the W warps of the row), S the task
// stride.
__device__ __forceinline__ int q4k_half_isum(const int4& w, const int4& al, const int4& ah, uint32_t sm) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo = __dp4a(word(w, k) & 0x0f0f0f0f, word(al, k), lo);
        hi = dp4a_us(uint32_t(word(w, k)) & 0xf0f0f0f0u, word(ah, k), hi);
    }
    return lo * int(sm & 0xffu) + ((hi * int((sm >> 8) & 0xffu)) >> 4);
}
template <int R, int S, int U>
__device__ __forceinline__ void q4k_half_tasks(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R],
                                               const int8_t* xq, const float* xd, const float* xs, int wbase, int n,
                                               float (&acc)[R]) {
    const int lane = threadIdx.x & 31, p = lane & 1, h = lane >> 1;
    const int own = p ? 16 + h : h;
#pragma unroll U
    for (int base = wbase; base < n; base += S) {  // warp-uniform
        const int tA = base + h, tB = base + 16 + h, tO = base + own;
        const bool vA = tA < n, vB = tB < n, vO = tO < n;
        const int4 z = make_int4(0, 0, 0, 0);
        const int4 aAl = vA ? load_act(xq + 64 * tA + 16 * p) : z, aAh = vA ? load_act(xq + 64 * tA + 32 + 16 * p) : z;
        const int4 aBl = vB ? load_act(xq + 64 * tB + 16 * p) : z, aBh = vB ? load_act(xq + 64 * tB + 32 + 16 * p) : z;
        // q4k_task_acts' ad, as of the owned task: group 2 t (8 b + 2 c)
        const float ad = vO ? xd[2 * tO] : 0.0f;
        const float2 as = vO ? *reinterpret_cast<const float2*>(xs + 2 * tO) : make_float2(0, 0);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint8_t* qp = q[r] + 32 * base + 16 * lane;
            const uint32_t* side = reinterpret_cast<const uint32_t*>(d[r]);
            const int4 wA = vA ? load_stream(qp) : z, wB = vB ? load_stream(qp + 512) : z;
            const uint32_t smA = vA ? __ldg(side + q4k_sm_word(tA >> 2) + (tA & 3)) : 0u;
            const uint32_t smB = vB ? __ldg(side + q4k_sm_word(tB >> 2) + (tB & 3)) : 0u;
            const uint32_t dm = vO ? __ldg(side + q4k_dm_word(tO >> 2)) : 0u;
            const int iA = q4k_half_isum(wA, aAl, aAh, smA), iB = q4k_half_isum(wB, aBl, aBh, smB);
            const int isum = (p ? iB : iA) + __shfl_xor_sync(0xffffffffu, p ? iA : iB, 1);
            if (vO) acc[r] += q4k_term(isum, p ? smB : smA, dm, ad, as);
        }
    }
}
// acc of q4k_half_tasks to task_q4k's lanes: lane j < 16 from lane 2 j, lane j >= 16 from lane 2 (j - 16) + 1.
__device__ __forceinline__ float unpermute_q4k_half(float v) {
    const int j = threadIdx.x & 31;
    return __shfl_sync(0xffffffffu, v, j < 16 ? 2 * j : 2 * (j - 16) + 1);
}

// Early loads of kq_block: none; each thread's first task loaded before griddep_wait (the weights are written by no
// kernel) and applied after it, in the same order (the same sums); the same where the caller guarantees at most one
// task per thread and row (no task loop: no registers held beside it).
constexpr int k_early_none = 0, k_early_first = 1, k_early_only = 2;

// Block `blk` of a K-format product (T = Q4_K or Q6_K): the body of matvec_kernel<T, R, W> with the task loop unrolled
// by U. y[row] (+)= the row's sum, rows past n_out not stored. EARLY: k_early_*. HALF (Q4_K): q4k_half_tasks.
template <dtype T, int R, int W, int U, int EARLY = k_early_none, bool HALF = false>
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
    if constexpr (T == dtype::q4_k && HALF) {
        griddep_wait();
        griddep_launch();
        q4k_half_tasks<R, S, U>(q, d, xq, xd, xs, tid - lane, n_in / 64, acc);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = unpermute_q4k_half(acc[r]);
    } else if constexpr (T == dtype::q4_k) {
        const int n = n_in / 64, c = tid & 3;
        int t = tid;
        if constexpr (EARLY != k_early_none) {
            q4k_task_weights<R> tw;
            if (t < n) load_q4k<R>(q, d, t, c, tw);
            griddep_wait();
            griddep_launch();
            if (t < n) dot_q4k<R>(tw, load_q4k_acts(xq, xd, xs, t, c), acc);
            t += S;
        } else {
            griddep_wait();
            griddep_launch();
        }
        if constexpr (EARLY != k_early_only) {
#pragma unroll U
            for (; t < n; t += S) task_q4k<R>(q, d, xq, xd, xs, t, c, acc);
        }
    } else {
        const int n = n_in / 128;
        int t = tid;
        if constexpr (EARLY != k_early_none) {
            q6k_task_weights<R> tw;
            if (t < n) load_q6_k<R>(q, d, t, n, tw);
            griddep_wait();
            griddep_launch();
            if (t < n) dot_q6_k<R>(tw, xq, xd, t, acc);
            t += S;
        } else {
            griddep_wait();
            griddep_launch();
        }
        if constexpr (EARLY != k_early_only) {
#pragma unroll U
            for (; t < n; t += S) task_q6_k<R>(q, d, xq, xd, t, n, acc);
        }
    }
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = warp_sum(acc[r]);
    if constexpr (W > 1) {
        __shared__ float part[k_block_warps][R];
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++) part[warp][r] = v[r];
        __syncthreads();
        if (tid >= R) return;
        float s = 0;
#pragma unroll
        for (int k = 0; k < W; k++) s += part[group * W + k][tid];
        if (row0 + tid < w.n_out) y[row0 + tid] = accumulate ? y[row0 + tid] + s : s;
    } else {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (row0 + r < w.n_out) y[row0 + r] = accumulate ? y[row0 + r] + v[r] : v[r];
    }
}

template <int R, int W>
constexpr int64_t rows_per_block() {
    return int64_t(R) * (k_block_warps / W);
}

// a: Q4_K at RA x 2 (ya), b: Q6_K at RB x 1 (yb); the first nb blocks take b when B_FIRST, else the last nb.
// MINB 8 caps the registers at 64 (8 blocks of 4 warps per SM, the Q4_K kernel's occupancy); 0: no cap.
// EA, EB: kq_block's early loads (k_early_*) of the a and the b blocks; HA: the a blocks in lane pairs (HALF).
template <int RA, int RB, bool B_FIRST, int MINB, int EA = k_early_none, int EB = k_early_none, bool HA = false>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_pair_kernel(gpu_weight a, float* ya, gpu_weight b, float* yb, int64_t nb, const int8_t* xq, const float* xd,
                       const float* xs) {
    const int64_t blk = blockIdx.x;
    const int64_t na = int64_t(gridDim.x) - nb;
    const bool is_b = B_FIRST ? blk < nb : blk >= na;
    if (is_b)
        kq_block<dtype::q6_k, RB, 1, 2, EB>(b, B_FIRST ? blk : blk - na, xq, xd, xs, yb, 0);
    else
        kq_block<dtype::q4_k, RA, 2, HA ? 1 : 2, EA, HA>(a, B_FIRST ? blk - nb : blk, xq, xd, xs, ya, 0);
}

// MINB as matvec_pair_kernel: 4 x 2 takes 79 registers (a cap at 64 spilled 156 bytes), 2 x 2 unrolled by 4 fits 64.
template <dtype T, int R, int W, int U, int MINB, int EARLY = k_early_none, bool HALF = false>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_kq_kernel(gpu_weight w, const int8_t* xq, const float* xd, const float* xs, float* y, int accumulate) {
    kq_block<T, R, W, U, EARLY, HALF>(w, blockIdx.x, xq, xd, xs, y, accumulate);
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

template <int RA, int RB, bool B_FIRST, int MINB, int EA = k_early_none, int EB = k_early_none, bool HA = false>
void launch_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const int8_t* xq, const float* xd,
                 const float* xs, cudaStream_t s) {
    const int64_t pa = rows_per_block<RA, 2>(), pb = rows_per_block<RB, 1>();
    const int64_t na = (a.n_out + pa - 1) / pa, nb = (b.n_out + pb - 1) / pb;
    launch(matvec_pair_kernel<RA, RB, B_FIRST, MINB, EA, EB, HA>, unsigned(na + nb), 32 * k_block_warps, s, a, ya, b,
           yb, nb, xq, xd, xs);
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
    if (bits & k_qkm_pair_v2) {  // V 2 x 1 without a cap: 80 registers, 6 blocks per SM (capped at 80, ptxas spilled)
        if ((bits & k_qkm_q4k_half) && !b_last && !(bits & k_qkm_early_small))
            return launch_pair<2, 2, true, 0, k_early_none, k_early_none, true>(a, ya, b, yb, xq, xd, xs, s);
        if ((bits & k_qkm_early_small) && !b_last && b.n_in <= 128 * 32)  // V: one task per thread
            return launch_pair<2, 2, true, 0, k_early_first, k_early_only>(a, ya, b, yb, xq, xd, xs, s);
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
    const int acc = accumulate ? 1 : 0;
    auto run = [&](auto kernel, int64_t rows_per_block) {
        launch(kernel, unsigned((w.n_out + rows_per_block - 1) / rows_per_block), 32 * k_block_warps, s, w, xq, xd, xs,
               y, acc);
        return true;
    };
    const int warps = default_matvec_shape(w).warps;
    // Early loads (k_qkm_early_*) at the default shapes: Q6_K down 2 x 4, Q6_K output 2 x 1, Q4_K 2 x 2.
    const bool down = w.n_in >= 8192, output = w.n_out > 32768, gate_up = !down && !output && w.n_out > 8192;
    if (default_matvec_shape(w).rows == 2) {
        // Q6_K: only where a row has at most one task per thread (k_early_only: no task loop, no registers beyond it).
        if (w.type == dtype::q6_k && warps == 4 && down && w.n_in <= 128 * 128 && (bits & k_qkm_early_down))
            return run(matvec_kq_kernel<dtype::q6_k, 2, 4, 2, 0, k_early_only>, rows_per_block<2, 4>());
        if (w.type == dtype::q6_k && warps == 1 && output && w.n_in <= 128 * 32 && (bits & k_qkm_early_output))
            return run(matvec_kq_kernel<dtype::q6_k, 2, 1, 2, 0, k_early_only>, rows_per_block<2, 1>());
        if (w.type == dtype::q4_k && warps == 2 &&
            (bits & (down      ? k_qkm_early_down
                     : gate_up ? k_qkm_early_gate_up
                               : k_qkm_early_small)))
            return run(matvec_kq_kernel<dtype::q4_k, 2, 2, 2, 0, k_early_first>, rows_per_block<2, 2>());
    }
    if (w.type == dtype::q6_k && warps == 4 && (bits & k_qkm_q6_down_3))
        return run(matvec_kq_kernel<dtype::q6_k, 3, 4, 2, 0>, rows_per_block<3, 4>());
    if (w.type == dtype::q6_k && warps == 4 && (bits & k_qkm_q6_down_64))
        return run(matvec_kq_kernel<dtype::q6_k, 2, 4, 2, 8>, rows_per_block<2, 4>());
    if (w.type != dtype::q4_k || warps != 2) return false;
    if ((bits & k_qkm_q4k_half) && default_matvec_shape(w).rows == 2)
        // Capped at 64 registers (8 blocks per SM as the plain kernel): unrolled by 2, ptxas spills 4 bytes (u2 bit).
        return w.n_in >= 8192 && (bits & k_qkm_q4k_half_u2)
                   ? run(matvec_kq_kernel<dtype::q4_k, 2, 2, 2, 8, k_early_none, true>, rows_per_block<2, 2>())
                   : run(matvec_kq_kernel<dtype::q4_k, 2, 2, 1, 8, k_early_none, true>, rows_per_block<2, 2>());
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
