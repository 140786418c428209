// Aggregates the op_events of forward passes (bench --profile) into time and bytes per operation class and per
// layer. Units: ns of wall time, bytes as op_event defines them; divide by the tokens processed for per-token
// figures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/transformer.h"

namespace memtile {

struct profile_bucket {
    double ns = 0;
    uint64_t calls = 0, weight_bytes = 0, kv_read_bytes = 0, kv_write_bytes = 0, activation_bytes = 0;
    uint64_t bytes() const { return weight_bytes + kv_read_bytes + kv_write_bytes + activation_bytes; }
    void add(const profile_bucket& o);
};

// Name of an op class in reports: "matmul q8_0", "attention", "norm", ... (weight type for matmul and output).
std::string op_class_label(op_class c, dtype weight_type);

class forward_profile : public forward_observer {
public:
    void on_op(const op_event& e) override;
    void add_sampling(double ns);  // sampling happens outside forward(); the caller times it
    void reset() { *this = forward_profile(); }

    const std::map<std::string, profile_bucket>& by_class() const { return by_class_; }
    const std::vector<profile_bucket>& by_layer() const { return by_layer_; }  // index = layer
    const profile_bucket& total() const { return total_; }

private:
    std::map<std::string, profile_bucket> by_class_;
    std::vector<profile_bucket> by_layer_;
    profile_bucket total_;
};

}  // namespace memtile
