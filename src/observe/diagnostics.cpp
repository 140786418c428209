#include "observe/diagnostics.h"

#include <algorithm>

#include <fmt/format.h>

namespace memtile {
namespace {

double gib(uint64_t b) {
    return double(b) / double(uint64_t(1) << 30);
}

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::vector<std::string> diag_warnings(const diag_input& d) {
    std::vector<std::string> w;
    const auto& m = d.sys.mem;
    if (m.swap_total && m.swap_free && *m.swap_total > *m.swap_free) {
        const uint64_t used = *m.swap_total - *m.swap_free;
        if (used > (uint64_t(64) << 20))
            w.push_back(
                fmt::format("swap in use ({:.1f} GiB): weights paged out to disk turn each token into disk "
                            "reads; free memory or use a smaller model",
                            gib(used)));
    }
    if (d.sys.thp_enabled == "never")
        w.push_back(
            "transparent huge pages disabled: every 4 KiB page of the weights needs its own TLB entry; "
            "enable with: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (then use --hugepages)");
    if (std::any_of(d.sys.damon_actions.begin(), d.sys.damon_actions.end(),
                    [](const std::string& a) { return a == "pageout" || a == "damon_reclaim"; }))
        w.push_back(
            "DAMON pages out memory it finds cold here (a running kdamond scheme 'pageout' or damon_reclaim): a "
            "model mapped from its file (--repack off, or tensors left in the file's layout) can lose its pages "
            "between requests and read them from disk again; --mlock keeps them resident");
    if (d.sys.governor == "powersave")
        w.push_back(
            "CPU frequency governor is powersave: cores clock down between tokens; for steady decode use "
            "performance (cpupower frequency-set -g performance)");
    if (d.sys.thermal.throttle_events && *d.sys.thermal.throttle_events > 0)
        w.push_back(
            fmt::format("thermal throttling has happened {} times since boot: sustained speed will be lower "
                        "than short benchmarks; check cooling, or run memtile bench --soak 600",
                        *d.sys.thermal.throttle_events));
    if (const auto t = d.sys.thermal.max_celsius(); t && *t >= 90)
        w.push_back(fmt::format("a thermal zone reads {:.0f} degC: the CPU is near its throttling point", *t));
    const std::optional<uint64_t> avail = m.available ? m.available : m.free;
    if (d.model_bytes && avail && *d.model_bytes > *avail)
        w.push_back(
            fmt::format("model {} ({:.2f} GiB) is larger than available memory ({:.2f} GiB): it will be read "
                        "from disk for every token; use a smaller quantization",
                        d.model_path, gib(*d.model_bytes), gib(*avail)));
    if (!d.profile)
        w.push_back(fmt::format("no machine profile at {}: run memtile probe so bench and serve can report roofline %",
                                d.profile_path.empty() ? "(no cache folder)" : d.profile_path));
    if (d.sys.cpu.logical_cpus > d.sys.cpu.physical_cores && d.sys.cpu.physical_cores > 0)
        w.push_back(
            fmt::format("{} logical CPUs on {} cores: more threads than cores only adds contention for "
                        "memory-bound decode; memtile defaults to one thread per core",
                        d.sys.cpu.logical_cpus, d.sys.cpu.physical_cores));
    for (const auto& b : d.backends)
        if (!b.compiled && b.device_present)
            w.push_back(fmt::format("{} device present but this binary lacks the {} backend", b.name, b.name));
    return w;
}

nlohmann::json diag_to_json(const diag_input& d) {
    const auto& s = d.sys;
    nlohmann::json j;
    j["cpu"] = {{"model", s.cpu.model},
                {"logical_cpus", s.cpu.logical_cpus},
                {"physical_cores", s.cpu.physical_cores},
                {"isa", s.isa},
                {"core_kinds", s.core_kinds.empty() ? nlohmann::json("uniform") : nlohmann::json(s.core_kinds)}};
    auto& caches = j["caches"] = nlohmann::json::array();
    for (const auto& c : s.caches)
        caches.push_back({{"level", c.level},
                          {"type", c.type},
                          {"bytes", c.bytes},
                          {"instances", c.instances},
                          {"shared_by", c.shared_by}});
    j["memory"] = {{"total_bytes", opt(s.mem.total)},
                   {"available_bytes", opt(s.mem.available)},
                   {"swap_total_bytes", opt(s.mem.swap_total)},
                   {"swap_free_bytes", opt(s.mem.swap_free)}};
    j["damon_actions"] = s.damon_actions;
    j["huge_pages"] = {{"thp_enabled", s.thp_enabled},
                       {"thp_defrag", s.thp_defrag},
                       {"pool_total", opt(s.mem.hugepages_total)},
                       {"pool_free", opt(s.mem.hugepages_free)},
                       {"page_bytes", opt(s.mem.hugepage_size)}};
    j["frequency"] = {{"governor", s.governor}, {"current_mhz", opt(s.thermal.mean_mhz)}, {"max_mhz", opt(s.max_mhz)}};
    auto& zones = j["thermal"]["zones"] = nlohmann::json::array();
    for (const auto& z : s.thermal.zones)
        zones.push_back({{"zone", z.zone}, {"type", z.type}, {"celsius", opt(z.celsius)}});
    j["thermal"]["throttle_events"] = opt(s.thermal.throttle_events);
    auto& gpus = j["gpus"] = nlohmann::json::array();
    for (const auto& g : d.gpus)
        gpus.push_back({{"name", g.name},
                        {"memory_total_mib", opt(g.memory_total_mib)},
                        {"memory_used_mib", opt(g.memory_used_mib)},
                        {"sm_clock_mhz", opt(g.sm_clock_mhz)},
                        {"max_sm_clock_mhz", opt(g.max_sm_clock_mhz)},
                        {"celsius", opt(g.celsius)}});
    j["gpu_status"] = d.gpu_status;
    auto& be = j["backends"] = nlohmann::json::array();
    for (const auto& b : d.backends)
        be.push_back(
            {{"name", b.name}, {"compiled", b.compiled}, {"device_present", b.device_present}, {"detail", b.detail}});
    if (d.profile) {
        j["probe"] = {{"path", d.profile->path},
                      {"created", d.profile->created},
                      {"threads", d.profile->threads},
                      {"sequential_read_gbps_1_thread", d.profile->read_gbps_1},
                      {"sequential_read_gbps", d.profile->read_gbps_all}};
    } else {
        j["probe"] = nullptr;
    }
    if (!d.model_path.empty()) j["model"] = {{"path", d.model_path}, {"bytes", opt(d.model_bytes)}};
    j["unavailable"] = s.unavailable;
    j["warnings"] = diag_warnings(d);
    return j;
}

}  // namespace memtile
