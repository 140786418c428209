// Integer-dot kernels on 256-bit vectors shared by the AVX2 and the AVX-512 (VL + VNNI) paths: Q8_0 and
// Q4_0 against Q8_0 activations, Q4_K, Q5_K and Q6_K against Q8_K activations (SoA layout of kernels.h).
// The kernels are templates on an `Ops` policy holding the only ISA-specific step, the u8 x s8 dot:
//   Ops::dot_u8s8(u, s)                  -> 8 int32 lanes, each the sum of 4 adjacent u8 * s8 products
//   Ops::dot_u8s8_scaled(acc, u, s, sc)  -> acc + sum over adjacent pairs of (16-bit pair sums * sc lanes)
// AVX2 does them with maddubs + madd (+ add); AVX-512 VNNI with vpdpbusd / maddubs + vpdpwssd.
//
// Everything here has internal linkage (unnamed namespace): this header is compiled once per ISA with that
// ISA's target flags, and shared inline symbols would let the linker pick one ISA's copy for another's caller.
//
// Q8_0/Q4_0: maddubs multiplies unsigned by signed bytes, so it is fed |w| and q carrying w's sign (vpsignb);
// both stay within +-127 (Q4_0 levels are -8..7), so 16-bit pair sums cannot saturate. Each block's int32
// partial sums are scaled by d_w * d_q in float and accumulated; one horizontal sum per row and token.
// K formats: per 256-element super-block and token the unsigned weight levels (0..15, 0..31, 0..63) meet the
// signed activation levels in maddubs (pair sums at most 2 * 63 * 127), are scaled per sub-block in int32,
// summed over the super-block and converted to float once: sum += d_w * d_q * isum. The min (Q4_K/Q5_K) or
// -32 offset (Q6_K) terms only need the activation group sums (bsums): one madd per super-block.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace memtile::cpu::simd256 {
namespace {

using detail::act_view;

[[maybe_unused]] float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

[[maybe_unused]] int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

__m256i loadu(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Broadcasts int16 lane k of each 128-bit half to the 8 lanes of that half.
__m256i bcast_i16_lane(__m256i v, int k) {
    const char lo = char(2 * k), hi = char(2 * k + 1);
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                                                   hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi));
}

constexpr int k_block = 32;

// Block layouts (see quant/quant-formats.h): Q8_0 = f16 d + 32 int8; Q4_0 = f16 d + 16 bytes of nibbles,
// element j in the low nibble of byte j and element j + 16 in its high nibble.
struct q8_0_weights {
    static constexpr int bytes = 34;
    static __m256i levels(const uint8_t* b) { return loadu(b + 2); }
};

struct q4_0_weights {
    static constexpr int bytes = 18;
    static __m256i levels(const uint8_t* b) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    }
};

// Decode (nt = 1) spreads consecutive blocks over four accumulators: one chain of dependent FMAs per block
// would otherwise cap the rate at one block per FMA latency, below the memory stream.
template <class W, class Ops>
struct legacy_kernel {
    static constexpr int tile = 4;

    template <int nt, int u>
    static void block(const uint8_t* row, int64_t ib, const int8_t* const* q, const float* const* d, __m256 (*acc)[u],
                      int k) {
        const uint8_t* b = row + ib * W::bytes;
        const __m256i w = W::levels(b);
        const __m256i aw = _mm256_abs_epi8(w);
        const float dw = load_f16(b);
        for (int j = 0; j < nt; j++) {
            const __m256i p = Ops::dot_u8s8(aw, _mm256_sign_epi8(loadu(q[j] + ib * k_block), w));
            acc[j][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * d[j][ib]), acc[j][k]);
        }
    }

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        constexpr int u = 4;  // the same for every nt: a token's sum must not depend on its batch
        const int64_t nb = a.n_in / k_block;
        const int8_t* q[nt];
        const float* d[nt];
        __m256 acc[nt][u];
        for (int j = 0; j < nt; j++) {
            q[j] = a.qs + (t0 + j) * a.n_in;
            d[j] = a.d + (t0 + j) * nb;
            for (int k = 0; k < u; k++) acc[j][k] = _mm256_setzero_ps();
        }
        int64_t ib = 0;
        for (; ib + u <= nb; ib += u)
            for (int k = 0; k < u; k++) block<nt, u>(row, ib + k, q, d, acc, k);
        for (; ib < nb; ib++) block<nt, u>(row, ib, q, d, acc, 0);
        for (int j = 0; j < nt; j++) {
            for (int k = 1; k < u; k++) acc[j][0] = _mm256_add_ps(acc[j][0], acc[j][k]);
            out[j] = hsum(acc[j][0]);
        }
    }
};

constexpr int k_super = 256;

