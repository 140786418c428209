// Sampling options shared by run, chat and bench.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>

#include "sampling/sampler.h"

namespace memtile::cli {

struct sampling_flags {
    sampling_params p;
    int64_t seed = -1;  // -1: from the clock

    void add(CLI::App* sub) {
        sub->add_option("--temp", p.temperature, "Temperature (0: greedy)")->capture_default_str();
        sub->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
        sub->add_option("--top-p", p.top_p, "Nucleus sampling threshold (1: off)")->capture_default_str();
        sub->add_option("--min-p", p.min_p, "Drop tokens below min_p x the top probability (0: off)")
            ->capture_default_str();
        sub->add_option("--repeat-penalty", p.repeat_penalty, "Penalty for recent tokens (1: off)")
            ->capture_default_str();
        sub->add_option("--repeat-last-n", p.repeat_last_n, "Window of the penalties")->capture_default_str();
        sub->add_option("--presence-penalty", p.presence_penalty, "Presence penalty")->capture_default_str();
        sub->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty")->capture_default_str();
        sub->add_option("--seed", seed, "Random seed (same seed and threads: same output)");
    }
    sampling_params params() const {
        sampling_params q = p;
        q.seed =
            seed >= 0 ? uint64_t(seed) : uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
        return q;
    }
};

}  // namespace memtile::cli
