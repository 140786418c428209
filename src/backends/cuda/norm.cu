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

// Units of 256 (norm-parts.cuh, mode bit k_norm_fusion_k): one warp per unit of x ([n], n % 256 == 0), no block barrier
// and no whole-row sum: the norm weight loaded before the wait, one load of x, then the unit's parts.
__global__ void __launch_bounds__(128) norm_parts_k_kernel(const float* x, int n, norm_parts p) {
    const int lane = threadIdx.x & 31;
    const int unit = int((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const bool on = unit < n / 256;
    const int64_t e = int64_t(unit) * 256 + 8 * lane;
    float gv[8] = {};
    if (on) load_unit(p.g, e, gv);
    griddep_wait();
    griddep_launch();
    if (!on) return;
    float v[8], u[8];
    load_unit(x, e, v);
#pragma unroll
    for (int j = 0; j < 8; j++) u[j] = __fmul_rn(v[j], gv[j]);
    const float ss = unit_sum_squares(v);
    const unit_quants r = quantize_unit(u);
    *reinterpret_cast<uint2*>(p.q + e) = r.q;
    if ((lane & 3) == 0) {
        p.d[unit * 8 + lane / 4] = r.d;
        p.sq[unit * 8 + lane / 4] = float(r.sum);
    }
    if (lane == 0) p.ss[unit] = ss;
}

// rms_norm_parts_rows_kernel for units of 256: blocks of 8 warps, blockIdx.y = row; every block forms its row's unit
// sums (warp w the units w, w + 8, ..., their loads issued in runs of 4 units before the sums, into [n / 256] floats of
// dynamic shared memory) and scale, then warp w its unit 8 blockIdx.x + w (one of its own, kept from the run), scaled
// as a consumer scales it: xd = d * s, xs = xd * the group's sum of quants (group-major over the rows); out = (x * s) *
// g.
__global__ void __launch_bounds__(256) rms_norm_parts_rows_k_kernel(const float* x, const float* g, float* out, int n,
                                                                    float eps, int8_t* xq, float* xd, float* xs) {
    extern __shared__ float unit_ss[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int unit = int(blockIdx.x) * 8 + warp, nu = n / 256;
    const int64_t row = blockIdx.y, e = int64_t(unit) * 256 + 8 * lane;
    float gv[8] = {};
    if (unit < nu) load_unit(g, e, gv);
    griddep_wait();
    griddep_launch();
    x += row * n;
    out += row * n;
    constexpr int RUN = 4;
    float v[8] = {}, u[8];
    for (int k0 = warp; k0 < nu; k0 += 8 * RUN) {
        float r[RUN][8];
#pragma unroll
        for (int i = 0; i < RUN; i++)
            if (k0 + 8 * i < nu) load_unit(x, int64_t(k0 + 8 * i) * 256 + 8 * lane, r[i]);
#pragma unroll
        for (int i = 0; i < RUN; i++) {
            if (k0 + 8 * i >= nu) continue;
            const float t = unit_sum_squares(r[i]);
            if (lane == 0) unit_ss[k0 + 8 * i] = t;
            if (k0 + 8 * i == unit)
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = r[i][j];
        }
    }
    __syncthreads();
    const float sc = norm_scale_units(unit_ss, n, eps, lane);
    if (unit >= nu) return;
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        u[j] = __fmul_rn(v[j], gv[j]);
        o[j] = __fmul_rn(__fmul_rn(v[j], sc), gv[j]);
    }
    *reinterpret_cast<float4*>(out + e) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(out + e + 4) = make_float4(o[4], o[5], o[6], o[7]);
    const unit_quants r = quantize_unit(u);
    const int64_t grp = (int64_t(unit) * 8 + lane / 4) * gridDim.y + row;
    *reinterpret_cast<uint2*>(xq + grp * 32 + 8 * (lane & 3)) = r.q;
    if ((lane & 3) == 0) {
        const float ds = __fmul_rn(r.d, sc);
        xd[grp] = ds;
        xs[grp] = __fmul_rn(ds, float(r.sum));
    }
}

bool g_norm_set = false;
// Default (session 11, lead): the K formats' norms as rms_norm_parts_rows_k in both steps (H200, llama3-8b Q4_K_M,
// one process, modes alternated: tg128 582.8 / 583.5 -> 596.5 / 596.1 tok/s, B=8 2,988 -> 3,052); the groups-of-32
// consumers keep rms_norm_kernel (bits 0-1 off: the default model's greedy check, see cuda-backend.h).
int g_norm = k_norm_fusion_k | k_norm_fusion_k_rows;

}  // namespace

void launch_rms_norm_parts_rows(const float* x, const float* g, float* out, int n_rows, int n, float eps, int8_t* xq,
                                float* xd, float* xs, cudaStream_t s) {
    detail::launch_smem(rms_norm_parts_rows_kernel, dim3(unsigned((n + 255) / 256), unsigned(n_rows)), 256,
                        size_t(n / 32) * sizeof(float), s, x, g, out, n, eps, xq, xd, xs);
}

void launch_norm_parts(const float* x, int n, const norm_parts& p, cudaStream_t s) {
    detail::launch(norm_parts_kernel, unsigned((n / 32 + 7) / 8), 256, s, x, n, p);
}

void launch_rms_norm_parts_rows_k(const float* x, const float* g, float* out, int n_rows, int n, float eps, int8_t* xq,
                                  float* xd, float* xs, cudaStream_t s) {
    detail::launch_smem(rms_norm_parts_rows_k_kernel, dim3(unsigned((n / 256 + 7) / 8), unsigned(n_rows)), 256,
                        size_t(n / 256) * sizeof(float), s, x, g, out, n, eps, xq, xd, xs);
}

void launch_norm_parts_k(const float* x, int n, const norm_parts& p, cudaStream_t s) {
    detail::launch(norm_parts_k_kernel, unsigned((n / 256 + 3) / 4), 128, s, x, n, p);
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
