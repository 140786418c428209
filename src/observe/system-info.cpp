#include "observe/system-info.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace memtile {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

template <typename T>
std::optional<T> to_number(std::string_view s) {
    s = trim(s);
    T v{};
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr == s.data()) return std::nullopt;
    return v;
}

std::optional<double> to_double(std::string_view s) {
    s = trim(s);
    if (s.empty()) return std::nullopt;
    try {
        size_t used = 0;
        const double v = std::stod(std::string(s), &used);
        if (used == 0) return std::nullopt;
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// Calls fn(key, value) for each "key : value" line (the /proc/cpuinfo and /proc/meminfo shape).
template <typename F>
void for_each_key_value(std::string_view text, F&& fn) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) {
            fn(trim(line), std::string_view());
            continue;
        }
        fn(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
    }
}

std::vector<std::string> split_words(std::string_view s) {
    std::vector<std::string> out;
    std::istringstream in{std::string(s)};
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
}

// One file's text, trimmed; records the path in `missing` when unreadable.
std::optional<std::string> read_source(const std::string& path, std::vector<std::string>* missing) {
    auto t = read_text_file(path);
    if (!t) {
        if (missing) missing->push_back(path);
        return std::nullopt;
    }
    return std::string(trim(*t));
}

std::vector<std::filesystem::path> sorted_entries(const std::filesystem::path& dir, std::string_view prefix) {
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
            std::all_of(name.begin() + long(prefix.size()), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
            out.push_back(it->path());
    }
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
        return std::stoi(a.filename().string().substr(prefix.size())) <
               std::stoi(b.filename().string().substr(prefix.size()));
    });
    return out;
}

}  // namespace

std::optional<std::string> read_text_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::nullopt;
    std::ostringstream s;
    s << f.rdbuf();
    if (f.bad()) return std::nullopt;
    return s.str();
}

cpuinfo_summary parse_cpuinfo(std::string_view text) {
    cpuinfo_summary r;
    std::set<std::pair<std::string, std::string>> cores;
    std::string phys, core;
    bool ids_missing = false;
    double mhz_sum = 0;
    int mhz_n = 0;
    auto close_processor = [&] {
        if (core.empty()) ids_missing = true;
        cores.insert({phys, core});
        phys.clear();
        core.clear();
    };
    bool in_processor = false;
    for_each_key_value(text, [&](std::string_view k, std::string_view v) {
        if (k == "processor") {
            if (in_processor) close_processor();
            in_processor = true;
            r.logical_cpus++;
        } else if (k == "model name" || (k == "Hardware" && r.model.empty())) {
            if (r.model.empty()) r.model = std::string(v);
        } else if ((k == "flags" || k == "Features") && r.flags.empty()) {
            r.flags = split_words(v);
        } else if (k == "physical id") {
            phys = std::string(v);
        } else if (k == "core id") {
            core = std::string(v);
        } else if (k == "cpu MHz") {
            if (auto m = to_double(v)) {
                mhz_sum += *m;
                mhz_n++;
            }
        }
    });
    if (in_processor) close_processor();
    r.physical_cores = ids_missing ? r.logical_cpus : int(cores.size());
    if (mhz_n > 0) r.mhz = mhz_sum / mhz_n;
    return r;
}

meminfo_summary parse_meminfo(std::string_view text) {
    meminfo_summary m;
    for_each_key_value(text, [&](std::string_view k, std::string_view v) {
        const auto words = split_words(v);
        if (words.empty()) return;
        auto n = to_number<uint64_t>(words[0]);
        if (!n) return;
        // Sizes carry "kB" (1024 bytes); the HugePages_* counts carry no unit.
        const uint64_t bytes = words.size() > 1 && words[1] == "kB" ? *n * 1024 : *n;
        if (k == "MemTotal")
            m.total = bytes;
        else if (k == "MemAvailable")
            m.available = bytes;
        else if (k == "MemFree")
            m.free = bytes;
        else if (k == "SwapTotal")
            m.swap_total = bytes;
        else if (k == "SwapFree")
            m.swap_free = bytes;
        else if (k == "HugePages_Total")
            m.hugepages_total = *n;
        else if (k == "HugePages_Free")
            m.hugepages_free = *n;
        else if (k == "Hugepagesize")
            m.hugepage_size = bytes;
        else if (k == "AnonHugePages")
            m.anon_huge = bytes;
    });
    return m;
}

