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
//
// The int8 activations are group-major (prefill-kernels.h), so the 8 sequences' bytes of one group that a
// B-fragment load reads are adjacent. Weights: loading the fragment layout directly touches 8 rows (cache
// lines) for 4-8 bytes per lane, which made the L1/LSU path the limit (ncu, docs/cuda-prefill-batch-log.md); Q8_0,
// Q4_0, F16 and BF16 therefore load 16 contiguous bytes per lane along a row and form the fragments by quad shuffles
// (Q8_0), ldmatrix from shared memory (Q4_0) or not at all (F16/BF16: no scales, any shared k order).
// Q4_K, Q8_0 and Q4_0 rows of whole units run the pipelined kernels (matvec_mma_pipe_kernel: cp.async into a
// per-warp ring in shared memory, ldmatrix); the register-staged kernel stays for other widths and as A/B option.
#include <cuda_fp16.h>

#include <cstdlib>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/matvec-mma-util.cuh"
#include "backends/cuda/mma-pair.h"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

using detail::griddep_launch;
using detail::griddep_wait;
using namespace mma_util;

int g_unroll = 0;               // units whose weight loads a warp has in flight at once (KU: 4 or 8; 0: per format)
bool g_fragment_loads = false;  // Q8_0/Q4_0/F16/BF16: load in the fragment layout (before), for A/B only
bool g_q4_0_shuffles = false;   // row-wise Q4_0: fragments by quad shuffles instead of ldmatrix (A/B only)
bool g_previous = false;        // Q4_K/Q8_0/Q4_0: the register-staged kernels instead of the pipelined ones (A/B)
int g_pipe_variant = 0;         // pipelined kernels: 1 the other stage/occupancy choice, 2 the ALT arithmetic (A/B)
int g_q4k_stages = 0;           // Q4_K pipelined kernel at up to 8 sequences: deeper rings (launch_pipe_nt; A/B)
int g_q4_0_long = 8;            // Q4_0 rows of >= 8,192 elements at up to 8 sequences: 8 stages (A/B: 2 or 4)
int g_q4_0_short = 2;           // Q4_0 rows of < 8,192 elements at up to 8 sequences: 2 stages (A/B: 3)
int g_q6k_halves = 0;           // Q6_K at up to 8 sequences: 4 halves in flight, 1 all rows, 2 rows < 8,192 (A/B)
// Q4_K at up to 8 sequences, activations staged in the ring (XS): bit 0 its own launches, bit 1 the pair's Q4_K blocks.
// MEMTILE_CUDA_Q4K_XS=MODE replaces the default (A/B of whole runs).
int g_q4k_xs = [] {
    const char* e = std::getenv("MEMTILE_CUDA_Q4K_XS");
    return e && *e ? std::atoi(e) & 3 : 3;
}();

