// config.json → model_config on the real Hugging Face configs in shared/hf/configs.
#include <gtest/gtest.h>

#include <filesystem>

#include "convert/hf-config.h"
#include "core/error.h"
#include "models/presets.h"
#include "support/test-paths.h"

namespace {

using namespace memtile;
namespace fs = std::filesystem;

// read_hf_config reads DIR/config.json: copy the shared file into a scratch folder of its own.
hf_config read_shared(const std::string& file) {
    const fs::path dir = test::scratch_dir() / ("cfg-" + file);
    fs::create_directories(dir);
    fs::copy_file(test::shared_path("hf/configs/" + file), dir / "config.json", fs::copy_options::overwrite_existing);
    return read_hf_config(dir.string());
}

std::string error_of(const std::string& file) {
    try {
        read_shared(file);
    } catch (const error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(convert_config, llama31_rope_scaling_becomes_frequency_factors) {
    const auto h = read_shared("Llama-3.1-8B.config.json");
    EXPECT_EQ(h.cfg.arch, "llama");
    EXPECT_EQ(h.cfg.n_embd, 4096u);
    EXPECT_EQ(h.cfg.n_head_kv, 8u);
    EXPECT_EQ(h.cfg.head_dim, 128u);
    EXPECT_FLOAT_EQ(h.cfg.rope_freq_base, 500000.0f);
    EXPECT_EQ(h.cfg.rope, rope_style::normal);
    ASSERT_TRUE(h.cfg.has_rope_freqs);
    ASSERT_EQ(h.rope_factors.size(), 64u);
    EXPECT_FLOAT_EQ(h.rope_factors.front(), 1.0f);  // high frequencies are not scaled
    EXPECT_FLOAT_EQ(h.rope_factors.back(), 8.0f);   // low frequencies get the full factor
    model_preset p;
    p.config = h.cfg;
    p.rope_scale_factor = 8;
    p.rope_original_ctx = 8192;
    EXPECT_EQ(h.rope_factors, llama3_rope_factors(p));
}

TEST(convert_config, qwen2_and_tinyllama) {
    const auto q = read_shared("Qwen2-0.5B-Instruct.config.from-mlc-llm-preset.json");
    EXPECT_EQ(q.cfg.arch, "qwen2");
    EXPECT_EQ(q.cfg.rope, rope_style::neox);
    EXPECT_TRUE(q.tie_word_embeddings);
    EXPECT_FALSE(q.cfg.has_rope_freqs);
    const auto t = read_shared("TinyLlama-1.1B-Chat-v1.0.config.resaved.json");
    EXPECT_EQ(t.cfg.n_layer, 22u);
    EXPECT_EQ(t.cfg.n_head_kv, 4u);
    EXPECT_EQ(t.cfg.n_ff, 5632u);
    EXPECT_EQ(t.cfg.n_ctx_train, 2048u);
}

TEST(convert_config, unsupported_variants_are_named) {
    EXPECT_NE(error_of("Mixtral-8x7B-v0.1.config.from-mlc-llm-preset.json").find("MixtralForCausalLM"),
              std::string::npos);
    EXPECT_NE(error_of("Qwen1.5-MoE-A2.7B-Chat.config.from-mlc-llm-preset.json").find("Qwen2MoeForCausalLM"),
              std::string::npos);
    // Phi-3.5's LongRoPE scaling (long/short factor lists) is not implemented.
    EXPECT_NE(error_of("Phi-3.5-mini-instruct.config.from-mlc-llm-preset.json").find("rope_scaling"),
              std::string::npos);
}

}  // namespace
