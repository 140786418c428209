// AVX2 decode kernels of the interleaved x8 layouts (repack.h). One 32-bit lane per row of the 8-row group:
// maddubs multiplies each row's 4 weight bytes by the broadcast activation quad, so a vector of 32 weight
// bytes is unpacked once and feeds 8 rows, and the int16 pair sums of several vectors can be added before
// the one madd with the sub-block scales (Q4_K: 8 vectors of levels 0..15 against |q| <= 127 give at most
// 8 * 2 * 15 * 127 = 30480 per int16 lane). Each block's scales come first, so the kernels touch its cache
// lines strictly in address order: with the scales after the quants (first version), the back-and-forth
// defeated the hardware stream prefetcher and Q6_K decoded from DRAM at 0.4x the original layout's speed.
#include "backends/cpu/avx2/avx2-common.h"
#include "backends/cpu/simd/x8-common-256.h"

namespace memtile::cpu::avx2 {
namespace {

using simd_x8::bcast_quad;
using simd_x8::load_8_f16;
using simd_x8::q45_k_min_sum;
using simd_x8::q45k_masks;
using simd_x8::store_rows;
using simd_x8::token_rows;

__m256i bcast_16(const uint8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

// 16-bit shift left by n (right by -n); with a byte mask after it, bit b of each byte moves to b + n.
__m256i shift_bits(__m256i v, int n) {
    return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v;
}

// Level vector g (0..7) of one 32-element sub-block s (v: its first quant byte): [8 r][4 k] the levels of elements
// 32s + 4g + k, against the activation quad at 32s + 4g. 4 nibble vectors, group 2i in the low nibbles of vector
// i, 2i + 1 in the high ones (3 operations per 2 levels); Q5_K: the fifth bit of group g at bit g of the vector
// after them (3 more per level). Computed where each level is used (the callers' loops over g are unrolled, so
// every branch and shift is a constant), so that with 4 tokens per pass the 8 levels are not all live at once.
template <bool high_bit>
__m256i sub_block_level(const uint8_t* v, int g) {
    const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 32 * (g / 2)));
    const __m256i nib = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0f));
    if constexpr (!high_bit) return nib;
    const __m256i qh = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 128));
    return _mm256_or_si256(nib, _mm256_and_si256(shift_bits(qh, 4 - g), _mm256_set1_epi8(0x10)));
}

