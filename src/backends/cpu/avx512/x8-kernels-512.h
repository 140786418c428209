// AVX-512 (F, BW, VL, VNNI) kernels of the interleaved x8 layouts (repack.h), decode and prefill, and the kernel set
// they make (k_x8_set). Compiled once per translation unit with that unit's target flags, like simd/x8-common-256.h
// (everything here has internal linkage): matmul-avx512-repack.cpp (isa::avx512) and matmul-avx512-gfni.cpp
// (isa::avx512_gfni, the only unit built with -mgfni, so no GFNI instruction can reach the plain set). Same layouts and
// the same per-row arithmetic as the AVX2 ones (avx2/matmul-avx2-repack.cpp), on 512-bit vectors: one load takes
// two consecutive 32-byte vectors of a group (8 rows x 4 weight bytes each), and the activation quads they meet
// are put in the two 256-bit halves by one vpermd of the block's 32 activation bytes (made once per token and
// block, shared by the G groups of a decode pass). VNNI does the u8 x s8 dot straight into int32 (vpdpbusd: Q8_0
// as w + 128 against q, less 128 * sum(q); Q4_0; Q4_K per sub-block, see q4_k_isums) or fuses the scale multiply
// with the accumulation of the int16 pair sums (vpdpwssd: Q4_K, Q5_K, Q6_K). Each row's int32 sum of a block is the two
// halves added; the integer sums are exact and the float operations after them are those of the AVX2 kernels, so the
// results are the AVX2 path's bit for bit (tests/unit/cpu-matmul-test.cpp checks it), and, as there, the same for every
// NT and G. Half the vector instructions per weight byte of the AVX2 kernels or fewer (Q8_0: 3 per 64 bytes against
// 14). On session 15's AMD Zen 5 (one core reads ~30 GB/s), in-cache products ran 1.4-1.9x the AVX2 kernels' speed and
// the decode from DRAM Q5_K +8-15 %, Q4_K / Q6_K 0-6 %, Q4_0 equal; the Q8_0 decode 5-10 % slower with its 512-bit
// loads, so until session 22 the set took AVX2's Q8_0 decode. Session 22 (docs/cpu.md): with the narrow loads below,
// the AVX-512 Q8_0 decode against AVX2's in-process, medians: Zen 4 +1.0-5.5 % (TinyLlama / Llama-3.2-1B Q8_0, 1
// thread, 8 of 8 pairs), the device host's Xeon (512-bit loads) +18-21 % at 1 thread and +16-30 % at 4. Two sets:
// isa::avx512, and isa::avx512_gfni, whose K-quant kernels take their bit fields out with GFNI affine transforms
// (gf2p8affineqb: a Q4_K / Q5_K high nibble in one instruction instead of a shift and a mask, Q6_K's fourth level
// vector in four instead of seven, Q5_K's fifth bits of a vector pair in one), same bits. On session 17's AMD Zen 4
// (512-bit operations in two halves) in-cache products ran +5-7 % (Q4_K, Q5_K) and +6-12 % (Q6_K) with GFNI, which
// brought them level with the AVX2 kernels (session 18's fifth bits: Q5_K another +6 %); the plain set stays for
// AVX-512 CPUs without GFNI (Skylake-X, Cascade Lake). A pair of vectors is one 64-byte load, although the Q8_0 / Q4_K
// / Q5_K pairs start 32 bytes into a cache line every other time: on session 17's Zen 4 the two aligned halves joined
// by vinserti64x4 (the form before) ran 10-19 % slower in cache and 3-13 % slower in prefill, and the decode from DRAM
// was equal. (Session 15's Zen 5 measured the one load slower in the Q8_0 decode.)
// The decode (gemv_x8_loads) takes two 256-bit loads per pair instead where set_decode_load_width says so (AMD, except
// Q5_K): on session 20's Zen 4 they streamed the weights from DRAM 3-6 % faster although they run slower from L2 (the
// Q8_0 decode with 512-bit loads: -4 to -6 % against AVX2's on session 22's Zen 4).
#pragma once

