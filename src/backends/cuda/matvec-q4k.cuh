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

// Bits of set_q4k_matvec's mode (cuda-backend.h). Bits 1 and 4 were forms measured slower and removed.
constexpr int k_q4k_lane_pairs = 2;
constexpr int k_q4k_short_only = 8;    // only where n_in <= 4,096 (not the down product)
constexpr int k_q4k_rows4 = 16;        // 4 rows per pair of warps instead of 2 (the activation loads shared by 4)
constexpr int k_q4k_pair_launch = 32;  // also the Q/K of the pair launch (matvec-qkm.cu)
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

// Block blk of the product: 4 warps, 2 groups of R rows (rows R (2 blk + g) ..), 2 warps per row; y[row] (+)= the row's
// sum, rows past n_out repeat the last one and are not stored. NT: the tasks per row (n_in / 64) when known at compile
// time (a multiple of 32: no per-lane bounds), else 0.
template <int R, int NT>
__device__ __forceinline__ void q4k_lp_block(const q4k_args& a, int blk, const int8_t* xq, const float* xd,
                                             const float* xs, float* y, int accumulate) {
    static_assert(R == 2 || R == 4, "2 or 4 rows per group");
    static_assert(NT % 32 == 0, "whole warps of tasks");
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), group = warp >> 1, j = warp & 1;
    const int row0 = (blk * 2 + group) * R;
    const int n = NT > 0 ? NT : a.n_in >> 6;
    const int m = lane >> 1, p = lane & 1;
    // Per step k (tasks base = 32 j + 64 k): piece p of task base + m at qb + 32 base, of base + m + 16 512 bytes on;
    // their scale words at sd + 20 base / 16 (+ 20), the owned task's d/dmin word 20 p + 16 + m / 4 words on; the
    // activations of task t at xq + 64 t (unit p and p + 2 of a piece p); the owned task's group scales at 2 t.
    const uint8_t* qb[R];
    const uint32_t* sd[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        qb[r] = a.q + size_t(row) * unsigned(a.row_bytes) + 16 * lane + 1024 * j;
        sd[r] = a.side + size_t(row) * unsigned(a.side_row) + 40 * j;
    }
    const int8_t* xb = xq + 64 * m + 16 * p + 2048 * j;
    const int own = m + 16 * p;
    const float* db = xd + 2 * own + 64 * j;
    const float* sb = xs + 2 * own + 64 * j;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0;
    griddep_wait();
    griddep_launch();
    auto step = [&](int k) {
        const int base = 32 * j + 64 * k;  // warp-uniform: base < n checked by the caller
        const bool va = NT > 0 || base + m<n, vb = NT> 0 || base + 16 + m < n, vo = p ? vb : va;
        const int4 z = make_int4(0, 0, 0, 0);
        int4 w0[R], w1[R];
        uint32_t sa[R], sbw[R], dm[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            w0[r] = va ? load_stream(qb[r] + 2048 * k) : z;
            w1[r] = vb ? load_stream(qb[r] + 2048 * k + 512) : z;
            const uint32_t* s = sd[r] + 80 * k;
            sa[r] = va ? __ldg(s + m) : 0u;
            sbw[r] = vb ? __ldg(s + 20 + m) : 0u;
            dm[r] = vo ? __ldg(s + 20 * p + 16 + (m >> 2)) : 0u;
        }
        const int8_t* x = xb + 4096 * k;
        const int4 aal = va ? load_act(x) : z, aah = va ? load_act(x + 32) : z;
        const int4 bal = vb ? load_act(x + 1024) : z, bah = vb ? load_act(x + 1056) : z;
        const float ad = vo ? db[128 * k] : 0.0f;
        const float2 as = vo ? *reinterpret_cast<const float2*>(sb + 128 * k) : make_float2(0, 0);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int ia = q4k_piece_isum(w0[r], sa[r], aal, aah), ib = q4k_piece_isum(w1[r], sbw[r], bal, bah);
            const int other = __shfl_xor_sync(0xffffffffu, p ? ia : ib, 1);
            if (vo) q4k_finish((p ? ib : ia) + other, p ? sbw[r] : sa[r], dm[r], as, ad, acc[r]);
        }
    };
    if (NT == 64 || n <= 64) {
        if (32 * j < n) step(0);
    } else {
#pragma unroll 2
        for (int k = 0; 32 * j + 64 * k < n; k++) step(k);
    }
    // The plain lane l's sum is in lane 2 (l % 16) + l / 16: its warp sum by the offsets 1, 16, 8, 4, 2, the R rows'
    // sums transposed (row r in the lanes whose bits 0 (and 4, R = 4) spell r).
    float cur[R];
#pragma unroll
    for (int r = 0; r < R; r++) cur[r] = acc[r];
    constexpr int o[5] = {1, 16, 8, 4, 2};
    constexpr int L = R == 2 ? 1 : 2;
    int half = R;
#pragma unroll
    for (int s = 0; s < L; s++) {
        half /= 2;
        const bool up = (lane & o[s]) != 0;
#pragma unroll
        for (int i = 0; i < half; i++) {
            const float keep = up ? cur[half + i] : cur[i], send = up ? cur[i] : cur[half + i];
            cur[i] = keep + __shfl_xor_sync(0xffffffffu, send, o[s]);
        }
    }
#pragma unroll
    for (int s = L; s < 5; s++) cur[0] += __shfl_xor_sync(0xffffffffu, cur[0], o[s]);
    __shared__ float part[k_block_warps][R];
    if ((lane & (R == 2 ? 30 : 14)) == 0) part[warp][R == 2 ? lane : 2 * (lane & 1) + (lane >> 4)] = cur[0];
    __syncthreads();
    const int tid = 32 * j + lane;
    if (tid >= R) return;
    float s = 0;
    s += part[2 * group][tid];
    s += part[2 * group + 1][tid];
    if (row0 + tid < a.n_out) y[row0 + tid] = accumulate ? y[row0 + tid] + s : s;
}

}  // namespace memtile::cuda::detail
