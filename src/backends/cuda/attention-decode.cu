// The decode step's attention: RoPE + KV write (rope_kv_kernel), the split-K attention kernels of the single-sequence
// and batched steps with their merges (separate, last block, thread-block cluster), and their launchers
// (cuda-kernels.h). Moved out of ops.cu unchanged (session 9, branch gat9).
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/attention-gqa-mma.cuh"
#include "backends/cuda/attention-gqa.cuh"
#include "backends/cuda/attention-group.h"
#include "backends/cuda/attention-steps.cuh"
#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/prefill-kernels.h"
#include "backends/cuda/wave-splits.h"

namespace memtile::cuda {
namespace {

using detail::attn_block_heads;
using detail::attn_gqa_block;
using detail::attn_gqa_block_mma;
using detail::attn_head_block;
using detail::attn_heads;
using detail::attn_key_step;
using detail::attn_query_init;
using detail::griddep_launch;
using detail::griddep_wait;
using detail::launch;
using detail::rope_pair;
using detail::rope_rotate;
using detail::rope_sincos;

// One thread per pair of elements of one head of q, k or v (qkv: q heads, then k heads, then v heads, each
// head_dim long): adds the bias, rotates q and k pairs (i < n_rot / 2; the other pairs pass through) and
// writes k and v as f16 into cache row pos. Pairs are independent: no ordering between threads.
// blockIdx.y = row of qkv (rows q_dim + 2 kv_dim apart); slots null: pos = *pos_p and the caches as given,
// else pos = pos_p[slots[row]] and the caches at + slots[row] * slot_stride (batched step).
__global__ void __launch_bounds__(256)
    rope_kv_kernel(float* qkv, const float* bias, rope_params p, const int32_t* pos_p, const int32_t* slots,
                   int64_t slot_stride, __half* kc, __half* vc) {
    griddep_wait();
    griddep_launch();
    const int row = blockIdx.y;
    const int slot = slots ? slots[row] : 0;
    const int pos = pos_p[slot];
    const int hd2 = p.head_dim / 2, half = p.n_rot / 2, kv_dim = p.n_head_kv * p.head_dim;
    qkv += int64_t(row) * (p.n_head * p.head_dim + 2 * kv_dim);
    kc += int64_t(slot) * slot_stride;
    vc += int64_t(slot) * slot_stride;
    const int job = blockIdx.x * blockDim.x + threadIdx.x;
    if (job >= (p.n_head + 2 * p.n_head_kv) * hd2) return;
    const int head = job / hd2, i = job % hd2;
    const bool is_v = head >= p.n_head + p.n_head_kv;
    float* v = qkv + int64_t(head) * p.head_dim;
    int a, b;
    rope_pair(p, i, is_v, a, b);
    float x0 = v[a], x1 = v[b];
    if (bias) {
        x0 = __fadd_rn(x0, bias[head * p.head_dim + a]);
        x1 = __fadd_rn(x1, bias[head * p.head_dim + b]);
    }
    if (!is_v && i < half) {
        float sn, cs;
        rope_sincos(p, pos, i, sn, cs);
        rope_rotate(x0, x1, sn, cs);
    }
    v[a] = x0;
    v[b] = x1;
    if (head >= p.n_head) {
        __half* c = is_v ? vc : kc;
        const int h = head - p.n_head - (is_v ? p.n_head_kv : 0);
        c[int64_t(pos) * kv_dim + h * p.head_dim + a] = __float2half_rn(x0);
        c[int64_t(pos) * kv_dim + h * p.head_dim + b] = __float2half_rn(x1);
    }
}

// K and V of the keys j = jb + u * k_attn_warps (u < KU) at the lane's dims lane + 32 i of one KV head (head_off =
// kvh * hd into each cache row of kv_dim); zeros for keys at or past j_end and dims past hd. kh, vh: [KU][ND] f16.
template <int KU, int ND>
__device__ __forceinline__ void load_keys(const __half* kc, const __half* vc, int jb, int j_end, int kv_dim,
                                          int head_off, int hd, int lane, __half (&kh)[KU][ND], __half (&vh)[KU][ND]) {
#pragma unroll
    for (int u = 0; u < KU; u++) {
        const int j = jb + u * k_attn_warps;
        const __half* kr = kc + int64_t(j) * kv_dim + head_off;
        const __half* vr = vc + int64_t(j) * kv_dim + head_off;
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const int d = lane + 32 * i;
            const bool ok = j < j_end && d < hd;
            kh[u][i] = ok ? kr[d] : __float2half(0.0f);
            vh[u][i] = ok ? vr[d] : __float2half(0.0f);
        }
    }
}

// The warps' online-softmax states (m, l, acc: lane holds dims lane + 32i) merged through shared memory into
// out = (M, L, acc[hd]), one block's partial state.
template <int ND>
__device__ __forceinline__ void attn_block_state(float m, float l, const float (&acc)[ND], float* out, int hd) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __shared__ float sm[k_attn_warps], sl[k_attn_warps], sacc[k_attn_warps][32 * ND];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ND; i++) sacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < k_attn_warps; w++) M = fmaxf(M, sm[w]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0;
        for (int w = 0; w < k_attn_warps; w++)
            if (sl[w] > 0) a = __fmaf_rn(sacc[w][d], expf(sm[w] - M), a);
        out[2 + d] = a;
    }
    if (threadIdx.x == 0) {
        float L = 0;
        for (int w = 0; w < k_attn_warps; w++)
            if (sl[w] > 0) L = __fmaf_rn(sl[w], expf(sm[w] - M), L);
        out[0] = M;
        out[1] = L;
    }
}

// Split-K decode attention of one (head h, key range `split` of n_split) for one query q ([n_head * hd] f32):
// the block's 4 warps take keys j = j0 + warp + 4m of [0, n_keys); lane holds dims lane + 32i (i < ND) of q,
// k, v and the accumulator; online softmax per warp, then the warps' states are merged through shared memory
// into partial[(h * n_split + split)] = (m, l, acc[hd]). A warp issues the K and V loads of KU keys (j, j + 4, ...,
// j + 4 (KU - 1)) together before their arithmetic (in key order; the same bits for every KU), so that its keys do
// not each cost a dependent L2 round trip (docs/cuda-decode-log-s5-s6.md, "Session 6 (branch gfu)").
template <int ND, int KU>
__device__ __forceinline__ void attn_partial_block(const float* q, const __half* kc, const __half* vc, int n_head,
                                                   int n_head_kv, int hd, int n_keys, int h, int split, int n_split,
                                                   int split_keys, float* partial) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunk = attn_split_chunk(n_keys, n_split, split_keys);
    const int j0 = split * chunk, j1 = min(n_keys, j0 + chunk);
    const int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * hd;
    float qr[ND], acc[ND];
    attn_query_init<ND>(q + h * hd, true, lane, hd, qr, acc);
    float m = -INFINITY, l = 0;
    for (int jb = j0 + warp; jb < j1; jb += KU * k_attn_warps) {
        __half kh[KU][ND], vh[KU][ND];
        load_keys<KU, ND>(kc, vc, jb, j1, kv_dim, kvh * hd, hd, lane, kh, vh);
#pragma unroll
        for (int u = 0; u < KU; u++) {
            if (jb + u * k_attn_warps >= j1) break;  // uniform in the warp
            attn_key_step<ND>(qr, kh[u], vh[u], lane, hd, m, l, acc);
        }
    }
    attn_block_state<ND>(m, l, acc, partial + (int64_t(h) * n_split + split) * (hd + 2), hd);
}

