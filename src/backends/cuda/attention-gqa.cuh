// The decode attention's GQA blocks (session 24; key steps batched in session 26): tiles of a KV head's keys in shared
// memory, the query heads of the block stepping them, their partial states. Launched by attention-decode.cu.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/attention-group.h"
#include "backends/cuda/attention-steps.cuh"
#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"

namespace memtile::cuda::detail {

// GQA blocks (session 24): one block per (KV head, split) and up to G query heads of that KV head, 4 warps per head
// (blockDim 128 G), so each K/V row crosses from L2 once for all G heads: ncu of one Llama-3-8B layer at depth 16,384
// read 284 MB through L2 for its 67 MB of K and V with one head per block (docs/cuda-log-s18-s31.md, "Session 23"). The
// block copies tiles of T keys of its KV head into shared memory (16-byte cp.async, two tiles in flight); warp (stream
// w = warp % 4, head slot g = warp / 4) takes keys j0 + w + 4m of its split in key order, as the one-head kernels' warp
// w does, with attn_key_step's values (a tile's keys batched by attn_gqa_keys) and the same block-state arithmetic: the
// same bits as one head per block (checked for every variant). GB: the kernels' bound on G (attn_group_max); head_dim %
// 8 == 0 (16-byte rows).
__host__ __device__ constexpr int attn_tile_keys(int nd) {
    return nd >= 8 ? 16 : 32;
}

struct attn_heads {
    int h0, n;  // query heads h0 .. h0 + n - 1, all of KV head h0 / group
};
// A KV head's `group` query heads are cut into ceil(group / G) blocks of at most G heads: the heads of block column bx
// (grid.x = n_head_kv * ceil(group / G)).
__device__ __forceinline__ attn_heads attn_block_heads(int bx, int group, int G) {
    const int per_kv = (group + G - 1) / G, b = bx % per_kv;
    return {bx / per_kv * group + b * G, min(G, group - b * G)};
}
// The block column holding head h.
__device__ __forceinline__ int attn_head_block(int h, int group, int G) {
    return h / group * ((group + G - 1) / G) + h % group / G;
}

// Keys [t0, min(t0 + T, jc)) of one KV head (head_off into cache rows of kv_dim) into tile buffers sk, sv ([T][RSH]
// f16, row r = key t0 + r), 16-byte cp.async copies spread over the block's threads; one commit group (also where
// there is nothing to copy).
template <int ND, int T, int RSH = 32 * ND>
__device__ __forceinline__ void attn_tile_load(const __half* kc, const __half* vc, int t0, int jc, int kv_dim,
                                               int head_off, int hd, __half* sk, __half* sv) {
    // Row and piece by shifts where hd / 8 is a power of two: the integer divisions took ~100 of a warp's ~600
    // instructions per tile at head_dim 128 (SASS, session 26).
    const int pieces = hd / 8, n = max(0, min(T, jc - t0)) * pieces;
    const bool pow2 = (pieces & (pieces - 1)) == 0;
    const int shift = __ffs(pieces) - 1;
    for (int c = threadIdx.x; c < 2 * n; c += blockDim.x) {
        const bool is_v = c >= n;
        const int cc = is_v ? c - n : c;
        const int r = pow2 ? cc >> shift : cc / pieces, q = pow2 ? cc & (pieces - 1) : cc % pieces;
        cp_async16((is_v ? sv : sk) + r * RSH + q * 8, (is_v ? vc : kc) + int64_t(t0 + r) * kv_dim + head_off + q * 8);
    }
    cp_async_commit();
}

// The merge of the k_attn_warps stream states of each of the block's n_slots head slots, attn_block_state's
// arithmetic and order (the same bits), every slot at once: slot g's maximum M and the weights expf(m - M) of its
// states once per state, then one output element per thread and pass. sm, sl: [GB][W] the states' maxima and sums,
// written by the caller before a block barrier; sacc: state k of slot g's accumulator at sacc + (g W + k) acc_stride;
// sw ([GB][W]) and s_max ([GB]): shared scratch. Out: slot g's (M, L, acc[hd]) at out + g out_stride. Every thread of
// the block calls it.
template <int GB>
__device__ __forceinline__ void attn_slots_merge(const float* sm, const float* sl, float* sw, float* s_max,
                                                 const float* sacc, int acc_stride, int n_slots, int hd, float* out,
                                                 int64_t out_stride) {
    constexpr int W = k_attn_warps;
    if (const int e = int(threadIdx.x), g = e / W; e < n_slots * W) {
        float M = -INFINITY;
        for (int k = 0; k < W; k++) M = fmaxf(M, sm[g * W + k]);
        sw[e] = expf(sm[e] - M);  // NaN where every state of the slot is empty: read only where sl > 0
        if (e % W == 0) s_max[g] = M;
    }
    __syncthreads();
    for (int e = int(threadIdx.x); e < n_slots * hd; e += int(blockDim.x)) {
        const int g = e / hd, d = e % hd;
        float a = 0;
        for (int k = 0; k < W; k++)
            if (sl[g * W + k] > 0) a = __fmaf_rn(sacc[(g * W + k) * acc_stride + d], sw[g * W + k], a);
        out[g * out_stride + 2 + d] = a;
    }
    if (const int g = int(threadIdx.x); g < n_slots) {
        float L = 0;
        for (int k = 0; k < W; k++)
            if (sl[g * W + k] > 0) L = __fmaf_rn(sl[g * W + k], sw[g * W + k], L);
        out[g * out_stride] = s_max[g];
        out[g * out_stride + 1] = L;
    }
}

// attn_block_state of every head slot of a GQA block at once: the 4 stream warps of slot g (g < nh) merge their states
// into out + g * stride by attn_slots_merge. scratch: shared memory of GB * (4 * (3 + 32 ND) + 1) floats that no thread
// reads or writes any more (the key tiles after their last barrier).
template <int ND, int GB>
__device__ __forceinline__ void attn_group_state(float m, float l, const float (&acc)[ND], int g, int nh, float* out,
                                                 int64_t stride, int hd, float* scratch) {
    constexpr int W = k_attn_warps, RS = 32 * ND;
    const int w = (threadIdx.x >> 5) & (W - 1), lane = threadIdx.x & 31;
    float* sm = scratch;         // [GB][W]
    float* sl = sm + GB * W;     // [GB][W]
    float* sw = sl + GB * W;     // [GB][W]
    float* s_max = sw + GB * W;  // [GB]
    float* sacc = s_max + GB;    // [GB][W][RS]
    if (g < GB) {
        if (lane == 0) {
            sm[g * W + w] = m;
            sl[g * W + w] = l;
        }
#pragma unroll
        for (int i = 0; i < ND; i++) sacc[(g * W + w) * RS + lane + 32 * i] = acc[i];
    }
    __syncthreads();
    attn_slots_merge<GB>(sm, sl, sw, s_max, sacc, RS, nh, hd, out, stride);
}

// The lane holding key u's score after attn_gqa_keys' reduction of KB scores, and the key a lane holds.
template <int KB>
__device__ __forceinline__ int attn_key_lane(int u) {
    int src = 0;
#pragma unroll
    for (int k = 0; (1 << k) < KB; k++) src |= ((u >> k) & 1) << (4 - k);
    return src;
}
template <int KB>
__device__ __forceinline__ int attn_lane_key(int lane) {
    int u = 0;
#pragma unroll
    for (int k = 0; (1 << k) < KB; k++) u |= ((lane >> (4 - k)) & 1) << k;
    return u;
}

// A warp's keys j = t0 + w + 4u (u < KB: all of them keys of the split) of one tile (key j at row j - t0 of sk, sv),
// stepped in key order with the values of KB calls of attn_key_step, in fewer instructions (session 26: the GQA blocks
// were issue-bound, ~0.8 warp instructions per cycle and scheduler at 22 % of DRAM's throughput): the KB scores' warp
// sums reduced together (each butterfly level pairs the same lanes as warp_sum's, half of the lanes keeping each key,
// so every score has warp_sum's bits and ends in 32 / KB lanes); the running maxima in key order in every lane; expf
// of key u's corr and p once, in the lanes holding its score, shuffled to all lanes for the l and acc updates.
template <int ND, int KB>
__device__ __forceinline__ void attn_gqa_keys(const float (&qr)[ND], const __half* sk, const __half* sv, int w,
                                              int lane, int hd, float& m, float& l, float (&acc)[ND]) {
    constexpr int RS = 32 * ND;
    float v[KB];
#pragma unroll
    for (int u = 0; u < KB; u++) {
        const __half* kr = sk + (w + k_attn_warps * u) * RS;
        float s = 0;
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const int d = lane + 32 * i;
            if (d < hd) s = __fmaf_rn(qr[i], __half2float(kr[d]), s);
        }
        v[u] = s;
    }
#pragma unroll
    for (int k = 0; k < 5; k++) {
        const int o = 16 >> k, cnt = KB >> k;
        if (cnt > 1) {
            const bool up = lane & o;
#pragma unroll
            for (int e = 0; e < cnt / 2; e++) {
                const float send = up ? v[2 * e] : v[2 * e + 1], keep = up ? v[2 * e + 1] : v[2 * e];
                v[e] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
        }
    }
    const float sc = v[0];  // the score of key attn_lane_key<KB>(lane)
    float mm[KB + 1];       // mm[u]: the running maximum before key u
    mm[0] = m;
#pragma unroll
    for (int u = 0; u < KB; u++) mm[u + 1] = fmaxf(mm[u], __shfl_sync(0xffffffffu, sc, attn_key_lane<KB>(u)));
    const int mu = attn_lane_key<KB>(lane);
    float m_old = mm[0], m_new = mm[1];
#pragma unroll
    for (int u = 1; u < KB; u++)
        if (mu == u) {
            m_old = mm[u];
            m_new = mm[u + 1];
        }
    const float corr = expf(m_old - m_new), p = expf(sc - m_new);
#pragma unroll
    for (int u = 0; u < KB; u++) {
        const float cu = __shfl_sync(0xffffffffu, corr, attn_key_lane<KB>(u));
        const float pu = __shfl_sync(0xffffffffu, p, attn_key_lane<KB>(u));
        const __half* vr = sv + (w + k_attn_warps * u) * RS;
        l = __fmaf_rn(l, cu, pu);
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const int d = lane + 32 * i;
            const float vv = d < hd ? __half2float(vr[d]) : 0.0f;
            acc[i] = __fmaf_rn(acc[i], cu, __fmul_rn(pu, vv));
        }
    }
    m = mm[KB];
}

