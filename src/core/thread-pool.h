// One persistent pool of worker threads (created once, reused for every operation: no per-op thread
// creation). parallel_for splits [0, n) into contiguous chunks, one per thread; the calling thread works
// too, so a pool of N threads has N-1 workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace memtile {

class thread_pool {
public:
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(thread_index, begin, end) over disjoint chunks covering [0, n); returns when all are done.
    // Exceptions thrown by fn are rethrown here (the first one).
    void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

    // Number of physical cores available to this process (default thread count).
    static int default_threads();

private:
    void worker(int index);
    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    const std::function<void(int, int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace memtile
