#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/thread-pool.h"

using namespace memtile;

// Many back-to-back jobs of varying sizes (the decode pattern): every index is covered exactly once, and a
// job never sees chunks of another. Catches lost wake-ups and stale claims between consecutive jobs.
TEST(thread_pool, back_to_back_jobs_cover_every_index_once) {
    for (int threads : {2, 3, 4}) {
        thread_pool pool(threads);
        std::vector<std::atomic<int>> hits(4096);
        for (int job = 0; job < 20000; job++) {
            const int64_t n = 1 + (job * 7919) % 97;
            for (int64_t i = 0; i < n; i++) hits[size_t(i)].store(0, std::memory_order_relaxed);
            pool.parallel_for(n, [&](int th, int64_t a, int64_t b) {
                ASSERT_GE(th, 0);
                ASSERT_LT(th, threads);
                for (int64_t i = a; i < b; i++) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
            });
            for (int64_t i = 0; i < n; i++) ASSERT_EQ(hits[size_t(i)].load(), 1) << "job " << job << " index " << i;
        }
    }
}

TEST(thread_pool, exceptions_reach_the_caller_and_the_pool_survives) {
    thread_pool pool(2);
    EXPECT_THROW(pool.parallel_for(100,
                                   [](int, int64_t a, int64_t) {
                                       if (a > 50) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int, int64_t a, int64_t b) { sum += b - a; });
    EXPECT_EQ(sum.load(), 100);
}

TEST(thread_pool, idle_workers_sleep_and_wake) {
    thread_pool pool(2);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(10, [&](int, int64_t a, int64_t b) { sum += b - a; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin window: workers sleep
    pool.parallel_for(10, [&](int, int64_t a, int64_t b) { sum += b - a; });
    EXPECT_EQ(sum.load(), 20);
    EXPECT_GE(thread_pool::default_threads(), 1);
}

TEST(thread_pool, cpu_lists_parse_and_reject_bad_items) {
    EXPECT_EQ(thread_pool::parse_cpu_list("0"), std::vector<int>({0}));
    if (thread_pool::default_threads() >= 2 || std::thread::hardware_concurrency() >= 2) {
        EXPECT_EQ(thread_pool::parse_cpu_list("0-1"), std::vector<int>({0, 1}));
        EXPECT_EQ(thread_pool::parse_cpu_list("1,0"), std::vector<int>({1, 0}));
    }
    for (const char* bad : {"", "a", "1-0", "0,0", "-1", "0-", "2x", "99999"})
        EXPECT_THROW(thread_pool::parse_cpu_list(bad), memtile::error) << bad;
    // A pinned pool still computes correctly.
    thread_pool pool(1, {0});
    std::atomic<int64_t> sum{0};
    pool.parallel_for(10, [&](int, int64_t a, int64_t b) { sum += b - a; });
    EXPECT_EQ(sum.load(), 10);
}
