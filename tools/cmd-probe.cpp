// memtile probe [--threads N] [--json] [--svg FILE] [--quick] [--save|--no-save] [--stream-mib M] [--gpu]
// Memory access-pattern micro-benchmarks; the result becomes the machine profile (roofline denominator).
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "backends/cuda/cuda-backend.h"
#include "commands.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "observe/machine-profile.h"
#include "observe/mem-probe.h"
#include "observe/svg-charts.h"
#include "observe/system-info.h"

namespace memtile::cli {
namespace {

std::string size_text(uint64_t b) {
    if (b >= (uint64_t(1) << 30)) return fmt::format("{:.1f} GiB", double(b) / double(uint64_t(1) << 30));
    if (b >= (uint64_t(1) << 20) && b % (uint64_t(1) << 20) == 0) return fmt::format("{} MiB", b >> 20);
    return fmt::format("{} KiB", b >> 10);
}

class probe_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("probe", "Measure memory bandwidth and latency; store the machine profile");
        sub->add_option("-t,--threads", threads_, "Threads of the all-threads runs (default: physical cores)")
            ->check(CLI::Range(1, 1024));
        sub->add_flag("--json", json_,
                      "Print one JSON object (top level: sequential_read_gbps, the best read variant, for --threads)");
        sub->add_option("--svg", svg_, "Write the latency ladder and bandwidth bars as SVG");
        sub->add_flag("--quick", quick_, "Small sizes (256 MiB streams, 64 MiB ladder): seconds, not a profile");
        sub->add_flag("--save", save_, "Store the machine profile even with --quick");
        sub->add_flag("--no-save", no_save_, "Do not store the machine profile");
        sub->add_option("--stream-mib", stream_mib_, "Footprint of the read/copy/triad tests in MiB")
            ->check(CLI::Range(16, 1 << 20));
        sub->add_flag("--gpu", gpu_, "Probe the GPU instead: HBM and L2 read bandwidth (CUDA backend)");
        return sub;
    }

    int run() override {
        if (gpu_) return run_gpu();
        const int threads = threads_ > 0 ? threads_ : thread_pool::default_threads();
        probe_options o = quick_ ? probe_options::quick(threads) : probe_options{};
        o.threads = threads;
        if (stream_mib_ > 0) o.stream_bytes = size_t(stream_mib_) << 20;
        const system_info sys = read_system_info();
        const probe_result r = run_probe(o, [&](const std::string& s) {
            if (!json_) fmt::print(stderr, "[probe] {}\n", s);
        });
        const bool save = !no_save_ && (save_ || !quick_);
        std::string saved;
        if (save) saved = save_machine_profile(r, sys.cpu.model);
        if (!svg_.empty()) {
            std::ofstream f(svg_);
            f << probe_svg(r, sys.caches);
            if (!f) fail("probe", "cannot write '{}'", svg_);
        }
        if (json_) {
            auto j = probe_to_json(r);
            j["cpu_model"] = sys.cpu.model;
            j["quick"] = quick_;
            j["profile_path"] = saved;
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        fmt::print("memtile probe on {} ({} threads, {:.1f} s)\n\n",
                   sys.cpu.model.empty() ? "unknown CPU" : sys.cpu.model, threads, r.seconds);
        fmt::print("{:<16} {:>7} {:>10} {:>12} {:>10}  {}\n", "test", "threads", "GB/s", "ns/access", "size", "note");
        for (const auto& b : r.bandwidth)
            fmt::print("{:<16} {:>7} {:>10.2f} {:>12} {:>10}  {}\n", b.test, b.threads, b.gbps,
                       b.ns_per_access > 0 ? fmt::format("{:.2f}", b.ns_per_access) : "-", size_text(b.bytes), b.note);
        fmt::print("\nlatency ladder (dependent loads, random order):\n");
        for (size_t i = 0; i < r.ladder.size(); i++)
            fmt::print("  {:>9} {:>8.2f} ns{}", size_text(r.ladder[i].bytes), r.ladder[i].ns, i % 4 == 3 ? "\n" : "");
        if (r.ladder.size() % 4) fmt::print("\n");
        fmt::print("\npointer chase over {} on 4 KiB pages: {:.1f} ns, on 2 MiB pages: {:.1f} ns ({})\n",
                   size_text(o.random_bytes), r.page_chase_ns_4k, r.page_chase_ns_2m, r.huge_note);
        if (!r.read_variants.empty()) {
            fmt::print("\nsequential read variants (GB/s, best of the interleaved rounds):\n");
            for (const auto& v : r.read_variants)
                if (v.threads == 1) {
                    fmt::print("  {:<24} {:>7.2f}", v.variant, v.gbps);
                    for (const auto& w : r.read_variants)
                        if (w.variant == v.variant && w.threads != 1)
                            fmt::print(" {:>7.2f} ({} threads)", w.gbps, w.threads);
                    fmt::print("\n");
                }
        }
        const auto named = [&](const char* test, int t) {
            for (const auto& b : r.bandwidth)
                if (b.test == test && b.threads == t) return b;
            return bandwidth_result{};
        };
        fmt::print(
            "\nsequential read (best variant): {:.2f} GB/s with 1 thread ({}), {:.2f} GB/s with {} threads ({})\n",
            r.read_gbps(1), named("read_best", 1).note, r.read_gbps(threads), threads,
            named("read_best", threads).note);
        fmt::print("sequential read (plain loop): {:.2f} GB/s with 1 thread, {:.2f} GB/s with {} threads\n",
                   r.plain_read_gbps(1), r.plain_read_gbps(threads), threads);
        if (!saved.empty())
            fmt::print("machine profile written to {} (used by bench, run --verbose, diag and serve)\n", saved);
        else
            fmt::print("machine profile not written ({}); run without --quick to store one\n",
                       quick_ ? "--quick" : "--no-save");
        if (!svg_.empty()) fmt::print("figure written to {}\n", svg_);
        return 0;
    }

private:
    int run_gpu() const {
        cuda::require_device();
        const cuda::bandwidth_probe b = cuda::probe_bandwidth();
        if (json_) {
            const nlohmann::json j = {{"device", cuda::device_description()},
                                      {"hbm_read_gbps", b.hbm_read_gbs},
                                      {"l2_read_gbps", b.l2_read_gbs}};
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        fmt::print("memtile probe --gpu on {}\n", cuda::device_description());
        fmt::print("HBM read  {:>9.0f} GB/s  (4 GiB streamed with 16-byte loads, median of passes)\n", b.hbm_read_gbs);
        fmt::print("L2 read   {:>9.0f} GB/s  (16 MiB buffer resident in L2)\n", b.l2_read_gbs);
        fmt::print(
            "memtile bench --device cuda measures the HBM figure again in its own run for the roofline column\n");
        return 0;
    }

    int threads_ = 0, stream_mib_ = 0;
    bool gpu_ = false;
    bool json_ = false, quick_ = false, save_ = false, no_save_ = false;
    std::string svg_;
};

}  // namespace
std::unique_ptr<command> make_probe_command() {
    return std::make_unique<probe_command>();
}
}  // namespace memtile::cli
