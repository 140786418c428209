// Parsers of /proc and /sys on recorded fixtures (tests/fixtures/proc/): the development machine (epyc-kvm) and
// a hand-written hybrid laptop with odd and missing fields (hybrid-odd, see its README.md).
#include <gtest/gtest.h>

#include <algorithm>

#include "observe/system-info.h"

namespace memtile {
namespace {

std::string fixture(const std::string& name) {
    return std::string(MEMTILE_SOURCE_DIR) + "/tests/fixtures/proc/" + name;
}

TEST(observe_system_info, epyc_kvm_fixture) {
    const system_info s = read_system_info(fixture("epyc-kvm"));
    EXPECT_EQ(s.cpu.model, "AMD EPYC");
    EXPECT_EQ(s.cpu.logical_cpus, 2);
    EXPECT_EQ(s.cpu.physical_cores, 2);
    ASSERT_TRUE(s.cpu.mhz.has_value());
    EXPECT_GT(*s.cpu.mhz, 1000.0);
    EXPECT_TRUE(std::find(s.isa.begin(), s.isa.end(), "avx2") != s.isa.end());
    EXPECT_TRUE(std::find(s.isa.begin(), s.isa.end(), "avx512f") == s.isa.end());
    EXPECT_TRUE(s.core_kinds.empty());
    ASSERT_EQ(s.caches.size(), 4u);  // L1d, L1i, L2, L3
    const auto l3 = std::find_if(s.caches.begin(), s.caches.end(), [](const cache_info& c) { return c.level == 3; });
    ASSERT_NE(l3, s.caches.end());
    EXPECT_EQ(l3->bytes, uint64_t(32) << 20);
    EXPECT_EQ(l3->instances, 1);
    EXPECT_EQ(l3->shared_by, 2);
    const auto l2 = std::find_if(s.caches.begin(), s.caches.end(), [](const cache_info& c) { return c.level == 2; });
    EXPECT_EQ(l2->instances, 2);
    ASSERT_TRUE(s.mem.total && s.mem.available);
    EXPECT_GT(*s.mem.total, *s.mem.available);
    EXPECT_EQ(s.mem.hugepage_size.value_or(0), 2048u * 1024);
    EXPECT_EQ(s.thp_enabled, "madvise");
    EXPECT_EQ(s.damon_actions, std::vector<std::string>{"pageout"});  // kdamond 0 on, paddr, one pageout scheme
    // No cpufreq, thermal zones or throttle counters on this VM: listed as unavailable, not errors.
    EXPECT_EQ(s.governor, "");
    EXPECT_TRUE(s.thermal.zones.empty());
    EXPECT_FALSE(s.thermal.throttle_events.has_value());
    EXPECT_TRUE(std::any_of(s.unavailable.begin(), s.unavailable.end(),
                            [](const std::string& p) { return p.find("scaling_governor") != std::string::npos; }));
    // The mean frequency falls back to /proc/cpuinfo's "cpu MHz".
    EXPECT_TRUE(s.thermal.mean_mhz.has_value());
}

TEST(observe_system_info, hybrid_odd_fixture) {
    const system_info s = read_system_info(fixture("hybrid-odd"));
    EXPECT_EQ(s.cpu.model, "13th Gen Intel(R) Core(TM) i7-1360P");
    EXPECT_EQ(s.cpu.logical_cpus, 2);
    EXPECT_EQ(s.cpu.physical_cores, 2);           // ids missing on processor 1: counted as logical CPUs
    EXPECT_DOUBLE_EQ(s.cpu.mhz.value(), 2400.0);  // "fast" ignored
    EXPECT_TRUE(std::find(s.isa.begin(), s.isa.end(), "avx_vnni") != s.isa.end());
    EXPECT_EQ(s.core_kinds.at("performance"), 2);
    EXPECT_EQ(s.core_kinds.at("efficiency"), 5);
    EXPECT_FALSE(s.mem.available.has_value());
    EXPECT_EQ(s.mem.swap_total.value(), 8000000ull * 1024);
    EXPECT_EQ(s.mem.swap_free.value(), 2000000ull * 1024);
    EXPECT_EQ(s.mem.hugepages_total.value(), 16u);
    EXPECT_EQ(s.mem.hugepages_free.value(), 4u);
    EXPECT_EQ(s.thp_enabled, "never");
    EXPECT_EQ(s.thp_defrag, "");  // file absent
    // kdamond 0 is off (its pageout scheme does not count); the damon_reclaim module is enabled.
    EXPECT_EQ(s.damon_actions, std::vector<std::string>{"damon_reclaim"});
    EXPECT_EQ(s.governor, "powersave");
    EXPECT_DOUBLE_EQ(s.max_mhz.value(), 4800.0);
    EXPECT_DOUBLE_EQ(s.thermal.mean_mhz.value(), 1500.0);
    EXPECT_EQ(s.thermal.throttle_events.value(), 5u);  // "oops" skipped
    ASSERT_EQ(s.thermal.zones.size(), 3u);
    EXPECT_EQ(s.thermal.zones[0].zone, "thermal_zone0");
    EXPECT_EQ(s.thermal.zones[2].zone, "thermal_zone10");  // numeric, not lexical, order
    EXPECT_FALSE(s.thermal.zones[1].celsius.has_value());
    EXPECT_DOUBLE_EQ(s.thermal.max_celsius().value(), 97.5);
    ASSERT_EQ(s.caches.size(), 2u);
    EXPECT_EQ(s.caches[1].bytes, 18432ull * 1024);
    EXPECT_EQ(s.caches[1].shared_by, 8);
}

TEST(observe_system_info, missing_root_is_unavailable_not_an_error) {
    const system_info s = read_system_info(fixture("does-not-exist"));
    EXPECT_EQ(s.cpu.logical_cpus, 0);
    EXPECT_TRUE(s.damon_actions.empty());
    EXPECT_TRUE(s.caches.empty());
    EXPECT_GE(s.unavailable.size(), 5u);
    const process_counters c = read_process_counters(fixture("does-not-exist"));
    EXPECT_FALSE(c.rss_bytes.has_value());
}

TEST(observe_system_info, process_counters_with_odd_command_name) {
    const process_counters c = read_process_counters(fixture("hybrid-odd"));
    EXPECT_EQ(c.minor_faults.value(), 1234u);
    EXPECT_EQ(c.major_faults.value(), 7u);
    EXPECT_EQ(c.rss_bytes.value(), 10240u * 1024);
    EXPECT_EQ(c.hwm_bytes.value(), 20480u * 1024);
    EXPECT_EQ(c.voluntary_switches.value(), 5u);
    EXPECT_FALSE(c.involuntary_switches.has_value());
    const process_counters live = read_process_counters();
    EXPECT_GT(live.rss_bytes.value_or(0), 0u);
}

TEST(observe_system_info, small_parsers) {
    EXPECT_EQ(parse_size_suffix("32K").value(), 32768u);
    EXPECT_EQ(parse_size_suffix("2M\n").value(), 2u << 20);
    EXPECT_EQ(parse_size_suffix("77").value(), 77u);
    EXPECT_FALSE(parse_size_suffix("K").has_value());
    EXPECT_FALSE(parse_size_suffix("").has_value());
    EXPECT_EQ(parse_bracketed_choice("[always] madvise never"), "always");
    EXPECT_EQ(parse_bracketed_choice("always madvise never"), "");
}

TEST(observe_system_info, smaps_anon_huge_of_one_mapping) {
    const std::string smaps =
        "7f0000000000-7f0000200000 rw-p 00000000 00:00 0 \n"
        "Size:               2048 kB\n"
        "AnonHugePages:         0 kB\n"
        "7f1000000000-7f1008000000 rw-p 00000000 00:00 0                          [heap]\n"
        "Size:             131072 kB\n"
        "AnonHugePages:    129024 kB\n";
    EXPECT_EQ(parse_smaps_anon_huge(smaps, 0x7f1000000000ull).value(), 129024u * 1024);
    EXPECT_EQ(parse_smaps_anon_huge(smaps, 0x7f0000000000ull).value(), 0u);
    EXPECT_FALSE(parse_smaps_anon_huge(smaps, 0x1234).has_value());
}

}  // namespace
}  // namespace memtile
