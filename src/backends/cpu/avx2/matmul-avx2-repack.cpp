// AVX2 decode kernels of the interleaved x8 layouts (repack.h). One 32-bit lane per row of the 8-row group:
// maddubs multiplies each row's 4 weight bytes by the broadcast activation quad, so a vector of 32 weight
// bytes is unpacked once and feeds 8 rows, and the int16 pair sums of several vectors can be added before
// the one madd with the sub-block scales (Q4_K: 8 vectors of levels 0..15 against |q| <= 127 give at most
// 8 * 2 * 15 * 127 = 30480 per int16 lane). Each block's scales come first, so the kernels touch its cache
// lines strictly in address order: with the scales after the quants (first version), the back-and-forth
// defeated the hardware stream prefetcher and Q6_K decoded from DRAM at 0.4x the original layout's speed.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

__m256i bcast_quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

__m256i bcast_16(const uint8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

__m256 load_8_f16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

// Stores lane r of v to y[o0 + r] for the rows below n_out.
void store_rows(__m256 v, float* y, int64_t o0, int64_t n_out) {
    if (o0 + 8 <= n_out) {
        _mm256_storeu_ps(y + o0, v);
        return;
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (int64_t r = 0; o0 + r < n_out; r++) y[o0 + r] = lanes[r];
}

// An aligned vector in a register, loaded once: without the empty asm the compiler folds the load into each
// of its users (vpabsb and vpsignb of the same weights), and the doubled loads, not the arithmetic, bounded
// the Q8_0 kernel (llvm-mca: 27 vector loads per block against 18 needed, two per cycle).
__m256i load_once(const uint8_t* p) {
    __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    __asm__("" : "+x"(v));
    return v;
}

// Every kernel below takes G consecutive 8-row groups (group g at gp + g * gb, rows o0 + 8 g ..) and NT
// tokens (tok[0..NT)) per pass: each weight vector is loaded and unpacked once for the NT tokens and each
// broadcast activation quad feeds the G groups. Prefill runs G = 1, NT up to 4; decode G = 1, NT = 1 (see
// x8_decode_groups for G = 2). Each (row, token) result is the same sequence of operations whatever G and
// NT (integer sums exact, the float operations per lane those of G = NT = 1), so a token's result does not
// depend on its batch (gemm-avx2.h).
//
// What bounds these kernels on this VM (Zen 4, AVX2; measured with a loop of independent instructions):
// vpmaddubsw, vpmaddwd, vpsignb, vpabsb and the FMAs share two pipes (2 per cycle each alone, 2 per cycle
// together); 16-bit shifts run on two others, and/or/add on all four. So besides the multiplies, every
// unpacking operation counts: the Q5_K and Q6_K layouts (repack.h) are built to need few.

// Per-row scale vectors of the Q4_K/Q5_K x8 meta (repack.h): the 6-bit scale of row r for sub-block s in both
// int16 lanes of dword r, and the final float step of a super-block, shared by the two formats.
struct k45_meta {
    __m256i sc_even, sc_odd, mn_mask, ones;
    k45_meta() {
        constexpr char z = char(0x80);
        // Scale of row r (byte r of the 8 of sub-block s) in both int16 lanes of dword r; +8 for sub-block s + 1.
        sc_even = _mm256_setr_epi8(0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3, z,  //
                                   4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z, 7, z);
        sc_odd = _mm256_add_epi8(sc_even, _mm256_setr_epi8(8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0,  //
                                                           8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0));
        // The two mins of row r (bytes 2r, 2r + 1) as the int16 lanes of dword r.
        mn_mask = _mm256_setr_epi8(0, z, 1, z, 2, z, 3, z, 4, z, 5, z, 6, z, 7, z,  //
                                   8, z, 9, z, 10, z, 11, z, 12, z, 13, z, 14, z, 15, z);
        ones = _mm256_set1_epi16(1);
    }
    __m256i scales(const uint8_t* b, int s) const {
        return _mm256_shuffle_epi8(bcast_16(b + 16 * (s / 2)), s % 2 ? sc_odd : sc_even);
    }
    // acc += d * da * isum - dmin * da * (sum over sub-blocks of min[r][s] * bsum[s]) for the G groups of
    // super-block b[g] and one token (bsums bs16 of the super-block, scale da). Pairs of sub-blocks per madd:
    // bp holds (B0,B1) in dword 0, (B2,B3) in 1, (B4,B5) in 4, (B6,B7) in 5.
    template <int G, int NT>
    void finish(const uint8_t* const* b, const int16_t* bs16, float da_f, const __m256i (&isum)[G][NT], int j,
                __m256 (&acc)[G][NT]) const {
        const __m256i bsum32 = _mm256_madd_epi16(loadu(bs16), ones);
        const __m256i bp = _mm256_packs_epi32(bsum32, bsum32);
        __m256i bb[4];
        for (int p = 0; p < 4; p++) bb[p] = _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(p < 2 ? p : p + 2));
        const __m256 da = _mm256_set1_ps(da_f);
        for (int g = 0; g < G; g++) {
            __m256i msum = _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) {
                const __m256i mn = _mm256_shuffle_epi8(bcast_16(b[g] + 64 + 16 * p), mn_mask);
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn, bb[p]));
            }
            const __m256 dw = load_8_f16(b[g] + 128), dmw = load_8_f16(b[g] + 144);
            acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g][j]), _mm256_mul_ps(dw, da), acc[g][j]);
            acc[g][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[g][j]);
        }
    }
};

