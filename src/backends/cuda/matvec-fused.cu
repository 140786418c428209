// Decode gate/up products with SwiGLU in their epilogue (docs/cuda-decode-log-s5-s6.md, "Session 6 (branch gfu)" and
// "(branch gq8)"). F16/BF16: the block's two rows are gate row p and up row p + n_ff, and its first thread writes
// silu(gate) * up (swiglu_kernel's expression), so the SwiGLU kernel and its kernel boundary disappear where the down
// matrix reads f32. Q4_0/Q8_0: a block takes 32 pairs, a whole quantization group of the down matrix's int8 input, and
// quantizes it itself. No last-block tail, and separate instantiations, so that matvec-common.cuh's kernels keep their
// registers. The dot products are the plain kernel's (the same task order and sums per row): bit-equal to the two
// kernels.
#include "backends/cuda/matvec-fused.h"

#include <cstdlib>

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

// Block p: rows p and p + n_out / 2, 4 warps; thread tid takes tasks tid + 128 k of both rows, the first E loaded
// before griddep_wait. 8 blocks per SM (64 registers), as the plain kernel.
template <dtype T, int E>
__global__ void __launch_bounds__(128, 8) matvec_glu_kernel(gpu_weight w, const float* x, float* h) {
    constexpr int S = 128, R = 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int64_t p = blockIdx.x, n_ff = w.n_out / 2;
    const int n_tasks = int(w.n_in) / 8;
    const uint8_t* q[R] = {w.q + p * w.q_row_bytes, w.q + (p + n_ff) * w.q_row_bytes};
    float acc[R] = {0, 0};
    const float4* x4 = reinterpret_cast<const float4*>(x);
    auto load = [&](int t, task_weights<R, 1>& tw) {
#pragma unroll
        for (int r = 0; r < R; r++) tw.w[r][0] = load_stream(q[r] + 16 * t);
    };
    auto dot = [&](const task_weights<R, 1>& tw, int t) {
        const float4 x0 = __ldg(x4 + 2 * t), x1 = __ldg(x4 + 2 * t + 1);
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] += T == dtype::f16 ? dot8_f16(tw.w[r][0], x0, x1) : dot8_bf16(tw.w[r][0], x0, x1);
    };
    run_tasks<E, S, 4, task_weights<R, 1>>(tid, n_tasks, load, dot);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = warp_sum(acc[r]);
    __shared__ float part[k_block_warps][R];
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++) part[warp][r] = v[r];
    __syncthreads();
    if (tid != 0) return;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        s[r] = 0;
#pragma unroll
        for (int k = 0; k < k_block_warps; k++) s[r] += part[k][r];
    }
    h[p] = s[0] / (1.0f + expf(-s[0])) * s[1];
}

