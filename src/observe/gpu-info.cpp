#include "observe/gpu-info.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace memtile {
namespace {

std::string trimmed(std::string s) {
    const auto a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

std::optional<double> number(const std::string& s) {
    try {
        size_t used = 0;
        const double v = std::stod(s, &used);
        if (used != s.size()) return std::nullopt;
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::string find_on_path(const std::string& exe) {
    const char* path = std::getenv("PATH");
    if (!path) return "";
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
        if (!dir.empty() && ::access((dir + "/" + exe).c_str(), X_OK) == 0) return dir + "/" + exe;
    return "";
}

}  // namespace

std::vector<gpu_info> parse_nvidia_smi_csv(std::string_view text) {
    std::vector<gpu_info> out;
    std::stringstream lines{std::string(text)};
    std::string line;
    while (std::getline(lines, line)) {
        if (trimmed(line).empty()) continue;
        std::vector<std::string> f;
        std::stringstream ls(line);
        std::string cell;
        while (std::getline(ls, cell, ',')) f.push_back(trimmed(cell));
        if (f.empty() || f[0].empty()) continue;
        gpu_info g;
        g.name = f[0];
        std::optional<double>* fields[] = {&g.memory_total_mib, &g.memory_used_mib, &g.sm_clock_mhz,
                                           &g.max_sm_clock_mhz, &g.celsius};
        for (size_t i = 0; i < 5 && i + 1 < f.size(); i++) *fields[i] = number(f[i + 1]);
        out.push_back(g);
    }
    return out;
}

std::vector<gpu_info> query_nvidia_gpus(std::string& status) {
    const std::string exe = find_on_path("nvidia-smi");
    if (exe.empty()) {
        status = "nvidia-smi not found";
        return {};
    }
    const std::string cmd = exe +
                            " --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,temperature.gpu"
                            " --format=csv,noheader,nounits 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) {
        status = "nvidia-smi could not be started";
        return {};
    }
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    const int rc = ::pclose(p);
    auto gpus = parse_nvidia_smi_csv(text);
    status = gpus.empty() ? (rc != 0 ? "nvidia-smi failed (no driver or no GPU)" : "no NVIDIA GPU") : "nvidia-smi";
    return gpus;
}

}  // namespace memtile
