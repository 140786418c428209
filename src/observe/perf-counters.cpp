#include "observe/perf-counters.h"

#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace memtile {
namespace {

int open_event(uint32_t type, uint64_t config) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = type;
    a.config = config;
    a.disabled = 1;
    a.inherit = 1;  // threads created after this call are counted too
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return int(::syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

uint64_t cache_config(uint64_t cache, uint64_t op, uint64_t result) {
    return cache | (op << 8) | (result << 16);
}

}  // namespace

perf_counters::perf_counters() {
    struct spec {
        const char* name;
        uint32_t type;
        uint64_t config;
        bool hw;
    };
    const spec specs[] = {
        {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true},
        {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, true},
        {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, true},
        {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, true},
        {"dTLB-load-misses", PERF_TYPE_HW_CACHE,
         cache_config(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS), true},
        {"task-clock-ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, false},
        {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, false},
        {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, false},
        {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, false},
        {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, false},
    };
    bool any_sw = false;
    for (const auto& s : specs) {
        const int fd = open_event(s.type, s.config);
        if (fd < 0 && s.hw && hw_reason_.empty())
            hw_reason_ = fmt::format("perf_event_open({}): {}", s.name, std::strerror(errno));
        if (fd >= 0 && s.hw) hw_ok_ = true;
        if (fd >= 0 && !s.hw) any_sw = true;
        events_.push_back({s.name, s.hw, fd});
    }
    if (hw_ok_) hw_reason_.clear();
    sw_source_ = any_sw ? "perf_event_open" : "getrusage";
}

perf_counters::~perf_counters() {
    for (auto& e : events_)
        if (e.fd >= 0) ::close(e.fd);
}

void perf_counters::start() {
    for (auto& e : events_)
        if (e.fd >= 0) {
            ::ioctl(e.fd, PERF_EVENT_IOC_RESET, 0);
            ::ioctl(e.fd, PERF_EVENT_IOC_ENABLE, 0);
        }
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    ru_minflt_ = u.ru_minflt;
    ru_majflt_ = u.ru_majflt;
    ru_csw_ = u.ru_nvcsw + u.ru_nivcsw;
    stopped_ = false;
}

void perf_counters::stop() {
    for (auto& e : events_)
        if (e.fd >= 0) ::ioctl(e.fd, PERF_EVENT_IOC_DISABLE, 0);
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    ru_minflt_end_ = u.ru_minflt;
    ru_majflt_end_ = u.ru_majflt;
    ru_csw_end_ = u.ru_nvcsw + u.ru_nivcsw;
    stopped_ = true;
}

std::vector<counter_reading> perf_counters::read() const {
    std::vector<counter_reading> out;
    for (const auto& e : events_) {
        counter_reading r{e.name, e.hardware, std::nullopt};
        uint64_t v = 0;
        if (e.fd >= 0 && ::read(e.fd, &v, sizeof v) == ssize_t(sizeof v)) r.value = v;
        if (!r.value && !e.hardware && sw_source_ == "getrusage" && stopped_) {
            if (e.name == "page-faults") r.value = uint64_t(ru_minflt_end_ - ru_minflt_ + ru_majflt_end_ - ru_majflt_);
            if (e.name == "major-faults") r.value = uint64_t(ru_majflt_end_ - ru_majflt_);
            if (e.name == "context-switches") r.value = uint64_t(ru_csw_end_ - ru_csw_);
        }
        out.push_back(r);
    }
    return out;
}

}  // namespace memtile
