// Decode matrix-vector kernels (shared by matvec.cu, matvec-kquant.cu and matvec-float.cu, which each
// instantiate one family of formats so that nvcc compiles them in parallel).
//
// A block of 4 warps takes 4 / W groups of R output rows, W warps per group. A row is cut into "tasks" of whole 16-byte
// chunks (a Q8_0 half block, a Q4_0 block, a quarter of a Q4_K/Q5_K super-block, half a Q6_K super-block, 8 f16/bf16 or
// 4 f32 elements); thread i of the block takes tasks i, i + 32 W, ..., so a warp's loads of one instruction cover a
// contiguous span of the row. R rows per block share each activation load (R = 2 halves the L1 traffic of
// the activations); W warps per row give the short-row, few-row matrices (Wo, down: 4,096 rows) enough warps
// to keep the memory system busy. Weights are read once with streaming (evict-first) 16-byte loads; the
// activations (a few KB) are re-read by every block and stay in L1/L2.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"

namespace memtile::cuda::detail {

// Each task function loads its activations once and applies them to the same task of R rows (q[r], d[r]),
// adding into acc[r]: R rows per warp divide the activation traffic through L1 by R. The Q8_0 and F16/BF16
// tasks are split in two: load_* reads the task's weights (and weight scales) of the R rows into a
// task_weights, dot_* applies the activations. The kernel may call load_* for its first tasks before griddep_wait
// (no kernel writes the weights), so that a matvec's first weight bytes are requested while its predecessor still
// runs (matvec_early); the arithmetic is the same either way.

// The weights of one task of R rows: N 16-byte pieces per row and a scale word.
template <int R, int N>
struct task_weights {
    int4 w[R][N];
    uint32_t s[R];
};

// Q8_0 task t: quants t*16..t*16+15 of the row (half of block t/2); s: the f16 scale.
template <int R>
__device__ __forceinline__ void load_q8_0(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], int t,
                                          task_weights<R, 1>& tw) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        tw.w[r][0] = load_stream(q[r] + 16 * t);
        tw.s[r] = __ldg(d[r] + t / 2);
    }
}
template <int R>
__device__ __forceinline__ void dot_q8_0(const task_weights<R, 1>& tw, const int8_t* xq, const float* xd, int t,
                                         float (&acc)[R]) {
    const int4 a = load_act(xq + 16 * t);
    const float ad = xd[t / 2];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int4 w = tw.w[r][0];
        int s = __dp4a(w.x, a.x, 0);
        s = __dp4a(w.y, a.y, s);
        s = __dp4a(w.z, a.z, s);
        s = __dp4a(w.w, a.w, s);
        acc[r] += h2f(uint16_t(tw.s[r])) * ad * float(s);
    }
}

// Q4_0 task b: block b (16 bytes: element j in the low nibble of byte j, element j + 16 in the high one).
template <int R>
__device__ __forceinline__ void task_q4_0(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                          const float* xd, const float* xs, int b, float (&acc)[R]) {
    const int4 a0 = load_act(xq + 32 * b), a1 = load_act(xq + 32 * b + 16);
    const float ad = xd[b], as = xs[b];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int4 w = load_stream(q[r] + 16 * b);
        // High nibbles masked in place (16 q, unsigned dp4a): no shift per word; hi is a multiple of 16.
        int lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo = __dp4a(word(w, k) & 0x0f0f0f0f, word(a0, k), lo);
            hi = dp4a_us(uint32_t(word(w, k)) & 0xf0f0f0f0u, word(a1, k), hi);
        }
        const int s = lo + (hi >> 4);
        acc[r] += h2f(__ldg(d[r] + b)) * (ad * float(s) - 8.0f * as);
    }
}

