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

// Block b: the P pairs i = P b .. P b + P - 1 (gate row i, up row n_ff + i; P = 32 or 16), NG groups of 2 warps, group
// g taking the pairs P b + PPG g + k one after the other (NG PPG = P), warp j of a group the lane-pair kernel's warp j
// of a row pair, one step per row (n_in <= 4,096: a longer row would need a second step in flight). EARLY: the first
// pair's weights loaded before the PDL wait after a sleep of delay_ns, as the lane-pair kernel's early form. h [n_ff]
// f32; hq [n_ff], hd / hs [n_ff / 32] (cuda-kernels.h). D: pairs whose weights a warp has in flight at once. The 256 /
// P blocks of a unit form a cluster (16: a non-portable size; a group of 32 then spans two blocks, whose integer sums
// of quants are added through distributed shared memory).
template <int NG, int P, int D, bool EARLY>
__global__ void __launch_bounds__(64 * NG)
    matvec_glu_k_kernel(q4k_args a, const int8_t* xq, const float* xd, const float* xs, float* h, int8_t* hq, float* hd,
                        float* hs, unsigned delay_ns) {
    constexpr int PPG = P / NG, C = 256 / P;
    static_assert((P == 32 || P == 16) && NG * PPG == P && PPG % D == 0, "a block holds 32 or 16 pairs");
    namespace cg = cooperative_groups;
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), group = warp >> 1, j = warp & 1;
    const int n_ff = a.n_out / 2, n = a.n_in >> 6, m = lane >> 1, p = lane & 1;
    const int pair0 = int(blockIdx.x) * P + group * PPG;
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
    // Warp 0, lane l < P: pair P b + l; the two warps' sums added as the lane-pair kernel adds them, h as
    // swiglu_kernel.
    float v = 0;
    if (warp == 0 && lane < P) {
        const int g = lane / PPG, k = lane % PPG;
        float gs = 0, us = 0;
        gs += part[2 * g][k][0];
        gs += part[2 * g + 1][k][0];
        us += part[2 * g][k][1];
        us += part[2 * g + 1][k][1];
        v = gs / (1.0f + expf(-gs)) * us;
    }
    if (warp == 0) {
        const float bm = warp_max(fabsf(v));
        if (lane == 0) block_max = bm;
    }
    const cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    int qv = 0;
    float d = 0;
    if (warp == 0) {
        const float amax = warp_max(lane < C ? *cl.map_shared_rank(&block_max, lane) : 0.0f);
        d = amax / 127.0f;
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        if (lane < P) {
            const int64_t e = int64_t(blockIdx.x) * P + lane;
            h[e] = v;
            qv = __float2int_rn(__fmul_rn(v, inv));
            hq[e] = int8_t(qv);
        }
    }
    const int sq = warp == 0 ? warp_sum_int(qv) : 0;  // lanes from P on add 0
    if constexpr (P == 32) {
        // Every read of another block's shared memory is done: arrive now, wait before exiting.
        asm volatile("barrier.cluster.arrive.release;" ::: "memory");
        if (threadIdx.x == 0) {
            hd[blockIdx.x] = d;
            hs[blockIdx.x] = d * float(sq);
        }
    } else {
        __shared__ int block_sq;
        if (threadIdx.x == 0) block_sq = sq;
        cl.sync();
        if (threadIdx.x == 0 && (blockIdx.x & 1) == 0) {
            const int g = int(blockIdx.x >> 1);
            hd[g] = d;
            hs[g] = d * float(sq + *cl.map_shared_rank(&block_sq, int(cl.block_rank()) + 1));
        }
        asm volatile("barrier.cluster.arrive.release;" ::: "memory");
    }
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The block form "NG,D,P" (groups of 2 warps per block, pairs in flight per warp, pairs per block): MEMTILE_CUDA_GLU_K
// (A/B benchmarks: 4,1,32 2,1,32 2,2,32 8,1,32 2,1,16; 4,2,32 would take 102 registers, 2 blocks per SM), else 4,1,32.
int glu_k_form() {
    static const int v = [] {
        int g = 4, d = 1, p = 32;
        if (const char* env = std::getenv("MEMTILE_CUDA_GLU_K")) std::sscanf(env, "%d,%d,%d", &g, &d, &p);
        const int f = 1000 * g + 100 * d + p;
        return f == 2132 || f == 2232 || f == 8132 || f == 2116 ? f : 4132;
    }();
    return v;
}

template <int NG, int P, int D>
void launch_glu_k_form(const q4k_args& a, bool early, unsigned delay, const int8_t* xq, const float* xd,
                       const float* xs, float* h, int8_t* hq, float* hd, float* hs, cudaStream_t s) {
    auto kernel = early ? matvec_glu_k_kernel<NG, P, D, true> : matvec_glu_k_kernel<NG, P, D, false>;
    if constexpr (P == 16) {
        static const bool allowed = [&] {
            cudaFuncSetAttribute(matvec_glu_k_kernel<NG, P, D, true>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                 1);
            cudaFuncSetAttribute(matvec_glu_k_kernel<NG, P, D, false>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                 1);
            return true;
        }();
        (void)allowed;
    }
    launch_cluster(kernel, dim3(unsigned(a.n_out / 2 / P)), dim3(64 * NG), 0, dim3(256 / P), s, a, xq, xd, xs, h, hq,
                   hd, hs, delay);
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
        case 2132: detail::launch_glu_k_form<2, 32, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        case 2232: detail::launch_glu_k_form<2, 32, 2>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        case 8132: detail::launch_glu_k_form<8, 32, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        case 2116: detail::launch_glu_k_form<2, 16, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
        default: detail::launch_glu_k_form<4, 32, 1>(a, early, delay, xq, xd, xs, h, hq, hd, hs, s); break;
    }
}

}  // namespace memtile::cuda