// Block: 16 rows from blockIdx.x * 16; warp w takes units w, w + 8, ... (a unit: one or two groups of 32;
// Q4_K/Q5_K: a super-block), KU units' weight loads in flight per warp. RW (Q8_0, Q4_0, F16, BF16): a unit is
// 64 bytes of each row, each lane loads 16 contiguous bytes of its two rows (a quad: 64 bytes of one row, so a
// warp load touches 8 lines for 512 bytes instead of 128) and the quad exchanges words by shuffles to form
// the fragments; without RW the lanes load the fragment layout directly (rows not a multiple of 64 bytes).
// LDSM (row-wise Q4_0): fragments by ldmatrix from shared memory instead of quad shuffles, and integer dots
// converted by an exact add instead of I2F (measured together: Q4_0 B=8 5.23x vs 4.85x,
// docs/cuda-prefill-batch-log.md). The kernel's work for row tile blk (its own kernel below, or a part of
// matvec_mma_pair_kernel).
template <dtype T, int NT, int KU, bool RW, bool LDSM>
__device__ __forceinline__ void mma_rows(unsigned blk, gpu_weight w, int nb, const float* x, const int8_t* xq,
                                         const float* xd, const float* xs, float* y, int64_t y_stride, int accumulate) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blk) * 16;
    const int64_t rA = min(row0 + g, w.n_out - 1), rB = min(row0 + g + 8, w.n_out - 1);
    const int n_in = int(w.n_in), ng = n_in / 32;
    const uint8_t* qA = w.q + rA * w.q_row_bytes;
    const uint8_t* qB = w.q + rB * w.q_row_bytes;
    int seq[NT], cs[NT][2];
    float acc[NT][4];
    init_column_tiles<NT>(g, t, nb, seq, cs, acc);
    // Everything below reads activations, which the previous kernels write (launched with PDL).
    griddep_wait();
    griddep_launch();

    // Applies one group's integer dots: acc += sA/sB (row scale) * xd[seq][grp] * dot - mA/mB * xs[seq][grp].
    auto apply = [&](int nt, const int(&c)[4], float sA, float sB, float mA, float mB, int grp) {
        const float d0 = xd[grp * nb + cs[nt][0]], d1 = xd[grp * nb + cs[nt][1]];
        acc[nt][0] += sA * d0 * to_float<LDSM>(c[0]);
        acc[nt][1] += sA * d1 * to_float<LDSM>(c[1]);
        acc[nt][2] += sB * d0 * to_float<LDSM>(c[2]);
        acc[nt][3] += sB * d1 * to_float<LDSM>(c[3]);
        if (mA != 0.0f || mB != 0.0f) {
            const float s0 = xs[grp * nb + cs[nt][0]], s1 = xs[grp * nb + cs[nt][1]];
            acc[nt][0] -= mA * s0;
            acc[nt][1] -= mA * s1;
            acc[nt][2] -= mB * s0;
            acc[nt][3] -= mB * s1;
        }
    };

    // Each warp issues the loads of KU units before any product, so that enough bytes are in flight
    // even for matrices of few row tiles (a 4096-row matrix is 256 blocks).
    if constexpr (RW && T == dtype::q8_0) {
        // Unit u: groups 2u (lanes 0, 1 load its words 0-3, 4-7) and 2u + 1 (lanes 2, 3). Lanes t and t ^ 2 swap
        // half of their words, so lane t holds bytes 8p..8p+7 of both groups (p below), as the B loads.
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        const int n_u = ng / 2, p = ((t & 1) << 1) | (t >> 1);
        const bool lo = t < 2;
        for (int u0 = warp; u0 < n_u; u0 += k_warps * KU) {
            int4 wa[KU], wb[KU];
            uint32_t da[KU], db[KU];  // the two groups' f16 row scales
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, n_u - 1);
                wa[i] = __ldcs(reinterpret_cast<const int4*>(qA + 64 * u + 16 * t));
                wb[i] = __ldcs(reinterpret_cast<const int4*>(qB + 64 * u + 16 * t));
                da[i] = __ldg(reinterpret_cast<const unsigned*>(dA + 2 * u));
                db[i] = __ldg(reinterpret_cast<const unsigned*>(dB + 2 * u));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = u0 + i * k_warps;
                if (u >= n_u) break;
                int2 ga[2], gb[2];  // [group of the unit]: words 2p, 2p + 1
                {
                    const int rx = __shfl_xor_sync(0xffffffffu, lo ? wa[i].z : wa[i].x, 2);
                    const int ry = __shfl_xor_sync(0xffffffffu, lo ? wa[i].w : wa[i].y, 2);
                    const int2 keep = lo ? make_int2(wa[i].x, wa[i].y) : make_int2(wa[i].z, wa[i].w);
                    ga[0] = lo ? keep : make_int2(rx, ry);
                    ga[1] = lo ? make_int2(rx, ry) : keep;
                }
                {
                    const int rx = __shfl_xor_sync(0xffffffffu, lo ? wb[i].z : wb[i].x, 2);
                    const int ry = __shfl_xor_sync(0xffffffffu, lo ? wb[i].w : wb[i].y, 2);
                    const int2 keep = lo ? make_int2(wb[i].x, wb[i].y) : make_int2(wb[i].z, wb[i].w);
                    gb[0] = lo ? keep : make_int2(rx, ry);
                    gb[1] = lo ? make_int2(rx, ry) : keep;
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int grp = 2 * u + j;
                    const int a[4] = {ga[j].x, gb[j].x, ga[j].y, gb[j].y};
                    const float sA = h2f(uint16_t(da[i] >> (16 * j))), sB = h2f(uint16_t(db[i] >> (16 * j)));
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int2 bx =
                            __ldg(reinterpret_cast<const int2*>(xq + (int64_t(grp) * nb + seq[nt]) * 32 + 8 * p));
                        int c[4];
                        mma_s8_k32(a, bx.x, bx.y, c);
                        apply(nt, c, sA, sB, 0.0f, 0.0f, grp);
                    }
                }
            }
        }
    } else if constexpr (RW && T == dtype::q4_0) {
        // Unit u: groups 4u + t (lane t loads the group's 16 bytes); a quad transpose gives lane t word t of
        // each (bytes 4t..4t+3: elements 4t.. low, 16 + 4t.. high nibbles). The nibbles are offset to signed
        // (q - 8, exact in s8), so the min term and its xs loads drop out. Row scales: 4 groups in one load.
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        const int n_u = ng / 4;
        __shared__ int4 tr[LDSM ? k_warps : 1][KU][2][32];  // LDSM: [warp][unit][rows g / g + 8][row * 4 + slot]
        for (int u0 = warp; u0 < n_u; u0 += k_warps * KU) {
            int4 wa[KU], wb[KU];
            uint2 da[KU], db[KU];
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, n_u - 1);
                wa[i] = __ldcs(reinterpret_cast<const int4*>(qA + 64 * u + 16 * t));
                wb[i] = __ldcs(reinterpret_cast<const int4*>(qB + 64 * u + 16 * t));
                da[i] = __ldg(reinterpret_cast<const uint2*>(dA + 4 * u));
                db[i] = __ldg(reinterpret_cast<const uint2*>(dB + 4 * u));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = u0 + i * k_warps;
                if (u >= n_u) break;
                int oa[4], ob[4];
                if constexpr (LDSM) {
                    // Row g's 4 groups at slots t ^ ((g / 2) % 4) of its 64 bytes (8 ldmatrix rows 64 bytes
                    // apart hit distinct banks), then matrix m = group m of the 8 rows.
                    __syncwarp();  // the previous iteration's ldmatrix of this buffer is done
                    tr[warp][i][0][g * 4 + (t ^ ((g >> 1) & 3))] = wa[i];
                    tr[warp][i][1][g * 4 + (t ^ ((g >> 1) & 3))] = wb[i];
                    __syncwarp();
                    const int m = lane >> 3, r = lane & 7, slot = r * 4 + (m ^ ((r >> 1) & 3));
                    ldmatrix_x4(&tr[warp][i][0][slot], oa);
                    ldmatrix_x4(&tr[warp][i][1][slot], ob);
                } else {
                    quad_transpose(wa[i], oa, t);
                    quad_transpose(wb[i], ob, t);
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int grp = 4 * u + j;
                    const int a[4] = {int(__vsub4(uint32_t(oa[j]) & 0x0f0f0f0fu, 0x08080808u)),
                                      int(__vsub4(uint32_t(ob[j]) & 0x0f0f0f0fu, 0x08080808u)),
                                      int(__vsub4((uint32_t(oa[j]) >> 4) & 0x0f0f0f0fu, 0x08080808u)),
                                      int(__vsub4((uint32_t(ob[j]) >> 4) & 0x0f0f0f0fu, 0x08080808u))};
                    const uint32_t wda = j < 2 ? da[i].x : da[i].y, wdb = j < 2 ? db[i].x : db[i].y;
                    const float sA = h2f(uint16_t(wda >> (16 * (j & 1)))), sB = h2f(uint16_t(wdb >> (16 * (j & 1))));
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int8_t* xa = xq + (int64_t(grp) * nb + seq[nt]) * 32 + 4 * t;
                        const int b0 = __ldg(reinterpret_cast<const int*>(xa));
                        const int b1 = __ldg(reinterpret_cast<const int*>(xa + 16));
                        int c[4];
                        mma_s8_k32(a, b0, b1, c);
                        apply(nt, c, sA, sB, 0.0f, 0.0f, grp);
                    }
                }
            }
        }
    } else if constexpr (RW && (T == dtype::f16 || T == dtype::bf16)) {
        // F16 / BF16, unit u: 32 elements; lane t loads elements 32u + 8t..8t+7 of its rows, which are its
        // k slots of two MMAs (h: elements 8t + 4h..; a0/a1: the first 2, a2/a3: the next 2). No scales, so
        // any k order that A and B share gives the same product; no exchange is needed.
        const int n_u = n_in / 32;
        for (int u0 = warp; u0 < n_u; u0 += k_warps * KU) {
            uint4 wa[KU], wb[KU];
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, n_u - 1);
                wa[i] = __ldcs(reinterpret_cast<const uint4*>(qA + 64 * u + 16 * t));
                wb[i] = __ldcs(reinterpret_cast<const uint4*>(qB + 64 * u + 16 * t));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = u0 + i * k_warps;
                if (u >= n_u) break;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t xa0 = h ? wa[i].z : wa[i].x, xa1 = h ? wa[i].w : wa[i].y;
                    const uint32_t xb0 = h ? wb[i].z : wb[i].x, xb1 = h ? wb[i].w : wb[i].y;
                    uint32_t a[4];
                    if constexpr (T == dtype::f16) {
                        a[0] = xa0;
                        a[1] = xb0;
                        a[2] = xa1;
                        a[3] = xb1;
                    } else {
                        a[0] = bf16x2_to_half2(xa0);
                        a[1] = bf16x2_to_half2(xb0);
                        a[2] = bf16x2_to_half2(xa1);
                        a[3] = bf16x2_to_half2(xb1);
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const float4 xv = __ldg(
                            reinterpret_cast<const float4*>(x + int64_t(seq[nt]) * n_in + 32 * u + 8 * t + 4 * h));
                        mma_f16_k16(a, pack_half2(xv.x, xv.y), pack_half2(xv.z, xv.w), acc[nt]);
                    }
                }
            }
        }
    } else if constexpr (T == dtype::q8_0) {
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        for (int u0 = warp; u0 < ng; u0 += k_warps * KU) {
            int2 wa[KU], wb[KU];
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, ng - 1);
                wa[i] = __ldcs(reinterpret_cast<const int2*>(qA + 32 * u + 8 * t));
                wb[i] = __ldcs(reinterpret_cast<const int2*>(qB + 32 * u + 8 * t));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = u0 + i * k_warps;
                if (u >= ng) break;
                const int a[4] = {wa[i].x, wb[i].x, wa[i].y, wb[i].y};
                const float sA = h2f(dA[u]), sB = h2f(dB[u]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int2 bx = __ldg(reinterpret_cast<const int2*>(xq + (int64_t(u) * nb + seq[nt]) * 32 + 8 * t));
                    int c[4];
                    mma_s8_k32(a, bx.x, bx.y, c);
                    apply(nt, c, sA, sB, 0.0f, 0.0f, u);
                }
            }
        }
    } else if constexpr (T == dtype::q4_0) {
        const uint16_t* dA = w.d + rA * ng;
        const uint16_t* dB = w.d + rB * ng;
        for (int u0 = warp; u0 < ng; u0 += k_warps * KU) {
            int wa[KU], wb[KU];
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, ng - 1);
                wa[i] = __ldcs(reinterpret_cast<const int*>(qA + 16 * u + 4 * t));
                wb[i] = __ldcs(reinterpret_cast<const int*>(qB + 16 * u + 4 * t));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = u0 + i * k_warps;
                if (u >= ng) break;
                const int a[4] = {wa[i] & 0x0f0f0f0f, wb[i] & 0x0f0f0f0f, (wa[i] >> 4) & 0x0f0f0f0f,
                                  (wb[i] >> 4) & 0x0f0f0f0f};
                const float sA = h2f(dA[u]), sB = h2f(dB[u]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int8_t* xa = xq + (int64_t(u) * nb + seq[nt]) * 32 + 4 * t;
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
        constexpr int bb = five ? 176 : 128, qs_off = five ? 48 : 0;
        constexpr int SB = KU / 4;  // super-blocks in flight per warp (4 units of 64 elements each)
        const int n_sb = n_in / 256;
        // Q4_K (device layout, device-common.cuh): hA/hB hold the 4 scale/min words, mA/mB d | dmin.
        const uint32_t* sdA = five ? nullptr : q4k_side_of(w.d, rA, n_sb);
        const uint32_t* sdB = five ? nullptr : q4k_side_of(w.d, rB, n_sb);
        // A warp takes whole super-blocks: their 16-byte header is loaded once per row and its 8 scales/mins
        // are unpacked with byte positions known at compile time (unit c of 4 unrolled). Lane t holds bytes
        // 32c + 8t..8t+7 of unit c: elements 8t.. of sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
        for (int s0 = warp; s0 < n_sb; s0 += k_warps * SB) {
            int4 hA[SB], hB[SB];
            uint32_t mA[SB], mB[SB];
            int2 wa[SB][4], wb[SB][4], ha[SB], hb[SB];
#pragma unroll
            for (int i = 0; i < SB; i++) {
                const int sb = min(s0 + i * k_warps, n_sb - 1);
                const uint8_t* bA = qA + int64_t(sb) * bb;
                const uint8_t* bB = qB + int64_t(sb) * bb;
                if (five) {
                    hA[i] = __ldcs(reinterpret_cast<const int4*>(bA));
                    hB[i] = __ldcs(reinterpret_cast<const int4*>(bB));
                } else {
                    hA[i] = __ldg(reinterpret_cast<const int4*>(sdA + q4k_sm_word(sb)));
                    hB[i] = __ldg(reinterpret_cast<const int4*>(sdB + q4k_sm_word(sb)));
                    mA[i] = __ldg(sdA + q4k_dm_word(sb));
                    mB[i] = __ldg(sdB + q4k_dm_word(sb));
                }
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    wa[i][c] = __ldcs(reinterpret_cast<const int2*>(bA + qs_off + 32 * c + 8 * t));
                    wb[i][c] = __ldcs(reinterpret_cast<const int2*>(bB + qs_off + 32 * c + 8 * t));
                }
                if (five) {
                    ha[i] = __ldcs(reinterpret_cast<const int2*>(bA + 16 + 8 * t));
                    hb[i] = __ldcs(reinterpret_cast<const int2*>(bB + 16 + 8 * t));
                }
            }
#pragma unroll
            for (int i = 0; i < SB; i++) {
                const int sb = s0 + i * k_warps;
                if (sb >= n_sb) break;
                const uint32_t dmA = five ? uint32_t(hA[i].x) : mA[i], dmB = five ? uint32_t(hB[i].x) : mB[i];
                const float2 ddA = __half22float2(*reinterpret_cast<const __half2*>(&dmA));  // d, dmin
                const float2 ddB = __half22float2(*reinterpret_cast<const __half2*>(&dmB));
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int lo[4] = {wa[i][c].x & 0x0f0f0f0f, wb[i][c].x & 0x0f0f0f0f, wa[i][c].y & 0x0f0f0f0f,
                                 wb[i][c].y & 0x0f0f0f0f};
                    int hi[4] = {(wa[i][c].x >> 4) & 0x0f0f0f0f, (wb[i][c].x >> 4) & 0x0f0f0f0f,
                                 (wa[i][c].y >> 4) & 0x0f0f0f0f, (wb[i][c].y >> 4) & 0x0f0f0f0f};
                    if (five) {
                        const int hw[4] = {ha[i].x, hb[i].x, ha[i].y, hb[i].y};
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            lo[k] |= ((hw[k] >> (2 * c)) & 0x01010101) << 4;
                            hi[k] |= ((hw[k] >> (2 * c + 1)) & 0x01010101) << 4;
                        }
                    }
                    // Scales/mins of sub-blocks 2c and 2c + 1, two at once (one per byte), as matvec's task_qk.
                    const int sh = 8 * ((2 * c) & 3);  // a constant once the loop over c is unrolled
                    auto unpack = [&](const int4& h, float& sc0, float& sc1, float& mn0, float& mn1) {
                        if (!five) {  // Q4_K: word c holds the four bytes
                            const uint32_t v = uint32_t(word(h, c));
                            sc0 = float(v & 0xffu);
                            sc1 = float((v >> 8) & 0xffu);
                            mn0 = float((v >> 16) & 0xffu);
                            mn1 = float(v >> 24);
                            return;
                        }
                        const uint32_t y = uint32_t(h.y) >> sh, z = uint32_t(h.z) >> sh, v = uint32_t(h.w) >> sh;
                        const uint32_t sc = c >= 2 ? (v & 0x0f0fu) | ((y >> 2) & 0x3030u) : y & 0x3f3fu;
                        const uint32_t mn = c >= 2 ? ((v >> 4) & 0x0f0fu) | ((z >> 2) & 0x3030u) : z & 0x3f3fu;
                        sc0 = float(sc & 0xffu);
                        sc1 = float((sc >> 8) & 0xffu);
                        mn0 = float(mn & 0xffu);
                        mn1 = float((mn >> 8) & 0xffu);
                    };
                    float scA0, scA1, mnA0, mnA1, scB0, scB1, mnB0, mnB1;
                    unpack(hA[i], scA0, scA1, mnA0, mnA1);
                    unpack(hB[i], scB0, scB1, mnB0, mnB1);
                    const float sA0 = ddA.x * scA0, sA1 = ddA.x * scA1, sB0 = ddB.x * scB0, sB1 = ddB.x * scB1;
                    const float mA0 = ddA.y * mnA0, mA1 = ddA.y * mnA1, mB0 = ddB.y * mnB0, mB1 = ddB.y * mnB1;
                    const int grp = sb * 8 + 2 * c;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int8_t* xa = xq + (int64_t(grp) * nb + seq[nt]) * 32 + 8 * t;
                        const int2 b_lo = __ldg(reinterpret_cast<const int2*>(xa));
                        const int2 b_hi = __ldg(reinterpret_cast<const int2*>(xa + 32 * nb));
                        int cl[4], ch[4];
                        mma_s8_k32(lo, b_lo.x, b_lo.y, cl);
                        mma_s8_k32(hi, b_hi.x, b_hi.y, ch);
                        // Groups grp, grp + 1 of both columns (.x, .y).
                        const float* d_lo = xd + grp * nb;
                        const float* m_lo = xs + grp * nb;
                        const float2 d0 = {d_lo[cs[nt][0]], d_lo[nb + cs[nt][0]]};
                        const float2 d1 = {d_lo[cs[nt][1]], d_lo[nb + cs[nt][1]]};
                        const float2 m0 = {m_lo[cs[nt][0]], m_lo[nb + cs[nt][0]]};
                        const float2 m1 = {m_lo[cs[nt][1]], m_lo[nb + cs[nt][1]]};
                        acc[nt][0] += sA0 * d0.x * float(cl[0]) + sA1 * d0.y * float(ch[0]) - (mA0 * m0.x + mA1 * m0.y);
                        acc[nt][1] += sA0 * d1.x * float(cl[1]) + sA1 * d1.y * float(ch[1]) - (mA0 * m1.x + mA1 * m1.y);
                        acc[nt][2] += sB0 * d0.x * float(cl[2]) + sB1 * d0.y * float(ch[2]) - (mB0 * m0.x + mB1 * m0.y);
                        acc[nt][3] += sB0 * d1.x * float(cl[3]) + sB1 * d1.y * float(ch[3]) - (mB0 * m1.x + mB1 * m1.y);
                    }
                }
            }
        }
    } else if constexpr (T == dtype::q6_k) {
        const uint16_t* dA = w.d + rA * (n_in / 256);
        const uint16_t* dB = w.d + rB * (n_in / 256);
        // A warp takes whole halves p = (super-block p / 2, hh = p % 2): 128 elements 128 hh + 32 j + l (j < 4,
        // l < 32), group u = 8 sb + 4 hh + j, each as two MMAs of 16 (one scale each); lane t holds l = 16 h +
        // 4t..4t+3 of half h, i.e. word t of the operands of sub-block s = 2j + h, which word t of the half's 6
        // pieces holds (device layout, cuda-kernels.h): a half's quants are 6 4-byte loads per row (the quad: 16
        // contiguous bytes) and its 8 scales one.
        constexpr int P = KU / 4;  // halves in flight per warp
        const int n_halves = n_in / 128;
        for (int p0 = warp; p0 < n_halves; p0 += k_warps * P) {
            int cA[P][6], cB[P][6];  // word t of pieces 0..5
            int2 sA8[P], sB8[P];
            float fA[P], fB[P];
#pragma unroll
            for (int i = 0; i < P; i++) {
                const int p = min(p0 + i * k_warps, n_halves - 1), sb = p >> 1;
#pragma unroll
                for (int n = 0; n < 6; n++) {
                    const int64_t o = q6k_half_byte(p, 16 * n + 4 * t, n_halves);
                    cA[i][n] = __ldcs(reinterpret_cast<const int*>(qA + o));
                    cB[i][n] = __ldcs(reinterpret_cast<const int*>(qB + o));
                }
                sA8[i] = __ldcs(reinterpret_cast<const int2*>(qA + q6k_scale_byte(p, n_halves)));
                sB8[i] = __ldcs(reinterpret_cast<const int2*>(qB + q6k_scale_byte(p, n_halves)));
                fA[i] = h2f(dA[sb]);
                fB[i] = h2f(dB[sb]);
            }
#pragma unroll
            for (int i = 0; i < P; i++) {
                const int p = p0 + i * k_warps;
                if (p >= n_halves) break;
                q6k_half_mma<NT>(cA[i], cB[i], sA8[i], sB8[i], fA[i], fB[i], p, nb, t, xq, xd, seq, cs, acc);
            }
        }
    } else {
        // F16 / BF16: unit = 16 elements; lane t holds elements 4t..4t+3 (a0/a1: 4t, 4t+1; a2/a3: 4t+2, 4t+3).
        const int n_units = n_in / 16;
        for (int u0 = warp; u0 < n_units; u0 += k_warps * KU) {
            uint2 wa[KU], wb[KU];
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const int u = min(u0 + i * k_warps, n_units - 1);
                wa[i] = __ldcs(reinterpret_cast<const uint2*>(qA + 32 * u + 8 * t));
                wb[i] = __ldcs(reinterpret_cast<const uint2*>(qB + 32 * u + 8 * t));
            }
#pragma unroll
            for (int i = 0; i < KU; i++) {
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

    store_warp_tiles<NT>(acc, warp, lane, row0, w.n_out, nb, y, y_stride, accumulate);
}
template <dtype T, int NT, int KU, bool RW, bool LDSM>
__global__ void __launch_bounds__(32 * k_warps)
    matvec_mma_kernel(gpu_weight w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                      float* y, int64_t y_stride, int accumulate) {
    mma_rows<T, NT, KU, RW, LDSM>(blockIdx.x, w, nb, x, xq, xd, xs, y, y_stride, accumulate);
}

// Pipelined kernels (Q4_K, Q8_0, Q4_0): each warp streams its units (16 rows x QB quant bytes plus their row scales)
// through a ring of S stages in shared memory with cp.async, 16 contiguous bytes of a row per lane (XOR-swizzled
// 16-byte slots), and forms the A fragments with ldmatrix. The previous kernels above held each warp's units in
// registers (loaded KU at a time, then all multiplied: no loads in flight while a warp multiplies), which took
// 128 registers for Q4_K (2 blocks per SM). Units per warp, arithmetic and summation order are those of the
// previous kernels, so the products are bit-equal to theirs. The first S - 1 units are copied before
// griddep_wait (weights only), while the previous kernel finishes.
// A unit per format: Q4_K a super-block (128 quant bytes per row; scales: 16 bytes of scale/min words + the
// d/dmin word), Q8_0 2 groups (64 bytes; 2 f16 scales), Q4_0 4 groups (64 bytes; 4 f16 scales), as the previous
// kernels' units. Stage: [16 rows][QB] quants, then [16 rows][side] scales (Q4_K: [16][16] words, [16] d/dmin).
template <dtype T>
struct pipe_unit {
    static constexpr int qb = T == dtype::q4_k ? 128 : 64;
    static constexpr int side = T == dtype::q4_k ? 20 : T == dtype::q4_0 ? 8 : 4;
    static constexpr int elems = T == dtype::q4_k ? 256 : T == dtype::q4_0 ? 128 : 64;
    static constexpr int stage_bytes = 16 * (qb + side);
};
constexpr int k_static_ring = 44 * 1024;  // larger rings: dynamic shared memory (launch_pipe)
// Session 11 (gbq11), XS: a Q4_K stage also holds its super-block's activations of up to 8 sequences: the int8 quants
// (8 groups x nb x 32 bytes, contiguous in the group-major layout), the groups' sums xs (8 x nb f32) and the
// super-block's scale xd (nb f32), so the products read them from shared memory (the quants by ldmatrix) instead of
// 16 + 16 + 2 global loads per lane and super-block.
constexpr int k_xs_act_bytes = 8 * 8 * 32, k_xs_bytes = k_xs_act_bytes + 8 * 8 * 4 + 8 * 4;
template <dtype T, bool XS>
constexpr int pipe_stage_bytes = pipe_unit<T>::stage_bytes + (XS ? k_xs_bytes : 0);

// Byte offset of 16-byte chunk c of row r in a stage: 8 rows of one chunk (an ldmatrix matrix) hit distinct banks.
template <int QB>
__device__ __forceinline__ int pipe_slot(int r, int c) {
    return r * QB + 16 * (QB == 128 ? c ^ (r & 7) : c ^ ((r >> 1) & 3));
}

// MB: minimum blocks per SM (a register cap): 8 sequences Q4_K 2 (variant: 3, 80 registers), Q8_0 / Q4_0 4
// (56-64 registers); 16 sequences 2. ALT (A/B only): Q8_0 / Q4_0 convert the integer dots to float by an exact add
// (1.5 * 2^23 + c) instead of I2F; Q4_K scales each group's dot in f32 (the register-staged kernel's arithmetic,
// conversions by exact adds) instead of summing the 8 sub-blocks' scaled dots of a super-block in integers.
template <dtype T, int NT, int S, bool ALT, bool XS = false>
__device__ __forceinline__ void pipe_rows(unsigned blk, gpu_weight w, int nb, const int8_t* xq, const float* xd,
                                          const float* xs, float* y, int64_t y_stride, int accumulate) {
    using U = pipe_unit<T>;
    static_assert(!XS || (T == dtype::q4_k && NT == 1 && S == 2 && !ALT), "XS: Q4_K, 8 sequences, 2 stages");
    constexpr int SB = pipe_stage_bytes<T, XS>;
    constexpr bool EXACT = ALT;
    // Q4_0 at up to 8 sequences (session 9, gbt9): the A operands are 16 (q - 8), one logic op per word (high nibble
    // in place) or a shift and one (low) instead of the emulated byte subtraction; every f32 value of the accumulation
    // is then exactly 16 times the plain arithmetic's (a power of two commutes with rounding: the same bits outside
    // subnormal range) and the sums are scaled by 1/16 before the block's reduction. 9..16 sequences: not measured.
    constexpr bool X16 = T == dtype::q4_0 && NT == 1 && !ALT;
    constexpr int QB = U::qb, CPR = QB / 16, CR = 16 * QB / 512;  // chunks per row, copies per lane and unit
    // Rings over 44 KB (Q4_K at 3-4 stages) are dynamic shared memory: static shared memory is capped at 48 KB.
    constexpr bool dyn = k_warps * S * SB > k_static_ring;
    __shared__ __align__(16) uint8_t ring[dyn ? 1 : k_warps][dyn ? 1 : S][dyn ? 16 : SB];
    extern __shared__ __align__(16) uint8_t ring_dynamic[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blk) * 16;
    const int n_in = int(w.n_in), n_u = n_in / U::elems;
    auto stage = [&](int k) -> uint8_t* {
        if constexpr (dyn)
            return ring_dynamic + (warp * S + k % S) * SB;
        else
            return ring[warp][k % S];
    };
    const int n_mine = warp < n_u ? (n_u - 1 - warp) / k_warps + 1 : 0;  // units warp, warp + 8, ...
    // Copy roles: chunk lane % CPR of rows lane / CPR + (32 / CPR) i; the scales of row lane % 16.
    const uint8_t* src[CR];
    int dst[CR];
#pragma unroll
    for (int i = 0; i < CR; i++) {
        const int r = lane / CPR + (32 / CPR) * i;
        src[i] = w.q + min(row0 + r, w.n_out - 1) * w.q_row_bytes + 16 * (lane % CPR);
        dst[i] = pipe_slot<QB>(r, lane % CPR);
    }
    const int sr = lane & 15;
    const int64_t srow = min(row0 + sr, w.n_out - 1);
    const uint32_t* side4k = T == dtype::q4_k ? q4k_side_of(w.d, srow, n_u) : nullptr;
    const uint16_t* side16 = T == dtype::q4_k ? nullptr : w.d + srow * (n_in / 32);
    // XS: chunk q of a super-block's activation quants (group j, sequence s, half h: q = (j nb + s) 2 + h) at slot
    // q ^ ((s / 4) % 2), so the 8 sequences of one ldmatrix matrix (fixed j, h) hit distinct banks; lane's chunks
    // q = lane + 32 i.
    int xdst[XS ? 4 : 1];
    if constexpr (XS)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = lane + 32 * i, sq = (q >> 1) % nb;
            xdst[i] = q < 16 * nb ? 16 * (q ^ ((sq >> 2) & 1)) : -1;
        }
    // Activation copies of unit k (XS; after griddep_wait: the previous kernel writes them).
    auto issue_x = [&](int k) {
        if constexpr (XS) {
            if (k < n_mine) {
                const int u = warp + k * k_warps;
                uint8_t* sx = stage(k) + U::stage_bytes;
                const int8_t* gx = xq + int64_t(u) * 256 * nb;
                // Through L1 (.ca): every block of the SM reads the same activations (run 1: through L2 only, .cg,
                // B=8 was 4.4 % slower than the kernel without staging).
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (xdst[i] >= 0) cp_async_small<16>(sx + xdst[i], gx + 16 * (lane + 32 * i));
                if (lane < 2 * nb)
                    cp_async_small<16>(sx + k_xs_act_bytes + 16 * lane, xs + int64_t(u) * 8 * nb + 4 * lane);
                if (lane < nb) cp_async_small<4>(sx + k_xs_act_bytes + 256 + 4 * lane, xd + int64_t(u) * 8 * nb + lane);
            }
        }
    };
    auto issue = [&](int k, bool with_x) {
        if (with_x) issue_x(k);
        if (k < n_mine) {
            const int u = warp + k * k_warps;
            uint8_t* st = stage(k);
#pragma unroll
            for (int i = 0; i < CR; i++) cp_async16(st + dst[i], src[i] + int64_t(u) * QB);
            uint8_t* ss = st + 16 * QB;
            if constexpr (T == dtype::q4_k) {
                if (lane < 16)
                    cp_async16(ss + 16 * sr, side4k + q4k_sm_word(u));
                else
                    cp_async_small<4>(ss + 256 + 4 * sr, side4k + q4k_dm_word(u));
            } else if (lane < 16) {
                cp_async_small<U::side>(ss + U::side * sr, side16 + (U::side / 2) * u);
            }
        }
        cp_async_commit();  // empty groups too: the wait below counts groups
    };
#pragma unroll
    for (int k = 0; k < S - 1; k++) issue(k, false);

    int seq[NT], cs[NT][2];
    float acc[NT][4];
    init_column_tiles<NT>(g, t, nb, seq, cs, acc);
    griddep_wait();
    griddep_launch();
    if constexpr (XS) {  // unit 0's activations: one more group, older than the loop's (S == 2: wait_group 1 covers it)
        issue_x(0);
        cp_async_commit();
    }

    // Group grp's integer dots of both rows and this lane's two columns, as the previous kernels' apply().
    auto apply = [&](int nt, const int(&c)[4], float sA, float sB, int grp) {
        const float d0 = xd[grp * nb + cs[nt][0]], d1 = xd[grp * nb + cs[nt][1]];
        acc[nt][0] += sA * d0 * to_float<EXACT>(c[0]);
        acc[nt][1] += sA * d1 * to_float<EXACT>(c[1]);
        acc[nt][2] += sB * d0 * to_float<EXACT>(c[2]);
        acc[nt][3] += sB * d1 * to_float<EXACT>(c[3]);
    };
    // ldmatrix rows: lanes 8m..8m+7 address matrix m = rows (m & 1) * 8 + 0..7 of chunk base + m / 2, so
    // o[0] / o[1] = rows g / g + 8, bytes 4t.. of the first chunk, o[2] / o[3] the same of the second.
    const int lm = lane >> 3, lr = (lane & 7) + 8 * (lm & 1);
    // XS: this lane's ldmatrix row of the activation quants: sequence min(lane % 8, nb - 1), half (lane / 8) % 2, group
    // 2c + lane / 16 (+ 64 nb c bytes per c).
    int xrow = 0;
    if constexpr (XS) {
        const int sr8 = min(lane & 7, nb - 1);
        xrow = 16 * ((((lane >> 4) * nb + sr8) << 1) + (((lane >> 3) & 1) ^ ((sr8 >> 2) & 1)));
    }
    for (int k = 0; k < n_mine; k++) {
        issue(k + S - 1, true);
        cp_async_wait<S - 1>();
        __syncwarp();
        const int u = warp + k * k_warps;
        const uint8_t* sq = stage(k);
        const uint8_t* ss = sq + 16 * QB;
        const uint8_t* sx = sq + U::stage_bytes;  // XS: the unit's activations
        (void)sx;
        if constexpr (T == dtype::q4_k && !ALT) {
            // One activation scale per super-block (K-format activations are quantized with q_block 256), so
            // sum_j sc_j dot_j over its 8 sub-blocks is summed in integers (the high nibbles' dots come 16x from
            // the in-place nibbles, so the low ones' scales are taken 16x: |sum| < 2^29) and converted once; the
            // mins' terms sum_j mn_j xs_j in f32. Scale/min words: bytes sc 2c, sc 2c + 1, mn 2c, mn 2c + 1.
            const int4 hA = *reinterpret_cast<const int4*>(ss + 16 * g);
            const int4 hB = *reinterpret_cast<const int4*>(ss + 16 * (g + 8));
            int is[NT][4];
            float ms[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    is[nt][i] = 0;
                    ms[nt][i] = 0;
                }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int o[4];
                ldmatrix_x4(sq + pipe_slot<QB>(lr, 2 * c + (lm >> 1)), o);
                const int lo[4] = {o[0] & 0x0f0f0f0f, o[1] & 0x0f0f0f0f, o[2] & 0x0f0f0f0f, o[3] & 0x0f0f0f0f};
                const int hi[4] = {int(o[0] & 0xf0f0f0f0u), int(o[1] & 0xf0f0f0f0u), int(o[2] & 0xf0f0f0f0u),
                                   int(o[3] & 0xf0f0f0f0u)};
                const uint32_t va = uint32_t(word(hA, c)), vb = uint32_t(word(hB, c));
                const int sA0 = int((va & 0xffu) << 4), sA1 = int((va >> 8) & 0xffu);
                const int sB0 = int((vb & 0xffu) << 4), sB1 = int((vb >> 8) & 0xffu);
                const float mA0 = byte_float<2>(va), mA1 = byte_float<3>(va);
                const float mB0 = byte_float<2>(vb), mB1 = byte_float<3>(vb);
                const int grp = u * 8 + 2 * c;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    int cl[4], ch[4];
                    const float* m_lo;
                    if constexpr (XS) {
                        int b[4];  // b0, b1 of group 2c (low nibbles), then of 2c + 1
                        ldmatrix_x4(sx + xrow + 64 * nb * c, b);
                        mma_u8s8_k32(lo, b[0], b[1], cl);
                        mma_u8s8_k32(hi, b[2], b[3], ch);
                        m_lo = reinterpret_cast<const float*>(sx + k_xs_act_bytes) + 2 * c * nb;
                    } else {
                        const int8_t* xa = xq + (int64_t(grp) * nb + seq[nt]) * 32 + 4 * t;
                        const int* xl = reinterpret_cast<const int*>(xa);
                        const int* xh = reinterpret_cast<const int*>(xa + 32 * nb);
                        mma_u8s8_k32(lo, __ldg(xl), __ldg(xl + 4), cl);
                        mma_u8s8_k32(hi, __ldg(xh), __ldg(xh + 4), ch);
                        m_lo = xs + grp * nb;
                    }
                    is[nt][0] += sA0 * cl[0] + sA1 * ch[0];
                    is[nt][1] += sA0 * cl[1] + sA1 * ch[1];
                    is[nt][2] += sB0 * cl[2] + sB1 * ch[2];
                    is[nt][3] += sB0 * cl[3] + sB1 * ch[3];
                    const float2 m0 = {m_lo[cs[nt][0]], m_lo[nb + cs[nt][0]]};
                    const float2 m1 = {m_lo[cs[nt][1]], m_lo[nb + cs[nt][1]]};
                    ms[nt][0] += mA0 * m0.x + mA1 * m0.y;
                    ms[nt][1] += mA0 * m1.x + mA1 * m1.y;
                    ms[nt][2] += mB0 * m0.x + mB1 * m0.y;
                    ms[nt][3] += mB0 * m1.x + mB1 * m1.y;
                }
            }
            const uint32_t dmA = *reinterpret_cast<const uint32_t*>(ss + 256 + 4 * g);
            const uint32_t dmB = *reinterpret_cast<const uint32_t*>(ss + 256 + 4 * (g + 8));
            const float2 ddA = __half22float2(*reinterpret_cast<const __half2*>(&dmA));  // d, dmin
            const float2 ddB = __half22float2(*reinterpret_cast<const __half2*>(&dmB));
            const float dA = ddA.x * 0.0625f, dB = ddB.x * 0.0625f;  // the 16x of the integer sums
            const float* xdu = XS ? reinterpret_cast<const float*>(sx + k_xs_act_bytes + 256) : xd + u * 8 * nb;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float x0 = xdu[cs[nt][0]], x1 = xdu[cs[nt][1]];
                acc[nt][0] += dA * x0 * float(is[nt][0]) - ddA.y * ms[nt][0];
                acc[nt][1] += dA * x1 * float(is[nt][1]) - ddA.y * ms[nt][1];
                acc[nt][2] += dB * x0 * float(is[nt][2]) - ddB.y * ms[nt][2];
                acc[nt][3] += dB * x1 * float(is[nt][3]) - ddB.y * ms[nt][3];
            }
        } else if constexpr (T == dtype::q4_k) {
            const int4 hA = *reinterpret_cast<const int4*>(ss + 16 * g);
            const int4 hB = *reinterpret_cast<const int4*>(ss + 16 * (g + 8));
            const uint32_t dmA = *reinterpret_cast<const uint32_t*>(ss + 256 + 4 * g);
            const uint32_t dmB = *reinterpret_cast<const uint32_t*>(ss + 256 + 4 * (g + 8));
            const float2 ddA = __half22float2(*reinterpret_cast<const __half2*>(&dmA));  // d, dmin
            const float2 ddB = __half22float2(*reinterpret_cast<const __half2*>(&dmB));
#pragma unroll
            for (int c = 0; c < 4; c++) {
                // Unit c: bytes 32c..32c+31 of the rows; low nibbles = sub-block 2c, high = 2c + 1, element = byte.
                int o[4];
                ldmatrix_x4(sq + pipe_slot<QB>(lr, 2 * c + (lm >> 1)), o);
                const int lo[4] = {o[0] & 0x0f0f0f0f, o[1] & 0x0f0f0f0f, o[2] & 0x0f0f0f0f, o[3] & 0x0f0f0f0f};
                const int hi[4] = {(o[0] >> 4) & 0x0f0f0f0f, (o[1] >> 4) & 0x0f0f0f0f, (o[2] >> 4) & 0x0f0f0f0f,
                                   (o[3] >> 4) & 0x0f0f0f0f};
                const uint32_t va = uint32_t(word(hA, c)), vb = uint32_t(word(hB, c));
                const float sA0 = ddA.x * byte_to_float<EXACT, 0>(va), sA1 = ddA.x * byte_to_float<EXACT, 1>(va);
                const float mA0 = ddA.y * byte_to_float<EXACT, 2>(va), mA1 = ddA.y * byte_to_float<EXACT, 3>(va);
                const float sB0 = ddB.x * byte_to_float<EXACT, 0>(vb), sB1 = ddB.x * byte_to_float<EXACT, 1>(vb);
                const float mB0 = ddB.y * byte_to_float<EXACT, 2>(vb), mB1 = ddB.y * byte_to_float<EXACT, 3>(vb);
                const int grp = u * 8 + 2 * c;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int8_t* xa = xq + (int64_t(grp) * nb + seq[nt]) * 32 + 4 * t;
                    const int* xl = reinterpret_cast<const int*>(xa);
                    const int* xh = reinterpret_cast<const int*>(xa + 32 * nb);
                    int cl[4], ch[4];
                    mma_s8_k32(lo, __ldg(xl), __ldg(xl + 4), cl);
                    mma_s8_k32(hi, __ldg(xh), __ldg(xh + 4), ch);
                    const float* d_lo = xd + grp * nb;
                    const float* m_lo = xs + grp * nb;
                    const float2 d0 = {d_lo[cs[nt][0]], d_lo[nb + cs[nt][0]]};
                    const float2 d1 = {d_lo[cs[nt][1]], d_lo[nb + cs[nt][1]]};
                    const float2 m0 = {m_lo[cs[nt][0]], m_lo[nb + cs[nt][0]]};
                    const float2 m1 = {m_lo[cs[nt][1]], m_lo[nb + cs[nt][1]]};
                    float fl[4], fh[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        fl[i] = to_float<EXACT>(cl[i]);
                        fh[i] = to_float<EXACT>(ch[i]);
                    }
                    acc[nt][0] += sA0 * d0.x * fl[0] + sA1 * d0.y * fh[0] - (mA0 * m0.x + mA1 * m0.y);
                    acc[nt][1] += sA0 * d1.x * fl[1] + sA1 * d1.y * fh[1] - (mA0 * m1.x + mA1 * m1.y);
                    acc[nt][2] += sB0 * d0.x * fl[2] + sB1 * d0.y * fh[2] - (mB0 * m0.x + mB1 * m0.y);
                    acc[nt][3] += sB0 * d1.x * fl[3] + sB1 * d1.y * fh[3] - (mB0 * m1.x + mB1 * m1.y);
                }
            }
        } else if constexpr (T == dtype::q8_0) {
            const uint32_t da = *reinterpret_cast<const uint32_t*>(ss + 4 * g);
            const uint32_t db = *reinterpret_cast<const uint32_t*>(ss + 4 * (g + 8));
#pragma unroll
            for (int j = 0; j < 2; j++) {  // group 2u + j: chunks 2j, 2j + 1 (bytes 0-15, 16-31)
                int a[4];
                ldmatrix_x4(sq + pipe_slot<QB>(lr, 2 * j + (lm >> 1)), a);
                const int grp = 2 * u + j;
                const float sA = h2f(uint16_t(da >> (16 * j))), sB = h2f(uint16_t(db >> (16 * j)));
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int* xa = reinterpret_cast<const int*>(xq + (int64_t(grp) * nb + seq[nt]) * 32 + 4 * t);
                    int c[4];
                    mma_s8_k32(a, __ldg(xa), __ldg(xa + 4), c);
                    apply(nt, c, sA, sB, grp);
                }
            }
        } else {  // Q4_0: group 4u + j is chunk j (elements 0-15 low nibbles, 16-31 high), offset to signed
            const uint2 da = *reinterpret_cast<const uint2*>(ss + 8 * g);
            const uint2 db = *reinterpret_cast<const uint2*>(ss + 8 * (g + 8));
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                int o[4];
                ldmatrix_x4(sq + pipe_slot<QB>(lr, 2 * jj + (lm >> 1)), o);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int j = 2 * jj + h, grp = 4 * u + j;
                    const uint32_t oa = uint32_t(o[2 * h]), ob = uint32_t(o[2 * h + 1]);
                    int a[4];
                    if constexpr (X16) {  // 16 (q - 8): the high nibble in place, the low one shifted up
                        a[0] = int(((oa << 4) & 0xf0f0f0f0u) ^ 0x80808080u);
                        a[1] = int(((ob << 4) & 0xf0f0f0f0u) ^ 0x80808080u);
                        a[2] = int((oa & 0xf0f0f0f0u) ^ 0x80808080u);
                        a[3] = int((ob & 0xf0f0f0f0u) ^ 0x80808080u);
                    } else {
                        a[0] = int(__vsub4(oa & 0x0f0f0f0fu, 0x08080808u));
                        a[1] = int(__vsub4(ob & 0x0f0f0f0fu, 0x08080808u));
                        a[2] = int(__vsub4((oa >> 4) & 0x0f0f0f0fu, 0x08080808u));
                        a[3] = int(__vsub4((ob >> 4) & 0x0f0f0f0fu, 0x08080808u));
                    }
                    const uint32_t wda = j < 2 ? da.x : da.y, wdb = j < 2 ? db.x : db.y;
                    const float sA = h2f(uint16_t(wda >> (16 * h))), sB = h2f(uint16_t(wdb >> (16 * h)));
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int* xa = reinterpret_cast<const int*>(xq + (int64_t(grp) * nb + seq[nt]) * 32 + 4 * t);
                        int c[4];
                        mma_s8_k32(a, __ldg(xa), __ldg(xa + 4), c);
                        apply(nt, c, sA, sB, grp);
                    }
                }
            }
        }
        __syncwarp();  // every lane's ldmatrix of this stage is done before a later issue() refills it
    }

    if constexpr (X16)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] *= 0.0625f;
    store_warp_tiles<NT>(acc, warp, lane, row0, w.n_out, nb, y, y_stride, accumulate);
}

