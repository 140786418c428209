// AMX prefill of the Q8_0, Q4_0 and K-quant x8 layouts (repack.h), for tiles of 16 tokens; the only unit built with
// -mamx-tile -mamx-int8, called by both AVX-512 sets (x8-kernels-512.h) where cpu::amx_usable() holds (cpu-isa.h).
// Q4_0: as Q8_0 with unpacked levels (unpack_q4_0); the K-quants: see gemm_kquant_amx. Session 40 (docs/cpu.md),
// TinyLlama pp64 1 thread, before -> after: Q4_K_M 102 -> 129, Q5_K_S 81 -> 131, Q6_K 72 -> 91, Q4_0 91 -> 150.
//
// Q8_0: per 8-row group, 16 tokens and pair of blocks: the tile product TDPBSSD of the 16 tokens' int8 activations of
// block b (tile A: 16 rows of 32 bytes, the tokens' rows n_in apart) and the group's block b (tile B: the pair's 8
// vectors v, each [8 r][4 k] int8 at pair + 32 + 64 v + 32 b, is the VNNI form TDPBSSD reads: row v, column r, elements
// 4v .. 4v + 3) gives each (token, row) the exact int32 dot product of the block, the integer the VNNI kernel gets as
// sum((w + 128) q) - 128 sum(q). The two blocks' products are stored side by side, [token][b][8 r], so each token's
// 64 bytes are the VNNI kernel's pair vector (block b in 256-bit half b), and the float operations after them are
// q8_0_x8_pairs' in the same order: the results are the AVX-512 and AVX2 kernels' bit for bit
// (tests/unit/cpu-matmul-test.cpp compares the paths).
//
// Why: the 1-thread Q8_0 prefill is bound by the vector ports (per pair of blocks and tile of 4 tokens x 16 rows: 64
// vpdpbusd with 32 activation permutes and 16 weight flips); one tile product does 16 tokens x 8 rows x 32 elements.
// Session 39 (docs/cpu.md), Intel AVX-512 + AMX VM, TinyLlama Q8_0 pp64: 98.3 -> 146.3 tok/s at 1 thread, 208.8 ->
// 279.2 at 2 (llama.cpp, with AMX: 105.8 / 194.4 in ../shared/peers.md). Session 40: the products' stores after the
// vector work of the pair before (pair_issue / pair_store) and the next group prefetched (prefetch_share), ~139 ->
// ~150.
#include <algorithm>

#include "backends/cpu/avx512/avx512-common.h"
#include "backends/cpu/avx512/x8-levels-512.h"
#include "backends/cpu/simd/x8-common-256.h"

namespace memtile::cpu::avx512 {
namespace {

using simd_x8::load_8_f16;
using simd_x8::q45_k_min_sum;
using simd_x8::store_rows;

constexpr int64_t k_pair_bytes = 544;       // repack.h's Q8_0 pair of blocks
constexpr int64_t k_q4_0_pair_bytes = 288;  // and Q4_0's

// LDTILECFG's 64-byte operand (palette 1).
struct tile_config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// The products of two 32-element blocks of the 16 tokens (activations a0 and a1, the tokens' rows a_stride apart) with
// the group's two blocks b0 and b1 (B tiles of 8 vectors [8 r][4 k], b_stride apart), block b's into C tile 4 + b
// (ODD: 6 + b); both false: block 0 alone. U: unsigned weights (TDPBSUD) rather than signed (TDPBSSD). The results
// are stored by pair_store, which the kernels call after the vector work of the pair before, so that the products
// have finished by then rather than stalling the store. (GCC's tile intrinsics take the tile number as a literal,
// hence the spelled-out forms.)
template <bool ODD, bool U>
inline void pair_issue(const int8_t* a0, const int8_t* a1, int64_t a_stride, const uint8_t* b0, const uint8_t* b1,
                       int64_t b_stride, bool both) {
    _tile_loadd(0, a0, a_stride);
    _tile_loadd(2, b0, b_stride);
    if (both) {
        _tile_loadd(1, a1, a_stride);
        _tile_loadd(3, b1, b_stride);
    }
    if constexpr (ODD) {
        _tile_zero(6);
        _tile_zero(7);
        if constexpr (U) {
            _tile_dpbsud(6, 0, 2);
            if (both) _tile_dpbsud(7, 1, 3);
        } else {
            _tile_dpbssd(6, 0, 2);
            if (both) _tile_dpbssd(7, 1, 3);
        }
    } else {
        _tile_zero(4);
        _tile_zero(5);
        if constexpr (U) {
            _tile_dpbsud(4, 0, 2);
            if (both) _tile_dpbsud(5, 1, 3);
        } else {
            _tile_dpbssd(4, 0, 2);
            if (both) _tile_dpbssd(5, 1, 3);
        }
    }
}

// pair_issue's int32 results as isum[j][8 b + r] for block b (both false: the high half left as it was).
template <bool ODD>
inline void pair_store(bool both, int32_t (*isum)[16]) {
    if constexpr (ODD) {
        _tile_stored(6, &isum[0][0], 64);
        if (both) _tile_stored(7, &isum[0][8], 64);
    } else {
        _tile_stored(4, &isum[0][0], 64);
        if (both) _tile_stored(5, &isum[0][8], 64);
    }
}

// The products of pair P in flight: issued into the tiles of P's parity (pair_issue), stored into isum[P % 2]
// (pair_store), read back by the vector work. U: unsigned weights (TDPBSUD).
template <bool U>
struct pair_pipeline {
    alignas(64) int32_t isum[2][16][16] = {};  // [pair parity][token][block b * 8 + row]

