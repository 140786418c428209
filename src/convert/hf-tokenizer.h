// Hugging Face tokenizer files → GGUF `tokenizer.ggml.*` metadata.
//
// Sources, in order of preference (or as forced by hf_vocab_options::source):
//   - tokenizer.json with a BPE model: byte-level BPE (GPT-2, Llama 3, Qwen2) → model "gpt2" with merges and a
//     pre-tokenizer name; SentencePiece-style BPE (▁ for spaces, <0xNN> byte fallback: Llama 2, TinyLlama,
//     Mistral, Phi-3) → model "llama" with scores derived from the merge ranks;
//   - vocab.json + merges.txt (+ added_tokens.json): byte-level BPE;
//   - tokenizer.model: a SentencePiece ModelProto (pieces with scores and types) → model "llama".
// tokenizer_config.json supplies the chat template, the bos/eos/unk/pad texts, add_bos/add_eos and added tokens;
// generation_config.json (or config.json) supplies the eos ids, the extra ones becoming eot/eom by their text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memtile {

class gguf_writer;

struct hf_vocab {
    std::string model;   // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
    std::string pre;     // tokenizer.ggml.pre: "default", "gpt-2", "llama-bpe", "qwen2"
    std::string source;  // the file the vocabulary came from
    std::vector<std::string> tokens;
    std::vector<float> scores;   // empty for gpt2
    std::vector<int32_t> types;  // token_type values (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)
    std::vector<std::string> merges;  // "left right", rank order (gpt2 only)
    int64_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
    int add_bos = -1, add_eos = -1;  // -1: not stated by the checkpoint
    bool add_space_prefix = true;    // SentencePiece only
    std::string chat_template;
};

struct hf_vocab_options {
    std::string source = "auto";          // auto, tokenizer.json, vocab.json, tokenizer.model
    std::string model_type;               // config.json model_type, helps choose the pre-tokenizer ("" when unknown)
    uint32_t n_vocab = 0;                 // pad with [PADn] tokens up to this size (the embedding rows); 0: no padding
    std::vector<int64_t> config_eos_ids;  // config.json eos_token_id
};

hf_vocab read_hf_vocab(const std::string& dir, const hf_vocab_options& o = {});
void write_hf_vocab(gguf_writer& w, const hf_vocab& v);

// Parses a SentencePiece tokenizer.model: pieces, scores and types in id order, and the trainer's special ids.
struct spm_model {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int32_t> types;
    int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
    bool add_dummy_prefix = true;
};
spm_model read_spm_model(const std::string& path);

}  // namespace memtile