// Q4_K (1184-byte super-blocks): 8 vectors of levels 0..15 summed in int16 per sub-block (8 * 2 * 15 * 127 =
// 30480), one madd with the scales.
template <int G, int NT>
void q4_k_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0,
             int64_t n_out, int64_t pf) {
    // Scales at 0, mins at 64, d at 128, dmin at 144; sub-block s's nibble vectors from 160 + 128 s.
    constexpr int64_t bytes = 1184;
    const int64_t nb = a.n_in / 256;
    const int8_t* q[NT];
    const float* d[NT];
    const int16_t* bs[NT];
    for (int j = 0; j < NT; j++) {
        q[j] = a.qs + tok[j] * a.n_in;
        d[j] = a.d + tok[j] * nb;
        bs[j] = a.bsums + tok[j] * (a.n_in / 16);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const k45_meta meta;
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        for (int g = 0; g < G; g++) b[g] = gp + g * gb + ib * bytes;
        __m256i isum[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) isum[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            if (NT == 1 && pf > 0)
                for (int g = 0; g < G; g++) prefetch_l2<bytes / 8>(b[g] + s * (bytes / 8) + pf);
            __m256i s16[G][NT];
            for (int g = 0; g < G; g++)
                for (int j = 0; j < NT; j++) s16[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                __m256i lo[G], hi[G];
                for (int g = 0; g < G; g++) {
                    const __m256i raw = load_once(b[g] + 160 + 128 * s + 32 * v);
                    lo[g] = _mm256_and_si256(raw, m4);
                    hi[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                }
                for (int j = 0; j < NT; j++) {
                    const int8_t* qb = q[j] + ib * 256 + 32 * s + 8 * v;
                    const __m256i q0 = bcast_quad(qb), q1 = bcast_quad(qb + 4);
                    for (int g = 0; g < G; g++)
                        s16[g][j] = _mm256_add_epi16(s16[g][j], _mm256_add_epi16(_mm256_maddubs_epi16(lo[g], q0),
                                                                                 _mm256_maddubs_epi16(hi[g], q1)));
                }
            }
            for (int g = 0; g < G; g++) {
                const __m256i sc = meta.scales(b[g], s);
                for (int j = 0; j < NT; j++)
                    isum[g][j] = _mm256_add_epi32(isum[g][j], _mm256_madd_epi16(s16[g][j], sc));
            }
        }
        for (int j = 0; j < NT; j++) meta.finish<G, NT>(b, bs[j] + ib * 16, d[j][ib], isum, j, acc);
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0 + 8 * g, n_out);
}

// Q5_K (1440-byte super-blocks): levels 0..31, so 4 vectors per int16 sum (4 * 2 * 31 * 128 = 31744) and two
// madds with the scales per sub-block. Per sub-block (5 weight vectors, 8 quads of levels) 23 operations
// unpack the levels (repack.h).
template <int G, int NT>
void q5_k_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0,
             int64_t n_out, int64_t pf) {
    constexpr int64_t bytes = 1440;
    const int64_t nb = a.n_in / 256;
    const int8_t* q[NT];
    const float* d[NT];
    const int16_t* bs[NT];
    for (int j = 0; j < NT; j++) {
        q[j] = a.qs + tok[j] * a.n_in;
        d[j] = a.d + tok[j] * nb;
        bs[j] = a.bsums + tok[j] * (a.n_in / 16);
    }
    const __m256i m1f = _mm256_set1_epi8(0x1f), m07 = _mm256_set1_epi8(0x07), m08 = _mm256_set1_epi8(0x08),
                  m10 = _mm256_set1_epi8(0x10), m18 = _mm256_set1_epi8(0x18);
    const k45_meta meta;
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        for (int g = 0; g < G; g++) b[g] = gp + g * gb + ib * bytes;
        __m256i isum[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) isum[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            if (NT == 1 && pf > 0)
                for (int g = 0; g < G; g++) prefetch_l2<bytes / 8>(b[g] + s * (bytes / 8) + pf);
            for (int g = 0; g < G; g++) {
                const uint8_t* p = b[g] + 160 + 160 * s;
                __m256i v[5], l[8];
                for (int i = 0; i < 5; i++) {
                    v[i] = load_once(p + 32 * i);
                    l[i] = _mm256_and_si256(v[i], m1f);
                }
                l[5] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[0], 5), m07),
                                       _mm256_and_si256(_mm256_srli_epi16(v[3], 2), m18));
                l[6] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[1], 5), m07),
                                       _mm256_and_si256(_mm256_srli_epi16(v[4], 2), m18));
                l[7] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[2], 5), m07),
                                                       _mm256_and_si256(_mm256_srli_epi16(v[3], 4), m08)),
                                       _mm256_and_si256(_mm256_srli_epi16(v[4], 3), m10));
                const __m256i sc = meta.scales(b[g], s);
                for (int j = 0; j < NT; j++) {
                    const int8_t* qb = q[j] + ib * 256 + 32 * s;
                    __m256i s16[2];
                    for (int h = 0; h < 2; h++) {
                        const int i = 4 * h;
                        s16[h] = _mm256_add_epi16(
                            _mm256_add_epi16(_mm256_maddubs_epi16(l[i], bcast_quad(qb + 4 * i)),
                                             _mm256_maddubs_epi16(l[i + 1], bcast_quad(qb + 4 * i + 4))),
                            _mm256_add_epi16(_mm256_maddubs_epi16(l[i + 2], bcast_quad(qb + 4 * i + 8)),
                                             _mm256_maddubs_epi16(l[i + 3], bcast_quad(qb + 4 * i + 12))));
                    }
                    isum[g][j] = _mm256_add_epi32(
                        isum[g][j], _mm256_add_epi32(_mm256_madd_epi16(s16[0], sc), _mm256_madd_epi16(s16[1], sc)));
                }
            }
        }
        for (int j = 0; j < NT; j++) meta.finish<G, NT>(b, bs[j] + ib * 16, d[j][ib], isum, j, acc);
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0 + 8 * g, n_out);
}

