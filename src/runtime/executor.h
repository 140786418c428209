// One sequence of a model on one compute backend: the interface run, chat and bench drive, implemented by the
// CPU engine (transformer + forward_context + thread pool) and the CUDA decoder. The choice is made once, at
// open(), from --device; a backend that is not compiled in or has no usable device fails there, naming why.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model-config.h"
#include "models/transformer.h"

namespace memtile {

class gguf_file;
struct sampling_draw;

struct executor_options {
    std::string device = "cpu";  // "cpu" or "cuda"
    uint32_t n_ctx = 0;          // positions of the KV cache; 0: min(training context, 4096)
    dtype kv_type = dtype::f16;  // CPU KV cache; the CUDA cache is f16 (f32 is refused there)
    int threads = 0;             // CPU threads; 0: the length of cpus, else thread_pool::default_threads()
    std::vector<int> cpus;       // CPU pinning, at least `threads` entries (empty: none)
    model_options model;         // memory mode and repacking of the weights
    // With device cuda: how many of the last layers (and the output) run on the GPU; the CPU runs the others
    // (for models that do not fit in GPU memory). -1 or >= n_layer: all; 0: none (the CPU engine alone).
    int gpu_layers = -1;
    // With device cuda: copy the logits back and sample on the host (the reference path) instead of on the GPU.
    bool host_sampling = false;
};

// The CPU thread count o asks for (validated against o.cpus).
int executor_threads(const executor_options& o);
// The checks of the CPU engine's forward(), for backends that have none of their own: at least one token, room
// in the context, ids inside the vocabulary. Throws memtile::error naming the problem.
void check_append(const model_config& c, uint32_t used, uint32_t n_ctx, std::span<const int32_t> tokens);

// Optional capability of a GPU executor: the logits stay on the device and the draw is done there, so a decode
// step returns one token id instead of [n_vocab] floats. memtile::sampler stays the reference and the fallback
// (the CPU engine, --gpu-layers, --host-sampling).
class device_sampling {
public:
    virtual ~device_sampling() = default;
    // As executor::forward(), but the logits stay on the device.
    virtual void append(std::span<const int32_t> tokens) = 0;
    // The token sampler::sample() would draw from those logits; d from sampler::next_draw().
    virtual int32_t sample(const sampling_draw& d) = 0;
};

class executor {
public:
    static std::unique_ptr<executor> open(const std::string& path, const executor_options& o);
    virtual ~executor() = default;

    virtual const model_config& config() const = 0;
    virtual const gguf_file& file() const = 0;  // metadata: tokenizer, chat template, file type
    // Appends tokens at positions used().. and returns the logits of the last one ([n_vocab], valid until the
    // next call). Throws on context overflow or a token id outside the vocabulary, naming it.
    virtual std::span<const float> forward(std::span<const int32_t> tokens) = 0;
    virtual uint32_t used() const = 0;
    virtual uint32_t n_ctx() const = 0;
    virtual void truncate(uint32_t n_tokens) = 0;  // forget positions >= n_tokens
    virtual std::string device() const = 0;        // "cpu", "cuda"
    virtual std::string describe() const = 0;      // one line: kernels and threads, or the GPU and its memory
    virtual int threads() const = 0;               // CPU threads in use (0 for a GPU executor)
    // The device-sampling capability, or null (the host samples the logits forward() returns).
    virtual device_sampling* device_sampler() { return nullptr; }
};

}  // namespace memtile
