#include "core/cpu-topology.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace memtile {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

template <class T>
std::optional<T> to_number(std::string_view s) {
    s = trim(s);
    T v{};
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

std::optional<std::string> read_line(const std::string& path) {
    std::ifstream f(path);
    std::string s;
    if (!f || !std::getline(f, s)) return std::nullopt;
    return std::string(trim(s));
}

// Marks cores whose value is >= 3/4 of the largest as performance cores; false when all values are equal or
// some core has none (then the source cannot tell the kinds apart).
bool classify(std::vector<cpu_core_info>& cores, const std::vector<std::optional<uint64_t>>& value) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& v : value) {
        if (!v || *v == 0) return false;
        lo = std::min(lo, *v);
        hi = std::max(hi, *v);
    }
    if (value.empty() || lo * 4 >= hi * 3) return false;
    for (size_t i = 0; i < cores.size(); i++) cores[i].performance = *value[i] * 4 >= hi * 3;
    return true;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
    std::vector<int> out;
    text = trim(text);
    while (!text.empty()) {
        const size_t end = std::min(text.find(','), text.size());
        const std::string_view part = trim(text.substr(0, end));
        text = end < text.size() ? text.substr(end + 1) : std::string_view{};
        const size_t dash = part.find('-');
        if (dash == std::string_view::npos) {
            if (auto v = to_number<int>(part)) out.push_back(*v);
        } else {
            const auto a = to_number<int>(part.substr(0, dash)), b = to_number<int>(part.substr(dash + 1));
            if (a && b && *a >= 0 && *a <= *b && *b - *a < 65536)
                for (int i = *a; i <= *b; i++) out.push_back(i);
        }
    }
    return out;
}

int cpu_topology::performance_cores() const {
    return int(std::count_if(cores.begin(), cores.end(), [](const cpu_core_info& c) { return c.performance; }));
}

std::vector<int> cpu_topology::performance_cpus() const {
    std::vector<int> out;
    for (const auto& c : cores)
        if (c.performance && !c.cpus.empty()) out.push_back(c.cpus.front());
    return out;
}

cpu_topology read_cpu_topology(const std::string& root, const std::vector<int>& allowed) {
    const std::string sys = root + "/sys/devices/system/cpu/cpu";
    std::map<std::string, std::vector<int>> by_siblings;  // sibling list text -> usable CPUs
    std::vector<int> sorted = allowed;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (const int cpu : sorted) {
        const std::string base = sys + std::to_string(cpu) + "/topology/";
        auto s = read_line(base + "core_cpus_list");
        if (!s) s = read_line(base + "thread_siblings_list");
        by_siblings[s ? *s : "cpu" + std::to_string(cpu)].push_back(cpu);
    }
    cpu_topology t;
    for (auto& [key, cpus] : by_siblings) t.cores.push_back({cpus, true});
    std::sort(t.cores.begin(), t.cores.end(),
              [](const cpu_core_info& a, const cpu_core_info& b) { return a.cpus.front() < b.cpus.front(); });
    if (t.cores.empty()) return t;

    // Intel hybrid parts: one PMU folder per core kind.
    if (auto p = read_line(root + "/sys/devices/cpu_core/cpus"), e = read_line(root + "/sys/devices/cpu_atom/cpus");
        p && e) {
        const auto pcpus = parse_cpu_list(*p);
        const std::set<int> perf(pcpus.begin(), pcpus.end());
        for (auto& c : t.cores) c.performance = perf.count(c.cpus.front()) > 0;
        t.kind_source = "cpu_core/cpu_atom";
    } else {
        for (const char* file : {"/cpu_capacity", "/cpufreq/cpuinfo_max_freq"}) {
            std::vector<std::optional<uint64_t>> v;
            for (const auto& c : t.cores) {
                const auto line = read_line(sys + std::to_string(c.cpus.front()) + file);
                v.push_back(line ? to_number<uint64_t>(*line) : std::nullopt);
            }
            if (classify(t.cores, v)) {
                t.kind_source = std::string(file).substr(std::string(file).rfind('/') + 1);
                break;
            }
        }
    }
    const int p = t.performance_cores();
    t.hybrid = p > 0 && p < int(t.cores.size());
    if (p == 0)  // a mask that holds efficiency cores only: they are the performance cores of this process
        for (auto& c : t.cores) c.performance = true;
    return t;
}

const cpu_topology& this_machine_topology() {
    static const cpu_topology t = [] {
        std::vector<int> allowed;
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) == 0) {
            for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
        } else {
            for (int cpu = 0; cpu < int(std::max(1u, std::thread::hardware_concurrency())); cpu++)
                allowed.push_back(cpu);
        }
        return read_cpu_topology("", allowed);
    }();
    return t;
}

}  // namespace memtile