// Q6_K (1696-byte super-blocks): levels 0..63, so two vectors per int16 sum (2 * 2 * 63 * 127 = 32004) and
// one madd with the signed 16-element sub-block scales per pair of vectors; the +32 offset of the levels is
// taken out once per super-block with the activation sums: 32 * sum_s scale[r][s] * bsum[s]. Per sub-block
// (3 weight vectors, 4 quads of levels) 11 operations unpack the levels (repack.h).
template <int G, int NT>
void q6_k_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0,
             int64_t n_out, int64_t pf) {
    constexpr int64_t bytes = 1696;
    const int64_t nb = a.n_in / 256;
    const int8_t* q[NT];
    const float* d[NT];
    const int16_t* bs[NT];
    for (int j = 0; j < NT; j++) {
        q[j] = a.qs + tok[j] * a.n_in;
        d[j] = a.d + tok[j] * nb;
        bs[j] = a.bsums + tok[j] * (a.n_in / 16);
    }
    const __m256i m3f = _mm256_set1_epi8(0x3f), m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0c),
                  m30 = _mm256_set1_epi8(0x30);
    constexpr char z = char(0x80);
    // Scale byte of row r put in the high byte of both int16 lanes of dword r (sign-extended by srai 8):
    // sub-block 2c (bytes 0..7) or 2c + 1 (bytes 8..15); and the pair (2c, 2c + 1) for the offset term.
    const __m256i sc_lo = _mm256_setr_epi8(z, 0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3,  //
                                           z, 4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z, 7);
    const __m256i sc_hi = _mm256_setr_epi8(z, 8, z, 8, z, 9, z, 9, z, 10, z, 10, z, 11, z, 11,  //
                                           z, 12, z, 12, z, 13, z, 13, z, 14, z, 14, z, 15, z, 15);
    const __m256i sc_pair = _mm256_setr_epi8(z, 0, z, 8, z, 1, z, 9, z, 2, z, 10, z, 3, z, 11,  //
                                             z, 4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15);
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        for (int g = 0; g < G; g++) b[g] = gp + g * gb + ib * bytes;
        __m256i isum[G][NT], off[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) isum[g][j] = off[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            if (NT == 1 && pf > 0)
                for (int g = 0; g < G; g++) prefetch_l2<bytes / 8>(b[g] + c * (bytes / 8) + pf);
            for (int g = 0; g < G; g++) {
                const __m256i spair = _mm256_srai_epi16(_mm256_shuffle_epi8(bcast_16(b[g] + 16 * c), sc_pair), 8);
                for (int j = 0; j < NT; j++) {
                    int32_t bpair;
                    std::memcpy(&bpair, bs[j] + ib * 16 + 2 * c, 4);
                    off[g][j] = _mm256_add_epi32(off[g][j], _mm256_madd_epi16(spair, _mm256_set1_epi32(bpair)));
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int sb = 2 * c + h;
                for (int g = 0; g < G; g++) {
                    const uint8_t* v = b[g] + 160 + 96 * sb;
                    const __m256i va = load_once(v), vb = load_once(v + 32), vc = load_once(v + 64);
                    const __m256i l0 = _mm256_and_si256(va, m3f), l1 = _mm256_and_si256(vb, m3f),
                                  l2 = _mm256_and_si256(vc, m3f);
                    const __m256i l3 = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(va, 6), m03),
                                                                       _mm256_and_si256(_mm256_srli_epi16(vb, 4), m0c)),
                                                       _mm256_and_si256(_mm256_srli_epi16(vc, 2), m30));
                    const __m256i sc =
                        _mm256_srai_epi16(_mm256_shuffle_epi8(bcast_16(b[g] + 16 * c), h ? sc_hi : sc_lo), 8);
                    for (int j = 0; j < NT; j++) {
                        const int8_t* qb = q[j] + ib * 256 + 16 * sb;
                        const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, bcast_quad(qb)),
                                                             _mm256_maddubs_epi16(l1, bcast_quad(qb + 4)));
                        const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(l2, bcast_quad(qb + 8)),
                                                             _mm256_maddubs_epi16(l3, bcast_quad(qb + 12)));
                        isum[g][j] = _mm256_add_epi32(
                            isum[g][j], _mm256_add_epi32(_mm256_madd_epi16(s01, sc), _mm256_madd_epi16(s23, sc)));
                    }
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(b[g] + 128);
            for (int j = 0; j < NT; j++) {
                const __m256i net = _mm256_sub_epi32(isum[g][j], _mm256_slli_epi32(off[g][j], 5));
                acc[g][j] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(net), _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0 + 8 * g, n_out);
}