// Grid (n_head, n_split, rows), 4 warps: block (h, s) takes keys of split s, its warps keys j = j0 + warp +
// 4m. Lane holds dims lane + 32i (i < ND) of q, k, v and the accumulator; online softmax per warp, then the
// warps' states are merged through shared memory into partial[(h * n_split + s)] = (m, l, acc[head_dim]).
// Row r: query q + r * q_stride, caches and position as rope_kv_kernel, partial + r * n_head * n_split *
// (head_dim + 2).
template <int ND, int KU>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_partial_kernel(const float* q, int64_t q_stride, const __half* kc, const __half* vc, const int32_t* slots,
                        int64_t slot_stride, int n_head, int n_head_kv, int hd, int split_keys, const int32_t* pos_p,
                        float* partial) {
    griddep_wait();
    griddep_launch();
    const int row = blockIdx.z;
    const int slot = slots ? slots[row] : 0;
    attn_partial_block<ND, KU>(q + row * q_stride, kc + slot * slot_stride, vc + slot * slot_stride, n_head, n_head_kv,
                               hd, pos_p[slot] + 1, blockIdx.x, blockIdx.y, gridDim.y, split_keys,
                               partial + int64_t(row) * n_head * gridDim.y * (hd + 2));
}

// The merge of a chunk of hc heads (heads chunk * hc ..) by the last block of its attention blocks to arrive: from
// the partial states (m, l, acc[hd]) of n_split splits each (partial: this row's) into out (this row's [n_head * hd])
// and, with xq, its quantization in units of q_block (rows of xq, xd, xs group-major over n_rows).
__device__ __forceinline__ void attn_merge_chunk(const float* partial, int chunk, int hc, int n_split, int hd,
                                                 float* out, int q_block, int8_t* xq, float* xd, float* xs, int64_t row,
                                                 int64_t n_rows) {
    // The weights once per head (attn_merge_weights), then each element's loads in flight together.
    __shared__ float sw[32][32], sl[32], sv[512];
    __shared__ uint32_t valid[32];
    const int t = threadIdx.x;
    const int64_t h0 = int64_t(chunk) * hc;
    attn_merge_weights(partial + h0 * n_split * (hd + 2), hc, n_split, hd, sw, sl, valid);
    __syncthreads();
    for (int el = t; el < hc * hd; el += blockDim.x) {
        const int hl = el / hd;
        sv[el] = attn_merge_elem(partial + (h0 + hl) * n_split * (hd + 2), hd, el % hd, sw[hl], valid[hl], sl[hl]);
    }
    __syncthreads();
    const int64_t e0 = h0 * hd;
    if (xq && q_block == 256) {
        // One unit of 256 (two heads of 128) would be one warp's serial work in finish_elems: all warps take its groups
        // of 32 (warp w: groups w, w + n_warps, ...), the unit's maximum through shared memory (max: any order, same
        // bits).
        __shared__ float umax[32];
        const int lane = t & 31, warp = t >> 5, n_warps = int(blockDim.x >> 5);
#pragma unroll 1
        for (int u = 0; u < hc * hd / 256; u++) {
            float amax = 0;
            for (int g = warp; g < 8; g += n_warps) amax = fmaxf(amax, fabsf(sv[u * 256 + 32 * g + lane]));
            amax = warp_max(amax);
            if (lane == 0) umax[warp] = amax;
            __syncthreads();
            amax = umax[0];
            for (int w = 1; w < n_warps; w++) amax = fmaxf(amax, umax[w]);
            const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
            for (int g = warp; g < 8; g += n_warps) {
                const int64_t e = e0 + u * 256 + 32 * g + lane;
                const float v = sv[u * 256 + 32 * g + lane];
                out[e] = v;
                const int q = __float2int_rn(__fmul_rn(v, inv));
                const int64_t gi = (e / 32) * n_rows + row;
                xq[gi * 32 + lane] = int8_t(q);
                const int sq = warp_sum_int(q);
                if (lane == 0) {
                    xd[gi] = d;
                    xs[gi] = d * float(sq);
                }
            }
            __syncthreads();
        }
        return;
    }
    finish_elems([&](int64_t e) { return sv[e - e0]; }, e0, hc * hd, out, q_block, xq, xd, xs, row, n_rows);
}

// attn_partial_kernel whose last block (of the hc * n_split blocks of a chunk of hc heads of one row) merges the
// chunk's partial states into out and, with xq, quantizes them (units of q_block within the chunk): the merge of
// attn_combine_kernel without its launch, with the same bits. counters: [rows][n_head / hc], zero between
// launches. hc * hd <= 256, hc <= 32, n_split <= 32 (launch_attention_fused checks).
template <int ND, int KU>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_fused_kernel(const float* q, int64_t q_stride, const __half* kc, const __half* vc, const int32_t* slots,
                      int64_t slot_stride, int n_head, int n_head_kv, int hd, int split_keys, const int32_t* pos_p,
                      float* partial, int hc, unsigned* counters, float* out, int q_block, int8_t* xq, float* xd,
                      float* xs) {
    griddep_wait();
    griddep_launch();
    const int row = blockIdx.z, n_split = gridDim.y;
    const int slot = slots ? slots[row] : 0;
    partial += int64_t(row) * n_head * n_split * (hd + 2);
    attn_partial_block<ND, KU>(q + row * q_stride, kc + slot * slot_stride, vc + slot * slot_stride, n_head, n_head_kv,
                               hd, pos_p[slot] + 1, blockIdx.x, blockIdx.y, n_split, split_keys, partial);
    const int chunk = blockIdx.x / hc;
    if (!last_block_arrived(counters + int64_t(row) * (n_head / hc) + chunk, unsigned(hc * n_split))) return;
    attn_merge_chunk(partial, chunk, hc, n_split, hd, out + int64_t(row) * n_head * hd, q_block, xq, xd, xs, row,
                     gridDim.z);
}

// Keys in flight per warp in the attention with RoPE folded in (attn_rope_block): the single step's KU.
constexpr int k_attn_rope_keys = 8;

