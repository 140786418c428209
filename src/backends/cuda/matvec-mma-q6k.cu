// Batched decode products of Q6_K weights, pipelined (2..8 sequences; the output matrix of Q4_K_M and Q4_0, and
// Q4_K_M's down and V matrices of its more-bits layers). The register-staged kernel (matvec-mma.cu, mma_rows) loads
// two halves per warp into registers, then multiplies them with nothing in flight; at 104 registers and 2 blocks
// per SM the 128,256-row output product ran at ~2 TB/s (docs/cuda-prefill-batch-log.md). Here each warp streams its
// halves (a unit: 128 elements of 16 rows = 6 16-byte pieces per row, plus the half's 8 scale bytes and the
// super-block's f16 d of each row) through a ring of S stages in shared memory with cp.async, and forms the A
// fragments with ldmatrix. The halves per warp (warp, warp + 8, ...) and their order are the register-staged kernel's;
// modes 1-5 also take its arithmetic per lane (q6k_half_mma), so their products are bit-equal to it, modes 6-8 sum
// each half's scaled dots in integers (q6k_half_mma_isum; checked against the dp4a kernel, check_batch_q6k_pipe). The
// first S - 1 halves are copied before griddep_wait (weights only).
#include <cuda_fp16.h>

#include <cstdlib>
#include <utility>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/matvec-mma-util.cuh"
#include "backends/cuda/mma-pair.h"

namespace memtile::cuda {
namespace {

using detail::griddep_launch;
using detail::griddep_wait;
using namespace mma_util;

// A stage: [16 rows][k_q6_row] quant bytes (pieces 0..5 of the half at 16 n; 16 bytes of padding make the row stride
// 7 16-byte slots, so the 8 rows of an ldmatrix matrix hit distinct banks), then [16][8] scale bytes, then [16] words
// holding the row's f16 d of super-blocks 2s, 2s + 1 (the pair containing the half's).
constexpr int k_q6_row = 112;
constexpr int k_q6_scales = 16 * k_q6_row;
constexpr int k_q6_d = k_q6_scales + 16 * 8;
constexpr int k_q6_stage = k_q6_d + 16 * 4;  // 1,984 bytes

// q6k_half_mma with the half's scales applied in integers: one activation scale per 256 elements (K-format
// activations are quantized with q_block 256, so xd of the half's 4 groups are equal), so sum_s sc_s dot_s over its 8
// sub-blocks is exact in int32 (|dot_s| <= 16 * 128 * 127 < 2^18, |sc_s| <= 128: |sum| < 2^28) and converted once per
// half, as the Q4_K pipelined kernel's integer super-block sums (docs/cuda-prefill-batch-log.md, session 5). Not
// bit-equal to the register-staged kernel (another rounding order); checked against the dp4a kernel.
template <int NT>
__device__ __forceinline__ void q6k_half_mma_isum(const int (&cA)[6], const int (&cB)[6], int2 sA8, int2 sB8, float fA,
                                                  float fB, int p, int nb, int t, const int8_t* xq, const float* xd,
                                                  const int (&seq)[NT], const int (&cs)[NT][2], float (&acc)[NT][4]) {
    int is[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) is[nt][i] = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int u = 4 * p + j;
        int a0[2], a1[2], sA[2], sB[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int si = 2 * j + h;
            a0[h] = q6k_half_operand(cA, si);
            a1[h] = q6k_half_operand(cB, si);
            sA[h] = q6k_half_scale(sA8, si);
            sB[h] = q6k_half_scale(sB8, si);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int8_t* xa = xq + (int64_t(u) * nb + seq[nt]) * 32 + 4 * t;
            const int b0 = __ldg(reinterpret_cast<const int*>(xa));
            const int b1 = __ldg(reinterpret_cast<const int*>(xa + 16));
            int c0[4], c1[4];
            mma_s8_k16(a0[0], a1[0], b0, c0);
            mma_s8_k16(a0[1], a1[1], b1, c1);
            is[nt][0] += sA[0] * c0[0] + sA[1] * c1[0];
            is[nt][1] += sA[0] * c0[1] + sA[1] * c1[1];
            is[nt][2] += sB[0] * c0[2] + sB[1] * c1[2];
            is[nt][3] += sB[0] * c0[3] + sB[1] * c1[3];
        }
    }
    const float qA = fA * 0.25f, qB = fB * 0.25f;  // the operands are the signed 4v
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float d0 = xd[4 * p * nb + cs[nt][0]], d1 = xd[4 * p * nb + cs[nt][1]];
        acc[nt][0] += qA * d0 * float(is[nt][0]);
        acc[nt][1] += qA * d1 * float(is[nt][1]);
        acc[nt][2] += qB * d0 * float(is[nt][2]);
        acc[nt][3] += qB * d1 * float(is[nt][3]);
    }
}

