#include "quant/tensor-stream.h"

#include <algorithm>
#include <vector>

#include "core/progress.h"
#include "core/thread-pool.h"
#include "gguf/gguf-writer.h"
#include "quant/encode.h"

namespace memtile {
namespace {

constexpr int64_t k_chunk_elems = int64_t(1) << 22;  // 16 MiB of f32 per chunk

}  // namespace

void write_encoded_tensor(gguf_writer& w, dtype type, int64_t n_rows, int64_t row_len, thread_pool& pool,
                          const row_fill_fn& fill, const row_inspect_fn& inspect, progress_bar* bar) {
    const int64_t chunk_rows = std::max<int64_t>(1, k_chunk_elems / std::max<int64_t>(row_len, 1));
    const uint64_t rb = row_bytes(type, uint64_t(row_len));
    std::vector<float> f32;
    std::vector<uint8_t> enc;
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
        const int64_t nr = std::min(chunk_rows, n_rows - r0);
        f32.resize(size_t(nr * row_len));
        enc.resize(size_t(uint64_t(nr) * rb));
        pool.parallel_for(nr, [&](int th, int64_t a, int64_t b) {
            float* x = f32.data() + a * row_len;
            uint8_t* e = enc.data() + uint64_t(a) * rb;
            fill(th, r0 + a, b - a, x);
            encode_rows(type, x, e, b - a, row_len);
            if (inspect) inspect(th, r0 + a, b - a, x, e);
        });
        w.write_tensor_data(enc);
        if (bar) bar->advance(enc.size());
    }
}

}  // namespace memtile