// Split-K decode attention of one sequence with RoPE and the KV write of the new position folded in (decode fusion bit
// 32; no rope_kv_kernel before it): qkv ([q_dim + 2 kv_dim]) as the Q/K/V product wrote it, before bias and RoPE, and
// left unchanged. Block (h, split) rotates its q head into shared memory; the block whose split holds the new position
// pos = *pos_p also rotates its KV head's k and v and takes them (as the f16 the cache holds) from shared memory
// instead of the cache, and the first such block of each KV head (h % group == 0) writes them to cache row pos, which
// later steps read. With EARLY the position, the rotation's sin/cos and the K/V rows of each warp's first KU keys below
// pos (written by earlier steps; *pos_p by the previous step's last kernel or the host) are loaded before the PDL wait.
// The block's partial state (m, l, acc[hd]) goes to `state` (global partials or the block's shared memory).
// The arithmetic is rope_kv_kernel's and attn_partial_block's (rope_*, attn_key_step, attn_block_state): the same bits.
template <int ND, int KU, bool EARLY>
__device__ __forceinline__ void attn_rope_block(const float* qkv, const float* bias, const rope_params& p,
                                                const int32_t* pos_p, __half* kc, __half* vc, int h, int split,
                                                int n_split, float* state) {
    constexpr int nt = 32 * k_attn_warps;
    constexpr int JN = (3 * 16 * ND + nt - 1) / nt;  // rotation jobs (pairs of q, k, v) per thread
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    const int hd = p.head_dim, hd2 = hd / 2, half = p.n_rot / 2;
    const int group = p.n_head / p.n_head_kv, kvh = h / group, kv_dim = p.n_head_kv * hd;
    if (!EARLY) {
        griddep_wait();
        griddep_launch();
    }
    const int pos = *pos_p, n_keys = pos + 1;
    const int chunk = attn_split_chunk(n_keys, n_split, p.split_keys);
    const int j0 = split * chunk, j1 = min(n_keys, j0 + chunk), jc = min(j1, pos);  // cache rows: [j0, jc)
    const bool has_new = j0 <= pos && pos < j1, writer = has_new && h % group == 0;
    const int n_jobs = (has_new ? 3 : 1) * hd2;  // q pairs, then k pairs, then v pairs
    float sn[JN], cs[JN];
#pragma unroll
    for (int r = 0; r < JN; r++) {
        const int job = t + r * nt, i = job % hd2;
        if (job < n_jobs && job < 2 * hd2 && i < half) rope_sincos(p, pos, i, sn[r], cs[r]);
    }
    __half kh[KU][ND], vh[KU][ND];
    auto load = [&](int jb) { load_keys<KU, ND>(kc, vc, jb, jc, kv_dim, kvh * hd, hd, lane, kh, vh); };
    if (EARLY) {
        load(j0 + warp);
        griddep_wait();
        griddep_launch();
    }
    __shared__ float s_q[32 * ND];
    __shared__ __half s_k[32 * ND], s_v[32 * ND];
#pragma unroll
    for (int r = 0; r < JN; r++) {
        const int job = t + r * nt;
        if (job >= n_jobs) break;
        const int which = job / hd2, i = job % hd2;
        const int head = which == 0 ? h : p.n_head + (which == 2 ? p.n_head_kv : 0) + kvh;
        int a, b;
        rope_pair(p, i, which == 2, a, b);
        const float* v = qkv + int64_t(head) * hd;
        float x0 = v[a], x1 = v[b];
        if (bias) {
            x0 = __fadd_rn(x0, bias[head * hd + a]);
            x1 = __fadd_rn(x1, bias[head * hd + b]);
        }
        if (which < 2 && i < half) rope_rotate(x0, x1, sn[r], cs[r]);
        if (which == 0) {
            s_q[a] = x0;
            s_q[b] = x1;
        } else {
            const __half y0 = __float2half_rn(x0), y1 = __float2half_rn(x1);
            __half* sd = which == 1 ? s_k : s_v;
            sd[a] = y0;
            sd[b] = y1;
            if (writer) {
                __half* c = (which == 1 ? kc : vc) + int64_t(pos) * kv_dim + kvh * hd;
                c[a] = y0;
                c[b] = y1;
            }
        }
    }
    __syncthreads();
    float qr[ND], acc[ND];
    attn_query_init<ND>(s_q, true, lane, hd, qr, acc);
    float m = -INFINITY, l = 0;
    for (int jb = j0 + warp; jb < j1; jb += KU * k_attn_warps) {
        if (!EARLY || jb != j0 + warp) load(jb);
#pragma unroll
        for (int u = 0; u < KU; u++) {
            const int j = jb + u * k_attn_warps;
            if (j >= j1) break;  // uniform in the warp
            if (j == pos) {
#pragma unroll
                for (int i = 0; i < ND; i++) {
                    const int d = lane + 32 * i;
                    kh[u][i] = d < hd ? s_k[d] : __float2half(0.0f);
                    vh[u][i] = d < hd ? s_v[d] : __float2half(0.0f);
                }
            }
            attn_key_step<ND>(qr, kh[u], vh[u], lane, hd, m, l, acc);
        }
    }
    attn_block_state<ND>(m, l, acc, state, hd);
}

// Grid (n_head, n_split): attn_rope_block; partial states as attn_partial_kernel's (one row).
template <int ND, bool EARLY>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_rope_partial_kernel(const float* qkv, const float* bias, rope_params p, const int32_t* pos_p, __half* kc,
                             __half* vc, float* partial) {
    attn_rope_block<ND, k_attn_rope_keys, EARLY>(
        qkv, bias, p, pos_p, kc, vc, blockIdx.x, blockIdx.y, gridDim.y,
        partial + (int64_t(blockIdx.x) * gridDim.y + blockIdx.y) * (p.head_dim + 2));
}

// attn_rope_partial_kernel with attn_fused_kernel's merge by the last block of each chunk of hc heads.
template <int ND, bool EARLY>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_rope_fused_kernel(const float* qkv, const float* bias, rope_params p, const int32_t* pos_p, __half* kc,
                           __half* vc, float* partial, int hc, unsigned* counters, float* out, int q_block, int8_t* xq,
                           float* xd, float* xs) {
    attn_rope_block<ND, k_attn_rope_keys, EARLY>(
        qkv, bias, p, pos_p, kc, vc, blockIdx.x, blockIdx.y, gridDim.y,
        partial + (int64_t(blockIdx.x) * gridDim.y + blockIdx.y) * (p.head_dim + 2));
    const int chunk = blockIdx.x / hc;
    if (!last_block_arrived(counters + chunk, unsigned(hc * gridDim.y))) return;
    attn_merge_chunk(partial, chunk, hc, gridDim.y, p.head_dim, out, q_block, xq, xd, xs, 0, 1);
}

