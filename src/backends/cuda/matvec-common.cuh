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
#include "backends/cuda/norm-parts.cuh"

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
// NS (the norm parts of norm-fused.h): xd holds the unscaled group scales, multiplied here by the RMSNorm scale sc
// (norm-parts.cuh). The plain kernels call the NS = false form (its code as before the parts: measured).
template <int R, bool NS = false>
__device__ __forceinline__ void dot_q8_0(const task_weights<R, 1>& tw, const int8_t* xq, const float* xd, int t,
                                         float (&acc)[R], float sc = 1.0f) {
    const int4 a = load_act(xq + 16 * t);
    float ad;
    if constexpr (NS)
        ad = __fmul_rn(xd[t / 2], sc);
    else
        ad = xd[t / 2];
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
// q4_0_row: one row's part (w: its 16 quant bytes, dw: its f16 scale), shared by task_q4_0 and the staged tasks.
__device__ __forceinline__ float q4_0_row(const int4& w, uint16_t dw, const int4& a0, const int4& a1, float ad,
                                          float as) {
    // High nibbles masked in place (16 q, unsigned dp4a): no shift per word; hi is a multiple of 16.
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo = __dp4a(word(w, k) & 0x0f0f0f0f, word(a0, k), lo);
        hi = dp4a_us(uint32_t(word(w, k)) & 0xf0f0f0f0u, word(a1, k), hi);
    }
    const int s = lo + (hi >> 4);
    return h2f(dw) * (ad * float(s) - 8.0f * as);
}
// NS: as dot_q8_0; xs then holds the group's sum of quants, times the scaled group scale here.
template <int R, bool NS = false>
__device__ __forceinline__ void task_q4_0(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                          const float* xd, const float* xs, int b, float (&acc)[R], float sc = 1.0f) {
    const int4 a0 = load_act(xq + 32 * b), a1 = load_act(xq + 32 * b + 16);
    const float ad = NS ? __fmul_rn(xd[b], sc) : xd[b], as = NS ? __fmul_rn(ad, xs[b]) : xs[b];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] += q4_0_row(load_stream(q[r] + 16 * b), __ldg(d[r] + b), a0, a1, ad, as);
}
// Q4_0 task b from a task_weights (a staged task, matvec_prefetch): task_q4_0's arithmetic.
template <int R, bool NS = false>
__device__ __forceinline__ void dot_q4_0(const task_weights<R, 1>& tw, const int8_t* xq, const float* xd,
                                         const float* xs, int b, float (&acc)[R], float sc = 1.0f) {
    const int4 a0 = load_act(xq + 32 * b), a1 = load_act(xq + 32 * b + 16);
    const float ad = NS ? __fmul_rn(xd[b], sc) : xd[b], as = NS ? __fmul_rn(ad, xs[b]) : xs[b];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] += q4_0_row(tw.w[r][0], uint16_t(tw.s[r]), a0, a1, ad, as);
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

// One row's part of a Q4_K task: quant words w0, w1 (32 bytes), its scale word sm and d/dmin word dm, against the
// activation words a0..a3 (elements 64c..64c+63), their scale ad and block sums as; added to acc. The low nibbles
// are masked for a signed dp4a, the high ones masked in place (16 q) for an unsigned one.
__device__ __forceinline__ void q4k_accumulate(int4 w0, int4 w1, uint32_t sm, uint32_t dm, int4 a0, int4 a1, int4 a2,
                                               int4 a3, float2 as, float ad, float& acc) {
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
    acc += dd.x * ad * float(isum) - dd.y * mn;
}

