// Interleaved ("x8") weight layouts for --repack on: 8 consecutive rows of a matrix are stored together, so
// one 32-byte vector holds 4 weight bytes of each of the 8 rows and the decode kernels produce 8 outputs per
// pass with one int32/f32 lane per row: each activation quad is broadcast once for 8 rows, the per-row
// horizontal sums disappear, and the scale arithmetic is done once per 8 rows. Every vector load of the
// layout is 32-byte aligned (groups start 64-byte aligned), so no load splits a cache line.
//
// Group layouts, per 8-row group (a matrix with n_out rows has ceil(n_out / 8) groups; the rows past n_out
// of the last group are zero and never stored to y):
//   Q4_K x8, per super-block (1184 bytes), elements e of the super-block, sub-block s = e / 32:
//     qs[8 s][4 v][8 r][4 k]  byte (s, v, r, k): element 32s + 8v + k of row r in the low nibble,
//                             element 32s + 8v + 4 + k in the high nibble                       1024 bytes
//     scales[8 s][8 r]        u8 6-bit sub-block scales                                            64 bytes
//     mins[4 p][8 r][2]       u8 6-bit mins of sub-blocks 2p and 2p + 1                            64 bytes
//     d[8 r], dmin[8 r]       f16 as in the file                                                   32 bytes
//   Q5_K x8, per super-block (1440 bytes): qs as Q4_K (the low 4 bits), then
//     qh[8 s][8 r][4 k]       bit 2v: bit 4 of element 32s + 8v + k, bit 2v + 1: of element 32s + 8v + 4 + k  256
//     scales, mins, d, dmin   as Q4_K                                                             160 bytes
//   Q6_K x8, per super-block (1696 bytes), chunk c = e / 32 of 32 elements in 8 groups g = 2v + i of 4
//   (elements 32c + 8v + 4i + k):
//     ql[8 c][4 v][8 r][4 k]  the low 4 bits, nibbles as Q4_K                                   1024 bytes
//     qh[8 c][2 h][8 r][4 k]  bits 2j, 2j + 1: the top 2 bits of group g = 4h + j                  512 bytes
//     scales[16 s][8 r]       int8 (h of chunk c is the 16-element sub-block 2c + h)               128 bytes
//     d[8 r]                  f16, then 16 zero bytes                                               32 bytes
//   Q8_0 x8, per pair of 32-element blocks (544 bytes; the second block of an odd last pair is zero):
//     qs[2 b][8 v][8 r][4 k]  int8 element 4v + k of block b of row r                             512 bytes
//     d[2 b][8 r]             f16 as in the file                                                   32 bytes
//   Q4_0 x8, per pair of blocks (288 bytes): qs[2 b][4 v][8 r][4 k] levels 0..15 (stored + 8) of elements
//     8v + k (low nibble) and 8v + 4 + k (high nibble), 256 bytes; d[2 b][8 r] f16, 32 bytes
// Same size as the file for Q8_0 and Q4_0, +2.8 % for Q4_K, +2.3 % for Q5_K (6-bit scales stored as bytes), +1 % Q6_K.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace memtile::cpu::repack {

inline constexpr int k_rows = 8;

// Whether the x8 layout exists for this format.
bool supported(dtype t);
// Bytes of one 8-row group for rows of n_in elements (a multiple of 32).
size_t group_bytes(dtype t, int64_t n_in);
// Writes one group from up to 8 rows of the file format (rows[r] == nullptr: a zero row).
void pack_group(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out);

}  // namespace memtile::cpu::repack
