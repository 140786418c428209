#include "runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>

#include "backends/cpu/cpu-isa.h"
#include "backends/cuda/cuda-backend.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"

namespace memtile {
namespace {

uint32_t context_size(uint32_t requested, uint32_t n_ctx_train) {
    return requested ? requested : std::min<uint32_t>(n_ctx_train, 4096);
}

class cpu_executor final : public executor {
public:
    cpu_executor(const std::string& path, const executor_options& o)
        : pool_(executor_threads(o), o.cpus),
          model_(transformer::load(path, o.model, &pool_)),
          ctx_(*model_, context_size(o.n_ctx, model_->config().n_ctx_train), o.kv_type, pool_) {}

    const model_config& config() const override { return model_->config(); }
    const gguf_file& file() const override { return model_->file(); }
    std::span<const float> forward(std::span<const int32_t> tokens) override { return ctx_.forward(tokens); }
    uint32_t used() const override { return ctx_.used(); }
    uint32_t n_ctx() const override { return ctx_.n_ctx(); }
    void truncate(uint32_t n) override { ctx_.truncate(n); }
    std::string device() const override { return "cpu"; }
    std::string describe() const override {
        return fmt::format("cpu: {} kernels, {} thread{}", cpu::isa_name(cpu::active_isa()), pool_.size(),
                           pool_.size() == 1 ? "" : "s");
    }
    int threads() const override { return pool_.size(); }

private:
    thread_pool pool_;  // before the model: the load's repacking runs on it
    std::unique_ptr<transformer> model_;
    forward_context ctx_;
};

class cuda_executor final : public executor, public device_sampling {
public:
    cuda_executor(const std::string& path, const executor_options& o) : host_sampling_(o.host_sampling) {
        cuda::require_device();
        if (o.kv_type != dtype::f16)
            fail("cuda", "the CUDA backend keeps its KV cache in f16 (--kv-type f32 is CPU only)");
        file_ = gguf_file::open(path, o.model.load);
        cfg_ = read_model_config(*file_);
        dec_ = cuda::decoder::load(file_, context_size(o.n_ctx, cfg_.n_ctx_train));
        n_ctx_ = context_size(o.n_ctx, cfg_.n_ctx_train);
    }

    const model_config& config() const override { return cfg_; }
    const gguf_file& file() const override { return *file_; }
    std::span<const float> forward(std::span<const int32_t> tokens) override {
        check_append(cfg_, dec_->used(), n_ctx_, tokens);
        // Several tokens (a prompt): the tensor-core prefill pass; one token: the decode step's CUDA graph.
        return tokens.size() > 1 ? dec_->forward_prefill(tokens) : dec_->forward(tokens[0]);
    }
    uint32_t used() const override { return dec_->used(); }
    uint32_t n_ctx() const override { return n_ctx_; }
    void truncate(uint32_t n) override { dec_->truncate(n); }
    std::string device() const override { return "cuda"; }
    std::string describe() const override { return "cuda: " + cuda::device_description() + "; " + dec_->summary(); }
    int threads() const override { return 0; }
    device_sampling* device_sampler() override { return host_sampling_ ? nullptr : this; }
    void append(std::span<const int32_t> tokens) override {
        check_append(cfg_, dec_->used(), n_ctx_, tokens);
        dec_->append(tokens);
    }
    int32_t sample(const sampling_draw& d) override { return dec_->sample(d); }

private:
    bool host_sampling_ = false;
    std::shared_ptr<gguf_file> file_;
    model_config cfg_;
    std::unique_ptr<cuda::decoder> dec_;
    uint32_t n_ctx_ = 0;
};

// --gpu-layers: the CPU engine embeds the tokens and runs the first layers (its KV cache, its threads), the GPU
// continues from each token's hidden state through the remaining layers and the output. The prompt is one CPU
// batch, then one GPU step per token.
class split_executor final : public executor {
    static model_options cpu_share(model_options m, uint32_t cpu_layers) {
        m.cpu_layers = cpu_layers;
        return m;
    }

public:
    split_executor(const std::string& path, const executor_options& o, uint32_t cpu_layers)
        : pool_(executor_threads(o), o.cpus),
          model_(transformer::load(path, cpu_share(o.model, cpu_layers), &pool_)),
          ctx_(*model_, context_size(o.n_ctx, model_->config().n_ctx_train), o.kv_type, pool_),
          cpu_layers_(cpu_layers) {
        cuda::require_device();
        dec_ = cuda::decoder::load(model_->file_ptr(), ctx_.n_ctx(), cpu_layers);
    }