// Q4_K task t (device layout, device-common.cuh): super-block b = t/4, c = t%4: quant bytes 32c..32c+31 hold
// sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles), elements 64c..64c+63. Per row: two 16-byte quant loads,
// the task's scale word and the d/dmin word; the low nibbles are masked for a signed dp4a, the high ones
// masked in place (16 q) for an unsigned one, so no shift per quant word and no 6-bit scale unpacking. Both
// sub-blocks share one activation scale (q8_k: one per 256), so lo sc0 + hi sc1 is summed exactly in integers
// (< 2^23) and converted once; the mins use the block sums xs.
// NS (the norm parts of norm-fused.h in units of 256): xd holds the unscaled unit scale, xs the groups' sums of
// quants; the RMSNorm scale sc gives ad = xd sc and as = ad xs (the values of launch_rms_norm_parts_rows_k).
template <int R, bool NS = false>
__device__ __forceinline__ void task_q4k(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                         const float* xd, const float* xs, int t, int c, float (&acc)[R],
                                         float sc = 1.0f) {
    const int b = t >> 2;
    const int8_t* ax = xq + b * 256 + 64 * c;
    const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32), a3 = load_act(ax + 48);
    const int g = b * 8 + 2 * c;
    const float ad = NS ? __fmul_rn(xd[g], sc) : xd[g];
    float2 as = *reinterpret_cast<const float2*>(xs + g);
    if constexpr (NS) as = make_float2(__fmul_rn(ad, as.x), __fmul_rn(ad, as.y));
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int4 w0 = load_stream(q[r] + b * 128 + 32 * c), w1 = load_stream(q[r] + b * 128 + 32 * c + 16);
        const uint32_t* side = reinterpret_cast<const uint32_t*>(d[r]);  // row's side words (cuda-kernels.h)
        const uint32_t sm = __ldg(side + q4k_sm_word(b) + c), dm = __ldg(side + q4k_dm_word(b));
        q4k_accumulate(w0, w1, sm, dm, a0, a1, a2, a3, as, ad, acc[r]);
    }
}