constexpr int64_t k_q8_0_pair_bytes = 544;

// Q8_0: maddubs of |w| and q carrying w's sign, one madd per vector (the int16 pair sums of 8-bit levels
// can reach 2 * 127 * 127, so they cannot be added before widening). Two accumulators per token (even and
// odd blocks) so consecutive FMAs do not wait on each other; the loop runs over pairs of blocks so that both
// stay in registers (indexed by ib % 2 they were kept on the stack, a store-forwarding round trip per block).
template <int G, int NT>
void q8_0_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0,
             int64_t n_out, int64_t) {
    const int64_t nb = a.n_in / 32;
    const int8_t* q[NT];
    const float* d[NT];
    for (int j = 0; j < NT; j++) {
        q[j] = a.qs + tok[j] * a.n_in;
        d[j] = a.d + tok[j] * nb;
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[G][NT][2];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j][0] = acc[g][j][1] = _mm256_setzero_ps();
    const auto block = [&](int64_t ib, int h) {
        const uint8_t* pair[G];
        for (int g = 0; g < G; g++) pair[g] = gp + g * gb + (ib / 2) * k_q8_0_pair_bytes;
        __m256i sum[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) sum[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            __m256i w[G], aw[G];
            for (int g = 0; g < G; g++) {
                w[g] = load_once(pair[g] + 32 + h * 256 + 32 * v);
                aw[g] = _mm256_abs_epi8(w[g]);
            }
            for (int j = 0; j < NT; j++) {
                const __m256i qv = bcast_quad(q[j] + ib * 32 + 4 * v);
                for (int g = 0; g < G; g++) {
                    const __m256i p = _mm256_maddubs_epi16(aw[g], _mm256_sign_epi8(qv, w[g]));
                    sum[g][j] = _mm256_add_epi32(sum[g][j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(pair[g] + h * 16);
            for (int j = 0; j < NT; j++)
                acc[g][j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[g][j]),
                                               _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j][h]);
        }
    };
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        block(ib, 0);
        block(ib + 1, 1);
    }
    if (ib < nb) block(ib, 0);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(_mm256_add_ps(acc[g][j][0], acc[g][j][1]), y[j], o0 + 8 * g, n_out);
}

// Q4_0 (pairs of blocks, 288 bytes): the unsigned levels (stored + 8) meet the activations in maddubs, the 8
// vectors of a block summed in int16 (8 * 2 * 15 * 127 = 30480); the + 8 is taken out with the block's
// activation sum (bsums of the Q8_0 activations): isum - 8 * sum(q).
template <int G, int NT>
void q4_0_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0,
             int64_t n_out, int64_t) {
    constexpr int64_t pair_bytes = 288;
    const int64_t nb = a.n_in / 32;
    const int8_t* q[NT];
    const float* d[NT];
    const int16_t* bs[NT];
    for (int j = 0; j < NT; j++) {
        q[j] = a.qs + tok[j] * a.n_in;
        d[j] = a.d + tok[j] * nb;
        bs[j] = a.bsums + tok[j] * (a.n_in / 16);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[G][NT][2];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j][0] = acc[g][j][1] = _mm256_setzero_ps();
    const auto block = [&](int64_t ib, int h) {
        const uint8_t* pair[G];
        for (int g = 0; g < G; g++) pair[g] = gp + g * gb + (ib / 2) * pair_bytes;
        __m256i s16[G][NT];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NT; j++) s16[g][j] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            __m256i lo[G], hi[G];
            for (int g = 0; g < G; g++) {
                const __m256i raw = load_once(pair[g] + 32 + h * 128 + 32 * v);
                lo[g] = _mm256_and_si256(raw, m4);
                hi[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            }
            for (int j = 0; j < NT; j++) {
                const int8_t* qb = q[j] + ib * 32 + 8 * v;
                const __m256i q0 = bcast_quad(qb), q1 = bcast_quad(qb + 4);
                for (int g = 0; g < G; g++)
                    s16[g][j] = _mm256_add_epi16(
                        s16[g][j], _mm256_add_epi16(_mm256_maddubs_epi16(lo[g], q0), _mm256_maddubs_epi16(hi[g], q1)));
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(pair[g] + h * 16);
            for (int j = 0; j < NT; j++) {
                const __m256i net =
                    _mm256_sub_epi32(_mm256_madd_epi16(s16[g][j], ones),
                                     _mm256_set1_epi32(8 * (int32_t(bs[j][2 * ib]) + bs[j][2 * ib + 1])));
                acc[g][j][h] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(net), _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j][h]);
            }
        }
    };
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        block(ib, 0);
        block(ib + 1, 1);
    }
    if (ib < nb) block(ib, 0);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(_mm256_add_ps(acc[g][j][0], acc[g][j][1]), y[j], o0 + 8 * g, n_out);
}

