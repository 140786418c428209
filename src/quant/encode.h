// Conversion of f32 rows into any storage type memtile writes (F32, F16, BF16 and the quantized formats
// with a reference quantizer). Used by gen, convert and quantize.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace memtile {

// src: [row_len, n_rows] f32; dst: n_rows × row_bytes(t, row_len) bytes.
void encode_rows(dtype t, const float* src, uint8_t* dst, int64_t n_rows, int64_t row_len);
bool can_encode(dtype t);

}  // namespace memtile