// attn_rope_block with the merge through distributed shared memory instead of global partials and a last block: the
// grid (n_head, n_split) is tiled by clusters of hc heads x n_split splits (one merge chunk of attn_rope_fused_kernel;
// hc * n_split <= 8, the portable cluster size). Each block leaves its partial state in its own shared memory; after a
// cluster barrier, block r of the C = hc * n_split merges the chunk's groups of 32 elements g = r, r + C, ... (one warp
// per group) from the states of the chunk's blocks, read through distributed shared memory, and quantizes them (q_block
// 32: per group; 256: the chunk is one unit, whose maximum the blocks exchange through a second barrier). The
// arithmetic and order of attn_merge_chunk: the same bits. A final barrier keeps every block's shared memory alive
// until the other blocks have read it. The cluster's block of (head chunk * hc + hl, split s) has rank hl + s * hc (x
// fastest).
template <int ND, bool EARLY>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_rope_cluster_kernel(const float* qkv, const float* bias, rope_params p, const int32_t* pos_p, __half* kc,
                             __half* vc, int hc, float* out, int q_block, int8_t* xq, float* xd, float* xs) {
    namespace cg = cooperative_groups;
    __shared__ float s_state[2 + 32 * ND];  // this block's (m, l, acc[hd])
    __shared__ float s_gmax[8];             // q_block 256: the maxima of the chunk's groups this block merged
    const cg::cluster_group cl = cg::this_cluster();
    const int n_split = gridDim.y, hd = p.head_dim;
    attn_rope_block<ND, k_attn_rope_keys, EARLY>(qkv, bias, p, pos_p, kc, vc, blockIdx.x, blockIdx.y, n_split, s_state);
    cl.sync();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int C = hc * n_split, r = int(cl.block_rank()), n_e = hc * hd, n_g = (n_e + 31) / 32;
    const int64_t e0 = int64_t(blockIdx.x / hc) * n_e;
    // A chunk has at most 8 groups and a cluster at least 4 warps: at most 2 groups per warp (k).
    float v[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int g = r + C * (warp + k_attn_warps * k), el = 32 * g + lane;
        if (g >= n_g || el >= n_e) continue;
        const int hl = el / hd, d = el % hd;
        // Every split's (m, l, acc[d]) loaded before any is used: one distributed-shared-memory round trip, not one
        // per split (n_split <= 8).
        float ms[8], ls[8], as[8];
#pragma unroll
        for (int sp = 0; sp < 8; sp++)
            if (sp < n_split) {
                const float* st = cl.map_shared_rank(s_state, hl + sp * hc);
                ms[sp] = st[0];
                ls[sp] = st[1];
                as[sp] = st[2 + d];
            }
        float M = -INFINITY;
        uint32_t mask = 0;
#pragma unroll
        for (int sp = 0; sp < 8; sp++)
            if (sp < n_split && ls[sp] > 0) {
                M = fmaxf(M, ms[sp]);
                mask |= 1u << sp;
            }
        float L = 0, a = 0;
#pragma unroll
        for (int sp = 0; sp < 8; sp++)
            if (mask >> sp & 1) {
                const float e = expf(ms[sp] - M);
                L = __fmaf_rn(ls[sp], e, L);
                a = __fmaf_rn(as[sp], e, a);
            }
        v[k] = a / L;
    }
    float unit_max = 0;
    if (xq && q_block == 256) {  // n_e == 256 (launch_attention_rope checks)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int g = r + C * (warp + k_attn_warps * k);
            if (g >= n_g) continue;
            const float gm = warp_max(fabsf(v[k]));
            if (lane == 0) s_gmax[g] = gm;
        }
        cl.sync();
        unit_max = warp_max(lane < n_g ? *cl.map_shared_rank(&s_gmax[lane], lane % C) : 0.0f);
    }
    // Every read of another block's shared memory is done: arrive now, wait before exiting.
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int g = r + C * (warp + k_attn_warps * k), el = 32 * g + lane;
        if (g >= n_g) continue;
        if (!xq) {
            if (el < n_e) out[e0 + el] = v[k];
            continue;
        }
        const float amax = q_block == 256 ? unit_max : warp_max(fabsf(v[k]));
        const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
        const int64_t e = e0 + el;
        out[e] = v[k];
        const int q = __float2int_rn(__fmul_rn(v[k], inv));
        const int64_t gi = e / 32;
        xq[gi * 32 + lane] = int8_t(q);
        const int sq = warp_sum_int(q);
        if (lane == 0) {
            xd[gi] = d;
            xs[gi] = d * float(sq);
        }
    }
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// Blocks of 256 threads, one output element e = h * hd + d each: merges the n_split partial states of head
// h (the weights of the block's heads first, one warp per head: at most 32 heads, so hd >= 8), and with xq quantizes
// the block's 256 outputs (the Wo matvec's input; n_head * hd % 256 == 0). blockIdx.y = row (partial and out one row
// each; xq, xd, xs group-major over the rows).
__global__ void __launch_bounds__(256) attn_combine_kernel(const float* partial, int n_split, int n_head, int hd,
                                                           float* out, int q_block, int8_t* xq, float* xd, float* xs) {
    __shared__ float sw[32][32], sl[32];
    __shared__ uint32_t valid[32];
    griddep_wait();
    griddep_launch();
    const int n = n_head * hd;
    const int64_t row = blockIdx.y;
    partial += row * n_head * n_split * (hd + 2);
    out += row * n;
    const int e0 = int(blockIdx.x) * 256, h0 = e0 / hd, nh = (min(n, e0 + 256) - 1) / hd - h0 + 1;
    attn_merge_weights(partial + int64_t(h0) * n_split * (hd + 2), nh, n_split, hd, sw, sl, valid);
    __syncthreads();
    const int e = e0 + int(threadIdx.x);
    float v = 0;
    if (e < n) {
        const int hl = e / hd - h0;
        v = attn_merge_elem(partial + int64_t(h0 + hl) * n_split * (hd + 2), hd, e % hd, sw[hl], valid[hl], sl[hl]);
        out[e] = v;
    }
    if (xq) quantize_block256(v, int64_t(blockIdx.x) * 256, n, q_block, xq, xd, xs, row, gridDim.y);
}

// The merges of the chunks of hc heads that the heads hs touch, each by the last block of the chunk's attention blocks
// to arrive (n_split per block column holding one of its heads; counters: this row's). Where hs is a whole number of
// chunks in a KV head cut evenly, its blocks are the same for all of them: one counter, one merge of all hs.n heads.
__device__ __forceinline__ void attn_merge_chunks(const attn_heads& hs, int group, int G, int hc, int n_split, int hd,
                                                  const float* partial, unsigned* counters, float* out, int q_block,
                                                  int8_t* xq, float* xd, float* xs, int64_t row, int64_t n_rows) {
    if (group % G == 0 && G % hc == 0 && G * hd <= 512 && G * n_split <= 1024) {
        if (last_block_arrived(counters + hs.h0 / hc, unsigned(n_split)))
            attn_merge_chunk(partial, hs.h0 / G, G, n_split, hd, out, q_block, xq, xd, xs, row, n_rows);
        return;
    }
    for (int c = hs.h0 / hc; c <= (hs.h0 + hs.n - 1) / hc; c++) {
        const int blocks = attn_head_block(c * hc + hc - 1, group, G) - attn_head_block(c * hc, group, G) + 1;
        if (last_block_arrived(counters + c, unsigned(blocks * n_split)))
            attn_merge_chunk(partial, c, hc, n_split, hd, out, q_block, xq, xd, xs, row, n_rows);
    }
}

