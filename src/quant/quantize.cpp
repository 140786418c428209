// Public quantization entry points: type dispatch and size checks around the per-format row quantizers.
#include "core/error.h"
#include "quant/quant.h"
#include "quant/quantize-search.h"

namespace memtile {
namespace {

using quantize_fn = void (*)(const float*, void*, int64_t, const float*);

quantize_fn find_quantizer(dtype t) {
    using namespace quant_detail;
    switch (t) {
        case dtype::f16: return quantize_row_f16;
        case dtype::bf16: return quantize_row_bf16;
        case dtype::q4_0: return quantize_row_q4_0;
        case dtype::q8_0: return quantize_row_q8_0;
        case dtype::q4_k: return quantize_row_q4_k;
        case dtype::q5_k: return quantize_row_q5_k;
        case dtype::q6_k: return quantize_row_q6_k;
        case dtype::q8_k: return quantize_row_q8_k;
        default: return nullptr;
    }
}

quantize_fn checked_quantizer(dtype t, int64_t row_len) {
    const quantize_fn fn = find_quantizer(t);
    if (!fn) fail("quant", "cannot quantize to tensor type {}", static_cast<uint32_t>(t));
    const auto block = int64_t(traits(t).block_elems);
    if (row_len < 0 || row_len % block != 0)
        fail("quant", "{} row of {} elements is not a multiple of the block size {}", dtype_name(t), row_len, block);
    return fn;
}

}  // namespace

bool can_quantize(dtype t) {
    return find_quantizer(t) != nullptr;
}

size_t quantize_rows(dtype t, const float* src, void* dst, int64_t n_rows, int64_t row_len, const float* importance) {
    const quantize_fn fn = checked_quantizer(t, row_len);
    if (n_rows < 0) fail("quant", "negative row count {}", n_rows);
    const uint64_t stride = row_bytes(t, uint64_t(row_len));
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n_rows; ++r) fn(src + r * row_len, out + uint64_t(r) * stride, row_len, importance);
    return size_t(uint64_t(n_rows) * stride);
}

size_t quantize_row(dtype t, const float* src, void* dst, int64_t n, const float* importance) {
    return quantize_rows(t, src, dst, 1, n, importance);
}

std::vector<uint8_t> quantize_tensor(dtype t, const float* src, int64_t n_rows, int64_t row_len,
                                     const float* importance) {
    checked_quantizer(t, row_len);
    if (n_rows < 0) fail("quant", "negative row count {}", n_rows);
    std::vector<uint8_t> out(size_t(uint64_t(n_rows) * row_bytes(t, uint64_t(row_len))));
    quantize_rows(t, src, out.data(), n_rows, row_len, importance);
    return out;
}

void set_quantize_effort(quantize_effort e) {
    quant_detail::set_effort(static_cast<int>(e));
}

}  // namespace memtile
