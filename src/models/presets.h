// Shapes of real architectures, for synthetic benchmark models (`memtile gen --arch PRESET`).
#pragma once

#include <string>
#include <vector>

#include "models/model-config.h"

namespace memtile {

struct model_preset {
    std::string name;
    std::string description;
    model_config config;
    // Llama 3.1-style RoPE scaling written as rope_freqs.weight (0: none).
    float rope_scale_factor = 0;
    float rope_low_freq_factor = 1, rope_high_freq_factor = 4;
    uint32_t rope_original_ctx = 8192;
};

const std::vector<model_preset>& model_presets();
const model_preset& find_preset(const std::string& name);  // error lists the known names

// Llama 3.1 frequency factors for rope_freqs.weight: [n_rot / 2] f32 (theta_i is divided by factor_i).
std::vector<float> llama3_rope_factors(const model_preset& p);

}  // namespace memtile
