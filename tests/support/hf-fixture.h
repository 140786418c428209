// Test support for `convert --from hf`: a tiny safetensors writer, a small byte-level BPE tokenizer.json, synthetic
// Hugging Face checkpoints (Llama, Qwen2, Phi-3 layouts, sharded, BF16 and F32), and a straightforward f32 forward
// pass with Hugging Face semantics (rotate_half RoPE on the unpermuted weights) to compare logits against.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"

namespace memtile::test {

struct st_entry {
    std::string name;
    std::string dtype;            // "F32", "F16" or "BF16"
    std::vector<uint64_t> shape;  // PyTorch order
    std::vector<float> values;    // written rounded to dtype
};

inline void write_safetensors(const std::string& path, const std::vector<st_entry>& entries) {
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (const auto& e : entries) {
        const size_t begin = data.size();
        for (float v : e.values) {
            if (e.dtype == "F32") {
                data.append(reinterpret_cast<const char*>(&v), 4);
            } else {
                const uint16_t h = e.dtype == "BF16" ? f32_to_bf16(v) : f32_to_fp16(v);
                data.append(reinterpret_cast<const char*>(&h), 2);
            }
        }
        header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {begin, data.size()}}};
    }
    std::string h = header.dump();
    while ((h.size() + 8) % 8) h += ' ';  // the format pads the header with spaces to 8-byte alignment
    const uint64_t n = h.size();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
}

// GPT-2's byte → printable character mapping (bytes that are printable map to themselves, the rest to U+0100..).
inline std::vector<std::string> byte_level_chars() {
    std::vector<std::string> out(256);
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
        std::string s;
        if (cp < 0x80) {
            s += char(cp);
        } else {
            s += char(0xC0 | (cp >> 6));
            s += char(0x80 | (cp & 0x3F));
        }
        out[size_t(b)] = s;
    }
    return out;
}

// A byte-level BPE tokenizer: 256 byte tokens, the merges below, and <|endoftext|> (special) at id 256 + merges.
inline nlohmann::ordered_json small_bpe_tokenizer_json(std::vector<std::string>& tokens) {
    const auto chars = byte_level_chars();
    tokens.assign(chars.begin(), chars.end());
    const std::vector<std::pair<std::string, std::string>> merges = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"},
                                                                     {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"ll", "o"}};
    nlohmann::ordered_json vocab, m = nlohmann::ordered_json::array();
    for (const auto& [a, b] : merges) {
        tokens.push_back(a + b);
        m.push_back(a + " " + b);
    }
    for (size_t i = 0; i < tokens.size(); i++) vocab[tokens[i]] = i;
    const size_t eot = tokens.size();
    tokens.push_back("<|endoftext|>");
    nlohmann::ordered_json j;
    j["version"] = "1.0";
    j["added_tokens"] = {{{"id", eot}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}};
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    j["decoder"] = {{"type", "ByteLevel"}};
    j["model"] = {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", m}};
    return j;
}

struct hf_tiny_model {
    std::string arch = "llama";  // llama, qwen2, phi3
    uint32_t n_vocab = 272, n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 96, head_dim = 16;
    float rope_theta = 10000.0f, eps = 1e-5f;
    bool tied = false;
    std::map<std::string, std::vector<uint64_t>> shapes;
    std::map<std::string, std::vector<float>> w;  // HF layout, values exactly as stored (after BF16 rounding)

    uint32_t q_dim() const { return n_head * head_dim; }
    uint32_t kv_dim() const { return n_head_kv * head_dim; }
};

