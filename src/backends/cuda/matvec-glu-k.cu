// The Q4_K gate/up product with SwiGLU and the quantization of its units of 256 in its epilogue (docs/cuda.md, "Session
// 35"): the SwiGLU kernel and its kernel boundary go where the down matrix reads int8 in units of 256 (Q4_K, Q5_K,
// Q6_K). A unit's 256 values come from the 8 blocks of a thread-block cluster (32 each, one group of 32); the unit's
// maximum is exchanged through distributed shared memory (the attention's cluster merge does the same), so no block
// waits on another grid or on a last-block tail. The rows are summed in lane pairs exactly as the lane-pair kernel
// (matvec-q4k.cuh) sums them, h and its quantization as swiglu_kernel at q_block 256: bit-equal to the two kernels.
#include <cooperative_groups.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "backends/cuda/matvec-fused.h"
#include "backends/cuda/matvec-q4k.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

constexpr int k_glu_k_cluster = 8;  // blocks of 32 pairs per unit of 256

// Block b: the 32 pairs i = 32 b .. 32 b + 31 (gate row i, up row n_ff + i), NG groups of 2 warps, group g taking the
// pairs 32 b + PPG g + k one after the other (NG PPG = 32), warp j of a group the lane-pair kernel's warp j of a row
// pair, one step per row (n_in <= 4,096: a longer row would need a second step in flight). EARLY: the first pair's
// weights loaded before the PDL wait after a sleep of delay_ns, as the lane-pair kernel's early form. h [n_ff] f32; hq
// [n_ff], hd / hs [n_ff / 32] (cuda-kernels.h). D: pairs whose weights a warp has in flight at once.
template <int NG, int D, bool EARLY>
__global__ void __launch_bounds__(64 * NG)
    matvec_glu_k_kernel(q4k_args a, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq, float* hd,
                        float* hs, unsigned delay_ns) {
    constexpr int PPG = 32 / NG;
    static_assert(NG * PPG == 32 && PPG % D == 0, "a block holds one group of 32 pairs");
    namespace cg = cooperative_groups;
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), group = warp >> 1, j = warp & 1;
    const int n_ff = a.n_out / 2, n = a.n_in >> 6, m = lane >> 1, p = lane & 1;
    const int pair0 = int(blockIdx.x) * 32 + group * PPG;
    auto rows_of = [&](int k, const uint8_t*(&q)[2], const uint32_t*(&side)[2]) {
        const unsigned r[2] = {unsigned(pair0 + k), unsigned(n_ff + pair0 + k)};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            q[i] = a.q + size_t(r[i]) * unsigned(a.row_bytes);
            side[i] = a.side + size_t(r[i]) * unsigned(a.side_row);
        }
    };
    const int ta = 32 * j + m;              // the lane's task A (B = A + 16)
    __shared__ float part[2 * NG][PPG][2];  // [warp][pair][gate, up] warp sums
    __shared__ float block_max;
    // D pairs' steps in flight per warp: loaded together, the next D issued before this D's sums.
    auto load_pairs = [&](int k0, q4k_lp_step(&st)[D]) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            const uint8_t* q[2];
            const uint32_t* side[2];
            rows_of(k0 + d, q, side);
            q4k_lp_load(q, side, n, ta, p, st[d]);
        }
    };
    q4k_lp_step st[D];
    if constexpr (EARLY) {
        if (delay_ns) __nanosleep(delay_ns);
        load_pairs(0, st);  // weights only: nothing the predecessor writes
    }
    griddep_wait();
    griddep_launch();
    if constexpr (!EARLY) load_pairs(0, st);
