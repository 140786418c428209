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

}  // namespace memtile::cuda
