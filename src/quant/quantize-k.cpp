// Reference quantizers of the K formats Q4_K, Q5_K (asymmetric, 8 sub-blocks of 32 with 6-bit scales and
// minimums) and Q6_K (symmetric, 16 sub-blocks of 16 with 8-bit signed scales).
//
// Two-level fit: every sub-block first gets its own float (scale, min) from the grid search of
// quantize-search.h; the super-block scale d (and dmin) then maps the largest of them onto the top code
// (63 or +-127/128). Rounding the sub-block codes to the nearest multiple of d is not always best once the
// levels are re-rounded for the coarse scale, so each sub-block tries the codes next to the nearest one and
// keeps the combination with the smallest error, evaluated with exactly the dequantizer's arithmetic.
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "quant/quant-formats.h"
#include "quant/quantize-search.h"

namespace memtile::quant_detail {
namespace {

constexpr int k_sub_k4 = 32;  // sub-block length of Q4_K/Q5_K
constexpr int k_sub_q6 = 16;  // sub-block length of Q6_K

inline float to_half_precision(float v) {
    return fp16_to_f32(f32_to_fp16(v));
}

// Quantized super-block of Q4_K/Q5_K before packing: dequantized value of element 32s+l is
// d * sc[s] * q[32s+l] - dmin * mn[s].
struct scale_min_superblock {
    float d = 0, dmin = 0;
    uint8_t sc[8] = {}, mn[8] = {};
    int q[k_qk] = {};
};

void fit_scale_min_superblock(const float* x, const float* importance, int qmax, scale_min_superblock& out) {
    float w[k_qk];
    scale_min fits[8];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; ++s) {
        const int o = s * k_sub_k4;
        block_weights(x + o, importance ? importance + o : nullptr, k_sub_k4, w + o);
        fits[s] = fit_scale_min(x + o, w + o, k_sub_k4, qmax, out.q + o);
        max_scale = std::max(max_scale, fits[s].scale);
        max_min = std::max(max_min, fits[s].min);
    }
    out.d = to_half_precision(max_scale / 63.0f);
    out.dmin = to_half_precision(max_min / 63.0f);
    int trial[k_sub_k4];
    for (int s = 0; s < 8; ++s) {
        const int o = s * k_sub_k4;
        const int rs = out.d > 0 ? clamp_level(round_level(fits[s].scale / out.d), 0, 63) : 0;
        const int rm = out.dmin > 0 ? clamp_level(round_level(fits[s].min / out.dmin), 0, 63) : 0;
        float best = INFINITY;
        for (int cs = std::max(rs - 1, 0); cs <= std::min(rs + 1, 63); ++cs) {
            for (int cm = std::max(rm - 1, 0); cm <= std::min(rm + 1, 63); ++cm) {
                const float dl = out.d * float(cs);
                const float ml = out.dmin * float(cm);
                const float err = requantize_error(x + o, w + o, k_sub_k4, dl, ml, 0, qmax, trial);
                if (err < best) {
                    best = err;
                    out.sc[s] = uint8_t(cs);
                    out.mn[s] = uint8_t(cm);
                    std::copy(trial, trial + k_sub_k4, out.q + o);
                }
            }
        }
    }
}

}  // namespace

void quantize_row_q4_k(const float* x, void* dst, int64_t n, const float* importance) {
    scale_min_superblock sb;
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        fit_scale_min_superblock(x + ib * k_qk, importance ? importance + ib * k_qk : nullptr, 15, sb);
        block_q4_k b{};
        b.d = f32_to_fp16(sb.d);
        b.dmin = f32_to_fp16(sb.dmin);
        pack_scale_min_k4(sb.sc, sb.mn, b.scales);
        for (int s = 0; s < 8; ++s)
            for (int l = 0; l < k_sub_k4; ++l)
                b.qs[32 * (s / 2) + l] |= uint8_t(sb.q[s * k_sub_k4 + l] << (4 * (s % 2)));
        write_block(dst, ib, b);
    }
}