// A GQA block's split: cache rows [j0, jc) to copy, keys [j0, j1), the new position pos (ROPE: a key of this split
// where has_new).
struct attn_split_span {
    int pos, j0, j1, jc;
    bool has_new;
};

// The prologue of both GQA block forms: the PDL wait (ROPE and EARLY: after first(j0, jc) has issued the first tiles'
// copies; else before), the split's span, and the block's q heads into s_q ([GB][SQ] f32). ROPE: the q heads rotated,
// and where the split holds the new position its k and v rotated into s_k, s_v (f16), the KV head's first block also
// writing them to cache row pos. The caller synchronizes the block before reading them.
template <int GB, int SQ, bool ROPE, bool EARLY, typename First>
__device__ __forceinline__ attn_split_span attn_gqa_setup(const float* src, const float* bias, const rope_params& p,
                                                          const int32_t* pos_p, __half* kc, __half* vc, attn_heads hs,
                                                          int split, int n_split, float (*s_q)[SQ], __half* s_k,
                                                          __half* s_v, First first) {
    const int t = threadIdx.x;
    const int hd = p.head_dim, hd2 = hd / 2, half = p.n_rot / 2;
    const int group = p.n_head / p.n_head_kv, kvh = hs.h0 / group, kv_dim = p.n_head_kv * hd;
    if (ROPE && !EARLY) {
        griddep_wait();
        griddep_launch();
    }
    const int pos = *pos_p, n_keys = pos + 1;
    const int chunk = attn_split_chunk(n_keys, n_split, p.split_keys);
    const int j0 = split * chunk, j1 = min(n_keys, j0 + chunk), jc = ROPE ? min(j1, pos) : j1;  // cache rows [j0, jc)
    const bool has_new = ROPE && j0 <= pos && pos < j1;
    first(j0, jc);
    // The sin and cos of the thread's first pair i0, taken before the PDL wait as attn_rope_block takes its own: a
    // thread's pairs job % hd2 are all i0 where blockDim.x is a multiple of head_dim / 2 (head_dim 64 and 128), and
    // each had cost a sincosf after the wait.
    const int i0 = t % hd2;
    float sn0 = 0, cs0 = 1;
    if (ROPE && i0 < half) rope_sincos(p, pos, i0, sn0, cs0);
    if (ROPE && EARLY) {
        griddep_wait();
        griddep_launch();
    }
    if (ROPE) {
        const bool writer = has_new && hs.h0 % group == 0;
        const int n_jobs = (hs.n + (has_new ? 2 : 0)) * hd2;  // pairs of the q heads, then of k, then of v
        for (int job = t; job < n_jobs; job += blockDim.x) {
            const int which = job / hd2, i = job % hd2;  // which < n: q head h0 + which; n: k; n + 1: v
            const bool is_q = which < hs.n, is_v = which == hs.n + 1;
            const int head = is_q ? hs.h0 + which : p.n_head + (is_v ? p.n_head_kv : 0) + kvh;
            int a, b;
            rope_pair(p, i, is_v, a, b);
            const float* v = src + int64_t(head) * hd;
            float x0 = v[a], x1 = v[b];
            if (bias) {
                x0 = __fadd_rn(x0, bias[head * hd + a]);
                x1 = __fadd_rn(x1, bias[head * hd + b]);
            }
            if (!is_v && i < half) {
                float sn = sn0, cs = cs0;
                if (i != i0) rope_sincos(p, pos, i, sn, cs);
                rope_rotate(x0, x1, sn, cs);
            }
            if (is_q) {
                s_q[which][a] = x0;
                s_q[which][b] = x1;
            } else {
                const __half y0 = __float2half_rn(x0), y1 = __float2half_rn(x1);
                __half* sd = is_v ? s_v : s_k;
                sd[a] = y0;
                sd[b] = y1;
                if (writer) {
                    __half* c = (is_v ? vc : kc) + int64_t(pos) * kv_dim + kvh * hd;
                    c[a] = y0;
                    c[b] = y1;
                }
            }
        }
    } else {
        for (int e = t; e < hs.n * hd; e += blockDim.x) s_q[e / hd][e % hd] = src[int64_t(hs.h0) * hd + e];
    }
    return {pos, j0, j1, jc, has_new};
}