// Q4_K task t: super-block t/4, c = t%4: quant bytes 32c..32c+31 hold sub-block 2c (low nibbles) and 2c+1
// (high nibbles), elements 64c..64c+63 of the super-block. Q5_K (FIVE): bit 4 of element l of sub-block s is
// bit s of qh[l]; its block is header 16 | qh 32 | qs 128.
template <int R, bool FIVE>
__device__ __forceinline__ void task_qk(const uint8_t* const (&q)[R], const int8_t* xq, const float* xd,
                                        const float* xs, int t, int c, float (&acc)[R]) {
    // c = t % 4 is the same for all of a thread's tasks (the task stride is a multiple of 4): the byte
    // positions of its two scales/mins and the branch between the two packings are loop-invariant.
    const int b = t >> 2;
    const int8_t* ax = xq + b * 256 + 64 * c;
    const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32), a3 = load_act(ax + 48);
    const int g = b * 8 + 2 * c;
    const float2 ad = *reinterpret_cast<const float2*>(xd + g), as = *reinterpret_cast<const float2*>(xs + g);
    const int s0 = 2 * c, s1 = 2 * c + 1;
    const int sh = 8 * (s0 & 3);  // scales/mins s0, s1 sit in bytes s0 % 4 and s0 % 4 + 1 of their words
    const bool high = c >= 2;     // sub-blocks 4..7: 4 low bits in bytes 8..11, 2 high bits in bytes 0..7
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint8_t* blk = q[r] + int64_t(b) * (FIVE ? 176 : 144);
        const int4 h = load_stream(blk);
        const int qs_off = FIVE ? 48 : 16;
        const int4 w0 = load_stream(blk + qs_off + 32 * c), w1 = load_stream(blk + qs_off + 16 + 32 * c);
        int4 qh0 = make_int4(0, 0, 0, 0), qh1 = qh0;
        if (FIVE) {
            qh0 = load_stream(blk + 16);
            qh1 = load_stream(blk + 32);
        }
        int lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int l0 = word(w0, k) & 0x0f0f0f0f, l1 = word(w1, k) & 0x0f0f0f0f;
            int h0 = (word(w0, k) >> 4) & 0x0f0f0f0f, h1 = (word(w1, k) >> 4) & 0x0f0f0f0f;
            if (FIVE) {
                const int hA = word(qh0, k), hB = word(qh1, k);
                l0 |= ((hA >> s0) & 0x01010101) << 4;
                l1 |= ((hB >> s0) & 0x01010101) << 4;
                h0 |= ((hA >> s1) & 0x01010101) << 4;
                h1 |= ((hB >> s1) & 0x01010101) << 4;
            }
            lo = __dp4a(l0, word(a0, k), lo);
            lo = __dp4a(l1, word(a1, k), lo);
            hi = __dp4a(h0, word(a2, k), hi);
            hi = __dp4a(h1, word(a3, k), hi);
        }
        // Two scales (and two mins) at once, one per byte: s0 in bits 0..7, s1 in bits 8..15.
        const uint32_t y = uint32_t(h.y) >> sh, z = uint32_t(h.z) >> sh, v = uint32_t(h.w) >> sh;
        const uint32_t sc = high ? (v & 0x0f0fu) | ((y >> 2) & 0x3030u) : y & 0x3f3fu;
        const uint32_t mn = high ? ((v >> 4) & 0x0f0fu) | ((z >> 2) & 0x3030u) : z & 0x3f3fu;
        const float sc0 = float(sc & 0xffu), sc1 = float((sc >> 8) & 0xffu);
        const float mn0 = float(mn & 0xffu), mn1 = float((mn >> 8) & 0xffu);
        const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&h.x));  // d, dmin
        acc[r] += dd.x * (sc0 * ad.x * float(lo) + sc1 * ad.y * float(hi)) - dd.y * (mn0 * as.x + mn1 * as.y);
    }
}

// Q4_K task t (device layout, device-common.cuh): super-block b = t/4, c = t%4: quant bytes 32c..32c+31 hold
// sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles), elements 64c..64c+63. Per row: two 16-byte quant loads,
// the task's scale word and the d/dmin word; the low nibbles are masked for a signed dp4a, the high ones
// masked in place (16 q) for an unsigned one, so no shift per quant word and no 6-bit scale unpacking. Both
// sub-blocks share one activation scale (q8_k: one per 256), so lo sc0 + hi sc1 is summed exactly in integers
// (< 2^23) and converted once; the mins use the block sums xs.
template <int R>
__device__ __forceinline__ void task_q4k(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                         const float* xd, const float* xs, int t, int c, float (&acc)[R]) {
    const int b = t >> 2;
    const int8_t* ax = xq + b * 256 + 64 * c;
    const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32), a3 = load_act(ax + 48);
    const int g = b * 8 + 2 * c;
    const float ad = xd[g];
    const float2 as = *reinterpret_cast<const float2*>(xs + g);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int4 w0 = load_stream(q[r] + b * 128 + 32 * c), w1 = load_stream(q[r] + b * 128 + 32 * c + 16);
        const uint32_t* side = reinterpret_cast<const uint32_t*>(d[r]);  // row's side words (cuda-kernels.h)
        const uint32_t sm = __ldg(side + q4k_sm_word(b) + c), dm = __ldg(side + q4k_dm_word(b));
        int lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo = __dp4a(word(w0, k) & 0x0f0f0f0f, word(a0, k), lo);
            lo = __dp4a(word(w1, k) & 0x0f0f0f0f, word(a1, k), lo);
            hi = dp4a_us(uint32_t(word(w0, k)) & 0xf0f0f0f0u, word(a2, k), hi);
            hi = dp4a_us(uint32_t(word(w1, k)) & 0xf0f0f0f0u, word(a3, k), hi);
        }
        // hi = 16 * (dot of sub-block 2c + 1), so (hi * sc1) >> 4 is exact.
        const int isum = lo * int(sm & 0xffu) + ((hi * int((sm >> 8) & 0xffu)) >> 4);
        const float mn = byte_float<2>(sm) * as.x + byte_float<3>(sm) * as.y;
        const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&dm));  // d, dmin
        acc[r] += dd.x * ad * float(isum) - dd.y * mn;
    }
}

