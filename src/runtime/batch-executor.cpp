#include "runtime/batch-executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/cpu-isa.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"

namespace memtile {
namespace {

class cpu_batch_executor final : public batch_executor {
public:
    cpu_batch_executor(const std::string& path, const executor_options& o, int n_slots)
        : model_(transformer::load(path, o.model)), pool_(executor_threads(o), o.cpus) {
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

    std::unique_ptr<transformer> model_;
    thread_pool pool_;
    std::vector<std::unique_ptr<forward_context>> ctx_;
};

}  // namespace

std::unique_ptr<batch_executor> batch_executor::open(const std::string& path, const executor_options& o, int n_slots) {
    if (o.device == "cpu") return std::make_unique<cpu_batch_executor>(path, o, n_slots);
    if (o.device == "cuda") fail("executor", "memtile serve --device cuda is not available yet");
    fail("executor", "unknown device '{}' (expected cpu or cuda)", o.device);
}

}  // namespace memtile
