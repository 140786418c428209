// Builders of the interleaved layouts of repack.h: the scalar reference (one level at a time, as the layouts
// are specified) and the packers used at load, which move 8 file bytes per step with 64-bit shifts and masks
// (the same bytes; tests/unit/repack-test.cpp compares the two on every format).
#include "backends/cpu/repack.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "quant/quant-formats.h"

namespace memtile::cpu::repack {
namespace {

constexpr size_t k_q4_k_bytes = 1184, k_q5_k_bytes = 1440, k_q6_k_bytes = 1696, k_q8_0_pair_bytes = 544,
                 k_q4_0_pair_bytes = 288;

// Row r's unpacked 6-bit scales and mins (bytes) and its d and dmin in the x8 Q4_K/Q5_K super-block o: the same in
// both packers (plain byte moves; the oracle's independence lies in the levels).
template <class Block>
void put_scales_mins(const Block& b, int r, uint8_t* o) {
    for (int s = 0; s < 8; s++) {
        uint8_t sc, mn;
        unpack_scale_min_k4(b.scales, s, sc, mn);
        o[s * 8 + r] = sc;
        o[64 + (s / 2) * 16 + r * 2 + s % 2] = mn;
    }
    std::memcpy(o + 128 + 2 * r, &b.d, 2);
    std::memcpy(o + 144 + 2 * r, &b.dmin, 2);
}

namespace ref {

// The low 4 bits of the 256 levels of a super-block of row r as nibble vectors [8 s][4 v][8 r][4 k], vector
// (s, v) at o + first + s * stride + 32 v.
template <class Level>
void put_nibbles(uint8_t* o, size_t first, size_t stride, int r, Level level) {
    for (int s = 0; s < 8; s++)
        for (int v = 0; v < 4; v++)
            for (int k = 0; k < 4; k++) {
                const int e = 32 * s + 8 * v + k;
                o[first + s * stride + 32 * v + r * 4 + k] = uint8_t((level(e) & 15) | ((level(e + 4) & 15) << 4));
            }
}

// The 256 levels of a super-block, each computed once: the packers below read every level two or three
// times (nibbles, high bits), and the per-element extraction (divisions, selects) dominated the load time.
template <class Level>
auto level_table(uint8_t (&lv)[k_qk], Level level) {
    for (int e = 0; e < k_qk; e++) lv[e] = uint8_t(level(e));
    return [&lv](int e) { return int(lv[e]); };
}

// Q4_K (high_bit false) and Q5_K (true): levels, 6-bit scales and mins, d and dmin.
template <bool high_bit>
void pack_q45_k(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    using block = std::conditional_t<high_bit, block_q5_k, block_q4_k>;
    constexpr size_t bytes = high_bit ? k_q5_k_bytes : k_q4_k_bytes;
    const int64_t nb = n_in / k_qk;
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib) * bytes;
        std::memset(o, 0, bytes);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block b = read_block<block>(rows[r], ib);
            // Elements 64c..64c+31 in the low nibbles of qs[32c..], 64c+32.. in the high nibbles; Q5_K: bit 4
            // of element 32s + l is bit s of qh[l].
            uint8_t lv[k_qk];
            const auto level = level_table(lv, [&b](int e) {
                const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
                int q = e % 64 < 32 ? byte & 15 : byte >> 4;
                if constexpr (high_bit) q |= ((b.qh[e % 32] >> (e / 32)) & 1) << 4;
                return q;
            });
            put_nibbles(o, 160, high_bit ? 160 : 128, r, level);
            if constexpr (high_bit)
                for (int s = 0; s < 8; s++)
                    for (int v = 0; v < 4; v++)
                        for (int k = 0; k < 4; k++) {
                            const int e = 32 * s + 8 * v + k;
                            o[160 + 160 * s + 128 + r * 4 + k] |=
                                uint8_t((level(e) >> 4) << (2 * v) | (level(e + 4) >> 4) << (2 * v + 1));
                        }
            put_scales_mins(b, r, o);
        }
    }
}