// Q6_K task t = half t of the row (device layout, cuda-kernels.h): super-block b = t/2, elements 128 (t%2) .. +127;
// six 16-byte loads per row (pieces), which for the warp's 32 consecutive tasks read 512 contiguous bytes each. Word c
// of the dp4a operands of sub-block 4g + k: word c of piece 3g + k masked (k < 3) or the low bits of word c of pieces
// 3g..3g+2 gathered (k = 3). The quants are the signed 4v, so no offset term; the 8 sub-blocks' scaled dots
// are summed exactly in integers (|sum| < 2^29) and converted once: the activation scale is one per super-block
// (q8_k). The sum is 4 times GGUF's, undone by the exact scale ad / 4.
template <int R>
__device__ __forceinline__ void task_q6_k(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                          const float* xd, int t, int n_half, float (&acc)[R]) {
    const int b = t >> 1;
    // Every load of the task first, the scales d included: a row has 1-4 tasks per thread, so a load issued after the
    // arithmetic would add a memory latency to each.
    const int grp = t >> 5, n_grp = min(32, n_half - 32 * grp);  // the group of 32 halves (n_grp in the last)
    const int piece0 = 3072 * grp + 16 * (t & 31);
    int4 C[R][6];
    int2 sc[R];
    float dw[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int i = 0; i < 6; i++) C[r][i] = load_stream(q[r] + piece0 + 16 * n_grp * i);
        sc[r] = __ldcs(reinterpret_cast<const int2*>(q[r] + q6k_scale_byte(t, n_half)));
        dw[r] = h2f(__ldg(d[r] + b));
    }
    const float ad = xd[b * 8] * 0.25f;
    const int8_t* ax = xq + 128 * t;
    int part[R];
#pragma unroll
    for (int r = 0; r < R; r++) part[r] = 0;
#pragma unroll
    for (int s = 0; s < 8; s++) {
        const int4 a = load_act(ax + 16 * s);
        const int g = s / 4, k = s % 4;
#pragma unroll
        for (int r = 0; r < R; r++) {
            int dot = 0;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                auto w = [&](int n) { return word(C[r][n], c); };  // word c of piece n
                const int op = k < 3 ? q6k_operand(w(3 * g + k)) : q6k_operand3(w(3 * g), w(3 * g + 1), w(3 * g + 2));
                dot = __dp4a(op, word(a, c), dot);
            }
            const int scw = s < 4 ? sc[r].x : sc[r].y;
            part[r] += int(int8_t(scw >> (8 * (s % 4)))) * dot;
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] += dw[r] * (ad * float(part[r]));
}

__device__ __forceinline__ float dot8_f16(const int4& w, const float4& x0, const float4& x1) {
    const float2 p0 = __half22float2(*reinterpret_cast<const __half2*>(&w.x));
    const float2 p1 = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
    const float2 p2 = __half22float2(*reinterpret_cast<const __half2*>(&w.z));
    const float2 p3 = __half22float2(*reinterpret_cast<const __half2*>(&w.w));
    return p0.x * x0.x + p0.y * x0.y + p1.x * x0.z + p1.y * x0.w + p2.x * x1.x + p2.y * x1.y + p3.x * x1.z +
           p3.y * x1.w;
}
__device__ __forceinline__ float bf_lo(int w) {
    return __uint_as_float(uint32_t(w) << 16);
}
__device__ __forceinline__ float bf_hi(int w) {
    return __uint_as_float(uint32_t(w) & 0xffff0000u);
}
__device__ __forceinline__ float dot8_bf16(const int4& w, const float4& x0, const float4& x1) {
    return bf_lo(w.x) * x0.x + bf_hi(w.x) * x0.y + bf_lo(w.y) * x0.z + bf_hi(w.y) * x0.w + bf_lo(w.z) * x1.x +
           bf_hi(w.z) * x1.y + bf_lo(w.w) * x1.z + bf_hi(w.w) * x1.w;
}

