// Hardware and software event counters of this process via perf_event_open (bench --perf).
//
// Counters are opened before the worker threads exist and inherit to them, so they cover the whole
// process. Hardware events (cycles, instructions, cache and dTLB misses) need a PMU the kernel exposes; in
// most VMs and containers there is none, and then only software events (page faults, context switches, CPU
// migrations, task clock) are counted. When even those are refused (perf_event_paranoid), getrusage gives
// page faults and context switches. Nothing here ever fails: missing counters are reported as unavailable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memtile {

struct counter_reading {
    std::string name;  // "cycles", "page-faults", ...
    bool hardware = false;
    std::optional<uint64_t> value;  // nullopt: unavailable
};

class perf_counters {
public:
    perf_counters();
    ~perf_counters();
    perf_counters(const perf_counters&) = delete;
    perf_counters& operator=(const perf_counters&) = delete;

    void start();  // zero and enable
    void stop();   // disable; values stay readable
    std::vector<counter_reading> read() const;

    bool hardware_available() const { return hw_ok_; }
    // Why hardware counters are missing (e.g. "perf_event_open(cycles): No such file or directory"); "" when present.
    const std::string& hardware_reason() const { return hw_reason_; }
    // "perf_event_open" or "getrusage" (the software events' source).
    const std::string& software_source() const { return sw_source_; }

private:
    struct event {
        std::string name;
        bool hardware;
        int fd = -1;
    };
    std::vector<event> events_;
    bool hw_ok_ = false;
    std::string hw_reason_, sw_source_;
    long ru_minflt_ = 0, ru_majflt_ = 0, ru_csw_ = 0;
    long ru_minflt_end_ = 0, ru_majflt_end_ = 0, ru_csw_end_ = 0;
    bool stopped_ = false;
};

}  // namespace memtile
