// An independent statement of memtile::sampler's semantics in double precision, for checks: which token a draw
// (sampling_draw: parameters, penalties, uniform number) picks from given logits, and how far the decision is
// from a boundary (min-p cut, top-p cut, the draw between two cumulative probabilities). Two implementations
// that round differently (the host's float/double loops, the GPU's kernels) may only disagree where that
// margin is tiny; the checks count such cases as "near a boundary" and fail on any other difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace memtile::test {

struct reference_result {
    int32_t token = -1;
    double margin = INFINITY;  // smallest relative distance of a decision to its boundary
};

inline reference_result reference_draw(std::span<const float> logits, const sampling_draw& d) {
    const sampling_params& p = d.params;
    std::vector<float> l(logits.begin(), logits.end());
    for (size_t i = 0; i < d.penalty_ids.size(); i++) {
        const int32_t t = d.penalty_ids[i];
        if (t < 0 || size_t(t) >= l.size()) continue;
        float v = l[size_t(t)];
        v = v > 0 ? v / p.repeat_penalty : v * p.repeat_penalty;
        v -= p.presence_penalty + p.frequency_penalty * float(d.penalty_counts[i]);
        l[size_t(t)] = v;
    }
    std::vector<int32_t> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
        return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
    };
    reference_result r;
    if (p.temperature <= 0) {
        r.token = *std::min_element(order.begin(), order.end(), by_logit);
        return r;
    }
    std::sort(order.begin(), order.end(), by_logit);
    size_t n = p.top_k > 0 && size_t(p.top_k) < l.size() ? size_t(p.top_k) : l.size();
    std::vector<double> prob(n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += prob[i] = std::exp((double(l[size_t(order[i])]) - l[size_t(order[0])]) / p.temperature);
    for (auto& v : prob) v /= sum;
    if (p.min_p > 0) {
        size_t keep = 1;
        while (keep < n && prob[keep] >= p.min_p * prob[0]) keep++;
        for (size_t i = 1; i < n; i++)
            r.margin = std::min(r.margin, std::abs(prob[i] / prob[0] - double(p.min_p)) / double(p.min_p));
        n = keep;
    }
    if (p.top_p < 1.0f) {
        double cum = 0;
        size_t keep = 0;
        while (keep < n) {
            cum += prob[keep++];
            r.margin = std::min(r.margin, std::abs(cum - double(p.top_p)));
            if (cum >= p.top_p) break;
        }
        n = keep;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += prob[i];
    const double x = d.u * total;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        const double before = acc;
        acc += prob[i];
        if (x < acc || i + 1 == n) {
            r.token = order[i];
            r.margin = std::min(r.margin, std::min(std::abs(x - before), std::abs(acc - x)) / total);
            break;
        }
    }
    return r;
}

}  // namespace memtile::test
