// Building blocks of the reference quantizers (internal to src/quant/).
//
// All fits minimise a weighted squared error sum_i w[i] * (x[i] - y[i])^2 where y is the dequantized value.
// They search a grid of candidate inverse scales: each candidate fixes the integer levels by rounding,
// the levels then determine the best scale (and offset) in closed form by least squares, and the candidate
// with the smallest error wins. A few alternating refinements (re-round with the fitted scale, refit)
// follow. Rounding is round-to-nearest-even throughout, matching what SIMD code will do.
#pragma once

#include <cmath>
#include <cstdint>

namespace memtile::quant_detail {

// Round to nearest, ties to even. Adding and subtracting 1.5 * 2^23 leaves the float's integer part rounded
// in the current (default: nearest-even) mode; it is exact for |v| < 2^22, so v is clamped to that range
// first (every caller clamps the level to a far smaller range afterwards). Cheaper than std::nearbyint,
// which is a library call on baseline x86-64 (no SSE4.1). NaN maps to level 0.
inline int round_level(float v) {
    if (!(v == v)) return 0;
    constexpr float limit = 4194304.0f, magic = 12582912.0f;
    v = v < -limit ? -limit : (v > limit ? limit : v);
    return int((v + magic) - magic);
}

inline int clamp_level(int q, int lo, int hi) {
    return q < lo ? lo : (q > hi ? hi : q);
}

// Per-element error weights for one block of n values. importance (nullable) holds the caller's
// per-column weights for these n columns; without it the weights are 1 (plain squared error). A block
// whose importance is all zero falls back to plain weights so that the fit stays well defined.
// quantize_effort as an int (0 best, 1 fast); see quant.h.
void set_effort(int effort);

void block_weights(const float* x, const float* importance, int n, float* w);

// x[i] ≈ scale * q[i] with integer q in [qmin, qmax] (qmin <= 0 < qmax). Returns the scale (0 for an
// all-zero block) and writes the levels.
float fit_symmetric(const float* x, const float* w, int n, int qmin, int qmax, int* q);

// x[i] ≈ scale * q[i] - min with q in [0, qmax], scale >= 0 and min >= 0 (the stored minimum of Q4_K/Q5_K
// is unsigned, so the represented range always includes 0).
struct scale_min {
    float scale;
    float min;
};
scale_min fit_scale_min(const float* x, const float* w, int n, int qmax, int* q);

// Weighted squared error of x against scale * q - min with q re-rounded for that (scale, min).
float requantize_error(const float* x, const float* w, int n, float scale, float min, int qmin, int qmax, int* q);

// Row quantizers, one per format: n elements (a multiple of the block size, checked by the caller) from x
// into dst; importance is nullable, else n per-column weights.
void quantize_row_f16(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_bf16(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q4_0(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q8_0(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q8_k(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q4_k(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q5_k(const float* x, void* dst, int64_t n, const float* importance);
void quantize_row_q6_k(const float* x, void* dst, int64_t n, const float* importance);

}  // namespace memtile::quant_detail
