// Tokenizer conversion from real Hugging Face files (shared/hf) against llama.cpp's own GGUF conversions of the
// same tokenizers (shared/vocab): memtile's tokenizer must give the same ids on llama.cpp's test inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "convert/hf-import.h"
#include "convert/hf-tokenizer.h"
#include "core/error.h"
#include "gguf/gguf-file.h"
#include "support/test-paths.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace memtile;
namespace fs = std::filesystem;

std::vector<std::string> read_inputs(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    for (size_t pos = 0; pos < all.size();) {
        const size_t at = all.find(sep, pos);
        out.push_back(all.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
        if (at == std::string::npos) break;
        pos = at + sep.size();
    }
    return out;
}

struct tok_case {
    std::string hf_dir;  // under shared/hf
    std::string source;  // tokenizer source option
    std::string vocab;   // shared/vocab/ggml-vocab-<vocab>.gguf
    std::string name;
};

class convert_tokenizer : public ::testing::TestWithParam<tok_case> {};

TEST_P(convert_tokenizer, same_ids_as_llama_cpp_conversion) {
    const auto p = GetParam();
    const std::string out = test::scratch("vocab-" + p.name + ".gguf");
    hf_import_options o;
    o.vocab_only = true;
    o.tokenizer_source = p.source;
    o.progress = false;
    import_hf(test::shared_path("hf/" + p.hf_dir), out, o);
    auto ours_file = gguf_file::open(out);
    auto ref_file = gguf_file::open(test::shared_path("vocab/ggml-vocab-" + p.vocab + ".gguf"));
    auto ours = tokenizer::from_gguf(*ours_file);
    auto ref = tokenizer::from_gguf(*ref_file);

    EXPECT_EQ(ours->model_name(), ref->model_name());
    EXPECT_EQ(ours->pre_name(), ref->pre_name());
    ASSERT_EQ(ours->n_vocab(), ref->n_vocab());
    size_t text_diff = 0;
    for (size_t i = 0; i < ref->n_vocab(); i++) {
        const auto id = token_id(i);
        if (ref->token_text(id).rfind("[PAD", 0) == 0) continue;  // padding rows: names are not meaningful
        if (ours->token_text(id) != ref->token_text(id)) text_diff++;
    }
    EXPECT_EQ(text_diff, 0u);
    EXPECT_EQ(ours->bos(), ref->bos());
    EXPECT_EQ(ours->eos(), ref->eos());
    EXPECT_EQ(ours->add_bos(), ref->add_bos());
    EXPECT_EQ(ours->add_eos(), ref->add_eos());
    if (ours->model() == tokenizer_model::bpe) {
        const auto& a = ours_file->require("tokenizer.ggml.merges");
        const auto& b = ref_file->require("tokenizer.ggml.merges");
        EXPECT_EQ(a, b);
    }

    auto inputs = read_inputs(test::shared_path("vocab/ggml-vocab-" + p.vocab + ".gguf.inp"));
    ASSERT_GT(inputs.size(), 10u);
    for (bool parse_special : {false, true}) {
        tokenize_options opts{false, parse_special};
        for (size_t i = 0; i < inputs.size(); i++)
            EXPECT_EQ(ours->tokenize(inputs[i], opts), ref->tokenize(inputs[i], opts))
                << "input #" << i << " parse_special " << parse_special;
        for (const char* s : {"<s>Hello</s> world", "<|endoftext|> <|user|>\nhi<|end|>", "  spaces   and\ttabs"})
            EXPECT_EQ(ours->tokenize(s, opts), ref->tokenize(s, opts)) << s;
    }
}

INSTANTIATE_TEST_SUITE_P(
    shared_hf, convert_tokenizer,
    ::testing::Values(tok_case{"tinyllama-1.1b-chat", "tokenizer.json", "llama-spm", "tinyllama_json"},
                      tok_case{"tinyllama-1.1b-chat", "tokenizer.model", "llama-spm", "tinyllama_model"},
                      tok_case{"gpt2", "tokenizer.json", "gpt-2", "gpt2_json"},
                      tok_case{"gpt2", "vocab.json", "gpt-2", "gpt2_vocab_merges"},
                      tok_case{"phi3-mini-4k-instruct", "tokenizer.json", "phi-3", "phi3_json"}),
    [](const auto& info) { return info.param.name; });

TEST(convert_tokenizer_meta, phi3_special_tokens_and_eot) {
    hf_vocab_options o;
    o.n_vocab = 32064;
    const auto v = read_hf_vocab(test::shared_path("hf/phi3-mini-4k-instruct"), o);
    EXPECT_EQ(v.model, "llama");
    EXPECT_EQ(v.tokens.size(), 32064u);
    EXPECT_EQ(v.bos, 1);
    EXPECT_EQ(v.eos, 32000);
    EXPECT_EQ(v.pad, 32000);
    EXPECT_EQ(v.eot, 32007);  // <|end|>, an extra eos id of generation_config.json
    EXPECT_EQ(v.types[32010], 3);
    EXPECT_EQ(v.types[2], 4);    // </s> is a non-special added token in tokenizer.json
    EXPECT_EQ(v.types[100], 6);  // <0x61>
    EXPECT_EQ(v.tokens[32063], "[PAD32063]");
    EXPECT_NE(v.chat_template.find("<|user|>"), std::string::npos);
}

TEST(convert_tokenizer_meta, sentencepiece_model_matches_tokenizer_json_pieces) {
    const auto sp = read_spm_model(test::shared_path("hf/tinyllama-1.1b-chat/tokenizer.model"));
    ASSERT_EQ(sp.pieces.size(), 32000u);
    EXPECT_EQ(sp.pieces[1], "<s>");
    EXPECT_EQ(sp.types[0], 2);
    EXPECT_EQ(sp.types[3], 6);
    EXPECT_EQ(sp.pieces[260], "▁t");
    EXPECT_FLOAT_EQ(sp.scores[260], -1.0f);
    EXPECT_TRUE(sp.add_dummy_prefix);
    // Corrupt protobuf: a length running past the end.
    const std::string bad = test::scratch("bad.model");
    std::ofstream(bad, std::ios::binary) << std::string("\x0a\x7f\x0a\x01", 4);
    try {
        read_spm_model(bad);
        FAIL();
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("malformed sentencepiece"), std::string::npos) << e.what();
    }
}

TEST(convert_tokenizer_meta, llama3_config_chooses_llama_bpe_and_eot) {
    // A Llama 3 style folder: byte-level BPE files of GPT-2's layout, model_type llama, extra eos id <|eot_id|>.
    const fs::path dir = test::scratch_dir() / "llama3-tok";
    fs::create_directories(dir);
    std::ofstream(dir / "vocab.json") << R"({"a": 0, "b": 1, "ab": 2})";
    std::ofstream(dir / "merges.txt") << "#version: 0.2\na b\n";
    std::ofstream(dir / "added_tokens.json") << R"({"<|begin_of_text|>": 3, "<|end_of_text|>": 4, "<|eot_id|>": 5})";
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": true})";
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [4, 5]})";
    hf_vocab_options o;
    o.model_type = "llama";
    const auto v = read_hf_vocab(dir.string(), o);
    EXPECT_EQ(v.model, "gpt2");
    EXPECT_EQ(v.pre, "llama-bpe");
    EXPECT_EQ(v.bos, 3);
    EXPECT_EQ(v.eos, 4);
    EXPECT_EQ(v.eot, 5);
    EXPECT_EQ(v.add_bos, 1);
    EXPECT_EQ(v.merges, (std::vector<std::string>{"a b"}));
}

}  // namespace