#pragma unroll 1
    for (int k = 0; k < PPG; k += D) {
        float acc[D][2];
#pragma unroll
        for (int d = 0; d < D; d++) {
            acc[d][0] = acc[d][1] = 0;
            if (32 * j < n) q4k_lp_add<false>(st[d], n, ta, p, xq, xd, xs, 1.0f, acc[d]);
        }
        if (k + D < PPG) load_pairs(k + D, st);
#pragma unroll
        for (int d = 0; d < D; d++) {
            const float sum = q4k_lp_warp_sums(acc[d], lane);
            if (lane < 2) part[warp][k + d][lane] = sum;
        }
    }
    __syncthreads();
    // Warp 0, lane l: pair 32 b + l; the two warps' sums added as the lane-pair kernel adds them, h as swiglu_kernel.
    float v = 0;
    if (warp == 0) {
        const int g = lane / PPG, k = lane % PPG;
        float gs = 0, us = 0;
        gs += part[2 * g][k][0];
        gs += part[2 * g + 1][k][0];
        us += part[2 * g][k][1];
        us += part[2 * g + 1][k][1];
        v = gs / (1.0f + expf(-gs)) * us;
        const float bm = warp_max(fabsf(v));
        if (lane == 0) block_max = bm;
    }
    const cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    float amax = 0;
    if (warp == 0) amax = warp_max(lane < k_glu_k_cluster ? *cl.map_shared_rank(&block_max, lane) : 0.0f);
    // Every read of another block's shared memory is done: arrive now, wait before exiting.
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
    if (warp == 0) {
        const int64_t e = int64_t(blockIdx.x) * 32 + lane;
        const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
        h[e] = v;
        const int qv = __float2int_rn(__fmul_rn(v, inv));
        hq[e] = int8_t(qv);
        const int sq = warp_sum_int(qv);
        if (lane == 0) {
            hd[blockIdx.x] = d;
            hs[blockIdx.x] = d * float(sq);
        }
    }
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The block form "NG,D" (groups of 2 warps per block, pairs in flight per warp): MEMTILE_CUDA_GLU_K (A/B benchmarks:
// 2,1 2,2 4,1 8,1; 4,2 would take 102 registers, 2 blocks per SM), else 4,1.
int glu_k_form() {
    static const int v = [] {
        int g = 4, d = 1;
        if (const char* env = std::getenv("MEMTILE_CUDA_GLU_K")) std::sscanf(env, "%d,%d", &g, &d);
        const int f = 10 * g + d;
        return f == 21 || f == 22 || f == 81 ? f : 41;
    }();
    return v;
}

template <int NG, int D>
void launch_glu_k_form(const q4k_args& a, bool early, unsigned delay, const int8_t* xq, const float* xd,
                       const float* xs, float* h, int8_t* hq, float* hd, float* hs, cudaStream_t s) {
    auto kernel = early ? matvec_glu_k_kernel<NG, D, true> : matvec_glu_k_kernel<NG, D, false>;
    launch_cluster(kernel, dim3(unsigned(a.n_out / 64)), dim3(64 * NG), 0, dim3(k_glu_k_cluster), s, a, xq, xd, xs, h,
                   hq, hd, hs, delay);
}

}  // namespace
}  // namespace detail

bool matvec_glu_k_supported(const gpu_weight& w) {
    detail::q4k_args a;
    const matvec_shape shape = default_matvec_shape(w);
    return detail::q4k_args_of(w, a) && shape.rows == 2 && shape.warps == 2 &&
           (detail::q4k_matvec_mode() & detail::k_q4k_lane_pairs) && w.n_in <= 4096 && w.n_out % (2 * 256) == 0;
}

void launch_matvec_glu_k(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq,
                         float* hd, float* hs, cudaStream_t s) {
    detail::q4k_args a;
    if (!matvec_glu_k_supported(w) || !detail::q4k_args_of(w, a))
        throw std::invalid_argument("[cuda] launch_matvec_glu_k: the weight is no Q4_K [gate; up] of this kernel");
    const int mode = detail::q4k_matvec_mode();
    const bool early = (mode & detail::k_q4k_early) && detail::pdl_enabled();
    const unsigned delay = unsigned(mode >> detail::k_q4k_delay_shift) * 250u;
    switch (detail::glu_k_form()) {
        case 21: detail::launch_glu_k_form<2, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        case 22: detail::launch_glu_k_form<2, 2>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        case 81: detail::launch_glu_k_form<8, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        default: detail::launch_glu_k_form<4, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
    }
}

}  // namespace memtile::cuda
