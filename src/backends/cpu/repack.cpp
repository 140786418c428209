// Builders of the interleaved layouts of repack.h (scalar: run once at load).
#include "backends/cpu/repack.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "quant/quant-formats.h"

namespace memtile::cpu::repack {
namespace {

constexpr size_t k_q4_k_bytes = 1184, k_q5_k_bytes = 1440, k_q6_k_bytes = 1696, k_q8_0_pair_bytes = 544,
                 k_q4_0_pair_bytes = 288;

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
            for (int s = 0; s < 8; s++) {
                uint8_t sc, mn;
                unpack_scale_min_k4(b.scales, s, sc, mn);
                o[s * 8 + r] = sc;
                o[64 + (s / 2) * 16 + r * 2 + s % 2] = mn;
            }
            std::memcpy(o + 128 + 2 * r, &b.d, 2);
            std::memcpy(o + 144 + 2 * r, &b.dmin, 2);
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
            put_nibbles(o, 160, 192, r, level);
            // Group g = 2v + i of chunk c (elements 32c + 8v + 4i + k): top 2 bits at bits 2(g % 4) of vector
            // g / 4 (which is also the 16-element sub-block 2c + g / 4).
            for (int c = 0; c < 8; c++)
                for (int g = 0; g < 8; g++)
                    for (int k = 0; k < 4; k++) {
                        const int e = 32 * c + 4 * g + k;
                        o[160 + 192 * c + 128 + 32 * (g / 4) + r * 4 + k] |= uint8_t((level(e) >> 4) << (2 * (g % 4)));
                    }
            for (int s = 0; s < 16; s++) o[s * 8 + r] = uint8_t(b.scales[s]);
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
            for (int v = 0; v < 8; v++) std::memcpy(o + 32 + half * 256 + (v * 8 + r) * 4, b.qs + 4 * v, 4);
            std::memcpy(o + half * 16 + 2 * r, &b.d, 2);
        }
    }
}

}  // namespace

bool supported(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k || t == dtype::q8_0 || t == dtype::q4_0;
}

size_t group_bytes(dtype t, int64_t n_in) {
    switch (t) {
        case dtype::q4_k: return size_t(n_in / k_qk) * k_q4_k_bytes;
        case dtype::q5_k: return size_t(n_in / k_qk) * k_q5_k_bytes;
        case dtype::q6_k: return size_t(n_in / k_qk) * k_q6_k_bytes;
        case dtype::q8_0: return size_t((n_in / k_qk_legacy + 1) / 2) * k_q8_0_pair_bytes;
        case dtype::q4_0: return size_t((n_in / k_qk_legacy + 1) / 2) * k_q4_0_pair_bytes;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

void pack_group(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    switch (t) {
        case dtype::q4_k: pack_q45_k<false>(rows, n_in, out); break;
        case dtype::q5_k: pack_q45_k<true>(rows, n_in, out); break;
        case dtype::q6_k: pack_q6_k(rows, n_in, out); break;
        case dtype::q8_0: pack_q8_0(rows, n_in, out); break;
        case dtype::q4_0: pack_q4_0(rows, n_in, out); break;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

}  // namespace memtile::cpu::repack