// Q8_0/Q4_0 [gate; up] whose down matrix reads int8 activations in groups of 32 (bit 8 of set_decode_fusion): block
// b computes h_i for the 32 pairs i = 32 b .. 32 b + 31 (gate row i, up row i + n_ff), so it holds a whole
// quantization group and writes it quantized itself (quantize_warp, the bits of swiglu_kernel's quantize_block256 at
// q_block 32): no tail, no atomics. NW warps per block, warp w takes the pairs 32 b + w (32 / NW) + j one after the
// other, both rows of a pair sharing the activation loads. To be bit-equal to the plain kernel of shape R x W (R does
// not change a row's sums), lane l keeps W accumulators: task t = l + 32 m goes to accumulator m % W, which is the
// task set and order of warp m % W of the plain kernel's group, and the W warp sums are added as its epilogue adds
// them. The first E tasks of the first pair (Q8_0 only) are loaded before griddep_wait, and its next TS tasks staged in
// dynamic shared memory there (matvec_prefetch, run_tasks_staged's scheme).
template <dtype T, int W, int NW, int E, int TS = 0>
__global__ void __launch_bounds__(32 * NW, 32 / NW)
    matvec_glu_q_kernel(gpu_weight w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                        float* hd, float* hs) {
    static_assert(E % W == 0 && (E + TS) % W == 0, "the early tasks must end on an accumulator boundary");
    [[maybe_unused]] extern __shared__ int4 staged_smem[];
    constexpr int PPW = 32 / NW;  // pairs per warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t n_ff = w.n_out / 2, p0 = int64_t(blockIdx.x) * 32;
    const int n_in = int(w.n_in), n_tasks = T == dtype::q8_0 ? n_in / 16 : n_in / 32;
    const int64_t d_row = n_in / 32;
    __shared__ float hv[32];
    auto task = [&](const uint8_t* const(&q)[2], const uint16_t* const(&d)[2], int t, float(&acc)[2]) {
        if constexpr (T == dtype::q8_0) {
            task_weights<2, 1> tw;
            load_q8_0<2>(q, d, t, tw);
            dot_q8_0<2>(tw, xq, xd, t, acc);
        } else {
            task_q4_0<2>(q, d, xq, xd, xs, t, acc);
        }
    };
#pragma unroll 1
    for (int j = 0; j < PPW; j++) {
        const int64_t p = p0 + warp * PPW + j;
        const uint8_t* const q[2] = {w.q + p * w.q_row_bytes, w.q + (p + n_ff) * w.q_row_bytes};
        const uint16_t* const d[2] = {w.d + p * d_row, w.d + (p + n_ff) * d_row};
        float acc[W][2];
#pragma unroll
        for (int k = 0; k < W; k++) acc[k][0] = acc[k][1] = 0;
        int m0 = 0;
        if (j == 0) {
            if constexpr (TS > 0) {
                constexpr int SH = T == dtype::q8_0 ? 1 : 0;  // scale of task t: d[t >> SH]
                const stage_slots<2, TS, 32 * NW> slots(staged_smem);
                task_weights<2, 1> early[E > 0 ? E : 1];
#pragma unroll
                for (int e = 0; e < E; e++)
                    if (lane + 32 * e < n_tasks) load_q8_0<2>(q, d, lane + 32 * e, early[e]);
#pragma unroll
                for (int k = 0; k < TS; k++) {
                    const int t = lane + 32 * (E + k);
                    if (t < n_tasks)
#pragma unroll
                        for (int r = 0; r < 2; r++) slots.put(k, r, q[r] + 16 * t, d[r] + (t >> SH));
                }
                cp_async_commit();
                griddep_wait();
                griddep_launch();
#pragma unroll
                for (int e = 0; e < E; e++)
                    if (lane + 32 * e < n_tasks) dot_q8_0<2>(early[e], xq, xd, lane + 32 * e, acc[e % W]);
                cp_async_wait_all();
#pragma unroll
                for (int k = 0; k < TS; k++) {
                    const int t = lane + 32 * (E + k);
                    if (t < n_tasks) {
                        task_weights<2, 1> tw;
#pragma unroll
                        for (int r = 0; r < 2; r++) slots.get(k, r, d[r] + (t >> SH), tw.w[r][0], tw.s[r]);
                        if constexpr (T == dtype::q8_0)
                            dot_q8_0<2>(tw, xq, xd, t, acc[(E + k) % W]);
                        else
                            dot_q4_0<2>(tw, xq, xd, xs, t, acc[(E + k) % W]);
                    }
                }
                m0 = E + TS;
            } else if constexpr (T == dtype::q8_0 && E > 0) {
                task_weights<2, 1> early[E];
#pragma unroll
                for (int e = 0; e < E; e++)
                    if (lane + 32 * e < n_tasks) load_q8_0<2>(q, d, lane + 32 * e, early[e]);
                griddep_wait();
                griddep_launch();
#pragma unroll
                for (int e = 0; e < E; e++)
                    if (lane + 32 * e < n_tasks) dot_q8_0<2>(early[e], xq, xd, lane + 32 * e, acc[e % W]);
                m0 = E;
            } else {
                griddep_wait();
                griddep_launch();
            }
        }
#pragma unroll 2
        for (int m = m0; lane + 32 * m < n_tasks; m += W) {
#pragma unroll
            for (int k = 0; k < W; k++)
                if (lane + 32 * (m + k) < n_tasks) task(q, d, lane + 32 * (m + k), acc[k]);
        }
        float s[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if constexpr (W == 1) {
                s[r] = warp_sum(acc[0][r]);
            } else {
                s[r] = 0;
#pragma unroll
                for (int k = 0; k < W; k++) s[r] += warp_sum(acc[k][r]);
            }
        }
        if (lane == 0) hv[warp * PPW + j] = s[0] / (1.0f + expf(-s[0])) * s[1];
    }
    __syncthreads();
    if (warp != 0) return;
    const float v[1] = {hv[lane]};
    h[p0 + lane] = v[0];
    quantize_warp<1>(v, p0 / 32, lane, hq, hd, hs);
}

// Warps per block of matvec_glu_q_kernel: MEMTILE_CUDA_GLU_WARPS (4, 8 or 16; A/B benchmarks), else 8.
int glu_q_warps() {
    static const int v = [] {
        const char* env = std::getenv("MEMTILE_CUDA_GLU_WARPS");
        const int n = env ? int(std::strtol(env, nullptr, 10)) : 0;
        return n == 4 || n == 16 ? n : 8;
    }();
    return v;
}