#include "backends/cpu/avx512/avx512-common.h"
#include "backends/cpu/avx512/x8-levels-512.h"
#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/simd/x8-common-256.h"

namespace memtile::cpu::avx2 {
// The float x32 decode kernels (avx2/matmul-avx2-float-x32.cpp; their prefill is avx512's, avx512-common.h), declared
// here rather than through avx2-common.h so that no AVX2 header code is compiled with the AVX-512 flags.
void gemv_x32_f32(const uint8_t*, size_t, const detail::act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemv_x32_f16(const uint8_t*, size_t, const detail::act_view&, int64_t, float*, int64_t, int64_t, int64_t);
void gemv_x32_bf16(const uint8_t*, size_t, const detail::act_view&, int64_t, float*, int64_t, int64_t, int64_t);
}  // namespace memtile::cpu::avx2

namespace memtile::cpu::avx512 {
namespace {

using simd_x8::bcast_quad;
using simd_x8::load_8_f16;
using simd_x8::q45_k_min_sum;
using simd_x8::q45k_masks;
using simd_x8::store_rows;
using simd_x8::token_rows;

// The 8 activation quads at p (32 bytes) in the low half of a vector, for pick().
__m512i quads(const int8_t* p) {
    return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Quad lo of `quads` in every dword of the low half, quad hi in every dword of the high half.
template <int lo, int hi>
__m512i pick(__m512i quads) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi),
                                    quads);
}

// x[i] = pick<l_i, l_i + gap>: the four pairs of quads a block's four register pairs of weights meet.
template <int gap, int l0, int l1, int l2, int l3>
void pick4(__m512i quads, __m512i* x) {
    x[0] = pick<l0, l0 + gap>(quads);
    x[1] = pick<l1, l1 + gap>(quads);
    x[2] = pick<l2, l2 + gap>(quads);
    x[3] = pick<l3, l3 + gap>(quads);
}

// The low int16 of each dword of lo in its low half and that of hi in its high half (two int32 sums that fit an
// int16, side by side for one vpdpwssd).
__m512i join_int16(__m512i lo, __m512i hi) {
    return _mm512_mask_blend_epi16(0xaaaaaaaau, lo, _mm512_slli_epi32(hi, 16));
}

// Q4_K super-block ib's scaled integer sums, added to isum[g][j] (the same integers as the AVX2 kernel's maddubs /
// madd form, so the same bits): per sub-block and row the 4 nibble vectors go straight into int32 by vpdpbusd
// (16 levels x activations per dword: |sum| <= 16 * 15 * 128 < 2^15, so the dword's low int16 is the sum), then one
// vpdpwssd multiplies it by the scale. One token (decode): the sums of sub-blocks 2p and 2p + 1 share one vpdpwssd,
// the second one's low int16 moved into the high half of each dword (shift and word blend) against scale pairs.
// Several tokens (prefill tiles): one vpdpwssd per sub-block, the scale in the dword's low int16 and zero in the high
// one (the sign extension there then adds nothing), which keeps the tile's registers as many as before. Per
// sub-block, group and token 4 + 1 multiplies and no adds instead of 4 maddubs, 3 adds and a vpdpwssd. Session 19,
// Zen 4, 1 thread, old and new binaries alternated 3 times: in cache (`matrix 2048 256`) 47.6-48.9 -> 59.2-60.0 GB/s
// per CPU-second with GFNI, 43.4-45.6 -> 56.2-57.8 without; TinyLlama Q4_K_M pp64 91.8-99.0 -> 101.4-105.5 tok/s;
// the decode from DRAM within that VM's phase-to-phase spread (docs/cpu.md).
template <bool GF, int NT, int G, bool N>
void q4_k_isums(const uint8_t* const* b, const int8_t* const* q, int64_t ib, __m512i (&isum)[G][NT]) {
    constexpr char z = char(0x80);
    // Rows 0-3 in 128-bit lanes 0 and 2, rows 4-7 in lanes 1 and 3 (the two 256-bit halves hold the same 8 rows).
    // pair: row r's scales of sub-blocks 2p (byte r of the 16 at b + 16 p) and 2p + 1 (byte 8 + r) as the dword's
    // two int16; half h: sub-block 2p + h's scale as its low int16.
    const __m512i pair = _mm512_broadcast_i64x4(_mm256_setr_epi8(0, z, 8, z, 1, z, 9, z, 2, z, 10, z, 3, z, 11, z,  //
                                                                 4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15, z));
    const __m256i low = _mm256_setr_epi8(0, z, z, z, 1, z, z, z, 2, z, z, z, 3, z, z, z,  //
                                         4, z, z, z, 5, z, z, z, 6, z, z, z, 7, z, z, z);
    const __m512i half[2] = {_mm512_broadcast_i64x4(low),
                             _mm512_broadcast_i64x4(_mm256_add_epi8(low, _mm256_set1_epi8(8)))};
    // The levels against the activation pairs x, as int32 per dword.
    auto dot = [](const __m512i* lv, const __m512i* x) {
        __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lv[0], x[0]);
        t = _mm512_dpbusd_epi32(t, lv[1], x[1]);
        t = _mm512_dpbusd_epi32(t, lv[2], x[2]);
        return _mm512_dpbusd_epi32(t, lv[3], x[3]);
    };
    auto scales = [&](int g, int p, __m512i mask) {
        return _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(b[g] + 16 * p))), mask);
    };
    for (int p = 0; p < 4; p++) {
        if constexpr (NT == 1) {
            __m512i part[2][G];
            for (int h = 0; h < 2; h++) {
                const int s = 2 * p + h;
                __m512i x[4];
                pick4<2, 0, 1, 4, 5>(quads(q[0] + ib * 256 + 32 * s), x);
                for (int g = 0; g < G; g++) {
                    __m512i lv[4];
                    nibble_levels<GF, N>(b[g] + 160 + 128 * s, lv);
                    part[h][g] = dot(lv, x);
                }
            }
            for (int g = 0; g < G; g++) {
                isum[g][0] = _mm512_dpwssd_epi32(isum[g][0], join_int16(part[0][g], part[1][g]), scales(g, p, pair));
            }
        } else {
            for (int h = 0; h < 2; h++) {
                const int s = 2 * p + h;
                __m512i x[NT][4];
                for (int j = 0; j < NT; j++) pick4<2, 0, 1, 4, 5>(quads(q[j] + ib * 256 + 32 * s), x[j]);
                for (int g = 0; g < G; g++) {
                    const __m512i sc = scales(g, p, half[h]);
                    __m512i lv[4];
                    nibble_levels<GF, N>(b[g] + 160 + 128 * s, lv);
                    for (int j = 0; j < NT; j++) isum[g][j] = _mm512_dpwssd_epi32(isum[g][j], dot(lv, x[j]), sc);
                }
            }
        }
    }
}

