// memtile diag's judgement: concrete warnings about a machine for LLM inference, and the JSON document of
// everything diag shows. Pure functions of their inputs, so fixtures test them.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "observe/backends.h"
#include "observe/gpu-info.h"
#include "observe/machine-profile.h"
#include "observe/system-info.h"

namespace memtile {

struct diag_input {
    system_info sys;
    std::vector<gpu_info> gpus;
    std::string gpu_status;
    std::vector<backend_status> backends;
    std::optional<machine_profile> profile;
    std::string profile_path;             // where the profile is looked for
    std::string model_path;               // optional: the model the user means to run
    std::optional<uint64_t> model_bytes;  // its file size
};

// Each warning states the problem, its effect on inference and what to do.
std::vector<std::string> diag_warnings(const diag_input& d);

nlohmann::json diag_to_json(const diag_input& d);

}  // namespace memtile
