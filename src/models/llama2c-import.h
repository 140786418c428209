// Import of llama2.c checkpoints (Karpathy's legacy "version 0" format: a 7 x int32 header, then f32
// weights in a fixed order; a negative vocab_size means the classifier is stored separately).
#pragma once

#include <string>

namespace memtile {

struct llama2c_import_result {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    bool shared_classifier;
};

// Writes a GGUF (arch llama, F32) with a placeholder vocabulary "<0>".."<N-1>" (no tokenizer is stored in
// the checkpoint). Throws on truncated or inconsistent files.
llama2c_import_result import_llama2c(const std::string& in_path, const std::string& out_path);

}  // namespace memtile