// Q5_K super-block ib's scaled integer sums, added to isum[g][j]. Sub-block s's 4 nibble vectors come as two pairs;
// the low nibbles of pair i are the levels of groups 4i and 4i + 2, the high ones 4i + 1 and 4i + 3 (group g:
// elements 32s + 4g + k); the fifth bits as in q5_levels. Per sub-block and row two vpdpbusd chains of
// two level vectors each (8 levels x activations per dword: |sum| <= 8 * 31 * 128 < 2^15; four would overflow the
// int16 half that q4_k_isums uses), the second chain's int16 moved into the high half of each dword (shift and word
// blend), then one vpdpwssd with the scale in both halves: the same integers as 4 maddubs, 3 adds and a vpdpwssd, one
// operation fewer per token. Session 19, Zen 4, 1 thread, alternated: in cache 42.9-43.3 -> 44.5-44.7 GB/s per
// CPU-second (GFNI), 39.6-40.2 -> 41.3-41.6 (without); TinyLlama Q5_K_S pp64 87.8-88.2 -> 91.2-91.6 tok/s.
template <bool GF, int NT, int G, bool N>
void q5_k_isums(const uint8_t* const* b, const int8_t* const* q, int64_t ib, const __m512i (&sc_mask)[2],
                __m512i (&isum)[G][NT]) {
    for (int s = 0; s < 8; s++) {
        __m512i x[NT][4];
        for (int j = 0; j < NT; j++) {
            pick4<2, 0, 1, 4, 5>(quads(q[j] + ib * 256 + 32 * s), x[j]);
        }
        for (int g = 0; g < G; g++) {
            const __m512i sc = _mm512_shuffle_epi8(
                _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(b[g] + 16 * (s / 2)))),
                sc_mask[s % 2]);
            __m512i lv[4];
            q5_levels<GF, N>(b[g] + 160 + 160 * s, lv);
            for (int j = 0; j < NT; j++) {
                const __m512i t =
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lv[0], x[j][0]), lv[1], x[j][1]);
                const __m512i u =
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lv[2], x[j][2]), lv[3], x[j][3]);
                isum[g][j] = _mm512_dpwssd_epi32(isum[g][j], join_int16(t, u), sc);
            }
        }
    }
}