    const model_config& config() const override { return model_->config(); }
    const gguf_file& file() const override { return model_->file(); }
    std::span<const float> forward(std::span<const int32_t> tokens) override {
        check_append(config(), used(), n_ctx(), tokens);
        const size_t E = config().n_embd;
        const std::span<const float> hidden = ctx_.forward_hidden(tokens, cpu_layers_);  // [n_tok, n_embd]
        std::span<const float> logits;
        for (size_t t = 0; t < tokens.size(); t++) logits = dec_->forward_hidden(hidden.subspan(t * E, E));
        return logits;
    }
    uint32_t used() const override { return ctx_.used(); }
    uint32_t n_ctx() const override { return ctx_.n_ctx(); }
    void truncate(uint32_t n) override {
        ctx_.truncate(n);
        dec_->truncate(n);
    }
    std::string device() const override { return "cuda"; }
    std::string describe() const override {
        return fmt::format("cpu ({} kernels, {} thread{}) for layers 0..{}, then cuda: {}; {}",
                           cpu::isa_name(cpu::active_isa()), pool_.size(), pool_.size() == 1 ? "" : "s",
                           cpu_layers_ - 1, cuda::device_description(), dec_->summary());
    }
    int threads() const override { return pool_.size(); }

private:
    thread_pool pool_;  // before the model: the load's repacking runs on it
    std::unique_ptr<transformer> model_;
    forward_context ctx_;
    uint32_t cpu_layers_;
    std::unique_ptr<cuda::decoder> dec_;
};

}  // namespace

void check_append(const model_config& c, uint32_t used, uint32_t n_ctx, std::span<const int32_t> tokens) {
    if (tokens.empty()) fail("model", "forward() called with no tokens");
    if (uint64_t(used) + tokens.size() > n_ctx)
        fail("model", "context overflow: {} tokens in the cache + {} new exceed the context of {} (use --ctx)", used,
             tokens.size(), n_ctx);
    for (int32_t t : tokens)
        if (t < 0 || uint32_t(t) >= c.n_vocab)
            fail("model", "token id {} is outside the vocabulary (0..{})", t, c.n_vocab - 1);
}

int executor_threads(const executor_options& o) {
    const int n = o.threads > 0 ? o.threads : o.cpus.empty() ? thread_pool::default_threads() : int(o.cpus.size());
    if (!o.cpus.empty() && int(o.cpus.size()) < n)
        fail("executor", "--cpu-mask lists {} CPUs for {} threads", o.cpus.size(), n);
    return n;
}

std::unique_ptr<executor> executor::open(const std::string& path, const executor_options& o) {
    if (o.device == "cpu") return std::make_unique<cpu_executor>(path, o);
    if (o.device == "cuda") {
        if (o.gpu_layers < 0) return std::make_unique<cuda_executor>(path, o);
        const uint32_t n_layer = read_model_config(*gguf_file::open(path, o.model.load)).n_layer;
        if (uint32_t(o.gpu_layers) >= n_layer) return std::make_unique<cuda_executor>(path, o);
        if (o.gpu_layers == 0) return std::make_unique<cpu_executor>(path, o);
        return std::make_unique<split_executor>(path, o, n_layer - uint32_t(o.gpu_layers));
    }
    fail("executor", "unknown device '{}' (expected cpu or cuda)", o.device);
}

}  // namespace memtile
