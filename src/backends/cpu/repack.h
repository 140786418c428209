// Interleaved ("x8") weight layouts for --repack on: 8 consecutive rows of a matrix are stored together, so
// one 32-byte vector holds 4 weight bytes of each of the 8 rows and the decode kernels produce 8 outputs per
// pass with one int32/f32 lane per row: each activation quad is broadcast once for 8 rows, the per-row
// horizontal sums disappear, and the scale arithmetic is done once per 8 rows. Every vector load of the
// layout is 32-byte aligned (groups start 64-byte aligned), so no load splits a cache line.
//
// Group layouts, per 8-row group (a matrix with n_out rows has ceil(n_out / 8) groups; the rows past n_out
// of the last group are zero and never stored to y). Within a block the scales come first and the quants
// follow in the order the kernels read them, so a decode pass touches memory strictly in address order
// (what the hardware stream prefetchers follow).
//   Q4_K x8, per super-block (1184 bytes), sub-block s = e / 32 of element e:
//     scales[8 s][8 r] u8 6-bit @0, mins[4 p][8 r][2] (sub-blocks 2p, 2p + 1) @64, d[8 r] f16 @128,
//     dmin[8 r] f16 @144; nibble vector (s, v) [8 r][4 k] @160 + 128 s + 32 v: byte (r, k) holds element
//     32s + 8v + k of row r in the low nibble and element 32s + 8v + 4 + k in the high nibble.
//   Q5_K x8, per super-block (1440 bytes): meta as Q4_K @0..159; sub-block s @160 + 160 s: its 4 nibble
//     vectors (low 4 bits), then qh[8 r][4 k] @+128 with bit 2v = bit 4 of element 32s + 8v + k and bit
//     2v + 1 = bit 4 of element 32s + 8v + 4 + k.
//   Q6_K x8, per super-block (1696 bytes): scales[8 c][8 r][2 h] int8 @0 (sub-block 2c + h), d[8 r] f16 @128
//     (16 zero bytes after); sub-blocks 2c and 2c + 1 (16 elements each) @160 + 192 c, vector by vector: with
//     L(g) the 6-bit level of element 16s + 4g + k of row r, byte (r, k) of vector j (j < 3) of sub-block
//     s = 2c + h @+64 j + 32 h holds L(j) in bits 0-5 and bits 2j, 2j + 1 of L(3) in bits 6-7 (session 11: 11
//     vector operations unpack a sub-block, 17 before; session 17: vector j of both sub-blocks in one 64-byte
//     piece, one AVX-512 load).
//   Q8_0 x8, per pair of 32-element blocks (544 bytes; the second block of an odd last pair is zero):
//     d[2 b][8 r] f16 @0, then [8 v][2 b][8 r][4 k] int8 @32: element 4v + k of row r in block b (vector v of
//     both blocks in one 64-byte piece, so an AVX-512 register holds one block per 256-bit half; session 19).
//   Q4_0 x8, per pair of blocks (288 bytes): d[2 b][8 r] f16 @0, block b @32 + 128 b: [4 v][8 r][4 k]
//     levels 0..15 (stored + 8) of elements 8v + k (low nibble) and 8v + 4 + k (high nibble).
// Same size as the file for Q8_0 and Q4_0, +2.8 % for Q4_K, +2.3 % for Q5_K (6-bit scales stored as bytes),
// +1 % for Q6_K.
//
// Float layouts (F32, F16, BF16; "x32"): 32 rows per group, stored column by column: element k of rows 0..31
// of the group @ k * 32 * elem_bytes, row r at lane r (vector r / 8, lane r % 8), in the file's element format
// (no conversion; rows past n_out are zero). One 64-byte line per k for F16/BF16 (two for F32), read in
// address order by decode and prefill alike (avx2/matmul-avx2-float-x32.cpp). Same size as the file, up to
// 31 zero rows per matrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace memtile::cpu::repack {

inline constexpr int k_rows = 8;
inline constexpr int k_float_rows = 32;
inline constexpr int k_max_rows = 32;

// Whether an interleaved layout exists for this format.
bool supported(dtype t);
// Rows per group: k_rows for the quantized formats, k_float_rows for F32, F16, BF16.
int group_rows(dtype t);
// Bytes of one group for rows of n_in elements (a multiple of the format's block).
size_t group_bytes(dtype t, int64_t n_in);
// Writes one group from up to group_rows(t) rows of the file format (rows[r] == nullptr: a zero row). Every
// byte of the group_bytes(t, n_in) at out is written.
void pack_group(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out);
// The scalar reference of pack_group (one level at a time, as the layouts above are specified): same bytes.
void pack_group_ref(dtype t, const uint8_t* const* rows, int64_t n_in, uint8_t* out);

}  // namespace memtile::cpu::repack