template <int NT, int S, bool ISUM>
__device__ __forceinline__ void q6k_pipe_rows(unsigned blk, const gpu_weight& w, int nb, const int8_t* xq,
                                              const float* xd, float* y, int64_t y_stride, int accumulate) {
    extern __shared__ __align__(16) uint8_t q6_ring[];  // [k_warps][S][k_q6_stage]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blk) * 16;
    const int n_half = int(w.n_in / 128), n_sb = n_half / 2;
    const int n_mine = warp < n_half ? (n_half - 1 - warp) / k_warps + 1 : 0;  // halves warp, warp + 8, ...
    uint8_t* const ring = q6_ring + warp * S * k_q6_stage;
    // Copy roles: the unit's 96 quant pieces, piece q = lane + 32 i is piece q % 6 of row q / 6; lanes 0-15 the
    // scale bytes of row lane, lanes 16-31 the d pair of row lane - 16.
    const uint8_t* src[3];
    int piece[3], dst[3];
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const int q = lane + 32 * i, r = q / 6;
        piece[i] = q % 6;
        src[i] = w.q + min(row0 + r, w.n_out - 1) * w.q_row_bytes;
        dst[i] = r * k_q6_row + 16 * piece[i];
    }
    const int sr = lane & 15;
    const int64_t srow = min(row0 + sr, w.n_out - 1);
    const uint8_t* side = lane < 16 ? w.q + srow * w.q_row_bytes + q6k_scale_byte(0, n_half)
                                    : reinterpret_cast<const uint8_t*>(w.d + srow * n_sb);
    auto issue = [&](int k) {
        if (k < n_mine) {
            const int p = warp + k * k_warps;
            // q6k_half_byte(p, 16 n, n_half) = base + 16 m n: halves in groups of 32 (m in the last group).
            const int grp = p >> 5, m = min(32, n_half - 32 * grp);
            const int64_t base = 3072 * int64_t(grp) + 16 * (p & 31);
            uint8_t* st = ring + (k % S) * k_q6_stage;
#pragma unroll
            for (int i = 0; i < 3; i++) cp_async16(st + dst[i], src[i] + base + 16 * m * piece[i]);
            if (lane < 16)
                cp_async_small<8>(st + k_q6_scales + 8 * sr, side + 8 * p);
            else
                cp_async_small<4>(st + k_q6_d + 4 * sr, side + 2 * ((p >> 1) & ~1));
        }
        cp_async_commit();  // empty groups too: the wait below counts groups
    };
#pragma unroll
    for (int k = 0; k < S - 1; k++) issue(k);

    int seq[NT], cs[NT][2];
    float acc[NT][4];
    init_column_tiles<NT>(g, t, nb, seq, cs, acc);
    griddep_wait();
    griddep_launch();

    // ldmatrix rows: lanes 8m..8m+7 address matrix m = rows (m & 1) * 8 + 0..7 of piece n + m / 2, so o[0] / o[1] =
    // word t of piece n of rows g / g + 8, o[2] / o[3] the same of piece n + 1.
    const int lm = lane >> 3, lrow = (lane & 7) + 8 * (lm & 1);
    const int lofs = lrow * k_q6_row + 16 * (lm >> 1);
    for (int k = 0; k < n_mine; k++) {
        issue(k + S - 1);
        cp_async_wait<S - 1>();
        __syncwarp();
        const int p = warp + k * k_warps;
        const uint8_t* sq = ring + (k % S) * k_q6_stage;
        int cA[6], cB[6];
#pragma unroll
        for (int n = 0; n < 6; n += 2) {
            int o[4];
            ldmatrix_x4(sq + lofs + 16 * n, o);
            cA[n] = o[0];
            cB[n] = o[1];
            cA[n + 1] = o[2];
            cB[n + 1] = o[3];
        }
        const int2 sA8 = *reinterpret_cast<const int2*>(sq + k_q6_scales + 8 * g);
        const int2 sB8 = *reinterpret_cast<const int2*>(sq + k_q6_scales + 8 * (g + 8));
        const int hs = 16 * ((p >> 1) & 1);
        const float fA = h2f(uint16_t(*reinterpret_cast<const uint32_t*>(sq + k_q6_d + 4 * g) >> hs));
        const float fB = h2f(uint16_t(*reinterpret_cast<const uint32_t*>(sq + k_q6_d + 4 * (g + 8)) >> hs));
        if constexpr (ISUM)
            q6k_half_mma_isum<NT>(cA, cB, sA8, sB8, fA, fB, p, nb, t, xq, xd, seq, cs, acc);
        else
            q6k_half_mma<NT>(cA, cB, sA8, sB8, fA, fB, p, nb, t, xq, xd, seq, cs, acc);
        __syncwarp();  // every lane's reads of this stage are done before a later issue() refills it
    }

    store_warp_tiles<NT>(acc, warp, lane, row0, w.n_out, nb, y, y_stride, accumulate);
}