constexpr size_t k_prefetch_min_group = 20 * 1024;

// The kernel of format T for G groups and NT tokens per pass (NT <= k_x8_max_tokens held in registers).
constexpr int k_x8_max_tokens = 4;
template <dtype T, int G, int NT>
void run_x8(const uint8_t* gp, size_t gb, const act_view& a, const int64_t* tok, float* const* y, int64_t o0, int64_t n,
            int64_t pf) {
    if constexpr (T == dtype::q4_k)
        q4_k_x8<G, NT>(gp, gb, a, tok, y, o0, n, pf);
    else if constexpr (T == dtype::q5_k)
        q5_k_x8<G, NT>(gp, gb, a, tok, y, o0, n, pf);
    else if constexpr (T == dtype::q6_k)
        q6_k_x8<G, NT>(gp, gb, a, tok, y, o0, n, pf);
    else if constexpr (T == dtype::q8_0)
        q8_0_x8<G, NT>(gp, gb, a, tok, y, o0, n, pf);
    else
        q4_0_x8<G, NT>(gp, gb, a, tok, y, o0, n, pf);
}
// Whether decode prefetches long-row groups: on for the K formats; off for Q8_0, whose decode measured 2-10 %
// slower with it at every distance, and for Q4_0, not measured.
constexpr bool x8_prefetches(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
}