// Q4_K (high_bit false) and Q5_K (true): layout of the AVX2 q45_k_x8, the integer sums above, the float arithmetic
// (scales, min sums) of the AVX2 kernel.
template <bool high_bit, bool GF, int NT, int G, bool N>
void q45_k_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
              int64_t n_out) {
    constexpr int64_t bytes = high_bit ? 1440 : 1184;
    const int64_t nb = a.n_in / 256;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 256);
    const auto [sc_even, sc_odd] = q45k_masks();
    const __m512i sc_mask[2] = {_mm512_broadcast_i64x4(sc_even), _mm512_broadcast_i64x4(sc_odd)};  // Q5_K
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        __m512i isum[G][NT];
        for (int g = 0; g < G; g++) {
            b[g] = gp[g] + ib * bytes;
            for (int j = 0; j < NT; j++) isum[g][j] = _mm512_setzero_si512();
        }
        if constexpr (high_bit)
            q5_k_isums<GF, NT, G, N>(b, q, ib, sc_mask, isum);
        else
            q4_k_isums<GF, NT, G, N>(b, q, ib, isum);
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(b[g] + 128), dmw = load_8_f16(b[g] + 144);
            for (int j = 0; j < NT; j++) {
                const __m256i msum = q45_k_min_sum(b[g], bs[j] + ib * 16);
                const __m256 da = _mm256_set1_ps(d[j][ib]);
                acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(isum[g][j])), _mm256_mul_ps(dw, da), acc[g][j]);
                acc[g][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[g][j]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0[g], n_out);
}

// Q6_K; layout and arithmetic of the AVX2 q6_k_x8. The two 16-element sub-blocks 2c and 2c + 1 go side by side:
// vector k (k < 3) of both in one register (low half 2c), their scales in the matching halves.
template <bool GF, int NT, int G, bool N>
void q6_k_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
             int64_t n_out) {
    constexpr int64_t bytes = 1696;
    const int64_t nb = a.n_in / 256;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 256);
    // Low half: the int16 scale of sub-block 2c (lane 0 of each dword of spair) in both lanes of the dword; high
    // half: that of 2c + 1 (lane 1).
    const __m256i sc_lo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,  //
                                           0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m512i sc_mask =
        _mm512_inserti64x4(_mm512_castsi256_si512(sc_lo), _mm256_add_epi8(sc_lo, _mm256_set1_epi8(2)), 1);
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        __m512i isum[G][NT];
        __m256i off[G][NT];
        for (int g = 0; g < G; g++) {
            b[g] = gp[g] + ib * bytes;
            for (int j = 0; j < NT; j++) {
                isum[g][j] = _mm512_setzero_si512();
                off[g][j] = _mm256_setzero_si256();
            }
        }
        for (int c = 0; c < 8; c++) {
            __m256i spair[G];
            for (int g = 0; g < G; g++)
                spair[g] = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b[g] + 16 * c)));
            __m512i x[NT][4];
            for (int j = 0; j < NT; j++) {
                int32_t bpair;
                std::memcpy(&bpair, bs[j] + ib * 16 + 2 * c, 4);
                for (int g = 0; g < G; g++)
                    off[g][j] = _mm256_add_epi32(off[g][j], _mm256_madd_epi16(spair[g], _mm256_set1_epi32(bpair)));
                pick4<4, 0, 1, 2, 3>(quads(q[j] + ib * 256 + 32 * c), x[j]);
            }
            for (int g = 0; g < G; g++) {
                const __m512i sc = _mm512_shuffle_epi8(_mm512_broadcast_i64x4(spair[g]), sc_mask);
                const uint8_t* v = b[g] + 160 + 192 * c;
                __m512i lv[4];
                q6_levels<GF, N>(v, lv);
                for (int j = 0; j < NT; j++) {
                    const __m512i s0 =
                        _mm512_add_epi16(_mm512_maddubs_epi16(lv[0], x[j][0]), _mm512_maddubs_epi16(lv[1], x[j][1]));
                    const __m512i s1 =
                        _mm512_add_epi16(_mm512_maddubs_epi16(lv[2], x[j][2]), _mm512_maddubs_epi16(lv[3], x[j][3]));
                    isum[g][j] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[g][j], s0, sc), s1, sc);
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(b[g] + 128);
            for (int j = 0; j < NT; j++) {
                const __m256i net = _mm256_sub_epi32(fold(isum[g][j]), _mm256_slli_epi32(off[g][j], 5));
                acc[g][j] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(net), _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0[g], n_out);
}