// Element i of a row of a plain float format (scalar path for rows that are not a multiple of the vector).
__device__ __forceinline__ float plain_elem(dtype t, const uint8_t* row, int64_t i) {
    if (t == dtype::f32) return reinterpret_cast<const float*>(row)[i];
    const uint16_t b = reinterpret_cast<const uint16_t*>(row)[i];
    return t == dtype::f16 ? h2f(b) : __uint_as_float(uint32_t(b) << 16);
}

constexpr int k_block_warps = 4;

// Formats whose first tasks may be loaded before griddep_wait (matvec_early). Q4_0, Q4_K and Q6_K were measured slower
// with it (docs/cuda.md, session 5 gf16), so they keep every load after the wait.
template <dtype T>
constexpr bool k_has_early = T == dtype::q8_0 || T == dtype::f16 || T == dtype::bf16;

// A thread's tasks tid, tid + S, ... < n: the first E loaded (load(t, tw)) before griddep_wait and applied (dot(tw, t))
// after it, the rest loaded and applied in a loop unrolled by U.
template <int E, int S, int U, typename TW, typename Load, typename Dot>
__device__ __forceinline__ void run_tasks(int tid, int n, Load load, Dot dot) {
    TW early[E > 0 ? E : 1];
#pragma unroll
    for (int k = 0; k < E; k++)
        if (tid + k * S < n) load(tid + k * S, early[k]);
    griddep_wait();
    griddep_launch();
#pragma unroll
    for (int k = 0; k < E; k++)
        if (tid + k * S < n) dot(early[k], tid + k * S);
#pragma unroll U
    for (int t = tid + E * S; t < n; t += S) {
        TW tw;
        load(t, tw);
        dot(tw, t);
    }
}