template <dtype T, int NT, int S, int MB, bool ALT, bool XS = false>
__global__ void __launch_bounds__(32 * k_warps, MB)
    matvec_mma_pipe_kernel(gpu_weight w, int nb, const int8_t* xq, const float* xd, const float* xs, float* y,
                           int64_t y_stride, int accumulate) {
    pipe_rows<T, NT, S, ALT, XS>(blockIdx.x, w, nb, xq, xd, xs, y, y_stride, accumulate);
}

// Two products of the same activations in one launch (the batched step's Q4_K Q/K rows and Q6_K V rows of
// Q4_K_M's more-bits layers): blocks 0..n_b - 1 are the Q6_K kernel's row tiles (the longer ones, so they start
// first), the rest the Q4_K pipelined kernel's (8 sequences at most: one column tile, 2 stages, 2 blocks per SM).
// Each block runs exactly its own kernel's code, so the results are bit-equal to the two launches; the small V
// product (64 blocks for 1024 rows) no longer runs alone on the GPU.
// XS: the Q4_K blocks with their activations staged (75 KB of dynamic shared memory per block).
template <bool XS = false>
__global__ void __launch_bounds__(32 * k_warps, 2)
    matvec_mma_pair_kernel(gpu_weight wa, float* ya, gpu_weight wb, float* yb, int n_b, int nb, const int8_t* xq,
                           const float* xd, const float* xs, int64_t y_stride) {
    if (blockIdx.x < unsigned(n_b))
        mma_rows<dtype::q6_k, 1, 8, false, false>(blockIdx.x, wb, nb, nullptr, xq, xd, xs, yb, y_stride, 0);
    else
        pipe_rows<dtype::q4_k, 1, 2, false, XS>(blockIdx.x - unsigned(n_b), wa, nb, xq, xd, xs, ya, y_stride, 0);
}
constexpr int k_xs_ring = k_warps * 2 * pipe_stage_bytes<dtype::q4_k, true>;

