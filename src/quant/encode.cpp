#include "quant/encode.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace memtile {

bool can_encode(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || can_quantize(t);
}

void encode_rows(dtype t, const float* src, uint8_t* dst, int64_t n_rows, int64_t row_len) {
    const int64_t n = n_rows * row_len;
    switch (t) {
        case dtype::f32: std::memcpy(dst, src, size_t(n) * 4); return;
        case dtype::f16: {
            auto* d = reinterpret_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; i++) d[i] = f32_to_fp16(src[i]);
            return;
        }
        case dtype::bf16: {
            auto* d = reinterpret_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
            return;
        }
        default:
            if (!can_quantize(t)) fail("quant", "no encoder for tensor type {}", dtype_name(t));
            quantize_rows(t, src, dst, n_rows, row_len);
            return;
    }
}

}  // namespace memtile
