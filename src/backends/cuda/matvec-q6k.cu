// Q6_K decode products streamed by warps, or with early loads in the first blocks (set_q6k_stream in cuda-backend.h;
// docs/cuda-decode-log.md, "Session 10 (branch gq6k10)"), bit-equal to the plain and lean kernels of matvec-common.cuh
// / matvec-qkm.cu.
//
// Why: the plain Q6_K down product (4,096 x 14,336, 2 rows x 4 warps, one task per thread) is one-shot blocks: every
// thread issues its 12 loads, waits, computes, and the block exits; 2,048 blocks are 1.7 waves, and the blocks of a
// wave start and wait together, so the arithmetic (~25 % issue) and the next blocks' first loads do not overlap the
// memory stream (ncu: 17.5 us, 2.7-2.8 TB/s, against ~10.5 us at the probe). Here each warp takes a run of whole rows
// and streams them in units of one row's chunk of 32 tasks (a task per lane, task_q6_k's 6 pieces), with the loads of
// the next K - 1 units in flight while it computes one, and the grid is sized to one wave of resident warps.
//
// Bit-equality: the plain kernel with W warps per row gives warp k the tasks 32 k + lane (one per thread where the row
// has at most 32 W tasks) and stores 0 + p_0 + ... + p_{W-1} (W > 1; the warp sums p_k in warp order) or p_0 (W = 1).
// A unit here is chunk k of a row: the same lanes' tasks, the same per-task arithmetic (acc = 0 + dw (ad part)), the
// same butterfly warp sum, and the chunk sums added to the row's running sum in chunk order. NC = W = chunks per row:
// 4 for the down product (n_in 14,336: 112 tasks, the last chunk's lanes 16..31 idle as the plain kernel's), 1 for the
// 2 x 1 products (n_in 4,096: the output matrix).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "backends/cuda/matvec-common.cuh"
#include "backends/cuda/matvec-q6k.h"