void pack_q6_k(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    const int64_t nb = n_in / k_qk;
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib) * k_q6_k_bytes;
        std::memset(o, 0, k_q6_k_bytes);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block_q6_k b = read_block<block_q6_k>(rows[r], ib);
            // Layout of quant-formats.h: half h, quarter u = (e % 128) / 32, l = e % 32.
            uint8_t lv[k_qk];
            const auto level = level_table(lv, [&b](int e) {
                const int h = e / 128, u = (e % 128) / 32, l = e % 32;
                const uint8_t byte = b.ql[64 * h + l + 32 * (u & 1)];
                return (u < 2 ? byte & 15 : byte >> 4) | (((b.qh[32 * h + l] >> (2 * u)) & 3) << 4);
            });
            // Sub-block s = 2c + h (elements 32c + 16h + 4j + k): vector j < 3 holds group j's level in bits 0-5 and
            // bits 2j, 2j + 1 of group 3's level in bits 6-7.
            for (int s = 0; s < 16; s++)
                for (int j = 0; j < 3; j++)
                    for (int k = 0; k < 4; k++) {
                        const int e = 16 * s + 4 * j + k;
                        o[160 + 192 * (s / 2) + 64 * j + 32 * (s % 2) + r * 4 + k] =
                            uint8_t(level(e) | ((level(16 * s + 12 + k) >> (2 * j)) & 3) << 6);
                    }
            for (int s = 0; s < 16; s++) o[(s / 2) * 16 + r * 2 + s % 2] = uint8_t(b.scales[s]);
            std::memcpy(o + 128 + 2 * r, &b.d, 2);
        }
    }
}

// Q4_0: element j of a block in the low nibble of qs[j], element j + 16 in the high nibble (levels + 8).
void pack_q4_0(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    const int64_t nb = n_in / k_qk_legacy;
    std::memset(out, 0, group_bytes(dtype::q4_0, n_in));
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib / 2) * k_q4_0_pair_bytes;
        const int half = int(ib % 2);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block_q4_0 b = read_block<block_q4_0>(rows[r], ib);
            const auto level = [&b](int e) { return e < 16 ? b.qs[e] & 15 : b.qs[e - 16] >> 4; };
            for (int v = 0; v < 4; v++)
                for (int k = 0; k < 4; k++)
                    o[32 + half * 128 + (v * 8 + r) * 4 + k] = uint8_t(level(8 * v + k) | (level(8 * v + 4 + k) << 4));
            std::memcpy(o + half * 16 + 2 * r, &b.d, 2);
        }
    }
}

void pack_q8_0(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    const int64_t nb = n_in / k_qk_legacy;
    std::memset(out, 0, group_bytes(dtype::q8_0, n_in));
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib / 2) * k_q8_0_pair_bytes;
        const int half = int(ib % 2);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block_q8_0 b = read_block<block_q8_0>(rows[r], ib);
            for (int v = 0; v < 8; v++) std::memcpy(o + 32 + v * 64 + half * 32 + r * 4, b.qs + 4 * v, 4);
            std::memcpy(o + half * 16 + 2 * r, &b.d, 2);
        }
    }
}

// F32, F16, BF16: element k of row r at k * 32 + r, one element at a time.
void pack_float(const uint8_t* const* rows, int64_t n_in, size_t elem, uint8_t* out) {
    for (int64_t k = 0; k < n_in; k++)
        for (int r = 0; r < k_float_rows; r++) {
            uint8_t* o = out + (size_t(k) * k_float_rows + size_t(r)) * elem;
            if (rows[r])
                std::memcpy(o, rows[r] + size_t(k) * elem, elem);
            else
                std::memset(o, 0, elem);
        }
}

}  // namespace ref

// The float transpose in tiles of 64 columns x 32 rows: each row is read in order and the tile's output
// (4-8 KiB) stays in L1 while its 32 rows are scattered into it.
template <class E>
void pack_float(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    constexpr int64_t tile = 64;
    E* o = reinterpret_cast<E*>(out);
    for (int64_t k0 = 0; k0 < n_in; k0 += tile) {
        const int64_t k1 = std::min(n_in, k0 + tile);
        for (int r = 0; r < k_float_rows; r++) {
            E* dst = o + k0 * k_float_rows + r;
            if (!rows[r]) {
                for (int64_t k = k0; k < k1; k++, dst += k_float_rows) *dst = E(0);
                continue;
            }
            const uint8_t* src = rows[r] + size_t(k0) * sizeof(E);
            for (int64_t k = k0; k < k1; k++, dst += k_float_rows, src += sizeof(E)) std::memcpy(dst, src, sizeof(E));
        }
    }
}