// Session 9 (gbt9), modes 9 and 10: a warp's unit is a whole super-block, its halves 2s and 2s + 1, instead of one
// half. In the device layout piece k of halves 2s and 2s + 1 are the two 16-byte halves of one 32-byte sector, which
// the half-unit kernel above splits between two warps (warp w takes halves w, w + 8, ...): every quant sector then
// reaches L2 twice, and ncu found the 128,256-row output product L2-bound (lts throughput 93 % at 2.15 TB/s of DRAM
// reads). Here lanes 2j and 2j + 1 copy the two halves of a sector in one instruction, and the two halves' 16 scale
// bytes of a row are one 16-byte copy. Halves per warp: 2s, 2s + 1 for s = warp, warp + 8, ... (another order than
// modes 1-8: integer sums as modes 6-8, checked against the dp4a kernel). Stage: half 0's [16][k_q6_row] quants, half
// 1's, [16][16] scale bytes, [16] d-pair words.
constexpr int k_q6p_half1 = 16 * k_q6_row;
constexpr int k_q6p_scales = 2 * 16 * k_q6_row;
constexpr int k_q6p_d = k_q6p_scales + 16 * 16;
constexpr int k_q6p_stage = k_q6p_d + 16 * 4;  // 3,904 bytes

template <int S>
__device__ __forceinline__ void q6k_pair_rows(unsigned blk, const gpu_weight& w, int nb, const int8_t* xq,
                                              const float* xd, float* y, int64_t y_stride, int accumulate) {
    extern __shared__ __align__(16) uint8_t q6_ring[];  // [k_warps][S][k_q6p_stage]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blk) * 16;
    const int n_half = int(w.n_in / 128), n_sb = n_half / 2;
    const int n_mine = warp < n_sb ? (n_sb - 1 - warp) / k_warps + 1 : 0;  // super-blocks warp, warp + 8, ...
    uint8_t* const ring = q6_ring + warp * S * k_q6p_stage;
    // Copy roles: copy c = lane + 32 i (i < 6) is piece n = (c / 2) % 6 of row r = (c / 2) / 6 of half c % 2 = lane %
    // 2: off[i] = the row's byte offset from the tile's first row (rows past n_out clamped) + 16 (lane % 2); pd[i] =
    // the stage offset | n << 16.
    const uint8_t* const tile = w.q + row0 * w.q_row_bytes;
    int off[6], pd[6];
#pragma unroll
    for (int i = 0; i < 6; i++) {
        const int qq = (lane >> 1) + 16 * i, r = qq / 6, n = qq % 6;
        off[i] = int((min(row0 + r, w.n_out - 1) - row0) * w.q_row_bytes) + 16 * (lane & 1);
        pd[i] = ((lane & 1) * k_q6p_half1 + r * k_q6_row + 16 * n) | (n << 16);
    }
    const int sr = lane & 15;
    const int64_t srow = min(row0 + sr, w.n_out - 1);
    const uint8_t* side = lane < 16 ? w.q + srow * w.q_row_bytes + q6k_scale_byte(0, n_half)
                                    : reinterpret_cast<const uint8_t*>(w.d + srow * n_sb);
    auto issue = [&](int k) {
        if (k < n_mine) {
            const int sb = warp + k * k_warps, p = 2 * sb;
            // q6k_half_byte(p, 16 n, n_half) = base + 16 m n; halves 2s, 2s + 1 are in the same group of 32.
            const int grp = p >> 5, m = min(32, n_half - 32 * grp);
            const uint8_t* base = tile + 3072 * int64_t(grp) + 16 * (p & 31);
            uint8_t* st = ring + (k % S) * k_q6p_stage;
#pragma unroll
            for (int i = 0; i < 6; i++) cp_async16(st + (pd[i] & 0xffff), base + off[i] + 16 * m * (pd[i] >> 16));
            if (lane < 16)
                cp_async16(st + k_q6p_scales + 16 * sr, side + 16 * sb);
            else
                cp_async_small<4>(st + k_q6p_d + 4 * sr, side + 2 * (sb & ~1));
        }
        cp_async_commit();  // empty groups too: the wait below counts groups
    };
#pragma unroll
    for (int k = 0; k < S - 1; k++) issue(k);

    int seq[1], cs[1][2];
    float acc[1][4];
    init_column_tiles<1>(g, t, nb, seq, cs, acc);
    griddep_wait();
    griddep_launch();

    const int lm = lane >> 3, lrow = (lane & 7) + 8 * (lm & 1);
    const int lofs = lrow * k_q6_row + 16 * (lm >> 1);
    for (int k = 0; k < n_mine; k++) {
        issue(k + S - 1);
        cp_async_wait<S - 1>();
        __syncwarp();
        const int sb = warp + k * k_warps;
        const uint8_t* sq = ring + (k % S) * k_q6p_stage;
        const int hs = 16 * (sb & 1);
        const float fA = h2f(uint16_t(*reinterpret_cast<const uint32_t*>(sq + k_q6p_d + 4 * g) >> hs));
        const float fB = h2f(uint16_t(*reinterpret_cast<const uint32_t*>(sq + k_q6p_d + 4 * (g + 8)) >> hs));
#pragma unroll 1
        for (int h = 0; h < 2; h++) {  // one half at a time: the register footprint of the half-unit kernel
            const uint8_t* sh = sq + h * k_q6p_half1;
            int cA[6], cB[6];
#pragma unroll
            for (int n = 0; n < 6; n += 2) {
                int o[4];
                ldmatrix_x4(sh + lofs + 16 * n, o);
                cA[n] = o[0];
                cB[n] = o[1];
                cA[n + 1] = o[2];
                cB[n + 1] = o[3];
            }
            const int2 sA8 = *reinterpret_cast<const int2*>(sq + k_q6p_scales + 16 * g + 8 * h);
            const int2 sB8 = *reinterpret_cast<const int2*>(sq + k_q6p_scales + 16 * (g + 8) + 8 * h);
            q6k_half_mma_isum<1>(cA, cB, sA8, sB8, fA, fB, 2 * sb + h, nb, t, xq, xd, seq, cs, acc);
        }
        __syncwarp();  // every lane's reads of this stage are done before a later issue() refills it
    }

    store_warp_tiles<1>(acc, warp, lane, row0, w.n_out, nb, y, y_stride, accumulate);
}

