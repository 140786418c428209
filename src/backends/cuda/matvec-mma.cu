// Batched decode products on tensor cores: y[b] = W x[b] for 2..16 sequences. A block of 8 warps takes 16
// weight rows; its warps split the row's 32-element groups between them, so each weight byte is loaded once
// (by one lane) for all sequences. Integer formats multiply the weight quants by the int8-quantized
// activations with mma.sync m16n8k32 (m16n8k16 for Q6_K, whose scales cover 16 elements): the integer dot
// product of each group is exact, exactly what the batch-1 kernels get from __dp4a, and the group's scales
// are applied in f32 as there. F16/BF16 weights use m16n8k16 f16 products (f32 accumulate) with f16 copies of
// the activations. Sequences are the MMA's n dimension (8 per tile, two tiles for up to 16).
//
// Fragment layout (PTX ISA, mma.m16n8k32 .s8, g = lane / 4, t = lane % 4): A regs a0: row g, k 4t..4t+3;
// a1: row g+8, same k; a2/a3: the same rows, k 16+4t..; B regs b0: k 4t..4t+3 of column g, b1: k 16+4t..;
// C c0/c1: row g, columns 2t, 2t+1, c2/c3: row g+8. The order of k inside a group does not change a dot
// product, so a lane may hold any 8 elements of the group as long as A and B agree: here lane t holds
// elements 8t..8t+7 (one 8-byte load per row), Q4_0 elements 4t..4t+3 and 16+4t.. (its nibble order).
#include <cuda_fp16.h>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

constexpr int k_warps = 8;
constexpr int k_unroll = 4;  // units whose weight loads a warp has in flight at once

