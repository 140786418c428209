// The machine profile: the result of `memtile probe`, stored as JSON in $XDG_CACHE_HOME/memtile/machine.json
// (fallback ~/.cache/memtile/machine.json) and read by bench, run --verbose, diag and the server as the
// denominator of the roofline: the sequential read bandwidth this machine sustains at a given thread count.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "observe/mem-probe.h"

namespace memtile {

nlohmann::json probe_to_json(const probe_result& r);

struct machine_profile {
    std::string path;     // where it was read from
    std::string created;  // UTC time of the probe, ISO 8601
    std::string cpu_model;
    int threads = 1;           // the "all threads" count of the probe
    double read_gbps_1 = 0;    // sequential read, 1 thread
    double read_gbps_all = 0;  // sequential read, `threads` threads
    nlohmann::json probe;      // the full probe_to_json() document

    // Roofline denominator for n threads: the 1-thread figure at 1, the all-threads figure at >= threads,
    // linear in between (bandwidth grows with threads until the memory controller saturates).
    double read_gbps_for(int n_threads) const;
};

// $XDG_CACHE_HOME/memtile/machine.json, else $HOME/.cache/memtile/machine.json; "" when neither is set.
std::string machine_profile_path();
// Writes the profile (creating the folder); returns the path. Throws memtile::error when it cannot be written.
std::string save_machine_profile(const probe_result& r, const std::string& cpu_model);
// nullopt when absent or unreadable (a corrupt file is treated as absent: the caller says "run memtile probe").
std::optional<machine_profile> load_machine_profile();
std::optional<machine_profile> parse_machine_profile(const nlohmann::json& j);

}  // namespace memtile
