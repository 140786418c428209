#include "bench-extras.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/thread-pool.h"
#include "model-flags.h"
#include "observe/svg-charts.h"
#include "observe/system-info.h"

namespace memtile::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Fraction of the file's pages in the page cache (mincore on a fresh mapping; faults nothing in), or nullopt.
std::optional<double> cached_fraction(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    const off_t size = ::lseek(fd, 0, SEEK_END);
    std::optional<double> out;
    if (size > 0) {
        void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            const size_t page = size_t(::sysconf(_SC_PAGESIZE));
            std::vector<unsigned char> v((size_t(size) + page - 1) / page);
            if (::mincore(p, size_t(size), v.data()) == 0)
                out =
                    double(std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; })) / double(v.size());
            ::munmap(p, size_t(size));
        }
    }
    ::close(fd);
    return out;
}

bool drop_from_page_cache(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ::fdatasync(fd);
    const bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    ::close(fd);
    return ok;
}

struct fault_counts {
    long minor = 0, major = 0;
};
fault_counts faults_now() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return {u.ru_minflt, u.ru_majflt};
}

}  // namespace

std::string huge_page_note(const mapped_file& f) {
    if (f.memory_mode() == "hugetlbfs") return "hugetlbfs";
    if (f.memory_mode() != "thp") return "";
    const auto smaps = read_text_file("/proc/self/smaps");
    const auto huge = smaps ? parse_smaps_anon_huge(*smaps, reinterpret_cast<uintptr_t>(f.data())) : std::nullopt;
    if (!huge) return "thp, coverage unavailable";
    return fmt::format("thp: {} of {} MiB in 2 MiB pages", *huge >> 20, (f.size() + (1 << 20) - 1) >> 20);
}

void cold_start_report(const std::string& path, const model_flags& flags, int threads, const std::vector<int>& cpus,
                       FILE* out) {
    fmt::print(out, "cold start: {} dropped from the page cache (posix_fadvise DONTNEED) before each load\n", path);
    fmt::print(out, "| load | cached before | load ms | first token ms | total ms | major faults | minor faults |\n");
    fmt::print(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const bool prefault : {false, true}) {
        model_flags f = flags;
        f.prefault = prefault;
        const bool dropped = drop_from_page_cache(path);
        const auto cached = cached_fraction(path);
        const fault_counts f0 = faults_now();
        const auto t0 = clock_type::now();
        thread_pool pool(threads, cpus);
        auto model = transformer::load(path, f.options(), &pool);
        forward_context ctx(*model, 8, f.kv_dtype(), pool);
        const double load_ms = ms_since(t0);
        const int32_t tok = 1 % int32_t(model->config().n_vocab);
        const auto t1 = clock_type::now();
        const auto logits = ctx.forward(std::span<const int32_t>(&tok, 1));
        (void)std::max_element(logits.begin(), logits.end());
        const double first_ms = ms_since(t1);
        const fault_counts f1 = faults_now();
        fmt::print(out, "| {} | {} | {:.1f} | {:.1f} | {:.1f} | {} | {} |\n", f.memory_mode(),
                   !dropped ? "drop failed"
                   : cached ? fmt::format("{:.0f} %", *cached * 100)
                            : "unavailable",
                   load_ms, first_ms, load_ms + first_ms, f1.major - f0.major, f1.minor - f0.minor);
    }
    fmt::print(out, "(pages mapped by another process stay cached; 'cached before' shows what the drop achieved)\n\n");
}