template <dtype T, int NT, int S, int MB, bool ALT, bool XS = false>
void launch_pipe(const gpu_weight& w, int nb, const int8_t* xq, const float* xd, const float* xs, float* y,
                 int64_t y_stride, bool accumulate, cudaStream_t s) {
    const unsigned blocks = unsigned((w.n_out + 15) / 16);
    constexpr int ring_bytes = k_warps * S * pipe_stage_bytes<T, XS>;
    auto* kernel = matvec_mma_pipe_kernel<T, NT, S, MB, ALT, XS>;
    if constexpr (ring_bytes > k_static_ring) {
        static const bool configured = [&] {  // also done by prepare_mma_kernels, outside graph captures
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_bytes);
            return true;
        }();
        (void)configured;
        detail::launch_smem(kernel, blocks, 32 * k_warps, ring_bytes, s, w, nb, xq, xd, xs, y, y_stride,
                            accumulate ? 1 : 0);
    } else {
        detail::launch(kernel, blocks, 32 * k_warps, s, w, nb, xq, xd, xs, y, y_stride, accumulate ? 1 : 0);
    }
}

// Stages per warp and minimum blocks per SM (measured, docs/cuda-prefill-batch-log.md), with the other choice as
// variant 1: Q4_K 2 super-blocks (37 KB of shared memory per block), 2 blocks (no register cap) for up to 8 sequences
// (variant 1: 3); Q8_0 4 units (35 KB; variant 1: 2); Q4_0 2 units for up to 8 sequences (8 for rows of >= 8,192
// elements), 4 for more (variant 1: the opposite).
template <dtype T, int NT, bool ALT>
void launch_pipe_nt(const gpu_weight& w, int nb, const int8_t* xq, const float* xd, const float* xs, float* y,
                    int64_t y_stride, bool accumulate, cudaStream_t s, bool other) {
    if constexpr (T == dtype::q4_k) {
        // g_q4k_stages (A/B): 1 = 4 stages for rows of >= 8,192 elements (the down matrix: 7 super-blocks per warp
        // in one wave of 256 blocks), 2 = 4 stages everywhere, 3 = 3 stages for rows of >= 8,192 (2 blocks per SM).
        const int deep = NT == 1 && !ALT && !other && (g_q4k_stages == 2 || w.n_in >= 8192) ? g_q4k_stages : 0;
        if (NT == 1 && other)
            launch_pipe<T, 1, 2, 3, ALT>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        else if (deep == 1 || deep == 2)
            launch_pipe<T, 1, 4, 2, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        else if (deep == 3)
            launch_pipe<T, 1, 3, 2, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        else if (NT == 1 && !ALT && (g_q4k_xs & 1))
            launch_pipe<T, 1, 2, 2, false, true>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        else
            launch_pipe<T, NT, 2, 2, ALT>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
    } else {
        if constexpr (T == dtype::q4_0 && NT == 1 && !ALT) {
            // The down matrix (14 units per warp, 256 blocks: 2 per SM) with 7 units in flight: +4 % at 8 sequences
            // against 2 stages (docs/cuda-prefill-batch-log.md, session 7 gq4b); 72 registers, 72 KB ring.
            if (!other && w.n_in >= 8192 && g_q4_0_long == 4)
                return launch_pipe<T, 1, 4, 2, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
            if (!other && w.n_in >= 8192 && g_q4_0_long == 8)
                return launch_pipe<T, 1, 8, 2, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
            if (!other && w.n_in < 8192 && g_q4_0_short == 3)  // A/B only: measured +0.1-0.4 %
                return launch_pipe<T, 1, 3, 4, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        }
        constexpr int MB = NT == 1 ? 4 : 2;
        const bool four = T == dtype::q8_0 ? !other : (NT == 1) == other;
        if (four)
            launch_pipe<T, NT, 4, MB, ALT>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
        else
            launch_pipe<T, NT, 2, MB, ALT>(w, nb, xq, xd, xs, y, y_stride, accumulate, s);
    }
}