// Q6_K task t = half t of the row (device layout, cuda-kernels.h): super-block b = t/2, elements 128 (t%2) .. +127;
// six 16-byte loads per row (pieces), which for the warp's 32 consecutive tasks read 512 contiguous bytes each. Word c
// of the dp4a operands of sub-block 4g + k: word c of piece 3g + k masked (k < 3) or the low bits of word c of pieces
// 3g..3g+2 gathered (k = 3). The quants are the signed 4v, so no offset term; the 8 sub-blocks' scaled dots
// are summed exactly in integers (|sum| < 2^29) and converted once: the activation scale is one per super-block
// (q8_k). The sum is 4 times GGUF's, undone by the exact scale ad / 4.
// NS: as task_q4k (xd the unscaled unit scale, times the RMSNorm scale ns).
template <int R, bool NS = false>
__device__ __forceinline__ void task_q6_k(const uint8_t* const (&q)[R], const uint16_t* const (&d)[R], const int8_t* xq,
                                          const float* xd, int t, int n_half, float (&acc)[R], float ns = 1.0f) {
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
    const float ad = (NS ? __fmul_rn(xd[b * 8], ns) : xd[b * 8]) * 0.25f;
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
// with it (docs/cuda-decode-log-s5-s6.md, "Session 5 (branch gf16)"), so they keep every load after the wait.
template <dtype T>
constexpr bool k_has_early = T == dtype::q8_0 || T == dtype::f16 || T == dtype::bf16;

// Nothing (the default `after` of run_tasks).
struct no_op {
    __device__ void operator()() const {}
};

// A thread's tasks tid, tid + S, ... < n: the first E loaded (load(t, tw)) before griddep_wait and applied (dot(tw, t))
// after it, the rest loaded and applied in a loop unrolled by U. after(): right after the wait, before any dot.
template <int E, int S, int U, typename TW, typename Load, typename Dot, typename After = no_op>
__device__ __forceinline__ void run_tasks(int tid, int n, Load load, Dot dot, After after = {}) {
    TW early[E > 0 ? E : 1];
#pragma unroll
    for (int k = 0; k < E; k++)
        if (tid + k * S < n) load(tid + k * S, early[k]);
    griddep_wait();
    griddep_launch();
    after();
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

// Shared-memory staging of a thread's next tasks before griddep_wait (matvec_prefetch; docs/cuda-decode-log.md,
// "Session 7 (branch gpre)"): 16-byte cp.async copies (LDGSTS, L1 bypassed) of the weights and 4-byte copies of the
// aligned word that holds each f16 scale, into the thread's own slots of the block's dynamic shared memory (so no block
// barrier: cp.async.wait_all makes a thread's own copies visible to it). Shared memory holds no register across the
// wait.
// (cp_async16, cp_async4, cp_async_commit, cp_async_wait_all: device-common.cuh.)

// Dynamic shared memory of a block staging TS tasks of R rows per thread (NT threads): TS * R * NT 16-byte pieces,
// then as many scale words. Slot (k, r) of thread i: piece (k R + r) NT + i (a warp's 32 pieces contiguous).
constexpr size_t staged_bytes(int ts, int rows, int threads) {
    return size_t(ts) * size_t(rows) * size_t(threads) * 20;
}
template <int R, int TS, int NT>
struct stage_slots {
    int4* w;
    uint32_t* s;
    __device__ explicit stage_slots(void* smem)
        : w(static_cast<int4*>(smem)), s(reinterpret_cast<uint32_t*>(static_cast<int4*>(smem) + TS * R * NT)) {}
    // One task of row r (its 16-byte piece, and the aligned word holding its f16 scale sc) into slot k.
    __device__ void put(int k, int r, const uint8_t* piece, const uint16_t* sc) const {
        const int i = (k * R + r) * NT + int(threadIdx.x);
        cp_async16(w + i, piece);
        cp_async4(s + i, reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(sc) & ~uintptr_t(3)));
    }
    __device__ void get(int k, int r, const uint16_t* sc, int4& piece, uint32_t& scale) const {
        const int i = (k * R + r) * NT + int(threadIdx.x);
        piece = w[i];
        scale = (s[i] >> (16 * ((reinterpret_cast<uintptr_t>(sc) >> 1) & 1))) & 0xffffu;
    }
};

// run_tasks with the thread's tasks E .. E + TS - 1 staged (stage(t, k): slot k) before griddep_wait and applied
// after it (unstage(t, k, tw), dot(tw, t)), in the same order: the same sums as run_tasks. task(t): one later task.
template <int E, int TS, int S, int U, typename TW, typename Load, typename Stage, typename Unstage, typename Dot,
          typename Task, typename After = no_op>
__device__ __forceinline__ void run_tasks_staged(int tid, int n, Load load, Stage stage, Unstage unstage, Dot dot,
                                                 Task task, After after = {}) {
    TW early[E > 0 ? E : 1];
#pragma unroll
    for (int k = 0; k < E; k++)
        if (tid + k * S < n) load(tid + k * S, early[k]);
#pragma unroll
    for (int k = 0; k < TS; k++)
        if (tid + (E + k) * S < n) stage(tid + (E + k) * S, k);
    cp_async_commit();
    griddep_wait();
    griddep_launch();
    after();
#pragma unroll
    for (int k = 0; k < E; k++)
        if (tid + k * S < n) dot(early[k], tid + k * S);
    cp_async_wait_all();
#pragma unroll
    for (int k = 0; k < TS; k++)
        if (tid + (E + k) * S < n) {
            TW tw;
            unstage(tid + (E + k) * S, k, tw);
            dot(tw, tid + (E + k) * S);
        }
#pragma unroll U
    for (int t = tid + (E + TS) * S; t < n; t += S) task(t);
}

// Q4_K task t of R rows from staged pieces (matvec_prefetch; Wo, one task per thread): task_q4k's arithmetic, with
// w0, w1 and the side words sm, dm of row r at slots 2 r and 2 r + 1 of w and sw (stride NT).
template <int R, int NT>
__device__ __forceinline__ void dot_q4k_staged(const int4* w, const uint32_t* sw, const int8_t* xq, const float* xd,
                                               const float* xs, int t, int c, float (&acc)[R]) {
    const int b = t >> 2;
    const int8_t* ax = xq + b * 256 + 64 * c;
    const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32), a3 = load_act(ax + 48);
    const int g = b * 8 + 2 * c;
    const float ad = xd[g];
    const float2 as = *reinterpret_cast<const float2*>(xs + g);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int4 w0 = w[2 * r * NT], w1 = w[(2 * r + 1) * NT];
        const uint32_t sm = sw[2 * r * NT], dm = sw[(2 * r + 1) * NT];
        q4k_accumulate(w0, w1, sm, dm, a0, a1, a2, a3, as, ad, acc[r]);
    }
}

// The cross-warp step of the epilogues: lane 0 of each warp puts its rows' warp sums v into shared memory (every thread
// of the block calls it: it holds a __syncthreads), part_sum adds row tid's (< R) over the W warps of its group in warp
// order.
template <int R>
__device__ __forceinline__ const float (*stash_warp_sums(const float (&v)[R], int warp, int lane))[R] {
    __shared__ float part[k_block_warps][R];
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++) part[warp][r] = v[r];
    __syncthreads();
    return part;
}
template <int R, int W>
__device__ __forceinline__ float part_sum(const float (*part)[R], int group, int tid) {
    float s = 0;
#pragma unroll
    for (int k = 0; k < W; k++) s += part[group * W + k][tid];
    return s;
}

