// The tensors an architecture needs, as data: one row per tensor kind with its GGUF name pattern and a
// shape rule. The loader checks a file against this table (missing tensors are listed together, wrong
// shapes named); `gen` creates files from it; `inspect` uses it for the memory model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model-config.h"

namespace memtile {

class gguf_file;

enum class tensor_role {
    token_embd,   // [n_embd, n_vocab]: one row gathered per token
    output_norm,  // [n_embd]
    output,       // [n_embd, n_vocab]
    rope_freqs,   // [n_rot / 2]
    attn_norm,    // [n_embd]
    attn_q,       // [n_embd, q_dim]
    attn_k,       // [n_embd, kv_dim]
    attn_v,       // [n_embd, kv_dim]
    attn_qkv,     // [n_embd, q_dim + 2 kv_dim] (phi3)
    attn_q_bias,  // [q_dim] (qwen2)
    attn_k_bias,  // [kv_dim]
    attn_v_bias,  // [kv_dim]
    attn_output,  // [q_dim, n_embd]
    ffn_norm,     // [n_embd]
    ffn_gate,     // [n_embd, n_ff]
    ffn_up,       // [n_embd, n_ff] (phi3: [n_embd, 2 n_ff], gate and up fused)
    ffn_down,     // [n_ff, n_embd]
};

struct tensor_spec {
    tensor_role role;
    std::string name;            // e.g. "blk.3.attn_q.weight"
    int layer;                   // -1 for global tensors
    std::vector<uint64_t> dims;  // ggml order
    bool required;
    bool is_norm() const;  // 1-D f32 tensors that stay f32 in every file type
};

// The full list of tensors for config `c` (optional ones included, marked required=false).
std::vector<tensor_spec> tensor_table(const model_config& c);

// Checks that `g` holds every required tensor with the right shape; throws one error listing all missing
// tensors, or naming the first tensor with a wrong shape.
void check_tensors(const gguf_file& g, const model_config& c);

std::string dims_to_string(const std::vector<uint64_t>& dims);

}  // namespace memtile