// Q4_0 (pairs of blocks, 288 bytes); layout and float arithmetic of the AVX2 q4_0_x8: vpdpbusd of the stored levels
// (w + 8) against q, less 8 * sum(q) (the block's two activation group sums). The low nibbles of pair i are the
// elements of quads 4i and 4i + 2 of the block, the high ones 4i + 1 and 4i + 3.
template <int NT, int G, bool N>
void q4_0_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
             int64_t n_out) {
    constexpr int64_t pair_bytes = 288, block_bytes = 128;
    const int64_t nb = a.n_in / 32;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 32);
    __m256 acc[G][NT][2];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j][0] = acc[g][j][1] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const int64_t pair = (ib / 2) * pair_bytes, off = pair + 32 + (ib % 2) * block_bytes;
        __m512i x[NT][4];
        for (int j = 0; j < NT; j++) pick4<2, 0, 1, 4, 5>(quads(q[j] + ib * 32), x[j]);
        __m512i sum[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) sum[g][j] = _mm512_setzero_si512();
        for (int i = 0; i < 4; i += 2) {
            for (int g = 0; g < G; g++) {
                const __m512i w = load_pair<N>(gp[g] + off + 32 * i);
                const __m512i lo = and8(w, 0x0f), hi = and8(_mm512_srli_epi16(w, 4), 0x0f);
                for (int j = 0; j < NT; j++)
                    sum[g][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum[g][j], lo, x[j][i]), hi, x[j][i + 1]);
            }
        }
        __m256i bias[NT];  // 8 times the block's activation sum, per token
        for (int j = 0; j < NT; j++) bias[j] = _mm256_set1_epi32(8 * (int32_t(bs[j][2 * ib]) + bs[j][2 * ib + 1]));
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(gp[g] + pair + (ib % 2) * 16);
            for (int j = 0; j < NT; j++) {
                const __m256i net = _mm256_sub_epi32(fold(sum[g][j]), bias[j]);
                acc[g][j][ib % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(net),
                                                    _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j][ib % 2]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(_mm256_add_ps(acc[g][j][0], acc[g][j][1]), y[j], o0[g], n_out);
}