// Threads and the bound on resident blocks of the GQA kernels for key-step form PIPE: 128 G (form 2, tensor cores:
// 128).
__host__ __device__ constexpr int attn_gqa_threads(int GB, int PIPE) {
    return PIPE == detail::k_attn_form_mma ? 32 * k_attn_warps : 32 * k_attn_warps * GB;
}
__host__ __device__ constexpr int attn_gqa_min_blocks(int ND, int GB, int PIPE) {
    return PIPE == detail::k_attn_form_mma || ND >= 8 ? 1 : 2048 / (64 * k_attn_warps * GB);
}
// One GQA block of key-step form PIPE (attn_gqa_block, or attn_gqa_block_mma for form 2).
template <int ND, int GB, bool ROPE, bool EARLY, int PIPE>
__device__ __forceinline__ void attn_gqa_block_of(const float* src, const float* bias, const rope_params& p,
                                                  const int32_t* pos_p, __half* kc, __half* vc, attn_heads hs,
                                                  int split, int n_split, float* partial) {
    if constexpr (PIPE == detail::k_attn_form_mma)
        attn_gqa_block_mma<ND, GB, ROPE, EARLY>(src, bias, p, pos_p, kc, vc, hs, split, n_split, partial);
    else
        attn_gqa_block<ND, GB, ROPE, EARLY, PIPE>(src, bias, p, pos_p, kc, vc, hs, split, n_split, partial);
}

// Grid (n_head_kv * ceil(group / G), n_split), attn_gqa_threads threads: attn_gqa_block_of with RoPE folded in (one
// sequence); FUSED: with the merges of attn_rope_fused_kernel (attn_merge_chunks).
template <int ND, int GB, bool EARLY, bool FUSED, int PIPE>
__global__ void __launch_bounds__(attn_gqa_threads(GB, PIPE), attn_gqa_min_blocks(ND, GB, PIPE))
    attn_rope_gqa_kernel(const float* qkv, const float* bias, rope_params p, const int32_t* pos_p, __half* kc,
                         __half* vc, float* partial, int hc, unsigned* counters, float* out, int q_block, int8_t* xq,
                         float* xd, float* xs, int G) {
    const int group = p.n_head / p.n_head_kv;
    const attn_heads hs = attn_block_heads(blockIdx.x, group, G);
    attn_gqa_block_of<ND, GB, true, EARLY, PIPE>(qkv, bias, p, pos_p, kc, vc, hs, blockIdx.y, gridDim.y, partial);
    if (FUSED)
        attn_merge_chunks(hs, group, G, hc, gridDim.y, p.head_dim, partial, counters, out, q_block, xq, xd, xs, 0, 1);
}

// Grid (n_head_kv * ceil(group / G), n_split, rows), attn_gqa_threads threads: attn_gqa_block_of over caches that hold
// every key (the batched step, or the single step after rope_kv_kernel); rows, slots and partials as
// attn_partial_kernel; FUSED: the merges of attn_fused_kernel.
template <int ND, int GB, bool FUSED, int PIPE>
__global__ void __launch_bounds__(attn_gqa_threads(GB, PIPE), attn_gqa_min_blocks(ND, GB, PIPE))
    attn_gqa_kernel(const float* q, int64_t q_stride, const __half* kc, const __half* vc, const int32_t* slots,
                    int64_t slot_stride, rope_params p, const int32_t* pos_p, float* partial, int hc,
                    unsigned* counters, float* out, int q_block, int8_t* xq, float* xd, float* xs, int G) {
    griddep_wait();
    griddep_launch();
    const int row = blockIdx.z, n_split = gridDim.y, group = p.n_head / p.n_head_kv, hd = p.head_dim;
    const int slot = slots ? slots[row] : 0;
    partial += int64_t(row) * p.n_head * n_split * (hd + 2);
    const attn_heads hs = attn_block_heads(blockIdx.x, group, G);
    attn_gqa_block_of<ND, GB, false, false, PIPE>(
        q + row * q_stride, nullptr, p, pos_p + slot, const_cast<__half*>(kc) + slot * slot_stride,
        const_cast<__half*>(vc) + slot * slot_stride, hs, blockIdx.y, n_split, partial);
    if (FUSED)
        attn_merge_chunks(hs, group, G, hc, n_split, hd, partial, counters + int64_t(row) * (p.n_head / hc),
                          out + int64_t(row) * p.n_head * hd, q_block, xq, xd, xs, row, gridDim.z);
}

// The tensor-core kernels of head_dim 32 ND (ND 2 or 4), and their dynamic shared memory.
template <int ND>
struct attn_mma_kernels {
    static constexpr int GB = attn_group_max(ND), bytes = detail::attn_mma_shape<32 * ND>::smem_bytes;
    static constexpr int F = detail::k_attn_form_mma;
    static constexpr auto rope = attn_rope_gqa_kernel<ND, GB, false, false, F>,
                          rope_early = attn_rope_gqa_kernel<ND, GB, true, false, F>,
                          rope_fused = attn_rope_gqa_kernel<ND, GB, false, true, F>,
                          rope_fused_early = attn_rope_gqa_kernel<ND, GB, true, true, F>;
    static constexpr auto rows = attn_gqa_kernel<ND, GB, false, F>, rows_fused = attn_gqa_kernel<ND, GB, true, F>;
};

}  // namespace

void launch_rope_kv_batch(float* qkv, int n_rows, const float* bias, const rope_params& p, const int32_t* pos,
                          const int32_t* slots, int64_t slot_stride, uint16_t* k_cache, uint16_t* v_cache,
                          cudaStream_t s) {
    const int jobs = (p.n_head + 2 * p.n_head_kv) * (p.head_dim / 2);
    launch(rope_kv_kernel, dim3(unsigned((jobs + 255) / 256), unsigned(n_rows)), 256, s, qkv, bias, p, pos, slots,
           slot_stride, reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache));
}

void launch_rope_kv(float* qkv, const float* bias, const rope_params& p, const int32_t* pos, uint16_t* k_cache,
                    uint16_t* v_cache, cudaStream_t s) {
    launch_rope_kv_batch(qkv, 1, bias, p, pos, nullptr, 0, k_cache, v_cache, s);
}

// Keys in flight per attention warp (attn_partial_block's KU): 8 in the single-sequence step, 4 in the batched one
// (the fastest of 1, 2, 4 and 8 for each: docs/cuda-decode-log-s5-s6.md, "Session 6 (branch gfu)"; any KU gives the
// same bits, so a batch of one still equals the single step), or MEMTILE_CUDA_ATTN_KEYS (1, 2, 4 or 8, both steps; A/B
// benchmarks).
static int attn_keys(bool batched) {
    static const int forced = [] {
        const char* env = std::getenv("MEMTILE_CUDA_ATTN_KEYS");
        const int v = env ? int(std::strtol(env, nullptr, 10)) : 0;
        return v == 1 || v == 2 || v == 4 || v == 8 ? v : 0;
    }();
    return forced ? forced : batched ? 4 : 8;
}

