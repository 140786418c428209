// The RMSNorm left to the products of the decode step (norm-fused.h): the Wo / down product whose thread-block clusters
// finish the norm parts of their groups of 32 outputs, and the Q8_0 / Q4_0 consumers that apply the norm's scale.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/matvec-common.cuh"
#include "backends/cuda/norm-fused.h"
#include "backends/cuda/norm-parts.cuh"

namespace memtile::cuda {
namespace {

using namespace detail;

// matvec_kernel (accumulate) with its sums finishing the norm parts: a block's R * 4 / W rows are consecutive, so a
// cluster of C = 32 / (R * 4 / W) blocks (x-rank = blockIdx.x % C) holds one group of 32 outputs. Each block adds its
// rows to y (store_row_sums' arithmetic: the same x bits) and writes the new values into the shared memory of the
// cluster's rank 0 (distributed shared memory); after a cluster barrier, rank 0's first warp forms the group's parts
// (norm_group_parts) while the other blocks have exited. No global atomics, no last block, no whole-row sum.
template <dtype T, int R, int W, int EL, int TS>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_norm_kernel(gpu_weight w, const int8_t* xq, const float* xd, const float* xs, float* y, norm_parts p) {
    namespace cg = cooperative_groups;
    constexpr int G = k_block_warps / W, RB = R * G;
    static_assert(32 % RB == 0, "a block's rows tile a group of 32");
    __shared__ float s_vals[32];  // rank 0: the group's new values
    // Phase 1 of the cluster barrier: this block runs (distributed shared memory is written only after its wait).
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
    const cg::cluster_group cl = cg::this_cluster();
    const int rank = int(cl.block_rank());
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int64_t row0 = (int64_t(blockIdx.x) * G + group) * R;
    // The group's norm weights (rank 0, first warp; a weight, so before the wait).
    const float gv = rank == 0 && warp == 0 ? p.g[int64_t(blockIdx.x) * RB + lane] : 0.0f;
    float acc[R];
    matvec_accumulate<T, R, W, EL, TS>(w, xq, xd, xs, tid, row0, acc);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = warp_sum(acc[r]);
    float* dst = cl.map_shared_rank(s_vals, 0) + rank * RB + group * R;
    asm volatile("barrier.cluster.wait;" ::: "memory");
    if constexpr (W > 1) {
        const auto part = stash_warp_sums<R>(v, warp, lane);
        if (tid < R) {
            const float s = part_sum<R, W>(part, group, tid);
            const float nv = y[row0 + tid] + s;
            y[row0 + tid] = nv;
            dst[tid] = nv;
        }
    } else {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float nv = y[row0 + r] + v[r];
                y[row0 + r] = nv;
                dst[r] = nv;
            }
    }
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
    if (rank != 0 || warp != 0) return;
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
    norm_group_parts(s_vals[lane], gv, lane, int64_t(blockIdx.x) * RB / 32, p.q, p.d, p.sq, p.ss);
}

// matvec_kernel on norm parts (NS): the plain kernel's tasks, order and epilogue, held to the plain kernel's registers
// (40 for one row per warp: 12 blocks per SM, else 64: 8), a few spilled: unbounded, the scale formed while the early
// weights are live took 48-56 / 64-80 registers, measured slower (docs/cuda-decode-log.md, "Session 9 (branch gnf9)").
template <dtype T, int R, int W, int EL>
__global__ void __launch_bounds__(32 * k_block_warps, R == 1 && W == 1 ? 12 : 8)
    matvec_scaled_kernel(gpu_weight w, norm_parts p, float* y, int accumulate) {
    constexpr int G = k_block_warps / W;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / W;
    const int tid = (warp % W) * 32 + lane;
    const int64_t row0 = (int64_t(blockIdx.x) * G + group) * R;
    float acc[R];
    matvec_accumulate<T, R, W, EL, 0, true>(w, p.q, p.d, p.sq, tid, row0, acc, p.ss, p.eps);
    store_row_sums<R, W>(acc, warp, lane, group, tid, row0, w.n_out, y, accumulate);
}

bool int8_group32(const gpu_weight& w) {
    return (w.type == dtype::q8_0 || w.type == dtype::q4_0) && w.n_in % 32 == 0;
}

// Calls f(std::integral_constant R, W) for the decode shapes 1 x 1, 2 x 2, 2 x 4; false for the others.
template <typename F>
bool with_shape(matvec_shape sh, F f) {
    if (sh.rows == 1 && sh.warps == 1) return f(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{});
    if (sh.rows == 2 && sh.warps == 2) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
    if (sh.rows == 2 && sh.warps == 4) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 4>{});
    return false;
}

}  // namespace

