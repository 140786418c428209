// Early-load plans of the Q8_0 Wo and Q/K/V products (matvec-plan.h). Why: at early level 4 every resident Wo block
// loads all its weights (~14 of 17.8 MB while the attention runs) before its PDL wait, and the attention's own loads
// and cluster barrier wait behind them (docs/cuda-decode-log.md, "Session 9 (branch gat9)"); with no Wo loads early the
// attention is ~1.6 us shorter but the step slower. A plan loads part of the weights early: fewer tasks per thread,
// only the blocks from a given index on, or after a sleep, so the benchmarks can look for the split between the two.
#include <cstdlib>

#include "backends/cuda/matvec-common.cuh"
#include "backends/cuda/matvec-plan.h"

namespace memtile::cuda {
namespace detail {
namespace {

// One product's plan: blocks with blockIdx.x < from load their first lo tasks per row before the PDL wait, the
// others their first hi tasks; ns > 0: a block with tasks to load early sleeps ~ns nanoseconds first. lo < 0: no
// plan (the plain kernel at the early level).
struct early_plan {
    int lo = -1, from = 0, hi = 0, ns = 0;
};
struct early_plans {
    early_plan wo, qkv;
};

bool g_plans_set = false;
early_plans g_plans{};

// "WO_LO,WO_FROM,WO_HI,WO_NS,QKV_LO,QKV_FROM,QKV_HI,QKV_NS" (fields left out keep "no plan" / 0; null or "": none).
early_plans parse_plans(const char* v) {
    early_plans p;
    int f[8] = {-1, 0, 0, 0, -1, 0, 0, 0};
    const char* c = v;
    for (int i = 0; c && *c && i < 8; i++) {
        char* end = nullptr;
        f[i] = int(std::strtol(c, &end, 10));
        if (end == c) break;
        c = *end == ',' ? end + 1 : nullptr;
    }
    p.wo = {f[0], f[1], f[2], f[3]};
    p.qkv = {f[4], f[5], f[6], f[7]};
    return p;
}

const early_plans& plans() {
    if (!g_plans_set) {
        g_plans = parse_plans(std::getenv("MEMTILE_CUDA_EARLY_PLAN"));
        g_plans_set = true;
    }
    return g_plans;
}

// matvec_kernel<q8_0, R, W, EL> with the number of early tasks a runtime value per block (at most EM): tasks k < ne of
// the thread are loaded before the wait, the others of the first EM after it, then the rest as matvec_kernel's loop;
// every task is applied in the same order (tid, tid + S, ...) by dot_q8_0: the same sums, bit for bit.
template <int R, int W, int EM>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q8_0_plan_kernel(gpu_weight w, const int8_t* xq, const float* xd, float* y, int accumulate, int lo, int from,
                            int hi, int ns) {
    constexpr int S = 32 * W;  // task stride
    constexpr int G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int64_t row0 = (int64_t(blockIdx.x) * G + group) * R;
    const int n = int(w.n_in) / 16;
    const int64_t d_row = w.n_in / 32;
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
    const int ne = int(blockIdx.x) < from ? lo : hi;
    task_weights<R, 1> tw[EM];
    if (ns > 0 && ne > 0) __nanosleep(unsigned(ns));
#pragma unroll
    for (int k = 0; k < EM; k++)
        if (k < ne && tid + k * S < n) load_q8_0<R>(q, d, tid + k * S, tw[k]);
    griddep_wait();
    griddep_launch();
#pragma unroll
    for (int k = 0; k < EM; k++)
        if (k >= ne && tid + k * S < n) load_q8_0<R>(q, d, tid + k * S, tw[k]);
#pragma unroll
    for (int k = 0; k < EM; k++)
        if (tid + k * S < n) dot_q8_0<R>(tw[k], xq, xd, tid + k * S, acc);
#pragma unroll 2
    for (int t = tid + EM * S; t < n; t += S) {
        task_weights<R, 1> t1;
        load_q8_0<R>(q, d, t, t1);
        dot_q8_0<R>(t1, xq, xd, t, acc);
    }
    store_row_sums<R, W>(acc, warp, lane, group, tid, row0, w.n_out, y, accumulate);
}

template <int R, int W, int EM>
void launch_plan(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate, const early_plan& p,
                 cudaStream_t s) {
    const int64_t rows_per_block = int64_t(R) * (k_block_warps / W);
    const unsigned blocks = unsigned((w.n_out + rows_per_block - 1) / rows_per_block);
    launch(matvec_q8_0_plan_kernel<R, W, EM>, blocks, 32 * k_block_warps, s, w, xq, xd, y, accumulate ? 1 : 0, p.lo,
           p.from, p.hi, p.ns);
}

}  // namespace

bool launch_q8_0_planned(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate,
                         matvec_shape shape, cudaStream_t s) {
    if (w.type != dtype::q8_0 || w.n_in >= 8192 || w.n_in % 32 != 0) return false;
    const bool wo = w.n_out <= w.n_in, qkv = w.n_out > w.n_in && w.n_out <= 3 * w.n_in;
    const early_plan& p = wo ? plans().wo : plans().qkv;
    if ((!wo && !qkv) || p.lo < 0 || p.hi < 0) return false;
    const int em = std::max(p.lo, p.hi);
    if (wo && shape.rows == 2 && shape.warps == 2 && em <= 4) {
        launch_plan<2, 2, 4>(w, xq, xd, y, accumulate, p, s);
        return true;
    }
    if (qkv && shape.rows == 1 && shape.warps == 1 && em <= 8) {
        if (em <= 4)
            launch_plan<1, 1, 4>(w, xq, xd, y, accumulate, p, s);
        else
            launch_plan<1, 1, 8>(w, xq, xd, y, accumulate, p, s);
        return true;
    }
    return false;
}

}  // namespace detail

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_early_plan(const char* spec);
void set_early_plan(const char* spec) {
    detail::plans();
    detail::g_plans = detail::parse_plans(spec);
}

}  // namespace memtile::cuda
