#include "core/thread-pool.h"

#include <sched.h>

#include <fstream>
#include <set>
#include <string>

namespace memtile {

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

static void run_chunk(const std::function<void(int, int64_t, int64_t)>& fn, int index, int n_threads, int64_t n) {
    const int64_t begin = n * index / n_threads, end = n * (index + 1) / n_threads;
    if (begin < end) fn(index, begin, end);
}

void thread_pool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int, int64_t, int64_t)>* job;
        int64_t n;
        {
            std::unique_lock lk(mu_);
            start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = job_n_;
        }
        std::exception_ptr err;
        try {
            run_chunk(*job, index, n_threads_, n);
        } catch (...) {
            err = std::current_exception();
        }
        std::lock_guard lk(mu_);
        if (err && !error_) error_ = err;
        if (--pending_ == 0) done_cv_.notify_one();
    }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
    if (n_threads_ == 1 || n <= 1) {
        if (n > 0) fn(0, 0, n);
        return;
    }
    {
        std::lock_guard lk(mu_);
        job_ = &fn;
        job_n_ = n;
        pending_ = n_threads_ - 1;
        error_ = nullptr;
        generation_++;
    }
    start_cv_.notify_all();
    std::exception_ptr err;
    try {
        run_chunk(fn, 0, n_threads_, n);
    } catch (...) {
        err = std::current_exception();
    }
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    if (!err) err = error_;
    if (err) std::rethrow_exception(err);
}

int thread_pool::default_threads() {
    // Physical cores among the CPUs this process may run on (SMT siblings counted once).
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return int(std::thread::hardware_concurrency());
    std::set<std::string> cores;
    int cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        cpus++;
        std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_cpus_list");
        std::string s;
        if (f && std::getline(f, s))
            cores.insert(s);
        else
            cores.insert("cpu" + std::to_string(cpu));
    }
    return cores.empty() ? (cpus ? cpus : 1) : int(cores.size());
}

}  // namespace memtile