namespace memtile::cuda {
namespace detail {
namespace {

// One unit of one lane: task t's six 16-byte pieces, its 8 int8 scales and the super-block's f16 d.
struct q6k_unit {
    int4 c[6];
    int2 sc;
    uint16_t d;
};

// task_q6_k's loads for one row (q: the row's quants, d: its f16 scales).
__device__ __forceinline__ void q6k_unit_load(const uint8_t* q, const uint16_t* d, int t, int n_half, q6k_unit& u) {
    const int grp = t >> 5, n_grp = min(32, n_half - 32 * grp);
    const int piece0 = 3072 * grp + 16 * (t & 31);
#pragma unroll
    for (int i = 0; i < 6; i++) u.c[i] = load_stream(q + piece0 + 16 * n_grp * i);
    u.sc = __ldcs(reinterpret_cast<const int2*>(q + 96 * n_half + 8 * t));  // q6k_scale_byte
    u.d = __ldg(d + (t >> 1));
}

// task_q6_k's arithmetic for R rows (the activation words loaded once for all of them): acc[r] = 0 + dw (ad part).
template <int R>
__device__ __forceinline__ void q6k_units_dot(const q6k_unit (&u)[R], const int8_t* xq, const float* xd, int t,
                                              float (&acc)[R]) {
    const int b = t >> 1;
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
                auto w = [&](int n) { return word(u[r].c[n], c); };  // word c of piece n
                const int op = k < 3 ? q6k_operand(w(3 * g + k)) : q6k_operand3(w(3 * g), w(3 * g + 1), w(3 * g + 2));
                dot = __dp4a(op, word(a, c), dot);
            }
            const int scw = s < 4 ? u[r].sc.x : u[r].sc.y;
            part[r] += int(int8_t(scw >> (8 * (s % 4)))) * dot;
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        acc[r] = 0;
        acc[r] += h2f(u[r].d) * (ad * float(part[r]));
    }
}
__device__ __forceinline__ float q6k_unit_dot(const q6k_unit& u, const int8_t* xq, const float* xd, int t) {
    const q6k_unit(&one)[1] = reinterpret_cast<const q6k_unit(&)[1]>(u);
    float acc[1];
    q6k_units_dot<1>(one, xq, xd, t, acc);
    return acc[0];
}

__host__ __device__ constexpr int gcd_c(int a, int b) {
    return b == 0 ? a : gcd_c(b, a % b);
}

// Warp w of the grid takes rows w rpw .. w rpw + rpw - 1 (those < n_out); its units u = row-in-run * NC + chunk, K of
// them loaded ahead (a ring of K unit buffers; the loop body covers L = lcm(NC, K) units so that every buffer index,
// chunk and row offset is a constant). MINB: blocks per SM for __launch_bounds__ (caps the registers).
template <int NC, int K, int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_q6k_stream_kernel(q6k_stream_args a, const int8_t* xq, const float* xd, float* y, int accumulate) {
    constexpr int L = NC / gcd_c(NC, K) * K;
    const int lane = threadIdx.x & 31;
    const int row0 = (int(blockIdx.x) * k_block_warps + int(threadIdx.x >> 5)) * a.rpw;
    const int n_units = max(0, min(a.rpw, a.n_out - row0)) * NC;
    const int n_half = a.n_in >> 7;
    auto load = [&](int u, int j, q6k_unit& b) {  // unit u = base + j, j a constant
        const int t = 32 * (j % NC) + lane;
        if (u < n_units && t < n_half) {
            const unsigned row = unsigned(row0 + u / NC);
            q6k_unit_load(a.q + size_t(row) * unsigned(a.row_bytes), a.d + size_t(row) * unsigned(a.d_row), t, n_half,
                          b);
        }
    };
    griddep_wait();
    griddep_launch();
    q6k_unit buf[K];
#pragma unroll
    for (int j = 0; j < K; j++) load(j, j, buf[j]);
    for (int base = 0; base < n_units; base += L) {
        float acc[NC];  // the lane's sums of the row's chunks, warp-summed once the row is complete
#pragma unroll
        for (int j = 0; j < L; j++) {
            const int u = base + j, c = j % NC, t = 32 * c + lane;
            if (u >= n_units) break;  // warp-uniform
            acc[c] = 0;
            if (t < n_half) acc[c] = q6k_unit_dot(buf[j % K], xq, xd, t);
            load(u + K, j + K, buf[j % K]);
            if (c == NC - 1) {
                float v[NC];
#pragma unroll
                for (int k = 0; k < NC; k++) v[k] = warp_sum(acc[k]);
                float sum = v[0];
                if constexpr (NC > 1) {
                    sum = 0;
#pragma unroll
                    for (int k = 0; k < NC; k++) sum += v[k];
                }
                if (lane == 0) {
                    const int row = row0 + u / NC;
                    y[row] = accumulate ? y[row] + sum : sum;
                }
            }
        }
    }
}

// The lean kernel's R x W one-task block (kq_lean_block<q6_k, R, W, true> of matvec-qkm.cu: its tasks, order and
// sums) whose first row's weights are loaded before griddep_wait in the first a.rpw blocks (the early blocks): while
// the predecessor (SwiGLU before the down product) still runs, the memory system already streams a bounded share of
// the product (all blocks early was measured slower in the step: docs/cuda-decode-log.md, "Session 8 (branch gkq8)").
template <int R, int W>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q6k_early_kernel(q6k_stream_args a, const int8_t* xq, const float* xd, float* y, int accumulate) {
    constexpr int G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int row0 = (int(blockIdx.x) * G + group) * R;
    const int n_half = a.n_in >> 7;
    const bool has = tid < n_half, early = int(blockIdx.x) < a.rpw;
    q6k_unit u[R];
    auto load = [&](int r) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        q6k_unit_load(a.q + size_t(row) * unsigned(a.row_bytes), a.d + size_t(row) * unsigned(a.d_row), tid, n_half,
                      u[r]);
    };
    // One load site for the first row between the two conditional waits: the loads of a site that both paths share
    // cannot be duplicated, and the other rows load after the wait (every row before it: 80 registers at R = 2).
    if (!early) {
        griddep_wait();
        griddep_launch();
    }
    if (has) load(0);
    if (early) {
        griddep_wait();
        griddep_launch();
    }
#pragma unroll
    for (int r = 1; r < R; r++)
        if (has) load(r);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0;
    if (has) q6k_units_dot<R>(u, xq, xd, tid, acc);
    store_row_sums<R, W, int>(acc, warp, lane, group, tid, row0, a.n_out, y, accumulate);
}

