// Server metrics in Prometheus text format (exposition format 0.0.4): counters, gauges and histograms that
// the routes and the scheduler update; one process-wide instance guarded by a mutex (updates are a few per
// token, far below contention).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace memtile::server {

class histogram {
public:
    explicit histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
    void observe(double v);
    void render(std::string& out, const std::string& name, const std::string& help) const;

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket (not cumulative)
    uint64_t count_ = 0;
    double sum_ = 0;
};

struct host_gauges {  // per loaded model, refreshed by its scheduler after every step
    int slots_total = 0, slots_active = 0, queue_depth = 0;
    uint64_t kv_cells_used = 0, kv_cells_total = 0;
    double decode_tps = 0;        // tokens/s of the last batched decode step (all sequences together)
    double roofline_percent = 0;  // achieved bytes/s of the last decode step over the peak bandwidth
    int last_batch = 0;
};

class metrics {
public:
    static metrics& get();

    void request(const std::string& route, int status);
    void tokens(uint64_t prompt, uint64_t cached, uint64_t generated);
    void ttft(double seconds);
    void token_latency(double seconds);
    void rejected();  // 503: queue full
    void set_host(const std::string& model, const host_gauges& g);
    void set_counts(const std::string& model, int slots_active, int queue_depth);  // on every queue change
    void drop_host(const std::string& model);
    host_gauges host(const std::string& model) const;

    std::string render() const;

private:
    metrics();
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    uint64_t prompt_ = 0, cached_ = 0, generated_ = 0, rejected_ = 0;
    histogram ttft_, token_latency_;
    std::map<std::string, host_gauges> hosts_;
};

}  // namespace memtile::server
