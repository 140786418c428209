// Tokenizer conformance against llama.cpp's vocab test vectors in shared/vocab: every input of
// ggml-vocab-<name>.gguf.inp must tokenize (without BOS) to the ids on the matching line of the .out file, and
// detokenize back to the input.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using memtile::token_id;

std::string vocab_path(const std::string& name) {
    return std::string(MEMTILE_SHARED_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
}

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Inputs are separated by "\n__ggml_vocab_test__\n"; the file ends with a separator.
std::vector<std::string> read_inputs(const std::string& path) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::string all = read_all(path);
    std::vector<std::string> inputs;
    size_t pos = 0;
    while (pos < all.size()) {
        size_t at = all.find(sep, pos);
        if (at == std::string::npos) {
            inputs.push_back(all.substr(pos));
            break;
        }
        inputs.push_back(all.substr(pos, at - pos));
        pos = at + sep.size();
    }
    return inputs;
}

std::vector<std::vector<token_id>> read_outputs(const std::string& path) {
    std::vector<std::vector<token_id>> outs;
    std::istringstream in(read_all(path));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::vector<token_id> ids;
        token_id id;
        while (ls >> id) ids.push_back(id);
        outs.push_back(std::move(ids));
    }
    return outs;
}

std::string escaped(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else if (c == '\r')
            out += "\\r";
        else if (c < 0x20)
            out += fmt::format("\\x{:02x}", c);
        else
            out += static_cast<char>(c);
    }
    return out;
}

class vocab_vectors : public ::testing::TestWithParam<std::string> {};

TEST_P(vocab_vectors, tokenize_and_detokenize_match) {
    const std::string path = vocab_path(GetParam());
    auto tok = memtile::tokenizer::open(path);
    auto inputs = read_inputs(path + ".inp");
    auto outputs = read_outputs(path + ".out");
    ASSERT_EQ(inputs.size(), outputs.size()) << "inputs and expected lines differ in number for " << path;
    ASSERT_GT(inputs.size(), 10u);

    memtile::tokenize_options opts;
    opts.add_special = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
        std::vector<token_id> got = tok->tokenize(inputs[i], opts);
        EXPECT_EQ(got, outputs[i]) << "input #" << i << " \"" << escaped(inputs[i]) << "\" ("
                                   << ::testing::PrintToString(inputs[i]) << ")";
        std::string back = tok->detokenize(got);
        EXPECT_EQ(back, inputs[i]) << "detokenize of input #" << i << " \"" << escaped(inputs[i]) << "\"";
    }
}

INSTANTIATE_TEST_SUITE_P(shared_vocab, vocab_vectors, ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

TEST(tokenizer, bert_is_rejected_with_clear_error) {
    try {
        memtile::tokenizer::open(vocab_path("bert-bge"));
        FAIL() << "loading a WPM (bert) vocabulary should fail";
    } catch (const memtile::error& e) {
        EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 'bert'"), std::string::npos) << e.what();
    }
}

}  // namespace