// Q8_0 (pairs of blocks, 544 bytes; the prefill tiles and their tails, and the decode where set_decode_load_width asks
// for 512-bit loads): vpdpbusd of w + 128 (w xor 0x80) against q, less 128 * sum(q) (the block's two activation group
// sums). One 64-byte load holds vector v of both blocks of a pair (repack.h), so each 256-bit half accumulates its own
// block's whole dot product and no fold is needed, and the offset, conversion, scale and FMA run once per pair on
// 512-bit vectors whose low half is the AVX2 q8_0_x8's even-block accumulator and whose high half its odd one: lane for
// lane the same operations in the same order, so the same bits. An odd last block runs in the low half alone (masked
// FMA). Against one block per register (each 64-byte load two vectors of a block, then a fold per block and token),
// session 19, Zen 4, 1 thread, processes alternated 3 times: TinyLlama Q8_0 pp64 95.0-100.6 -> 110.7-113.0 tok/s,
// Llama-3.2-1B 102.5-103.8 -> 110.0-115.9; the AVX2 decode on the new layout unchanged (in cache 52-54 GB/s per
// CPU-second either way).
template <int NT, int G>
void q8_0_x8_pairs(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
                   int64_t n_out) {
    constexpr int64_t pair_bytes = 544;
    const int64_t nb = a.n_in / 32;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 32);
    // Quad v of the low 32 activation bytes in the low half, quad v of the high 32 in the high half.
    const __m512i pick0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8);
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    __m512 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const bool both = ib + 1 < nb;
        const int64_t pair = (ib / 2) * pair_bytes;
        __m512i act[NT];
        for (int j = 0; j < NT; j++)
            act[j] = both
                         ? _mm512_loadu_si512(q[j] + ib * 32)
                         : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[j] + ib * 32)));
        __m512i sum[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) sum[g][j] = _mm512_setzero_si512();
        for (int v = 0; v < 8; v++) {
            const __m512i idx = _mm512_add_epi32(pick0, _mm512_set1_epi32(v));
            __m512i x[NT];
            for (int j = 0; j < NT; j++) x[j] = _mm512_permutexvar_epi32(idx, act[j]);
            for (int g = 0; g < G; g++) {
                const __m512i u = _mm512_xor_si512(load_pair(gp[g] + pair + 32 + 64 * v), flip);
                for (int j = 0; j < NT; j++) sum[g][j] = _mm512_dpbusd_epi32(sum[g][j], u, x[j]);
            }
        }
        __m512i bias[NT];  // 128 times each block's activation sum
        __m512 dd[NT];     // each block's activation scale
        for (int j = 0; j < NT; j++) {
            const int32_t b0 = 128 * (int32_t(bs[j][2 * ib]) + bs[j][2 * ib + 1]);
            const int32_t b1 = both ? 128 * (int32_t(bs[j][2 * ib + 2]) + bs[j][2 * ib + 3]) : 0;
            bias[j] = _mm512_inserti64x4(_mm512_set1_epi32(b0), _mm256_set1_epi32(b1), 1);
            dd[j] = _mm512_insertf32x8(_mm512_set1_ps(d[j][ib]), _mm256_set1_ps(both ? d[j][ib + 1] : 0.0f), 1);
        }
        const __mmask16 lanes = both ? 0xffff : 0x00ff;
        for (int g = 0; g < G; g++) {
            // The two blocks' 8 row scales (f16) lie side by side at the start of the pair.
            const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(gp[g] + pair)));
            for (int j = 0; j < NT; j++)
                acc[g][j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum[g][j], bias[j])),
                                                  _mm512_mul_ps(dw, dd[j]), acc[g][j], lanes);
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++)
            store_rows(_mm256_add_ps(_mm512_castps512_ps256(acc[g][j]), _mm512_extractf32x8_ps(acc[g][j], 1)), y[j],
                       o0[g], n_out);
}

