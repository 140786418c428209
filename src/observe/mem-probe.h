// Memory access-pattern micro-benchmarks (memtile probe): what the memory system delivers to the access
// patterns of LLM inference. Units: GB/s = 1e9 bytes per second; ns per access where an access is one 64-byte
// line (random patterns) or one dependent load (latency ladder).
//
// Bandwidth tests run with 1 thread and with `threads`; each reports the best of `reps` timed passes
// (the first pass after allocation also faults the pages in, so it is never timed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace memtile {

struct probe_options {
    int threads = 0;                               // "all threads" configuration; 0: thread_pool::default_threads()
    size_t stream_bytes = size_t(1) << 30;         // footprint of read / copy / triad (all arrays together)
    size_t random_bytes = size_t(128) << 20;       // region of the random, hot-spot and page-size tests
    size_t tile_bytes = size_t(256) << 20;         // the matrix of the 2-D tile test
    size_t ladder_max = size_t(1) << 30;           // largest working set of the latency ladder (from 4 KiB)
    uint64_t chase_loads = uint64_t(1) << 21;      // dependent loads timed per ladder point
    uint64_t random_accesses = uint64_t(1) << 23;  // 64-byte accesses per random-pattern pass (all threads)
    int reps = 3;
    // --quick: small sizes for tests (about two seconds). Caches may then hold part of the data.
    static probe_options quick(int threads);
};

struct bandwidth_result {
    std::string test;  // read (the plain loop), read_best (the fastest read variant, named in note), copy, triad,
                       // random, hotspot, tile2d, random_4k_pages, random_2m_pages
    int threads = 1;
    double gbps = 0;           // bytes the pattern moves (read + written, as STREAM counts) per second
    double ns_per_access = 0;  // random patterns: wall time per 64-byte line per thread; 0 otherwise
    uint64_t bytes = 0;        // working set
    std::string note;          // e.g. "2 MiB pages: 126 of 128 MiB granted" or why a test was skipped
};

struct latency_point {
    uint64_t bytes = 0;  // working set of the pointer chase
    double ns = 0;       // mean time of one dependent load
};

// One sequential read variant (observe/read-variants.h), best over the probe's interleaved rounds.
struct read_variant_result {
    std::string variant;  // read_variant_name()
    int threads = 1;
    double gbps = 0;
};

struct probe_result {
    int threads = 1;
    std::vector<bandwidth_result> bandwidth;
    std::vector<read_variant_result> read_variants;
    std::vector<latency_point> ladder;
    double page_chase_ns_4k = 0, page_chase_ns_2m = 0;  // pointer chase over random_bytes on each page size
    std::string huge_note;                              // how many 2 MiB pages the kernel granted
    double seconds = 0;                                 // wall time of the whole probe
    // Best sequential read GB/s (any variant: the read_best test when measured, else read) for 1 thread or for
    // opts.threads (0 when not measured).
    double read_gbps(int n_threads) const;
    // The plain loop's sequential read (the read test alone), for comparison with earlier figures and tools.
    double plain_read_gbps(int n_threads) const;
};

// progress(line) is called before each test (may be empty).
probe_result run_probe(const probe_options& o, const std::function<void(const std::string&)>& progress = {});

}  // namespace memtile