// Q4_K (high_bit false, 1184-byte super-blocks) and Q5_K (true, 1440). With the fifth bit the int16 sums
// only hold 4 level vectors (4 * 2 * 31 * 127 = 31496), so each sub-block takes two madds with its scales.
// NT tokens per pass (tok[0..NT)): the weight vectors are loaded and unpacked once for all of them; each
// token's integer sums are exact and its float operations are those of NT = 1, so its result does not
// depend on NT (the batch-invariance rule of gemm-avx2.h). G groups per pass (decode, one token: G streams per
// thread, set_decode_streams; each activation broadcast feeds the G groups, and every row's operations are those
// of G = 1, so the results are the same bit for bit). gp, o0: per group.
template <bool high_bit, int NT, int G>
void q45_k_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
              int64_t n_out) {
    static_assert(NT == 1 || G == 1, "several groups only for one token");
    // Scales at 0, mins at 64, d at 128, dmin at 144; sub-block s's quants from 160 + stride * s.
    constexpr int64_t bytes = high_bit ? 1440 : 1184, stride = high_bit ? 160 : 128;
    const int64_t nb = a.n_in / 256;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 256);
    const auto [sc_even, sc_odd] = q45k_masks();
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        __m256i isum[G][NT];
        for (int g = 0; g < G; g++) {
            b[g] = gp[g] + ib * bytes;
            for (int j = 0; j < NT; j++) isum[g][j] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; s++) {
            __m256i sc[G], s16[G][NT];
            for (int g = 0; g < G; g++) {
                sc[g] = _mm256_shuffle_epi8(bcast_16(b[g] + 16 * (s / 2)), s % 2 ? sc_odd : sc_even);
                for (int j = 0; j < NT; j++) s16[g][j] = _mm256_setzero_si256();
            }
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) {
                __m256i x[NT];
                for (int j = 0; j < NT; j++) x[j] = bcast_quad(q[j] + ib * 256 + 32 * s + 4 * l);
                for (int g = 0; g < G; g++) {
                    const __m256i lv = sub_block_level<high_bit>(b[g] + 160 + stride * s, l);
                    for (int j = 0; j < NT; j++)
                        s16[g][j] = _mm256_add_epi16(s16[g][j], _mm256_maddubs_epi16(lv, x[j]));
                    if (high_bit && l == 3) {
                        for (int j = 0; j < NT; j++) {
                            isum[g][j] = _mm256_add_epi32(isum[g][j], _mm256_madd_epi16(s16[g][j], sc[g]));
                            s16[g][j] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            for (int g = 0; g < G; g++)
                for (int j = 0; j < NT; j++)
                    isum[g][j] = _mm256_add_epi32(isum[g][j], _mm256_madd_epi16(s16[g][j], sc[g]));
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(b[g] + 128), dmw = load_8_f16(b[g] + 144);
            for (int j = 0; j < NT; j++) {
                const __m256i msum = q45_k_min_sum(b[g], bs[j] + ib * 16);
                const __m256 da = _mm256_set1_ps(d[j][ib]);
                acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g][j]), _mm256_mul_ps(dw, da), acc[g][j]);
                acc[g][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[g][j]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0[g], n_out);
}

// Q6_K (1696-byte super-blocks): levels 0..63, so two vectors per int16 sum (2 * 2 * 63 * 127 = 32004) and
// one madd with the signed 16-element sub-block scales per pair of vectors; the +32 offset of the levels is
// taken out once per super-block with the activation sums: 32 * sum_s scale[r][s] * bsum[s]. Each sub-block's
// 16 elements come as three vectors whose bytes hold one level each in bits 0-5 and, in bits 6-7, two bits of
// the fourth level (repack.h): 11 vector operations unpack its 4 level vectors (17 with the nibble + high-bit
// split of session 6's layout). NT tokens and G groups per pass as q45_k_x8.
template <int NT, int G>
void q6_k_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
             int64_t n_out) {
    static_assert(NT == 1 || G == 1, "several groups only for one token");
    constexpr int64_t bytes = 1696;
    const int64_t nb = a.n_in / 256;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 256);
    const __m256i m63 = _mm256_set1_epi8(0x3f), mc0 = _mm256_set1_epi8(char(0xc0));
    // The int16 scales of sub-block 2c (lane 0 of each dword) or 2c + 1 (lane 1) in both lanes of the dword.
    const __m256i sc_lo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,  //
                                           0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i sc_hi = _mm256_add_epi8(sc_lo, _mm256_set1_epi8(2));
    __m256 acc[G][NT];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t* b[G];
        __m256i isum[G][NT], off[G][NT];
        for (int g = 0; g < G; g++) {
            b[g] = gp[g] + ib * bytes;
            for (int j = 0; j < NT; j++) isum[g][j] = off[g][j] = _mm256_setzero_si256();
        }
        for (int c = 0; c < 8; c++) {
            // Dword r: the scales of sub-blocks 2c and 2c + 1 of row r as int16.
            __m256i spair[G];
            for (int g = 0; g < G; g++) {
                spair[g] = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b[g] + 16 * c)));
            }
            for (int j = 0; j < NT; j++) {
                int32_t bpair;
                std::memcpy(&bpair, bs[j] + ib * 16 + 2 * c, 4);
                for (int g = 0; g < G; g++)
                    off[g][j] = _mm256_add_epi32(off[g][j], _mm256_madd_epi16(spair[g], _mm256_set1_epi32(bpair)));
            }
            for (int h = 0; h < 2; h++) {
                for (int g = 0; g < G; g++) {
                    const __m256i sc = _mm256_shuffle_epi8(spair[g], h ? sc_hi : sc_lo);
                    const uint8_t* v = b[g] + 160 + 192 * c + 32 * h;
                    const __m256i p0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
                    const __m256i p1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 64));
                    const __m256i p2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 128));
                    // Level vector 3: bits 6-7 of p0, p1, p2 are its bits 0-1, 2-3, 4-5; shifted in 16-bit lanes
                    // after the mask, so no bit crosses into the neighbouring byte.
                    const __m256i t = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(p0, mc0), 4),
                                                                      _mm256_srli_epi16(_mm256_and_si256(p1, mc0), 2)),
                                                      _mm256_and_si256(p2, mc0));
                    const __m256i lv[4] = {_mm256_and_si256(p0, m63), _mm256_and_si256(p1, m63),
                                           _mm256_and_si256(p2, m63), _mm256_srli_epi16(t, 2)};
                    for (int j = 0; j < NT; j++) {
                        const int8_t* qb = q[j] + ib * 256 + 32 * c + 16 * h;
                        const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(lv[0], bcast_quad(qb)),
                                                            _mm256_maddubs_epi16(lv[1], bcast_quad(qb + 4)));
                        const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lv[2], bcast_quad(qb + 8)),
                                                            _mm256_maddubs_epi16(lv[3], bcast_quad(qb + 12)));
                        isum[g][j] = _mm256_add_epi32(isum[g][j], _mm256_madd_epi16(s0, sc));
                        isum[g][j] = _mm256_add_epi32(isum[g][j], _mm256_madd_epi16(s1, sc));
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
        for (int j = 0; j < NT; j++) store_rows(acc[g][j], y[j], o0[g], n_out);
}