// The kernels' epilogue: each row's lane partials summed over the warp, then over the W warps that share the row
// (in warp order), written to y[row0 + r] or added to it (accumulate). y: [n_out] f32. I: the row index type (int in
// the lean kernels, whose 32-bit index arithmetic saves registers).
template <int R, int W, class I = int64_t>
__device__ __forceinline__ void store_row_sums(const float (&acc)[R], int warp, int lane, int group, int tid, I row0,
                                               I n_out, float* y, bool accumulate) {
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = warp_sum(acc[r]);
    if constexpr (W > 1) {
        const auto part = stash_warp_sums<R>(v, warp, lane);
        if (tid >= R) return;
        const float s = part_sum<R, W>(part, group, tid);
        if (row0 + tid < n_out) y[row0 + tid] = accumulate ? y[row0 + tid] + s : s;
    } else {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (row0 + r < n_out) y[row0 + r] = accumulate ? y[row0 + r] + v[r] : v[r];
    }
}

// Block: 4 warps in 4 / W groups of W warps; group g takes rows R * (blockIdx.x * (4 / W) + g) + r, r < R
// (rows past n_out repeat the last row and are not stored), its W warps split the row's tasks. EL: the tasks per row
// that each thread loads before griddep_wait (0: every load after it; only k_has_early formats). TS (Q8_0, Q4_0): the
// next tasks per row that each thread stages in shared memory before the wait (run_tasks_staged; 0: none).
template <dtype T, int R, int W, int EL = 0, int TS = 0>
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
    [[maybe_unused]] extern __shared__ int4 staged_smem[];
    if constexpr ((T == dtype::q8_0 || T == dtype::q4_0) && TS > 0) {
        // Staged tasks (matvec_prefetch): Q8_0 task t's scale is d[t / 2], Q4_0 block b's d[b].
        constexpr int SH = T == dtype::q8_0 ? 1 : 0;
        const stage_slots<R, TS, 32 * k_block_warps> slots(staged_smem);
        auto load = [&](int t, task_weights<R, 1>& tw) { load_q8_0<R>(q, d, t, tw); };
        auto stage = [&](int t, int k) {
#pragma unroll
            for (int r = 0; r < R; r++) slots.put(k, r, q[r] + 16 * t, d[r] + (t >> SH));
        };
        auto unstage = [&](int t, int k, task_weights<R, 1>& tw) {
#pragma unroll
            for (int r = 0; r < R; r++) slots.get(k, r, d[r] + (t >> SH), tw.w[r][0], tw.s[r]);
        };
        if constexpr (T == dtype::q8_0) {
            auto dot = [&](const task_weights<R, 1>& tw, int t) { dot_q8_0<R>(tw, xq, xd, t, acc); };
            run_tasks_staged<E, TS, S, 2, task_weights<R, 1>>(tid, n_in / 16, load, stage, unstage, dot, [&](int t) {
                task_weights<R, 1> tw;
                load(t, tw);
                dot(tw, t);
            });
        } else {
            run_tasks_staged<0, TS, S, 2, task_weights<R, 1>>(
                tid, n_in / 32, load, stage, unstage,
                [&](const task_weights<R, 1>& tw, int t) { dot_q4_0<R>(tw, xq, xd, xs, t, acc); },
                [&](int t) { task_q4_0<R>(q, d, xq, xd, xs, t, acc); });
        }
    } else if constexpr (T == dtype::q4_k && TS > 0) {
        // Staged Q4_K tasks (matvec_prefetch): per row the task's two quant pieces and its two side words, slots
        // ((k R + r) 2 + j) NT + thread.
        constexpr int NT = 32 * k_block_warps;
        int4* sw = staged_smem;
        uint32_t* ss = reinterpret_cast<uint32_t*>(staged_smem + TS * R * 2 * NT);
        const int c = tid & 3, n = n_in / 64;
#pragma unroll
        for (int k = 0; k < TS; k++) {
            const int t = tid + k * S, b = t >> 2;
            if (t < n)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int i = (k * R + r) * 2 * NT + int(threadIdx.x);
                    const uint32_t* side = reinterpret_cast<const uint32_t*>(d[r]);
                    cp_async16(sw + i, q[r] + b * 128 + 32 * c);
                    cp_async16(sw + i + NT, q[r] + b * 128 + 32 * c + 16);
                    cp_async4(ss + i, side + q4k_sm_word(b) + c);
                    cp_async4(ss + i + NT, side + q4k_dm_word(b));
                }
        }
        cp_async_commit();
        griddep_wait();
        griddep_launch();
        cp_async_wait_all();