template <dtype T, int NT, int KU, bool RW, bool LDSM>
void launch_shape(const gpu_weight& w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                  float* y, int64_t y_stride, bool accumulate, cudaStream_t s) {
    const unsigned blocks = unsigned((w.n_out + 15) / 16);
    detail::launch(matvec_mma_kernel<T, NT, KU, RW, LDSM>, blocks, 32 * k_warps, s, w, nb, x, xq, xd, xs, y, y_stride,
                   accumulate ? 1 : 0);
}

// KS or KL units in flight (large: KL).
template <dtype T, bool RW, int KS, int KL, bool LDSM = false>
void launch_units(const gpu_weight& w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                  float* y, int64_t y_stride, bool accumulate, cudaStream_t s, bool large) {
    if (nb <= 8) {
        if (large)
            launch_shape<T, 1, KL, RW, LDSM>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s);
        else
            launch_shape<T, 1, KS, RW, LDSM>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s);
    } else {
        if (large)
            launch_shape<T, 2, KL, RW, LDSM>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s);
        else
            launch_shape<T, 2, KS, RW, LDSM>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s);
    }
}

template <dtype T>
void launch_typed(const gpu_weight& w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                  float* y, int64_t y_stride, bool accumulate, cudaStream_t s) {
    if constexpr (T == dtype::q4_k || T == dtype::q8_0 || T == dtype::q4_0) {
        if (!g_previous && !g_fragment_loads && !g_q4_0_shuffles && g_unroll == 0 &&
            w.n_in % pipe_unit<T>::elems == 0) {
            const bool other = g_pipe_variant == 1;
            if (g_pipe_variant == 2) {  // the alternative arithmetic (A/B)
                if (nb <= 8)
                    launch_pipe_nt<T, 1, true>(w, nb, xq, xd, xs, y, y_stride, accumulate, s, false);
                else
                    launch_pipe_nt<T, 2, true>(w, nb, xq, xd, xs, y, y_stride, accumulate, s, false);
            } else if (nb <= 8) {
                launch_pipe_nt<T, 1, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s, other);
            } else {
                launch_pipe_nt<T, 2, false>(w, nb, xq, xd, xs, y, y_stride, accumulate, s, other);
            }
            return;
        }
    }
    if constexpr (T == dtype::q8_0 || T == dtype::q4_0 || T == dtype::f16 || T == dtype::bf16) {
        // Row-wise loads need whole 64-byte units per row: Q4_0 128, Q8_0 64, F16/BF16 32 elements. Units in
        // flight: Q4_0 2 (8 groups; 4 needs 222 registers for 16 sequences) or 4 with unroll 8; others 4 or 8.
        const int64_t unit = T == dtype::q4_0 ? 128 : T == dtype::q8_0 ? 64 : 32;
        if (!g_fragment_loads && w.n_in % unit == 0) {
            const bool large = g_unroll == 8;
            if constexpr (T == dtype::q4_0) {
                if (g_q4_0_shuffles)
                    launch_units<T, true, 2, 4, false>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s, large);
                else
                    launch_units<T, true, 2, 4, true>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s, large);
            } else {
                launch_units<T, true, 4, 8>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s, large);
            }
            return;
        }
    }
    // Fragment-layout loads. Measured (docs/cuda-prefill-batch-log.md): 8 units in flight helps Q4_K, Q6_K and Q4_0; 4
    // is faster for Q8_0, F16, BF16 (and Q5_K needs 254 registers at 8 for 16 sequences).
    const bool wide = T == dtype::q8_0 || T == dtype::f16 || T == dtype::bf16 || T == dtype::q5_k;
    const bool four = g_unroll == 4 || (g_unroll == 0 && wide);
    // Q6_K at 2..8 sequences: the pipelined kernel (matvec-mma-q6k.cu) unless an A/B option asks for another.
    if constexpr (T == dtype::q6_k)
        if (g_unroll == 0 && !g_fragment_loads && !g_previous && g_q6k_halves == 0 &&
            launch_matvec_q6k_pipe(w, nb, xq, xd, y, y_stride, accumulate, s))
            return;
    // g_q6k_halves (A/B): a warp's 4 halves of the 4096-wide output matrix in one round instead of two (same order).
    if constexpr (T == dtype::q6_k)
        if (nb <= 8 && g_unroll == 0 && (g_q6k_halves == 1 || (g_q6k_halves == 2 && w.n_in < 8192)))
            return launch_shape<T, 1, 16, false, false>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s);
    launch_units<T, false, 4, 8>(w, nb, x, xq, xd, xs, y, y_stride, accumulate, s, !four);
}

