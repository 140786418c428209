#include "core/thread-pool.h"

#include "core/cpu-topology.h"
#include "core/error.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace memtile {
namespace {

constexpr int k_spin_us = 2000;

inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

uint64_t pool_trace::clock() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
#endif
}

thread_pool::thread_pool(int n_threads, const std::vector<int>& cpu_ids)
    : n_threads_(n_threads < 1 ? 1 : n_threads), cpu_ids_(cpu_ids), ranges_(size_t(n_threads_)) {
    if (!cpu_ids_.empty()) pin_current_thread(cpu_ids_[0]);
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard lk(mu_);
        stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::set_split(split s, int chunks_per_thread) {
    split_ = s;
    range_chunks_ = std::clamp(chunks_per_thread, 1, 1 << 16);
}

bool thread_pool::pin_current_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::pair<int64_t, int64_t> thread_pool::chunk_bounds(int64_t chunk) const {
    const int64_t per_share = n_chunks_ / n_threads_;
    if (job_split_.load(std::memory_order_relaxed) != split::halving || per_share * n_threads_ != n_chunks_ ||
        per_share < 2)
        return {job_n_ * chunk / n_chunks_, job_n_ * (chunk + 1) / n_chunks_};
    // Share s of [0, n), its chunk k from 1 - 2^-k to 1 - 2^-(k+1) of it (the last one to its end).
    const int64_t s = chunk / per_share, k = chunk % per_share;
    const int64_t s0 = job_n_ * s / n_threads_, len = job_n_ * (s + 1) / n_threads_ - s0;
    const auto at = [&](int64_t i) { return i >= per_share ? len : len - (len >> i); };
    return {s0 + at(k), s0 + at(k + 1)};
}

void thread_pool::run_chunk(int index, uint64_t generation, int64_t chunk, pool_trace* trace) {
    const auto [begin, end] = chunk_bounds(chunk);
    const uint64_t t0 = trace ? pool_trace::clock() : 0;
    try {
        if (begin < end) (*job_)(index, begin, end);
    } catch (...) {
        std::lock_guard lk(error_mu_);
        if (!error_) error_ = std::current_exception();
    }
    if (trace) {
        const size_t i = trace->n_chunks.fetch_add(1, std::memory_order_relaxed);
        if (i < trace->chunks.size())
            trace->chunks[i] = {generation, chunk, begin, end, index, t0, pool_trace::clock()};
        else
            trace->dropped.fetch_add(1, std::memory_order_relaxed);
    }
    completed_.fetch_add(1, std::memory_order_acq_rel);
}

void thread_pool::run_chunks(int index, uint64_t generation) {
    pool_trace* const trace = trace_.load(std::memory_order_acquire);
    if (job_split_.load(std::memory_order_relaxed) != split::interleaved) {
        run_ranges(index, generation, trace);
        return;
    }
    for (;;) {
        uint64_t c = claim_.load(std::memory_order_acquire);
        if ((c >> 32) != (generation & 0xffffffffu)) return;  // a newer job, or none
        const int64_t chunk = int64_t(c & 0xffffffffu);
        if (chunk >= n_chunks_) return;
        if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
        run_chunk(index, generation, chunk, trace);
    }
}

namespace {

// A thread's range of chunks in split::ranges and split::halving: (job tag << 48) | (front << 24) | back, chunks
// [front, back) left.
constexpr uint64_t range_word(uint64_t generation, int64_t front, int64_t back) {
    return ((generation & 0xffff) << 48) | (uint64_t(front) << 24) | uint64_t(back);
}
constexpr int64_t range_front(uint64_t w) {
    return int64_t((w >> 24) & 0xffffff);
}
constexpr int64_t range_back(uint64_t w) {
    return int64_t(w & 0xffffff);
}

}  // namespace

void thread_pool::run_ranges(int index, uint64_t generation, pool_trace* trace) {
    // Own range first, front to back, so that the thread's chunks are one ascending stream; then the others'
    // ranges from their backs (a thread the OS has not scheduled loses its chunks to the ones that run).
    const uint64_t tag = generation & 0xffff;
    for (int k = 0; k < n_threads_; k++) {
        const bool own = k == 0;
        std::atomic<uint64_t>& r = ranges_[size_t((index + k) % n_threads_)].word;
        for (;;) {
            uint64_t w = r.load(std::memory_order_acquire);
            if ((w >> 48) != tag) return;  // a newer job
            const int64_t front = range_front(w), back = range_back(w);
            if (front >= back) break;
            const uint64_t next = own ? w + (uint64_t(1) << 24) : w - 1;
            if (!r.compare_exchange_weak(w, next, std::memory_order_acq_rel)) continue;
            run_chunk(index, generation, own ? front : back - 1, trace);
        }
    }
}

void thread_pool::worker(int index) {
    if (size_t(index) < cpu_ids_.size()) pin_current_thread(cpu_ids_[size_t(index)]);
    uint64_t seen = 0;
    for (;;) {
        // Spin for a while for the next job, then sleep until notified.
        const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(k_spin_us);
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
            cpu_relax();
            if (++spins % 256 == 0 && std::chrono::steady_clock::now() > spin_until) {
                std::unique_lock lk(mu_);
                sleepers_.fetch_add(1);
                cv_.wait(lk, [&] { return generation_.load() != seen || stop_.load(); });
                sleepers_.fetch_sub(1);
                break;
            }
        }
        if (stop_.load()) return;
        seen = generation_.load(std::memory_order_acquire);
        run_chunks(index, seen);
    }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
    parallel_for(n, fn, split_, range_chunks_);
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn, split s,
                               int chunks_per_thread) {
    chunks_per_thread = std::clamp(chunks_per_thread, 1, 1 << 16);
    pool_trace* const trace = trace_.load(std::memory_order_acquire);
    const uint64_t enter = trace ? pool_trace::clock() : 0;
    // Records the call (its chunks were recorded by the threads that ran them).
    const auto record = [&](uint64_t gen, int64_t chunks, uint64_t publish) {
        const size_t i = trace->n_calls.fetch_add(1, std::memory_order_relaxed);
        if (i < trace->calls.size())
            trace->calls[i] = {gen, n, chunks, enter, publish, pool_trace::clock()};
        else
            trace->dropped.fetch_add(1, std::memory_order_relaxed);
    };
    if (n_threads_ == 1 || n <= 1) {
        if (n > 0) fn(0, 0, n);
        if (!trace) return;
        // No job number without workers: the call's index in the trace, marked by the top bit, pairs it with its chunk.
        const uint64_t id = (uint64_t(1) << 63) | trace->n_calls.load(std::memory_order_relaxed);
        if (n > 0) {
            const size_t i = trace->n_chunks.fetch_add(1, std::memory_order_relaxed);
            if (i < trace->chunks.size())
                trace->chunks[i] = {id, 0, 0, n, 0, enter, pool_trace::clock()};
            else
                trace->dropped.fetch_add(1, std::memory_order_relaxed);
        }
        record(id, n > 0 ? 1 : 0, enter);
        return;
    }
    // First close the previous job's claims: a worker still inside run_chunks() of that job may be between
    // reading claim_ and reading n_chunks_, and must not see the new count against the old claim word.
    claim_.store(~uint64_t(0), std::memory_order_release);
    for (int t = 0; t < n_threads_; t++) ranges_[size_t(t)].word.store(~uint64_t(0), std::memory_order_release);
    job_ = &fn;
    job_n_ = n;
    job_split_.store(s, std::memory_order_relaxed);
    // split::ranges and split::halving keep chunk indices in 24-bit fields (range_word).
    n_chunks_ = std::min<int64_t>(
        n, s != split::interleaved ? std::min<int64_t>(int64_t(n_threads_) * chunks_per_thread, (int64_t(1) << 24) - 1)
                                   : int64_t(n_threads_) * 4);
    error_ = nullptr;
    completed_.store(0, std::memory_order_relaxed);
    uint64_t gen;
    {
        // The increment is done under the mutex so that a worker about to sleep cannot miss it.
        std::lock_guard lk(mu_);
        gen = generation_.load() + 1;
        claim_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
        for (int t = 0; t < n_threads_; t++) {
            const int64_t share = (t + n_threads_ - 1) % n_threads_;  // worker t: share t - 1; the caller: the last
            ranges_[size_t(t)].word.store(
                range_word(gen, n_chunks_ * share / n_threads_, n_chunks_ * (share + 1) / n_threads_),
                std::memory_order_release);
        }
        generation_.store(gen, std::memory_order_release);
    }
    const uint64_t publish = trace ? pool_trace::clock() : 0;
    if (sleepers_.load() > 0) cv_.notify_all();
    run_chunks(0, gen);
    // Only chunks a worker has claimed are waited for; yield now and then in case that worker shares this core.
    for (int spins = 0; completed_.load(std::memory_order_acquire) != n_chunks_; spins++) {
        cpu_relax();
        if (spins % 1024 == 1023) std::this_thread::yield();
    }
    if (trace) record(gen, n_chunks_, publish);
    if (error_) std::rethrow_exception(error_);
}

