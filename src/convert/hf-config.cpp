#include "convert/hf-config.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/presets.h"

namespace memtile {
namespace {

using json = nlohmann::json;

struct arch_row {
    const char* hf;
    const char* gguf;
};
constexpr arch_row k_archs[] = {{"LlamaForCausalLM", "llama"},
                                {"MistralForCausalLM", "llama"},
                                {"Qwen2ForCausalLM", "qwen2"},
                                {"Phi3ForCausalLM", "phi3"}};

uint32_t get_u32(const json& j, const std::string& path, const char* key, bool required, uint32_t def = 0) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (required) fail("convert", "{}: required key '{}' is missing", path, key);
        return def;
    }
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > 0x7fffffff)
        fail("convert", "{}: '{}' = {} is not a positive 32-bit integer", path, key, it->dump());
    return it->get<uint32_t>();
}

double get_f64(const json& j, const std::string& path, const char* key, double def) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    if (!it->is_number()) fail("convert", "{}: '{}' = {} is not a number", path, key, it->dump());
    return it->get<double>();
}

}  // namespace

std::string gguf_arch_for(const std::string& hf_arch) {
    for (const auto& r : k_archs)
        if (hf_arch == r.hf) return r.gguf;
    return {};
}

hf_config read_hf_config(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / "config.json").string();
    std::ifstream in(path);
    if (!in) fail("convert", "{}: cannot open (a Hugging Face checkpoint folder needs config.json)", path);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("convert", "{}: not a JSON object", path);

    hf_config h;
    if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
        h.hf_arch = (*a)[0].get<std::string>();
    h.model_type = j.value("model_type", std::string());
    model_config& c = h.cfg;
    c.arch = gguf_arch_for(h.hf_arch);
    if (c.arch.empty()) {
        std::string known;
        for (const auto& r : k_archs) known += (known.empty() ? "" : ", ") + std::string(r.hf);
        fail("convert", "{}: unsupported architecture '{}' (model_type '{}'; supported: {})", path,
             h.hf_arch.empty() ? "(none)" : h.hf_arch, h.model_type, known);
    }
    c.n_vocab = get_u32(j, path, "vocab_size", true);
    c.n_embd = get_u32(j, path, "hidden_size", true);
    c.n_layer = get_u32(j, path, "num_hidden_layers", true);
    c.n_head = get_u32(j, path, "num_attention_heads", true);
    c.n_head_kv = get_u32(j, path, "num_key_value_heads", false, c.n_head);
    c.n_ff = get_u32(j, path, "intermediate_size", true);
    c.n_ctx_train = get_u32(j, path, "max_position_embeddings", false, 2048);
    if (c.n_head % c.n_head_kv)
        fail("convert", "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path, c.n_head,
             c.n_head_kv);
    if (c.n_embd % c.n_head && !j.contains("head_dim"))
        fail("convert", "{}: hidden_size {} is not a multiple of num_attention_heads {}", path, c.n_embd, c.n_head);
    c.head_dim = get_u32(j, path, "head_dim", false, c.n_embd / c.n_head);
    c.n_rot = c.head_dim;
    if (h.model_type == "phi3" && j.contains("partial_rotary_factor"))
        c.n_rot = uint32_t(double(c.head_dim) * get_f64(j, path, "partial_rotary_factor", 1.0));
    if (c.n_rot % 2) fail("convert", "{}: rotary dimension {} is odd", path, c.n_rot);
    c.rope_freq_base = float(get_f64(j, path, "rope_theta", 10000.0));
    c.norm_eps = float(get_f64(j, path, "rms_norm_eps", 1e-6));
    c.rope = c.arch == "llama" ? rope_style::normal : rope_style::neox;
    h.tie_word_embeddings = j.value("tie_word_embeddings", false);
    if (auto it = j.find("name_or_path"); it != j.end() && it->is_string()) c.name = it->get<std::string>();
    if (auto it = j.find("num_local_experts"); it != j.end() && !it->is_null())
        fail("convert", "{}: mixture-of-experts checkpoints ({} experts) are not supported", path, it->dump());
    if (j.value("attention_bias", false) && c.arch == "llama")
        fail("convert", "{}: attention_bias = true is not supported for architecture llama", path);
    h.rope_original_ctx = get_u32(j, path, "original_max_position_embeddings", false, 0);

    if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
        if (!rs->is_object()) fail("convert", "{}: rope_scaling is not an object", path);
        const std::string type = rs->value("rope_type", rs->value("type", std::string()));
        if (type != "llama3" || c.arch != "llama")
            fail("convert", "{}: rope_scaling type '{}' is not supported for {} (supported: llama3 on Llama)", path,
                 type, h.hf_arch);
        model_preset p;
        p.config = c;
        p.rope_scale_factor = float(get_f64(*rs, path, "factor", 8.0));
        p.rope_low_freq_factor = float(get_f64(*rs, path, "low_freq_factor", 1.0));
        p.rope_high_freq_factor = float(get_f64(*rs, path, "high_freq_factor", 4.0));
        p.rope_original_ctx = get_u32(*rs, path, "original_max_position_embeddings", false, 8192);
        if (p.rope_high_freq_factor <= p.rope_low_freq_factor || p.rope_scale_factor <= 0)
            fail("convert", "{}: rope_scaling factors (factor {}, low {}, high {}) are inconsistent", path,
                 p.rope_scale_factor, p.rope_low_freq_factor, p.rope_high_freq_factor);
        h.rope_factors = llama3_rope_factors(p);
        c.has_rope_freqs = true;
    }
    if (auto e = j.find("eos_token_id"); e != j.end()) {
        if (e->is_number_integer()) h.eos_token_ids.push_back(e->get<int64_t>());
        if (e->is_array())
            for (const auto& v : *e)
                if (v.is_number_integer()) h.eos_token_ids.push_back(v.get<int64_t>());
    }
    if (auto b = j.find("bos_token_id"); b != j.end() && b->is_number_integer()) h.bos_token_id = b->get<int64_t>();
    return h;
}

}  // namespace memtile