bool g_pair = true;  // matvec_mma_pair_kernel where it applies (A/B: the two launches)

}  // namespace

void set_mma_pair(bool on) {
    g_pair = on;
}
void set_mma_q4k_stages(int mode) {
    g_q4k_stages = mode >= 0 && mode <= 3 ? mode : 0;
}
void set_mma_q4k_xs(int mode) {
    g_q4k_xs = mode & 3;
}
int mma_q4k_xs() {
    return g_q4k_xs;
}
void set_mma_batch_tune(int q4_0_long_stages, int q6k_halves, int q4_0_short_stages) {
    g_q4_0_long = q4_0_long_stages == 2 || q4_0_long_stages == 4 ? q4_0_long_stages : 8;
    g_q4_0_short = q4_0_short_stages == 3 ? 3 : 2;
    g_q6k_halves = q6k_halves == 1 || q6k_halves == 2 ? q6k_halves : 0;
}
void prepare_mma_kernels() {
    prepare_mma_q6k_pipe();
    cudaFuncSetAttribute(matvec_mma_pipe_kernel<dtype::q4_k, 1, 4, 2, false>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k_warps * 4 * pipe_unit<dtype::q4_k>::stage_bytes);
    cudaFuncSetAttribute(matvec_mma_pipe_kernel<dtype::q4_k, 1, 3, 2, false>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k_warps * 3 * pipe_unit<dtype::q4_k>::stage_bytes);
    cudaFuncSetAttribute(matvec_mma_pipe_kernel<dtype::q4_k, 1, 2, 2, false, true>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, k_xs_ring);
    cudaFuncSetAttribute(matvec_mma_pair_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, k_xs_ring);
    cudaFuncSetAttribute(matvec_mma_pipe_kernel<dtype::q4_0, 1, 8, 2, false>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k_warps * 8 * pipe_unit<dtype::q4_0>::stage_bytes);
}

