// convert --from hf on synthetic checkpoints made here: tensor values (permutation undone), metadata, and logits
// of memtile's transformer on the converted file against a Hugging Face-semantics f32 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "convert/hf-import.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/transformer.h"
#include "quant/quant.h"
#include "support/hf-fixture.h"
#include "support/test-paths.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace memtile;
namespace fs = std::filesystem;

// HF-style NeoX RoPE on a head of the original rows equals GGUF-style interleaved RoPE on the permuted rows.
TEST(convert_permutation, neox_on_original_equals_normal_on_permuted) {
    const uint32_t hd = 8;
    std::vector<float> orig(hd), perm(hd);
    for (uint32_t i = 0; i < hd; i++) orig[i] = float(i + 1) * 0.37f - 1.0f;
    for (uint32_t r = 0; r < hd; r++) perm[r] = orig[llama_qk_source_row(r, hd)];
    const int pos = 5;
    for (uint32_t i = 0; i < hd / 2; i++) {
        const float th = float(pos) * std::pow(10000.0f, -2.0f * float(i) / float(hd));
        const float c = std::cos(th), s = std::sin(th);
        const float a = orig[i], b = orig[i + hd / 2];
        orig[i] = a * c - b * s, orig[i + hd / 2] = a * s + b * c;
        const float x = perm[2 * i], y = perm[2 * i + 1];
        perm[2 * i] = x * c - y * s, perm[2 * i + 1] = x * s + y * c;
    }
    for (uint32_t r = 0; r < hd; r++) EXPECT_FLOAT_EQ(perm[r], orig[llama_qk_source_row(r, hd)]) << r;
    // Second head: rows are offset by head_dim.
    EXPECT_EQ(llama_qk_source_row(hd + 1, hd), hd + hd / 2);
    EXPECT_EQ(llama_qk_source_row(hd + 2, hd), hd + 1);
}

struct arch_case {
    std::string arch;
    bool tied;
};

class convert_hf_model : public ::testing::TestWithParam<arch_case> {};

TEST_P(convert_hf_model, tensors_metadata_and_logits_match_reference) {
    const auto p = GetParam();
    test::hf_tiny_model m;
    m.arch = p.arch;
    m.tied = p.tied;
    if (p.arch == "phi3") m.n_head_kv = m.n_head;  // Phi-3 mini has no GQA; the layout supports it either way
    const fs::path dir = test::scratch_dir() / ("hf-" + p.arch + (p.tied ? "-tied" : ""));
    test::write_hf_checkpoint(dir, m);
    const std::string out = (dir / "model-f32.gguf").string();
    hf_import_options o;
    o.type = file_type::all_f32;
    o.threads = 2;
    o.progress = false;
    const auto r = import_hf(dir.string(), out, o);
    EXPECT_EQ(r.arch, p.arch);
    EXPECT_EQ(r.n_vocab, m.n_vocab);
    EXPECT_EQ(r.tokenizer_model, "gpt2");
    EXPECT_EQ(r.tokenizer_pre, "gpt-2");  // a plain ByteLevel pre-tokenizer, whatever the model type

    auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_string("general.architecture"), p.arch);
    EXPECT_EQ(g->get_u64("general.file_type", 99), 0u);
    EXPECT_EQ(g->get_u64(p.arch + ".block_count", 0), m.n_layer);
    EXPECT_EQ(g->get_u64(p.arch + ".embedding_length", 0), m.n_embd);
    EXPECT_EQ(g->get_u64(p.arch + ".attention.head_count_kv", 0), m.n_head_kv);
    EXPECT_EQ(g->get_u64(p.arch + ".context_length", 0), 256u);
    EXPECT_NEAR(g->get_f64(p.arch + ".attention.layer_norm_rms_epsilon", 0), 1e-5, 1e-9);
    EXPECT_EQ(g->get_u64("tokenizer.ggml.eos_token_id", 0), 264u);
    EXPECT_EQ(g->get_string("tokenizer.chat_template"), "{% for m in messages %}{{ m['content'] }}{% endfor %}");
    EXPECT_EQ(g->find_tensor("output.weight") == nullptr, p.tied);

    // Every tensor equals its source (Q/K rows permuted back for llama).
    auto check = [&](const std::string& gguf_name, const std::string& hf_name, bool permuted) {
        SCOPED_TRACE(gguf_name);
        const auto* t = g->find_tensor(gguf_name);
        ASSERT_NE(t, nullptr);
        ASSERT_EQ(t->type, dtype::f32);
        const auto& src = m.w.at(hf_name);
        ASSERT_EQ(t->n_elems, src.size());
        const uint64_t row = t->dims[0];
        std::vector<float> got(t->n_elems);
        std::memcpy(got.data(), t->data, t->n_bytes);
        for (uint64_t r = 0; r < t->n_rows(); r++) {
            const uint64_t from = permuted ? llama_qk_source_row(r, m.head_dim) : r;
            for (uint64_t i = 0; i < row; i++) ASSERT_EQ(got[r * row + i], src[from * row + i]) << r << "," << i;
        }
    };
    check("token_embd.weight", "model.embed_tokens.weight", false);
    check("output_norm.weight", "model.norm.weight", false);
    if (!p.tied) check("output.weight", "lm_head.weight", false);
    for (uint32_t l = 0; l < m.n_layer; l++) {
        const std::string b = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
        if (p.arch == "phi3") {
            check(b + "attn_qkv.weight", h + "self_attn.qkv_proj.weight", false);
            check(b + "ffn_up.weight", h + "mlp.gate_up_proj.weight", false);
        } else {
            check(b + "attn_q.weight", h + "self_attn.q_proj.weight", p.arch == "llama");
            check(b + "attn_k.weight", h + "self_attn.k_proj.weight", p.arch == "llama");
            check(b + "attn_v.weight", h + "self_attn.v_proj.weight", false);
            check(b + "ffn_gate.weight", h + "mlp.gate_proj.weight", false);
            check(b + "ffn_up.weight", h + "mlp.up_proj.weight", false);
        }
        if (p.arch == "qwen2") check(b + "attn_q.bias", h + "self_attn.q_proj.bias", false);
        check(b + "attn_output.weight", h + "self_attn.o_proj.weight", false);
        check(b + "ffn_down.weight", h + "mlp.down_proj.weight", false);
        check(b + "attn_norm.weight", h + "input_layernorm.weight", false);
        check(b + "ffn_norm.weight", h + "post_attention_layernorm.weight", false);
    }

    // Logits of memtile's engine on the converted file == the Hugging Face reference on the original weights.
    const std::vector<int32_t> toks = {264, 5, 71, 256, 200, 3, 263, 40, 17};
    const auto ref = test::hf_reference_logits(m, toks);
    auto model = transformer::load(out);
    thread_pool pool(2);
    forward_context ctx(*model, 64, dtype::f32, pool);
    ctx.forward(toks, true);
    const auto logits = ctx.logits();
    ASSERT_EQ(logits.size(), ref.size());
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        max_err = std::max(max_err, double(std::fabs(logits[i] - ref[i])));
        max_ref = std::max(max_ref, double(std::fabs(ref[i])));
    }
    EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_ref)) << "max |logit| " << max_ref;

    // The embedded tokenizer works: merges apply and the special token is recognised.
    auto tok = tokenizer::from_gguf(*g);
    EXPECT_EQ(tok->tokenize("the world", {false, false}), (std::vector<token_id>{116, 257, 262, 108, 100}));
    EXPECT_EQ(tok->tokenize("<|endoftext|>", {false, true}), (std::vector<token_id>{264}));
}

