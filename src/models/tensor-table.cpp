#include "models/tensor-table.h"

#include "core/error.h"
#include "gguf/gguf-file.h"

namespace memtile {

bool tensor_spec::is_norm() const {
    return role == tensor_role::attn_norm || role == tensor_role::ffn_norm || role == tensor_role::output_norm ||
           role == tensor_role::rope_freqs || role == tensor_role::attn_q_bias || role == tensor_role::attn_k_bias ||
           role == tensor_role::attn_v_bias;
}

std::string dims_to_string(const std::vector<uint64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); i++) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

std::vector<tensor_spec> tensor_table(const model_config& c) {
    if (!arch_supported(c.arch)) fail("model", "unknown architecture '{}' (supported: {})", c.arch, supported_archs());
    const uint64_t E = c.n_embd, V = c.n_vocab, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
    const bool phi3 = c.arch == "phi3", qwen2 = c.arch == "qwen2";
    std::vector<tensor_spec> t;
    auto add = [&](tensor_role r, std::string name, int layer, std::vector<uint64_t> dims, bool required = true) {
        t.push_back({r, std::move(name), layer, std::move(dims), required});
    };
    add(tensor_role::token_embd, "token_embd.weight", -1, {E, V});
    add(tensor_role::output_norm, "output_norm.weight", -1, {E});
    add(tensor_role::output, "output.weight", -1, {E, V}, !c.tied_embeddings);
    add(tensor_role::rope_freqs, "rope_freqs.weight", -1, {c.n_rot / 2u}, c.has_rope_freqs);
    for (uint32_t i = 0; i < c.n_layer; i++) {
        const int l = static_cast<int>(i);
        auto n = [&](const char* s) { return "blk." + std::to_string(i) + "." + s; };
        add(tensor_role::attn_norm, n("attn_norm.weight"), l, {E});
        if (phi3) {
            add(tensor_role::attn_qkv, n("attn_qkv.weight"), l, {E, Q + 2 * KV});
        } else {
            add(tensor_role::attn_q, n("attn_q.weight"), l, {E, Q});
            add(tensor_role::attn_k, n("attn_k.weight"), l, {E, KV});
            add(tensor_role::attn_v, n("attn_v.weight"), l, {E, KV});
        }
        if (qwen2) {
            add(tensor_role::attn_q_bias, n("attn_q.bias"), l, {Q});
            add(tensor_role::attn_k_bias, n("attn_k.bias"), l, {KV});
            add(tensor_role::attn_v_bias, n("attn_v.bias"), l, {KV});
        }
        add(tensor_role::attn_output, n("attn_output.weight"), l, {Q, E});
        add(tensor_role::ffn_norm, n("ffn_norm.weight"), l, {E});
        if (phi3) {
            add(tensor_role::ffn_up, n("ffn_up.weight"), l, {E, 2 * F});
        } else {
            add(tensor_role::ffn_gate, n("ffn_gate.weight"), l, {E, F});
            add(tensor_role::ffn_up, n("ffn_up.weight"), l, {E, F});
        }
        add(tensor_role::ffn_down, n("ffn_down.weight"), l, {F, E});
    }
    return t;
}

void check_tensors(const gguf_file& g, const model_config& c) {
    std::string missing;
    size_t n_missing = 0;
    for (const auto& spec : tensor_table(c)) {
        const auto* t = g.find_tensor(spec.name);
        if (!t) {
            if (spec.required) {
                if (n_missing < 12) missing += (missing.empty() ? "" : ", ") + spec.name;
                n_missing++;
            }
            continue;
        }
        // 1-D tensors may be stored as [n, 1] by some converters; compare the element layout.
        auto dims = t->dims;
        while (dims.size() > spec.dims.size() && dims.back() == 1) dims.pop_back();
        if (dims != spec.dims)
            fail("model", "{}: tensor '{}' has shape {}, expected {} for this {} configuration", g.path(), spec.name,
                 dims_to_string(t->dims), dims_to_string(spec.dims), c.arch);
    }
    if (n_missing)
        fail("model", "{}: {} required tensor(s) missing for architecture '{}': {}{}", g.path(), n_missing, c.arch,
             missing, n_missing > 12 ? ", ..." : "");
}

}  // namespace memtile
