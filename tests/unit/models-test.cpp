#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "models/llama2c-import.h"
#include "models/model-config.h"
#include "models/presets.h"
#include "models/synthetic-model.h"
#include "models/tensor-table.h"
#include "observe/memory-model.h"
#include "quant/file-type.h"
#include "support/test-paths.h"

using namespace memtile;

TEST(models, gen_matches_preset_shapes) {
    for (const char* preset : {"tiny", "stories15m"}) {
        for (file_type ft : {file_type::all_f32, file_type::q8_0, file_type::q4_k_m}) {
            synthetic_options o;
            o.preset = preset;
            o.type = ft;
            o.progress = false;
            const auto path = test::scratch(std::string("gen-") + preset + ".gguf");
            write_synthetic_model(o, path);
            auto g = gguf_file::open(path);
            const model_config c = read_model_config(*g);
            const model_config& p = find_preset(preset).config;
            EXPECT_EQ(c.n_embd, p.n_embd);
            EXPECT_EQ(c.n_layer, p.n_layer);
            EXPECT_EQ(c.n_head, p.n_head);
            EXPECT_EQ(c.n_head_kv, p.n_head_kv);
            EXPECT_EQ(c.n_ff, p.n_ff);
            EXPECT_EQ(c.n_vocab, p.n_vocab);
            EXPECT_EQ(c.tied_embeddings, p.tied_embeddings);
            EXPECT_NO_THROW(check_tensors(*g, c));
            EXPECT_EQ(g->get_u64("general.file_type", 99), uint64_t(ft));
            for (const auto& spec : tensor_table(c)) {
                const auto* t = g->find_tensor(spec.name);
                if (!spec.required) continue;
                ASSERT_NE(t, nullptr) << spec.name;
                EXPECT_EQ(t->type, tensor_type_for(ft, spec, c)) << spec.name;
            }
        }
    }
}

