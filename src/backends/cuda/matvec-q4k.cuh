// The Q4_K decode product in lane pairs (matvec-q4k.cu, the pair launch of matvec-qkm.cu), bit-equal to the plain 2 x 2
// kernel of matvec-common.cuh (docs/cuda-decode-log.md, "Session 10 (branch gq4k10)").
//
// The plain kernel's lane l of warp j (of the two warps of a row) takes tasks 32 j + l + 64 k and reads each task's 32
// quant bytes as two 16-byte loads at a 32-byte stride across the warp (each load instruction touches 1,024 bytes and
// uses half of every sector). Here lanes 2m and 2m + 1 take piece 0 and 1 (bytes 0..15, 16..31) of the warp's tasks m
// and m + 16, so each load instruction reads 512 contiguous bytes. A piece's integer sum lo sc0 + (hi sc1) >> 4 is
// exact and the two pieces' sums add to the task's (hi is a multiple of 16 in both), so one shuffle gives lane 2m + p
// the integer sum of task m + 16p, whose float term it adds as the plain lane m + 16p does (the same expression, in the
// same order over k). The plain warp sum's steps (lane offsets 16, 8, 4, 2, 1) are then the offsets 1, 16, 8, 4, 2
// here, and the two warps' sums meet in shared memory in warp order as in the plain kernel.
#pragma once

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda::detail {

// Bits of set_q4k_matvec's mode (cuda-backend.h). Bits 1, 4 and 16 were forms measured slower and removed.
constexpr int k_q4k_lane_pairs = 2;
constexpr int k_q4k_short_only = 8;    // only where n_in <= 4,096 (not the down product)
constexpr int k_q4k_pair_launch = 32;  // also the Q/K of the pair launch (matvec-qkm.cu)
// The lane-pair kernel's (gate/up, Wo, down) first step of weights loaded before the PDL wait, after a sleep of
// (mode >> k_q4k_delay_shift) x 250 ns from the block's start, so that the loads need not queue ahead of the latency-
// bound predecessor's (RMSNorm, attention, SwiGLU) on the same SMs (docs/cuda-log-s32-s35.md, "Session 33").
constexpr int k_q4k_early = 64;
constexpr int k_q4k_delay_shift = 8;
int q4k_matvec_mode();
// w through the lane-pair kernel (matvec-q4k.cu); false where the mode has no k_q4k_lane_pairs or does not cover w
// (then the plain kernel runs).
bool launch_matvec_q4k(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, cudaStream_t s);

// A Q4_K matrix with 32-bit strides: row r's quants at q + r row_bytes, its side words (cuda-kernels.h) at side + r
// side_row.
struct q4k_args {
    const uint8_t* q;
    const uint32_t* side;
    int n_out, row_bytes, side_row, n_in;
};
// false where w is not Q4_K in the device layout or the 32-bit arithmetic does not cover it.
inline bool q4k_args_of(const gpu_weight& w, q4k_args& a) {
    constexpr int64_t lim = int64_t(1) << 30;
    if (w.type != dtype::q4_k || !w.d || w.n_in % 256 != 0 || w.n_in >= lim || w.n_out >= lim || w.q_row_bytes >= lim)
        return false;
    a = q4k_args{w.q,
                 reinterpret_cast<const uint32_t*>(w.d),
                 int(w.n_out),
                 int(w.q_row_bytes),
                 int(q4k_side_row_words(w.n_in / 256)),
                 int(w.n_in)};
    return true;
}

// The integer sum lo sc0 + (hi sc1) >> 4 of one 16-byte piece w of a Q4_K task: low nibbles against al, high nibbles
// masked in place against ah; sm: the task's scale word.
__device__ __forceinline__ int q4k_piece_isum(const int4& w, uint32_t sm, const int4& al, const int4& ah) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo = __dp4a(word(w, k) & 0x0f0f0f0f, word(al, k), lo);
        hi = dp4a_us(uint32_t(word(w, k)) & 0xf0f0f0f0u, word(ah, k), hi);
    }
    return lo * int(sm & 0xffu) + ((hi * int((sm >> 8) & 0xffu)) >> 4);
}
// q4k_accumulate's float term of a task from its integer sum (the same expression).
__device__ __forceinline__ void q4k_finish(int isum, uint32_t sm, uint32_t dm, float2 as, float ad, float& acc) {
    const float mn = byte_float<2>(sm) * as.x + byte_float<3>(sm) * as.y;
    const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&dm));  // d, dmin
    acc += dd.x * ad * float(isum) - dd.y * mn;
}

// A lane's loaded step: piece p of tasks A = m and B = m + 16 of its warp's 32 (w0 = A's, w1 = B's) for the two rows,
// sa / sb their scale words, dm the d/dmin word of the task it owns (A for p = 0, B for p = 1).
struct q4k_lp_step {
    int4 w0[2], w1[2];
    uint32_t sa[2], sb[2], dm[2];
};

