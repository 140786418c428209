// N sequences of one model on one compute backend, advanced together: what memtile serve's continuous
// batching drives. Each sequence ("slot") has its own KV cache; step() appends one token to each of several
// slots in one pass, so every weight matrix is read once for all of them. Implemented by the CPU engine
// (forward_context::forward_batch) and the CUDA backend (cuda::batch_decoder).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/executor.h"

namespace memtile {

struct sampling_draw;

// Optional capability of a GPU batch executor: a step whose logits stay on the device, each slot's token drawn
// there, so that B ids come back instead of [B, n_vocab] floats. memtile::sampler stays the reference and the
// fallback (the CPU engine, --host-sampling).
class batch_device_sampling {
public:
    virtual ~batch_device_sampling() = default;
    // As batch_executor::step(), then the token sampler::sample() would draw from slots[i]'s logits with
    // draws[i] (from that slot's sampler::next_draw()); returns them (valid until the next call). Those slots'
    // logits() are unavailable until their next step().
    virtual std::span<const int32_t> step_sample(std::span<const int32_t> tokens, std::span<const int> slots,
                                                 std::span<const sampling_draw> draws) = 0;
};

class batch_executor {
public:
    // n_slots sequences of executor_options::n_ctx positions each (0: min(training context, 4096)).
    static std::unique_ptr<batch_executor> open(const std::string& path, const executor_options& o, int n_slots);
    virtual ~batch_executor() = default;

    virtual const model_config& config() const = 0;
    virtual const gguf_file& file() const = 0;
    virtual int slots() const = 0;
    virtual uint32_t n_ctx() const = 0;  // per slot
    virtual uint32_t used(int slot) const = 0;
    virtual void truncate(int slot, uint32_t n_tokens) = 0;
    // Appends tokens to one slot (a prompt) and returns its last logits ([n_vocab], valid until the next call).
    virtual std::span<const float> prefill(int slot, std::span<const int32_t> tokens) = 0;
    // Appends tokens[i] to slots[i] (distinct) in one pass; afterwards logits(slots[i]) holds that slot's logits,
    // equal to what prefill() of the same token would give. Throws on overflow or a bad id, changing nothing.
    virtual void step(std::span<const int32_t> tokens, std::span<const int> slots) = 0;
    virtual std::span<const float> logits(int slot) const = 0;  // [n_vocab] of the slot's last step
    virtual std::string describe() const = 0;
    // The device-sampling capability, or null (the host samples the logits step() leaves).
    virtual batch_device_sampling* device_sampler() { return nullptr; }
};

}  // namespace memtile