#pragma unroll
        for (int k = 0; k < TS; k++) {
            const int t = tid + k * S;
            const int i = k * R * 2 * NT + int(threadIdx.x);
            if (t < n) dot_q4k_staged<R, NT>(sw + i, ss + i, xq, xd, xs, t, c, acc);
        }
#pragma unroll 2
        for (int t = tid + TS * S; t < n; t += S) task_q4k<R>(q, d, xq, xd, xs, t, c, acc);
    } else if constexpr (T == dtype::q8_0) {
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
            // thread (docs/cuda-decode-log-s5-s6.md, "Session 5 (branch gq6)").
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
    store_row_sums<R, W>(acc, warp, lane, group, tid, row0, w.n_out, y, accumulate);
}

// matvec_kernel's Q8_0 / Q4_0 task loop as a function (its tasks, order and sums), for the kernels of norm-fused.cu:
// the sums acc of rows row0 .. row0 + R - 1 (tid: the thread's index within its group of W warps), griddep_wait
// included. A copy: matvec_kernel calling it changed the plain Q4_0 kernels' code (Q4_0 tg128 -2 %,
// docs/cuda-decode-log.md "Session 9 (branch gnf9)"). NS: xq, xd, xs are the norm parts of norm-fused.h and nss / neps
// their group sums of squares and epsilon: the RMSNorm scale is formed right after the wait (norm_scale) and applied to
// each group scale (norm-parts.cuh).
template <dtype T, int R, int W, int EL, int TS, bool NS = false>
__device__ __forceinline__ void matvec_accumulate(const gpu_weight& w, const int8_t* xq, const float* xd,
                                                  const float* xs, int tid, int64_t row0, float (&acc)[R],
                                                  const float* nss = nullptr, float neps = 0) {
    static_assert(T == dtype::q8_0 || T == dtype::q4_0, "Q8_0 / Q4_0 only");
    constexpr int S = 32 * W;  // task stride
    constexpr int E = k_has_early<T> ? EL : 0;
    [[maybe_unused]] float sc = 1.0f;
    [[maybe_unused]] auto after = [&] {
        if constexpr (NS) sc = norm_scale(nss, int(w.n_in), neps, int(threadIdx.x & 31));
    };
    const int n_in = int(w.n_in);
    const int64_t d_row = n_in / 32;
    const uint8_t* q[R];
    const uint16_t* d[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = min(row0 + r, w.n_out - 1);
        q[r] = w.q + row * w.q_row_bytes;
        d[r] = w.d + row * d_row;
        acc[r] = 0;
    }
    [[maybe_unused]] extern __shared__ int4 staged_smem[];
    if constexpr (TS > 0) {
        // Staged tasks (matvec_prefetch): Q8_0 task t's scale is d[t / 2], Q4_0 block b's d[b].
        constexpr int SH = T == dtype::q8_0 ? 1 : 0;
        const stage_slots<R, TS, 32 * k_block_warps> slots(staged_smem);
        auto load = [&](int t, task_weights<R, 1>& tw) { load_q8_0<R>(q, d, t, tw); };
        auto stage = [&](int t, int k) {
#pragma unroll
            for (int r = 0; r < R; r++) slots.put(k, r, q[r] + 16 * t, d[r] + (t >> SH));
        };
        auto unstage = [&](int t, int k, task_weights<R, 1>& tw) {
#pragma unroll
            for (int r = 0; r < R; r++) slots.get(k, r, d[r] + (t >> SH), tw.w[r][0], tw.s[r]);
        };
        if constexpr (T == dtype::q8_0) {
            auto dot = [&](const task_weights<R, 1>& tw, int t) { dot_q8_0<R, NS>(tw, xq, xd, t, acc, sc); };
            run_tasks_staged<E, TS, S, 2, task_weights<R, 1>>(
                tid, n_in / 16, load, stage, unstage, dot,
                [&](int t) {
                    task_weights<R, 1> tw;
                    load(t, tw);
                    dot(tw, t);
                },
                after);
        } else {
            run_tasks_staged<0, TS, S, 2, task_weights<R, 1>>(
                tid, n_in / 32, load, stage, unstage,
                [&](const task_weights<R, 1>& tw, int t) { dot_q4_0<R, NS>(tw, xq, xd, xs, t, acc, sc); },
                [&](int t) { task_q4_0<R, NS>(q, d, xq, xd, xs, t, acc, sc); }, after);
        }
    } else if constexpr (T == dtype::q8_0) {
        run_tasks<E, S, 2, task_weights<R, 1>>(
            tid, n_in / 16, [&](int t, task_weights<R, 1>& tw) { load_q8_0<R>(q, d, t, tw); },
            [&](const task_weights<R, 1>& tw, int t) { dot_q8_0<R, NS>(tw, xq, xd, t, acc, sc); }, after);
    } else {
        griddep_wait();
        griddep_launch();
        after();
#pragma unroll 2
        for (int t = tid; t < n_in / 32; t += S) task_q4_0<R, NS>(q, d, xq, xd, xs, t, acc, sc);
    }
}