// Writes config.json, tokenizer files and two safetensors shards (embedding and layer 0 in BF16, the rest F32)
// with model.safetensors.index.json into `dir`; fills m.w with the stored values.
inline void write_hf_checkpoint(const std::filesystem::path& dir, hf_tiny_model& m, uint32_t seed = 1) {
    std::filesystem::create_directories(dir);
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 0.08f);
    const uint64_t E = m.n_embd, V = m.n_vocab, Q = m.q_dim(), KV = m.kv_dim(), F = m.n_ff;
    std::vector<st_entry> shard[2];
    auto add = [&](const std::string& name, std::vector<uint64_t> shape, int which, float base, float scale) {
        uint64_t n = 1;
        for (auto d : shape) n *= d;
        std::vector<float> v(n);
        for (auto& x : v) x = base + scale * nd(gen);
        const std::string dt = which == 0 ? "BF16" : "F32";
        if (dt == "BF16")
            for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
        m.w[name] = v;
        m.shapes[name] = shape;
        shard[which].push_back({name, dt, shape, v});
    };
    add("model.embed_tokens.weight", {V, E}, 0, 0, 10);
    for (uint32_t l = 0; l < m.n_layer; l++) {
        const int s = l == 0 ? 0 : 1;
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {E}, s, 1, 1);
        if (m.arch == "phi3") {
            add(p + "self_attn.qkv_proj.weight", {Q + 2 * KV, E}, s, 0, 1);
        } else {
            add(p + "self_attn.q_proj.weight", {Q, E}, s, 0, 1);
            add(p + "self_attn.k_proj.weight", {KV, E}, s, 0, 1);
            add(p + "self_attn.v_proj.weight", {KV, E}, s, 0, 1);
        }
        if (m.arch == "qwen2") {
            add(p + "self_attn.q_proj.bias", {Q}, s, 0, 1);
            add(p + "self_attn.k_proj.bias", {KV}, s, 0, 1);
            add(p + "self_attn.v_proj.bias", {KV}, s, 0, 1);
        }
        add(p + "self_attn.o_proj.weight", {E, Q}, s, 0, 1);
        add(p + "post_attention_layernorm.weight", {E}, s, 1, 1);
        if (m.arch == "phi3") {
            add(p + "mlp.gate_up_proj.weight", {2 * F, E}, s, 0, 1);
        } else {
            add(p + "mlp.gate_proj.weight", {F, E}, s, 0, 1);
            add(p + "mlp.up_proj.weight", {F, E}, s, 0, 1);
        }
        add(p + "mlp.down_proj.weight", {E, F}, s, 0, 1);
    }
    add("model.norm.weight", {E}, 1, 1, 1);
    if (!m.tied) add("lm_head.weight", {V, E}, 1, 0, 1);

    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", 0}};
    const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int s = 0; s < 2; s++) {
        write_safetensors((dir / names[s]).string(), shard[s]);
        for (const auto& e : shard[s]) index["weight_map"][e.name] = names[s];
    }
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);

    const char* hf_arch = m.arch == "llama"   ? "LlamaForCausalLM"
                          : m.arch == "qwen2" ? "Qwen2ForCausalLM"
                                              : "Phi3ForCausalLM";
    nlohmann::ordered_json c;
    c["architectures"] = {hf_arch};
    c["model_type"] = m.arch;
    c["vocab_size"] = m.n_vocab;
    c["hidden_size"] = m.n_embd;
    c["intermediate_size"] = m.n_ff;
    c["num_hidden_layers"] = m.n_layer;
    c["num_attention_heads"] = m.n_head;
    c["num_key_value_heads"] = m.n_head_kv;
    c["max_position_embeddings"] = 256;
    c["rms_norm_eps"] = m.eps;
    c["rope_theta"] = m.rope_theta;
    c["tie_word_embeddings"] = m.tied;
    c["torch_dtype"] = "bfloat16";
    c["bos_token_id"] = 264;
    c["eos_token_id"] = 264;
    if (m.head_dim != m.n_embd / m.n_head) c["head_dim"] = m.head_dim;
    std::ofstream(dir / "config.json") << c.dump(2);

    std::vector<std::string> tokens;
    std::ofstream(dir / "tokenizer.json") << small_bpe_tokenizer_json(tokens).dump(2);
    nlohmann::ordered_json tc;
    tc["bos_token"] = "<|endoftext|>";
    tc["eos_token"] = "<|endoftext|>";
    tc["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    std::ofstream(dir / "tokenizer_config.json") << tc.dump(2);
}

