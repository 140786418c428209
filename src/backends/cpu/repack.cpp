// Builders of the interleaved layouts of repack.h (scalar: run once at load).
#include "backends/cpu/repack.h"

#include <cstring>

#include "core/error.h"
#include "quant/quant-formats.h"

namespace memtile::cpu::repack {
namespace {

constexpr size_t k_q4_k_bytes = 1184, k_q8_0_pair_bytes = 544;

void pack_q4_k(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    const int64_t nb = n_in / k_qk;
    for (int64_t ib = 0; ib < nb; ib++) {
        uint8_t* o = out + size_t(ib) * k_q4_k_bytes;
        std::memset(o, 0, k_q4_k_bytes);
        for (int r = 0; r < k_rows; r++) {
            if (!rows[r]) continue;
            const block_q4_k b = read_block<block_q4_k>(rows[r], ib);
            // level(e): elements 64c..64c+31 in the low nibbles of qs[32c..], 64c+32.. in the high nibbles.
            const auto level = [&b](int e) {
                const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
                return e % 64 < 32 ? byte & 15 : byte >> 4;
            };
            for (int s = 0; s < 8; s++)
                for (int v = 0; v < 4; v++)
                    for (int k = 0; k < 4; k++) {
                        const int e = 32 * s + 8 * v + k;
                        o[((s * 4 + v) * 8 + r) * 4 + k] = uint8_t(level(e) | (level(e + 4) << 4));
                    }
            for (int s = 0; s < 8; s++) {
                uint8_t sc, mn;
                unpack_scale_min_k4(b.scales, s, sc, mn);
                o[1024 + s * 8 + r] = sc;
                o[1088 + (s / 2) * 16 + r * 2 + s % 2] = mn;
            }
            std::memcpy(o + 1152 + 2 * r, &b.d, 2);
            std::memcpy(o + 1168 + 2 * r, &b.dmin, 2);
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
            for (int v = 0; v < 8; v++) std::memcpy(o + half * 256 + (v * 8 + r) * 4, b.qs + 4 * v, 4);
            std::memcpy(o + 512 + half * 16 + 2 * r, &b.d, 2);
        }
    }
}

}  // namespace

bool supported(dtype t) {
    return t == dtype::q4_k || t == dtype::q8_0;
}

size_t group_bytes(dtype t, int64_t n_in) {
    switch (t) {
        case dtype::q4_k: return size_t(n_in / k_qk) * k_q4_k_bytes;
        case dtype::q8_0: return size_t((n_in / k_qk_legacy + 1) / 2) * k_q8_0_pair_bytes;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

void pack_group(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
    switch (t) {
        case dtype::q4_k: pack_q4_k(rows, n_in, out); break;
        case dtype::q8_0: pack_q8_0(rows, n_in, out); break;
        default: fail("cpu", "repack: no interleaved layout for {}", dtype_name(t));
    }
}

}  // namespace memtile::cpu::repack