// The block shapes benchmarked and selectable (matvec_shape): rows per block x warps per block. TS > 0 (Q8_0, Q4_0):
// the decode shapes only (1 x 1, 2 x 2, 2 x 4; matvec_prefetch), with TS staged tasks per thread in dynamic shared
// memory.
// reserve: dynamic shared memory reserved on top, unused (matvec_prefetch's diagnostic bit k_prefetch_reserve_only).
template <dtype T, int EL = 0, int TS = 0>
void launch_shaped(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                   bool accumulate, matvec_shape shape, cudaStream_t s, size_t reserve = 0) {
    constexpr int PIECES = T == dtype::q4_k ? 2 : 1;  // staged 20-byte units per task and row
    const int acc = accumulate ? 1 : 0;
    const int64_t rows_per_block = int64_t(shape.rows) * (k_block_warps / std::max(shape.warps, 1));
    const unsigned blocks = unsigned((w.n_out + rows_per_block - 1) / rows_per_block);
#define MEMTILE_MATVEC_CASE(R, W)                                                                             \
    if (shape.rows == R && shape.warps == W) {                                                                \
        launch_smem(matvec_kernel<T, R, W, EL, TS>, blocks, 32 * k_block_warps,                               \
                    PIECES * staged_bytes(TS, R, 32 * k_block_warps) + reserve, s, w, x, xq, xd, xs, y, acc); \
        return;                                                                                               \
    }
    if constexpr (TS > 0) {
        MEMTILE_MATVEC_CASE(1, 1)
        MEMTILE_MATVEC_CASE(2, 2)
        MEMTILE_MATVEC_CASE(2, 4)
    } else {
        MEMTILE_MATVEC_CASE(1, 1)
        MEMTILE_MATVEC_CASE(1, 2)
        MEMTILE_MATVEC_CASE(1, 4)
        MEMTILE_MATVEC_CASE(2, 1)
        MEMTILE_MATVEC_CASE(2, 2)
        MEMTILE_MATVEC_CASE(2, 4)
    }
#undef MEMTILE_MATVEC_CASE
    // (launch_staged passes TS > 0 with the three decode shapes only)
    if constexpr (TS == 0)
        launch(matvec_kernel<T, 2, 1, EL>, unsigned((w.n_out + 7) / 8), 32 * k_block_warps, s, w, x, xq, xd, xs, y,
               acc);
}

// Shared-memory staging before the PDL wait (set_matvec_prefetch in cuda-backend.h; defined in matvec.cu): tasks per
// thread and row (0: off), which products (k_prefetch_*), read when a graph is captured. The default, from the A/B in
// docs/cuda-decode-log.md ("Session 7 (branch gpre)"): 1 task of the Wo product (Q4_0: +1.4 %; Q8_0 has none left
// after its early loads) and the RMSNorm trigger before f32 consumers (F16: +0.6 %).
struct prefetch_config {
    int tasks = 1;
    unsigned mask = 2 | 32;
};
constexpr unsigned k_prefetch_qkv = 1;               // n_in < 8,192, 4,096 < n_out <= 32,768 (Q/K/V)
constexpr unsigned k_prefetch_wo = 2;                // n_in < 8,192, n_out <= 4,096 (Wo)
constexpr unsigned k_prefetch_down = 4;              // n_in >= 8,192 (down)
constexpr unsigned k_prefetch_gate_up = 8;           // the fused Q8_0/Q4_0 gate/up product (matvec-fused.cu)
constexpr unsigned k_prefetch_output = 16;           // n_out > 32,768 (the output matrix)
constexpr unsigned k_prefetch_norm_trigger = 32;     // the single-row RMSNorm without quantization (f32 consumers)
                                                     // lets its dependents launch before its wait
