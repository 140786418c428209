// The memory model of decode: which bytes must cross the memory bus for every generated token.
// Weights: every weight tensor is streamed once per token, except the token-embedding table, of which one
// row is gathered — unless the table doubles as the output matrix (tied embeddings), when it is streamed in
// full. KV cache: each token of context adds 2 (K and V) × n_layer × kv_dim elements.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/dtype.h"

namespace memtile {

class gguf_file;

struct memory_model {
    uint64_t weight_bytes = 0;  // all tensor data in the file
    std::map<dtype, uint64_t> bytes_by_type;
    std::map<dtype, uint64_t> count_by_type;
    uint64_t streamed_bytes_per_token = 0;  // weights read per decoded token
    uint64_t kv_bytes_per_token = 0;        // KV-cache bytes per token of context (0 when unknown)
    uint64_t activation_bytes = 0;          // scratch buffers of one decode step (estimate)
    bool tied_embeddings = false;

    uint64_t kv_bytes(uint64_t n_ctx) const { return kv_bytes_per_token * n_ctx; }
    // Weights + KV cache for n_ctx tokens + scratch: what a loaded model keeps resident.
    uint64_t resident_bytes(uint64_t n_ctx) const { return weight_bytes + kv_bytes(n_ctx) + activation_bytes; }
};

// kv_type: the element type of the KV cache (F16 by default, F32 for exact comparisons).
memory_model compute_memory_model(const gguf_file& g, dtype kv_type = dtype::f16);

}  // namespace memtile
