#include <cstring>

#include "backends/cuda/cuda-kernels.h"
#include "quant/quant-formats.h"

namespace memtile::cuda {

bool matvec_supported(dtype t) {
    switch (t) {
        case dtype::f32:
        case dtype::f16:
        case dtype::bf16:
        case dtype::q8_0:
        case dtype::q4_0:
        case dtype::q4_k:
        case dtype::q5_k:
        case dtype::q6_k: return true;
        default: return false;
    }
}

bool matvec_uses_int8(dtype t) {
    return t == dtype::q8_0 || t == dtype::q4_0 || t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
}

int64_t device_q_row_bytes(dtype t, int64_t n_in) {
    switch (t) {
        case dtype::q8_0: return n_in;
        case dtype::q4_0: return n_in / 2;
        case dtype::q4_k: return n_in / k_qk * 128;
        case dtype::q6_k: return n_in / k_qk * 208;
        default: return int64_t(row_bytes(t, uint64_t(n_in)));
    }
}

int64_t device_d_row_elems(dtype t, int64_t n_in) {
    switch (t) {
        case dtype::q8_0:
        case dtype::q4_0: return n_in / k_qk_legacy;
        case dtype::q4_k: return 2 * q4k_side_row_words(n_in / k_qk);
        case dtype::q6_k: return n_in / k_qk;
        default: return 0;
    }
}

void repack_rows(dtype t, const uint8_t* src, int64_t n_in, int64_t n_rows, uint8_t* q, uint16_t* d) {
    const int64_t src_row = int64_t(row_bytes(t, uint64_t(n_in)));
    const int64_t q_row = device_q_row_bytes(t, n_in), d_row = device_d_row_elems(t, n_in);
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t* s = src + r * src_row;
        uint8_t* qr = q + r * q_row;
        uint16_t* dr = d ? d + r * d_row : nullptr;
        switch (t) {
            case dtype::q8_0:
                for (int64_t b = 0; b < d_row; b++) {
                    const auto blk = read_block<block_q8_0>(s, b);
                    dr[b] = blk.d;
                    std::memcpy(qr + b * 32, blk.qs, 32);
                }
                break;
            case dtype::q4_0:
                for (int64_t b = 0; b < d_row; b++) {
                    const auto blk = read_block<block_q4_0>(s, b);
                    dr[b] = blk.d;
                    std::memcpy(qr + b * 16, blk.qs, 16);
                }
                break;
            case dtype::q4_k: {
                // Per super-block 128 quant bytes in q (GGUF order); in d its scale/min words (the 6-bit values as
                // bytes) and its d/dmin word (cuda-kernels.h). The decode task of elements
                // 64c..64c+63 reads one scale word and one d/dmin word without unpacking anything.
                const int64_t n_sb = n_in / k_qk;
                auto* side = reinterpret_cast<uint8_t*>(dr);
                std::memset(side, 0, size_t(4 * q4k_side_row_words(n_sb)));
                for (int64_t b = 0; b < n_sb; b++) {
                    const auto blk = read_block<block_q4_k>(s, b);
                    std::memcpy(qr + b * 128, blk.qs, 128);
                    uint8_t* sm = side + 4 * q4k_sm_word(b);
                    for (int j = 0; j < 8; j++)
                        unpack_scale_min_k4(blk.scales, j, sm[4 * (j / 2) + (j % 2)], sm[4 * (j / 2) + 2 + (j % 2)]);
                    const uint16_t dm[2] = {blk.d, blk.dmin};
                    std::memcpy(side + 4 * q4k_dm_word(b), dm, 4);
                }
                break;
            }
            case dtype::q6_k: {
                // The device layout of cuda-kernels.h: per half 6 pieces of 16 bytes of signed 6-bit fields in bits
                // 2..7 (one mask yields a dp4a operand), halves interleaved by pieces in groups of 32; then the scales.
                const int64_t n_half = 2 * d_row;
                std::memset(qr, 0, size_t(q_row));
                for (int64_t b = 0; b < d_row; b++) {
                    const auto blk = read_block<block_q6_k>(s, b);
                    dr[b] = blk.d;
                    for (int e = 0; e < 256; e++) {
                        const int hh = e / 128, j = (e % 128) / 32, l = e % 32;
                        const int lb = blk.ql[64 * hh + 32 * (j & 1) + l];
                        const int q = ((j >> 1) ? lb >> 4 : lb & 15) | (((blk.qh[32 * hh + l] >> (2 * j)) & 3) << 4);
                        const int f = (q - 32) & 63;  // the signed value's 6 low bits
                        const int sub = (e % 128) / 16, g = sub / 4, k = sub % 4;
                        const int o = 16 * 3 * g + 4 * ((e % 16) / 4) + e % 4;  // its byte in piece 3g of the half
                        auto at = [&](int p) -> uint8_t& { return qr[q6k_half_byte(2 * b + hh, o + 16 * p, n_half)]; };
                        if (k < 3)
                            at(k) |= uint8_t(f << 2);
                        else
                            for (int p = 0; p < 3; p++) at(p) |= uint8_t((f >> (4 - 2 * p)) & 3);
                    }
                    std::memcpy(qr + q6k_scale_byte(2 * b, n_half), blk.scales, 16);
                }
                break;
            }
            default: std::memcpy(qr, s, size_t(q_row)); break;
        }
    }
}

}  // namespace memtile::cuda
