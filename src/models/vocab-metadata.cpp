#include "models/vocab-metadata.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf-file.h"
#include "gguf/gguf-writer.h"

namespace memtile {

namespace {
enum token_type : int32_t { normal = 1, unknown = 2, control = 3, byte = 6 };
}

void write_placeholder_vocab(gguf_writer& w, uint32_t n_vocab, bool byte_tokens) {
    std::vector<std::string> tokens(n_vocab);
    std::vector<float> scores(n_vocab, 0.0f);
    std::vector<int32_t> types(n_vocab, normal);
    const bool bytes = byte_tokens && n_vocab > 259;
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (bytes && i < 3) {
            const char* special[] = {"<unk>", "<s>", "</s>"};
            tokens[i] = special[i];
            types[i] = i == 0 ? unknown : control;
        } else if (bytes && i < 259) {
            tokens[i] = fmt::format("<0x{:02X}>", i - 3);
            types[i] = byte;
        } else {
            tokens[i] = fmt::format("<{}>", i);
            scores[i] = -float(i);
        }
    }
    w.set("tokenizer.ggml.model", gguf_value::string("llama"));
    w.set("tokenizer.ggml.tokens", gguf_value::string_array(tokens));
    w.set("tokenizer.ggml.scores", gguf_value::f32_array(scores));
    w.set("tokenizer.ggml.token_type", gguf_value::i32_array(types));
    if (bytes) {
        w.set("tokenizer.ggml.unknown_token_id", gguf_value::u32(0));
        w.set("tokenizer.ggml.bos_token_id", gguf_value::u32(1));
        w.set("tokenizer.ggml.eos_token_id", gguf_value::u32(2));
    } else {
        // llama2.c checkpoints use id 1 as BOS and 2 as EOS (sentencepiece convention).
        w.set("tokenizer.ggml.bos_token_id", gguf_value::u32(1));
        w.set("tokenizer.ggml.eos_token_id", gguf_value::u32(2));
    }
    w.set("tokenizer.ggml.add_bos_token", gguf_value::boolean(true));
    w.set("tokenizer.ggml.add_eos_token", gguf_value::boolean(false));
}

uint32_t copy_tokenizer_metadata(gguf_writer& w, const gguf_file& vocab) {
    const auto* toks = vocab.find("tokenizer.ggml.tokens");
    if (!toks || !toks->is_array() || toks->array_size() == 0)
        fail("model", "{}: no tokenizer.ggml.tokens array, not a vocabulary file", vocab.path());
    for (const auto& [k, v] : vocab.metadata())
        if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
    return static_cast<uint32_t>(toks->array_size());
}

}  // namespace memtile
