// Tokenizer behaviour beyond the conformance vectors: special tokens, BOS/EOS, end-of-generation ids and the
// streaming decoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using memtile::token_id;
using memtile::tokenizer;

std::shared_ptr<const tokenizer> load(const std::string& name) {
    return tokenizer::open(std::string(MEMTILE_SHARED_DIR) + "/vocab/ggml-vocab-" + name + ".gguf");
}

bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

TEST(tokenizer, spm_metadata_and_bos) {
    auto tok = load("llama-spm");
    EXPECT_EQ(tok->model(), memtile::tokenizer_model::spm);
    EXPECT_EQ(tok->n_vocab(), 32000u);
    EXPECT_EQ(tok->bos(), 1);
    EXPECT_EQ(tok->eos(), 2);
    EXPECT_EQ(tok->unk(), 0);
    EXPECT_TRUE(tok->add_bos());
    EXPECT_TRUE(tok->is_eog(2));
    auto ids = tok->tokenize("Hello");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(tok->detokenize(ids), "Hello");
    EXPECT_EQ(tok->detokenize(ids, true), "<s>Hello");
    EXPECT_TRUE(tok->tokenize("", {}).size() == 1);
    EXPECT_TRUE(tok->tokenize("", {.add_special = false}).empty());
}

TEST(tokenizer, spm_byte_fallback) {
    auto tok = load("llama-spm");
    // U+10FFFF has no piece: four <0xNN> byte tokens after the "▁" piece.
    auto ids = tok->tokenize("\xF4\x8F\xBF\xBF", {.add_special = false});
    ASSERT_EQ(ids.size(), 5u);
    for (size_t i = 1; i < ids.size(); ++i) EXPECT_EQ(tok->type(ids[i]), memtile::token_type::byte);
    EXPECT_EQ(tok->detokenize(ids), "\xF4\x8F\xBF\xBF");
}

TEST(tokenizer, special_tokens_only_parsed_when_asked) {
    auto tok = load("gpt-2");
    const std::string text = "a<|endoftext|>b";
    auto plain = tok->tokenize(text, {.add_special = false});
    auto parsed = tok->tokenize(text, {.add_special = false, .parse_special = true});
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
    ASSERT_EQ(parsed.size(), 3u);
    EXPECT_EQ(parsed[1], 50256);
    EXPECT_EQ(tok->detokenize(plain), text);
    EXPECT_EQ(tok->detokenize(parsed), "ab");
    EXPECT_EQ(tok->detokenize(parsed, true), text);
    EXPECT_TRUE(tok->is_eog(50256));
    EXPECT_FALSE(tok->add_bos());
}

TEST(tokenizer, phi3_chat_tokens_are_eog) {
    auto tok = load("phi-3");
    token_id end = tok->find_token("<|end|>");
    ASSERT_NE(end, memtile::k_no_token);
    EXPECT_TRUE(tok->is_eog(end));
    EXPECT_TRUE(tok->is_eog(tok->eos()));
    EXPECT_EQ(tok->eot(), end);
    auto ids = tok->tokenize("<|user|>\nHi<|end|>", {.add_special = false, .parse_special = true});
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids.front(), tok->find_token("<|user|>"));
    EXPECT_EQ(ids.back(), end);
}

// Streams `ids` one at a time: every chunk must be valid UTF-8 and the chunks must add up to detokenize().
void check_stream(const tokenizer& tok, const std::vector<token_id>& ids, size_t* held_back_count) {
    memtile::stream_decoder dec(tok);
    std::string all;
    for (token_id id : ids) {
        std::string chunk = dec.push(id);
        EXPECT_TRUE(valid_utf8(chunk)) << "chunk after token " << id << " splits a character";
        if (chunk.empty()) ++*held_back_count;
        all += chunk;
    }
    all += dec.flush();
    EXPECT_EQ(all, tok.detokenize(ids));
}

TEST(stream_decoder, holds_back_split_characters_spm) {
    auto tok = load("llama-spm");
    const std::string text = "llama 🦙 in Bulgarian is лама; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \xF4\x8F\xBF\xBF!";
    auto ids = tok->tokenize(text);
    size_t held = 0;
    check_stream(*tok, ids, &held);
    EXPECT_GE(held, 3u) << "the emoji is four byte tokens; three pushes must emit nothing";
    memtile::stream_decoder dec(*tok);
    std::string all;
    for (token_id id : ids) all += dec.push(id);
    EXPECT_EQ(all + dec.flush(), text);
}

TEST(stream_decoder, holds_back_split_characters_bpe) {
    auto tok = load("gpt-2");
    const std::string text = "naïve 🦙 façade — 東京 𝔘";
    auto ids = tok->tokenize(text);
    size_t held = 0;
    check_stream(*tok, ids, &held);
    EXPECT_GT(held, 0u);
}

TEST(stream_decoder, passes_invalid_bytes_through) {
    auto tok = load("llama-spm");
    memtile::stream_decoder dec(*tok);
    token_id cont = tok->find_token("<0x80>");
    token_id lead = tok->find_token("<0xE6>");
    EXPECT_EQ(dec.push(cont), "\x80");  // a stray continuation byte can never complete
    EXPECT_EQ(dec.push(lead), "");      // an incomplete lead byte is held
    EXPECT_EQ(dec.flush(), "\xE6");
}

std::vector<std::string> split(const std::string& pre, const std::string& text) {
    const auto* patterns = memtile::tokenizer_detail::pre_tokenizer_patterns(pre);
    if (!patterns) throw std::runtime_error("no patterns for " + pre);
    memtile::tokenizer_detail::pre_tokenizer p(*patterns);
    std::vector<std::string_view> pieces;
    p.split(text, pieces);
    return {pieces.begin(), pieces.end()};
}

TEST(pre_tokenizer, every_named_pre_tokenizer_compiles_and_loses_nothing) {
    const std::string text = "Hello, World!  It's 2024-12345 \u00c4pfel\t\n\n  \u6771\u4eac\u00bd \xff\xfe end ";
    for (const char* pre : {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                            "starcoder", "refact", "mpt"}) {
        std::string joined;
        for (const auto& piece : split(pre, text)) {
            EXPECT_FALSE(piece.empty()) << pre;
            joined += piece;
        }
        EXPECT_EQ(joined, text) << pre;
    }
}

TEST(pre_tokenizer, model_specific_splits) {
    using v = std::vector<std::string>;
    EXPECT_EQ(split("gpt-2", "Hello world  12345"), (v{"Hello", " world", " ", " 12345"}));
    EXPECT_EQ(split("llama-bpe", "Hello world  12345 DON'T"),
              (v{"Hello", " world", " ", " ", "123", "45", " DON", "'T"}));
    EXPECT_EQ(split("qwen2", "x 123"), (v{"x", " ", "1", "2", "3"}));
    EXPECT_EQ(split("starcoder", "a 12"), (v{"a", " ", "1", "2"}));
    EXPECT_EQ(split("deepseek-coder", "int x=12;\n"), (v{"int", " x", "=", "1", "2", ";", "\n"}));
    EXPECT_EQ(split("falcon", "x+=1234"), (v{"x", "+=", "123", "4"}));
}

}  // namespace
