// Tensor element formats. Numeric ids are GGUF's (ggml_type) so they can be stored and read directly.
// Each format is described by one row of a table: block size in elements and bytes per block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace memtile {

enum class dtype : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    bf16 = 30,
};

struct dtype_traits {
    dtype type;
    std::string_view name;  // GGUF/llama.cpp spelling, e.g. "Q4_K"
    uint32_t block_elems;   // elements per block (1 for plain types)
    uint32_t block_bytes;   // bytes per block
    bool quantized;
};

// Row of the table for `t`, or nullptr when memtile does not know that format.
const dtype_traits* find_dtype(uint32_t raw_id);
const dtype_traits& traits(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);  // case-insensitive

inline std::string_view dtype_name(dtype t) {
    return traits(t).name;
}

// Bytes of `n_elems` elements (n_elems must be a multiple of the block size; checked by callers that
// parse untrusted input through row_bytes_checked).
inline uint64_t row_bytes(dtype t, uint64_t n_elems) {
    const auto& tr = traits(t);
    return n_elems / tr.block_elems * tr.block_bytes;
}

}  // namespace memtile
