// Reference quantizers of the plain and 32-element formats (F16, BF16, Q4_0, Q8_0) and of Q8_K, the
// activation format of the K-quant dot products.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/quant-formats.h"
#include "quant/quantize-search.h"

namespace memtile::quant_detail {
namespace {

// One symmetric block: fit the scale, round it to half precision as stored, then re-round the levels for
// the stored scale so that every element takes its nearest representable value.
float quantize_symmetric_block(const float* x, const float* importance, int qmin, int qmax, int* q) {
    float w[k_qk_legacy];
    block_weights(x, importance, k_qk_legacy, w);
    const float scale = fit_symmetric(x, w, k_qk_legacy, qmin, qmax, q);
    const float d = fp16_to_f32(f32_to_fp16(scale));
    requantize_error(x, w, k_qk_legacy, d, 0.0f, qmin, qmax, q);
    return d;
}

}  // namespace

void quantize_row_f16(const float* x, void* dst, int64_t n, const float* importance) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_fp16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}

void quantize_row_bf16(const float* x, void* dst, int64_t n, const float* importance) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}

void quantize_row_q4_0(const float* x, void* dst, int64_t n, const float* importance) {
    int q[k_qk_legacy];
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const float* xb = x + ib * k_qk_legacy;
        const float d = quantize_symmetric_block(xb, importance ? importance + ib * k_qk_legacy : nullptr, -8, 7, q);
        block_q4_0 b{};
        b.d = f32_to_fp16(d);
        for (int j = 0; j < k_qk_legacy / 2; ++j) b.qs[j] = uint8_t((q[j] + 8) | (q[j + k_qk_legacy / 2] + 8) << 4);
        write_block(dst, ib, b);
    }
}

// Levels are limited to +-127 (not -128) so that SIMD kernels may negate them without overflow.
void quantize_row_q8_0(const float* x, void* dst, int64_t n, const float* importance) {
    int q[k_qk_legacy];
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const float* xb = x + ib * k_qk_legacy;
        const float d =
            quantize_symmetric_block(xb, importance ? importance + ib * k_qk_legacy : nullptr, -127, 127, q);
        block_q8_0 b{};
        b.d = f32_to_fp16(d);
        for (int j = 0; j < k_qk_legacy; ++j) b.qs[j] = int8_t(q[j]);
        write_block(dst, ib, b);
    }
}

// Activations are quantized once per matrix product on the hot path, so Q8_K uses the plain max-magnitude
// scale (no search); its float scale and 8-bit levels make the search's gain negligible anyway.
void quantize_row_q8_k(const float* x, void* dst, int64_t n, const float* importance) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const float* xb = x + ib * k_qk;
        float amax = 0;
        for (int j = 0; j < k_qk; ++j) amax = std::max(amax, std::fabs(xb[j]));
        block_q8_k b{};
        b.d = amax / 127.0f;
        for (int j = 0; j < k_qk; ++j) {
            const int q = amax > 0 ? clamp_level(round_level(xb[j] / b.d), -127, 127) : 0;
            b.qs[j] = int8_t(q);
            b.bsums[j / 16] = int16_t(b.bsums[j / 16] + q);
        }
        write_block(dst, ib, b);
    }
}

}  // namespace memtile::quant_detail