INSTANTIATE_TEST_SUITE_P(archs, convert_hf_model,
                         ::testing::Values(arch_case{"llama", false}, arch_case{"llama", true},
                                           arch_case{"qwen2", true}, arch_case{"phi3", false}),
                         [](const auto& info) { return info.param.arch + (info.param.tied ? "_tied" : ""); });

// A quantized conversion stays close to the f32 one.
TEST(convert_hf, q8_0_conversion_runs_close_to_f32) {
    test::hf_tiny_model m;
    const fs::path dir = test::scratch_dir() / "hf-q8";
    test::write_hf_checkpoint(dir, m);
    hf_import_options o;
    o.progress = false;
    o.type = file_type::q8_0;
    import_hf(dir.string(), (dir / "q8.gguf").string(), o);
    auto g = gguf_file::open((dir / "q8.gguf").string());
    EXPECT_EQ(g->find_tensor("blk.0.attn_q.weight")->type, dtype::q8_0);
    EXPECT_EQ(g->find_tensor("blk.0.attn_norm.weight")->type, dtype::f32);
    EXPECT_EQ(g->get_u64("general.quantization_version", 0), 2u);
    auto model = transformer::load((dir / "q8.gguf").string());
    thread_pool pool(1);
    forward_context ctx(*model, 16, dtype::f32, pool);
    const std::vector<int32_t> toks = {1, 2, 3, 4};
    const auto logits = ctx.forward(toks);
    const auto ref = test::hf_reference_logits(m, toks);
    for (size_t i = 0; i < logits.size(); i++) {
        ASSERT_TRUE(std::isfinite(logits[i]));
        EXPECT_NEAR(logits[i], ref[3 * m.n_vocab + i], 0.05 * (1 + std::fabs(ref[3 * m.n_vocab + i])));
    }
}

TEST(convert_hf, unsupported_architecture_and_dtype_are_named) {
    test::hf_tiny_model m;
    const fs::path dir = test::scratch_dir() / "hf-bad-arch";
    test::write_hf_checkpoint(dir, m);
    std::ofstream(dir / "config.json") << R"({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"})";
    try {
        import_hf(dir.string(), (dir / "x.gguf").string(), {});
        FAIL() << "expected an error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("GPTNeoXForCausalLM"), std::string::npos) << e.what();
    }
    const fs::path dir2 = test::scratch_dir() / "hf-bad-dtype";
    test::write_hf_checkpoint(dir2, m);
    std::filesystem::remove(dir2 / "model.safetensors.index.json");
    std::filesystem::remove(dir2 / "model-00002-of-00002.safetensors");
    std::filesystem::remove(dir2 / "model-00001-of-00002.safetensors");
    std::vector<test::st_entry> e = {{"model.embed_tokens.weight", "F32", {m.n_vocab, m.n_embd}, {}}};
    e[0].values.assign(size_t(m.n_vocab) * m.n_embd, 0.0f);
    e.push_back({"model.norm.weight", "F32", {m.n_embd}, std::vector<float>(m.n_embd, 1.0f)});
    test::write_safetensors((dir2 / "model.safetensors").string(), e);
    // Patch the norm's dtype to I32 (same byte size as F32) in the header.
    std::string bytes;
    {
        std::ifstream in(dir2 / "model.safetensors", std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = bytes.rfind("\"F32\"");
    bytes.replace(at, 5, "\"I32\"");
    std::ofstream(dir2 / "model.safetensors", std::ios::binary) << bytes;
    try {
        import_hf(dir2.string(), (dir2 / "x.gguf").string(), {});
        FAIL() << "expected an error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos) << e.what();
    }
}

}  // namespace