    void issue(int64_t P, const int8_t* a0, const int8_t* a1, int64_t a_stride, const uint8_t* b0, const uint8_t* b1,
               int64_t b_stride, bool both) {
        if (P % 2 == 0)
            pair_issue<false, U>(a0, a1, a_stride, b0, b1, b_stride, both);
        else
            pair_issue<true, U>(a0, a1, a_stride, b0, b1, b_stride, both);
    }
    void store(int64_t P, bool both) {
        if (P % 2 == 0)
            pair_store<false>(both, isum[0]);
        else
            pair_store<true>(both, isum[1]);
    }
    const int32_t (*result(int64_t P) const)[16] { return isum[P % 2]; }
};

// sums[j] = (first ? 0 : sums[j]) + s[j] x sc for the 16 tokens: the exact int32 scale x sum of the K-quant kernels.
inline void add_scaled(const int32_t (*s)[16], __m512i sc, bool first, __m512i* sums) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        const __m512i v = _mm512_mullo_epi32(_mm512_load_si512(s[j]), sc);
        sums[j] = first ? v : _mm512_add_epi32(sums[j], v);
    }
}

// During the first token tile of a group, pair p of n_pairs prefetches its share of the next group's bytes into L2, so
// that the next group's first reads do not wait on DRAM: the hardware prefetcher has stopped by then, because the
// tiles in between read only L1 / L2.
inline void prefetch_share(const uint8_t* next, size_t group_bytes, int64_t p, int64_t n_pairs) {
    const int64_t lines = (int64_t(group_bytes) + 63) / 64, per_pair = (lines + n_pairs - 1) / n_pairs;
    for (int64_t l = p * per_pair; l < std::min(lines, (p + 1) * per_pair); l++)
        _mm_prefetch(reinterpret_cast<const char*>(next + 64 * l), _MM_HINT_T1);
}

// Tiles 0, 1: A of the two blocks of a pair (16 tokens x K int8); 2, 3: B (K / 4 vectors x 8 rows x 4 int8); 4, 5 and
// 6, 7: C (16 tokens x 8 rows int32) of the even and the odd pairs. K: the block's elements, 32 (16 for Q6_K).
void load_tile_config(int k = 32) {
    tile_config cfg;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = uint8_t(t == 2 || t == 3 ? k / 4 : 16);
        cfg.colsb[t] = uint16_t(t < 2 ? k : 32);
    }
    // Not _tile_loadconfig: GCC 12's form tells the compiler that LDTILECFG reads 8 bytes of the operand, so once
    // this function is inlined it may drop the stores of the rows and widths (a fault at LDTILECFG). This operand is
    // the whole 64 bytes.
    asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// The B tiles of a Q4_0 pair's blocks (block 1 only where both): the levels less 8 (the stored w + 8, so the signed
// product is the VNNI kernel's sum((w + 8) q) - 8 sum(q)) in quad order as unpack_levels lays them out, 256 bytes per
// block.
inline void unpack_q4_0(const uint8_t* pair, bool both, uint8_t* out) {
    for (int h = 0; h < (both ? 2 : 1); h++) {
        __m512i lv[4];
        nibble_levels<false, false>(pair + 32 + 128 * h, lv);
        for (__m512i& v : lv) v = _mm512_sub_epi8(v, _mm512_set1_epi8(8));
        for (int i = 0; i < 2; i++) {
            _mm512_store_si512(out + 256 * h + 128 * i, _mm512_shuffle_i64x2(lv[2 * i], lv[2 * i + 1], 0x44));
            _mm512_store_si512(out + 256 * h + 128 * i + 64, _mm512_shuffle_i64x2(lv[2 * i], lv[2 * i + 1], 0xee));
        }
    }
}