// Block blk of the product: 4 warps, 2 groups of 2 rows (rows 2 (2 blk + g), + 1), 2 warps per row (warp j of a row:
// the plain kernel's tasks 32 j + l + 64 k); y[row] (+)= the row's sum, rows past n_out repeat the last one and are not
// stored. ONE: at most one step (n_in <= 4,096). The code of the first form measured (H200 run 1); a leaner rewrite
// (per-lane base pointers, the task count known at compile time) was faster from L2 but slower from DRAM and in the
// step (docs/cuda-decode-log.md, "Session 10 (branch gq4k10)").
// NS: xq, xd, xs are norm parts in units of 256 (norm-fused.h), nss / neps their unit sums of squares and epsilon:
// the RMSNorm scale is formed after the first weight loads are issued and applied as task_q4k's NS form does.
// EARLY: the first step's weights are loaded before the PDL wait, after a sleep of delay_ns (0: none).
template <bool ONE, bool NS = false, bool EARLY = false>
__device__ __forceinline__ void q4k_lp_block(const q4k_args& a, int blk, const int8_t* xq, const float* xd,
                                             const float* xs, float* y, int accumulate, const float* nss = nullptr,
                                             float neps = 0, unsigned delay_ns = 0) {
    constexpr int R = 2;
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), group = warp >> 1;
    const int j = warp & 1;  // the row's warp
    const int row0 = (blk * 2 + group) * R;
    const int n = a.n_in >> 6;  // tasks per row
    const uint8_t* q[R];
    const uint32_t* side[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        q[r] = a.q + size_t(row) * unsigned(a.row_bytes);
        side[r] = a.side + size_t(row) * unsigned(a.side_row);
    }
    const int m = lane >> 1, p = lane & 1;
    auto task_a = [&](int k) { return 32 * j + 64 * k + m; };  // task A of step k; B = A + 16
    auto load = [&](int k, q4k_lp_step& st) {
        const int ta = task_a(k), tb = ta + 16, to = p ? tb : ta;
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (ta < n) {
                st.w0[r] = load_stream(q[r] + 32 * ta + 16 * p);
                st.sa[r] = __ldg(side[r] + q4k_sm_word(ta >> 2) + (ta & 3));
            }
            if (tb < n) {
                st.w1[r] = load_stream(q[r] + 32 * tb + 16 * p);
                st.sb[r] = __ldg(side[r] + q4k_sm_word(tb >> 2) + (tb & 3));
            }
            if (to < n) st.dm[r] = __ldg(side[r] + q4k_dm_word(to >> 2));
        }
    };
    float acc[R] = {0, 0};
    [[maybe_unused]] float sc = 1.0f;
    auto compute = [&](int k, const q4k_lp_step& st) {
        const int ta = task_a(k), tb = ta + 16, to = p ? tb : ta;
        if (32 * j + 64 * k >= n) return;  // warp-uniform (the shuffles below need every lane)
        const int4 z = make_int4(0, 0, 0, 0);
        const int4 aal = ta < n ? load_act(xq + 64 * ta + 16 * p) : z,
                   aah = ta < n ? load_act(xq + 64 * ta + 16 * p + 32) : z;
        const int4 bal = tb < n ? load_act(xq + 64 * tb + 16 * p) : z,
                   bah = tb < n ? load_act(xq + 64 * tb + 16 * p + 32) : z;
        const int g = (to >> 2) * 8 + 2 * (to & 3);
        const float ad0 = to < n ? xd[g] : 0.0f;
        float2 as = to < n ? *reinterpret_cast<const float2*>(xs + g) : make_float2(0, 0);
        const float ad = NS ? __fmul_rn(ad0, sc) : ad0;
        if constexpr (NS) as = make_float2(__fmul_rn(ad, as.x), __fmul_rn(ad, as.y));
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int ia = ta < n ? q4k_piece_isum(st.w0[r], st.sa[r], aal, aah) : 0;
            const int ib = tb < n ? q4k_piece_isum(st.w1[r], st.sb[r], bal, bah) : 0;
            const int other = __shfl_xor_sync(0xffffffffu, p ? ia : ib, 1);
            if (to < n) q4k_finish((p ? ib : ia) + other, p ? st.sb[r] : st.sa[r], st.dm[r], as, ad, acc[r]);
        }
    };
    q4k_lp_step st0;
    if constexpr (EARLY) {
        if (delay_ns) __nanosleep(delay_ns);
        load(0, st0);  // weights only: nothing the predecessor writes
    }
    griddep_wait();
    griddep_launch();
    {
        if constexpr (!EARLY) load(0, st0);
        if constexpr (NS) sc = norm_scale_units(nss, a.n_in, neps, lane);
        compute(0, st0);
    }
    if constexpr (!ONE) {
#pragma unroll 2
        for (int k = 1; 32 * j + 64 * k < n; k++) {
            q4k_lp_step st;
            load(k, st);
            compute(k, st);
        }
    }
    // The plain lane l's sum is in lane 2 (l % 16) + l / 16: its warp sum by the offsets 1, 16, 8, 4, 2, the first
    // step transposed over the two rows (row r ends in the lanes whose bit 0 is r).
    const bool up = lane & 1;
    float sum = (up ? acc[1] : acc[0]) + __shfl_xor_sync(0xffffffffu, up ? acc[0] : acc[1], 1);
    constexpr int o[4] = {16, 8, 4, 2};
#pragma unroll
    for (int s = 0; s < 4; s++) sum += __shfl_xor_sync(0xffffffffu, sum, o[s]);
    __shared__ float part[k_block_warps][R];
    if (lane < R) part[warp][lane] = sum;
    __syncthreads();
    const int tid = 32 * j + lane;
    if (tid >= R) return;
    float s = 0;
    s += part[2 * group][tid];
    s += part[2 * group + 1][tid];
    if (row0 + tid < a.n_out) y[row0 + tid] = accumulate ? y[row0 + tid] + s : s;
}

}  // namespace memtile::cuda::detail
