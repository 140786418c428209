// The RMSNorm left to the products (norm-fused.h): the kernel of the norm parts where no product leaves them, and the
// switch. Arithmetic: norm-parts.cuh (the RMSNorm kernel of the default step is rms_norm_kernel in ops.cu).
#include <cstdlib>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/norm-fused.h"
#include "backends/cuda/norm-parts.cuh"

namespace memtile::cuda {
namespace {

using detail::griddep_launch;
using detail::griddep_wait;

// One warp per group of 32 of x ([n], n % 32 == 0): its norm parts (norm_group_parts).
__global__ void __launch_bounds__(256) norm_parts_kernel(const float* x, int n, norm_parts p) {
    const int lane = threadIdx.x & 31;
    const int64_t grp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5, e = grp * 32 + lane;
    const float gv = e < n ? p.g[e] : 0.0f;
    griddep_wait();
    griddep_launch();
    if (grp * 32 >= n) return;
    norm_group_parts(x[e], gv, lane, grp, p.q, p.d, p.sq, p.ss);
}

// The batched step's RMSNorm where the single step reads parts: blocks of 256 threads, blockIdx.y = row of x and out
// [n_rows, n]. Every block forms its row's group sums (a warp per group, into [n / 32] floats of dynamic shared memory)
// and scale (norm_scale, the consumers' order), then each warp its group's parts, scaled as a consumer scales them:
// xd = d * s, xs = xd * sum of quants (group-major over the rows); out = (x * s) * g for f32 readers.
__global__ void __launch_bounds__(256) rms_norm_parts_rows_kernel(const float* x, const float* g, float* out, int n,
                                                                  float eps, int8_t* xq, float* xd, float* xs) {
    extern __shared__ float group_ss[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x, row = blockIdx.y;
    const float gv = i < n ? g[i] : 0.0f;
    griddep_wait();
    griddep_launch();
    x += row * n;
    out += row * n;
    const int ng = n / 32;
    for (int g0 = warp; g0 < ng; g0 += 64) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = g0 + 8 * k < ng ? x[32 * (g0 + 8 * k) + lane] : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float p = warp_sum_rn(__fmul_rn(v[k], v[k]));
            if (lane == 0 && g0 + 8 * k < ng) group_ss[g0 + 8 * k] = p;
        }
    }
    __syncthreads();
    const float sc = norm_scale(group_ss, n, eps, lane);
    if (i >= n) return;  // n % 32 == 0: whole warps
    const float xi = x[i];
    out[i] = __fmul_rn(__fmul_rn(xi, sc), gv);
    const float u = __fmul_rn(xi, gv);
    const float amax = warp_max(fabsf(u));
    const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(__fmul_rn(u, inv));
    const int64_t grp = (i / 32) * gridDim.y + row;
    xq[grp * 32 + lane] = int8_t(q);
    const int sum = warp_sum_int(q);
    if (lane == 0) {
        const float ds = __fmul_rn(d, sc);
        xd[grp] = ds;
        xs[grp] = __fmul_rn(ds, float(sum));
    }
}

bool g_norm_set = false;
int g_norm = 0;

}  // namespace

void launch_rms_norm_parts_rows(const float* x, const float* g, float* out, int n_rows, int n, float eps, int8_t* xq,
                                float* xd, float* xs, cudaStream_t s) {
    detail::launch_smem(rms_norm_parts_rows_kernel, dim3(unsigned((n + 255) / 256), unsigned(n_rows)), 256,
                        size_t(n / 32) * sizeof(float), s, x, g, out, n, eps, xq, xd, xs);
}

void launch_norm_parts(const float* x, int n, const norm_parts& p, cudaStream_t s) {
    detail::launch(norm_parts_kernel, unsigned((n / 32 + 7) / 8), 256, s, x, n, p);
}

int norm_fusion_mode() {
    if (!g_norm_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_NORM")) g_norm = int(std::strtol(env, nullptr, 10));
        g_norm_set = true;
    }
    return g_norm;
}

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_norm_fusion(int mode);
void set_norm_fusion(int mode) {
    norm_fusion_mode();
    g_norm = mode;
}
int norm_fusion();
int norm_fusion() {
    return norm_fusion_mode();
}

}  // namespace memtile::cuda
