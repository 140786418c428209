// Where the project's default model is found when no -m is given: $MEMTILE_MODEL, then the models/
// folder of the source tree this binary was built from, then /usr/local/share/memtile/models.
#pragma once

#include <string>

namespace memtile {

inline constexpr const char* k_default_model_file = "memtile-kjv-q8_0.gguf";

// Path of the default model; throws memtile::error explaining how to get one when none exists.
std::string default_model_path();

}  // namespace memtile
