// Hyper-parameters of a decoder-only transformer, read from (and written to) GGUF `<arch>.*` metadata.
#pragma once

#include <cstdint>
#include <string>

namespace memtile {

class gguf_file;
class gguf_writer;

enum class rope_style { normal, neox };  // normal: rotate pairs (2i, 2i+1); neox: rotate (i, i + d/2)

struct model_config {
    std::string arch = "llama";  // general.architecture: llama, qwen2, phi3
    std::string name;            // general.name
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;  // <arch>.context_length
    uint32_t n_embd = 0;
    uint32_t n_layer = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t n_ff = 0;
    uint32_t head_dim = 0;  // <arch>.attention.key_length, default n_embd / n_head
    uint32_t n_rot = 0;     // <arch>.rope.dimension_count, default head_dim
    float rope_freq_base = 10000.0f;
    float norm_eps = 1e-5f;
    uint32_t expert_count = 0;  // 0: dense
    uint32_t expert_used_count = 0;
    bool tied_embeddings = false;  // no output.weight: the token embedding doubles as the output matrix
    bool has_rope_freqs = false;   // rope_freqs.weight present (Llama 3.1 frequency factors)
    rope_style rope = rope_style::normal;

    uint32_t q_dim() const { return n_head * head_dim; }
    uint32_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyper-parameters (errors name the file and key). Tensor-derived facts
// (tied_embeddings, has_rope_freqs, n_vocab when the key is absent) are filled from the tensor table.
model_config read_model_config(const gguf_file& g);
// Writes the `<arch>.*` keys llama.cpp expects for this architecture.
void write_model_config(gguf_writer& w, const model_config& c);
// Architectures the engine knows; an unknown one is an error listing these.
bool arch_supported(const std::string& arch);
std::string supported_archs();

}  // namespace memtile