void quantize_row_q5_k(const float* x, void* dst, int64_t n, const float* importance) {
    scale_min_superblock sb;
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        fit_scale_min_superblock(x + ib * k_qk, importance ? importance + ib * k_qk : nullptr, 31, sb);
        block_q5_k b{};
        b.d = f32_to_fp16(sb.d);
        b.dmin = f32_to_fp16(sb.dmin);
        pack_scale_min_k4(sb.sc, sb.mn, b.scales);
        for (int s = 0; s < 8; ++s) {
            for (int l = 0; l < k_sub_k4; ++l) {
                const int level = sb.q[s * k_sub_k4 + l];
                b.qs[32 * (s / 2) + l] |= uint8_t((level & 0xf) << (4 * (s % 2)));
                b.qh[l] |= uint8_t((level >> 4) << s);
            }
        }
        write_block(dst, ib, b);
    }
}

namespace {

// Quantized Q6_K super-block before packing: element i dequantizes to d * sc[i / 16] * q[i], q in -32..31.
struct q6_superblock {
    float d = 0;
    int8_t sc[16] = {};
    int q[k_qk] = {};
};

// Codes of all sub-blocks for super-block scale d (each sub-block picks the best of the codes next to its
// nearest one); returns the total error.
float assign_q6_codes(const float* x, const float* w, const float* scales, float d, q6_superblock& out) {
    int trial[k_sub_q6];
    float total = 0;
    out.d = d;
    for (int s = 0; s < 16; ++s) {
        const int o = s * k_sub_q6;
        const int r = clamp_level(round_level(scales[s] / d), -128, 127);
        float best = INFINITY;
        for (int c = std::max(r - 1, -128); c <= std::min(r + 1, 127); ++c) {
            const float err = requantize_error(x + o, w + o, k_sub_q6, d * float(c), 0.0f, -32, 31, trial);
            if (err < best) {
                best = err;
                out.sc[s] = int8_t(c);
                std::copy(trial, trial + k_sub_q6, out.q + o);
            }
        }
        total += best;
    }
    return total;
}

void fit_q6_superblock(const float* x, const float* importance, q6_superblock& out) {
    float w[k_qk];
    float scales[16];
    int levels[k_sub_q6];
    float vmax = 0;
    for (int s = 0; s < 16; ++s) {
        const int o = s * k_sub_q6;
        block_weights(x + o, importance ? importance + o : nullptr, k_sub_q6, w + o);
        scales[s] = fit_symmetric(x + o, w + o, k_sub_q6, -32, 31, levels);
        if (std::fabs(scales[s]) > std::fabs(vmax)) vmax = scales[s];
    }
    out = q6_superblock{};
    if (vmax == 0) return;
    // The largest sub-block scale goes to code 127 or to -128 (one step finer); try both.
    const float d_pos = to_half_precision(vmax / 127.0f);
    const float d_neg = to_half_precision(-vmax / 128.0f);
    if (d_pos == 0) return;  // scales below half precision's range: the block is stored as zeros
    q6_superblock alt;
    const float err_pos = assign_q6_codes(x, w, scales, d_pos, out);
    const float err_neg = assign_q6_codes(x, w, scales, d_neg, alt);
    if (err_neg < err_pos) out = alt;
}

}  // namespace

void quantize_row_q6_k(const float* x, void* dst, int64_t n, const float* importance) {
    q6_superblock sb;
    for (int64_t ib = 0; ib < n / k_qk; ++ib) {
        fit_q6_superblock(x + ib * k_qk, importance ? importance + ib * k_qk : nullptr, sb);
        block_q6_k b{};
        b.d = f32_to_fp16(sb.d);
        for (int s = 0; s < 16; ++s) b.scales[s] = sb.sc[s];
        for (int i = 0; i < k_qk; ++i) {
            const int h = i / 128, k = (i % 128) / 32, l = i % 32;
            const int level = sb.q[i] + 32;
            b.ql[64 * h + l + 32 * (k % 2)] |= uint8_t((level & 0xf) << (4 * (k / 2)));
            b.qh[32 * h + l] |= uint8_t((level >> 4) << (2 * k));
        }
        write_block(dst, ib, b);
    }
}

}  // namespace memtile::quant_detail
