// Hugging Face config.json → memtile model_config (GGUF `<arch>.*` hyper-parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model-config.h"

namespace memtile {

struct hf_config {
    std::string hf_arch;     // architectures[0], e.g. "LlamaForCausalLM"
    std::string model_type;  // "llama", "mistral", "qwen2", "phi3"
    model_config cfg;        // arch is the GGUF architecture: llama, qwen2 or phi3
    bool tie_word_embeddings = false;
    std::vector<float> rope_factors;     // [n_rot / 2] Llama 3.1 frequency factors (rope_freqs.weight), or empty
    uint32_t rope_original_ctx = 0;      // phi3: original_max_position_embeddings (0: absent)
    std::vector<int64_t> eos_token_ids;  // config.json eos_token_id (number or list)
    int64_t bos_token_id = -1;
};

// Reads DIR/config.json. Unsupported architectures or RoPE scaling types are errors naming them.
hf_config read_hf_config(const std::string& dir);
// GGUF architecture for a Hugging Face architecture name, or "" when unsupported.
std::string gguf_arch_for(const std::string& hf_arch);

}  // namespace memtile
