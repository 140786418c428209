// Block layouts of the GGML tensor formats, byte-for-byte as they are stored in GGUF files.
//
// A quantized row is a sequence of blocks; a block covers `k_qk_legacy` (32) or `k_qk` (256) consecutive
// elements of one row and is self-contained (its scales travel with it). Half-precision fields are kept as
// raw IEEE binary16 bits (uint16_t, little-endian) and converted with core/fp16.h, never through a
// compiler half type, so that the bit patterns in files are reproduced exactly.
//
// Naming of the fields follows the published GGML descriptions so that documentation can be read side by
// side: d = scale, m/dmin = minimum (offset), qs = packed low bits, qh = packed high bits, scales = packed
// sub-block scales.
//
// Blocks in a row are packed at a stride of sizeof(block), which is not a multiple of the struct's
// alignment for every format (e.g. 18 bytes for Q4_0), so code that reads blocks from file memory copies
// them (read_block) instead of dereferencing possibly misaligned pointers.
#pragma once

#include <cstdint>
#include <cstring>

namespace memtile {

inline constexpr int k_qk_legacy = 32;      // elements per block of Q4_0 .. Q8_1
inline constexpr int k_qk = 256;            // elements per super-block of the K formats
inline constexpr int k_k_scale_bytes = 12;  // packed 6-bit scales+mins of Q4_K/Q5_K (8 sub-blocks)

// Q4_0: x[i] = d * (q[i] - 8), q in 0..15.
// qs[j] holds element j in its low nibble and element j+16 in its high nibble.
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[k_qk_legacy / 2];
};

// Q4_1: x[i] = d * q[i] + m, q in 0..15; nibble order as Q4_0.
struct block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[k_qk_legacy / 2];
};

// Q5_0: x[i] = d * (q[i] - 16), q in 0..31. Low 4 bits in qs (nibble order as Q4_0); bit 4 of element i is
// bit i of qh read as a little-endian uint32.
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[k_qk_legacy / 2];
};

// Q5_1: x[i] = d * q[i] + m, q in 0..31; bits as Q5_0.
struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[k_qk_legacy / 2];
};

// Q8_0: x[i] = d * qs[i].
struct block_q8_0 {
    uint16_t d;
    int8_t qs[k_qk_legacy];
};

// Q8_1: x[i] = d * qs[i]; s = d * sum(qs) is a precomputed helper for dot products with Q4_1/Q5_1.
struct block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[k_qk_legacy];
};

// Q2_K: 16 sub-blocks of 16 elements. x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in 0..3.
// Elements are grouped in two halves of 128; in half h, byte qs[32h + l] holds 2-bit fields at shifts
// 0, 2, 4, 6 for elements 128h + 32k + l (k = 0..3, l = 0..31). Sub-block s covers elements 16s..16s+15.
struct block_q2_k {
    uint8_t scales[k_qk / 16];
    uint8_t qs[k_qk / 4];
    uint16_t d;
    uint16_t dmin;
};

// Q3_K: 16 sub-blocks of 16 elements. x = d * (sc[s] - 32) * (q - 4 * !hbit), with q the 2-bit field
// (layout as Q2_K's qs) and hbit bit 8h + k of hmask[l] (h = half, k = shift index, l = 0..31).
// The 16 6-bit scales are packed in 12 bytes: low nibbles of sc[0..7] in scales[0..7] low nibbles,
// sc[8..15] in scales[0..7] high nibbles, and the 2-bit high parts of sc[i] at bit 2*(i/4) of scales[8 + i%4].
struct block_q3_k {
    uint8_t hmask[k_qk / 8];
    uint8_t qs[k_qk / 4];
    uint8_t scales[k_k_scale_bytes];
    uint16_t d;
};

// Q4_K: 8 sub-blocks of 32. x = d * sc[s] * q - dmin * mn[s], q in 0..15, sc/mn 6-bit (unpack_scale_min_k4).
// Elements 64c..64c+31 are the low nibbles of qs[32c..32c+31], elements 64c+32..64c+63 the high nibbles.
struct block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[k_k_scale_bytes];
    uint8_t qs[k_qk / 2];
};

