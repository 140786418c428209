// Scalar reference dequantization of every GGML format memtile reads.
//
// Bit-exactness with the reference dequantizer depends on the order of the float operations: products are
// formed as (d * sub_scale) first, then multiplied by the integer level, then the minimum term subtracted,
// each step rounded to f32. The build uses ISO C++ mode, in which GCC and Clang do not contract a*b+c into
// a fused multiply-add, so these expressions round exactly as written.
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant-formats.h"
#include "quant/quant.h"

namespace memtile {
namespace {

void dequantize_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_f32(h);
    }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q4_0>(src, ib);
        const float d = fp16_to_f32(b.d);
        float* y = dst + ib * k_qk_legacy;
        for (int j = 0; j < k_qk_legacy / 2; ++j) {
            y[j] = float((b.qs[j] & 0xf) - 8) * d;
            y[j + k_qk_legacy / 2] = float((b.qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q4_1>(src, ib);
        const float d = fp16_to_f32(b.d);
        const float m = fp16_to_f32(b.m);
        float* y = dst + ib * k_qk_legacy;
        for (int j = 0; j < k_qk_legacy / 2; ++j) {
            y[j] = float(b.qs[j] & 0xf) * d + m;
            y[j + k_qk_legacy / 2] = float(b.qs[j] >> 4) * d + m;
        }
    }
}

// Level (0..31) of element j of a Q5_0/Q5_1 block.
inline int q5_level(const uint8_t* qs, uint32_t qh, int j) {
    const int half = k_qk_legacy / 2;
    const int low = j < half ? qs[j] & 0xf : qs[j - half] >> 4;
    return low | int((qh >> j) & 1u) << 4;
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q5_0>(src, ib);
        const float d = fp16_to_f32(b.d);
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        float* y = dst + ib * k_qk_legacy;
        for (int j = 0; j < k_qk_legacy; ++j) y[j] = float(q5_level(b.qs, qh, j) - 16) * d;
    }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q5_1>(src, ib);
        const float d = fp16_to_f32(b.d);
        const float m = fp16_to_f32(b.m);
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        float* y = dst + ib * k_qk_legacy;
        for (int j = 0; j < k_qk_legacy; ++j) y[j] = float(q5_level(b.qs, qh, j)) * d + m;
    }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q8_0>(src, ib);
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < k_qk_legacy; ++j) dst[ib * k_qk_legacy + j] = float(b.qs[j]) * d;
    }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk_legacy; ++ib) {
        const auto b = read_block<block_q8_1>(src, ib);
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < k_qk_legacy; ++j) dst[ib * k_qk_legacy + j] = float(b.qs[j]) * d;
    }
}

// Q2_K and Q3_K share the 2-bit field layout: element 128h + 32k + l is at shift 2k of qs[32h + l].
inline int k_2bit_level(const uint8_t* qs, int i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    return (qs[32 * h + l] >> (2 * k)) & 3;
}

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q2_k>(src, ib);
        const float d = fp16_to_f32(b.d);
        const float dmin = fp16_to_f32(b.dmin);
        float* y = dst + ib * k_qk;
        for (int s = 0; s < k_qk / 16; ++s) {
            const float dl = d * float(b.scales[s] & 0xf);
            const float ml = dmin * float(b.scales[s] >> 4);
            for (int i = 16 * s; i < 16 * s + 16; ++i) y[i] = dl * float(k_2bit_level(b.qs, i)) - ml;
        }
    }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q3_k>(src, ib);
        const float d = fp16_to_f32(b.d);
        float* y = dst + ib * k_qk;
        for (int s = 0; s < k_qk / 16; ++s) {
            const float dl = d * float(unpack_scale_q3_k(b.scales, s) - 32);
            for (int i = 16 * s; i < 16 * s + 16; ++i) {
                const int bit = (i / 128) * 4 + (i % 128) / 32;  // bit of hmask[i % 32] for element i
                const int high = (b.hmask[i % 32] >> bit) & 1;
                y[i] = dl * float(k_2bit_level(b.qs, i) - (high ? 0 : 4));
            }
        }
    }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q4_k>(src, ib);
        const float d = fp16_to_f32(b.d);
        const float dmin = fp16_to_f32(b.dmin);
        float* y = dst + ib * k_qk;
        for (int s = 0; s < 8; ++s) {
            uint8_t sc, mn;
            unpack_scale_min_k4(b.scales, s, sc, mn);
            const float dl = d * float(sc);
            const float ml = dmin * float(mn);
            const uint8_t* q = b.qs + 32 * (s / 2);
            const int shift = 4 * (s % 2);
            for (int l = 0; l < 32; ++l) y[32 * s + l] = dl * float((q[l] >> shift) & 0xf) - ml;
        }
    }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q5_k>(src, ib);
        const float d = fp16_to_f32(b.d);
        const float dmin = fp16_to_f32(b.dmin);
        float* y = dst + ib * k_qk;
        for (int s = 0; s < 8; ++s) {
            uint8_t sc, mn;
            unpack_scale_min_k4(b.scales, s, sc, mn);
            const float dl = d * float(sc);
            const float ml = dmin * float(mn);
            const uint8_t* q = b.qs + 32 * (s / 2);
            const int shift = 4 * (s % 2);
            for (int l = 0; l < 32; ++l) {
                const int level = ((q[l] >> shift) & 0xf) | ((b.qh[l] >> s) & 1) << 4;
                y[32 * s + l] = dl * float(level) - ml;
            }
        }
    }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q6_k>(src, ib);
        const float d = fp16_to_f32(b.d);
        float* y = dst + ib * k_qk;
        for (int i = 0; i < k_qk; ++i) {
            // Element i = 128h + 32k + l: k selects the ql byte (l or l+32) and nibble, and the qh bit pair.
            const int h = i / 128, k = (i % 128) / 32, l = i % 32;
            const uint8_t lo = b.ql[64 * h + l + 32 * (k % 2)];
            const int level = ((lo >> (4 * (k / 2))) & 0xf) | ((b.qh[32 * h + l] >> (2 * k)) & 3) << 4;
            const float dl = d * float(b.scales[i / 16]);
            y[i] = dl * float(level - 32);
        }
    }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        const auto b = read_block<block_q8_k>(src, ib);
        for (int j = 0; j < k_qk; ++j) dst[ib * k_qk + j] = b.d * float(b.qs[j]);
    }
}