// Hugging Face forward pass in plain f32/f64: returns logits [n_tok, n_vocab].
inline std::vector<float> hf_reference_logits(const hf_tiny_model& m, const std::vector<int32_t>& toks) {
    const size_t E = m.n_embd, Q = m.q_dim(), KV = m.kv_dim(), F = m.n_ff, HD = m.head_dim, V = m.n_vocab;
    const size_t T = toks.size();
    auto W = [&](const std::string& n) -> const std::vector<float>& { return m.w.at(n); };
    auto matvec = [](const std::vector<float>& w, size_t out, size_t in, const float* x, float* y, size_t row0 = 0) {
        for (size_t o = 0; o < out; o++) {
            double s = 0;
            for (size_t i = 0; i < in; i++) s += double(w[(row0 + o) * in + i]) * x[i];
            y[o] = float(s);
        }
    };
    auto rmsnorm = [&](const float* x, const std::vector<float>& g, float* y) {
        double ss = 0;
        for (size_t i = 0; i < E; i++) ss += double(x[i]) * x[i];
        const float r = float(1.0 / std::sqrt(ss / double(E) + m.eps));
        for (size_t i = 0; i < E; i++) y[i] = x[i] * r * g[i];
    };
    auto rope = [&](float* v, size_t n_heads, int pos) {  // rotate_half: pairs (i, i + HD/2)
        for (size_t h = 0; h < n_heads; h++)
            for (size_t i = 0; i < HD / 2; i++) {
                const double theta = pos * std::pow(double(m.rope_theta), -2.0 * double(i) / double(HD));
                const double c = std::cos(theta), s = std::sin(theta);
                float* p = v + h * HD;
                const double a = p[i], b = p[i + HD / 2];
                p[i] = float(a * c - b * s);
                p[i + HD / 2] = float(b * c + a * s);
            }
    };
    std::vector<float> x(T * E), h(E), q(T * Q), k(T * KV), v(T * KV), att(Q), o(E), g(F), u(F);
    for (size_t t = 0; t < T; t++) std::copy_n(&W("model.embed_tokens.weight")[size_t(toks[t]) * E], E, &x[t * E]);
    for (uint32_t l = 0; l < m.n_layer; l++) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        for (size_t t = 0; t < T; t++) {
            rmsnorm(&x[t * E], W(p + "input_layernorm.weight"), h.data());
            if (m.arch == "phi3") {
                matvec(W(p + "self_attn.qkv_proj.weight"), Q, E, h.data(), &q[t * Q], 0);
                matvec(W(p + "self_attn.qkv_proj.weight"), KV, E, h.data(), &k[t * KV], Q);
                matvec(W(p + "self_attn.qkv_proj.weight"), KV, E, h.data(), &v[t * KV], Q + KV);
            } else {
                matvec(W(p + "self_attn.q_proj.weight"), Q, E, h.data(), &q[t * Q]);
                matvec(W(p + "self_attn.k_proj.weight"), KV, E, h.data(), &k[t * KV]);
                matvec(W(p + "self_attn.v_proj.weight"), KV, E, h.data(), &v[t * KV]);
            }
            if (m.arch == "qwen2") {
                for (size_t i = 0; i < Q; i++) q[t * Q + i] += W(p + "self_attn.q_proj.bias")[i];
                for (size_t i = 0; i < KV; i++) k[t * KV + i] += W(p + "self_attn.k_proj.bias")[i];
                for (size_t i = 0; i < KV; i++) v[t * KV + i] += W(p + "self_attn.v_proj.bias")[i];
            }
            rope(&q[t * Q], m.n_head, int(t));
            rope(&k[t * KV], m.n_head_kv, int(t));
        }
        for (size_t t = 0; t < T; t++) {
            for (size_t hh = 0; hh < m.n_head; hh++) {
                const size_t kh = hh / (m.n_head / m.n_head_kv);
                std::vector<double> sc(t + 1);
                double mx = -1e300, sum = 0;
                for (size_t s = 0; s <= t; s++) {
                    double d = 0;
                    for (size_t i = 0; i < HD; i++) d += double(q[t * Q + hh * HD + i]) * k[s * KV + kh * HD + i];
                    sc[s] = d / std::sqrt(double(HD));
                    mx = std::max(mx, sc[s]);
                }
                for (auto& s : sc) sum += (s = std::exp(s - mx));
                for (size_t i = 0; i < HD; i++) {
                    double a = 0;
                    for (size_t s = 0; s <= t; s++) a += sc[s] / sum * v[s * KV + kh * HD + i];
                    att[hh * HD + i] = float(a);
                }
            }
            matvec(W(p + "self_attn.o_proj.weight"), E, Q, att.data(), o.data());
            for (size_t i = 0; i < E; i++) x[t * E + i] += o[i];
        }
        for (size_t t = 0; t < T; t++) {
            rmsnorm(&x[t * E], W(p + "post_attention_layernorm.weight"), h.data());
            if (m.arch == "phi3") {
                matvec(W(p + "mlp.gate_up_proj.weight"), F, E, h.data(), g.data(), 0);
                matvec(W(p + "mlp.gate_up_proj.weight"), F, E, h.data(), u.data(), F);
            } else {
                matvec(W(p + "mlp.gate_proj.weight"), F, E, h.data(), g.data());
                matvec(W(p + "mlp.up_proj.weight"), F, E, h.data(), u.data());
            }
            for (size_t i = 0; i < F; i++) g[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
            matvec(W(p + "mlp.down_proj.weight"), E, F, g.data(), o.data());
            for (size_t i = 0; i < E; i++) x[t * E + i] += o[i];
        }
    }
    std::vector<float> logits(T * V);
    const auto& out = m.tied ? W("model.embed_tokens.weight") : W("lm_head.weight");
    for (size_t t = 0; t < T; t++) {
        rmsnorm(&x[t * E], W("model.norm.weight"), h.data());
        matvec(out, V, E, h.data(), &logits[t * V]);
    }
    return logits;
}

}  // namespace memtile::test
