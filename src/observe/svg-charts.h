// The figures of probe, bench and bench --soak as SVG documents (see docs/observability.md for how to read them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "observe/mem-probe.h"
#include "observe/system-info.h"

namespace memtile {

// Latency ladder (ns per dependent load against working set, log-log, with the cache sizes marked) above
// bandwidth bars (GB/s per access pattern, 1 thread beside all threads).
std::string probe_svg(const probe_result& r, const std::vector<cache_info>& caches);

struct roofline_bar {
    std::string label;          // e.g. "tg128, 2 threads"
    double achieved_gbps = 0;   // bytes the configuration must move per second at its measured speed
    double available_gbps = 0;  // the machine profile's sequential read at that thread count (0: unknown)
};
// One horizontal bar per configuration: the achieved bandwidth inside the outline of the available one.
std::string roofline_svg(const std::string& title, const std::vector<roofline_bar>& bars);

struct soak_sample {
    double t_s = 0;  // seconds since the start of the soak
    double tokens_per_second = 0;
    std::optional<double> mhz, celsius;
    std::optional<uint64_t> throttle_events;  // cumulative
    double rss_mib = 0;
    uint64_t minor_faults = 0, major_faults = 0;  // during this second
};
// Stacked timelines sharing the time axis: tokens/s, CPU frequency, temperature, resident memory.
std::string soak_svg(const std::string& title, const std::vector<soak_sample>& samples);

}  // namespace memtile
