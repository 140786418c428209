// What the AVX2 and AVX-512 kernels of the interleaved x8 layouts (repack.h) share: 256-bit helpers of the
// layouts (one f32 / int32 lane per row of an 8-row group) and the drivers that walk a matrix's groups for decode
// (several group streams per thread, set_decode_streams) and prefill (tiles of up to 4 tokens per group).
//
// Everything here has internal linkage (unnamed namespace), for the reason given in int8-kernels-256.h: this
// header is compiled once per ISA with that ISA's target flags.
//
// Kernel policy K of the drivers: K::type (the weight format) and
//   K::run<NT, G>(gp, a, tok, y, o0, n_out)
// the dot products of NT tokens (tok[0..NT), results to y[j][o0[g] + r]) with G groups (gp[0..G)) of 8 rows, rows
// below n_out only; NT == 1 or G == 1, unless the policy sets K::prefill_groups (G groups per prefill call, NT up to 4
// with them). Contract shared by every kernel: each row's operations do not depend on NT or G, so decode (NT 1, G
// streams) and prefill (NT up to 4, G 1 or K::prefill_groups) give the same bits for a token (the batch-invariance
// rule of avx2/gemm-avx2.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace memtile::cpu::simd_x8 {
namespace {

using detail::act_view;

[[maybe_unused]] __m256 load_8_f16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 4 activation bytes at p in every dword (one broadcast load).
[[maybe_unused]] __m256i bcast_quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Stores lane r of v to y[o0 + r] for the rows below n_out.
[[maybe_unused]] void store_rows(__m256 v, float* y, int64_t o0, int64_t n_out) {
    if (o0 + 8 <= n_out) {
        _mm256_storeu_ps(y + o0, v);
        return;
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (int64_t r = 0; o0 + r < n_out; r++) y[o0 + r] = lanes[r];
}

// The shuffle masks of the Q4_K / Q5_K scales: from the 16 scale bytes of sub-blocks s, s + 1 (s even) in both
// 128-bit lanes, sc_even puts the scale of row r (byte r) in both int16 lanes of dword r, sc_odd the same for
// sub-block s + 1 (byte 8 + r).
struct q45k_shuffle_masks {
    __m256i sc_even, sc_odd;
};
[[maybe_unused]] q45k_shuffle_masks q45k_masks() {
    constexpr char z = char(0x80);
    const __m256i sc_even = _mm256_setr_epi8(0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3, z,  //
                                             4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z, 7, z);
    return {sc_even, _mm256_add_epi8(sc_even, _mm256_setr_epi8(8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0,  //
                                                               8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0))};
}

// Sum over sub-blocks of min[r][s] * (activation sum of sub-block s) for the 8 rows of a Q4_K / Q5_K super-block
// b, pairs of sub-blocks per madd: mins at b + 64 as [4 p][8 r][2] bytes, so one zero-extension gives the pair
// (2p, 2p + 1) of row r in dword r; bp holds (B0,B1) in dword 0, (B2,B3) in 1, (B4,B5) in 4, (B6,B7) in 5.
[[maybe_unused]] __m256i q45_k_min_sum(const uint8_t* b, const int16_t* bsums) {
    const __m256i bsum32 =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums)), _mm256_set1_epi16(1));
    const __m256i bp = _mm256_packs_epi32(bsum32, bsum32);
    __m256i msum = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b + 64 + 16 * p)));
        const __m256i bb = _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(p < 2 ? p : p + 2));
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn, bb));
    }
    return msum;
}

// Token tok[j]'s rows of the quantized activations (kernels.h's SoA layout, blocks of `block` elements): levels q,
// block scales d, group sums bs.
template <int NT>
struct token_rows {
    const int8_t* q[NT];
    const float* d[NT];
    const int16_t* bs[NT];
    token_rows(const act_view& a, const int64_t* tok, int64_t block) {
        for (int j = 0; j < NT; j++) {
            q[j] = a.qs + tok[j] * a.n_in;
            d[j] = a.d + tok[j] * (a.n_in / block);
            bs[j] = a.bsums + tok[j] * (a.n_in / 16);
        }
    }
};

// Most tokens a prefill pass holds in registers.
constexpr int k_x8_max_tokens = 4;

// Decode of token t over G runs of `part` groups from g0 side by side: groups g0 + i * part + k, i < G, in pass k.
template <class K, int G>
void walk_x8(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* yt, int64_t n_out,
             int64_t g0, int64_t part) {
    float* y[1] = {yt};
    for (int64_t g = g0; g < g0 + part; g++) {
        const uint8_t* gp[G];
        int64_t o[G];
        for (int i = 0; i < G; i++) {
            gp[i] = packed + size_t(g + i * part) * group_bytes;
            o[i] = (g + i * part) * 8;
        }
        K::template run<1, G>(gp, a, &t, y, o, n_out);
    }
}