// Block: 4 warps in 4 / W groups of W warps; group g takes rows R * (blockIdx.x * (4 / W) + g) + r, r < R
// (rows past n_out repeat the last row and are not stored), its W warps split the row's tasks. EL: the tasks per row
// that each thread loads before griddep_wait (0: every load after it; only k_has_early formats).
template <dtype T, int R, int W, int EL = 0>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_kernel(gpu_weight w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                  int accumulate) {
    constexpr int S = 32 * W;  // task stride
    constexpr int G = k_block_warps / W;
    constexpr int E = k_has_early<T> ? EL : 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;  // index within the group
    const int64_t row0 = (int64_t(blockIdx.x) * G + group) * R;
    const int n_in = int(w.n_in);
    const int64_t d_row = T == dtype::q6_k   ? n_in / 256
                          : T == dtype::q4_k ? 2 * q4k_side_row_words(n_in / 256)
                                             : n_in / 32;
    const uint8_t* q[R];
    const uint16_t* d[R];
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = min(row0 + r, w.n_out - 1);
        q[r] = w.q + row * w.q_row_bytes;
        d[r] = w.d ? w.d + row * d_row : nullptr;
        acc[r] = 0;
    }
    if constexpr (T == dtype::q8_0) {
        run_tasks<E, S, 2, task_weights<R, 1>>(
            tid, n_in / 16, [&](int t, task_weights<R, 1>& tw) { load_q8_0<R>(q, d, t, tw); },
            [&](const task_weights<R, 1>& tw, int t) { dot_q8_0<R>(tw, xq, xd, t, acc); });
    } else if constexpr (T == dtype::f16 || T == dtype::bf16) {
        if (n_in % 8 == 0) {
            const float4* x4 = reinterpret_cast<const float4*>(x);
            run_tasks<E, S, 4, task_weights<R, 1>>(
                tid, n_in / 8,
                [&](int t, task_weights<R, 1>& tw) {
#pragma unroll
                    for (int r = 0; r < R; r++) tw.w[r][0] = load_stream(q[r] + 16 * t);
                },
                [&](const task_weights<R, 1>& tw, int t) {
                    const float4 x0 = __ldg(x4 + 2 * t), x1 = __ldg(x4 + 2 * t + 1);
#pragma unroll
                    for (int r = 0; r < R; r++)
                        acc[r] += T == dtype::f16 ? dot8_f16(tw.w[r][0], x0, x1) : dot8_bf16(tw.w[r][0], x0, x1);
                });
        } else {
            griddep_wait();
            griddep_launch();
            for (int i = tid; i < n_in; i += S)
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += plain_elem(T, q[r], i) * x[i];
        }
    } else {
        griddep_wait();
        griddep_launch();
        if constexpr (T == dtype::q4_0) {
#pragma unroll 2
            for (int t = tid; t < n_in / 32; t += S) task_q4_0<R>(q, d, xq, xd, xs, t, acc);
        } else if constexpr (T == dtype::q4_k) {
#pragma unroll 2
            for (int t = tid; t < n_in / 64; t += S) task_q4k<R>(q, d, xq, xd, xs, t, tid & 3, acc);
        } else if constexpr (T == dtype::q5_k) {
#pragma unroll 2
            for (int t = tid; t < n_in / 64; t += S) task_qk<R, true>(q, xq, xd, xs, t, tid & 3, acc);
        } else if constexpr (T == dtype::q6_k) {
            // Unrolled by 2 although most threads run 1-4 tasks: measured faster, also on the rows of one task per
            // thread (docs/cuda.md, session 5).
#pragma unroll 2
            for (int t = tid; t < n_in / 128; t += S) task_q6_k<R>(q, d, xq, xd, t, n_in / 128, acc);
        } else if (n_in % 4 == 0) {
            const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
            for (int t = tid; t < n_in / 4; t += S) {
                const float4 a = __ldg(x4 + t);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 v = __ldcs(reinterpret_cast<const float4*>(q[r]) + t);
                    acc[r] += v.x * a.x + v.y * a.y + v.z * a.z + v.w * a.w;
                }
            }
        } else {
            for (int i = tid; i < n_in; i += S)
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += plain_elem(T, q[r], i) * x[i];
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

// The block shapes benchmarked and selectable (matvec_shape): rows per block x warps per block.
template <dtype T, int EL = 0>
void launch_shaped(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                   bool accumulate, matvec_shape shape, cudaStream_t s) {
    const int acc = accumulate ? 1 : 0;
    const int64_t rows_per_block = int64_t(shape.rows) * (k_block_warps / std::max(shape.warps, 1));
    const unsigned blocks = unsigned((w.n_out + rows_per_block - 1) / rows_per_block);
#define MEMTILE_MATVEC_CASE(R, W)                                                                    \
    if (shape.rows == R && shape.warps == W) {                                                       \
        launch(matvec_kernel<T, R, W, EL>, blocks, 32 * k_block_warps, s, w, x, xq, xd, xs, y, acc); \
        return;                                                                                      \
    }
    MEMTILE_MATVEC_CASE(1, 1)
    MEMTILE_MATVEC_CASE(1, 2)
    MEMTILE_MATVEC_CASE(1, 4)
    MEMTILE_MATVEC_CASE(2, 1)
    MEMTILE_MATVEC_CASE(2, 2)
    MEMTILE_MATVEC_CASE(2, 4)
#undef MEMTILE_MATVEC_CASE
    launch(matvec_kernel<T, 2, 1, EL>, unsigned((w.n_out + 7) / 8), 32 * k_block_warps, s, w, x, xq, xd, xs, y, acc);
}

// The early level of the decode matvecs (set_matvec_early in cuda-backend.h; defined in matvec.cu): 0 or 4.
int matvec_early();

// launch_shaped at the current early level (formats without early loads: level 0).
template <dtype T>
void launch_early(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                  bool accumulate, matvec_shape shape, cudaStream_t s) {
    if constexpr (k_has_early<T>) {
        if (matvec_early() == 4) return launch_shaped<T, 4>(w, x, xq, xd, xs, y, accumulate, shape, s);
    }
    launch_shaped<T, 0>(w, x, xq, xd, xs, y, accumulate, shape, s);
}

// Per family (defined in its .cu file).
void launch_matvec_legacy(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                          float* y, bool accumulate, matvec_shape shape, cudaStream_t s);
void launch_matvec_kquant(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                          float* y, bool accumulate, matvec_shape shape, cudaStream_t s);
void launch_matvec_float(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                         float* y, bool accumulate, matvec_shape shape, cudaStream_t s);

}  // namespace memtile::cuda::detail