template <dtype T, int W>
void launch_glu_q_shape(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                        float* hd, float* hs, cudaStream_t s) {
    const unsigned blocks = unsigned(w.n_out / 64);
    const bool early = T == dtype::q8_0 && matvec_early() == 4;
    const int nw = glu_q_warps();
    // Early loads: 2 tasks of both rows (the plain kernel's 4 tasks of one row in registers); at W = 4 none (E must
    // be a multiple of W, and 4 spilled).
    constexpr int EE = W <= 2 ? 2 : 0;
    // Staged tasks (matvec_prefetch; 8 warps, W = 1 only): 2 or 4 (10 KB of shared memory per task, under the 48 KB a
    // block gets without an opt-in).
    const prefetch_config pf = matvec_prefetch();
    const int n_tasks = int(T == dtype::q8_0 ? w.n_in / 16 : w.n_in / 32);
    const int staged = std::min(pf.tasks, (n_tasks + 31) / 32 - (early ? EE : 0));
    // Q8_0 stages only at early level 4 (its E = 2 instantiation), Q4_0 after no early load.
    if constexpr (W == 1) {
        constexpr int E = T == dtype::q8_0 ? EE : 0;
        if (nw == 8 && (pf.mask & k_prefetch_gate_up) && staged > 0 && (E == 0 || early) &&
            reinterpret_cast<uintptr_t>(w.d) % 4 == 0) {
            if (staged <= 2)
                launch_smem(matvec_glu_q_kernel<T, W, 8, E, 2>, blocks, 256, staged_bytes(2, 2, 256), s, w, xq, xd, xs,
                            h, hq, hd, hs);
            else
                launch_smem(matvec_glu_q_kernel<T, W, 8, E, 4>, blocks, 256, staged_bytes(4, 2, 256), s, w, xq, xd, xs,
                            h, hq, hd, hs);
            return;
        }
    }
#define MEMTILE_GLU_Q_CASE(NW)                                                                           \
    if (nw == NW) {                                                                                      \
        if (early)                                                                                       \
            launch(matvec_glu_q_kernel<T, W, NW, EE>, blocks, 32 * NW, s, w, xq, xd, xs, h, hq, hd, hs); \
        else                                                                                             \
            launch(matvec_glu_q_kernel<T, W, NW, 0>, blocks, 32 * NW, s, w, xq, xd, xs, h, hq, hd, hs);  \
        return;                                                                                          \
    }
    MEMTILE_GLU_Q_CASE(4)
    MEMTILE_GLU_Q_CASE(16)
    MEMTILE_GLU_Q_CASE(8)
#undef MEMTILE_GLU_Q_CASE
}

template <dtype T>
void launch_glu_q_type(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                       float* hd, float* hs, cudaStream_t s) {
    const int W = default_matvec_shape(w).warps;
    if (W == 1)
        launch_glu_q_shape<T, 1>(w, xq, xd, xs, h, hq, hd, hs, s);
    else if (W == 2)
        launch_glu_q_shape<T, 2>(w, xq, xd, xs, h, hq, hd, hs, s);
    else
        launch_glu_q_shape<T, 4>(w, xq, xd, xs, h, hq, hd, hs, s);
}

template <dtype T>
void launch_glu_type(const gpu_weight& w, const float* x, float* h, cudaStream_t s) {
    const unsigned blocks = unsigned(w.n_out / 2);
    if (matvec_early() == 4)
        launch(matvec_glu_kernel<T, 4>, blocks, 128, s, w, x, h);
    else
        launch(matvec_glu_kernel<T, 0>, blocks, 128, s, w, x, h);
}

}  // namespace
}  // namespace detail

bool matvec_glu_supported(const gpu_weight& w) {
    return (w.type == dtype::f16 || w.type == dtype::bf16) && w.n_in % 8 == 0 && w.n_out % 2 == 0;
}

bool matvec_glu_q_supported(const gpu_weight& w) {
    if (w.type != dtype::q8_0 && w.type != dtype::q4_0) return false;
    const int W = default_matvec_shape(w).warps;
    return w.d && w.n_in % 32 == 0 && w.n_out % 64 == 0 && (W == 1 || W == 2 || W == 4);
}

void launch_matvec_glu_q(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                         float* hd, float* hs, cudaStream_t s) {
    if (w.type == dtype::q8_0)
        detail::launch_glu_q_type<dtype::q8_0>(w, xq, xd, xs, h, hq, hd, hs, s);
    else
        detail::launch_glu_q_type<dtype::q4_0>(w, xq, xd, xs, h, hq, hd, hs, s);
}

void launch_matvec_glu(const gpu_weight& w, const float* x, float* h, cudaStream_t s) {
    if (w.type == dtype::f16)
        detail::launch_glu_type<dtype::f16>(w, x, h, s);
    else
        detail::launch_glu_type<dtype::bf16>(w, x, h, s);
}

}  // namespace memtile::cuda
