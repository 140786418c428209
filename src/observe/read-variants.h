// Variants of the sequential read probe, so that the roofline's denominator is the best read this machine
// gives the same threads, not one particular loop's. Why: the decode kernels prefetch (prefetcht1 32 KiB
// ahead) and their 2-thread rows read faster than the plain AVX2 loop (ratios up to 1.32 on a 2-core EPYC VM),
// so the plain read is not the achievable read. Each variant sums the 64-bit words of one large buffer; the
// variants differ in the software-prefetch hint and distance, in how the buffer is split over the threads
// (contiguous shares or interleaved chunks), in how many passes (parallel_for calls) cover it, and in the page
// size of the buffer (4 KiB pages or 2 MiB transparent huge pages). Units: GB/s = 1e9 bytes per second.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace memtile {

class thread_pool;

enum class prefetch_hint { none, t0, t1, nta };

struct read_variant {
    prefetch_hint hint = prefetch_hint::none;
    size_t distance = 0;  // bytes ahead of the loads that are prefetched (0 with hint none)
    size_t chunk_bytes =
        0;           // 0: thread t of T reads the t-th contiguous 1/T of each pass; else chunks dealt round robin
    int passes = 1;  // the buffer is read as this many consecutive parts, one parallel_for each
    bool huge_pages = false;  // read the buffer on 2 MiB transparent huge pages (else 4 KiB pages only)
    // Each contiguous share is cut into this many equal runs read side by side, one 64-byte line of each per step
    // (plain loads only, no chunks): the access pattern of the decode kernels' group streams (set_decode_streams),
    // which on a latency-bound core read more per second than one stream.
    int streams = 1;
};

// e.g. "plain", "t1-32k", "t1-32k chunks-2m", "plain passes-16", "t1-32k huge", "plain streams-4 huge".
std::string read_variant_name(const read_variant& v);

// The set `memtile probe` and bench-decode-roofline measure; element 0 is the plain reference (AVX2 loads,
// no prefetch, contiguous shares, one pass, 4 KiB pages), the loop the earlier tables used.
std::vector<read_variant> standard_read_variants();

// Sum (mod 2^64) of the 64-bit words that thread `thread` of `threads` reads of pass `pass` of the `bytes`-byte
// buffer at p with variant v. Summed over all threads and passes it is the sum of every word of the buffer,
// whatever the variant (the tests check it). bytes: a multiple of 128 times passes.
uint64_t read_variant_share(const read_variant& v, const uint8_t* p, size_t bytes, int pass, int thread, int threads);

// Best wall-clock GB/s of `threads` threads over a few variants (plain; 2 MiB pages; 4 and 8 runs side by side on
// 2 MiB pages), `reps` each, on a `bytes`-byte buffer (a multiple of 2 MiB): the quick denominator where no
// machine profile exists. Why not the plain loop alone: the decode reads more per second than it on some machines
// (a roofline of 119 % on a latency-bound VM, session 14).
double quick_best_read_gbps(int threads, size_t bytes, int reps);

// Index of the largest figure (the first on ties); throws on an empty list.
size_t best_read_index(std::span<const double> gbps);

struct read_variant_figure {
    double gbps = 0;  // best of the pass repetitions (wall clock)
    // Best of the repetitions of bytes x threads / CPU-seconds of the reading threads (CLOCK_THREAD_CPUTIME_ID):
    // on a busy machine it does not count the time a reader waited for a core, so variants compare fairly.
    double gbps_cpu = 0;
    uint64_t checksum = 0;  // sum of every word read (equal for every variant of one buffer)
};

// Two buffers of `bytes` bytes each (one with MADV_NOHUGEPAGE, one with MADV_HUGEPAGE), filled once by the
// pool's threads (each writes the contiguous share it reads first), kept for the object's life so that rounds
// of measurements can be interleaved with other work (e.g. decode runs).
class read_probe {
public:
    read_probe(size_t bytes, thread_pool& pool);
    ~read_probe();
    read_probe(const read_probe&) = delete;
    read_probe& operator=(const read_probe&) = delete;

    // Each variant in turn with the pool's threads, each timed `reps` times (best kept).
    std::vector<read_variant_figure> measure(thread_pool& pool, std::span<const read_variant> variants, int reps);

    size_t bytes() const { return bytes_; }
    std::span<const uint8_t> buffer(bool huge) const { return {huge ? huge_ : small_, bytes_}; }
    // Bytes of the huge-page buffer the kernel backed with 2 MiB pages (0 when unknown).
    uint64_t huge_bytes_granted() const;

private:
    void release();
    size_t bytes_ = 0, map_bytes_ = 0;
    void* maps_[2] = {nullptr, nullptr};
    uint8_t* small_ = nullptr;
    uint8_t* huge_ = nullptr;
};

}  // namespace memtile