std::string parse_bracketed_choice(std::string_view text) {
    const size_t a = text.find('['), b = text.find(']');
    if (a == std::string_view::npos || b == std::string_view::npos || b < a) return "";
    return std::string(text.substr(a + 1, b - a - 1));
}

std::optional<uint64_t> parse_size_suffix(std::string_view text) {
    text = trim(text);
    if (text.empty()) return std::nullopt;
    uint64_t mult = 1;
    const char last = text.back();
    if (last == 'K' || last == 'k') mult = 1024;
    if (last == 'M') mult = 1024 * 1024;
    if (last == 'G') mult = 1024ull * 1024 * 1024;
    if (mult != 1) text.remove_suffix(1);
    auto v = to_number<uint64_t>(text);
    if (!v || trim(text).size() != text.size()) return std::nullopt;
    return *v * mult;
}

void parse_proc_stat(std::string_view text, process_counters& out) {
    const size_t close = text.rfind(')');
    if (close == std::string_view::npos) return;
    // After ") ": field 3 (state) is words[0]; minflt is field 10, majflt field 12 (proc(5), 1-based).
    const auto words = split_words(text.substr(close + 1));
    if (words.size() > 9) {
        out.minor_faults = to_number<uint64_t>(words[7]);
        out.major_faults = to_number<uint64_t>(words[9]);
    }
}

void parse_proc_status(std::string_view text, process_counters& out) {
    for_each_key_value(text, [&](std::string_view k, std::string_view v) {
        const auto words = split_words(v);
        if (words.empty()) return;
        const auto n = to_number<uint64_t>(words[0]);
        if (!n) return;
        if (k == "VmRSS")
            out.rss_bytes = *n * 1024;
        else if (k == "VmHWM")
            out.hwm_bytes = *n * 1024;
        else if (k == "voluntary_ctxt_switches")
            out.voluntary_switches = *n;
        else if (k == "nonvoluntary_ctxt_switches")
            out.involuntary_switches = *n;
    });
}

process_counters read_process_counters(const std::string& root) {
    process_counters c;
    if (auto t = read_text_file(root + "/proc/self/stat")) parse_proc_stat(*t, c);
    if (auto t = read_text_file(root + "/proc/self/status")) parse_proc_status(*t, c);
    return c;
}

std::optional<uint64_t> parse_smaps_anon_huge(std::string_view text, uint64_t start) {
    bool in_block = false;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        const size_t dash = line.find('-');
        // A mapping header starts with "start-end " in hex; attribute lines start with a "Key:" word.
        if (dash != std::string_view::npos && line.find(':') > line.find(' ')) {
            uint64_t a = 0;
            const auto r = std::from_chars(line.data(), line.data() + dash, a, 16);
            in_block = r.ec == std::errc() && r.ptr == line.data() + dash && a == start;
            continue;
        }
        if (in_block && line.rfind("AnonHugePages:", 0) == 0) {
            const auto words = split_words(line.substr(14));
            if (!words.empty())
                if (auto n = to_number<uint64_t>(words[0])) return *n * 1024;
            return std::nullopt;
        }
    }
    return std::nullopt;
}

std::optional<double> thermal_state::max_celsius() const {
    std::optional<double> m;
    for (const auto& z : zones)
        if (z.celsius && (!m || *z.celsius > *m)) m = z.celsius;
    return m;
}

thermal_state read_thermal_state(const std::string& root) {
    thermal_state s;
    const std::filesystem::path cpu_dir = root + "/sys/devices/system/cpu";
    double sum = 0;
    int n = 0;
    uint64_t throttles = 0;
    bool any_throttle = false;
    for (const auto& cpu : sorted_entries(cpu_dir, "cpu")) {
        if (auto t = read_text_file((cpu / "cpufreq/scaling_cur_freq").string()))
            if (auto khz = to_double(*t)) {
                sum += *khz / 1000.0;
                n++;
            }
        for (const char* f : {"thermal_throttle/core_throttle_count", "thermal_throttle/package_throttle_count"})
            if (auto t = read_text_file((cpu / f).string()))
                if (auto v = to_number<uint64_t>(*t)) {
                    throttles += *v;
                    any_throttle = true;
                }
    }
    if (n > 0) {
        s.mean_mhz = sum / n;
    } else if (auto t = read_text_file(root + "/proc/cpuinfo")) {
        s.mean_mhz = parse_cpuinfo(*t).mhz;
    }
    if (any_throttle) s.throttle_events = throttles;
    for (const auto& z : sorted_entries(root + "/sys/class/thermal", "thermal_zone")) {
        thermal_reading r;
        r.zone = z.filename().string();
        if (auto t = read_text_file((z / "type").string())) r.type = std::string(trim(*t));
        // temp is in millidegrees Celsius; some sensors fail to read (EIO) or report nonsense, kept as unknown.
        if (auto t = read_text_file((z / "temp").string()))
            if (auto v = to_double(*t); v && *v > -50000 && *v < 200000) r.celsius = *v / 1000.0;
        s.zones.push_back(r);
    }
    return s;
}

