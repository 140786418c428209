#include "models/presets.h"

#include <cmath>

#include "core/error.h"

namespace memtile {
namespace {

model_config make(const char* arch, uint32_t vocab, uint32_t embd, uint32_t layers, uint32_t heads, uint32_t kv_heads,
                  uint32_t ff, uint32_t ctx, float freq_base, float eps, bool tied) {
    model_config c;
    c.arch = arch;
    c.n_vocab = vocab;
    c.n_embd = embd;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_head_kv = kv_heads;
    c.n_ff = ff;
    c.n_ctx_train = ctx;
    c.head_dim = embd / heads;
    c.n_rot = c.head_dim;
    c.rope_freq_base = freq_base;
    c.norm_eps = eps;
    c.tied_embeddings = tied;
    c.rope = std::string(arch) == "llama" ? rope_style::normal : rope_style::neox;
    return c;
}

std::vector<model_preset> build() {
    std::vector<model_preset> p;
    p.push_back({"llama3-8b", "Llama-3-8B shapes (E 4096, 32 layers, GQA 32/8, FF 14336, vocab 128256)",
                 make("llama", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0f, 1e-5f, false)});
    // Llama-3-70B: the same step with ~8x the bytes per matrix, so a chain of launches costs a smaller share of a
    // token (Q4_K_M ~42 GB: one 80 GB GPU).
    p.push_back({"llama3-70b", "Llama-3-70B shapes (E 8192, 80 layers, GQA 64/8, FF 28672, vocab 128256)",
                 make("llama", 128256, 8192, 80, 64, 8, 28672, 8192, 500000.0f, 1e-5f, false)});
    p.push_back({"llama2-7b", "Llama-2-7B shapes (E 4096, 32 layers, 32 heads without GQA, FF 11008, vocab 32000)",
                 make("llama", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f, 1e-5f, false)});
    model_preset l32{"llama3.2-1b",
                     "Llama-3.2-1B shapes (E 2048, 16 layers, GQA 32/8, tied 128256 vocab, RoPE factors)",
                     make("llama", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, true)};
    l32.config.has_rope_freqs = true;
    l32.rope_scale_factor = 32;
    p.push_back(l32);
    p.push_back({"tinyllama-1.1b", "TinyLlama-1.1B shapes (E 2048, 22 layers, GQA 32/4, FF 5632, vocab 32000)",
                 make("llama", 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0f, 1e-5f, false)});
    p.push_back({"qwen2-1.5b", "Qwen2-1.5B shapes (E 1536, 28 layers, GQA 12/2, QKV bias, tied 151936 vocab)",
                 make("qwen2", 151936, 1536, 28, 12, 2, 8960, 32768, 1000000.0f, 1e-6f, true)});
    p.push_back({"phi3-mini", "Phi-3-mini shapes (E 3072, 32 layers, 32 heads, fused QKV and gate/up, vocab 32064)",
                 make("phi3", 32064, 3072, 32, 32, 32, 8192, 4096, 10000.0f, 1e-5f, false)});
    p.push_back({"stories15m", "llama2.c stories15M shapes (E 288, 6 layers, 6 heads, tied 32000 vocab)",
                 make("llama", 32000, 288, 6, 6, 6, 768, 256, 10000.0f, 1e-5f, true)});
    p.push_back({"tiny", "tiny test model (E 256, 2 layers, GQA 4/2, FF 768, vocab 512)",
                 make("llama", 512, 256, 2, 4, 2, 768, 512, 10000.0f, 1e-5f, false)});
    // Small models of each architecture feature, for tests: NeoX RoPE + QKV bias + tied output (qwen2),
    // fused QKV and gate/up (phi3), MQA + Llama 3.1 RoPE factors + tied output (llama3).
    p.push_back({"tiny-qwen2", "tiny qwen2 test model (QKV bias, NeoX RoPE, tied output)",
                 make("qwen2", 512, 256, 2, 4, 2, 768, 512, 1000000.0f, 1e-6f, true)});
    p.push_back({"tiny-phi3", "tiny phi3 test model (fused QKV and gate/up)",
                 make("phi3", 512, 256, 2, 4, 4, 512, 512, 10000.0f, 1e-5f, false)});
    // One layer at Llama-3-70B's widths (E 8192, 64 query heads on 8 KV heads: GQA groups of 8), for checks of the
    // kernels at that width against the CPU engine without a 40 GB file.
    p.push_back({"wide-llama3", "one-layer test model at Llama-3-70B widths (E 8192, GQA 64/8, FF 28672, vocab 512)",
                 make("llama", 512, 8192, 1, 64, 8, 28672, 8192, 500000.0f, 1e-5f, false)});
    model_preset l3{"tiny-llama3", "tiny Llama-3.1-style test model (MQA, RoPE factors, tied output)",
                    make("llama", 512, 256, 2, 4, 1, 512, 2048, 500000.0f, 1e-5f, true)};
    l3.config.has_rope_freqs = true;
    l3.rope_scale_factor = 8;
    l3.rope_original_ctx = 64;
    p.push_back(l3);
    for (auto& x : p) x.config.name = "memtile-synthetic-" + x.name;
    return p;
}

}  // namespace

const std::vector<model_preset>& model_presets() {
    static const std::vector<model_preset> presets = build();
    return presets;
}

const model_preset& find_preset(const std::string& name) {
    std::string known;
    for (const auto& p : model_presets()) {
        if (p.name == name) return p;
        known += (known.empty() ? "" : ", ") + p.name;
    }
    fail("model", "unknown preset '{}' (known: {})", name, known);
}

std::vector<float> llama3_rope_factors(const model_preset& p) {
    const auto& c = p.config;
    std::vector<float> f(c.n_rot / 2);
    const double low_wavelen = p.rope_original_ctx / p.rope_low_freq_factor;
    const double high_wavelen = p.rope_original_ctx / p.rope_high_freq_factor;
    for (size_t i = 0; i < f.size(); i++) {
        const double freq = std::pow(double(c.rope_freq_base), -2.0 * double(i) / double(c.n_rot));
        const double wavelen = 2 * M_PI / freq;
        if (wavelen < high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[i] = p.rope_scale_factor;
        } else {
            const double smooth = (p.rope_original_ctx / wavelen - p.rope_low_freq_factor) /
                                  (p.rope_high_freq_factor - p.rope_low_freq_factor);
            f[i] = float(1.0 / ((1 - smooth) / p.rope_scale_factor + smooth));
        }
    }
    return f;
}

}  // namespace memtile