TEST(models, gen_is_deterministic_and_seeded) {
    auto make = [](uint64_t seed, const std::string& name) {
        synthetic_options o;
        o.seed = seed;
        o.progress = false;
        const auto path = test::scratch(name);
        write_synthetic_model(o, path);
        std::ifstream f(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    const auto a = make(7, "seed-a.gguf"), b = make(7, "seed-b.gguf"), c = make(8, "seed-c.gguf");
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // Weights have the requested spread: std of a large tensor within 2 % of 0.02.
    auto g = gguf_file::open(test::scratch("seed-a.gguf"));
    const auto* t = g->find_tensor("blk.0.ffn_up.weight");
    const float* w = reinterpret_cast<const float*>(t->data);
    double s = 0, ss = 0;
    for (uint64_t i = 0; i < t->n_elems; i++) {
        s += w[i];
        ss += double(w[i]) * w[i];
    }
    const double mean = s / double(t->n_elems), sd = std::sqrt(ss / double(t->n_elems) - mean * mean);
    EXPECT_NEAR(sd, 0.02, 0.0004);
    EXPECT_NEAR(mean, 0.0, 0.0005);
    EXPECT_EQ(reinterpret_cast<const float*>(g->find_tensor("blk.1.attn_norm.weight")->data)[5], 1.0f);
}

TEST(models, gen_with_real_vocab_adjusts_vocab_size) {
    synthetic_options o;
    o.vocab_path = test::shared_path("vocab/ggml-vocab-gpt-2.gguf");
    o.progress = false;
    const auto path = test::scratch("gen-gpt2vocab.gguf");
    write_synthetic_model(o, path);
    auto g = gguf_file::open(path);
    EXPECT_EQ(read_model_config(*g).n_vocab, 50257u);
    EXPECT_EQ(g->find_tensor("token_embd.weight")->dims[1], 50257u);
    EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
}

TEST(models, memory_model_counts_streamed_bytes) {
    auto g = gguf_file::open(test::shared_path("quant/tiny-llama-Q4_K_M.gguf"));
    const memory_model m = compute_memory_model(*g);
    const auto* emb = g->find_tensor("token_embd.weight");
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_EQ(m.streamed_bytes_per_token, m.weight_bytes - emb->n_bytes + emb->row_size());
    // 2 layers x 2 (K, V) x kv_dim 128 x 2 bytes
    EXPECT_EQ(m.kv_bytes_per_token, 2u * 2u * 128u * 2u);
    EXPECT_EQ(m.count_by_type.size(), 3u);
    EXPECT_EQ(m.count_by_type.at(dtype::q6_k), 3u);

    synthetic_options o;
    o.preset = "stories15m";  // tied embeddings: the table is the output matrix, streamed in full
    o.progress = false;
    write_synthetic_model(o, test::scratch("tied.gguf"));
    auto t = gguf_file::open(test::scratch("tied.gguf"));
    const memory_model mt = compute_memory_model(*t);
    EXPECT_TRUE(mt.tied_embeddings);
    EXPECT_EQ(mt.streamed_bytes_per_token, mt.weight_bytes);
}

namespace {

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

}  // namespace

TEST(models, llama2c_import_shared_classifier) {
    const auto out = test::scratch("s260k.gguf");
    const auto r = import_llama2c(test::shared_path("models/stories260K.bin"), out);
    EXPECT_TRUE(r.shared_classifier);
    auto g = gguf_file::open(out);
    const model_config c = read_model_config(*g);
    EXPECT_EQ(c.n_embd, 64u);
    EXPECT_EQ(c.n_layer, 5u);
    EXPECT_EQ(c.n_head, 8u);
    EXPECT_EQ(c.n_head_kv, 4u);
    EXPECT_EQ(c.n_ff, 172u);
    EXPECT_EQ(c.n_vocab, 512u);
    EXPECT_EQ(c.n_ctx_train, 512u);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_EQ(g->find_tensor("output.weight"), nullptr);
    const auto& toks = g->require("tokenizer.ggml.tokens");
    EXPECT_EQ(toks.string_at(0), "<0>");
    EXPECT_EQ(toks.string_at(511), "<511>");
    // First embedding value equals the first float after the 28-byte header.
    const auto raw = read_bytes(test::shared_path("models/stories260K.bin"));
    float first;
    std::memcpy(&first, raw.data() + 28, 4);
    EXPECT_EQ(reinterpret_cast<const float*>(g->find_tensor("token_embd.weight")->data)[0], first);
    // wq of layer 1 starts after embedding (512*64), rms_att (5*64) and layer 0's wq (64*64).
    float wq1;
    std::memcpy(&wq1, raw.data() + 28 + 4 * (512 * 64 + 5 * 64 + 64 * 64), 4);
    EXPECT_EQ(reinterpret_cast<const float*>(g->find_tensor("blk.1.attn_q.weight")->data)[0], wq1);
}

TEST(models, llama2c_import_separate_classifier_and_errors) {
    auto raw = read_bytes(test::shared_path("models/stories260K.bin"));
    // Separate-classifier variant: negative vocab_size and a wcls section appended.
    int32_t vocab;
    std::memcpy(&vocab, raw.data() + 20, 4);
    const int32_t neg = -vocab;
    std::memcpy(raw.data() + 20, &neg, 4);
    std::vector<float> wcls(size_t(512 * 64));
    for (size_t i = 0; i < wcls.size(); i++) wcls[i] = float(i % 97) * 0.001f;
    const auto* wb = reinterpret_cast<const uint8_t*>(wcls.data());
    raw.insert(raw.end(), wb, wb + wcls.size() * 4);
    const auto in = test::scratch("sep.bin"), out = test::scratch("sep.gguf");
    write_bytes(in, raw);
    const auto r = import_llama2c(in, out);
    EXPECT_FALSE(r.shared_classifier);
    auto g = gguf_file::open(out);
    const auto* o = g->find_tensor("output.weight");
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(reinterpret_cast<const float*>(o->data)[100], wcls[100]);

    raw.resize(raw.size() - 8);  // truncated
    write_bytes(in, raw);
    try {
        import_llama2c(in, out);
        FAIL() << "truncated checkpoint accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("implies"), std::string::npos) << e.what();
    }
    write_bytes(in, {1, 2, 3});
    EXPECT_THROW(import_llama2c(in, out), error);
}
