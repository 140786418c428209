// libFuzzer target: any byte string given to the GGUF reader must either parse or raise memtile::error;
// never crash, leak, read out of bounds or allocate beyond what the input justifies.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf-file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace memtile;
    try {
        auto g = gguf_file::parse(mapped_file::from_memory("fuzz-input", {data, size}));
        uint64_t sum = 0;
        for (const auto& t : g->tensors()) {
            // Touch the first and last byte of every tensor: they must lie inside the input.
            if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];
        }
        for (const auto& [key, value] : g->metadata()) sum += value.to_display().size() + key.size();
        asm volatile("" : : "r"(sum));
    } catch (const error&) {
    }
    return 0;
}
