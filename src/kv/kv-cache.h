// Key/value cache of one sequence: for every layer, K and V rows of kv_dim elements per position, stored
// in f16 (default) or f32 (exact comparisons with f32 references).
//   k(layer, pos): [kv_dim] of type `type`, positions contiguous per layer: [n_ctx, kv_dim] per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace memtile {

class kv_cache {
public:
    kv_cache(uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim, dtype type);

    uint32_t n_ctx() const { return n_ctx_; }
    uint32_t kv_dim() const { return kv_dim_; }
    dtype type() const { return type_; }
    uint64_t bytes() const { return uint64_t(k_.size()) * 2; }
    size_t elem_bytes() const { return type_ == dtype::f32 ? 4 : 2; }

    // Rows are written once when a token is processed; `used` tracks the filled prefix (the sequence length).
    void store(uint32_t layer, uint32_t pos, const float* k, const float* v);
    const uint8_t* k_row(uint32_t layer, uint32_t pos) const { return k_.data() + offset(layer, pos); }
    const uint8_t* v_row(uint32_t layer, uint32_t pos) const { return v_.data() + offset(layer, pos); }
    uint32_t used = 0;

private:
    size_t offset(uint32_t layer, uint32_t pos) const {
        return (size_t(layer) * n_ctx_ + pos) * kv_dim_ * elem_bytes();
    }
    uint32_t n_layer_, n_ctx_, kv_dim_;
    dtype type_;
    std::vector<uint8_t> k_, v_;
};

}  // namespace memtile