template <int ND, int KU>
struct attn_partial_kernel_of {
    static constexpr auto value = attn_partial_kernel<ND, KU>;
};
template <int ND, int KU>
struct attn_fused_kernel_of {
    static constexpr auto value = attn_fused_kernel<ND, KU>;
};

// The instantiation for ND = nd rounded up to 1, 2, 4 or 8 and attn_keys(batched).
template <template <int, int> class K>
auto attn_kernel_for(int nd, bool batched) {
    const int ku = attn_keys(batched);
    auto pick = [&](auto nd_c) {
        constexpr int N = decltype(nd_c)::value;
        return ku == 8 ? K<N, 8>::value : ku == 4 ? K<N, 4>::value : ku == 2 ? K<N, 2>::value : K<N, 1>::value;
    };
    return nd <= 1   ? pick(std::integral_constant<int, 1>{})
           : nd <= 2 ? pick(std::integral_constant<int, 2>{})
           : nd <= 4 ? pick(std::integral_constant<int, 4>{})
                     : pick(std::integral_constant<int, 8>{});
}

// Query heads per attention block (attn_block_heads' G): set_attention_group, else MEMTILE_CUDA_ATTN_GROUP, else 0.
// 0: as many of a KV head's query heads as the GQA kernels allow (attn_group_max), cut evenly over the KV head's
// blocks; 1: one head per block (the kernels before session 24); n: at most n. Read at launch (graph capture).
static int g_attn_group = -1;
static int attention_group_setting() {
    if (g_attn_group < 0) {
        const char* env = std::getenv("MEMTILE_CUDA_ATTN_GROUP");
        g_attn_group = env ? std::max(0, int(std::strtol(env, nullptr, 10))) : 0;
    }
    return g_attn_group;
}

void set_attention_group(int g);  // cuda-backend.h
void set_attention_group(int g) {
    g_attn_group = std::max(0, g);
}

// The GQA blocks' key steps: 2 (default) on tensor cores (attn_gqa_block_mma; head_dim 64 or 128, else form 1:
// docs/cuda-log-s18-s31.md, "Session 28"); 1 a warp's keys of a tile batched where they are all keys of the split
// (attn_gqa_keys), 0 one attn_key_step per key (the loop before session 26), both bit-equal to one head per block.
// set_attention_pipe, else MEMTILE_CUDA_ATTN_PIPE.
constexpr int k_attn_pipe_default = 2, k_attn_pipes = 3,
              k_attn_pipe_mma = detail::k_attn_form_mma;  // cuda-backend.h's k_attention_pipe*
static int g_attn_pipe = -1;
static int attention_pipe_setting() {
    if (g_attn_pipe < 0) {
        const char* env = std::getenv("MEMTILE_CUDA_ATTN_PIPE");
        const int v = env ? int(std::strtol(env, nullptr, 10)) : k_attn_pipe_default;
        g_attn_pipe = v >= 0 && v < k_attn_pipes ? v : k_attn_pipe_default;
    }
    return g_attn_pipe;
}
void set_attention_pipe(int pipe);  // cuda-backend.h (C++20, not included here)
void set_attention_pipe(int pipe) {
    g_attn_pipe = pipe >= 0 && pipe < k_attn_pipes ? pipe : -1;
}
// Calls f(std::integral_constant<int, PIPE>) for the setting of the bit-equal forms (form 2 where it does not apply:
// 1).
template <typename F>
void with_pipe(F f) {
    if (attention_pipe_setting() >= 1) return f(std::integral_constant<int, 1>{});
    return f(std::integral_constant<int, 0>{});
}

// The tensor-core kernels' shared memory above the static 48 KB, set once for all of them (first from the decoder's
// load through attention_wave_splits, outside any graph capture).
static void configure_attn_mma() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto set = [](auto k) {
            using K = decltype(k);
            for (const void* f :
                 {reinterpret_cast<const void*>(K::rope), reinterpret_cast<const void*>(K::rope_early),
                  reinterpret_cast<const void*>(K::rope_fused), reinterpret_cast<const void*>(K::rope_fused_early),
                  reinterpret_cast<const void*>(K::rows), reinterpret_cast<const void*>(K::rows_fused)})
                cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, K::bytes);
        };
        set(attn_mma_kernels<2>{});
        set(attn_mma_kernels<4>{});
        cudaGetLastError();
    });
}
// Whether the GQA blocks of head_dim hd take the tensor-core key steps (form 2 set, head_dim 64 or 128).
static bool attn_mma_applies(int hd) {
    return attention_pipe_setting() == k_attn_pipe_mma && detail::attn_mma_head(hd);
}
// Where attn_mma_applies(hd): calls f(attn_mma_kernels<hd / 32>{}) and returns true.
template <typename F>
bool with_mma(int hd, F f) {
    if (!attn_mma_applies(hd)) return false;
    configure_attn_mma();
    if (hd == 64)
        f(attn_mma_kernels<2>{});
    else
        f(attn_mma_kernels<4>{});
    return true;
}

// attn_group_heads (attention-group.h) for these heads, caches and splits on this device.
static int attn_group(const rope_params& p, const void* kc, const void* vc, int n_split, int n_rows,
                      int64_t slot_stride = 0) {
    static const int sms = [] {
        int n = 0;
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
        return std::max(n, 1);
    }();
    const bool aligned =
        (reinterpret_cast<uintptr_t>(kc) | reinterpret_cast<uintptr_t>(vc)) % 16 == 0 && slot_stride % 8 == 0;
    const bool mma = attn_mma_applies(p.head_dim);
    return attn_group_heads(
        {p.n_head, p.n_head_kv, p.head_dim, n_split, n_rows, attention_group_setting(), aligned, mma, sms});
}

// Calls f(std::integral_constant<int, ND>) for ND = nd rounded up to 1, 2, 4 or 8.
template <typename F>
void with_nd(int nd, F f) {
    if (nd <= 1)
        f(std::integral_constant<int, 1>{});
    else if (nd <= 2)
        f(std::integral_constant<int, 2>{});
    else if (nd <= 4)
        f(std::integral_constant<int, 4>{});
    else
        f(std::integral_constant<int, 8>{});
}

// attn_gqa_kernel (fused: hc > 0, with its merges) for G > 1 heads per block.
static void launch_attention_gqa(const float* q, int64_t q_stride, int n_rows, const rope_params& p, const int32_t* pos,
                                 const int32_t* slots, int64_t slot_stride, const __half* kc, const __half* vc,
                                 int n_split, float* partial, int hc, unsigned* counters, float* out, int qb,
                                 int8_t* xq, float* xd, float* xs, int G, cudaStream_t s) {
    const dim3 grid{unsigned(p.n_head_kv * ((p.n_head / p.n_head_kv + G - 1) / G)), unsigned(n_split),
                    unsigned(n_rows)};
    if (with_mma(p.head_dim, [&](auto k) {
            using K = decltype(k);
            detail::launch_smem(hc > 0 ? K::rows_fused : K::rows, grid, 32 * k_attn_warps, K::bytes, s, q, q_stride, kc,
                                vc, slots, slot_stride, p, pos, partial, hc, counters, out, qb, xq, xd, xs, G);
        }))
        return;
    with_nd((p.head_dim + 31) / 32, [&](auto nd_c) {
        constexpr int N = decltype(nd_c)::value, GB = attn_group_max(N);
        with_pipe([&](auto pipe_c) {
            constexpr int P = decltype(pipe_c)::value;
            launch(hc > 0 ? attn_gqa_kernel<N, GB, true, P> : attn_gqa_kernel<N, GB, false, P>, grid,
                   32 * k_attn_warps * G, s, q, q_stride, kc, vc, slots, slot_stride, p, pos, partial, hc, counters,
                   out, qb, xq, xd, xs, G);
        });
    });
}

