#include "models/model-config.h"

#include <array>

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "gguf/gguf-writer.h"

namespace memtile {
namespace {

constexpr std::array<const char*, 3> k_archs = {"llama", "qwen2", "phi3"};

uint32_t req_u32(const gguf_file& g, const std::string& key) {
    const uint64_t v = g.require(key).as_u64();
    if (v == 0 || v > 0x7fffffffu) fail("model", "{}: '{}' = {} is out of range", g.path(), key, v);
    return static_cast<uint32_t>(v);
}

}  // namespace

bool arch_supported(const std::string& arch) {
    for (const char* a : k_archs)
        if (arch == a) return true;
    return false;
}

std::string supported_archs() {
    std::string s;
    for (const char* a : k_archs) s += (s.empty() ? "" : ", ") + std::string(a);
    return s;
}

model_config read_model_config(const gguf_file& g) {
    model_config c;
    c.arch = g.get_string("general.architecture");
    if (c.arch.empty()) fail("model", "{}: metadata 'general.architecture' is missing", g.path());
    const std::string& a = c.arch;
    c.name = g.get_string("general.name");
    c.n_ctx_train = req_u32(g, a + ".context_length");
    c.n_embd = req_u32(g, a + ".embedding_length");
    c.n_layer = req_u32(g, a + ".block_count");
    c.n_ff = req_u32(g, a + ".feed_forward_length");
    c.n_head = req_u32(g, a + ".attention.head_count");
    c.n_head_kv = g.has(a + ".attention.head_count_kv") ? req_u32(g, a + ".attention.head_count_kv") : c.n_head;
    if (c.n_head % c.n_head_kv != 0)
        fail("model", "{}: head_count {} is not a multiple of head_count_kv {}", g.path(), c.n_head, c.n_head_kv);
    c.head_dim = g.has(a + ".attention.key_length") ? req_u32(g, a + ".attention.key_length") : c.n_embd / c.n_head;
    c.n_rot = g.has(a + ".rope.dimension_count") ? req_u32(g, a + ".rope.dimension_count") : c.head_dim;
    if (c.n_rot > c.head_dim || c.n_rot % 2)
        fail("model", "{}: rope.dimension_count {} is odd or exceeds the head size {}", g.path(), c.n_rot, c.head_dim);
    c.rope_freq_base = float(g.get_f64(a + ".rope.freq_base", 10000.0));
    c.norm_eps = float(g.get_f64(a + ".attention.layer_norm_rms_epsilon", 1e-5));
    c.expert_count = uint32_t(g.get_u64(a + ".expert_count", 0));
    c.expert_used_count = uint32_t(g.get_u64(a + ".expert_used_count", 0));
    c.rope = (a == "qwen2" || a == "phi3") ? rope_style::neox : rope_style::normal;

    const auto* emb = g.find_tensor("token_embd.weight");
    uint64_t vocab = g.get_u64(a + ".vocab_size", 0);
    if (!vocab) {
        if (const auto* toks = g.find("tokenizer.ggml.tokens"))
            vocab = toks->array_size();
        else if (emb && emb->dims.size() == 2)
            vocab = emb->dims[1];
    }
    if (!vocab || vocab > 0x7fffffffu) fail("model", "{}: cannot determine the vocabulary size", g.path());
    c.n_vocab = static_cast<uint32_t>(vocab);
    c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
    c.has_rope_freqs = g.find_tensor("rope_freqs.weight") != nullptr;
    return c;
}

void write_model_config(gguf_writer& w, const model_config& c) {
    const std::string& a = c.arch;
    w.set("general.architecture", gguf_value::string(a));
    if (!c.name.empty()) w.set("general.name", gguf_value::string(c.name));
    w.set(a + ".vocab_size", gguf_value::u32(c.n_vocab));
    w.set(a + ".context_length", gguf_value::u32(c.n_ctx_train));
    w.set(a + ".embedding_length", gguf_value::u32(c.n_embd));
    w.set(a + ".block_count", gguf_value::u32(c.n_layer));
    w.set(a + ".feed_forward_length", gguf_value::u32(c.n_ff));
    w.set(a + ".attention.head_count", gguf_value::u32(c.n_head));
    w.set(a + ".attention.head_count_kv", gguf_value::u32(c.n_head_kv));
    if (c.head_dim != c.n_embd / c.n_head) {
        w.set(a + ".attention.key_length", gguf_value::u32(c.head_dim));
        w.set(a + ".attention.value_length", gguf_value::u32(c.head_dim));
    }
    w.set(a + ".rope.dimension_count", gguf_value::u32(c.n_rot));
    w.set(a + ".rope.freq_base", gguf_value::f32(c.rope_freq_base));
    w.set(a + ".attention.layer_norm_rms_epsilon", gguf_value::f32(c.norm_eps));
    if (c.expert_count) {
        w.set(a + ".expert_count", gguf_value::u32(c.expert_count));
        w.set(a + ".expert_used_count", gguf_value::u32(c.expert_used_count));
    }
}

}  // namespace memtile