// Q5_K: as Q4_K with q in 0..31; bit 4 of element 32s + l is bit s of qh[l].
struct block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[k_k_scale_bytes];
    uint8_t qh[k_qk / 8];
    uint8_t qs[k_qk / 2];
};

// Q6_K: 16 sub-blocks of 16. x = d * scales[s] * (q - 32), q in 0..63. In half h (128 elements), for
// l = 0..31: element 128h + l      = low nibble of ql[64h + l]      | bits 0-1 of qh[32h + l] << 4,
//            element 128h + l + 32 = low nibble of ql[64h + l + 32] | bits 2-3 of qh[32h + l] << 4,
//            element 128h + l + 64 = high nibble of ql[64h + l]     | bits 4-5 of qh[32h + l] << 4,
//            element 128h + l + 96 = high nibble of ql[64h + l + 32]| bits 6-7 of qh[32h + l] << 4.
struct block_q6_k {
    uint8_t ql[k_qk / 2];
    uint8_t qh[k_qk / 4];
    int8_t scales[k_qk / 16];
    uint16_t d;
};

// Q8_K: activation format of the K-quant dot products. x = d * qs[i] with a float (not half) scale;
// bsums[g] = sum of qs[16g..16g+15], precomputed for the min/offset terms of Q2_K..Q5_K dot products.
struct block_q8_k {
    float d;
    int8_t qs[k_qk];
    int16_t bsums[k_qk / 16];
};

// Sizes are part of the file format; they must equal block_bytes in core/dtype.cpp's table (also checked at
// run time by the quant_formats test, since that table is not constexpr).
static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_k) == 84);
static_assert(sizeof(block_q3_k) == 110);
static_assert(sizeof(block_q4_k) == 144);
static_assert(sizeof(block_q5_k) == 176);
static_assert(sizeof(block_q6_k) == 210);
static_assert(sizeof(block_q8_k) == 292);

// Copies block `i` of a packed row into an aligned struct.
template <typename Block>
inline Block read_block(const void* row, int64_t i) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(row) + i * int64_t(sizeof(Block)), sizeof(Block));
    return b;
}

template <typename Block>
inline void write_block(void* row, int64_t i, const Block& b) {
    std::memcpy(static_cast<uint8_t*>(row) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}

// Q4_K/Q5_K pack 8 (scale, min) pairs of 6 bits into 12 bytes: pairs 0..3 in the low 6 bits of bytes 0..3
// (scales) and 4..7 (mins); pairs 4..7 keep their low 4 bits in the nibbles of bytes 8..11 (scale low,
// min high) and their top 2 bits in the top 2 bits of bytes 0..3 (scales) and 4..7 (mins).
inline void unpack_scale_min_k4(const uint8_t* packed, int j, uint8_t& scale, uint8_t& min) {
    if (j < 4) {
        scale = packed[j] & 63;
        min = packed[j + 4] & 63;
    } else {
        scale = uint8_t((packed[j + 4] & 0xf) | ((packed[j - 4] >> 6) << 4));
        min = uint8_t((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
    }
}

// Inverse of unpack_scale_min_k4 for values 0..63.
inline void pack_scale_min_k4(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
    for (int j = 0; j < 4; ++j) {
        packed[j] = uint8_t((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
        packed[j + 4] = uint8_t((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
        packed[j + 8] = uint8_t((scales[j + 4] & 0xf) | ((mins[j + 4] & 0xf) << 4));
    }
}

// The 16 signed 6-bit scales of Q3_K, as stored value + 32 (0..63); see block_q3_k.
inline int unpack_scale_q3_k(const uint8_t* packed, int i) {
    const int low = i < 8 ? packed[i] & 0xf : packed[i - 8] >> 4;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    return low | high << 4;
}

}  // namespace memtile
