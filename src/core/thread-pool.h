// One persistent pool of worker threads (created once, reused for every operation: no per-op thread
// creation). parallel_for splits [0, n) into contiguous chunks, one per thread; the calling thread works
// too, so a pool of N threads has N-1 workers.
//
// Why spinning: a decode step issues ~7 matrix products per layer, each a parallel_for of a few tens of
// microseconds; waking sleeping workers through a condition variable costs about as much as the work.
// Workers therefore spin on an atomic job counter for a short while after each job (k_spin_us) and only
// then sleep on a condition variable, so back-to-back operations hand over in well under a microsecond
// while an idle pool (e.g. a server between requests) costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace memtile {

// Timestamps of parallel_for calls and of every chunk, for a benchmark that asks for them (bench/pool-trace.cpp:
// where the time of a multi-thread call goes: hand-off, chunks, tail). Off by default: with no trace installed a
// pool pays one relaxed load per call and per chunk loop. Records go into arrays sized at construction; records
// beyond them are counted in dropped, not stored.
struct pool_trace {
    struct call {
        uint64_t generation = 0;  // the pool's job number (chunks carry the same)
        int64_t n = 0, n_chunks = 0;
        uint64_t enter = 0, publish = 0, done = 0;  // clock(): parallel_for entered, job visible, all chunks done
    };
    struct chunk {
        uint64_t generation = 0;
        int64_t index = 0, begin = 0, end = 0;
        int thread = 0;
        uint64_t start = 0, stop = 0;  // clock(): claimed, returned
    };
    pool_trace(size_t max_calls, size_t max_chunks) : calls(max_calls), chunks(max_chunks) {}
    void clear() {
        n_calls.store(0);
        n_chunks.store(0);
        dropped.store(0);
    }
    // Time stamp counter on x86-64 (cheap enough per chunk), else steady_clock nanoseconds.
    static uint64_t clock();

    std::vector<call> calls;
    std::vector<chunk> chunks;
    std::atomic<size_t> n_calls{0}, n_chunks{0}, dropped{0};
};

class thread_pool {
public:
    explicit thread_pool(int n_threads, const std::vector<int>& cpu_ids = {});
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(thread_index, begin, end) over disjoint chunks covering [0, n); returns when all are done.
    // Chunks are claimed dynamically (see split), so one thread may run several chunks and a thread
    // the OS has not scheduled yet simply gets none: on a busy machine the call degrades to the speed of the
    // threads that do run instead of waiting for one that does not. fn must only accumulate per thread_index.
    // Exceptions thrown by fn are rethrown here (the first one). Not reentrant: call from one thread.
    void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

    // How parallel_for hands out chunks. ranges: chunks_per_thread chunks per thread, each thread owning one
    // contiguous share and running it front to back (one ascending stream of addresses per thread, which the
    // hardware prefetcher follows), then taking what is left of the others' shares from their backs, so a thread the
    // OS does not schedule still loses its work to the others; worker t >= 1 owns share t - 1 and the calling thread
    // the last one. halving (the default): ranges whose chunks halve towards the back of each share (1/2, 1/4, ...
    // of it, the last two equal; equal chunks where n is below threads x chunks_per_thread), so that a thread runs
    // most of its share in few long chunks while the others steal small ones from its back. interleaved: about 4
    // chunks per thread, claimed in order by whichever thread asks first (with two threads each thread's chunks
    // alternate with the other's).
    // Measured (decode at 2 threads, phase-matched ratio): ranges 16 +4-10 % over interleaved on TinyLlama, equal
    // on Llama-3.2-1B (session 10, Zen 3; docs/cpu-log-s7-s11.md). Since the x8 decode walks four streams inside
    // every chunk (session 14), each chunk restarts four prefetch streams: on session 16's Zen 5, ranges 4 against
    // 16 gave +2-10 % on 8 of the 10 workload models, -1 to -3 % on two, and 1 chunk per thread left the tail
    // unbalanced; halving 4 against ranges 4 +3-11 % on 6 of 10 and within 2 % on the other four
    // (docs/cpu-log-s12-s18.md). Set between calls, from the calling thread.
    enum class split { interleaved, ranges, halving };
    static constexpr split k_default_split = split::halving;
    static constexpr int k_default_range_chunks = 4;
    void set_split(split s, int chunks_per_thread = k_default_range_chunks);
    // parallel_for with this call's hand-out instead of the pool's setting.
    void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn, split s, int chunks_per_thread);

    // Physical performance cores available to this process (core/cpu-topology.h): the default thread count.
    static int default_threads();
    // Where n_threads threads are pinned when the user gives no --cpu-mask: one performance core each on a
    // hybrid CPU (when there are enough), else nowhere (empty).
    static std::vector<int> default_cpus(int n_threads);
    // Pins the calling thread to one CPU; false when the OS refuses.
    static bool pin_current_thread(int cpu);
    // Parses a CPU list such as "0,2-3" (ids this process may run on, no repeats): the --cpu-mask syntax.
    // Throws memtile::error naming the bad item.
    static std::vector<int> parse_cpu_list(const std::string& list);
    // Installs a trace (nullptr: off, the default). Set between calls, from the calling thread.
    void set_trace(pool_trace* t) { trace_.store(t, std::memory_order_release); }

private:
    void worker(int index);
    void run_chunks(int index, uint64_t generation);
    void run_ranges(int index, uint64_t generation, pool_trace* trace);
    void run_chunk(int index, uint64_t generation, int64_t chunk, pool_trace* trace);
    std::pair<int64_t, int64_t> chunk_bounds(int64_t chunk) const;  // [begin, end) of the current job's chunk

    int n_threads_;
    std::vector<int> cpu_ids_;
    std::vector<std::thread> workers_;
    const std::function<void(int, int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t n_chunks_ = 0;
    split split_ = k_default_split;                  // the setting
    std::atomic<split> job_split_{k_default_split};  // the current job's (read by workers)
    int range_chunks_ = k_default_range_chunks;
    struct alignas(64) range {
        std::atomic<uint64_t> word{~uint64_t(0)};  // ranges and halving: thread t's chunks still to run
    };
    std::vector<range> ranges_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<uint64_t> claim_{0};     // (generation << 32) | next chunk index of the current job
    std::atomic<int64_t> completed_{0};  // chunks of the current job finished
    std::atomic<bool> stop_{false};
    std::atomic<int> sleepers_{0};
    std::mutex mu_;
    std::condition_variable cv_;
    std::mutex error_mu_;
    std::exception_ptr error_;
    std::atomic<pool_trace*> trace_{nullptr};
};

}  // namespace memtile
