// Model file types (llama.cpp's `general.file_type`, e.g. Q4_K_M) and the per-tensor type mixture
// they imply. The mixture rules follow llama.cpp's behaviour for the types memtile writes, so files made
// by `memtile gen` / `memtile quantize` have the same tensor types as llama.cpp's (docs/quantization.md):
//   - 1-D tensors (norms, biases, rope factors) stay F32;
//   - F32 / F16 / BF16 / Q8_0 / Q4_0: every 2-D tensor in the base type, except that the output matrix
//     (or the token embedding when it doubles as output) is Q6_K in all quantized types but Q8_0;
//   - Q4_K_M, Q5_K_M: attn_v and ffn_down of the "more bits" layers (first and last eighth of the layers
//     and every third layer in between) are Q6_K, fused attn_qkv is Q5_K (Q4_K_M) / Q6_K (Q5_K_M);
//   - Q4_K_S: attn_v of the first 4 layers and ffn_down of the first eighth are Q5_K;
//   - K types need rows that are a multiple of 256; other rows fall back to Q8_0 (llama.cpp uses
//     Q5_0/Q5_1/Q8_0 there; memtile's fallback is uniformly Q8_0, one step more precise).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "models/tensor-table.h"

namespace memtile {

enum class file_type : uint32_t {
    all_f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q8_0 = 7,
    q5_0 = 8,
    q5_1 = 9,
    q2_k = 10,
    q3_k_s = 11,
    q3_k_m = 12,
    q3_k_l = 13,
    q4_k_s = 14,
    q4_k_m = 15,
    q5_k_s = 16,
    q5_k_m = 17,
    q6_k = 18,
    bf16 = 32,
};

std::optional<file_type> file_type_from_name(std::string_view name);  // "q4_k_m", "Q8_0", "f32", ...
std::string_view file_type_name(file_type t);                         // "Q4_K_M"
std::string_view file_type_name(uint32_t raw);                        // "unknown" for unknown ids
dtype file_type_base(file_type t);
// Whether memtile can write files of this type (gen, quantize, convert).
bool file_type_writable(file_type t);
std::string writable_file_types();

// The storage type of one tensor in a file of type `ft` (see the rules above).
dtype tensor_type_for(file_type ft, const tensor_spec& spec, const model_config& c);

}  // namespace memtile