bool matvec_scaled_supported(const gpu_weight& w) {
    const matvec_shape sh = default_matvec_shape(w);
    return int8_group32(w) && with_shape(sh, [](auto, auto) { return true; });
}

void launch_matvec_scaled(const gpu_weight& w, const norm_parts& p, float* y, bool accumulate, cudaStream_t s) {
    const matvec_shape sh = default_matvec_shape(w);
    const int acc = accumulate ? 1 : 0;
    with_shape(sh, [&](auto r, auto wp) {
        constexpr int R = decltype(r)::value, W = decltype(wp)::value;
        const unsigned blocks = unsigned((w.n_out + R * (k_block_warps / W) - 1) / (R * (k_block_warps / W)));
        if (w.type == dtype::q4_0)
            launch(matvec_scaled_kernel<dtype::q4_0, R, W, 0>, blocks, 32 * k_block_warps, s, w, p, y, acc);
        else if (matvec_early() == 4)
            launch(matvec_scaled_kernel<dtype::q8_0, R, W, 4>, blocks, 32 * k_block_warps, s, w, p, y, acc);
        else
            launch(matvec_scaled_kernel<dtype::q8_0, R, W, 0>, blocks, 32 * k_block_warps, s, w, p, y, acc);
        return true;
    });
}

bool launch_matvec_norm(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                        const norm_parts& p, cudaStream_t s) {
    const matvec_shape sh = default_matvec_shape(w);
    if (!int8_group32(w) || w.n_out % 32 != 0 || sh.rows != 2 || (sh.warps != 2 && sh.warps != 4)) return false;
    // The staged tasks of launch_staged (bit-equal either way): 0 or 1 here.
    const int el = w.type == dtype::q8_0 ? matvec_early() : 0;
    const int ts = std::min(staged_tasks(w, sh, el, w.type == dtype::q8_0 ? 16 : 32), 1);
    auto go = [&](auto kernel, int rb, int ts_n) {
        const int c = 32 / rb;
        if (c > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        launch_cluster(kernel, unsigned(w.n_out / rb), 32 * k_block_warps, staged_bytes(ts_n, 2, 32 * k_block_warps),
                       dim3(unsigned(c), 1, 1), s, w, xq, xd, xs, y, p);
        return true;
    };
    if (w.type == dtype::q8_0) {
        if (sh.warps == 2)
            return el == 4 ? (ts ? go(matvec_norm_kernel<dtype::q8_0, 2, 2, 4, 1>, 4, 1)
                                 : go(matvec_norm_kernel<dtype::q8_0, 2, 2, 4, 0>, 4, 0))
                           : go(matvec_norm_kernel<dtype::q8_0, 2, 2, 0, 0>, 4, 0);
        return el == 4 ? go(matvec_norm_kernel<dtype::q8_0, 2, 4, 4, 0>, 2, 0)
                       : go(matvec_norm_kernel<dtype::q8_0, 2, 4, 0, 0>, 2, 0);
    }
    if (sh.warps == 2)
        return ts ? go(matvec_norm_kernel<dtype::q4_0, 2, 2, 0, 1>, 4, 1)
                  : go(matvec_norm_kernel<dtype::q4_0, 2, 2, 0, 0>, 4, 0);
    return go(matvec_norm_kernel<dtype::q4_0, 2, 4, 0, 0>, 2, 0);
}

}  // namespace memtile::cuda
