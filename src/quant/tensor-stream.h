// Streaming conversion of one tensor into a GGUF being written: rows are produced in f32 chunks of at most
// 16 MiB, encoded to the target type on the thread pool and appended to the writer, so memory stays bounded
// by one chunk whatever the model size. Shared by gen, convert and quantize.
#pragma once

#include <cstdint>
#include <functional>

#include "core/dtype.h"

namespace memtile {

class gguf_writer;
class thread_pool;
class progress_bar;

// fill(thread, row0, n, dst): writes rows row0..row0+n-1 as f32 to dst ([row_len, n]).
using row_fill_fn = std::function<void(int thread, int64_t row0, int64_t n, float* dst)>;
// inspect(thread, row0, n, x, enc): optional, sees the f32 rows and their encoding (e.g. to measure error).
using row_inspect_fn = std::function<void(int thread, int64_t row0, int64_t n, const float* x, const uint8_t* encoded)>;

void write_encoded_tensor(gguf_writer& w, dtype type, int64_t n_rows, int64_t row_len, thread_pool& pool,
                          const row_fill_fn& fill, const row_inspect_fn& inspect = {}, progress_bar* bar = nullptr);

}  // namespace memtile
