// Device helpers of the batched tensor-core products (matvec-mma.cu): mma.sync wrappers, the quad word transpose,
// exact integer-to-float conversions, ldmatrix and f16 packing. Only matvec-mma.cu includes this header.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/device-common.cuh"

namespace memtile::cuda::mma_util {

__device__ __forceinline__ void mma_s8_k32(const int (&a)[4], int b0, int b1, int (&c)[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
// The same with unsigned A (4-bit quants: low nibbles 0..15, high nibbles in place, 16 q).
__device__ __forceinline__ void mma_u8s8_k32(const int (&a)[4], int b0, int b1, int (&c)[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
__device__ __forceinline__ void mma_s8_k16(int a0, int a1, int b0, int (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}
__device__ __forceinline__ void mma_f16_k16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 4x4 word transpose within a quad: lane t holds v = words 0..3 of group t (16 bytes of one row); on return
// o[j] = word t of group j, the A-fragment word of lane t for group j. Two butterfly rounds of 2 shuffles.
__device__ __forceinline__ void quad_transpose(const int4& v, int (&o)[4], int t) {
    const bool odd = t & 1, hi = t & 2;
    // Round 1 (lane t ^ 1): keep words k with k % 2 == t % 2 (e0: k = t % 2, e1: k = t % 2 + 2), send the others.
    const int e0 = odd ? v.y : v.x, e1 = odd ? v.w : v.z;
    const int f0 = __shfl_xor_sync(0xffffffffu, odd ? v.x : v.y, 1);  // group t ^ 1, word t % 2
    const int f1 = __shfl_xor_sync(0xffffffffu, odd ? v.z : v.w, 1);  // group t ^ 1, word t % 2 + 2
    // Round 2 (lane t ^ 2): keep word t of groups t, t ^ 1; receive word t of groups t ^ 2, t ^ 3.
    const int g0 = __shfl_xor_sync(0xffffffffu, hi ? e0 : e1, 2);
    const int g1 = __shfl_xor_sync(0xffffffffu, hi ? f0 : f1, 2);
    const int k0 = hi ? e1 : e0, k1 = hi ? f1 : f0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int d = j ^ t;
        o[j] = d == 0 ? k0 : d == 1 ? k1 : d == 2 ? g0 : g1;
    }
}

// float(c) for |c| < 2^22 without a conversion instruction: c added to the mantissa of 1.5 * 2^23, exact.
__device__ __forceinline__ float int_to_float_exact(int c) {
    return __int_as_float(0x4B400000 + c) - 12582912.0f;
}
template <bool Exact>
__device__ __forceinline__ float to_float(int c) {
    return Exact ? int_to_float_exact(c) : float(c);
}
// float(byte I of v): by a byte permute into 2^23's mantissa (Exact) or by I2F.
template <bool Exact, int I>
__device__ __forceinline__ float byte_to_float(uint32_t v) {
    if constexpr (Exact)
        return byte_float<I>(v);
    else
        return float((v >> (8 * I)) & 0xffu);
}

// Four 8x8 b16 matrices from shared memory (row addresses from lanes 8m..8m+7 for matrix m): o[m] = row
// lane / 4, bytes 4 (lane % 4).. of matrix m.
__device__ __forceinline__ void ldmatrix_x4(const void* row, int (&o)[4]) {
    const unsigned a = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(o[0]), "=r"(o[1]), "=r"(o[2]), "=r"(o[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t bf16x2_to_half2(uint32_t w) {
    return pack_half2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

}  // namespace memtile::cuda::mma_util
