#include "observe/machine-profile.h"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "observe/system-info.h"

namespace memtile {

nlohmann::json probe_to_json(const probe_result& r) {
    nlohmann::json j;
    j["sequential_read_gbps"] = r.read_gbps(r.threads);
    j["sequential_read_gbps_1_thread"] = r.read_gbps(1);
    j["sequential_read_plain_gbps"] = r.plain_read_gbps(r.threads);
    j["sequential_read_plain_gbps_1_thread"] = r.plain_read_gbps(1);
    j["threads"] = r.threads;
    j["seconds"] = r.seconds;
    auto& bw = j["bandwidth"] = nlohmann::json::array();
    for (const auto& b : r.bandwidth) {
        nlohmann::json e{{"test", b.test}, {"threads", b.threads}, {"gbps", b.gbps}, {"bytes", b.bytes}};
        if (b.ns_per_access > 0) e["ns_per_access"] = b.ns_per_access;
        if (!b.note.empty()) e["note"] = b.note;
        bw.push_back(e);
    }
    auto& rv = j["read_variants"] = nlohmann::json::array();
    for (const auto& v : r.read_variants)
        rv.push_back({{"variant", v.variant}, {"threads", v.threads}, {"gbps", v.gbps}});
    auto& lad = j["latency_ladder"] = nlohmann::json::array();
    for (const auto& p : r.ladder) lad.push_back({{"bytes", p.bytes}, {"ns", p.ns}});
    j["page_size_chase_ns"] = {{"4k", r.page_chase_ns_4k}, {"2m", r.page_chase_ns_2m}, {"note", r.huge_note}};
    return j;
}

double machine_profile::read_gbps_for(int n) const {
    if (n <= 1 || threads <= 1) return read_gbps_1;
    if (n >= threads) return read_gbps_all;
    return read_gbps_1 + (read_gbps_all - read_gbps_1) * double(n - 1) / double(threads - 1);
}

std::string machine_profile_path() {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/memtile/machine.json";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/memtile/machine.json";
    return "";
}

std::string save_machine_profile(const probe_result& r, const std::string& cpu_model) {
    const std::string path = machine_profile_path();
    if (path.empty()) fail("probe", "neither XDG_CACHE_HOME nor HOME is set: nowhere to store the machine profile");
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json j = probe_to_json(r);
    j["created"] = stamp;
    j["cpu_model"] = cpu_model;
    j["format"] = "memtile-machine-profile-1";
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        if (!f) fail("probe", "cannot write the machine profile '{}'", tmp);
        f << j.dump(2) << "\n";
        if (!f) fail("probe", "cannot write the machine profile '{}'", tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail("probe", "cannot move '{}' to '{}': {}", tmp, path, ec.message());
    return path;
}

std::optional<machine_profile> parse_machine_profile(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("sequential_read_gbps") || !j["sequential_read_gbps"].is_number())
        return std::nullopt;
    machine_profile p;
    p.created = j.value("created", "");
    p.cpu_model = j.value("cpu_model", "");
    p.threads = j.value("threads", 1);
    p.read_gbps_all = j["sequential_read_gbps"].get<double>();
    p.read_gbps_1 = j.value("sequential_read_gbps_1_thread", p.read_gbps_all);
    if (p.read_gbps_all <= 0 || p.read_gbps_1 <= 0) return std::nullopt;
    p.probe = j;
    return p;
}

std::optional<machine_profile> load_machine_profile() {
    const std::string path = machine_profile_path();
    if (path.empty()) return std::nullopt;
    const auto text = read_text_file(path);
    if (!text) return std::nullopt;
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    auto p = parse_machine_profile(j);
    if (p) p->path = path;
    return p;
}

}  // namespace memtile
