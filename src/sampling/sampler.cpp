#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace memtile {

sampler::sampler(const sampling_params& p) : p_(p), rng_(p.seed) {
    if (p.top_p <= 0) fail("sampling", "top_p must be > 0 (got {})", p.top_p);
    if (p.repeat_penalty <= 0) fail("sampling", "repeat_penalty must be > 0 (got {})", p.repeat_penalty);
}

void sampler::accept(int32_t token) {
    if (p_.repeat_last_n <= 0) return;
    recent_.push_back(token);
    while (int(recent_.size()) > p_.repeat_last_n) recent_.pop_front();
}

void sampler::next_draw(sampling_draw& d) {
    d.params = p_;
    d.penalty_ids.clear();
    d.penalty_counts.clear();
    const bool penalise = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
    if (penalise && !recent_.empty()) {
        std::unordered_map<int32_t, int> counts;
        for (int32_t t : recent_) counts[t]++;
        for (const auto& [t, n] : counts) {
            d.penalty_ids.push_back(t);
            d.penalty_counts.push_back(n);
        }
    }
    d.u = p_.temperature > 0 ? rng_.uniform() : 0.0;
}

int32_t sampler::sample(std::span<const float> logits) {
    if (logits.empty()) fail("sampling", "no logits to sample from");
    cand_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); i++) cand_[i] = {int32_t(i), logits[i]};

    const bool penalise = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
    if (penalise && !recent_.empty()) {
        std::unordered_map<int32_t, int> counts;
        for (int32_t t : recent_) counts[t]++;
        for (const auto& [t, n] : counts) {
            if (t < 0 || size_t(t) >= cand_.size()) continue;
            float& l = cand_[size_t(t)].logit;
            l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
            l -= p_.presence_penalty + p_.frequency_penalty * float(n);
        }
    }

    if (p_.temperature <= 0) {
        // Greedy; ties go to the lowest id so the choice does not depend on the order of evaluation.
        size_t best = 0;
        for (size_t i = 1; i < cand_.size(); i++)
            if (cand_[i].logit > cand_[best].logit) best = i;
        return cand_[best].id;
    }

    auto by_logit = [](const candidate& a, const candidate& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    size_t n = cand_.size();
    if (p_.top_k > 0 && size_t(p_.top_k) < n) {
        std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
        n = size_t(p_.top_k);
    } else {
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    // Softmax of the survivors at the given temperature (max-subtracted for stability).
    probs_.resize(n);
    const float max_logit = cand_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        probs_[i] = std::exp((cand_[i].logit - max_logit) / p_.temperature);
        sum += probs_[i];
    }
    for (size_t i = 0; i < n; i++) probs_[i] = float(probs_[i] / sum);
    if (p_.min_p > 0) {
        const float threshold = p_.min_p * probs_[0];
        size_t keep = 1;
        while (keep < n && probs_[keep] >= threshold) keep++;
        n = keep;
    }
    if (p_.top_p < 1.0f) {
        double cum = 0;
        size_t keep = 0;
        while (keep < n) {
            cum += probs_[keep++];
            if (cum >= p_.top_p) break;
        }
        n = keep;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += probs_[i];
    const double r = rng_.uniform() * total;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += probs_[i];
        if (r < acc) return cand_[i].id;
    }
    return cand_[n - 1].id;
}

}  // namespace memtile
