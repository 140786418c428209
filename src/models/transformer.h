// Decoder-only transformer of the Llama family (llama, qwen2, phi3) on the CPU: weights bound from a
// GGUF file (checked against the architecture's tensor table), and the forward pass for a batch of tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/mapped-file.h"
#include "models/model-config.h"

namespace memtile {

class gguf_file;
class kv_cache;
class thread_pool;

// Operation classes of the forward pass, for profiling (bench --profile).
enum class op_class { embedding, matmul, attention, kv_store, norm, rope, elementwise, output };

// One operation of forward(): what it must move through memory and how long it took. Bytes are the minimum
// traffic of the operation: weights streamed, KV-cache rows read or written, f32 activations in and out.
struct op_event {
    op_class kind = op_class::matmul;
    int layer = -1;                  // -1 outside the transformer blocks
    dtype weight_type = dtype::f32;  // the weight's type for matmul and embedding
    uint64_t weight_bytes = 0, kv_read_bytes = 0, kv_write_bytes = 0, activation_bytes = 0;
    double ns = 0;  // wall time
};

// Receives one op_event per operation of forward_context::forward() once installed with set_observer(). Without
// an observer forward() takes no timestamps (one null test per operation). forward_batch() is not observed.
class forward_observer {
public:
    virtual ~forward_observer() = default;
    virtual void on_op(const op_event& e) = 0;
};

// --repack: whether the CPU kernels build their interleaved (x8) layouts at load. automatic: only when the
// weights are a plain file mapping whose pages can be returned once packed (not --no-mmap, --hugepages or
// --mlock, where the packed copy would add up to the file's size to resident memory); docs/cpu-log-s3-s6.md, session 5.
enum class repack_mode { off, on, automatic };

struct model_options {
    load_options load;  // mmap / no-mmap / mlock / prefault
    repack_mode repack = repack_mode::off;
    // Layers [0, cpu_layers) are computed by the CPU engine (--gpu-layers: the GPU runs the others and the output
    // from the file's bytes); only their matrices are repacked, so the GPU's share holds no packed host copy.
    uint32_t cpu_layers = UINT32_MAX;
    // With repack: the packed copies in one arena in decode order (cpu::packed_arena); false gives each its own
    // buffer, the layout before session 8 (an A/B switch for bench-decode-arena; results are the same bit for bit).
    bool packed_arena = true;
};

// The CLI spelling ("off", "on", "auto") and back; parse throws memtile::error on anything else.
repack_mode parse_repack_mode(const std::string& s);
const char* repack_mode_name(repack_mode m);

class transformer {
public:
    // pool: the caller's persistent thread pool, which builds the repacked layouts (null: the calling thread).
    static std::unique_ptr<transformer> load(const std::string& path, const model_options& o = {},
                                             thread_pool* pool = nullptr);
    static std::unique_ptr<transformer> from_gguf(std::shared_ptr<gguf_file> g, const model_options& o = {},
                                                  thread_pool* pool = nullptr);
    ~transformer();

    const model_config& config() const { return cfg_; }
    const gguf_file& file() const { return *file_; }
    std::shared_ptr<gguf_file> file_ptr() const { return file_; }
    // The bytes one decode step streams: every layer matrix and the output matrix, in the layouts the kernels
    // read (for bandwidth probes over the same pages).
    std::vector<std::span<const uint8_t>> streamed_weights() const;

    struct layer;

private:
    friend class forward_context;
    transformer() = default;
    std::shared_ptr<gguf_file> file_;
    model_config cfg_;
    cpu::weight_view tok_embd_;  // [n_embd, n_vocab]: rows gathered, never multiplied
    std::vector<float> output_norm_;
    std::unique_ptr<cpu::prepared_weight> output_;  // [n_embd, n_vocab] (the token embedding when tied)
    std::vector<float> rope_factors_;               // [n_rot / 2] or empty
    std::vector<layer> layers_;
};

// Per-sequence state: the KV cache and scratch buffers; one forward pass at a time.
class forward_context {
public:
    forward_context(const transformer& m, uint32_t n_ctx, dtype kv_type, thread_pool& pool);
    ~forward_context();

    // Processes tokens at positions used()..used()+n-1 and returns the logits of the last one ([n_vocab]).
    // With all_logits, logits() holds [n_tok, n_vocab]. Throws on context overflow or an unknown token id.
    std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false);
    std::span<const float> logits() const { return logits_; }
    // Split execution (--gpu-layers): embeds tokens and runs only layers [0, n_layers), returning the hidden
    // states [n_tok, n_embd] f32 (valid until the next call) for another backend to continue from. Those
    // layers' KV cache is this context's, and used() advances as in forward().
    std::span<const float> forward_hidden(std::span<const int32_t> tokens, uint32_t n_layers);

    uint32_t used() const;
    uint32_t n_ctx() const;
    void truncate(uint32_t n_tokens);  // forget positions >= n_tokens (keeps the common prefix)
    const kv_cache& cache() const { return *kv_; }
    void set_observer(forward_observer* o) { obs_ = o; }  // nullptr: off (default)

    // Continuous batching: appends tokens[i] to ctxs[i] (each at its own position) in one pass, so every weight
    // matrix is read once for all sequences (matmul with n_tok = ctxs.size()) while attention stays per sequence.
    // Afterwards ctxs[i]->logits() holds that sequence's [n_vocab] logits, identical to ctxs[i]->forward() of
    // the same token. All contexts must belong to the same model and be distinct; the pool of ctxs[0] is used.
    static void forward_batch(std::span<forward_context* const> ctxs, std::span<const int32_t> tokens);

    // Prompts run in slices of at most this many tokens: a slice's activations ([n, n_ff] f32 for the feed-forward,
    // [n, n_embd] for the rest) are what a forward pass holds besides the weights and the KV cache. The slice is
    // the largest power of two (32 to 512) whose activations stay within 1 % of the model file plus the KV cache,
    // so a long prompt needs no more memory than a short one (a 4,056-token prompt in one pass took Llama-3.2-1B
    // Q4_K_M's peak RSS to 1.53x file + KV cache; in slices of 256 to 1.07x, of 128 to 1.056x). Small slices cost
    // little: each re-reads the weights once (pp512 on Zen 4, 2 threads, slices of 64 to 4,096: 163-178 tok/s,
    // within the runs' spread), and large models get large ones (Llama-3.1-8B: 256).
    size_t max_batch() const { return max_batch_; }

private:
    // Throws on an empty list, a context overflow or an id outside the vocabulary (before anything is computed).
    void check_tokens(std::span<const int32_t> tokens) const;
    // Validates tokens, embeds them into x_ and runs layers [0, n_layers); advances used().
    void embed_and_run(std::span<const int32_t> tokens, uint32_t n_layers);
    // The logits of the last n_out of the n tokens in x_ into dst ([n_out, n_vocab]).
    void output_logits(int64_t n, int64_t n_out, float* dst);

    const transformer& m_;
    thread_pool& pool_;
    std::unique_ptr<kv_cache> kv_;
    std::vector<float> x_, xn_, q_, k_, v_, qkv_, att_, gate_, up_, logits_;
    size_t max_batch_ = 32;
    std::vector<float> hidden_;  // forward_hidden's [n_tok, n_embd] when the tokens run in several slices
    forward_observer* obs_ = nullptr;
};

}  // namespace memtile
