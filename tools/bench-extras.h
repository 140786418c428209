// The parts of memtile bench beyond throughput rows: cold starts (--cold), sustained runs (--soak) and the
// huge-page coverage of a loaded model.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped-file.h"
#include "models/transformer.h"

namespace memtile::cli {

struct model_flags;

// "thp: 14 of 16 MiB in 2 MiB pages", "hugetlbfs", or "" for mmap / read modes.
std::string huge_page_note(const mapped_file& f);

// Drops the model from the page cache (posix_fadvise DONTNEED), then loads it and times the first token, without
// and with --prefault; prints one table to out. Must run before this process maps the model.
void cold_start_report(const std::string& path, const model_flags& flags, int threads, const std::vector<int>& cpus,
                       FILE* out);

struct soak_options {
    int seconds = 60;
    int threads = 1;
    std::vector<int> cpus;  // where the threads are pinned (empty: nowhere)
    uint32_t n_ctx = 512;   // the context is emptied when full, so the KV cost per token stays bounded
    dtype kv_type = dtype::f16;
    std::string svg_path;  // timeline; "" for none
};
// Decodes continuously for o.seconds, one sample a second (printed as it comes), then the first and last
// window (one minute, or a third of the run when shorter) side by side.
void run_soak(const transformer& model, const soak_options& o);

struct cuda_bench_options {
    std::string path;
    load_options load;
    std::vector<int> prompts, gens;
    std::vector<int> depths{0};  // context depths (bench -d): each test after that many positions in the cache
    int reps = 3;
    uint32_t n_ctx = 0;  // 0: the longest test + warm-up
    bool json = false;
};
// bench --device cuda: pp/tg rows of the CUDA decoder with the HBM read bandwidth probed in the same run as the
// roofline denominator. Throws when the backend is not compiled in or no device is usable.
int run_cuda_bench(const cuda_bench_options& o);

}  // namespace memtile::cli