// kq_lean_block<q6_k, R, W, true> of matvec-qkm.cu (the same tasks and sums at any R) with __launch_bounds__'s minimum
// of MINB blocks per SM: other register budgets, hence other numbers of loads in flight per thread and warps per SM.
template <int R, int W, int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_q6k_lean_kernel(q6k_stream_args a, const int8_t* xq, const float* xd, float* y, int accumulate) {
    constexpr int G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int row0 = (int(blockIdx.x) * G + group) * R;
    const uint8_t* q[R];
    const uint16_t* d[R];
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        q[r] = a.q + size_t(row) * unsigned(a.row_bytes);
        d[r] = a.d + size_t(row) * unsigned(a.d_row);
        acc[r] = 0;
    }
    griddep_wait();
    griddep_launch();
    const int n = a.n_in >> 7;
    if (tid < n) task_q6_k<R>(q, d, xq, xd, tid, n, acc);
    store_row_sums<R, W, int>(acc, warp, lane, group, tid, row0, a.n_out, y, accumulate);
}

using stream_kernel = void (*)(q6k_stream_args, const int8_t*, const float*, float*, int);

// Resident blocks of `kernel` on the device (SMs x blocks per SM), cached per kernel.
int resident_blocks(stream_kernel kernel, int slot) {
    static int cache[8] = {};
    if (!cache[slot]) {
        int sms = 0, per_sm = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * k_block_warps, 0);
        cache[slot] = std::max(1, sms * std::max(1, per_sm));
    }
    return cache[slot];
}

int g_mode = 0, g_rpw = 0;
bool g_mode_set = false;

}  // namespace
}  // namespace detail

using namespace detail;

int q6k_stream_mode() {
    if (!g_mode_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_Q6K")) {
            char* end = nullptr;
            g_mode = int(std::strtol(env, &end, 0));
            if (end && *end == ',') g_rpw = int(std::strtol(end + 1, nullptr, 0));
        }
        g_mode_set = true;
    }
    return g_mode;
}

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_q6k_stream(int mode, int param);
void set_q6k_stream(int mode, int param) {
    q6k_stream_mode();
    g_mode = mode;
    g_rpw = param;
}
int q6k_stream();
int q6k_stream() {
    return q6k_stream_mode();
}

