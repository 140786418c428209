// Which logical CPUs form which physical core, and which cores are performance cores on hybrid parts, read
// from Linux sysfs. The default thread count is one thread per physical performance core: SMT siblings share
// one core's load ports and gain nothing on a memory-bound decode, and an efficiency core would hold back
// every parallel_for (each waits for its slowest chunk).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memtile {

// "0-3,8,10-11" -> {0,1,2,3,8,10,11} (the sysfs CPU-list format); malformed parts are skipped.
std::vector<int> parse_cpu_list(std::string_view text);

struct cpu_core_info {
    std::vector<int> cpus;    // logical CPUs of this core that the process may use, ascending
    bool performance = true;  // false: an efficiency core of a hybrid part
};

struct cpu_topology {
    std::vector<cpu_core_info> cores;  // usable cores, ordered by their first CPU
    bool hybrid = false;               // cores of more than one kind among the usable ones
    // Where the core kinds came from: "cpu_core/cpu_atom" (Intel hybrid PMU folders), "cpu_capacity" (Arm
    // big.LITTLE), "cpuinfo_max_freq", or "uniform" (nothing tells the cores apart).
    std::string kind_source = "uniform";

    int performance_cores() const;
    int efficiency_cores() const { return int(cores.size()) - performance_cores(); }
    std::vector<int> performance_cpus() const;  // the first CPU of each performance core
};

// Reads <root>/sys/devices/system/cpu/cpuN/{topology/core_cpus_list, cpu_capacity, cpufreq/cpuinfo_max_freq} and
// <root>/sys/devices/cpu_{core,atom}/cpus for the CPUs in `allowed`. A CPU whose sibling list is unreadable
// counts as its own core. A core is a performance core when its capacity (or maximum frequency) is at least
// 3/4 of the largest: that keeps "prime + big" Arm clusters together and ignores the few percent by which
// favoured cores of one kind differ.
cpu_topology read_cpu_topology(const std::string& root, const std::vector<int>& allowed);

// This process's topology (affinity mask applied), read once.
const cpu_topology& this_machine_topology();

}  // namespace memtile
