// The level vectors of the interleaved x8 layouts (repack.h) on 512-bit registers: the helpers that take a group's
// weights apart, shared by the VNNI kernels (x8-kernels-512.h) and the AMX prefill (matmul-avx512-amx.cpp). Internal
// linkage, compiled once per unit with that unit's target flags, like simd/x8-common-256.h; the GFNI forms (GF) only
// in a unit built with -mgfni.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace memtile::cpu::avx512 {
namespace {

// Vectors v and v + 1 of a group (64 bytes from p, 32-byte aligned): one 512-bit load, or with N (narrow, the decode
// where set_decode_load_width asks for it) two 256-bit loads joined by vinserti64x4 (see the top).
template <bool N = false>
__m512i load_pair(const uint8_t* p) {
    if constexpr (N)
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)), 1);
    else
        return _mm512_loadu_si512(p);
}

// Row r's int32 sum of the two halves in dword r.
__m256i fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

__m512i and8(__m512i v, int mask) {
    return _mm512_and_si512(v, _mm512_set1_epi8(char(mask)));
}

// The high nibble of every byte, (v >> 4) & 15: one GF(2) affine transform with GFNI, a shift and a mask without.
template <bool GF>
__m512i high_nibbles(__m512i v) {
    if constexpr (GF)
        return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000), 0);
    else
        return and8(_mm512_srli_epi16(v, 4), 0x0f);
}

// Bit a of every byte in the low half and bit b in the high half moved to bit 4, the other bits zero (the Q5_K fifth
// bits of a level vector pair; output bit i of gf2p8affineqb is the parity of matrix byte 7 - i and the input).
template <int a, int b>
__m512i fifth_bits(__m512i qh) {
    const __m512i m = _mm512_inserti64x4(_mm512_set1_epi64(int64_t(uint64_t(1u << a) << 24)),
                                         _mm256_set1_epi64x(int64_t(uint64_t(1u << b) << 24)), 1);
    return _mm512_gf2p8affine_epi64_epi8(qh, m, 0);
}

// 16-bit shift left by n (right by -n), as the AVX2 kernels' shift_bits.
__m512i shift_bits(__m512i v, int n) {
    return n > 0 ? _mm512_slli_epi16(v, unsigned(n)) : n < 0 ? _mm512_srli_epi16(v, unsigned(-n)) : v;
}

// The 4 level vectors of a Q4_K / Q5_K sub-block at v (the low and high nibbles of its two vector pairs, in the order
// of pick4's activation pairs).
template <bool GF, bool N>
void nibble_levels(const uint8_t* v, __m512i* lv) {
    const __m512i p0 = load_pair<N>(v), p1 = load_pair<N>(v + 64);
    lv[0] = and8(p0, 0x0f);
    lv[1] = high_nibbles<GF>(p0);
    lv[2] = and8(p1, 0x0f);
    lv[3] = high_nibbles<GF>(p1);
}

// The 4 level vectors of a Q5_K sub-block at v (nibble_levels' order), each level's fifth bit from the sub-block's qh
// vector at v + 128: group g's fifth bit is bit g of qh (without GFNI: the high half of qh2 is qh shifted right by 2,
// so one shift by 4 - g serves groups g and g + 2).
template <bool GF, bool N>
void q5_levels(const uint8_t* v, __m512i* lv) {
    nibble_levels<GF, N>(v, lv);
    if constexpr (GF) {
        // One affine transform of the broadcast qh per level vector puts its fifth bits at bit 4.
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(v + 128)));
        lv[0] = _mm512_or_si512(lv[0], fifth_bits<0, 2>(qh));
        lv[1] = _mm512_or_si512(lv[1], fifth_bits<1, 3>(qh));
        lv[2] = _mm512_or_si512(lv[2], fifth_bits<4, 6>(qh));
        lv[3] = _mm512_or_si512(lv[3], fifth_bits<5, 7>(qh));
    } else {
        const __m256i qh = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 128));
        const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i bit4 = _mm512_set1_epi8(0x10);
        constexpr int first_group[4] = {0, 1, 4, 5};
        // lv | (shifted & 0x10)
        for (int i = 0; i < 4; i++)
            lv[i] = _mm512_ternarylogic_epi32(lv[i], shift_bits(qh2, 4 - first_group[i]), bit4, 0xf8);
    }
}

// Bits 6-7 of every byte moved to bits `to` and `to` + 1, the other bits zero (Q6_K's fourth level vector).
template <int to>
__m512i top_pair_gf(__m512i v) {
    constexpr uint64_t m = (uint64_t(0x40) << (8 * (7 - to))) | (uint64_t(0x80) << (8 * (6 - to)));
    return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(int64_t(m)), 0);
}

// The 4 level vectors of a Q6_K chunk of two 16-element sub-blocks at v (3 vector pairs; sub-block 2c in the low
// halves, 2c + 1 in the high ones): vectors 0-2 are the pairs' low 6 bits, vector 3 gathers their bits 6-7 (pair k's
// at bits 2k and 2k + 1), as the AVX2 kernel.
template <bool GF, bool N>
void q6_levels(const uint8_t* v, __m512i* lv) {
    const __m512i p[3] = {load_pair<N>(v), load_pair<N>(v + 64), load_pair<N>(v + 128)};
    if constexpr (GF) {
        lv[3] = _mm512_ternarylogic_epi32(top_pair_gf<0>(p[0]), top_pair_gf<2>(p[1]), top_pair_gf<4>(p[2]), 0xfe);
    } else {
        const __m512i t = _mm512_ternarylogic_epi32(_mm512_srli_epi16(and8(p[0], 0xc0), 4),
                                                    _mm512_srli_epi16(and8(p[1], 0xc0), 2), and8(p[2], 0xc0), 0xfe);
        lv[3] = _mm512_srli_epi16(t, 2);
    }
    for (int k = 0; k < 3; k++) lv[k] = and8(p[k], 0x3f);
}

}  // namespace
}  // namespace memtile::cpu::avx512