// The Q8_0 decode on 256-bit vectors (one token; set_decode_load_width 256, the default for Q8_0): q8_0_x8_pairs'
// lanes with each 512-bit vector split in its halves, i.e. block 2i's accumulator and block 2i + 1's in registers of
// their own, each activation quad broadcast from memory; lane for lane the same operations in the same order, so the
// same bits. Why: 512-bit VNNI / FMA work lowers the core clock on Intel (session 41: a chain of imul beside
// independent vpdpbusd ran at 3.28-3.36 GHz with zmm and 3.55 with ymm or none), although the ymm form has twice the
// vector instructions. From DRAM it pays with two group streams (the default for it except on AMD,
// default_decode_streams): in-process on that Xeon, tg32, medians of 5 rounds, against the 512-bit kernel at four
// streams, 1 thread TinyLlama Q8_0 14.00 -> 14.70 tok/s, Llama-3.2-1B 11.87 -> 12.63, 2 threads 26.75 -> 28.67 and
// 23.14 -> 23.68; at four streams it moved between level and +4 % over six runs (docs/cpu.md, session 41).
template <int G>
void q8_0_x8_decode_256(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y,
                        const int64_t* o0, int64_t n_out) {
    constexpr int64_t pair_bytes = 544;
    const int64_t nb = a.n_in / 32;
    const auto& [q, d, bs] = token_rows<1>(a, tok, 32);
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    // Vector v (8 rows x 4 bytes) of group g's block `half` of the pair at byte `pair`, as w + 128.
    auto weights = [&](int g, int64_t pair, int v, int half) {
        return _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gp[g] + pair + 32 + 64 * v + 32 * half)), flip);
    };
    __m256 acc_a[G], acc_b[G];  // even and odd blocks, [8 rows] f32 each
    for (int g = 0; g < G; g++) acc_a[g] = acc_b[g] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const bool both = ib + 1 < nb;
        const int64_t pair = (ib / 2) * pair_bytes;
        const int8_t* x = q[0] + ib * 32;  // the pair's activations: block ib, then ib + 1
        __m256i sa[G], sb[G];
        for (int g = 0; g < G; g++) sa[g] = sb[g] = _mm256_setzero_si256();
        // Both halves of a group's 64 bytes one after the other, the two blocks in separate loops: two other
        // arrangements of the same operations (the second block under a test inside one loop; a helper over both)
        // ran level with the 512-bit kernel (TinyLlama Q8_0, 1 thread, in-process).
        if (both) {
            for (int v = 0; v < 8; v++) {
                const __m256i xa = bcast_quad(x + 4 * v), xb = bcast_quad(x + 32 + 4 * v);
                for (int g = 0; g < G; g++) {
                    sa[g] = _mm256_dpbusd_epi32(sa[g], weights(g, pair, v, 0), xa);
                    sb[g] = _mm256_dpbusd_epi32(sb[g], weights(g, pair, v, 1), xb);
                }
            }
        } else {
            for (int v = 0; v < 8; v++) {
                const __m256i xa = bcast_quad(x + 4 * v);
                for (int g = 0; g < G; g++) sa[g] = _mm256_dpbusd_epi32(sa[g], weights(g, pair, v, 0), xa);
            }
        }
        // (sum - 128 * the block's activation sums) * (row scale * activation scale), into the block's accumulator.
        const __m256i bias_a = _mm256_set1_epi32(128 * (int32_t(bs[0][2 * ib]) + bs[0][2 * ib + 1]));
        const __m256 da = _mm256_set1_ps(d[0][ib]);
        for (int g = 0; g < G; g++)
            acc_a[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sa[g], bias_a)),
                                       _mm256_mul_ps(load_8_f16(gp[g] + pair), da), acc_a[g]);
        if (both) {
            const __m256i bias_b = _mm256_set1_epi32(128 * (int32_t(bs[0][2 * ib + 2]) + bs[0][2 * ib + 3]));
            const __m256 db = _mm256_set1_ps(d[0][ib + 1]);
            for (int g = 0; g < G; g++)
                acc_b[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sb[g], bias_b)),
                                           _mm256_mul_ps(load_8_f16(gp[g] + pair + 16), db), acc_b[g]);
        }
    }
    for (int g = 0; g < G; g++) store_rows(_mm256_add_ps(acc_a[g], acc_b[g]), y[0], o0[g], n_out);
}

