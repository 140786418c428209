// AMX prefill of the Q8_0 x8 layout (repack.h), for tiles of 16 tokens; the only unit built with -mamx-tile
// -mamx-int8, called by both AVX-512 sets (x8-kernels-512.h) where cpu::amx_usable() holds (cpu-isa.h).
//
// Per 8-row group, 16 tokens and pair of blocks: the tile product TDPBSSD of the 16 tokens' int8 activations of block
// b (tile A: 16 rows of 32 bytes, the tokens' rows n_in apart) and the group's block b (tile B: the pair's 8 vectors
// v, each [8 r][4 k] int8 at pair + 32 + 64 v + 32 b, is the VNNI form TDPBSSD reads: row v, column r, elements
// 4v .. 4v + 3) gives each (token, row) the exact int32 dot product of the block, the integer the VNNI kernel gets as
// sum((w + 128) q) - 128 sum(q). The two blocks' products are stored side by side, [token][b][8 r], so each token's
// 64 bytes are the VNNI kernel's pair vector (block b in 256-bit half b), and the float operations after them are
// q8_0_x8_pairs' in the same order: the results are the AVX-512 and AVX2 kernels' bit for bit
// (tests/unit/cpu-matmul-test.cpp compares the paths).
//
// Why: the 1-thread Q8_0 prefill is bound by the vector ports (per pair of blocks and tile of 4 tokens x 16 rows: 64
// vpdpbusd with 32 activation permutes and 16 weight flips); one tile product does 16 tokens x 8 rows x 32 elements.
// Session 39 (docs/cpu.md), Intel AVX-512 + AMX VM, TinyLlama Q8_0 pp64: 98.3 -> 146.3 tok/s at 1 thread, 208.8 ->
// 279.2 at 2 (llama.cpp, with AMX: 105.8 / 194.4 in ../shared/peers.md).
#include <algorithm>

#include "backends/cpu/avx512/avx512-common.h"

namespace memtile::cpu::avx512 {
namespace {

constexpr int64_t k_pair_bytes = 544;  // repack.h's Q8_0 pair of blocks

// LDTILECFG's 64-byte operand (palette 1).
struct tile_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// The int32 products of the 16 tokens' blocks of one pair (q: token 0's first activation of the pair, rows n_in apart)
// with the group's pair: isum[j][8 b + r] for block b (an odd last pair: block 0 alone, the high half left as it was).
// ODD: the result tiles 6, 7 instead of 4, 5, so that one pair's tile work overlaps the vector work of the pair before
// it. (GCC's tile intrinsics take the tile number as a literal, hence the two spelled-out forms.)
template <bool ODD>
inline void pair_products(const int8_t* q, int64_t n_in, const uint8_t* pair, bool both, int32_t (*isum)[16]) {
    _tile_loadd(0, q, n_in);
    _tile_loadd(2, pair + 32, 64);
    if constexpr (ODD) {
        _tile_zero(6);
        _tile_dpbssd(6, 0, 2);
        _tile_stored(6, &isum[0][0], 64);
    } else {
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_stored(4, &isum[0][0], 64);
    }
    if (!both) return;
    _tile_loadd(1, q + 32, n_in);
    _tile_loadd(3, pair + 64, 64);
    if constexpr (ODD) {
        _tile_zero(7);
        _tile_dpbssd(7, 1, 3);
        _tile_stored(7, &isum[0][8], 64);
    } else {
        _tile_zero(5);
        _tile_dpbssd(5, 1, 3);
        _tile_stored(5, &isum[0][8], 64);
    }
}

}  // namespace

void gemm_q8_0_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    // Tiles 0, 1: A of blocks 0, 1 of a pair (16 tokens x 32 int8); 2, 3: B (8 vectors x 8 rows x 4 int8); 4, 5 and
    // 6, 7: C (16 tokens x 8 rows int32) of the even and the odd pairs.
    tile_config cfg;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = t == 2 || t == 3 ? 8 : 16;
        cfg.colsb[t] = 32;
    }
    _tile_loadconfig(&cfg);
    const int64_t n_in = a.n_in, nb = n_in / 32, n_pairs = (nb + 1) / 2;
    alignas(64) int32_t isum[2][16][16] = {};  // [pair parity][token][block b * 8 + row]
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        const int64_t rows = std::min<int64_t>(8, n_out - g * 8);
        const __mmask8 row_mask = __mmask8((1u << rows) - 1);
        for (int64_t t = t0; t + 16 <= t1; t += 16) {
            const int8_t* q = a.qs + t * n_in;
            const float* d = a.d + t * nb;  // token j's block scales at d + j * nb
            __m512 acc[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            pair_products<false>(q, n_in, gp, nb > 1, isum[0]);
            for (int64_t p = 0; p < n_pairs; p++) {
                const int64_t ib = 2 * p;
                const bool both = ib + 1 < nb;
                if (p + 1 < n_pairs) {
                    const uint8_t* next = gp + (p + 1) * k_pair_bytes;
                    const bool next_both = ib + 3 < nb;
                    if ((p + 1) % 2 == 0)
                        pair_products<false>(q + (ib + 2) * 32, n_in, next, next_both, isum[0]);
                    else
                        pair_products<true>(q + (ib + 2) * 32, n_in, next, next_both, isum[1]);
                }
                // The two blocks' 8 row scales (f16) side by side at the start of the pair; an odd last block runs in
                // the low half alone (masked FMA), as in q8_0_x8_pairs.
                const uint8_t* pair = gp + p * k_pair_bytes;
                const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pair)));
                const __mmask16 lanes = both ? 0xffff : 0x00ff;
                const int32_t(*s)[16] = isum[p % 2];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(d[j * nb + ib]),
                                                         _mm256_set1_ps(both ? d[j * nb + ib + 1] : 0.0f), 1);
                    acc[j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[j])), _mm512_mul_ps(dw, dd),
                                                   acc[j], lanes);
                }
            }
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                _mm256_mask_storeu_ps(y + (t + j) * n_out + g * 8, row_mask,
                                      _mm256_add_ps(_mm512_castps512_ps256(acc[j]), _mm512_extractf32x8_ps(acc[j], 1)));
        }
    }
    _tile_release();
}

}  // namespace memtile::cpu::avx512