bool launch_matvec_mma_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, int n_rows,
                            const int8_t* xq, const float* xd, const float* xs, int64_t y_stride, cudaStream_t s) {
    // Only where the two launches would run exactly these kernels: defaults, 2..8 sequences, whole super-blocks.
    if (!g_pair || g_previous || g_fragment_loads || g_unroll != 0 || g_pipe_variant != 0) return false;
    if (n_rows < 2 || n_rows > 8 || a.type != dtype::q4_k || b.type != dtype::q6_k) return false;
    if (a.n_in != b.n_in || a.n_in % 256 != 0) return false;
    const int n_b = int((b.n_out + 15) / 16), n_a = int((a.n_out + 15) / 16);
    if (g_q4k_xs & 2) {
        // Its ring is dynamic shared memory over the 48 KB default: configured on first use as in launch_pipe, so
        // that callers which never ran prepare_mma_kernels (a single-sequence decoder's prefill, the op checks) do
        // not get a launch that fails without a trace (session 11: the pair check's outputs were left unwritten).
        static const bool configured = [] {
            cudaFuncSetAttribute(matvec_mma_pair_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, k_xs_ring);
            return true;
        }();
        (void)configured;
        detail::launch_smem(matvec_mma_pair_kernel<true>, unsigned(n_a + n_b), 32 * k_warps, k_xs_ring, s, a, ya, b, yb,
                            n_b, n_rows, xq, xd, xs, y_stride);
    } else {
        detail::launch(matvec_mma_pair_kernel<false>, unsigned(n_a + n_b), 32 * k_warps, s, a, ya, b, yb, n_b, n_rows,
                       xq, xd, xs, y_stride);
    }
    return true;
}

void set_mma_unroll(int units, bool fragment_loads, bool q4_0_shuffles, bool previous, int pipe_variant) {
    g_unroll = units == 4 || units == 8 ? units : 0;
    g_fragment_loads = fragment_loads;
    g_q4_0_shuffles = q4_0_shuffles;
    g_previous = previous;
    g_pipe_variant = pipe_variant;
}

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