// The 12 packed bytes of Q4_K/Q5_K scales as 16 int16 lanes: scales 0..7 in the low half, mins 0..7 in the
// high half (layout in quant-formats.h, unpack_scale_min_k4). With u0..u2 the three packed dwords:
//   scales 0..3 = u0 & 0x3f,  scales 4..7 = (u2 & 0x0f) | ((u0 >> 6) << 4)
//   mins   0..3 = u1 & 0x3f,  mins   4..7 = (u2 >> 4)  | ((u1 >> 6) << 4)      (per byte)
// computed in SIMD registers so no scalar-to-vector transfer sits on the path. Reads 16 bytes; the block
// continues after the scales, so the 4 extra bytes are in bounds.
__m256i unpack_scales_mins(const uint8_t* packed) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
    const __m128i low_src = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // u0 u2 u1 u2
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(low_src, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i high_src = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // u0 u0 u1 u1
    const __m128i high = _mm_and_si128(_mm_srli_epi32(high_src, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm256_cvtepu8_epi16(_mm_or_si128(low, high));
}

// The two f16 values at p (d, dmin) as floats in lanes 0 and 1.
__m128 load_two_f16(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

// Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes scales, 128 bytes qs. Q5_K (176 bytes): the same with 32
// bytes qh (bit s of qh[l] = bit 4 of element 32s + l) before qs.
template <bool high_bit, class Ops>
struct q45_k_kernel {
    static constexpr int tile = 4;
    static constexpr int bytes = high_bit ? 176 : 144;
    static constexpr int qs_offset = high_bit ? 48 : 16;

    // Bit s of each byte of qh moved to bit 4 (value 16).
    static __m256i high_bits(__m256i qh, int s) {
        const __m256i m =
            s <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - s)) : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(s - 4));
        return _mm256_and_si256(m, _mm256_set1_epi8(0x10));
    }

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        const int64_t nb = a.n_in / k_super;
        const int8_t* q[nt];
        const float* d[nt];
        const int16_t* bs[nt];
        __m256 acc[nt];
        for (int j = 0; j < nt; j++) {
            q[j] = a.qs + (t0 + j) * a.n_in;
            d[j] = a.d + (t0 + j) * nb;
            bs[j] = a.bsums + (t0 + j) * (a.n_in / 16);
            acc[j] = _mm256_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t* b = row + ib * bytes;
            const __m128 dmin2 = load_two_f16(b);  // d, dmin
            const __m256i sm = unpack_scales_mins(b + 4);
            const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);
            // Each min repeated for the two 16-element groups of its 32-element sub-block.
            const __m128i mins = _mm256_extracti128_si256(sm, 1);
            const __m256i mins2 = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
            const __m256i qh = high_bit ? loadu(b + 16) : _mm256_setzero_si256();
            __m256i isum[nt];
            for (int j = 0; j < nt; j++) isum[j] = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {  // 64 elements: sub-blocks 2c (low nibbles) and 2c + 1 (high)
                const __m256i raw = loadu(b + qs_offset + 32 * c);
                __m256i lo = _mm256_and_si256(raw, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                if (high_bit) {
                    lo = _mm256_or_si256(lo, high_bits(qh, 2 * c));
                    hi = _mm256_or_si256(hi, high_bits(qh, 2 * c + 1));
                }
                const __m256i s_lo = bcast_i16_lane(scales, 2 * c);
                const __m256i s_hi = bcast_i16_lane(scales, 2 * c + 1);
                for (int j = 0; j < nt; j++) {
                    const int8_t* qb = q[j] + ib * k_super + 64 * c;
                    isum[j] = Ops::dot_u8s8_scaled(isum[j], lo, loadu(qb), s_lo);
                    isum[j] = Ops::dot_u8s8_scaled(isum[j], hi, loadu(qb + 32), s_hi);
                }
            }
            for (int j = 0; j < nt; j++) {
                const __m128 s = _mm_mul_ps(dmin2, _mm_set1_ps(d[j][ib]));
                const __m256i msum = _mm256_madd_epi16(loadu(bs[j] + ib * 16), mins2);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_broadcastss_ps(s), acc[j]);
                acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_broadcastss_ps(_mm_movehdup_ps(s)), acc[j]);
            }
        }
        for (int j = 0; j < nt; j++) out[j] = hsum(acc[j]);
    }
};

// Q6_K (210 bytes): ql[128], qh[64], int8 scales[16], f16 d. In half h, 32-byte vectors of ql at 64h and
// 64h + 32 and of qh at 32h give four 32-element runs (see quant-formats.h); run k of half h covers the
// 16-element sub-blocks 8h + 2k and 8h + 2k + 1, i.e. the two 128-bit halves of the maddubs result.
template <class Ops>
struct q6_k_kernel {
    static constexpr int tile = 4;
    static constexpr int bytes = 210;

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        const int64_t nb = a.n_in / k_super;
        const int8_t* q[nt];
        const float* d[nt];
        const int16_t* bs[nt];
        __m256 acc[nt];
        for (int j = 0; j < nt; j++) {
            q[j] = a.qs + (t0 + j) * a.n_in;
            d[j] = a.d + (t0 + j) * nb;
            bs[j] = a.bsums + (t0 + j) * (a.n_in / 16);
            acc[j] = _mm256_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
        // Picks int16 lane 0 of each dword into the low half and lane 1 into the high half.
        const __m256i pair_mask = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                                   2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t* b = row + ib * bytes;
            const float dw = load_f16(b + 208);
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
            __m256i isum[nt];
            for (int j = 0; j < nt; j++) isum[j] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = loadu(b + 64 * h), ql1 = loadu(b + 64 * h + 32), qh = loadu(b + 128 + 32 * h);
                const __m256i run[4] = {
                    _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                };
                for (int k = 0; k < 4; k++) {
                    // Dword 4h + k of sc holds the scales of sub-blocks 8h + 2k and 8h + 2k + 1.
                    const __m256i pair = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(4 * h + k));
                    const __m256i s = _mm256_shuffle_epi8(pair, pair_mask);
                    for (int j = 0; j < nt; j++) {
                        const int8_t* qb = q[j] + ib * k_super + 128 * h + 32 * k;
                        isum[j] = Ops::dot_u8s8_scaled(isum[j], run[k], loadu(qb), s);
                    }
                }
            }
            for (int j = 0; j < nt; j++) {
                // Levels are stored + 32: subtract 32 * sum_s scale[s] * bsum[s].
                const __m256i off = _mm256_madd_epi16(sc, loadu(bs[j] + ib * 16));
                const __m256i net = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(off, 5));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(net), _mm256_set1_ps(dw * d[j][ib]), acc[j]);
            }
        }
        for (int j = 0; j < nt; j++) out[j] = hsum(acc[j]);
    }
};

}  // namespace
}  // namespace memtile::cpu::simd256