// The fast packers. Little-endian loads: byte i of a 64-bit word is file byte i, so a 4-byte store of the low
// or high half writes elements k = 0..3 in order.
static_assert(std::endian::native == std::endian::little, "the fast packers assume little-endian words");

constexpr uint64_t k_low_nibbles = 0x0F0F0F0F0F0F0F0Full, k_low_bits = 0x0101010101010101ull,
                   k_low_pairs = 0x0303030303030303ull;

uint64_t load64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
void store32(uint8_t* p, uint32_t v) {
    std::memcpy(p, &v, 4);
}

// One 32-element sub-block's nibble vectors of one row: src holds its 32 levels as the nibbles `shift` (0 or 4)
// of 32 consecutive bytes; vector v (at dst + 32 v) gets level 8v + k in the low and 8v + 4 + k in the high
// nibble of byte k.
void put_nibble_vectors(const uint8_t* src, int shift, uint8_t* dst) {
    for (int v = 0; v < 4; v++) {
        const uint64_t m = (load64(src + 8 * v) >> shift) & k_low_nibbles;
        store32(dst + 32 * v, uint32_t(m) | uint32_t(m >> 32) << 4);
    }
}

template <bool high_bit>
void pack_q45_k(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    using block = std::conditional_t<high_bit, block_q5_k, block_q4_k>;
    constexpr size_t bytes = high_bit ? k_q5_k_bytes : k_q4_k_bytes, stride = high_bit ? 160 : 128;
    const int64_t nb = n_in / k_qk;
    const bool full = std::all_of(rows, rows + k_rows, [](const uint8_t* p) { return p != nullptr; });
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib) * bytes;
        if (!full) std::memset(o, 0, bytes);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block b = read_block<block>(rows[r], ib);
            // Sub-block s = 2c + h: nibble h of qs[32c..32c+31].
            for (int s = 0; s < 8; s++)
                put_nibble_vectors(b.qs + 32 * (s / 2), 4 * (s % 2), o + 160 + stride * s + 4 * r);
            if constexpr (high_bit)
                for (int s = 0; s < 8; s++) {
                    // Bit s of qh[l] is bit 4 of element 32s + l; byte k gets it for 8v + k at bit 2v and for
                    // 8v + 4 + k at bit 2v + 1.
                    uint32_t acc = 0;
                    for (int v = 0; v < 4; v++) {
                        const uint64_t m = (load64(b.qh + 8 * v) >> s) & k_low_bits;
                        acc |= uint32_t(m) << (2 * v) | uint32_t(m >> 32) << (2 * v + 1);
                    }
                    store32(o + 160 + 160 * s + 128 + 4 * r, acc);
                }
            put_scales_mins(b, r, o);
        }
    }
}

void pack_q6_k(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    const int64_t nb = n_in / k_qk;
    const bool full = std::all_of(rows, rows + k_rows, [](const uint8_t* p) { return p != nullptr; });
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib) * k_q6_k_bytes;
        if (!full) std::memset(o, 0, k_q6_k_bytes);
        std::memset(o + 144, 0, 16);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block_q6_k b = read_block<block_q6_k>(rows[r], ib);
            for (int c = 0; c < 8; c++) {
                // Chunk c = 4h + u: low 4 bits in nibble u / 2 of ql[64h + 32 (u % 2) ..], top 2 bits at bits 2u of
                // qh[32h ..]; the 32 levels of the chunk as bytes, then per 16-element half (4 groups of 4) the three
                // vectors of repack.h: group j's level | bits 2j, 2j + 1 of group 3's level at bits 6-7.
                const int h = c / 4, u = c % 4;
                uint64_t lv[4];
                for (int w = 0; w < 4; w++)
                    lv[w] = ((load64(b.ql + 64 * h + 32 * (u % 2) + 8 * w) >> (4 * (u / 2))) & k_low_nibbles) |
                            ((load64(b.qh + 32 * h + 8 * w) >> (2 * u)) & k_low_pairs) << 4;
                for (int half = 0; half < 2; half++) {
                    const uint32_t g3 = uint32_t(lv[2 * half + 1] >> 32);
                    uint8_t* oh = o + 160 + 192 * c + 32 * half + 4 * r;
                    for (int j = 0; j < 3; j++) {
                        const uint32_t g = uint32_t(lv[2 * half + j / 2] >> (32 * (j % 2)));
                        store32(oh + 64 * j, g | ((g3 >> (2 * j)) & 0x03030303u) << 6);
                    }
                }
            }
            for (int s = 0; s < 16; s++) o[(s / 2) * 16 + r * 2 + s % 2] = uint8_t(b.scales[s]);
            std::memcpy(o + 128 + 2 * r, &b.d, 2);
        }
    }
}