constexpr int64_t k_q8_0_pair_bytes = 544;

// Q8_0: maddubs of |w| and q carrying w's sign, one madd per vector (the int16 pair sums of 8-bit levels
// can reach 2 * 127 * 127, so they cannot be added before widening). Two accumulators per token (even and
// odd blocks) so consecutive FMAs do not wait on each other. NT tokens and G groups per pass as q45_k_x8. Why G > 1
// for Q8_0: the broadcasts are the one load its loop has besides the weights (session 8), and a standalone copy
// on TinyLlama-shaped groups streamed 3-8 % more bytes per CPU-second from DRAM with two groups >= 1 MiB apart,
// but 45 % less with adjacent groups (17 KiB apart) and about the same at 280 KiB (session 9).
template <int NT, int G>
void q8_0_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
             int64_t n_out) {
    static_assert(NT == 1 || G == 1, "several groups only for one token");
    const int64_t nb = a.n_in / 32;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 32);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[G][NT][2];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j][0] = acc[g][j][1] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const int64_t pair = (ib / 2) * k_q8_0_pair_bytes, off = pair + 32 + (ib % 2) * 32;  // vector v at + 64 v
        __m256i sum[G][NT];
        for (int g = 0; g < G; g++) {
            for (int j = 0; j < NT; j++) sum[g][j] = _mm256_setzero_si256();
        }
        for (int v = 0; v < 8; v++) {
            __m256i x[NT];
            for (int j = 0; j < NT; j++) x[j] = bcast_quad(q[j] + ib * 32 + 4 * v);
            for (int g = 0; g < G; g++) {
                const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(gp[g] + off + 64 * v));
                const __m256i aw = _mm256_abs_epi8(w);
                for (int j = 0; j < NT; j++) {
                    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[j], w));
                    sum[g][j] = _mm256_add_epi32(sum[g][j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(gp[g] + pair + (ib % 2) * 16);
            for (int j = 0; j < NT; j++)
                acc[g][j][ib % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[g][j]),
                                                    _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j][ib % 2]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(_mm256_add_ps(acc[g][j][0], acc[g][j][1]), y[j], o0[g], n_out);
}

