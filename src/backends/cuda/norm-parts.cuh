// Device arithmetic of the RMSNorm left to the products (norm-fused.h), shared by the kernel of the parts (norm.cu),
// the products that leave them (norm-fused.cu) and the consumers that finish the norm (matvec-common.cuh, NS), so that
// every path forming them has the same bits:
//   sum of squares: per group of 32 elements a warp tree over the lanes (f32), then the group sums added in a fixed
//     order (norm_scale: lane l adds groups l, l + 32, ... in turn, then a warp tree); scale s = rsqrt(sum / n + eps);
//   the int8 values are those of u = x * g, not of the normalized value: quantizing in groups is scale-invariant, so a
//     producer can quantize its groups of 32 without the row's sum; group scale amax(u) / 127, times s by the consumer,
//     xs = that times the sum of the quants.
// Every multiply and add is an explicit _rn intrinsic (no contraction that could differ between the kernels inlining
// it). Not the bits of rms_norm_kernel (ops.cu: the sum in double, the values normalized before quantizing): the step's
// logits agree to rounding (the check in tests/cuda/cuda-check.cpp).
#pragma once

#include <cstdint>

#include "backends/cuda/device-common.cuh"

namespace memtile::cuda {

__device__ __forceinline__ float warp_sum_rn(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The RMSNorm scale of n elements from their ceil(n / 32) group sums ss (f32, global memory), in every lane of the
// calling warp (all 32 lanes call it).
__device__ __forceinline__ float norm_scale(const float* ss, int n, float eps, int lane) {
    const int ng = (n + 31) / 32;
    float t = 0;
    for (int g = lane; g < ng; g += 32) t = __fadd_rn(t, ss[g]);
    t = warp_sum_rn(t);
    return rsqrtf(__fadd_rn(__fdiv_rn(t, float(n)), eps));
}

// The parts of one group grp of 32 elements held by a warp (v: x, gv: the norm weight; lanes past n: 0): quants of
// u = v * gv into q [32 grp + lane], the unscaled group scale into d [grp], the quants' sum into sq [grp] (a float) and
// the group's sum of squares into ss [grp]. A consumer forms the step's scale s from ss (norm_scale) and uses d * s and
// (d * s) * sq as its xd and xs.
__device__ __forceinline__ void norm_group_parts(float v, float gv, int lane, int64_t grp, int8_t* q, float* d,
                                                 float* sq, float* ss) {
    const float s2 = warp_sum_rn(__fmul_rn(v, v));
    const float u = __fmul_rn(v, gv);
    const float amax = warp_max(fabsf(u));
    const float dd = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    const int qi = __float2int_rn(__fmul_rn(u, inv));
    q[grp * 32 + lane] = int8_t(qi);
    const int sum = warp_sum_int(qi);
    if (lane == 0) {
        d[grp] = dd;
        sq[grp] = float(sum);
        ss[grp] = s2;
    }
}

// Units of 256 (the K formats' consumers, one activation scale per 256 as the CPU engine's q8_k; norm-fused.h, mode bit
// k_norm_fusion_k): a warp holds unit u of n elements as lane l's 8 contiguous elements 256 u + 8 l .. + 7 (a group of
// 32 in lanes 4k .. 4k + 3). The unit's sum of squares: each lane's 8 squares added in order, then a warp tree; the
// unit's scale amax(u) / 127 over its 256 values (unscaled: the consumer multiplies it by s), each group's sum of
// quants.
__device__ __forceinline__ float unit_sum_squares(const float (&v)[8]) {
    float t = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) t = __fadd_rn(t, __fmul_rn(v[j], v[j]));
    return warp_sum_rn(t);
}

// The RMSNorm scale of n elements from their n / 256 unit sums ss (norm_scale's order over the units).
__device__ __forceinline__ float norm_scale_units(const float* ss, int n, float eps, int lane) {
    float t = 0;
    for (int g = lane; g < n / 256; g += 32) t = __fadd_rn(t, ss[g]);
    t = warp_sum_rn(t);
    return rsqrtf(__fadd_rn(__fdiv_rn(t, float(n)), eps));
}

// The quants of a lane's 8 values u (packed little-endian), the unit's unscaled scale d (amax over the warp: the
// bits of the non-negative |u| order as unsigned integers, so an integer max is exact) and the sum of the quants of
// the lane's group of 32 (in its 4 lanes).
struct unit_quants {
    uint2 q;
    float d;
    int sum;
};
__device__ __forceinline__ unit_quants quantize_unit(const float (&u)[8]) {
    float m = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(u[j]));
    const float amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(m)));
    const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    uint32_t w[2] = {0, 0};
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int qi = __float2int_rn(__fmul_rn(u[j], inv));
        s += qi;
        w[j / 4] |= (uint32_t(qi) & 0xffu) << (8 * (j % 4));
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    return unit_quants{make_uint2(w[0], w[1]), d, s};
}

// A lane's 8 elements of unit u at p (16-byte aligned: n % 256 == 0 and a cudaMalloc'd base).
__device__ __forceinline__ void load_unit(const float* p, int64_t e, float (&v)[8]) {
    const float4 a = *reinterpret_cast<const float4*>(p + e), b = *reinterpret_cast<const float4*>(p + e + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

}  // namespace memtile::cuda
