// memtile convert --from hf: a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer files) →
// one GGUF file that memtile and llama.cpp load.
#pragma once

#include <cstdint>
#include <string>

#include "quant/file-type.h"

namespace memtile {

struct hf_import_options {
    file_type type = file_type::f16;
    int threads = 0;  // 0: thread_pool::default_threads()
    bool progress = true;
    bool vocab_only = false;                // tokenizer metadata only, no tensors (config.json optional)
    std::string tokenizer_source = "auto";  // see hf_vocab_options::source
};

struct hf_import_result {
    std::string hf_arch, arch;  // "LlamaForCausalLM", "llama" (empty for a vocab-only file without config)
    std::string tokenizer_model, tokenizer_pre, tokenizer_source;
    size_t n_vocab = 0;
    uint32_t n_tensors = 0;
    uint64_t file_bytes = 0;
};

hf_import_result import_hf(const std::string& dir, const std::string& out_path, const hf_import_options& o = {});

// GGUF's llama layout rotates interleaved pairs (2i, 2i+1) of each head; Hugging Face's Llama rotates the halves
// (i, i + head_dim/2). The GGUF Q/K weight row `row` therefore holds Hugging Face row
// head * head_dim + (j even ? j/2 : j/2 + head_dim/2), where head = row / head_dim and j = row % head_dim.
uint64_t llama_qk_source_row(uint64_t row, uint32_t head_dim);

}  // namespace memtile