// Q4_0 (pairs of blocks, 288 bytes): the unsigned levels (stored + 8) meet the activations in maddubs, the 8
// vectors of a block summed in int16 (8 * 2 * 15 * 127 = 30480); the + 8 is taken out with the block's
// activation sum (bsums of the Q8_0 activations): isum - 8 * sum(q). NT tokens and G groups per pass as q45_k_x8.
template <int NT, int G>
void q4_0_x8(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
             int64_t n_out) {
    static_assert(NT == 1 || G == 1, "several groups only for one token");
    constexpr int64_t pair_bytes = 288;
    const int64_t nb = a.n_in / 32;
    const auto& [q, d, bs] = token_rows<NT>(a, tok, 32);
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[G][NT][2];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) acc[g][j][0] = acc[g][j][1] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const int64_t pair = (ib / 2) * pair_bytes, off = pair + 32 + (ib % 2) * 128;
        __m256i s16[G][NT];
        for (int g = 0; g < G; g++) {
            for (int j = 0; j < NT; j++) s16[g][j] = _mm256_setzero_si256();
        }
        for (int v = 0; v < 4; v++) {
            __m256i xl[NT], xh[NT];
            for (int j = 0; j < NT; j++) {
                xl[j] = bcast_quad(q[j] + ib * 32 + 8 * v);
                xh[j] = bcast_quad(q[j] + ib * 32 + 8 * v + 4);
            }
            for (int g = 0; g < G; g++) {
                const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(gp[g] + off + 32 * v));
                const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                for (int j = 0; j < NT; j++) {
                    s16[g][j] = _mm256_add_epi16(s16[g][j], _mm256_maddubs_epi16(lo, xl[j]));
                    s16[g][j] = _mm256_add_epi16(s16[g][j], _mm256_maddubs_epi16(hi, xh[j]));
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const __m256 dw = load_8_f16(gp[g] + pair + (ib % 2) * 16);
            for (int j = 0; j < NT; j++) {
                const __m256i net =
                    _mm256_sub_epi32(_mm256_madd_epi16(s16[g][j], ones),
                                     _mm256_set1_epi32(8 * (int32_t(bs[j][2 * ib]) + bs[j][2 * ib + 1])));
                acc[g][j][ib % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(net),
                                                    _mm256_mul_ps(dw, _mm256_set1_ps(d[j][ib])), acc[g][j][ib % 2]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < NT; j++) store_rows(_mm256_add_ps(acc[g][j][0], acc[g][j][1]), y[j], o0[g], n_out);
}

// The kernel policy of simd/x8-common-256.h's drivers for format T.
template <dtype T>
struct x8 {
    static constexpr dtype type = T;
    template <int NT, int G>
    static void run(const uint8_t* const* gp, const act_view& a, const int64_t* tok, float* const* y, const int64_t* o0,
                    int64_t n) {
        if constexpr (T == dtype::q4_k)
            q45_k_x8<false, NT, G>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q5_k)
            q45_k_x8<true, NT, G>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q6_k)
            q6_k_x8<NT, G>(gp, a, tok, y, o0, n);
        else if constexpr (T == dtype::q8_0)
            q8_0_x8<NT, G>(gp, a, tok, y, o0, n);
        else
            q4_0_x8<NT, G>(gp, a, tok, y, o0, n);
    }
};

using simd_x8::gemm_x8;
using simd_x8::gemv_x8;

const detail::repack_kernel_set k_avx2_repack = {
    gemv_x8<x8<dtype::q8_0>>,
    gemv_x8<x8<dtype::q4_0>>,
    gemv_x8<x8<dtype::q4_k>>,
    gemv_x8<x8<dtype::q5_k>>,
    gemv_x8<x8<dtype::q6_k>>,
    gemv_x32_f32,
    gemv_x32_f16,
    gemv_x32_bf16,
    gemm_x8<x8<dtype::q8_0>>,
    gemm_x8<x8<dtype::q4_0>>,
    gemm_x8<x8<dtype::q4_k>>,
    gemm_x8<x8<dtype::q5_k>>,
    gemm_x8<x8<dtype::q6_k>>,
    gemm_x32_f32,
    gemm_x32_f16,
    gemm_x32_bf16,
};

}  // namespace

}  // namespace memtile::cpu::avx2

namespace memtile::cpu::detail {

const repack_kernel_set* avx2_repack_kernels() {
    return &avx2::k_avx2_repack;
}

}  // namespace memtile::cpu::detail