// The kernel policy of simd/x8-common-256.h's drivers for format T; N: narrow weight loads (load_pair).
template <dtype T, bool GF = false, bool N = false>
struct x8 {
    static constexpr dtype type = T;
    // Prefill tiles of 4 tokens over two groups at once, so each activation permute serves both (session 17, Zen 4,
    // 1 / 2 threads: TinyLlama Q8_0 pp64 +19 % / +33 %, Q4_K_M +4-10 %, Q6_K / Q5_K +6-8 %; three groups no better).
    static constexpr int prefill_groups = 2;
    template <int NT, int G>
    static void run(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
                    int64_t n) {
        if constexpr (T == dtype::q4_k || T == dtype::q5_k)
            q45_k_x8<T == dtype::q5_k, GF, NT, G, N>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q6_k)
            q6_k_x8<GF, NT, G, N>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q8_0 && NT == 1 && N)
            q8_0_x8_decode_256<G>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q8_0)
            q8_0_x8_pairs<NT, G>(gp, a, tok, y, o0, n);
        else
            q4_0_x8<NT, G, N>(gp, a, tok, y, o0, n);
    }
};

using simd_x8::gemm_x8;
using simd_x8::gemv_x8;

// The decode of format T (gemv_x8_fn): narrow weight loads where set_decode_load_width asks for them, read once per
// call. Prefill keeps the 512-bit loads: its tiles reuse each group's bytes from L1 / L2 several times.
template <dtype T, bool GF>
void gemv_x8_loads(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* y, int64_t n_out,
                   int64_t g0, int64_t g1) {
    if (detail::decode_narrow_loads(T))
        gemv_x8<x8<T, GF, true>>(packed, group_bytes, a, t, y, n_out, g0, g1);
    else
        gemv_x8<x8<T, GF, false>>(packed, group_bytes, a, t, y, n_out, g0, g1);
}

// Q8_0, Q4_0 and K-quant prefill: the whole tiles of 16 tokens on AMX where cpu::amx_usable()
// (matmul-avx512-amx.cpp, the same bits), the rest by the VNNI tiles.
template <dtype T, bool GF>
void gemm_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
              int64_t n_out, int64_t g0, int64_t g1) {
    const int64_t amx = cpu::amx_usable() ? (t1 - t0) / 16 * 16 : 0;
    if (amx > 0) {
        if constexpr (T == dtype::q8_0)
            gemm_q8_0_amx(packed, group_bytes, a, t0, t0 + amx, y, n_out, g0, g1);
        else if constexpr (T == dtype::q4_0)
            gemm_q4_0_amx(packed, group_bytes, a, t0, t0 + amx, y, n_out, g0, g1);
        else if constexpr (T == dtype::q4_k)
            gemm_q4_k_amx(packed, group_bytes, a, t0, t0 + amx, y, n_out, g0, g1);
        else if constexpr (T == dtype::q5_k)
            gemm_q5_k_amx(packed, group_bytes, a, t0, t0 + amx, y, n_out, g0, g1);
        else
            gemm_q6_k_amx(packed, group_bytes, a, t0, t0 + amx, y, n_out, g0, g1);
    }
    gemm_x8<x8<T, GF>>(packed, group_bytes, a, t0 + amx, t1, y, n_out, g0, g1);
}

// The set of the x8 and x32 layouts; GF: the K-quant kernels unpack with GFNI (only in a unit built with -mgfni).
template <bool GF>
const detail::repack_kernel_set k_x8_set = {
    gemv_x8_loads<dtype::q8_0, GF>,
    gemv_x8_loads<dtype::q4_0, GF>,
    gemv_x8_loads<dtype::q4_k, GF>,
    gemv_x8_loads<dtype::q5_k, GF>,
    gemv_x8_loads<dtype::q6_k, GF>,
    avx2::gemv_x32_f32,
    avx2::gemv_x32_f16,
    avx2::gemv_x32_bf16,
    gemm_amx<dtype::q8_0, GF>,
    gemm_amx<dtype::q4_0, GF>,
    gemm_amx<dtype::q4_k, GF>,
    gemm_amx<dtype::q5_k, GF>,
    gemm_amx<dtype::q6_k, GF>,
    gemm_x32_f32,
    gemm_x32_f16,
    gemm_x32_bf16,
};

}  // namespace
}  // namespace memtile::cpu::avx512