template <int S, int MB>
__global__ void __launch_bounds__(32 * k_warps, MB)
    matvec_q6k_pair_kernel(gpu_weight w, int nb, const int8_t* xq, const float* xd, float* y, int64_t y_stride,
                           int accumulate) {
    q6k_pair_rows<S>(blockIdx.x, w, nb, xq, xd, y, y_stride, accumulate);
}
template <int S, int MB>
void set_pair_limit() {
    cudaFuncSetAttribute(matvec_q6k_pair_kernel<S, MB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k_warps * S * k_q6p_stage);
}
template <int S, int MB>
void launch_pair(const gpu_weight& w, int nb, const int8_t* xq, const float* xd, float* y, int64_t y_stride,
                 bool accumulate, cudaStream_t s) {
    static const bool configured = [] {  // also done by prepare_mma_q6k_pipe, outside graph captures
        set_pair_limit<S, MB>();
        return true;
    }();
    (void)configured;
    detail::launch_smem(matvec_q6k_pair_kernel<S, MB>, unsigned((w.n_out + 15) / 16), 32 * k_warps,
                        k_warps * S * k_q6p_stage, s, w, nb, xq, xd, y, y_stride, accumulate ? 1 : 0);
}

// MB: minimum blocks per SM (a register cap: 2 = 128, 3 = 85, 4 = 64 registers).
template <int NT, int S, int MB, bool ISUM>
__global__ void __launch_bounds__(32 * k_warps, MB)
    matvec_q6k_pipe_kernel(gpu_weight w, int nb, const int8_t* xq, const float* xd, float* y, int64_t y_stride,
                           int accumulate) {
    q6k_pipe_rows<NT, S, ISUM>(blockIdx.x, w, nb, xq, xd, y, y_stride, accumulate);
}