// Groups per decode pass: one. Two (each activation broadcast feeding both) measured faster with the weights
// in L2 (bench-decode-kernels 1024 x 512: Q8_0 +14 %, Q4_K and Q6_K +1-3 %) but far slower from DRAM (8192 x
// 8192: Q4_K, Q4_0, Q6_K 15-17 against 23-31 GB/s per CPU-second): two groups are two address streams
// group_bytes apart, which the hardware prefetchers here do not follow as well as one (as the F16 two-row
// kernel of session 3). A layout interleaving the two groups block by block would make it one stream.
constexpr int x8_decode_groups(dtype) {
    return 1;
}

// Entry points. Decode (gemv_x8_fn): one token over groups [g0, g1), two groups per pass (a last odd group
// alone). Prefill (gemm_x8_fn): tokens [t0, t1) over groups [g0, g1), group by group, the tokens in tiles of
// k_x8_max_tokens while the group's bytes stay in L1/L2; a last partial tile runs a smaller instantiation
// (each token's result is the same either way).
template <dtype T>
void gemv_x8(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* y, int64_t n_out,
             int64_t g0, int64_t g1) {
    float* yt[1] = {y + t * n_out};
    // Software prefetch where it measured faster (docs/cpu.md): the K formats' groups of long rows (the FFN
    // down projection), whose activation lines the weight stream evicts from L1 between two groups; stops at
    // this call's last group.
    const int64_t pf = x8_prefetches(T) && group_bytes >= k_prefetch_min_group ? detail::decode_prefetch_bytes() : 0;
    const uint8_t* end = packed + size_t(g1) * group_bytes;
    constexpr int G = x8_decode_groups(T);
    int64_t g = g0;
    for (; g + G <= g1; g += G) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        run_x8<T, G, 1>(gp, group_bytes, a, &t, yt, g * 8, n_out, gp + G * group_bytes + pf <= end ? pf : 0);
    }
    for (; g < g1; g++) run_x8<T, 1, 1>(packed + size_t(g) * group_bytes, group_bytes, a, &t, yt, g * 8, n_out, 0);
}

template <dtype T>
void gemm_x8(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
             int64_t n_out, int64_t g0, int64_t g1) {
    constexpr int NT = k_x8_max_tokens;
    static_assert(NT >= 2 && NT <= 4, "the remainder below covers 1..3 tokens");
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        int64_t tok[NT];
        float* yt[NT];
        int64_t t = t0;
        for (; t < t1; t += NT) {
            const int n = int(t1 - t < NT ? t1 - t : NT);
            for (int j = 0; j < n; j++) {
                tok[j] = t + j;
                yt[j] = y + (t + j) * n_out;
            }
            if (n == NT)
                run_x8<T, 1, NT>(gp, group_bytes, a, tok, yt, g * 8, n_out, 0);
            else if (n == 3)
                run_x8<T, 1, (3 < NT ? 3 : 1)>(gp, group_bytes, a, tok, yt, g * 8, n_out, 0);
            else if (n == 2)
                run_x8<T, 1, 2>(gp, group_bytes, a, tok, yt, g * 8, n_out, 0);
            else
                run_x8<T, 1, 1>(gp, group_bytes, a, tok, yt, g * 8, n_out, 0);
        }
    }
}

const detail::repack_kernel_set k_avx2_repack = {
    gemv_x8<dtype::q8_0>, gemv_x8<dtype::q4_0>, gemv_x8<dtype::q4_k>, gemv_x8<dtype::q5_k>, gemv_x8<dtype::q6_k>,
    gemm_x8<dtype::q8_0>, gemm_x8<dtype::q4_0>, gemm_x8<dtype::q4_k>, gemm_x8<dtype::q5_k>, gemm_x8<dtype::q6_k>,
};

}  // namespace
}  // namespace memtile::cpu::avx2

namespace memtile::cpu::detail {

const repack_kernel_set* avx2_repack_kernels() {
    return &avx2::k_avx2_repack;
}

}  // namespace memtile::cpu::detail
