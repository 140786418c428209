// memtile diag [--json] [-m MODEL]: one screen that explains this machine for LLM work, then warnings.
#include <fmt/core.h>

#include <filesystem>

#include "commands.h"
#include "core/units.h"
#include "observe/diagnostics.h"

namespace memtile::cli {
namespace {

std::string or_unavailable(const std::optional<uint64_t>& b) {
    return b ? format_bytes(*b, true) : "unavailable";
}

class diag_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("diag", "Explain this machine for LLM inference (CPU, memory, pages, heat)");
        sub->add_flag("--json", json_, "Print one JSON object");
        sub->add_option("-m,--model", model_, "Also check that this model fits in memory");
        return sub;
    }

    int run() override {
        diag_input d;
        d.sys = read_system_info();
        d.gpus = query_nvidia_gpus(d.gpu_status);
        d.backends = list_backends();
        d.profile = load_machine_profile();
        d.profile_path = machine_profile_path();
        if (!model_.empty()) {
            d.model_path = model_;
            std::error_code ec;
            const auto n = std::filesystem::file_size(model_, ec);
            if (!ec) d.model_bytes = n;
        }
        if (json_) {
            fmt::print("{}\n", diag_to_json(d).dump(2));
            return 0;
        }
        const auto& s = d.sys;
        fmt::print("CPU        {} ({} logical CPUs, {} cores{})\n", s.cpu.model.empty() ? "unavailable" : s.cpu.model,
                   s.cpu.logical_cpus, s.cpu.physical_cores, s.core_kinds.empty() ? ", all of one kind" : "");
        for (const auto& [kind, n] : s.core_kinds) fmt::print("           {} {} cores\n", n, kind);
        std::string isa;
        for (const auto& f : s.isa) isa += f + " ";
        fmt::print("ISA        {}\n", isa.empty() ? "(none of the SIMD extensions memtile uses)" : isa);
        for (const auto& c : s.caches)
            fmt::print("cache      L{} {:<11} {} x {} (shared by {} CPU{})\n", c.level, c.type, c.instances,
                       format_bytes(c.bytes, true), c.shared_by, c.shared_by == 1 ? "" : "s");
        fmt::print("memory     {} total, {} available\n", or_unavailable(s.mem.total), or_unavailable(s.mem.available));
        if (s.mem.swap_total && s.mem.swap_free)
            fmt::print("swap       {} total, {} in use\n", format_bytes(*s.mem.swap_total, true),
                       format_bytes(*s.mem.swap_total - *s.mem.swap_free, true));
        else
            fmt::print("swap       unavailable\n");
        fmt::print("huge pages THP {} (defrag {}); hugetlbfs pool {} of {} free ({} pages)\n",
                   s.thp_enabled.empty() ? "unavailable" : s.thp_enabled,
                   s.thp_defrag.empty() ? "unavailable" : s.thp_defrag,
                   s.mem.hugepages_free ? std::to_string(*s.mem.hugepages_free) : "?",
                   s.mem.hugepages_total ? std::to_string(*s.mem.hugepages_total) : "?",
                   s.mem.hugepage_size ? format_bytes(*s.mem.hugepage_size, true) : "?");
        fmt::print("frequency  governor {}, now {}, max {}\n", s.governor.empty() ? "unavailable" : s.governor,
                   s.thermal.mean_mhz ? fmt::format("{:.0f} MHz", *s.thermal.mean_mhz) : "unavailable",
                   s.max_mhz ? fmt::format("{:.0f} MHz", *s.max_mhz) : "unavailable");
        if (s.thermal.zones.empty()) fmt::print("thermal    unavailable (no readable thermal zones)\n");
        for (const auto& z : s.thermal.zones)
            fmt::print("thermal    {} {}: {}\n", z.zone, z.type,
                       z.celsius ? fmt::format("{:.1f} degC", *z.celsius) : "unavailable");
        fmt::print("throttling {}\n", s.thermal.throttle_events
                                          ? fmt::format("{} events since boot", *s.thermal.throttle_events)
                                          : "counters unavailable");
        if (d.gpus.empty()) fmt::print("GPU        none ({})\n", d.gpu_status);
        for (const auto& g : d.gpus)
            fmt::print("GPU        {}: {:.0f} MiB, SM clock {:.0f} / {:.0f} MHz\n", g.name,
                       g.memory_total_mib.value_or(0), g.sm_clock_mhz.value_or(0), g.max_sm_clock_mhz.value_or(0));
        for (const auto& b : d.backends)
            fmt::print("backend    {:<5} {}, {}{}\n", b.name, b.compiled ? "compiled in" : "not compiled in",
                       b.device_present ? "usable device here" : "no usable device",
                       b.detail.empty() ? "" : " (" + b.detail + ")");
        if (d.profile)
            fmt::print("probe      {:.2f} GB/s sequential read with 1 thread, {:.2f} GB/s with {} ({}, {})\n",
                       d.profile->read_gbps_1, d.profile->read_gbps_all, d.profile->threads, d.profile->created,
                       d.profile->path);
        else
            fmt::print("probe      no machine profile yet (memtile probe)\n");
        if (!s.unavailable.empty()) {
            fmt::print("unavailable sources:");
            for (const auto& u : s.unavailable) fmt::print(" {}", u);
            fmt::print("\n");
        }
        const auto warnings = diag_warnings(d);
        fmt::print("\n{}\n", warnings.empty() ? "no warnings" : "warnings:");
        for (const auto& w : warnings) fmt::print("  - {}\n", w);
        return 0;
    }

private:
    bool json_ = false;
    std::string model_;
};

}  // namespace
std::unique_ptr<command> make_diag_command() {
    return std::make_unique<diag_command>();
}
}  // namespace memtile::cli