template <int S>
constexpr int ring_bytes() {
    return k_warps * S * k_q6_stage;
}
template <int S, int MB, bool ISUM = false>
void set_limit() {
    cudaFuncSetAttribute(matvec_q6k_pipe_kernel<1, S, MB, ISUM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         ring_bytes<S>());
}
template <int S, int MB, bool ISUM = false>
void launch_sm(const gpu_weight& w, int nb, const int8_t* xq, const float* xd, float* y, int64_t y_stride,
               bool accumulate, cudaStream_t s) {
    static const bool configured = [] {  // also done by prepare_mma_q6k_pipe, outside graph captures
        set_limit<S, MB, ISUM>();
        return true;
    }();
    (void)configured;
    const unsigned blocks = unsigned((w.n_out + 15) / 16);
    detail::launch_smem(matvec_q6k_pipe_kernel<1, S, MB, ISUM>, blocks, 32 * k_warps, ring_bytes<S>(), s, w, nb, xq, xd,
                        y, y_stride, accumulate ? 1 : 0);
}

// Modes for rows of < 8,192 elements (the output matrix, V) and of >= 8,192 (the down matrix); defaults measured
// (docs/cuda-prefill-batch-log.md): integer sums, 3 stages / 3 blocks per SM for the short rows (session 8, gbq8;
// super-block units, mode 9, were no faster there in session 9), super-block units with 3 stages / 2 blocks for the
// down rows (mode 10, session 9 gbt9: Q4_K_M B=8 +0.6 % against mode 7, 4 stages of halves / 2 blocks).
// MEMTILE_CUDA_Q6K_MODES="SHORT,LONG" (read once) replaces these defaults (A/B of whole runs).
std::pair<int, int> default_modes() {
    static const std::pair<int, int> m = [] {
        std::pair<int, int> d{6, 10};
        if (const char* env = std::getenv("MEMTILE_CUDA_Q6K_MODES"); env && *env) {
            char* end = nullptr;
            const long a = std::strtol(env, &end, 10);
            const long b = end && *end == ',' ? std::strtol(end + 1, nullptr, 10) : -1;
            if (a >= 0 && a <= 10) d.first = int(a);
            if (b >= 0 && b <= 10) d.second = int(b);
        }
        return d;
    }();
    return m;
}
int g_short = default_modes().first, g_long = default_modes().second;

}  // namespace

void set_mma_q6k_pipe(int short_mode, int long_mode) {
    g_short = short_mode >= 0 && short_mode <= 10 ? short_mode : default_modes().first;
    g_long = long_mode >= 0 && long_mode <= 10 ? long_mode : default_modes().second;
}

void prepare_mma_q6k_pipe() {
    set_limit<4, 2>();
    set_limit<4, 3>();
    set_limit<6, 2>();
    set_limit<3, 3>();
    set_limit<3, 4>();
    set_limit<3, 3, true>();
    set_limit<4, 2, true>();
    set_limit<4, 3, true>();
    set_pair_limit<2, 3>();
    set_pair_limit<3, 2>();
}

bool launch_matvec_q6k_pipe(const gpu_weight& w, int nb, const int8_t* xq, const float* xd, float* y, int64_t y_stride,
                            bool accumulate, cudaStream_t s) {
    const int mode = w.n_in >= 8192 ? g_long : g_short;
    // Whole super-block pairs per row (the d pair is one aligned 4-byte copy; scales 8-byte aligned copies).
    if (mode == 0 || w.type != dtype::q6_k || nb < 2 || nb > 8 || w.n_in % 512 != 0) return false;
    if (reinterpret_cast<uintptr_t>(w.q) % 16 != 0 || reinterpret_cast<uintptr_t>(w.d) % 4 != 0 ||
        w.q_row_bytes % 16 != 0)
        return false;
    switch (mode) {
        case 1: launch_sm<4, 2>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 2: launch_sm<4, 3>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 3: launch_sm<6, 2>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 4: launch_sm<3, 3>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 5: launch_sm<3, 4>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 6: launch_sm<3, 3, true>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 7: launch_sm<4, 2, true>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 9: launch_pair<2, 3>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        case 10: launch_pair<3, 2>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
        default: launch_sm<4, 3, true>(w, nb, xq, xd, y, y_stride, accumulate, s); break;
    }
    return true;
}

}  // namespace memtile::cuda