// The separate merge of the partial states (attn_combine_kernel, + quantization as launch_quantize).
static void launch_attention_merge(const float* partial, int n_rows, const rope_params& p, int n_split, float* out,
                                   int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s) {
    if (p.head_dim < 8 || n_split < 1 || n_split > 32)
        throw std::invalid_argument("[cuda] attention merge: head_dim " + std::to_string(p.head_dim) + ", " +
                                    std::to_string(n_split) + " splits (head_dim >= 8 and 1..32 splits)");
    const int n = p.n_head * p.head_dim;
    const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
    const bool fused = xq && q_block > 0 && n % 32 == 0;
    launch(attn_combine_kernel, dim3(unsigned((n + 255) / 256), unsigned(n_rows)), 256, s, partial, n_split, p.n_head,
           p.head_dim, out, qb, fused ? xq : static_cast<int8_t*>(nullptr), xd, xs);
    if (xq && q_block > 0 && !fused) launch_quantize_rows(out, n_rows, n, q_block, xq, xd, xs, s);
}

static void launch_attention_core(const float* q, int64_t q_stride, int n_rows, const rope_params& p,
                                  const int32_t* pos, const int32_t* slots, int64_t slot_stride,
                                  const uint16_t* k_cache, const uint16_t* v_cache, int n_split, float* partial,
                                  float* out, int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s) {
    const int n_head = p.n_head, n_head_kv = p.n_head_kv, head_dim = p.head_dim;
    const dim3 grid{unsigned(n_head), unsigned(n_split), unsigned(n_rows)};
    const auto* kc = reinterpret_cast<const __half*>(k_cache);
    const auto* vc = reinterpret_cast<const __half*>(v_cache);
    const int nd = (head_dim + 31) / 32, G = attn_group(p, kc, vc, n_split, n_rows, slot_stride);
    if (G > 1) {
        launch_attention_gqa(q, q_stride, n_rows, p, pos, slots, slot_stride, kc, vc, n_split, partial, 0, nullptr,
                             nullptr, 0, nullptr, nullptr, nullptr, G, s);
    } else {
        auto* kernel = attn_kernel_for<attn_partial_kernel_of>(nd, slots != nullptr);
        launch(kernel, grid, 32 * k_attn_warps, s, q, q_stride, kc, vc, slots, slot_stride, n_head, n_head_kv, head_dim,
               p.split_keys, pos, partial);
    }
    launch_attention_merge(partial, n_rows, p, n_split, out, q_block, xq, xd, xs, s);
}

// Heads per merge chunk of the fused attention kernel (a whole number of quantization units, 32 or 256 elements),
// or 0 when the shapes do not allow it.
static int attn_chunk_heads(const rope_params& p, int q_block, bool quantize) {
    const int n = p.n_head * p.head_dim;
    if (!quantize) return 1;
    if (n % 32 != 0) return 0;
    const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
    const int hc = p.head_dim % qb == 0 ? 1 : qb % p.head_dim == 0 ? qb / p.head_dim : 0;
    return hc > 0 && p.n_head % hc == 0 ? hc : 0;
}

int attention_merge_counters(int n_head) {
    return n_head;
}

bool launch_attention_fused(float* qkv, int64_t q_stride, int n_rows, const rope_params& p, const int32_t* pos,
                            const int32_t* slots, int64_t slot_stride, const uint16_t* k_cache, const uint16_t* v_cache,
                            int n_split, float* partial, unsigned* counters, float* out, int q_block, int8_t* xq,
                            float* xd, float* xs, cudaStream_t s) {
    const bool quantize = xq && q_block > 0;
    const int hc = attn_chunk_heads(p, q_block, quantize);
    if (hc == 0 || hc > 32 || hc * p.head_dim > 256 || n_split > 32) return false;
    const int n = p.n_head * p.head_dim;
    const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
    const dim3 grid{unsigned(p.n_head), unsigned(n_split), unsigned(n_rows)};
    const auto* kc = reinterpret_cast<const __half*>(k_cache);
    const auto* vc = reinterpret_cast<const __half*>(v_cache);
    const int nd = (p.head_dim + 31) / 32, G = attn_group(p, kc, vc, n_split, n_rows, slot_stride);
    if (G > 1) {
        launch_attention_gqa(qkv, q_stride, n_rows, p, pos, slots, slot_stride, kc, vc, n_split, partial, hc, counters,
                             out, qb, quantize ? xq : static_cast<int8_t*>(nullptr), xd, xs, G, s);
        return true;
    }
    auto* kernel = attn_kernel_for<attn_fused_kernel_of>(nd, slots != nullptr);
    launch(kernel, grid, 32 * k_attn_warps, s, static_cast<const float*>(qkv), q_stride, kc, vc, slots, slot_stride,
           p.n_head, p.n_head_kv, p.head_dim, p.split_keys, pos, partial, hc, counters, out, qb,
           quantize ? xq : static_cast<int8_t*>(nullptr), xd, xs);
    return true;
}

template <int ND>
struct attn_rope_kernels {
    static constexpr auto partial = attn_rope_partial_kernel<ND, false>,
                          partial_early = attn_rope_partial_kernel<ND, true>;
    static constexpr auto fused = attn_rope_fused_kernel<ND, false>, fused_early = attn_rope_fused_kernel<ND, true>;
    static constexpr auto cluster = attn_rope_cluster_kernel<ND, false>,
                          cluster_early = attn_rope_cluster_kernel<ND, true>;
};

// Calls f(attn_rope_kernels<ND>{}) for ND = nd rounded up to 1, 2, 4 or 8.
template <typename F>
void with_rope_kernels(int nd, F f) {
    if (nd <= 1)
        f(attn_rope_kernels<1>{});
    else if (nd <= 2)
        f(attn_rope_kernels<2>{});
    else if (nd <= 4)
        f(attn_rope_kernels<4>{});
    else
        f(attn_rope_kernels<8>{});
}