system_info read_system_info(const std::string& root) {
    system_info s;
    auto* missing = &s.unavailable;
    if (auto t = read_source(root + "/proc/cpuinfo", missing)) s.cpu = parse_cpuinfo(*t);
    for (const char* f : {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                          "avx512_bf16", "amx_tile", "neon", "asimd", "asimddp", "sve"})
        if (std::find(s.cpu.flags.begin(), s.cpu.flags.end(), f) != s.cpu.flags.end()) s.isa.push_back(f);

    // Hybrid parts (Intel P/E cores) expose one PMU folder per core kind listing its CPUs.
    for (const auto& [dir, kind] : {std::pair{"cpu_core", "performance"}, std::pair{"cpu_atom", "efficiency"}})
        if (auto t = read_text_file(root + "/sys/devices/" + dir + "/cpus"))
            if (const auto cpus = parse_cpu_list(*t); !cpus.empty()) s.core_kinds[kind] = int(cpus.size());

    std::map<std::pair<int, std::string>, std::set<std::string>> instances;  // (level, type) -> shared lists
    std::map<std::pair<int, std::string>, cache_info> caches;
    for (const auto& cpu : sorted_entries(root + "/sys/devices/system/cpu", "cpu"))
        for (const auto& idx : sorted_entries(cpu / "cache", "index")) {
            cache_info c;
            auto level = read_text_file((idx / "level").string());
            auto size = read_text_file((idx / "size").string());
            if (!level || !size) continue;
            c.level = to_number<int>(*level).value_or(0);
            c.bytes = parse_size_suffix(*size).value_or(0);
            if (auto t = read_text_file((idx / "type").string())) c.type = std::string(trim(*t));
            const std::string shared =
                std::string(trim(read_text_file((idx / "shared_cpu_list").string()).value_or("")));
            c.shared_by = int(parse_cpu_list(shared).size());
            const auto key = std::pair{c.level, c.type};
            instances[key].insert(shared);
            caches[key] = c;
        }
    for (auto& [key, c] : caches) {
        c.instances = int(instances[key].size());
        s.caches.push_back(c);
    }
    if (s.caches.empty()) s.unavailable.push_back(root + "/sys/devices/system/cpu/cpu*/cache");

    if (auto t = read_source(root + "/proc/meminfo", missing)) s.mem = parse_meminfo(*t);
    if (auto t = read_source(root + "/sys/kernel/mm/transparent_hugepage/enabled", missing))
        s.thp_enabled = parse_bracketed_choice(*t);
    if (auto t = read_source(root + "/sys/kernel/mm/transparent_hugepage/defrag", missing))
        s.thp_defrag = parse_bracketed_choice(*t);
    if (auto t = read_source(root + "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", missing)) s.governor = *t;
    if (auto t = read_text_file(root + "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
        if (auto khz = to_double(*t)) s.max_mhz = *khz / 1000.0;
    const std::filesystem::path damon = root + "/sys/kernel/mm/damon/admin/kdamonds";
    for (const auto& k : sorted_entries(damon, ""))
        if (read_source((k / "state").string(), nullptr).value_or("") == "on")
            for (const auto& c : sorted_entries(k / "contexts", ""))
                for (const auto& sc : sorted_entries(c / "schemes", ""))
                    if (auto a = read_source((sc / "action").string(), nullptr); a && !a->empty())
                        s.damon_actions.push_back(*a);
    if (auto t = read_source(root + "/sys/module/damon_reclaim/parameters/enabled", nullptr);
        t && (*t == "Y" || *t == "1"))
        s.damon_actions.push_back("damon_reclaim");
    s.thermal = read_thermal_state(root);
    if (s.thermal.zones.empty()) s.unavailable.push_back(root + "/sys/class/thermal/thermal_zone*");
    if (!s.thermal.throttle_events) s.unavailable.push_back(root + "/sys/devices/system/cpu/cpu*/thermal_throttle");
    return s;
}

}  // namespace memtile
