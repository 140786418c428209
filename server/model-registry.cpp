#include "model-registry.h"

#include <fmt/chrono.h>
#include <fmt/core.h>

#include <filesystem>

#include "api-error.h"
#include "core/error.h"

namespace memtile::server {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string canonical_model_name(const std::string& name) {
    const std::string tag = ":latest";
    if (name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0)
        return name.substr(0, name.size() - tag.size());
    return name;
}

model_registry::~model_registry() {
    shutdown();
}

void model_registry::add(const std::string& name, const std::string& path, bool pinned, double keep_alive_s) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) fail("serve", "model file {} not found", path);
    model_entry e;
    e.name = name.find(':') == std::string::npos ? name + ":latest" : name;
    e.path = path;
    e.pinned = pinned;
    e.keep_alive_s = keep_alive_s;
    e.file_bytes = fs::file_size(path, ec);
    const auto mtime = fs::last_write_time(path, ec);
    const auto sys = std::chrono::file_clock::to_sys(mtime);
    e.modified_at = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", std::chrono::floor<std::chrono::seconds>(sys));
    // Not a content hash (that would read the whole file): stable while path, size and mtime are.
    uint64_t h = 1469598103934665603ull;
    for (char c : fmt::format("{}|{}|{}", fs::absolute(path).string(), e.file_bytes, e.modified_at))
        h = (h ^ uint8_t(c)) * 1099511628211ull;
    for (int i = 0; i < 4; i++) e.digest += fmt::format("{:016x}", h * (2 * uint64_t(i) + 1) + uint64_t(i));
    std::lock_guard lk(mu_);
    if (find(e.name)) fail("serve", "two models named {} (use --alias)", e.name);
    entries_.push_back(std::move(e));
}

void model_registry::add_dir(const std::string& dir, double keep_alive_s) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("serve", "--models-dir {} is not a directory", dir);
    std::vector<fs::path> files;
    for (const auto& de : fs::directory_iterator(dir))
        if (de.is_regular_file() && de.path().extension() == ".gguf") files.push_back(de.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) add(p.stem().string(), p.string(), false, keep_alive_s);
}

void model_registry::load_pinned() {
    std::lock_guard lk(mu_);
    for (auto& e : entries_)
        if (e.pinned && !e.host) e.host = std::make_shared<model_host>(e.name, e.path, opts_);
}

model_entry* model_registry::find(const std::string& name) {
    const std::string want = canonical_model_name(name);
    for (auto& e : entries_)
        if (canonical_model_name(e.name) == want) return &e;
    return nullptr;
}

const model_entry* model_registry::find_unlocked(const std::string& name) const {
    return const_cast<model_registry*>(this)->find(name);
}

std::string model_registry::default_name() const {
    std::lock_guard lk(mu_);
    return entries_.empty() ? std::string() : entries_.front().name;
}

std::shared_ptr<model_host> model_registry::acquire(const std::string& name, std::optional<double> keep_alive_s) {
    std::lock_guard lk(mu_);
    if (stopping_) throw api_error(503, "shutting_down", "the server is shutting down");
    model_entry* e = find(name);
    if (!e) throw api_error(404, "model_not_found", fmt::format("model '{}' not found", name));
    if (keep_alive_s) e->keep_alive_s = *keep_alive_s;
    if (!e->host) {
        try {
            e->host = std::make_shared<model_host>(e->name, e->path, opts_);
        } catch (const std::exception& ex) {
            throw api_error(500, "load_failed", fmt::format("model '{}' failed to load: {}", e->name, ex.what()));
        }
        fmt::print(stderr, "[serve] loaded {} from {} ({})\n", e->name, e->path, e->host->describe());
    }
    e->expires = clock_type::now() + std::chrono::milliseconds(int64_t(e->keep_alive_s * 1000));
    return e->host;
}

std::vector<model_entry> model_registry::list() const {
    std::lock_guard lk(mu_);
    return entries_;
}

void model_registry::start_janitor() {
    janitor_ = std::thread([this] {
        std::unique_lock lk(mu_);
        while (!stopping_) {
            cv_.wait_for(lk, std::chrono::seconds(1));
            const auto now = clock_type::now();
            for (auto& e : entries_) {
                if (!e.host || e.pinned || e.host.use_count() > 1 || e.host->busy() > 0) continue;
                const auto idle_until = std::max(
                    e.expires, e.host->last_used() + std::chrono::milliseconds(int64_t(e.keep_alive_s * 1000)));
                if (now < idle_until) continue;
                fmt::print(stderr, "[serve] unloading {} (idle for keep_alive {} s)\n", e.name, e.keep_alive_s);
                e.host.reset();
            }
        }
    });
}

void model_registry::shutdown() {
    std::vector<std::shared_ptr<model_host>> hosts;
    {
        std::lock_guard lk(mu_);
        if (stopping_ && !janitor_.joinable()) return;
        stopping_ = true;
        for (auto& e : entries_)
            if (e.host) {
                e.host->cancel_all();
                hosts.push_back(std::move(e.host));
            }
    }
    cv_.notify_all();
    if (janitor_.joinable()) janitor_.join();
    hosts.clear();
}

}  // namespace memtile::server