std::vector<int> thread_pool::parse_cpu_list(const std::string& list) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const bool know_allowed = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    std::vector<int> cpus;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t end = std::min(list.find(',', start), list.size());
        const std::string item = list.substr(start, end - start);
        // "N" or "N-M", digits only.
        const size_t dash = item.find('-');
        const std::string a = item.substr(0, dash), b = dash == std::string::npos ? a : item.substr(dash + 1);
        auto number = [](const std::string& t) {
            if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) return -1;
            return std::stoi(t);
        };
        const int lo = number(a), hi = number(b);
        if (lo < 0 || hi < lo || hi >= CPU_SETSIZE)
            fail("cpu", "--cpu-mask: '{}' is not a CPU id or range (expected e.g. 0,2-3)", item);
        for (int c = lo; c <= hi; c++) {
            if (know_allowed && !CPU_ISSET(c, &allowed)) fail("cpu", "--cpu-mask: CPU {} is not available here", c);
            if (std::find(cpus.begin(), cpus.end(), c) != cpus.end()) fail("cpu", "--cpu-mask: CPU {} repeated", c);
            cpus.push_back(c);
        }
        start = end + 1;
    }
    return cpus;
}

int thread_pool::default_threads() {
    return std::max(1, this_machine_topology().performance_cores());
}

std::vector<int> thread_pool::default_cpus(int n_threads) {
    // Uniform machines are left to the scheduler; on hybrid parts the threads are kept off efficiency cores,
    // whose slower chunks every parallel_for would wait for.
    const cpu_topology& t = this_machine_topology();
    std::vector<int> cpus = t.hybrid ? t.performance_cpus() : std::vector<int>{};
    if (int(cpus.size()) < n_threads) return {};
    cpus.resize(size_t(n_threads));
    return cpus;
}

}  // namespace memtile
