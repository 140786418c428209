#include "kv/kv-cache.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"

namespace memtile {

kv_cache::kv_cache(uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim, dtype type)
    : n_layer_(n_layer), n_ctx_(n_ctx), kv_dim_(kv_dim), type_(type) {
    if (type != dtype::f16 && type != dtype::f32)
        fail("kv", "KV-cache type {} is not supported (f16 or f32)", dtype_name(type));
    const size_t n = size_t(n_layer) * n_ctx * kv_dim * elem_bytes();
    k_.resize(n);
    v_.resize(n);
}

void kv_cache::store(uint32_t layer, uint32_t pos, const float* k, const float* v) {
    if (pos >= n_ctx_) fail("kv", "position {} is outside the context of {} tokens", pos, n_ctx_);
    uint8_t* kd = k_.data() + offset(layer, pos);
    uint8_t* vd = v_.data() + offset(layer, pos);
    if (type_ == dtype::f32) {
        std::memcpy(kd, k, kv_dim_ * 4);
        std::memcpy(vd, v, kv_dim_ * 4);
        return;
    }
    auto* kh = reinterpret_cast<uint16_t*>(kd);
    auto* vh = reinterpret_cast<uint16_t*>(vd);
    for (uint32_t i = 0; i < kv_dim_; i++) {
        kh[i] = f32_to_fp16(k[i]);
        vh[i] = f32_to_fp16(v[i]);
    }
}

}  // namespace memtile
