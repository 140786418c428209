#include "quant/file-type.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace memtile {
namespace {

struct file_type_row {
    file_type type;
    std::string_view name;
    dtype base;
    bool writable;
};

constexpr std::array<file_type_row, 17> k_file_types{{
    {file_type::all_f32, "F32", dtype::f32, true},
    {file_type::f16, "F16", dtype::f16, true},
    {file_type::bf16, "BF16", dtype::bf16, true},
    {file_type::q4_0, "Q4_0", dtype::q4_0, true},
    {file_type::q4_1, "Q4_1", dtype::q4_1, false},
    {file_type::q5_0, "Q5_0", dtype::q5_0, false},
    {file_type::q5_1, "Q5_1", dtype::q5_1, false},
    {file_type::q8_0, "Q8_0", dtype::q8_0, true},
    {file_type::q2_k, "Q2_K", dtype::q2_k, false},
    {file_type::q3_k_s, "Q3_K_S", dtype::q3_k, false},
    {file_type::q3_k_m, "Q3_K_M", dtype::q3_k, false},
    {file_type::q3_k_l, "Q3_K_L", dtype::q3_k, false},
    {file_type::q4_k_s, "Q4_K_S", dtype::q4_k, true},
    {file_type::q4_k_m, "Q4_K_M", dtype::q4_k, true},
    {file_type::q5_k_s, "Q5_K_S", dtype::q5_k, true},
    {file_type::q5_k_m, "Q5_K_M", dtype::q5_k, true},
    {file_type::q6_k, "Q6_K", dtype::q6_k, true},
}};

const file_type_row* find_row(uint32_t raw) {
    for (const auto& r : k_file_types)
        if (static_cast<uint32_t>(r.type) == raw) return &r;
    return nullptr;
}

// Layers that get more bits in the _M mixtures: the first and last eighth, and every third in between.
bool use_more_bits(uint32_t i, uint32_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool is_k_type(dtype t) {
    return t == dtype::q2_k || t == dtype::q3_k || t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
}

}  // namespace

std::optional<file_type> file_type_from_name(std::string_view name) {
    std::string up(name);
    for (auto& ch : up) ch = char(std::toupper(uint8_t(ch)));
    for (const auto& r : k_file_types)
        if (r.name == up) return r.type;
    return std::nullopt;
}

std::string_view file_type_name(file_type t) {
    return file_type_name(static_cast<uint32_t>(t));
}

std::string_view file_type_name(uint32_t raw) {
    const auto* r = find_row(raw);
    return r ? r->name : "unknown";
}

dtype file_type_base(file_type t) {
    const auto* r = find_row(static_cast<uint32_t>(t));
    if (!r) fail("quant", "unknown file type {}", static_cast<uint32_t>(t));
    return r->base;
}

bool file_type_writable(file_type t) {
    const auto* r = find_row(static_cast<uint32_t>(t));
    return r && r->writable;
}

std::string writable_file_types() {
    std::string s;
    for (const auto& r : k_file_types)
        if (r.writable) s += (s.empty() ? "" : ", ") + std::string(r.name);
    return s;
}

dtype tensor_type_for(file_type ft, const tensor_spec& spec, const model_config& c) {
    if (spec.is_norm() || spec.dims.size() < 2) return dtype::f32;
    const dtype base = file_type_base(ft);
    if (!traits(base).quantized) return base;
    dtype t = base;
    const bool is_output =
        spec.role == tensor_role::output || (c.tied_embeddings && spec.role == tensor_role::token_embd);
    const uint32_t layer = spec.layer < 0 ? 0 : static_cast<uint32_t>(spec.layer);
    if (is_output) {
        if (base != dtype::q8_0) t = dtype::q6_k;
    } else if (spec.role == tensor_role::attn_v) {
        if ((ft == file_type::q4_k_m || ft == file_type::q5_k_m) && use_more_bits(layer, c.n_layer)) t = dtype::q6_k;
        if (ft == file_type::q4_k_s && layer < 4) t = dtype::q5_k;
    } else if (spec.role == tensor_role::ffn_down) {
        if ((ft == file_type::q4_k_m || ft == file_type::q5_k_m) && use_more_bits(layer, c.n_layer)) t = dtype::q6_k;
        if (ft == file_type::q4_k_s && layer < c.n_layer / 8) t = dtype::q5_k;
    } else if (spec.role == tensor_role::attn_qkv) {
        if (ft == file_type::q4_k_m) t = dtype::q5_k;
        if (ft == file_type::q5_k_m) t = dtype::q6_k;
    }
    if (is_k_type(t) && spec.dims[0] % 256 != 0) t = dtype::q8_0;
    if (spec.dims[0] % traits(t).block_elems != 0) t = dtype::f16;
    return t;
}

}  // namespace memtile
