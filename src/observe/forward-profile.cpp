#include "observe/forward-profile.h"

namespace memtile {

void profile_bucket::add(const profile_bucket& o) {
    ns += o.ns;
    calls += o.calls;
    weight_bytes += o.weight_bytes;
    kv_read_bytes += o.kv_read_bytes;
    kv_write_bytes += o.kv_write_bytes;
    activation_bytes += o.activation_bytes;
}

std::string op_class_label(op_class c, dtype weight_type) {
    switch (c) {
        case op_class::embedding: return "embedding " + std::string(dtype_name(weight_type));
        case op_class::matmul: return "matmul " + std::string(dtype_name(weight_type));
        case op_class::attention: return "attention";
        case op_class::kv_store: return "kv store";
        case op_class::norm: return "norm";
        case op_class::rope: return "rope";
        case op_class::elementwise: return "elementwise";
        case op_class::output: return "output matmul " + std::string(dtype_name(weight_type));
    }
    return "other";
}

void forward_profile::on_op(const op_event& e) {
    const profile_bucket b{e.ns, 1, e.weight_bytes, e.kv_read_bytes, e.kv_write_bytes, e.activation_bytes};
    by_class_[op_class_label(e.kind, e.weight_type)].add(b);
    if (e.layer >= 0) {
        if (by_layer_.size() <= size_t(e.layer)) by_layer_.resize(size_t(e.layer) + 1);
        by_layer_[size_t(e.layer)].add(b);
    }
    total_.add(b);
}

void forward_profile::add_sampling(double ns) {
    const profile_bucket b{ns, 1, 0, 0, 0, 0};
    by_class_["sampling"].add(b);
    total_.add(b);
}

}  // namespace memtile
