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
#include <vector>

namespace memtile {

class thread_pool {
public:
    explicit thread_pool(int n_threads, const std::vector<int>& cpu_ids = {});
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(thread_index, begin, end) over disjoint chunks covering [0, n); returns when all are done.
    // Chunks are claimed dynamically (about 4 per thread), so one thread may run several chunks and a thread
    // the OS has not scheduled yet simply gets none: on a busy machine the call degrades to the speed of the
    // threads that do run instead of waiting for one that does not. fn must only accumulate per thread_index.
    // Exceptions thrown by fn are rethrown here (the first one). Not reentrant: call from one thread.
    void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

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

private:
    void worker(int index);
    void run_chunks(int index, uint64_t generation);

    int n_threads_;
    std::vector<int> cpu_ids_;
    std::vector<std::thread> workers_;
    const std::function<void(int, int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t n_chunks_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<uint64_t> claim_{0};     // (generation << 32) | next chunk index of the current job
    std::atomic<int64_t> completed_{0};  // chunks of the current job finished
    std::atomic<bool> stop_{false};
    std::atomic<int> sleepers_{0};
    std::mutex mu_;
    std::condition_variable cv_;
    std::mutex error_mu_;
    std::exception_ptr error_;
};

}  // namespace memtile