using dequantize_fn = void (*)(const void*, float*, int64_t);

dequantize_fn find_dequantizer(dtype t) {
    switch (t) {
        case dtype::f32: return dequantize_f32;
        case dtype::f16: return dequantize_f16;
        case dtype::bf16: return dequantize_bf16;
        case dtype::q4_0: return dequantize_q4_0;
        case dtype::q4_1: return dequantize_q4_1;
        case dtype::q5_0: return dequantize_q5_0;
        case dtype::q5_1: return dequantize_q5_1;
        case dtype::q8_0: return dequantize_q8_0;
        case dtype::q8_1: return dequantize_q8_1;
        case dtype::q2_k: return dequantize_q2_k;
        case dtype::q3_k: return dequantize_q3_k;
        case dtype::q4_k: return dequantize_q4_k;
        case dtype::q5_k: return dequantize_q5_k;
        case dtype::q6_k: return dequantize_q6_k;
        case dtype::q8_k: return dequantize_q8_k;
        default: return nullptr;
    }
}

dequantize_fn checked_dequantizer(dtype t, int64_t row_len) {
    const dequantize_fn fn = find_dequantizer(t);
    if (!fn) fail("quant", "cannot dequantize tensor type {}", static_cast<uint32_t>(t));
    const auto block = int64_t(traits(t).block_elems);
    if (row_len < 0 || row_len % block != 0)
        fail("quant", "{} row of {} elements is not a multiple of the block size {}", dtype_name(t), row_len, block);
    return fn;
}

}  // namespace

bool can_dequantize(dtype t) {
    return find_dequantizer(t) != nullptr;
}

void dequantize_row(dtype t, const void* src, float* dst, int64_t n) {
    checked_dequantizer(t, n)(src, dst, n);
}

void dequantize_rows(dtype t, const void* src, float* dst, int64_t n_rows, int64_t row_len) {
    const dequantize_fn fn = checked_dequantizer(t, row_len);
    if (n_rows < 0) fail("quant", "negative row count {}", n_rows);
    const auto* p = static_cast<const uint8_t*>(src);
    const uint64_t stride = row_bytes(t, uint64_t(row_len));
    for (int64_t r = 0; r < n_rows; ++r) fn(p + uint64_t(r) * stride, dst + r * row_len, row_len);
}

std::vector<float> dequantize_tensor(dtype t, const void* src, int64_t n_rows, int64_t row_len, int64_t max_rows) {
    const int64_t rows = max_rows >= 0 && max_rows < n_rows ? max_rows : n_rows;
    std::vector<float> out(size_t(rows * row_len));
    dequantize_rows(t, src, out.data(), rows, row_len);
    return out;
}

}  // namespace memtile
