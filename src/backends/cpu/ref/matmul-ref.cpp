#include <vector>

#include "backends/cpu/matmul.h"
#include "quant/quant.h"

namespace memtile::cpu {

void matmul_ref(const weight_view& w, const float* x, int64_t n_tok, float* y, int64_t row_begin, int64_t row_end) {
    std::vector<float> row(size_t(w.n_in));
    for (int64_t o = row_begin; o < row_end; o++) {
        dequantize_row(w.type, w.data + size_t(o) * w.row_bytes, row.data(), w.n_in);
        for (int64_t t = 0; t < n_tok; t++) {
            const float* xt = x + t * w.n_in;
            float sum = 0;
            for (int64_t i = 0; i < w.n_in; i++) sum += row[size_t(i)] * xt[i];
            y[t * w.n_out + o] = sum;
        }
    }
}

}  // namespace memtile::cpu