__device__ __forceinline__ void mma_s8_k32(const int (&a)[4], int b0, int b1, int (&c)[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
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

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t bf16x2_to_half2(uint32_t w) {
    return pack_half2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// Block: 16 rows from blockIdx.x * 16; warp w takes units w, w + 8, ... (a unit: one or two groups of 32).
template <dtype T, int NT>
__global__ void __launch_bounds__(32 * k_warps)
    matvec_mma_kernel(gpu_weight w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                      float* y, int64_t y_stride, int accumulate) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * 16;
    const int64_t rA = min(row0 + g, w.n_out - 1), rB = min(row0 + g + 8, w.n_out - 1);
    const int n_in = int(w.n_in), ng = n_in / 32;
    const uint8_t* qA = w.q + rA * w.q_row_bytes;
    const uint8_t* qB = w.q + rB * w.q_row_bytes;
    // Sequence of column g of tile nt (clamped; results of columns >= nb are not stored).
    int seq[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) seq[nt] = min(nt * 8 + g, nb - 1);
    // C columns of this lane: sequences nt * 8 + 2t and + 1 (clamped for the scale loads).
    int cs[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        cs[nt][0] = min(nt * 8 + 2 * t, nb - 1);
        cs[nt][1] = min(nt * 8 + 2 * t + 1, nb - 1);
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = 0;

    // Applies one group's integer dots: acc += sA/sB (row scale) * xd[seq][grp] * dot - mA/mB * xs[seq][grp].
    auto apply = [&](int nt, const int(&c)[4], float sA, float sB, float mA, float mB, int grp) {
        const float d0 = xd[cs[nt][0] * ng + grp], d1 = xd[cs[nt][1] * ng + grp];
        acc[nt][0] += sA * d0 * float(c[0]);
        acc[nt][1] += sA * d1 * float(c[1]);
        acc[nt][2] += sB * d0 * float(c[2]);
        acc[nt][3] += sB * d1 * float(c[3]);
        if (mA != 0.0f || mB != 0.0f) {
            const float s0 = xs[cs[nt][0] * ng + grp], s1 = xs[cs[nt][1] * ng + grp];
            acc[nt][0] -= mA * s0;
            acc[nt][1] -= mA * s1;
            acc[nt][2] -= mB * s0;
            acc[nt][3] -= mB * s1;
        }
    };

    // Each warp issues the loads of k_unroll units before any product, so that enough bytes are in flight
    // even for matrices of few row tiles (a 4096-row matrix is 256 blocks).
    if constexpr (T == dtype::q8_0) {
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        for (int u0 = warp; u0 < ng; u0 += k_warps * k_unroll) {
            int2 wa[k_unroll], wb[k_unroll];
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = min(u0 + i * k_warps, ng - 1);
                wa[i] = __ldcs(reinterpret_cast<const int2*>(qA + 32 * u + 8 * t));
                wb[i] = __ldcs(reinterpret_cast<const int2*>(qB + 32 * u + 8 * t));
            }
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = u0 + i * k_warps;
                if (u >= ng) break;
                const int a[4] = {wa[i].x, wb[i].x, wa[i].y, wb[i].y};
                const float sA = h2f(dA[u]), sB = h2f(dB[u]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int2 bx = __ldg(reinterpret_cast<const int2*>(xq + int64_t(seq[nt]) * n_in + 32 * u + 8 * t));
                    int c[4];
                    mma_s8_k32(a, bx.x, bx.y, c);
                    apply(nt, c, sA, sB, 0.0f, 0.0f, u);
                }
            }
        }
    } else if constexpr (T == dtype::q4_0) {
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        for (int u0 = warp; u0 < ng; u0 += k_warps * k_unroll) {
            int wa[k_unroll], wb[k_unroll];
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = min(u0 + i * k_warps, ng - 1);
                wa[i] = __ldcs(reinterpret_cast<const int*>(qA + 16 * u + 4 * t));
                wb[i] = __ldcs(reinterpret_cast<const int*>(qB + 16 * u + 4 * t));
            }
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = u0 + i * k_warps;
                if (u >= ng) break;
                const int a[4] = {wa[i] & 0x0f0f0f0f, wb[i] & 0x0f0f0f0f, (wa[i] >> 4) & 0x0f0f0f0f,
                                  (wb[i] >> 4) & 0x0f0f0f0f};
                const float sA = h2f(dA[u]), sB = h2f(dB[u]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int8_t* xa = xq + int64_t(seq[nt]) * n_in + 32 * u + 4 * t;
                    const int b0 = __ldg(reinterpret_cast<const int*>(xa));
                    const int b1 = __ldg(reinterpret_cast<const int*>(xa + 16));
                    int c[4];
                    mma_s8_k32(a, b0, b1, c);
                    apply(nt, c, sA, sB, 8.0f * sA, 8.0f * sB, u);
                }
            }
        }
    } else if constexpr (T == dtype::q4_k || T == dtype::q5_k) {
        constexpr bool five = T == dtype::q5_k;
        constexpr int bb = five ? 176 : 144, qs_off = five ? 48 : 16;
        const int n_units = n_in / 64;
        // Unit u: super-block u / 4, sub-blocks 2c and 2c + 1 (c = u % 4): 64 elements.
        for (int u0 = warp; u0 < n_units; u0 += k_warps * k_unroll) {
            int4 hA[k_unroll], hB[k_unroll];
            int2 wa[k_unroll], wb[k_unroll], ha[k_unroll], hb[k_unroll];
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = min(u0 + i * k_warps, n_units - 1), sb = u >> 2, c = u & 3;
                const uint8_t* bA = qA + int64_t(sb) * bb;
                const uint8_t* bB = qB + int64_t(sb) * bb;
                hA[i] = __ldg(reinterpret_cast<const int4*>(bA));
                hB[i] = __ldg(reinterpret_cast<const int4*>(bB));
                wa[i] = __ldcs(reinterpret_cast<const int2*>(bA + qs_off + 32 * c + 8 * t));
                wb[i] = __ldcs(reinterpret_cast<const int2*>(bB + qs_off + 32 * c + 8 * t));
                if (five) {
                    ha[i] = __ldg(reinterpret_cast<const int2*>(bA + 16 + 8 * t));
                    hb[i] = __ldg(reinterpret_cast<const int2*>(bB + 16 + 8 * t));
                }
            }
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = u0 + i * k_warps;
                if (u >= n_units) break;
                const int sb = u >> 2, c = u & 3;
                int lo[4] = {wa[i].x & 0x0f0f0f0f, wb[i].x & 0x0f0f0f0f, wa[i].y & 0x0f0f0f0f, wb[i].y & 0x0f0f0f0f};
                int hi[4] = {(wa[i].x >> 4) & 0x0f0f0f0f, (wb[i].x >> 4) & 0x0f0f0f0f, (wa[i].y >> 4) & 0x0f0f0f0f,
                             (wb[i].y >> 4) & 0x0f0f0f0f};
                if (five) {
                    const int hw[4] = {ha[i].x, hb[i].x, ha[i].y, hb[i].y};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        lo[k] |= ((hw[k] >> (2 * c)) & 0x01010101) << 4;
                        hi[k] |= ((hw[k] >> (2 * c + 1)) & 0x01010101) << 4;
                    }
                }
                float scA0, mnA0, scA1, mnA1, scB0, mnB0, scB1, mnB1;
                scale_min(hA[i], 2 * c, scA0, mnA0);
                scale_min(hA[i], 2 * c + 1, scA1, mnA1);
                scale_min(hB[i], 2 * c, scB0, mnB0);
                scale_min(hB[i], 2 * c + 1, scB1, mnB1);
                const float dA = h2f(uint16_t(hA[i].x & 0xffff)), mA = h2f(uint16_t(uint32_t(hA[i].x) >> 16));
                const float dB = h2f(uint16_t(hB[i].x & 0xffff)), mB = h2f(uint16_t(uint32_t(hB[i].x) >> 16));
                const int grp = sb * 8 + 2 * c;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int8_t* xa = xq + int64_t(seq[nt]) * n_in + sb * 256 + 64 * c + 8 * t;
                    const int2 b_lo = __ldg(reinterpret_cast<const int2*>(xa));
                    const int2 b_hi = __ldg(reinterpret_cast<const int2*>(xa + 32));
                    int cl[4], ch[4];
                    mma_s8_k32(lo, b_lo.x, b_lo.y, cl);
                    mma_s8_k32(hi, b_hi.x, b_hi.y, ch);
                    apply(nt, cl, dA * scA0, dB * scB0, mA * mnA0, mB * mnB0, grp);
                    apply(nt, ch, dA * scA1, dB * scB1, mA * mnA1, mB * mnB1, grp + 1);
                }
            }
        }
    } else if constexpr (T == dtype::q6_k) {
        const uint16_t* dA = w.d + rA * (n_in / 256);
        const uint16_t* dB = w.d + rB * (n_in / 256);
        // Unit u: the 32 elements 128 hh + 32 j + l of super-block u / 8 (hh = (u / 4) % 2, j = u % 4), as two
        // halves of 16 (one scale each); lane t holds l = 16 h + 4t..4t+3 of half h.
        for (int u0 = warp; u0 < ng; u0 += k_warps * k_unroll) {
            int lA[k_unroll][2], lB[k_unroll][2], qhA[k_unroll][2], qhB[k_unroll][2];
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = min(u0 + i * k_warps, ng - 1), sb = u >> 3, hh = (u >> 2) & 1, j = u & 3;
                const uint8_t* bA = qA + int64_t(sb) * 208;
                const uint8_t* bB = qB + int64_t(sb) * 208;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int l = 16 * h + 4 * t;
                    lA[i][h] = __ldcs(reinterpret_cast<const int*>(bA + 64 * hh + 32 * (j & 1) + l));
                    lB[i][h] = __ldcs(reinterpret_cast<const int*>(bB + 64 * hh + 32 * (j & 1) + l));
                    qhA[i][h] = __ldcs(reinterpret_cast<const int*>(bA + 128 + 32 * hh + l));
                    qhB[i][h] = __ldcs(reinterpret_cast<const int*>(bB + 128 + 32 * hh + l));
                }
            }
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = u0 + i * k_warps;
                if (u >= ng) break;
                const int sb = u >> 3, hh = (u >> 2) & 1, j = u & 3;
                const uint8_t* bA = qA + int64_t(sb) * 208;
                const uint8_t* bB = qB + int64_t(sb) * 208;
                const float fA = h2f(dA[sb]), fB = h2f(dB[sb]);
                const int sh = (j >> 1) ? 4 : 0;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t qa =
                        uint32_t(((lA[i][h] >> sh) & 0x0f0f0f0f) | (((qhA[i][h] >> (2 * j)) & 0x03030303) << 4));
                    const uint32_t qb =
                        uint32_t(((lB[i][h] >> sh) & 0x0f0f0f0f) | (((qhB[i][h] >> (2 * j)) & 0x03030303) << 4));
                    const int a0 = int(__vsub4(qa, 0x20202020u)), a1 = int(__vsub4(qb, 0x20202020u));
                    const int si = 192 + 8 * hh + 2 * j + h;
                    const float sA = fA * float(int8_t(bA[si])), sB = fB * float(int8_t(bB[si]));
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int b0 = __ldg(reinterpret_cast<const int*>(xq + int64_t(seq[nt]) * n_in + sb * 256 +
                                                                          128 * hh + 32 * j + 16 * h + 4 * t));
                        int c[4];
                        mma_s8_k16(a0, a1, b0, c);
                        apply(nt, c, sA, sB, 0.0f, 0.0f, u);
                    }
                }
            }
        }
    } else {
        // F16 / BF16: unit = 16 elements; lane t holds elements 4t..4t+3 (a0/a1: 4t, 4t+1; a2/a3: 4t+2, 4t+3).
        const int n_units = n_in / 16;
        for (int u0 = warp; u0 < n_units; u0 += k_warps * k_unroll) {
            uint2 wa[k_unroll], wb[k_unroll];
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = min(u0 + i * k_warps, n_units - 1);
                wa[i] = __ldcs(reinterpret_cast<const uint2*>(qA + 32 * u + 8 * t));
                wb[i] = __ldcs(reinterpret_cast<const uint2*>(qB + 32 * u + 8 * t));
            }
#pragma unroll
            for (int i = 0; i < k_unroll; i++) {
                const int u = u0 + i * k_warps;
                if (u >= n_units) break;
                uint32_t a[4];
                if constexpr (T == dtype::f16) {
                    a[0] = wa[i].x;
                    a[1] = wb[i].x;
                    a[2] = wa[i].y;
                    a[3] = wb[i].y;
                } else {
                    a[0] = bf16x2_to_half2(wa[i].x);
                    a[1] = bf16x2_to_half2(wb[i].x);
                    a[2] = bf16x2_to_half2(wa[i].y);
                    a[3] = bf16x2_to_half2(wb[i].y);
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const float4 xv =
                        __ldg(reinterpret_cast<const float4*>(x + int64_t(seq[nt]) * n_in + 16 * u + 4 * t));
                    mma_f16_k16(a, pack_half2(xv.x, xv.y), pack_half2(xv.z, xv.w), acc[nt]);
                }
            }
        }
    }

    // Sum the warps' partial tiles: red[warp][lane][NT * 4].
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
        if (row < w.n_out && col < nb) {
            float* yp = y + int64_t(col) * y_stride + row;
            *yp = accumulate ? *yp + v : v;
        }
    }
}

