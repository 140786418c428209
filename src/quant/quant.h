// Scalar reference conversion between f32 and the GGML tensor formats.
//
// Dequantization is bit-exact with llama.cpp / gguf-py's reference dequantizers (same operation order, no
// fused multiply-add), so it serves as the test oracle for the SIMD dot-product kernels. Quantization is a
// search-based reference quantizer: per block it fits scales by weighted least squares over a set of
// candidate scales (see quantize-search.h).
//
// Shapes: a tensor is n_rows rows of row_len elements; row_len must be a multiple of the format's block size
// and rows are stored back to back (row_bytes(t, row_len) bytes each). Every function works on whole rows
// independently and keeps no state, so callers may run them concurrently on disjoint rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace memtile {

bool can_dequantize(dtype t);
bool can_quantize(dtype t);

// Converts n elements (a multiple of the block size) of format t at src to floats.
void dequantize_row(dtype t, const void* src, float* dst, int64_t n);
void dequantize_rows(dtype t, const void* src, float* dst, int64_t n_rows, int64_t row_len);
// Whole tensor (or its first max_rows rows when max_rows >= 0) into a new buffer of n_rows * row_len floats.
std::vector<float> dequantize_tensor(dtype t, const void* src, int64_t n_rows, int64_t row_len, int64_t max_rows = -1);

// Quantizes n_rows rows of row_len floats into dst (n_rows * row_bytes(t, row_len) bytes) and returns the
// bytes written. `importance` (nullable) holds row_len non-negative per-column weights, e.g. the mean
// squared activation of each input channel; the fits then minimise sum(importance[i] * error[i]^2) instead of
// the plain squared error. Without it the plain squared error is minimised.
size_t quantize_rows(dtype t, const float* src, void* dst, int64_t n_rows, int64_t row_len,
                     const float* importance = nullptr);
size_t quantize_row(dtype t, const float* src, void* dst, int64_t n, const float* importance = nullptr);
std::vector<uint8_t> quantize_tensor(dtype t, const float* src, int64_t n_rows, int64_t row_len,
                                     const float* importance = nullptr);

// How hard the reference quantizers search for block scales. `best` (default) is what `quantize` and
// `convert` use (error below llama.cpp's, see tests); `fast` tries 5 instead of 21 candidate scales per block
// with one refinement round (about 4x faster, error within a few percent of `best`) and is what `gen` uses
// for synthetic benchmark models, whose weights are random anyway. Process-wide setting.
enum class quantize_effort { best = 0, fast = 1 };
void set_quantize_effort(quantize_effort e);

}  // namespace memtile
