// Device helpers of the batched tensor-core products (matvec-mma.cu, matvec-mma-q6k.cu): mma.sync wrappers, the quad
// word transpose, exact integer-to-float conversions, ldmatrix, f16 packing, cp.async, the block's reduction and store
// and the Q6_K half's products. Those two files and the decode attention's tensor-core key steps
// (attention-gqa-mma.cuh) include this header.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"

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

// ldmatrix_x4 transposed: o[m] = elements (2 (lane % 4), lane / 4) and (2 (lane % 4) + 1, lane / 4) of matrix m (the
// B fragment of an mma whose k runs along the matrix rows).
__device__ __forceinline__ void ldmatrix_x4_trans(const void* row, int (&o)[4]) {
    const unsigned a = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
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

constexpr int k_warps = 8;  // warps per block of every batched product kernel (a block: 16 weight rows)

// The block's k_warps partial tiles summed in warp order (red[warp][lane][NT * 4]) and stored: rows row0..row0 + 15
// of y (column c of the batch at y + c * y_stride; accumulate: added to y). acc: this lane's mma accumulators.
template <int NT>
__device__ __forceinline__ void store_warp_tiles(const float (&acc)[NT][4], int warp, int lane, int64_t row0,
                                                 int64_t n_out, int nb, float* y, int64_t y_stride, int accumulate) {
    __shared__ float red[k_warps][32][NT * 4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][lane][nt * 4 + i] = acc[nt][i];
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * NT * 4; e += blockDim.x) {
        const int ln = e / (NT * 4), k = e % (NT * 4), nt = k / 4, i = k % 4;
        float v = 0;
#pragma unroll
        for (int wi = 0; wi < k_warps; wi++) v += red[wi][ln][k];
        const int gg = ln >> 2, tt = ln & 3;
        const int64_t row = row0 + gg + (i >= 2 ? 8 : 0);
        const int col = nt * 8 + 2 * tt + (i & 1);
        if (row < n_out && col < nb) {
            float* yp = y + int64_t(col) * y_stride + row;
            *yp = accumulate ? *yp + v : v;
        }
    }
}

template <int N>  // 4, 8 or 16 bytes, cached in L1 (.ca)
__device__ __forceinline__ void cp_async_small(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(unsigned(__cvta_generic_to_shared(dst))), "l"(src),
                 "n"(N)
                 : "memory");
}
// (cp_async16, cp_async_commit, cp_async_wait<N>: device-common.cuh.)

// The NT column tiles (8 sequences each) of a lane with group g = lane / 4 and t = lane % 4: seq[nt], the sequence
// of its B column g (clamped; results of columns >= nb are not stored); cs[nt], the sequences of its two C columns
// 2t and 2t + 1 (clamped for the scale loads); acc zeroed.
template <int NT>
__device__ __forceinline__ void init_column_tiles(int g, int t, int nb, int (&seq)[NT], int (&cs)[NT][2],
                                                  float (&acc)[NT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        seq[nt] = min(nt * 8 + g, nb - 1);
        cs[nt][0] = min(nt * 8 + 2 * t, nb - 1);
        cs[nt][1] = min(nt * 8 + 2 * t + 1, nb - 1);
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = 0;
    }
}

// Sub-block si (0..7) of a Q6_K half, for one row: its mma A operand (the signed 4v: products 4 times GGUF's) from the
// row's words t of the half's 6 pieces (three sub-blocks of a group of four take a word each, the fourth is spread over
// the three), and its signed int8 scale from the half's 8 scale bytes.
__device__ __forceinline__ int q6k_half_operand(const int (&c)[6], int si) {
    const int g = si / 4, k = si % 4;
    return k < 3 ? q6k_operand(c[3 * g + k]) : q6k_operand3(c[3 * g], c[3 * g + 1], c[3 * g + 2]);
}
__device__ __forceinline__ int q6k_half_scale(int2 s8, int si) {
    const int w = si < 4 ? s8.x : s8.y;
    return int(uint32_t(w) << (24 - 8 * (si & 3))) >> 24;  // the signed byte si & 3
}

// One Q6_K half p (128 elements: groups u = 4p + j, j < 4, each two m16n8k16 MMAs of one scale) of rows g (A) and
// g + 8 (B) of a 16-row tile, accumulated into acc (NT column tiles). cA/cB: word t of the half's 6 pieces
// (cuda-kernels.h), sA8/sB8 its 8 int8 scales, fA/fB the super-block's f16 d. seq: the B column (sequence) of this
// lane per tile, cs: its two C columns. The register-staged and the pipelined Q6_K kernels both call this, so their
// arithmetic per lane is the same code.
template <int NT>
__device__ __forceinline__ void q6k_half_mma(const int (&cA)[6], const int (&cB)[6], int2 sA8, int2 sB8, float fA,
                                             float fB, int p, int nb, int t, const int8_t* xq, const float* xd,
                                             const int (&seq)[NT], const int (&cs)[NT][2], float (&acc)[NT][4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int u = 4 * p + j;  // = 8 sb + 4 hh + j
        int a0[2], a1[2];
        float sA[2], sB[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int si = 2 * j + h;  // sub-block si of the half's 8
            // The operands are the signed 4v: the products are 4 times GGUF's, undone by the exact scale / 4.
            a0[h] = q6k_half_operand(cA, si);
            a1[h] = q6k_half_operand(cB, si);
            sA[h] = fA * 0.25f * float(q6k_half_scale(sA8, si));
            sB[h] = fB * 0.25f * float(q6k_half_scale(sB8, si));
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int8_t* xa = xq + (int64_t(u) * nb + seq[nt]) * 32 + 4 * t;
            const int b0 = __ldg(reinterpret_cast<const int*>(xa));
            const int b1 = __ldg(reinterpret_cast<const int*>(xa + 16));
            int c0[4], c1[4];
            mma_s8_k16(a0[0], a1[0], b0, c0);
            mma_s8_k16(a0[1], a1[1], b1, c1);
            const float d0 = xd[u * nb + cs[nt][0]], d1 = xd[u * nb + cs[nt][1]];
            acc[nt][0] += d0 * (sA[0] * float(c0[0]) + sA[1] * float(c1[0]));
            acc[nt][1] += d1 * (sA[0] * float(c0[1]) + sA[1] * float(c1[1]));
            acc[nt][2] += d0 * (sB[0] * float(c0[2]) + sB[1] * float(c1[2]));
            acc[nt][3] += d1 * (sB[0] * float(c0[3]) + sB[1] * float(c1[3]));
        }
    }
}

}  // namespace memtile::cuda::mma_util
