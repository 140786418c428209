// The models a server offers: those given with -m (loaded at start and kept) and every GGUF of --models-dir
// (loaded on first use, unloaded after keep_alive seconds without requests). Names follow Ollama: "name" and
// "name:latest" are the same model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model-host.h"

namespace memtile::server {

struct model_entry {
    std::string name;  // as listed (with a ":tag")
    std::string path;
    bool pinned = false;
    uint64_t file_bytes = 0;
    std::string modified_at;  // RFC 3339
    std::string digest;       // hex, stable for an unchanged file
    double keep_alive_s = 300;
    std::shared_ptr<model_host> host;
    std::chrono::steady_clock::time_point expires;
};

class model_registry {
public:
    explicit model_registry(host_options o) : opts_(std::move(o)) {}
    ~model_registry();

    void add(const std::string& name, const std::string& path, bool pinned, double keep_alive_s);
    void add_dir(const std::string& dir, double keep_alive_s);  // every *.gguf in dir
    void load_pinned();

    // The host serving `name`, loading it if needed; throws api_error 404 for an unknown model.
    std::shared_ptr<model_host> acquire(const std::string& name, std::optional<double> keep_alive_s = {});
    std::vector<model_entry> list() const;  // snapshot
    const model_entry* find_unlocked(const std::string& name) const;
    std::string default_name() const;

    void start_janitor();  // unloads idle models past their keep_alive
    void shutdown();       // cancels in-flight jobs and unloads everything

private:
    model_entry* find(const std::string& name);
    host_options opts_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<model_entry> entries_;
    bool stopping_ = false;
    std::thread janitor_;
};

// "name" for "name:latest"; other tags are kept.
std::string canonical_model_name(const std::string& name);

}  // namespace memtile::server
