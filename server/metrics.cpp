#include "metrics.h"

#include <fmt/core.h>

namespace memtile::server {

void histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) i++;
    if (i < counts_.size()) counts_[i]++;
    count_++;
    sum_ += v;
}

void histogram::render(std::string& out, const std::string& name, const std::string& help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); i++) {
        cum += counts_[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

metrics& metrics::get() {
    static metrics m;
    return m;
}

metrics::metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      token_latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void metrics::request(const std::string& route, int status) {
    std::lock_guard lk(mu_);
    requests_[{route, status}]++;
}

void metrics::tokens(uint64_t prompt, uint64_t cached, uint64_t generated) {
    std::lock_guard lk(mu_);
    prompt_ += prompt;
    cached_ += cached;
    generated_ += generated;
}

void metrics::ttft(double s) {
    std::lock_guard lk(mu_);
    ttft_.observe(s);
}

void metrics::token_latency(double s) {
    std::lock_guard lk(mu_);
    token_latency_.observe(s);
}

void metrics::rejected() {
    std::lock_guard lk(mu_);
    rejected_++;
}

void metrics::set_host(const std::string& model, const host_gauges& g) {
    std::lock_guard lk(mu_);
    hosts_[model] = g;
}

void metrics::set_counts(const std::string& model, int slots_active, int queue_depth) {
    std::lock_guard lk(mu_);
    auto& g = hosts_[model];
    g.slots_active = slots_active;
    g.queue_depth = queue_depth;
}

void metrics::drop_host(const std::string& model) {
    std::lock_guard lk(mu_);
    hosts_.erase(model);
}

host_gauges metrics::host(const std::string& model) const {
    std::lock_guard lk(mu_);
    auto it = hosts_.find(model);
    return it == hosts_.end() ? host_gauges{} : it->second;
}

std::string metrics::render() const {
    std::lock_guard lk(mu_);
    std::string out;
    out += "# HELP memtile_requests_total HTTP requests by route and status.\n# TYPE memtile_requests_total counter\n";
    for (const auto& [k, n] : requests_)
        out += fmt::format("memtile_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, n);
    auto counter = [&](const char* name, const char* help, uint64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    counter("memtile_prompt_tokens_total", "Prompt tokens of finished requests (cached ones included).", prompt_);
    counter("memtile_prompt_tokens_cached_total", "Prompt tokens reused from a slot's KV cache (prefix cache).",
            cached_);
    counter("memtile_generated_tokens_total", "Generated tokens.", generated_);
    counter("memtile_rejected_requests_total", "Requests answered 503 because the queue was full.", rejected_);
    ttft_.render(out, "memtile_time_to_first_token_seconds", "Time from arrival to the first generated token.");
    token_latency_.render(out, "memtile_token_latency_seconds", "Duration of one batched decode step.");
    auto gauge = [&](const char* name, const char* help, auto get) {
        out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
        for (const auto& [model, g] : hosts_) out += fmt::format("{}{{model=\"{}\"}} {}\n", name, model, get(g));
    };
    gauge("memtile_slots_total", "Slots (sequences with their own KV cache).", [](auto& g) { return g.slots_total; });
    gauge("memtile_slots_active", "Slots generating now.", [](auto& g) { return g.slots_active; });
    gauge("memtile_queue_depth", "Requests waiting for a slot.", [](auto& g) { return g.queue_depth; });
    gauge("memtile_kv_cells_used", "KV-cache cells holding tokens, all slots.",
          [](auto& g) { return g.kv_cells_used; });
    gauge("memtile_kv_cells_total", "KV-cache cells, all slots.", [](auto& g) { return g.kv_cells_total; });
    gauge("memtile_decode_tokens_per_second", "Tokens per second of the last batched decode step.",
          [](auto& g) { return g.decode_tps; });
    gauge("memtile_decode_batch_size", "Sequences in the last batched decode step.",
          [](auto& g) { return g.last_batch; });
    gauge("memtile_roofline_percent", "Bytes moved per second in the last decode step, % of peak memory bandwidth.",
          [](auto& g) { return g.roofline_percent; });
    return out;
}

}  // namespace memtile::server