void run_soak(const transformer& model, const soak_options& o) {
    thread_pool pool(o.threads, o.cpus);
    forward_context ctx(model, o.n_ctx, o.kv_type, pool);
    std::vector<soak_sample> samples;
    fmt::print(stderr, "[soak] {} s of decode with {} thread{}, context {} (emptied when full)\n", o.seconds, o.threads,
               o.threads == 1 ? "" : "s", o.n_ctx);
    fmt::print("{:>6} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>9}\n", "t s", "tok/s", "MHz", "degC", "throttle",
               "RSS MiB", "minflt", "majflt");
    const auto start = clock_type::now();
    auto next = start + std::chrono::seconds(1);
    int32_t tok = 1 % int32_t(model.config().n_vocab);
    uint64_t tokens = 0;
    fault_counts fprev = faults_now();
    auto tprev = start;
    for (int sec = 1; sec <= o.seconds;) {
        if (ctx.used() >= ctx.n_ctx()) ctx.truncate(0);
        const auto logits = ctx.forward(std::span<const int32_t>(&tok, 1));
        tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        tokens++;
        const auto now = clock_type::now();
        if (now < next) continue;
        const thermal_state th = read_thermal_state();
        const process_counters pc = read_process_counters();
        const fault_counts f = faults_now();
        soak_sample s;
        s.t_s = std::chrono::duration<double>(now - start).count();
        s.tokens_per_second = double(tokens) / std::chrono::duration<double>(now - tprev).count();
        s.mhz = th.mean_mhz;
        s.celsius = th.max_celsius();
        s.throttle_events = th.throttle_events;
        s.rss_mib = double(pc.rss_bytes.value_or(0)) / double(1 << 20);
        s.minor_faults = uint64_t(f.minor - fprev.minor);
        s.major_faults = uint64_t(f.major - fprev.major);
        samples.push_back(s);
        fmt::print("{:>6.0f} {:>9.2f} {:>9} {:>8} {:>9} {:>9.1f} {:>8} {:>9}\n", s.t_s, s.tokens_per_second,
                   s.mhz ? fmt::format("{:.0f}", *s.mhz) : "n/a", s.celsius ? fmt::format("{:.1f}", *s.celsius) : "n/a",
                   s.throttle_events ? std::to_string(*s.throttle_events) : "n/a", s.rss_mib, s.minor_faults,
                   s.major_faults);
        std::fflush(stdout);
        tokens = 0;
        fprev = f;
        tprev = clock_type::now();  // sampling time is not charged to the next second's tokens
        next = tprev + std::chrono::seconds(1);
        sec++;
    }
    // First and last window side by side: one minute, or a third of a shorter run.
    const double total = samples.empty() ? 0 : samples.back().t_s;
    const double w = std::max(1.0, std::min(60.0, total / 3.0));
    struct agg {
        double tps = 0, mhz = 0, rss = 0, faults = 0;
        int n = 0, n_mhz = 0;
        std::optional<double> max_c;
        std::optional<uint64_t> throttle_first, throttle_last;
    };
    auto window = [&](bool first) {
        agg a;
        for (const auto& s : samples) {
            if (first ? s.t_s > w + 0.5 : s.t_s < total - w + 0.5) continue;
            a.n++;
            a.tps += s.tokens_per_second;
            a.rss = std::max(a.rss, s.rss_mib);
            a.faults += double(s.minor_faults + s.major_faults);
            if (s.mhz) {
                a.mhz += *s.mhz;
                a.n_mhz++;
            }
            if (s.celsius && (!a.max_c || *s.celsius > *a.max_c)) a.max_c = s.celsius;
            if (s.throttle_events) {
                if (!a.throttle_first) a.throttle_first = s.throttle_events;
                a.throttle_last = s.throttle_events;
            }
        }
        return a;
    };
    const agg a = window(true), b = window(false);
    auto mean = [](double sum, int n) { return n ? fmt::format("{:.2f}", sum / n) : std::string("n/a"); };
    fmt::print("\nfirst {:.0f} s vs last {:.0f} s\n", w, w);
    fmt::print("| metric | first | last |\n| --- | ---: | ---: |\n");
    fmt::print("| tokens/s (mean) | {} | {} |\n", mean(a.tps, a.n), mean(b.tps, b.n));
    fmt::print("| CPU MHz (mean) | {} | {} |\n", mean(a.mhz, a.n_mhz), mean(b.mhz, b.n_mhz));
    fmt::print("| hottest zone degC (max) | {} | {} |\n", a.max_c ? fmt::format("{:.1f}", *a.max_c) : "n/a",
               b.max_c ? fmt::format("{:.1f}", *b.max_c) : "n/a");
    auto thr = [](const agg& x) {
        return x.throttle_first ? std::to_string(*x.throttle_last - *x.throttle_first) : std::string("n/a");
    };
    fmt::print("| throttle events in window | {} | {} |\n", thr(a), thr(b));
    fmt::print("| RSS MiB (max) | {:.1f} | {:.1f} |\n", a.rss, b.rss);
    fmt::print("| page faults/s (mean) | {} | {} |\n", mean(a.faults, a.n), mean(b.faults, b.n));
    if (a.n && b.n && a.tps > 0)
        fmt::print("decode speed changed by {:+.1f} % from the first to the last window\n",
                   (b.tps / b.n) / (a.tps / a.n) * 100 - 100);
    if (!o.svg_path.empty()) {
        std::ofstream f(o.svg_path);
        f << soak_svg(
            fmt::format("memtile bench --soak {}: {} thread{}", o.seconds, o.threads, o.threads == 1 ? "" : "s"),
            samples);
        if (!f) fail("bench", "cannot write '{}'", o.svg_path);
    }
}

}  // namespace memtile::cli