// Q4_0 and Q8_0: pairs of 32-element blocks; a missing row or the second block of an odd last pair stays zero.
template <bool q8>
void pack_legacy(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    using block = std::conditional_t<q8, block_q8_0, block_q4_0>;
    constexpr size_t pair = q8 ? k_q8_0_pair_bytes : k_q4_0_pair_bytes;
    const int64_t nb = n_in / k_qk_legacy;
    const bool full = std::all_of(rows, rows + k_rows, [](const uint8_t* p) { return p != nullptr; });
    if (!full || nb % 2) std::memset(out, 0, group_bytes(q8 ? dtype::q8_0 : dtype::q4_0, n_in));
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib / 2) * pair;
        const size_t half = size_t(ib % 2);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const uint8_t* b = rows[r] + size_t(ib) * sizeof(block);
            const uint8_t* qs = b + offsetof(block, qs);
            // Q8_0: the two blocks' vectors v side by side (repack.h); Q4_0: block after block.
            uint8_t* dst = o + 32 + half * (q8 ? 32 : 128) + 4 * r;
            if constexpr (q8) {
                for (int v = 0; v < 8; v++) std::memcpy(dst + 64 * v, qs + 4 * v, 4);
            } else {
                // Element j in the low nibble of qs[j], j + 16 in the high nibble: vector v reads qs[8 (v % 2) ..]
                // at nibble v / 2.
                for (int v = 0; v < 4; v++) {
                    const uint64_t m = (load64(qs + 8 * (v % 2)) >> (4 * (v / 2))) & k_low_nibbles;
                    store32(dst + 32 * v, uint32_t(m) | uint32_t(m >> 32) << 4);
                }
            }
            std::memcpy(o + half * 16 + 2 * r, b + offsetof(block, d), 2);
        }
    }
}

}  // namespace

bool supported(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k || t == dtype::q8_0 || t == dtype::q4_0 ||
           t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
}

int group_rows(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 ? k_float_rows : k_rows;
}

size_t group_bytes(dtype t, int64_t n_in) {
    switch (t) {
        case dtype::q4_k: return size_t(n_in / k_qk) * k_q4_k_bytes;
        case dtype::q5_k: return size_t(n_in / k_qk) * k_q5_k_bytes;
        case dtype::q6_k: return size_t(n_in / k_qk) * k_q6_k_bytes;
        case dtype::q8_0: return size_t((n_in / k_qk_legacy + 1) / 2) * k_q8_0_pair_bytes;
        case dtype::q4_0: return size_t((n_in / k_qk_legacy + 1) / 2) * k_q4_0_pair_bytes;
        case dtype::f32: return size_t(n_in) * k_float_rows * 4;
        case dtype::f16:
        case dtype::bf16: return size_t(n_in) * k_float_rows * 2;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

void pack_group(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    switch (t) {
        case dtype::q4_k: pack_q45_k<false>(rows, n_in, out); break;
        case dtype::q5_k: pack_q45_k<true>(rows, n_in, out); break;
        case dtype::q6_k: pack_q6_k(rows, n_in, out); break;
        case dtype::q8_0: pack_legacy<true>(rows, n_in, out); break;
        case dtype::q4_0: pack_legacy<false>(rows, n_in, out); break;
        case dtype::f32: pack_float<uint32_t>(rows, n_in, out); break;
        case dtype::f16:
        case dtype::bf16: pack_float<uint16_t>(rows, n_in, out); break;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

void pack_group_ref(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    switch (t) {
        case dtype::q4_k: ref::pack_q45_k<false>(rows, n_in, out); break;
        case dtype::q5_k: ref::pack_q45_k<true>(rows, n_in, out); break;
        case dtype::q6_k: ref::pack_q6_k(rows, n_in, out); break;
        case dtype::q8_0: ref::pack_q8_0(rows, n_in, out); break;
        case dtype::q4_0: ref::pack_q4_0(rows, n_in, out); break;
        case dtype::f32: ref::pack_float(rows, n_in, 4, out); break;
        case dtype::f16:
        case dtype::bf16: ref::pack_float(rows, n_in, 2, out); break;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

}  // namespace memtile::cpu::repack