template <dtype T>
void launch_typed(const gpu_weight& w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                  float* y, int64_t y_stride, bool accumulate, cudaStream_t s) {
    const unsigned blocks = unsigned((w.n_out + 15) / 16);
    if (nb <= 8)
        matvec_mma_kernel<T, 1><<<blocks, 32 * k_warps, 0, s>>>(w, nb, x, xq, xd, xs, y, y_stride, accumulate ? 1 : 0);
    else
        matvec_mma_kernel<T, 2><<<blocks, 32 * k_warps, 0, s>>>(w, nb, x, xq, xd, xs, y, y_stride, accumulate ? 1 : 0);
}

}  // namespace

bool matvec_mma_supported(const gpu_weight& w) {
    switch (w.type) {
        case dtype::q8_0:
        case dtype::q4_0:
        case dtype::q6_k: return w.n_in % 32 == 0;
        case dtype::q4_k:
        case dtype::q5_k: return w.n_in % 256 == 0;
        case dtype::f16:
        case dtype::bf16: return w.n_in % 16 == 0;
        default: return false;
    }
}

void launch_matvec_mma(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                       const float* xs, float* y, int64_t y_stride, bool accumulate, cudaStream_t s) {
    switch (w.type) {
        case dtype::q8_0: launch_typed<dtype::q8_0>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q4_0: launch_typed<dtype::q4_0>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q4_k: launch_typed<dtype::q4_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q5_k: launch_typed<dtype::q5_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q6_k: launch_typed<dtype::q6_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::f16: launch_typed<dtype::f16>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        default: launch_typed<dtype::bf16>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
    }
}

}  // namespace memtile::cuda