// The activations of the tiles of 16 tokens in [t0, t1) as [tile][32-element block][16 tokens][32] at xs, so that each
// A tile is 512 (or, half blocks, 256) bytes 32 apart rather than 16 rows n_in apart.
void copy_tiles(const act_view& a, int64_t t0, int64_t t1, int8_t* xs) {
    const int64_t n_in = a.n_in;
    for (int64_t t = t0; t + 16 <= t1; t += 16)
        for (int64_t j = 0; j < 16; j++)
            for (int64_t s = 0; s < n_in / 32; s++)
                _mm256_store_si256(
                    reinterpret_cast<__m256i*>(xs + ((t - t0) * n_in + s * 512 + j * 32)),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + (t + j) * n_in + 32 * s)));
}

// The B tiles of Q4_K / Q5_K sub-blocks s and s + 1 of super-block b (repack.h's x8 layout): their level vectors
// (nibble_levels' order: lv[0] holds the levels of quads 0 and 2, lv[1] 1 and 3, lv[2] 4 and 6, lv[3] 5 and 7, one
// quad per 256-bit half) stored as 8 vectors [8 r][4 k] in quad order, 256 bytes per sub-block.
template <bool high_bit>
inline void unpack_levels(const uint8_t* b, int s, uint8_t* out) {
    constexpr int64_t sub_bytes = high_bit ? 160 : 128;
    for (int h = 0; h < 2; h++) {
        __m512i lv[4];
        if constexpr (high_bit)
            q5_levels<false, false>(b + 160 + sub_bytes * (s + h), lv);
        else
            nibble_levels<false, false>(b + 160 + sub_bytes * (s + h), lv);
        for (int i = 0; i < 2; i++) {
            _mm512_store_si512(out + 256 * h + 128 * i, _mm512_shuffle_i64x2(lv[2 * i], lv[2 * i + 1], 0x44));
            _mm512_store_si512(out + 256 * h + 128 * i + 64, _mm512_shuffle_i64x2(lv[2 * i], lv[2 * i + 1], 0xee));
        }
    }
}

template <bool Q4>
void gemm_pairs_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                    int64_t n_out, int64_t g0, int64_t g1) {
    constexpr int64_t pair_bytes = Q4 ? k_q4_0_pair_bytes : k_pair_bytes;
    load_tile_config();
    const int64_t n_in = a.n_in, nb = n_in / 32, n_pairs = (nb + 1) / 2;
    pair_pipeline<false> tiles;
    // Q4_0: the group's B tiles, [block][256], unpacked once for all its token tiles.
    uint8_t* levels = Q4 ? detail::gemm_scratch(size_t(2 * n_pairs) * 256) : nullptr;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        if constexpr (Q4)
            for (int64_t p = 0; p < n_pairs; p++) unpack_q4_0(gp + p * pair_bytes, 2 * p + 1 < nb, levels + p * 512);
        const int64_t rows = std::min<int64_t>(8, n_out - g * 8);
        const __mmask8 row_mask = __mmask8((1u << rows) - 1);
        for (int64_t t = t0; t + 16 <= t1; t += 16) {
            const int8_t* q = a.qs + t * n_in;
            const float* d = a.d + t * nb;  // token j's block scales at d + j * nb
            __m512 acc[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            // Pair p's products (tiles.result(p) once stored).
            auto issue = [&](int64_t p) {
                const uint8_t* b0 = Q4 ? levels + p * 512 : gp + p * pair_bytes + 32;
                const int8_t* a0 = q + 2 * p * 32;
                tiles.issue(p, a0, a0 + 32, n_in, b0, Q4 ? b0 + 256 : b0 + 32, Q4 ? 32 : 64, 2 * p + 1 < nb);
            };
            auto store = [&](int64_t p) { tiles.store(p, 2 * p + 1 < nb); };
            issue(0);
            store(0);
            for (int64_t p = 0; p < n_pairs; p++) {
                const int64_t ib = 2 * p;
                const bool both = ib + 1 < nb;
                if (p + 1 < n_pairs) issue(p + 1);
                if (t == t0 && g + 1 < g1) prefetch_share(gp + group_bytes, group_bytes, p, n_pairs);
                // The two blocks' 8 row scales (f16) side by side at the start of the pair; an odd last block runs in
                // the low half alone (masked FMA), as in q8_0_x8_pairs.
                const uint8_t* pair = gp + p * pair_bytes;
                const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pair)));
                const __mmask16 lanes = both ? 0xffff : 0x00ff;
                const int32_t(*s)[16] = tiles.result(p);
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(d[j * nb + ib]),
                                                         _mm256_set1_ps(both ? d[j * nb + ib + 1] : 0.0f), 1);
                    acc[j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[j])), _mm512_mul_ps(dw, dd),
                                                   acc[j], lanes);
                }
                if (p + 1 < n_pairs) store(p + 1);
            }
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                _mm256_mask_storeu_ps(y + (t + j) * n_out + g * 8, row_mask,
                                      _mm256_add_ps(_mm512_castps512_ps256(acc[j]), _mm512_extractf32x8_ps(acc[j], 1)));
        }
    }
    _tile_release();
}