constexpr unsigned k_prefetch_reserve_only = 64;     // diagnostic: reserve the staged bytes, stage nothing
constexpr unsigned k_prefetch_norm_trigger_q = 128;  // as 32, for the RMSNorm that quantizes (int8 consumers)
constexpr unsigned k_prefetch_q4k_wo = 256;          // the Q4_K Wo product (with k_prefetch_wo; -4.8 % measured)
prefetch_config matvec_prefetch();

// The staged tasks (an instantiated TS: 0, 1, 2, 3, 4 or 8) of a plain-kernel launch: the configured count, cut to the
// thread's tasks after the E early ones, 0 where the product's class is not selected or the scale array is not 4-byte
// aligned (the staged scale words are aligned words).
inline int staged_tasks(const gpu_weight& w, matvec_shape shape, int e, int task_elems) {
    const prefetch_config c = matvec_prefetch();
    const unsigned cls = w.n_in >= 8192    ? k_prefetch_down
                         : w.n_out <= 4096 ? k_prefetch_wo
                         : w.n_out > 32768 ? k_prefetch_output
                                           : k_prefetch_qkv;
    if (c.tasks <= 0 || !(c.mask & cls) || !w.d || reinterpret_cast<uintptr_t>(w.d) % 4 != 0) return 0;
    if (w.n_in % task_elems != 0) return 0;
    const int stride = 32 * std::max(shape.warps, 1);
    const int per_thread = int((w.n_in / task_elems + stride - 1) / stride);
    const int n = std::min(c.tasks, per_thread - e);
    return n <= 0 ? 0 : n <= 4 ? n : 8;
}

template <dtype T, int EL>
void launch_staged(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                   bool accumulate, matvec_shape shape, cudaStream_t s) {
    const bool decode_shape = (shape.rows == 1 && shape.warps == 1) || (shape.rows == 2 && shape.warps == 2) ||
                              (shape.rows == 2 && shape.warps == 4);
    const int ts = decode_shape ? staged_tasks(w, shape, EL, T == dtype::q8_0 ? 16 : 32) : 0;
    if (ts > 0 && (matvec_prefetch().mask & k_prefetch_reserve_only))
        return launch_shaped<T, EL>(w, x, xq, xd, xs, y, accumulate, shape, s,
                                    staged_bytes(ts, shape.rows, 32 * k_block_warps));
    switch (ts) {
        case 1: return launch_shaped<T, EL, 1>(w, x, xq, xd, xs, y, accumulate, shape, s);
        case 2: return launch_shaped<T, EL, 2>(w, x, xq, xd, xs, y, accumulate, shape, s);
        case 3: return launch_shaped<T, EL, 3>(w, x, xq, xd, xs, y, accumulate, shape, s);
        case 4: return launch_shaped<T, EL, 4>(w, x, xq, xd, xs, y, accumulate, shape, s);
        case 8: return launch_shaped<T, EL, 8>(w, x, xq, xd, xs, y, accumulate, shape, s);
        default: return launch_shaped<T, EL>(w, x, xq, xd, xs, y, accumulate, shape, s);
    }
}

// The early level of the decode matvecs (set_matvec_early in cuda-backend.h; defined in matvec.cu): 0 or 4.
int matvec_early();

// launch_shaped at the current early level (formats without early loads: level 0); Q8_0 with matvec_prefetch.
template <dtype T>
void launch_early(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                  bool accumulate, matvec_shape shape, cudaStream_t s) {
    if constexpr (T == dtype::q8_0) {
        if (matvec_early() == 4) return launch_staged<T, 4>(w, x, xq, xd, xs, y, accumulate, shape, s);
        return launch_staged<T, 0>(w, x, xq, xd, xs, y, accumulate, shape, s);
    }
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
