#include "runtime/default-model.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace memtile {

std::string default_model_path() {
    if (const char* env = std::getenv("MEMTILE_MODEL"); env && *env) {
        if (!std::filesystem::exists(env)) fail("model", "MEMTILE_MODEL='{}' does not exist", env);
        return env;
    }
    const std::string candidates[] = {
        std::string(MEMTILE_SOURCE_DIR) + "/models/" + k_default_model_file,
        std::string("/usr/local/share/memtile/models/") + k_default_model_file,
    };
    for (const auto& c : candidates)
        if (std::filesystem::exists(c)) return c;
    fail("model",
         "no model given and the default model '{}' was not found (looked in {} and {}); pass -m MODEL.gguf, "
         "set MEMTILE_MODEL, or make a synthetic one with `memtile gen --arch stories15m --type q8_0 -o m.gguf`",
         k_default_model_file, candidates[0], candidates[1]);
}

}  // namespace memtile