// The K-quant formats of gemm_kquant_amx. A step is one pair of tile products; per step and token the kernel adds
// scale x sum to a 512-bit integer sum (vpmulld against the step's 16 row scales, sub-block h in half h), and per
// super-block F::finish turns the folded sums into the float operations of the VNNI kernel, in the same order.
//
// Q4_K (high_bit false) and Q5_K: step p of 4 per super-block is sub-blocks 2p and 2p + 1 of 32, TDPBSUD of the
// tokens' activations against the levels (unpack_levels); the folded sum is the integer of the VNNI kernel's vpdpbusd
// / vpdpwssd chains (the same exact sum of scale x level x activation), then q45_k_x8's float operations.
template <bool high_bit>
struct q45_k_steps {
    static constexpr int64_t bytes = high_bit ? 1440 : 1184, steps = 4, k = 32;
    static constexpr bool unsigned_levels = true;
    static void unpack(const uint8_t* sb, int64_t p, uint8_t* out) { unpack_levels<high_bit>(sb, int(2 * p), out); }
    // Row r's scales of sub-blocks 2p (byte r) and 2p + 1 (byte 8 + r) as dwords r and 8 + r.
    static __m512i scales(const uint8_t* sb, int64_t p) {
        return _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sb + 16 * p)));
    }
    // acc[j] += token j's super-block ib (sb) given its integer sums; d, bs: token 0's scales and group sums, rows
    // n_in apart in elements.
    static void finish(const uint8_t* sb, int64_t ib, const float* d, const int16_t* bs, int64_t n_in,
                       const __m512i* sums, __m256* acc) {
        const int64_t nb = n_in / 256;
        const __m256 dw = load_8_f16(sb + 128), dmw = load_8_f16(sb + 144);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const __m256i msum = q45_k_min_sum(sb, bs + j * (n_in / 16) + ib * 16);
            const __m256 da = _mm256_set1_ps(d[j * nb + ib]);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(sums[j])), _mm256_mul_ps(dw, da), acc[j]);
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmw, da), acc[j]);
        }
    }
};

// Q6_K: step c of 8 per super-block is the chunk of sub-blocks 2c and 2c + 1 of 16, two TDPBSSD of K = 16 against the
// levels less 32 (the low halves of q6_levels' vectors for 2c, the high ones for 2c + 1). The folded sum, scale x
// level x activation less 32 times scale x activation sum, is exactly q6_k_x8's integer after its offset, so its
// float operations follow as they are.
struct q6_k_steps {
    static constexpr int64_t bytes = 1696, steps = 8, k = 16;
    static constexpr bool unsigned_levels = false;
    static void unpack(const uint8_t* sb, int64_t c, uint8_t* out) {
        __m512i lv[4];
        q6_levels<false, false>(sb + 160 + 192 * c, lv);
        for (__m512i& v : lv) v = _mm512_sub_epi8(v, _mm512_set1_epi8(32));
        _mm512_store_si512(out, _mm512_shuffle_i64x2(lv[0], lv[1], 0x44));
        _mm512_store_si512(out + 64, _mm512_shuffle_i64x2(lv[2], lv[3], 0x44));
        _mm512_store_si512(out + 128, _mm512_shuffle_i64x2(lv[0], lv[1], 0xee));
        _mm512_store_si512(out + 192, _mm512_shuffle_i64x2(lv[2], lv[3], 0xee));
    }
    // Row r's int8 scale of sub-block 2c (byte 2r of the chunk's 16) in dword r, that of 2c + 1 (byte 2r + 1) in 8 + r.
    static __m512i scales(const uint8_t* sb, int64_t c) {
        const __m512i order = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
        return _mm512_permutexvar_epi32(
            order, _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sb + 16 * c))));
    }
    static void finish(const uint8_t* sb, int64_t ib, const float* d, const int16_t*, int64_t n_in, const __m512i* sums,
                       __m256* acc) {
        const int64_t nb = n_in / 256;
        const __m256 dw = load_8_f16(sb + 128);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(sums[j])),
                                     _mm256_mul_ps(dw, _mm256_set1_ps(d[j * nb + ib])), acc[j]);
    }
};

