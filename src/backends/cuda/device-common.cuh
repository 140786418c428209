// Device helpers shared by the CUDA translation units (decode step, prefill pass, batched decode): loads,
// warp reductions, byte access into 16-byte vectors, the K-quant 6-bit scale/min unpacking, and the split-K
// attention merge. One copy, so that the batch-1 and batched paths keep the same arithmetic (the split-K attention
// body, used by both through ops.cu's kernels, is in ops.cu).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/wave-splits.h"

namespace memtile::cuda {

__device__ __forceinline__ int4 load_stream(const uint8_t* p) {
    return __ldcs(reinterpret_cast<const int4*>(p));
}
__device__ __forceinline__ int4 load_act(const int8_t* p) {
    return __ldg(reinterpret_cast<const int4*>(p));
}
__device__ __forceinline__ float h2f(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// The warp's largest value and its index (ties: the lowest index), in every lane.
__device__ __forceinline__ void warp_argmax(float& best, int& idx) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > best || (ov == best && oi < idx)) {
            best = ov;
            idx = oi;
        }
    }
}
// The block's largest value of logits[b, e) and its lowest index (idx 0x7fffffff when the range is empty or every
// value is NaN), valid in thread 0; blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ void block_argmax_range(const float* logits, int b, int e, float& best, int& idx) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    best = -INFINITY;
    idx = 0x7fffffff;
    // 8 loads issued before their compares: one dependent L2 round trip per 8 values instead of per value.
    constexpr int unroll = 8;
    const int stride = int(blockDim.x);
    for (int i0 = b + int(threadIdx.x); i0 < e; i0 += unroll * stride) {
        float v[unroll];
#pragma unroll
        for (int k = 0; k < unroll; k++) v[k] = i0 + k * stride < e ? logits[i0 + k * stride] : -INFINITY;
#pragma unroll
        for (int k = 0; k < unroll; k++)
            if (v[k] > best) {  // strided scan: earlier indices first, so ">" keeps the lowest index of equal values
                best = v[k];
                idx = i0 + k * stride;
            }
    }
    warp_argmax(best, idx);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        bv[warp] = best;
        bi[warp] = idx;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < int(blockDim.x >> 5) ? bv[lane] : -INFINITY;
        idx = lane < int(blockDim.x >> 5) ? bi[lane] : 0x7fffffff;
        warp_argmax(best, idx);
    }
}
// The index of the block's largest value of logits[0, n) (lowest on ties), in thread 0; 0 when n == 0 or every
// value is NaN.
__device__ __forceinline__ int block_argmax(const float* logits, int n) {
    float best;
    int idx;
    block_argmax_range(logits, 0, n, best, idx);
    return idx == 0x7fffffff ? 0 : idx;
}
__device__ __forceinline__ int word(const int4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// Dot product of 4 unsigned bytes of a with 4 signed bytes of b, plus c: the high nibbles of 4-bit quants
// masked in place (q << 4, no shift) are unsigned.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// float(byte i of v), exact: the byte placed in the mantissa of 2^23 (one byte permute) minus 2^23, no
// int-to-float conversion (a quarter-rate instruction).
template <int I>
__device__ __forceinline__ float byte_float(uint32_t v) {
    return __uint_as_float(__byte_perm(v, 0x4b000000u, 0x7540u | I)) - 8388608.0f;
}
// Q4_K in the device layout (cuda-kernels.h): the side words of a row.
__device__ __forceinline__ const uint32_t* q4k_side_of(const uint16_t* d, int64_t row, int n_sb) {
    return reinterpret_cast<const uint32_t*>(d) + row * q4k_side_row_words(n_sb);
}

// Q6_K in the device layout (cuda-kernels.h). Word c of the dp4a operand (4 bytes, each the signed 4v) of sub-block
// 4g + k, k < 3, is word c of piece 3g + k masked; that of sub-block 4g + 3 gathers bits 0..1 of word c of pieces
// 3g..3g+2.
__device__ __forceinline__ int q6k_operand(int w) {
    return w & int(0xfcfcfcfcu);
}
__device__ __forceinline__ int q6k_operand3(int w0, int w1, int w2) {
    const uint32_t m = 0x03030303u;  // each byte's 2 bits shifted by at most 6: no carry into the next byte
    return int((((uint32_t(w0) & m) * 4 + (uint32_t(w1) & m)) * 4 + (uint32_t(w2) & m)) * 4);
}
// Byte offset in a half of word c of piece 3g + k (k < 3).
__device__ __forceinline__ int q6k_word_byte(int c, int g, int k) {
    return 16 * (3 * g + k) + 4 * c;
}
// The signed value v (-32..31; x = d * scale * v) of element i of a row of n_half halves.
__device__ __forceinline__ int q6k_value(const uint8_t* row, int64_t i, int64_t n_half) {
    const int e = int(i & 127), s = e >> 4, g = s >> 2, k = s & 3, c = (e & 15) >> 2;
    auto at = [&](int p) { return row[q6k_half_byte(i >> 7, q6k_word_byte(c, g, p) + (e & 3), n_half)]; };
    if (k < 3) return int(int8_t(at(k))) >> 2;
    const int f = ((at(0) & 3) << 4) | ((at(1) & 3) << 2) | (at(2) & 3);
    return int(int8_t(uint8_t(f << 2))) >> 2;
}
// Word c of piece 3g + k of half j (aligned 4-byte load).
__device__ __forceinline__ int q6k_word(const uint8_t* row, int64_t j, int c, int g, int k, int64_t n_half) {
    return *reinterpret_cast<const int*>(row + q6k_half_byte(j, q6k_word_byte(c, g, k), n_half));
}

// Byte i (0..15, may be a run-time value) of a 16-byte vector, by selects rather than a local-memory array.
__device__ __forceinline__ uint32_t byte_of(const int4& v, int i) {
    const int w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
    return (uint32_t(w) >> (8 * (i & 3))) & 0xffu;
}
// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block whose first 16 bytes (d, dmin, 12 scale
// bytes) are h.
__device__ __forceinline__ void scale_min(const int4& h, int j, float& sc, float& mn) {
    if (j < 4) {
        sc = float(byte_of(h, 4 + j) & 63);
        mn = float(byte_of(h, 8 + j) & 63);
    } else {
        sc = float((byte_of(h, 8 + j) & 0xf) | ((byte_of(h, j) >> 6) << 4));
        mn = float((byte_of(h, 8 + j) >> 4) | ((byte_of(h, 4 + j) >> 6) << 4));
    }
}
// The same from the 12 scale bytes sc of a super-block in memory.
__device__ __forceinline__ void scale_min_bytes(const uint8_t* sc, int s, int& scale, int& mn) {
    if (s < 4) {
        scale = sc[s] & 63;
        mn = sc[s + 4] & 63;
    } else {
        scale = (sc[s + 4] & 0xf) | ((sc[s - 4] >> 6) << 4);
        mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}

// Quantizes NG groups of 32 held by one warp (v[k]: element 32 (g0 + k) + lane of row `row` of n_rows) with
// one scale for all NG groups, exactly as the CPU engine quantizes activations (q8_0: NG = 1; q8_k: NG = 8, one
// scale per 256): d = amax / 127, q = round-to-nearest-even(x * (127 / amax)); xs = d * sum(q) per group of
// 32. Group g of the row goes to xq[(g * n_rows + row) * 32 ..], xd/xs[g * n_rows + row] (group-major; one row:
// the plain layout of cuda-kernels.h).
template <int NG>
__device__ __forceinline__ void quantize_warp(const float (&v)[NG], int64_t g0, int lane, int8_t* xq, float* xd,
                                              float* xs, int64_t row = 0, int64_t n_rows = 1) {
    float amax = 0;
#pragma unroll
    for (int k = 0; k < NG; k++) amax = fmaxf(amax, fabsf(v[k]));
    amax = warp_max(amax);
    const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
#pragma unroll
    for (int k = 0; k < NG; k++) {
        const int q = __float2int_rn(__fmul_rn(v[k], inv));
        const int64_t g = (g0 + k) * n_rows + row;
        xq[g * 32 + lane] = int8_t(q);
        const int sq = warp_sum_int(q);
        if (lane == 0) {
            xd[g] = d;
            xs[g] = d * float(sq);
        }
    }
}

// Writes out[e] = f(e) for e in [e0, e0 + n_e) with the block's threads and, with xq non-null, quantizes the values
// in units of qb (32 or 256; e0 and n_e multiples of qb), one warp per unit, as quantize_warp: the same bits as the
// element-per-thread kernels (quantize_block256 of ops.cu: max and integer sums do not depend on the order). f is
// evaluated twice per element (amax pass, then the values; callers read values staged in shared memory) to keep few
// registers live. Used by the fused attention merge of the decode step (the last block of a producer finishes a range
// of elements).
template <typename F>
__device__ __forceinline__ void finish_elems(F f, int64_t e0, int n_e, float* out, int qb, int8_t* xq, float* xd,
                                             float* xs, int64_t row = 0, int64_t n_rows = 1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    if (!xq) {
#pragma unroll 1
        for (int i = threadIdx.x; i < n_e; i += blockDim.x) out[e0 + i] = f(e0 + i);
        return;
    }
#pragma unroll 1
    for (int u = warp; u < n_e / qb; u += n_warps) {
        const int64_t b = e0 + int64_t(u) * qb;
        float amax = 0;
#pragma unroll 1
        for (int k = 0; k < qb / 32; k++) amax = fmaxf(amax, fabsf(f(b + 32 * k + lane)));
        amax = warp_max(amax);
        const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
#pragma unroll 1
        for (int k = 0; k < qb / 32; k++) {
            const float v = f(b + 32 * k + lane);
            out[b + 32 * k + lane] = v;
            const int q = __float2int_rn(__fmul_rn(v, inv));
            const int64_t g = (b / 32 + k) * n_rows + row;
            xq[g * 32 + lane] = int8_t(q);
            const int sq = warp_sum_int(q);
            if (lane == 0) {
                xd[g] = d;
                xs[g] = d * float(sq);
            }
        }
    }
}

// Quantizes the 256 values of a block of 256 threads (thread t: element e0 + t of row `row` of n_rows,
// elements from n on absent) exactly as quantize_warp: per group of 32 (q_block 32) or with one scale for all
// 256 (q_block 256, n % 256 == 0). n % 32 == 0, so a warp's 32 elements are all present or all absent. Output
// in the group-major layout of prefill-kernels.h; used by ops.cu and attention-decode.cu (for one row: xq [n], xd and
// xs [n / 32]).
__device__ __forceinline__ void quantize_block256(float v, int64_t e0, int64_t n, int q_block, int8_t* xq, float* xd,
                                                  float* xs, int64_t row, int64_t n_rows) {
    __shared__ float wmax[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float amax = warp_max(fabsf(v));
    if (q_block == 256) {
        if (lane == 0) wmax[warp] = amax;
        __syncthreads();
        amax = wmax[0];
        for (int k = 1; k < 8; k++) amax = fmaxf(amax, wmax[k]);
    }
    if (e0 + warp * 32 >= n) return;
    const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(__fmul_rn(v, inv));
    const int64_t g = (e0 / 32 + warp) * n_rows + row;  // this warp's group, group-major over the rows
    xq[g * 32 + lane] = int8_t(q);
    const int sq = warp_sum_int(q);
    if (lane == 0) {
        xd[g] = d;
        xs[g] = d * float(sq);
    }
}

// The last block of a grid to arrive (counter: zero before the grid, reset here for the next launch or graph
// replay); every thread calls it after its global writes. Returns true in every thread of that block, whose later
// reads of the other blocks' writes must bypass L1 (__ldcg).
__device__ __forceinline__ bool last_block_arrived(unsigned* counter, unsigned expected) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == expected - 1;
        if (last) *counter = 0;  // every other block has arrived: nothing else touches it in this grid
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// cp.async copies into shared memory: 16 bytes through L2 only (.cg), 4 bytes (.ca); commit closes a group of a
// thread's copies, wait_all / wait_group<N> wait for all / all but the N most recent groups of that thread's copies (a
// block barrier is still needed before other threads read them).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

constexpr int k_attn_warps = 4;

// The merge of split-K attention states, per head: partial states p[s * (hd + 2)] = (m, l, acc[hd]) of n_split <= 32
// splits; a split counts where l > 0. Output d = sum_s acc_s[d] w_s / L with w_s = expf(m_s - M), M the largest m_s,
// L = sum_s l_s w_s, the sums as explicit FMAs in split order, so that every merge (the separate kernel, the last
// block of the attention kernels, the cluster merge) has the same bits. Partials come from other blocks: loads bypass
// L1.

// Weights of heads hl < nh (head hl's states at p + hl * n_split * (hd + 2)), one warp per head, lane s loading split
// s: valid[hl] (bit s: split s counts), sw[hl][s] = w_s (0 where it does not count), sl[hl] = L. nh <= 32. The block
// synchronizes before reading them.
__device__ __forceinline__ void attn_merge_weights(const float* p, int nh, int n_split, int hd, float (*sw)[32],
                                                   float* sl, uint32_t* valid) {
    const int lane = threadIdx.x & 31, n_warps = int(blockDim.x >> 5);
    for (int hl = int(threadIdx.x >> 5); hl < nh; hl += n_warps) {
        const float* ps = p + (int64_t(hl) * n_split + lane) * (hd + 2);
        float m = 0, l = 0;
        if (lane < n_split) {
            m = __ldcg(ps);
            l = __ldcg(ps + 1);
        }
        const bool ok = lane < n_split && l > 0;
        const uint32_t mask = __ballot_sync(0xffffffffu, ok);
        const float M = warp_max(ok ? m : -INFINITY);  // a maximum: the same in any order
        const float w = ok ? expf(m - M) : 0.0f;
        float L = 0;
#pragma unroll
        for (int s = 0; s < 32; s++) {
            const float ls = __shfl_sync(0xffffffffu, l, s), ws = __shfl_sync(0xffffffffu, w, s);
            if (mask >> s & 1) L = __fmaf_rn(ls, ws, L);
        }
        sw[hl][lane] = w;
        if (lane == 0) {
            sl[hl] = L;
            valid[hl] = mask;
        }
    }
}

// Output d of the head whose states start at p, from its weights (attn_merge_weights): the acc loads of 16 splits in
// flight at a time rather than one dependent L2 round trip per split.
__device__ __forceinline__ float attn_merge_elem(const float* p, int hd, int d, const float* w, uint32_t valid,
                                                 float L) {
    float a = 0;
#pragma unroll 1
    for (int s0 = 0; s0 < 32 && (valid >> s0) != 0; s0 += 16) {
        float x[16];
#pragma unroll
        for (int s = 0; s < 16; s++) x[s] = valid >> (s0 + s) & 1 ? __ldcg(p + (s0 + s) * (hd + 2) + 2 + d) : 0.0f;
#pragma unroll
        for (int s = 0; s < 16; s++)
            if (valid >> (s0 + s) & 1) a = __fmaf_rn(x[s], w[s0 + s], a);
    }
    return a / L;
}

}  // namespace memtile::cuda
