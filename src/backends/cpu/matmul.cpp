#include "backends/cpu/matmul.h"

#include "core/thread-pool.h"

namespace memtile::cpu {
namespace {

class plain_weight : public prepared_weight {
public:
    explicit plain_weight(const weight_view& w) : w_(w) {}
    const weight_view& view() const override { return w_; }
    uint64_t resident_bytes() const override { return 0; }

private:
    weight_view w_;
};

}  // namespace

std::unique_ptr<prepared_weight> prepare_weight(const weight_view& w, const prepare_options&) {
    return std::make_unique<plain_weight>(w);
}

void matmul(const prepared_weight& pw, const float* x, int64_t n_tok, float* y, thread_pool& pool) {
    const weight_view& w = pw.view();
    pool.parallel_for(w.n_out, [&](int, int64_t a, int64_t b) { matmul_ref(w, x, n_tok, y, a, b); });
}

std::string matmul_path(dtype) {
    return "scalar";
}

}  // namespace memtile::cpu