// The K-quant prefill over the whole tiles of 16 tokens in [t0, t1): per 8-row group the levels are unpacked once
// (F::unpack, [step][sub-block h][K / 4 vectors][32]) for all its token tiles; A tiles come from copy_tiles' layout.
template <class F>
void gemm_kquant_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                     int64_t n_out, int64_t g0, int64_t g1) {
    constexpr int64_t step_levels = 2 * 8 * F::k;  // B bytes per step: two sub-blocks of K / 4 vectors of 32
    load_tile_config(int(F::k));
    const int64_t n_in = a.n_in, nb = n_in / 256, n_steps = F::steps * nb;
    pair_pipeline<F::unsigned_levels> tiles;  // results [step parity][token][sub-block h * 8 + row]
    const size_t x_bytes = size_t((t1 - t0) / 16 * 16 * n_in);
    uint8_t* scratch = detail::gemm_scratch(x_bytes + size_t(n_steps * step_levels));
    int8_t* xs = reinterpret_cast<int8_t*>(scratch);
    uint8_t* levels = scratch + x_bytes;
    copy_tiles(a, t0, t1, xs);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        for (int64_t P = 0; P < n_steps; P++)
            F::unpack(gp + (P / F::steps) * F::bytes, P % F::steps, levels + P * step_levels);
        for (int64_t t = t0; t + 16 <= t1; t += 16) {
            const int8_t* q = xs + (t - t0) * n_in;  // step P's A tiles: 2 K bytes per token from q + 2 K * 16 * P
            auto issue = [&](int64_t P) {
                const uint8_t* lv = levels + P * step_levels;
                const int8_t* a0 = q + 2 * F::k * 16 * P;
                tiles.issue(P, a0, a0 + (F::k == 32 ? 512 : 16), 32, lv, lv + step_levels / 2, 32, true);
            };
            __m256 acc[16];
            __m512i sums[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) acc[j] = _mm256_setzero_ps();
            issue(0);
            tiles.store(0, true);
            for (int64_t P = 0; P < n_steps; P++) {
                if (P + 1 < n_steps) issue(P + 1);
                if (t == t0 && g + 1 < g1) prefetch_share(gp + group_bytes, group_bytes, P, n_steps);
                const int64_t ib = P / F::steps, p = P % F::steps;
                const uint8_t* sb = gp + ib * F::bytes;
                add_scaled(tiles.result(P), F::scales(sb, p), p == 0, sums);
                if (P + 1 < n_steps) tiles.store(P + 1, true);
                if (p == F::steps - 1) F::finish(sb, ib, a.d + t * nb, a.bsums + t * (n_in / 16), n_in, sums, acc);
            }
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) store_rows(acc[j], y + (t + j) * n_out, g * 8, n_out);
        }
    }
    _tile_release();
}

}  // namespace

void gemm_q8_0_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    gemm_pairs_amx<false>(packed, group_bytes, a, t0, t1, y, n_out, g0, g1);
}

void gemm_q4_0_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    gemm_pairs_amx<true>(packed, group_bytes, a, t0, t1, y, n_out, g0, g1);
}

void gemm_q4_k_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    gemm_kquant_amx<q45_k_steps<false>>(packed, group_bytes, a, t0, t1, y, n_out, g0, g1);
}

void gemm_q5_k_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    gemm_kquant_amx<q45_k_steps<true>>(packed, group_bytes, a, t0, t1, y, n_out, g0, g1);
}

void gemm_q6_k_amx(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
                   int64_t n_out, int64_t g0, int64_t g1) {
    gemm_kquant_amx<q6_k_steps>(packed, group_bytes, a, t0, t1, y, n_out, g0, g1);
}

}  // namespace memtile::cpu::avx512