// One GQA block: heads hs, split `split` of n_split. ROPE (the single step with RoPE and the KV write folded in, as
// attn_rope_block): src is the row's qkv before bias and RoPE, the block rotates its q heads, and the block whose split
// holds the new position pos = *pos_p rotates k and v (the first block of the KV head writes them to cache row pos) and
// takes them from shared memory; with EARLY the first tile's copies are issued before the PDL wait. Else src is the
// rotated q of the row, the caches hold every key, and the caller has passed the PDL wait. Partial states as
// attn_partial_block's: partial[(h * n_split + split)] = (m, l, acc[hd]).
template <int ND, int GB, bool ROPE, bool EARLY, int PIPE>
__device__ __forceinline__ void attn_gqa_block(const float* src, const float* bias, const rope_params& p,
                                               const int32_t* pos_p, __half* kc, __half* vc, attn_heads hs, int split,
                                               int n_split, float* partial) {
    constexpr int T = attn_tile_keys(ND), RS = 32 * ND;
    __shared__ __align__(16) __half s_kt[2][T * RS];
    __shared__ __align__(16) __half s_vt[2][T * RS];
    __shared__ float s_q[GB][RS];
    __shared__ __half s_k[RS], s_v[RS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    const int w = warp & (k_attn_warps - 1), g = warp / k_attn_warps;
    const int hd = p.head_dim;
    const int group = p.n_head / p.n_head_kv, kvh = hs.h0 / group, kv_dim = p.n_head_kv * hd;
    const attn_split_span sp = attn_gqa_setup<GB, RS, ROPE, EARLY>(
        src, bias, p, pos_p, kc, vc, hs, split, n_split, s_q, s_k, s_v,
        [&](int j0, int jc) { attn_tile_load<ND, T>(kc, vc, j0, jc, kv_dim, kvh * hd, hd, s_kt[0], s_vt[0]); });
    const int pos = sp.pos, j0 = sp.j0, j1 = sp.j1, jc = sp.jc;
    const bool has_new = sp.has_new;
    __syncthreads();
    float qr[ND], acc[ND];
    attn_query_init<ND>(s_q[g], g < hs.n, lane, hd, qr, acc);
    float m = -INFINITY, l = 0;
    const int n_tiles = (j1 - j0 + T - 1) / T;
    for (int n = 0; n < n_tiles; n++) {
        const int t0 = j0 + n * T;
        if (n + 1 < n_tiles) {
            attn_tile_load<ND, T>(kc, vc, t0 + T, jc, kv_dim, kvh * hd, hd, s_kt[(n + 1) & 1], s_vt[(n + 1) & 1]);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __half* sk = s_kt[n & 1];
        __half* sv = s_vt[n & 1];
        if (has_new && pos >= t0 && pos - t0 < T)  // the new key's row (the copies took cache rows below jc only)
            for (int e = t; e < hd; e += blockDim.x) {
                sk[(pos - t0) * RS + e] = s_k[e];
                sv[(pos - t0) * RS + e] = s_v[e];
            }
        __syncthreads();
        // The warp's keys t0 + w + 4u below j1: all KB of them batched (attn_gqa_keys), else one key step each.
        constexpr int KB = T / k_attn_warps;
        if (g < hs.n && PIPE == 1 && t0 + w + k_attn_warps * (KB - 1) < j1) {
            attn_gqa_keys<ND, KB>(qr, sk, sv, w, lane, hd, m, l, acc);
        } else if (g < hs.n) {
#pragma unroll 2
            for (int u = 0; u < KB; u++) {
                const int j = t0 + w + k_attn_warps * u;
                if (j >= j1) break;  // uniform in the warp
                const __half* kr = sk + (j - t0) * RS;
                const __half* vr = sv + (j - t0) * RS;
                __half kh[ND], vh[ND];
#pragma unroll
                for (int i = 0; i < ND; i++) {
                    const int d = lane + 32 * i;
                    kh[i] = d < hd ? kr[d] : __float2half(0.0f);
                    vh[i] = d < hd ? vr[d] : __float2half(0.0f);
                }
                attn_key_step<ND>(qr, kh, vh, lane, hd, m, l, acc);
            }
        }
        __syncthreads();  // the next iteration's copies overwrite this tile's buffer
    }
    static_assert(sizeof(s_kt) >= sizeof(float) * GB * (k_attn_warps * (3 + RS) + 1), "attn_group_state's scratch");
    attn_group_state<ND, GB>(m, l, acc, g, hs.n, partial + (int64_t(hs.h0) * n_split + split) * (hd + 2),
                             int64_t(n_split) * (hd + 2), hd, reinterpret_cast<float*>(&s_kt[0][0]));
}

}  // namespace memtile::cuda::detail
