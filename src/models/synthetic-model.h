// Synthetic models with random weights and the exact shapes of a real architecture: the benchmark
// workload of the project. Weights approximately N(0, 0.02²) (seeded; rng::normal_fast), norms 1, biases like weights;
// written as a streamed GGUF (memory use is bounded by one chunk of rows, not the file size).
#pragma once

#include <cstdint>
#include <string>

#include "quant/file-type.h"

namespace memtile {

struct synthetic_options {
    std::string preset = "tiny";
    file_type type = file_type::all_f32;
    std::string vocab_path;  // optional GGUF whose tokenizer is embedded (n_vocab follows it)
    uint64_t seed = 42;
    int threads = 0;  // 0: default thread count
    bool progress = true;
};

struct synthetic_result {
    uint64_t file_bytes = 0;
    uint32_t n_tensors = 0;
};

synthetic_result write_synthetic_model(const synthetic_options& o, const std::string& out_path);

}  // namespace memtile