bool launch_q6k_stream(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate,
                       cudaStream_t s) {
    const int mode = q6k_stream_mode();
    if (!mode || w.type != dtype::q6_k || !w.d || w.n_in % 256 != 0) return false;
    constexpr int64_t lim = int64_t(1) << 30;
    if (w.n_out >= lim || w.q_row_bytes >= lim || w.n_in >= lim) return false;
    const matvec_shape shape = default_matvec_shape(w);
    const int64_t n_half = w.n_in / 128;
    // The plain kernel's warps per row must equal the chunks (one task per thread: n_half <= 32 W) and its rows 2.
    const bool four = shape.rows == 2 && shape.warps == 4 && n_half <= 128 && (mode & (1 | 16 | 64));
    const bool one = shape.rows == 2 && shape.warps == 1 && n_half <= 32 && (mode & (2 | 32 | 128));
    if (!four && !one) return false;
    const int n_out = int(w.n_out);
    // The parameter: bits 0..7 for the down product, bits 8.. for the 2 x 1 products where nonzero (else bits 0..7).
    const int param = four || (g_rpw >> 8) == 0 ? g_rpw & 255 : g_rpw >> 8;
    if (mode & (four ? 64 : 128)) {  // lean variants: param = 16 R + MINB
        const int R = param / 16, minb = param % 16;
        struct variant {
            int r, minb;
            stream_kernel k;
        };
        // MINB 0: __launch_bounds__ without a minimum, ptxas's default budget (the lean kernels': 52 registers at 2 x 4
        // and 2 x 1, some of the task's loads issued after its first sub-blocks' arithmetic); MINB 1: no limit
        // (every load first: 106 / 104 registers).
        static const variant fours[] = {
            {1, 0, matvec_q6k_lean_kernel<1, 4, 0>},   {1, 1, matvec_q6k_lean_kernel<1, 4, 1>},
            {1, 12, matvec_q6k_lean_kernel<1, 4, 12>}, {1, 16, matvec_q6k_lean_kernel<1, 4, 16>},
            {2, 0, matvec_q6k_lean_kernel<2, 4, 0>},   {2, 1, matvec_q6k_lean_kernel<2, 4, 1>},
            {2, 8, matvec_q6k_lean_kernel<2, 4, 8>},   {2, 10, matvec_q6k_lean_kernel<2, 4, 10>},
            {2, 12, matvec_q6k_lean_kernel<2, 4, 12>}, {3, 0, matvec_q6k_lean_kernel<3, 4, 0>},
            {4, 0, matvec_q6k_lean_kernel<4, 4, 0>}};
        static const variant ones[] = {
            {1, 0, matvec_q6k_lean_kernel<1, 1, 0>},   {2, 0, matvec_q6k_lean_kernel<2, 1, 0>},
            {2, 1, matvec_q6k_lean_kernel<2, 1, 1>},   {2, 10, matvec_q6k_lean_kernel<2, 1, 10>},
            {2, 12, matvec_q6k_lean_kernel<2, 1, 12>}, {3, 0, matvec_q6k_lean_kernel<3, 1, 0>},
            {4, 0, matvec_q6k_lean_kernel<4, 1, 0>}};
        const variant* list = four ? fours : ones;
        const int n_list = four ? int(std::size(fours)) : int(std::size(ones));
        for (int i = 0; i < n_list; i++)
            if (const variant& v = list[i]; v.r == R && v.minb == minb) {
                const int rows_per_block = R * (four ? 1 : 4);
                const q6k_stream_args a{w.q, w.d, n_out, int(w.q_row_bytes), int(w.n_in / 256), int(w.n_in), 0};
                launch(v.k, unsigned((n_out + rows_per_block - 1) / rows_per_block), 32 * k_block_warps, s, a, xq, xd,
                       y, accumulate ? 1 : 0);
                return true;
            }
        throw std::invalid_argument("[cuda] set_q6k_stream: no lean variant for parameter " + std::to_string(param));
    }
    if (mode & (four ? 16 : 32)) {  // the lean block with early weight loads in the first blocks
        int sms = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        const bool one_row = four && (mode & 4);  // the down at 1 x 4
        const int rows_per_block = four ? (one_row ? 1 : 2) : 8;
        const q6k_stream_args a{
            w.q, w.d, n_out, int(w.q_row_bytes), int(w.n_in / 256), int(w.n_in), param > 0 ? param : sms};
        launch(four ? (one_row ? matvec_q6k_early_kernel<1, 4> : matvec_q6k_early_kernel<2, 4>)
                    : matvec_q6k_early_kernel<2, 1>,
               unsigned((n_out + rows_per_block - 1) / rows_per_block), 32 * k_block_warps, s, a, xq, xd, y,
               accumulate ? 1 : 0);
        return true;
    }
    // Units in flight: bit 4 deeper, bit 8 one (no prefetch within the warp; the fewest registers).
    const int depth = (mode & 8) ? 0 : (mode & 4) ? 2 : 1;
    static const stream_kernel kernels[2][3] = {
        {matvec_q6k_stream_kernel<4, 1, 8>, matvec_q6k_stream_kernel<4, 2, 4>, matvec_q6k_stream_kernel<4, 3, 3>},
        {matvec_q6k_stream_kernel<1, 1, 8>, matvec_q6k_stream_kernel<1, 2, 4>, matvec_q6k_stream_kernel<1, 4, 4>}};
    const int slot = (four ? 0 : 3) + depth;
    const stream_kernel kernel = kernels[four ? 0 : 1][depth];
    const int warps = resident_blocks(kernel, slot) * k_block_warps;
    const int rpw = param > 0 ? param : (n_out + warps - 1) / warps;
    const int n_warps = (n_out + rpw - 1) / rpw;
    const q6k_stream_args a{w.q, w.d, n_out, int(w.q_row_bytes), int(w.n_in / 256), int(w.n_in), rpw};
    launch(kernel, unsigned((n_warps + k_block_warps - 1) / k_block_warps), 32 * k_block_warps, s, a, xq, xd, y,
           accumulate ? 1 : 0);
    return true;
}

}  // namespace memtile::cuda
