// What the machine looks like for LLM work, read from /proc and /sys (Linux): CPU model, ISA extensions,
// cores and their kinds, caches, memory and swap, huge pages, frequency governor, thermal zones, throttle
// counters; plus the counters of this process (RSS, page faults) that bench --soak samples.
//
// Contract: every reader takes a root prefix ("" for the live system, a fixture folder in tests) and never
// throws for a missing or malformed source: the field stays empty (std::nullopt / "") and the source's path is
// listed in `unavailable`. The parse_* functions take file text and are pure, so fixtures test them directly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu-topology.h"  // parse_cpu_list

namespace memtile {

// Whole file as text (small /proc and /sys files); nullopt when it cannot be read.
std::optional<std::string> read_text_file(const std::string& path);

struct cpuinfo_summary {
    std::string model;               // "model name" (x86) or "Hardware"/"CPU part" fallbacks; "" when absent
    std::vector<std::string> flags;  // "flags" (x86) or "Features" (arm) of the first processor
    int logical_cpus = 0;            // "processor" entries
    int physical_cores = 0;          // distinct (physical id, core id) pairs; logical_cpus when ids are absent
    std::optional<double> mhz;       // mean "cpu MHz" over processors that report it
};
cpuinfo_summary parse_cpuinfo(std::string_view text);

// /proc/meminfo values in bytes (the file quotes kB = 1024 bytes); absent keys stay nullopt.
struct meminfo_summary {
    std::optional<uint64_t> total, available, free, swap_total, swap_free, hugepages_total, hugepages_free,
        hugepage_size, anon_huge;
};
meminfo_summary parse_meminfo(std::string_view text);

// "always [madvise] never" -> "madvise"; "" when no bracketed choice.
std::string parse_bracketed_choice(std::string_view text);

// "32K", "2048K", "32M", "1234" -> bytes; nullopt when malformed.
std::optional<uint64_t> parse_size_suffix(std::string_view text);

// Counters of one process from /proc/<pid>/stat (faults) and /proc/<pid>/status (memory, context switches).
struct process_counters {
    std::optional<uint64_t> minor_faults, major_faults, rss_bytes, hwm_bytes, voluntary_switches, involuntary_switches;
};
// /proc/<pid>/stat: the command name may contain spaces and parentheses, so fields are counted after the last ')'.
void parse_proc_stat(std::string_view text, process_counters& out);
void parse_proc_status(std::string_view text, process_counters& out);
// Reads root/proc/self/{stat,status}.
process_counters read_process_counters(const std::string& root = "");

// /proc/self/smaps: "AnonHugePages" (bytes) of the mapping that starts at `start`; nullopt when not found.
std::optional<uint64_t> parse_smaps_anon_huge(std::string_view text, uint64_t start);

struct cache_info {
    int level = 0;
    std::string type;  // Data, Instruction, Unified
    uint64_t bytes = 0;
    int shared_by = 0;  // logical CPUs sharing one instance
    int instances = 0;  // distinct instances over the CPUs read
};

struct thermal_reading {
    std::string zone, type;
    std::optional<double> celsius;
};

// Live readings that change second by second (soak samples, diag).
struct thermal_state {
    std::optional<double> mean_mhz;  // scaling_cur_freq mean over CPUs, else /proc/cpuinfo "cpu MHz"
    std::vector<thermal_reading> zones;
    std::optional<uint64_t> throttle_events;  // sum of thermal_throttle/*_throttle_count over CPUs
    std::optional<double> max_celsius() const;
};
thermal_state read_thermal_state(const std::string& root = "");

struct system_info {
    cpuinfo_summary cpu;
    std::vector<std::string> isa;           // the ISA extensions that matter to the kernels, present here
    std::map<std::string, int> core_kinds;  // e.g. {"performance": 8, "efficiency": 16}; empty: uniform
    std::vector<cache_info> caches;         // from cpu*/cache/index*
    meminfo_summary mem;
    std::string thp_enabled, thp_defrag;  // bracketed choices; "" when unreadable
    std::string governor;                 // cpu0 scaling_governor
    std::optional<double> max_mhz;        // cpu0 cpuinfo_max_freq
    thermal_state thermal;
    // DAMON's memory-management schemes at work: the action of every scheme of a running kdamond ("pageout",
    // "lru_deprio", ...; /sys/kernel/mm/damon/admin) and "damon_reclaim" when that module is enabled. Empty when
    // none runs or the kernel has no DAMON (not listed as unavailable: most kernels have none).
    std::vector<std::string> damon_actions;
    std::vector<std::string> unavailable;  // sources that could not be read (paths under root)
};
system_info read_system_info(const std::string& root = "");

}  // namespace memtile
