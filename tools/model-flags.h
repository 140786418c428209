// Options shared by every verb that loads a model (run, chat, bench, serve): model path, context, KV type,
// threads and memory modes.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/dtype.h"
#include "models/transformer.h"
#include "runtime/executor.h"

namespace memtile::cli {

// Help of --repack (run, chat, bench, serve).
inline constexpr const char* k_repack_help =
    "Interleave the weights at load (Q8_0/Q4_0/Q4_K/Q5_K/Q6_K into 8-row tiles, F16/BF16/F32 into 32-row "
    "column-major groups): auto (default: on when the model is a "
    "plain file mapping, off with --no-mmap, --hugepages or --mlock, where the packed copy would be held besides "
    "the file's pages), on or off. On: decode 1.1-1.6x and prefill faster; the load takes longer (packing plus "
    "the first touch of the new pages, over the threads; docs/cpu.md)";

struct model_flags {
    std::string model;  // empty: the default model
    uint32_t ctx = 0;   // 0: min(training context, 4096)
    std::string kv_type = "f16";
    int threads = 0;  // 0: physical cores
    bool no_mmap = false, mlock = false, prefault = false, hugepages = false;
    std::string repack = "auto";
    std::string cpu_mask;  // e.g. "0,2-3": pin thread i to the i-th CPU (empty: no pinning)
    std::string device = "cpu";
    int gpu_layers = -1;         // --gpu-layers (-1: all)
    bool host_sampling = false;  // --host-sampling

    void add(CLI::App* sub, bool with_threads = true);  // bench has its own -t (a list)
    // --device cpu|cuda [--gpu-layers N --host-sampling]
    void add_device(CLI::App* sub, bool with_gpu_layers = true);
    std::string memory_mode() const;  // "mmap", "no-mmap+prefault", ...
    std::string model_path() const;
    model_options options() const;
    executor_options executor_opts() const;  // everything above, for executor::open
    dtype kv_dtype() const { return kv_type == "f32" ? dtype::f32 : dtype::f16; }
    uint32_t context_for(uint32_t n_ctx_train) const;
    int thread_count() const;
    std::vector<int> cpu_ids() const;  // parsed --cpu-mask, else thread_pool::default_cpus (may be empty)
};

}  // namespace memtile::cli