bool launch_attention_rope(const float* qkv, const float* bias, const rope_params& p, const int32_t* pos,
                           uint16_t* k_cache, uint16_t* v_cache, int n_split, float* partial, unsigned* counters,
                           float* out, int q_block, int8_t* xq, float* xd, float* xs, bool early, bool cluster,
                           cudaStream_t s) {
    if (attn_keys(false) != k_attn_rope_keys || p.head_dim % 2 != 0) return false;
    auto* kc = reinterpret_cast<__half*>(k_cache);
    auto* vc = reinterpret_cast<__half*>(v_cache);
    const int nd = (p.head_dim + 31) / 32;
    const dim3 grid{unsigned(p.n_head), unsigned(n_split)};
    const bool quantize = xq && q_block > 0;
    const int G = attn_group(p, kc, vc, n_split, 1);
    // The cluster merge runs one head per block: not where the tensor-core GQA blocks take the heads (at 8 splits),
    // which the batched step would take for the same sequence (a batch of one must give the single step's bits).
    if (cluster && !(G > 1 && attn_mma_applies(p.head_dim))) {
        const int hc = attn_chunk_heads(p, q_block, quantize);
        const int n = p.n_head * p.head_dim;
        const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
        if (hc > 0 && hc * n_split <= 8 && hc * p.head_dim <= 256 &&
            (!quantize || qb == 32 || hc * p.head_dim == 256)) {
            auto go = [&](auto k) {
                using K = decltype(k);
                detail::launch_cluster(early ? K::cluster_early : K::cluster, grid, 32 * k_attn_warps, 0,
                                       dim3(unsigned(hc), unsigned(n_split), 1), s, qkv, bias, p, pos, kc, vc, hc, out,
                                       qb, quantize ? xq : static_cast<int8_t*>(nullptr), xd, xs);
            };
            with_rope_kernels(nd, go);
            return true;
        }
    }
    const int hc = counters ? attn_chunk_heads(p, q_block, quantize) : 0;
    const bool fused = hc > 0 && hc <= 32 && hc * p.head_dim <= 256 && n_split <= 32;
    if (G > 1) {
        const int n = p.n_head * p.head_dim;
        const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
        const dim3 grid_g{unsigned(p.n_head_kv * ((p.n_head / p.n_head_kv + G - 1) / G)), unsigned(n_split)};
        int8_t* xq_g = quantize && fused ? xq : static_cast<int8_t*>(nullptr);
        const bool mma = with_mma(p.head_dim, [&](auto k) {
            using K = decltype(k);
            auto* kernel = fused ? (early ? K::rope_fused_early : K::rope_fused) : (early ? K::rope_early : K::rope);
            detail::launch_smem(kernel, grid_g, 32 * k_attn_warps, K::bytes, s, qkv, bias, p, pos, kc, vc, partial,
                                fused ? hc : 0, counters, out, qb, xq_g, xd, xs, G);
        });
        if (!mma)
            with_nd(nd, [&](auto nd_c) {
                constexpr int N = decltype(nd_c)::value, GB = attn_group_max(N);
                with_pipe([&](auto pipe_c) {
                    constexpr int P = decltype(pipe_c)::value;
                    auto* k = fused ? (early ? attn_rope_gqa_kernel<N, GB, true, true, P>
                                             : attn_rope_gqa_kernel<N, GB, false, true, P>)
                                    : (early ? attn_rope_gqa_kernel<N, GB, true, false, P>
                                             : attn_rope_gqa_kernel<N, GB, false, false, P>);
                    launch(k, grid_g, 32 * k_attn_warps * G, s, qkv, bias, p, pos, kc, vc, partial, fused ? hc : 0,
                           counters, out, qb, xq_g, xd, xs, G);
                });
            });
        if (!fused) launch_attention_merge(partial, 1, p, n_split, out, q_block, xq, xd, xs, s);
        return true;
    }
    if (fused) {
        const int n = p.n_head * p.head_dim;
        const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
        auto go = [&](auto k) {
            using K = decltype(k);
            launch(early ? K::fused_early : K::fused, grid, 32 * k_attn_warps, s, qkv, bias, p, pos, kc, vc, partial,
                   hc, counters, out, qb, quantize ? xq : static_cast<int8_t*>(nullptr), xd, xs);
        };
        with_rope_kernels(nd, go);
        return true;
    }
    auto go = [&](auto k) {
        using K = decltype(k);
        launch(early ? K::partial_early : K::partial, grid, 32 * k_attn_warps, s, qkv, bias, p, pos, kc, vc, partial);
    };
    with_rope_kernels(nd, go);
    launch_attention_merge(partial, 1, p, n_split, out, q_block, xq, xd, xs, s);
    return true;
}

// The wave is attn_rope_fused_kernel's, the one-head kernel of the single step at more than 8 splits (4 blocks per SM
// on the H100; docs/cuda-log-s18-s31.md, "Session 26": 17 splits one head per block 9 % slower than 16).
int attention_wave_splits(int n_head, int n_head_kv, int head_dim, int n_split) {
    const rope_params p{n_head, n_head_kv, head_dim, head_dim, false, nullptr, nullptr};
    configure_attn_mma();
    if (n_split <= 1 || attn_group(p, nullptr, nullptr, n_split, 1) > 1) return n_split;
    int per_sm = 0, sms = 0;
    with_rope_kernels((head_dim + 31) / 32, [&](auto k) {
        using K = decltype(k);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K::fused, 32 * k_attn_warps, 0);
    });
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaGetLastError();
    return fewest_wave_splits(n_head, n_split, int64_t(per_sm) * sms);
}

void launch_attention(float* qkv, const float* bias, const rope_params& p, const int32_t* pos, uint16_t* k_cache,
                      uint16_t* v_cache, int n_split, float* partial, float* out, int q_block, int8_t* xq, float* xd,
                      float* xs, cudaStream_t s) {
    launch_rope_kv(qkv, bias, p, pos, k_cache, v_cache, s);
    launch_attention_core(qkv, 0, 1, p, pos, nullptr, 0, k_cache, v_cache, n_split, partial, out, q_block, xq, xd, xs,
                          s);
}

void launch_attention_split(float* qkv, const rope_params& p, const int32_t* pos, const uint16_t* k_cache,
                            const uint16_t* v_cache, int n_split, float* partial, float* out, int q_block, int8_t* xq,
                            float* xd, float* xs, cudaStream_t s) {
    launch_attention_core(qkv, 0, 1, p, pos, nullptr, 0, k_cache, v_cache, n_split, partial, out, q_block, xq, xd, xs,
                          s);
}

void launch_attention_batch(float* qkv, int n_rows, const float* bias, const rope_params& p, const int32_t* pos,
                            const int32_t* slots, int64_t slot_stride, uint16_t* k_cache, uint16_t* v_cache,
                            int n_split, float* partial, float* out, int q_block, int8_t* xq, float* xd, float* xs,
                            cudaStream_t s) {
    launch_rope_kv_batch(qkv, n_rows, bias, p, pos, slots, slot_stride, k_cache, v_cache, s);
    launch_attention_core(qkv, p.n_head * p.head_dim + 2 * p.n_head_kv * p.head_dim, n_rows, p, pos, slots, slot_stride,
                          k_cache, v_cache, n_split, partial, out, q_block, xq, xd, xs, s);
}

}  // namespace memtile::cuda
