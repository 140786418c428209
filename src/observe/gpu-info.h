// NVIDIA GPUs as nvidia-smi reports them (diag). Absent nvidia-smi or no GPU: an empty list, never an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtile {

struct gpu_info {
    std::string name;
    std::optional<double> memory_total_mib, memory_used_mib, sm_clock_mhz, max_sm_clock_mhz, celsius;
};

// Output of `nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,temperature.gpu
// --format=csv,noheader,nounits`: one GPU per line; "[N/A]" or malformed fields stay nullopt.
std::vector<gpu_info> parse_nvidia_smi_csv(std::string_view text);

// Runs nvidia-smi when it is on PATH; status explains an empty result ("nvidia-smi not found", ...).
std::vector<gpu_info> query_nvidia_gpus(std::string& status);

}  // namespace memtile
