#include "runtime/batch-executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "backends/cuda/cuda-backend.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"

namespace memtile {
namespace {

class cpu_batch_executor final : public batch_executor {
public:
    cpu_batch_executor(const std::string& path, const executor_options& o, int n_slots)
        : pool_(executor_threads(o), o.cpus), model_(transformer::load(path, o.model, &pool_)) {
        const uint32_t n_ctx = o.n_ctx ? o.n_ctx : std::min<uint32_t>(model_->config().n_ctx_train, 4096);
        for (int i = 0; i < std::max(1, n_slots); i++)
            ctx_.push_back(std::make_unique<forward_context>(*model_, n_ctx, o.kv_type, pool_));
    }

    const model_config& config() const override { return model_->config(); }
    const gguf_file& file() const override { return model_->file(); }
    int slots() const override { return int(ctx_.size()); }
    uint32_t n_ctx() const override { return ctx_[0]->n_ctx(); }
    uint32_t used(int s) const override { return at(s).used(); }
    void truncate(int s, uint32_t n) override { at(s).truncate(n); }
    std::span<const float> prefill(int s, std::span<const int32_t> tokens) override { return at(s).forward(tokens); }
    void step(std::span<const int32_t> tokens, std::span<const int> slots) override {
        std::vector<forward_context*> ctxs;
        for (int s : slots) ctxs.push_back(&at(s));
        forward_context::forward_batch(ctxs, tokens);
    }
    std::span<const float> logits(int s) const override { return at(s).logits(); }
    std::string describe() const override {
        return fmt::format("cpu: {} kernels, {} thread{}", cpu::isa_name(cpu::active_isa()), pool_.size(),
                           pool_.size() == 1 ? "" : "s");
    }

private:
    forward_context& at(int s) const {
        if (s < 0 || s >= int(ctx_.size())) fail("executor", "slot {} does not exist ({} slots)", s, ctx_.size());
        return *ctx_[size_t(s)];
    }

    thread_pool pool_;  // before the model: the load's repacking runs on it
    std::unique_ptr<transformer> model_;
    std::vector<std::unique_ptr<forward_context>> ctx_;
};

// cuda::batch_decoder: prompts through the tensor-core prefill, steps as skinny products on the GPU.
// Sampling on the GPU (step_sample) unless executor_options::host_sampling.
class cuda_batch_executor final : public batch_executor, public batch_device_sampling {
public:
    cuda_batch_executor(const std::string& path, const executor_options& o, int n_slots)
        : host_sampling_(o.host_sampling) {
        cuda::require_device();
        if (o.kv_type != dtype::f16)
            fail("cuda", "the CUDA backend keeps its KV cache in f16 (--kv-type f32 is CPU only)");
        if (n_slots < 1 || n_slots > 16)
            fail("cuda", "the CUDA backend decodes 1 to 16 slots together (got {})", n_slots);
        file_ = gguf_file::open(path, o.model.load);
        cfg_ = read_model_config(*file_);
        n_ctx_ = o.n_ctx ? o.n_ctx : std::min<uint32_t>(cfg_.n_ctx_train, 4096);
        dec_ = cuda::decoder::load(file_, 1);  // weights only: the slots have their own caches
        batch_ = dec_->make_batch(n_slots, n_ctx_);
        logits_.assign(size_t(n_slots) * cfg_.n_vocab, 0.0f);
        on_device_.assign(size_t(n_slots), false);
    }

    const model_config& config() const override { return cfg_; }
    const gguf_file& file() const override { return *file_; }
    int slots() const override { return batch_->max_sequences(); }
    uint32_t n_ctx() const override { return n_ctx_; }
    uint32_t used(int s) const override { return batch_->used(s); }
    void truncate(int s, uint32_t n) override { batch_->truncate(s, n); }
    std::span<const float> prefill(int s, std::span<const int32_t> tokens) override {
        check_append(cfg_, batch_->used(s), n_ctx_, tokens);
        return batch_->prefill(s, tokens);
    }
    void step(std::span<const int32_t> tokens, std::span<const int> slots) override {
        const std::vector<int32_t> seqs = checked(tokens, slots);
        const auto all = batch_->step(tokens, seqs);
        for (size_t i = 0; i < slots.size(); i++) {
            std::copy_n(all.begin() + std::ptrdiff_t(i * cfg_.n_vocab), cfg_.n_vocab,
                        logits_.begin() + std::ptrdiff_t(size_t(slots[i]) * cfg_.n_vocab));
            on_device_[size_t(slots[i])] = false;
        }
    }
    std::span<const int32_t> step_sample(std::span<const int32_t> tokens, std::span<const int> slots,
                                         std::span<const sampling_draw> draws) override {
        if (draws.size() != slots.size())
            fail("executor", "step_sample(): {} sampling draws for {} slots", draws.size(), slots.size());
        const std::vector<int32_t> seqs = checked(tokens, slots);
        const auto ids = batch_->step_sample(tokens, seqs, draws);
        for (int s : slots) on_device_[size_t(s)] = true;
        return ids;
    }
    std::span<const float> logits(int s) const override {
        if (s < 0 || s >= slots()) fail("executor", "slot {} does not exist ({} slots)", s, slots());
        if (on_device_[size_t(s)]) fail("executor", "slot {}: its last step was sampled on the GPU (no logits)", s);
        return {logits_.data() + size_t(s) * cfg_.n_vocab, cfg_.n_vocab};
    }
    std::string describe() const override {
        return "cuda: " + cuda::device_description() + "; " + dec_->summary() + "; sampling on the " +
               (host_sampling_ ? "host" : "GPU");
    }
    batch_device_sampling* device_sampler() override { return host_sampling_ ? nullptr : this; }

private:
    // The step's checks (as the CPU engine's), before anything runs; slots as the decoder's sequence ids.
    std::vector<int32_t> checked(std::span<const int32_t> tokens, std::span<const int> slots) const {
        if (tokens.size() != slots.size())
            fail("executor", "step(): {} tokens for {} slots", tokens.size(), slots.size());
        for (size_t i = 0; i < slots.size(); i++)
            check_append(cfg_, batch_->used(slots[i]), n_ctx_, tokens.subspan(i, 1));
        return {slots.begin(), slots.end()};
    }

    bool host_sampling_ = false;
    std::shared_ptr<gguf_file> file_;
    model_config cfg_;
    uint32_t n_ctx_ = 0;
    std::unique_ptr<cuda::decoder> dec_;
    std::unique_ptr<cuda::batch_decoder> batch_;
    std::vector<float> logits_;    // [slots, n_vocab]: each slot's logits of its last step
    std::vector<bool> on_device_;  // [slots]: the last step was step_sample (logits_ is stale)
};

}  // namespace

std::unique_ptr<batch_executor> batch_executor::open(const std::string& path, const executor_options& o, int n_slots) {
    if (o.device == "cpu") return std::make_unique<cpu_batch_executor>(path, o, n_slots);
    if (o.device == "cuda") return std::make_unique<cuda_batch_executor>(path, o, n_slots);
    fail("executor", "unknown device '{}' (expected cpu or cuda)", o.device);
}

}  // namespace memtile