// Entry points. Decode (gemv_x8_fn): one token over groups [g0, g1). Prefill (gemm_x8_fn): tokens [t0, t1)
// over groups [g0, g1), group by group (or K::prefill_groups at a time: a tile's activation vectors, which the
// AVX-512 kernels permute into place per use, then serve two groups), the tokens in tiles of k_x8_max_tokens while
// the groups' bytes stay in L1/L2; a last partial tile or group runs a smaller instantiation (each token's result is
// the same either way).
template <class K>
void gemv_x8(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* y, int64_t n_out,
             int64_t g0, int64_t g1) {
    // No software prefetch: the hardware prefetcher follows the streams. It was on for the K formats' long rows at
    // two threads (and for Q5_K at one) while the decode walked one or two streams (sessions 4-12); with four, the
    // 2-thread decode measured 1-8 % faster without it in 10 of 12 in-process A/Bs (session 14,
    // docs/cpu-log-s12-s18.md).
    y += t * n_out;
    // Several streams (set_decode_streams): the most, of 4 and 2, whose runs lie at least the set distance apart;
    // the groups left over (fewer than the stream count) go one by one.
    const detail::decode_stream_setting st = detail::decode_streams(K::type);
    for (int s = st.count; s >= 2; s /= 2) {
        const int64_t part = st.stagger ? detail::staggered_run((g1 - g0) / s, group_bytes, s) : (g1 - g0) / s;
        if (st.min_distance <= 0 || part == 0 || size_t(part) * group_bytes < size_t(st.min_distance)) continue;
        if (s >= 4)
            walk_x8<K, 4>(packed, group_bytes, a, t, y, n_out, g0, part);
        else
            walk_x8<K, 2>(packed, group_bytes, a, t, y, n_out, g0, part);
        g0 += s * part;
        break;
    }
    walk_x8<K, 1>(packed, group_bytes, a, t, y, n_out, g0, g1 - g0);
}

// Groups per prefill call of K::run: K::prefill_groups where the policy sets it, else 1.
template <class K>
constexpr int prefill_groups() {
    if constexpr (requires { K::prefill_groups; })
        return K::prefill_groups;
    else
        return 1;
}

template <class K>
void gemm_x8(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
             int64_t n_out, int64_t g0, int64_t g1) {
    constexpr int NT = k_x8_max_tokens, PG = prefill_groups<K>();
    static_assert(NT >= 2 && NT <= 4, "the remainder below covers 1..3 tokens");
    for (int64_t g = g0; g < g1; g += PG) {
        const int ng = int(g1 - g < PG ? g1 - g : PG);
        const uint8_t* gp[PG];
        int64_t o0[PG];
        for (int i = 0; i < ng; i++) {
            gp[i] = packed + size_t(g + i) * group_bytes;
            o0[i] = (g + i) * 8;
        }
        int64_t tok[NT];
        float* yt[NT];
        int64_t t = t0;
        // The next PG groups' bytes into L2, a share after each token tile, so that their first tile does not wait on
        // DRAM: the hardware prefetcher has stopped by then, since the tiles in between read only L1 / L2.
        const int64_t n_tiles = (t1 - t0 + NT - 1) / NT;
        const int64_t next_groups = g + PG < g1 ? (g1 - g - PG < PG ? g1 - g - PG : PG) : 0;
        const int64_t next_lines = int64_t(size_t(next_groups) * group_bytes / 64);
        const char* next = next_groups ? reinterpret_cast<const char*>(packed + size_t(g + PG) * group_bytes) : nullptr;
        for (int64_t i = 0; t < t1; t += NT, i++) {
            for (int64_t l = i * next_lines / n_tiles; l < (i + 1) * next_lines / n_tiles; l++)
                _mm_prefetch(next + 64 * l, _MM_HINT_T1);
            const int n = int(t1 - t < NT ? t1 - t : NT);
            for (int j = 0; j < n; j++) {
                tok[j] = t + j;
                yt[j] = y + (t + j) * n_out;
            }
            if (n == NT && ng == PG) {
                K::template run<NT, PG>(gp, a, tok, yt, o0, n_out);
                continue;
            }
            for (int i = 0; i < ng; i++) {
                if (n == NT)
                    K::template run<NT, 1>(gp + i, a, tok, yt, o0 + i, n_out);
                else if (n == 3)
                    K::template run<(3 < NT ? 3 : 1), 1>(gp + i, a, tok, yt, o0 + i, n_out);
                else if (n == 2)
                    K::template run<2, 1>(gp + i, a, tok, yt, o0 + i, n_out);
                else
                    K::template run<1, 1>(gp + i, a, tok, yt, o0 + i, n_out);
            }
        }
    }
}

}  // namespace
}  // namespace memtile::cpu::simd_x8
