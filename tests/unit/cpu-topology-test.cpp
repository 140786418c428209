// CPU topology from sysfs: fake /sys trees for an Intel hybrid part, an Arm big.LITTLE board, a uniform SMT
// server and a tree without topology files; plus the real machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/cpu-topology.h"
#include "core/thread-pool.h"

using namespace memtile;
namespace fs = std::filesystem;

namespace {

class fake_sysfs {
public:
    explicit fake_sysfs(const std::string& name)
        : root_(fs::temp_directory_path() / ("memtile-topo-" + name + "-" + std::to_string(getpid()))) {
        fs::remove_all(root_);
    }
    ~fake_sysfs() { fs::remove_all(root_); }
    void put(const std::string& rel, const std::string& text) {
        const fs::path p = root_ / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text << "\n";
    }
    void cpu(int id, const std::string& siblings, const std::string& file = "", const std::string& value = "") {
        const std::string base = "sys/devices/system/cpu/cpu" + std::to_string(id);
        if (!siblings.empty()) put(base + "/topology/core_cpus_list", siblings);
        if (!file.empty()) put(base + "/" + file, value);
    }
    std::string root() const { return root_.string(); }

private:
    fs::path root_;
};

std::vector<int> range(int n) {
    std::vector<int> v;
    for (int i = 0; i < n; i++) v.push_back(i);
    return v;
}

}  // namespace

TEST(cpu_topology, parse_cpu_list_is_lenient) {
    EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(parse_cpu_list("x,2,5-3,4"), (std::vector<int>{2, 4}));
    EXPECT_TRUE(parse_cpu_list("").empty());
}

// i7-1360P-like: 2 P-cores with SMT (0-1, 2-3) and 4 E-cores (4..7), kinds from the PMU folders.
TEST(cpu_topology, intel_hybrid_pmu_folders) {
    fake_sysfs f("intel");
    for (int c = 0; c < 4; c++) f.cpu(c, c < 2 ? "0-1" : "2-3");
    for (int c = 4; c < 8; c++) f.cpu(c, std::to_string(c));
    f.put("sys/devices/cpu_core/cpus", "0-3");
    f.put("sys/devices/cpu_atom/cpus", "4-7");
    const cpu_topology t = read_cpu_topology(f.root(), range(8));
    ASSERT_EQ(t.cores.size(), 6u);
    EXPECT_TRUE(t.hybrid);
    EXPECT_EQ(t.kind_source, "cpu_core/cpu_atom");
    EXPECT_EQ(t.performance_cores(), 2);
    EXPECT_EQ(t.efficiency_cores(), 4);
    EXPECT_EQ(t.performance_cpus(), (std::vector<int>{0, 2}));
    EXPECT_EQ(t.cores[0].cpus, (std::vector<int>{0, 1}));

    // An affinity mask of E-cores only: no hybrid choice left, they are this process's cores.
    const cpu_topology e = read_cpu_topology(f.root(), {5, 6});
    EXPECT_FALSE(e.hybrid);
    EXPECT_EQ(e.performance_cores(), 2);
    // A mask that cuts a P-core's sibling: the core keeps only the usable CPU.
    const cpu_topology m = read_cpu_topology(f.root(), {1, 4});
    ASSERT_EQ(m.cores.size(), 2u);
    EXPECT_EQ(m.cores[0].cpus, (std::vector<int>{1}));
    EXPECT_EQ(m.performance_cpus(), (std::vector<int>{1}));
}

// Arm DynamIQ-like: 1 prime (1024) + 3 big (900) + 4 little (400); prime and big are performance cores.
TEST(cpu_topology, arm_cpu_capacity) {
    fake_sysfs f("arm");
    const int cap[8] = {400, 400, 400, 400, 900, 900, 900, 1024};
    for (int c = 0; c < 8; c++) f.cpu(c, std::to_string(c), "cpu_capacity", std::to_string(cap[c]));
    const cpu_topology t = read_cpu_topology(f.root(), range(8));
    EXPECT_TRUE(t.hybrid);
    EXPECT_EQ(t.kind_source, "cpu_capacity");
    EXPECT_EQ(t.performance_cpus(), (std::vector<int>{4, 5, 6, 7}));
}

// A server whose favoured cores boost 5 % higher is not hybrid; SMT siblings count once.
TEST(cpu_topology, uniform_smt_server_with_favoured_cores) {
    fake_sysfs f("server");
    for (int c = 0; c < 8; c++)
        f.cpu(c,
              c % 4 == 0   ? "0,4"
              : c % 4 == 1 ? "1,5"
              : c % 4 == 2 ? "2,6"
                           : "3,7",
              "cpufreq/cpuinfo_max_freq", c % 4 == 0 ? "3150000" : "3000000");
    const cpu_topology t = read_cpu_topology(f.root(), range(8));
    EXPECT_FALSE(t.hybrid);
    EXPECT_EQ(t.kind_source, "uniform");
    EXPECT_EQ(t.performance_cores(), 4);
    EXPECT_EQ(t.cores[1].cpus, (std::vector<int>{1, 5}));
}

// Frequencies that do tell two kinds apart when nothing else does.
TEST(cpu_topology, max_frequency_fallback) {
    fake_sysfs f("freq");
    for (int c = 0; c < 4; c++) f.cpu(c, std::to_string(c), "cpufreq/cpuinfo_max_freq", c < 2 ? "4800000" : "3200000");
    const cpu_topology t = read_cpu_topology(f.root(), range(4));
    EXPECT_TRUE(t.hybrid);
    EXPECT_EQ(t.kind_source, "cpuinfo_max_freq");
    EXPECT_EQ(t.performance_cpus(), (std::vector<int>{0, 1}));
}

// Containers often hide sysfs: each CPU counts as its own performance core.
TEST(cpu_topology, missing_sysfs) {
    fake_sysfs f("empty");
    const cpu_topology t = read_cpu_topology(f.root(), {0, 1, 2});
    EXPECT_EQ(t.cores.size(), 3u);
    EXPECT_FALSE(t.hybrid);
    EXPECT_EQ(t.performance_cores(), 3);
}

TEST(cpu_topology, this_machine_defaults) {
    const cpu_topology& t = this_machine_topology();
    ASSERT_FALSE(t.cores.empty());
    EXPECT_EQ(thread_pool::default_threads(), t.performance_cores());
    const auto cpus = thread_pool::default_cpus(thread_pool::default_threads());
    if (t.hybrid)
        EXPECT_EQ(cpus, t.performance_cpus());
    else
        EXPECT_TRUE(cpus.empty()) << "uniform machines are left to the scheduler";
    EXPECT_TRUE(thread_pool::default_cpus(1024).empty());
}
