// Token sampling from logits: penalties (repetition, presence, frequency) over the recent history, then
// temperature, top-k, top-p (nucleus) and min-p filtering, then a seeded draw. Temperature <= 0 is greedy
// (argmax after penalties). The same seed and the same logits give the same tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/rng.h"

namespace memtile {

struct sampling_params {
    float temperature = 0.8f;
    int top_k = 40;               // <= 0: disabled
    float top_p = 0.95f;          // >= 1: disabled
    float min_p = 0.05f;          // <= 0: disabled; keeps tokens with p >= min_p * p_max
    float repeat_penalty = 1.0f;  // 1: disabled; > 1 discourages tokens in the last repeat_last_n
    int repeat_last_n = 64;
    float presence_penalty = 0.0f;   // subtracted once from tokens present in the window
    float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
    uint64_t seed = 0;
};

// One draw of sampler::sample() as a device implementation needs it (the CUDA executor samples its
// device-resident logits): the parameters, the penalties of the recent window as distinct ids with their
// occurrence counts (empty when no penalty is active), and the uniform number sample() would take from the
// seed's stream. The number is taken only when temperature > 0, as sample() does, so that host and device
// draws from one seed consume the same stream and give the same tokens.
struct sampling_draw {
    sampling_params params;
    std::vector<int32_t> penalty_ids;     // distinct ids of the recent window
    std::vector<int32_t> penalty_counts;  // occurrences of penalty_ids[i] in the window
    double u = 0;                         // uniform in [0, 1); 0 when temperature <= 0
};

class sampler {
public:
    explicit sampler(const sampling_params& p);
    int32_t sample(std::span<const float> logits);
    // Fills d for the next draw instead of sampling on the host (advances the stream as sample() would).
    void next_draw(sampling_draw& d);
    void accept(int32_t token);  // records a token (prompt or generated) for the penalties
    const sampling_params& params() const { return p_; }

private:
    struct candidate {
        int32_t id;
        float logit;
    };
    sampling_params p_;
    rng rng_;
    std::deque<int32_t> recent_;
    std::vector<candidate> cand_;
    std::vector<float> probs_;
};

}  // namespace memtile
