#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
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
            // Every hand-out in turn (switched between jobs, as a benchmark does).
            const int mode = job % 6;
            const thread_pool::split split = mode == 0   ? thread_pool::split::interleaved
                                             : mode >= 4 ? thread_pool::split::halving
                                                         : thread_pool::split::ranges;
            pool.set_split(split, mode == 1 ? 1 : mode == 2 || mode == 4 ? 3 : 8);
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
    pool.set_split(thread_pool::split::ranges, 4);
    EXPECT_THROW(pool.parallel_for(100,
                                   [](int, int64_t a, int64_t) {
                                       if (a > 50) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int, int64_t a, int64_t b) { sum += b - a; });
    EXPECT_EQ(sum.load(), 100);
}

// split::ranges: worker t owns the (t - 1)-th contiguous share of the chunks (the caller the last) and runs it front
// to back (each chunk starting where its previous one ended), then takes chunks of the other shares from their
// backs (descending).
TEST(thread_pool, ranges_run_each_share_front_to_back_and_steal_from_the_back) {
    for (int threads : {2, 3}) {
        thread_pool pool(threads);
        for (int per_thread : {1, 2, 8}) {
            pool.set_split(thread_pool::split::ranges, per_thread);
            for (int job = 0; job < 500; job++) {
                const int64_t n = 5 + (job * 7919) % 301;
                const int64_t chunks = std::min<int64_t>(n, int64_t(threads) * per_thread);
                std::mutex mu;
                std::vector<std::vector<std::pair<int64_t, int64_t>>> seen(static_cast<size_t>(threads));
                pool.parallel_for(n, [&](int th, int64_t a, int64_t b) {
                    if (job % 3 == 0 && th == 0) std::this_thread::yield();  // let the others steal now and then
                    std::lock_guard lk(mu);
                    seen[size_t(th)].push_back({a, b});
                });
                int64_t covered = 0;
                for (int th = 0; th < threads; th++) {
                    // The chunk index of a begin offset, and the share that chunk belongs to.
                    const auto share_of = [&](int64_t begin) {
                        int64_t c = 0;
                        while (n * (c + 1) / chunks <= begin) c++;
                        int64_t t = 0;
                        while (chunks * (t + 1) / threads <= c) t++;
                        return t;
                    };
                    int64_t own_end = -1, stolen_begin = -1;
                    for (const auto& [a, b] : seen[size_t(th)]) {
                        covered += b - a;
                        if (share_of(a) == (th + threads - 1) % threads) {  // worker t owns share t - 1
                            EXPECT_TRUE(own_end < 0 || a == own_end) << "own share not in order, job " << job;
                            EXPECT_LT(stolen_begin, 0) << "own chunk after a stolen one, job " << job;
                            own_end = b;
                        } else {
                            EXPECT_TRUE(stolen_begin < 0 || b <= stolen_begin ||
                                        share_of(b - 1) != share_of(stolen_begin))
                                << "stolen chunks of one share not from the back, job " << job;
                            stolen_begin = a;
                        }
                    }
                }
                EXPECT_EQ(covered, n);
            }
        }
    }
}

// split::halving: each share's chunks halve towards its back (the last two equal), run front to back by their owner;
// every index is covered once. With fewer indices than threads x chunks the chunks are equal, as for ranges.
TEST(thread_pool, halving_chunks_halve_towards_the_back_of_each_share) {
    for (int threads : {2, 3}) {
        thread_pool pool(threads);
        for (int per_thread : {2, 4, 6}) {
            pool.set_split(thread_pool::split::halving, per_thread);
            for (int64_t n : {int64_t(1000), int64_t(4096) + 7, int64_t(threads) * per_thread - 1}) {
                std::mutex mu;
                std::vector<std::pair<int64_t, int64_t>> chunks;
                pool.parallel_for(n, [&](int, int64_t a, int64_t b) {
                    std::lock_guard lk(mu);
                    chunks.push_back({a, b});
                });
                std::sort(chunks.begin(), chunks.end());
                int64_t next = 0;
                for (const auto& [a, b] : chunks) {
                    EXPECT_EQ(a, next);
                    next = b;
                }
                EXPECT_EQ(next, n);
                if (n < int64_t(threads) * per_thread) {
                    EXPECT_EQ(int64_t(chunks.size()), n);  // equal chunks of one index each
                    continue;
                }
                ASSERT_EQ(int64_t(chunks.size()), int64_t(threads) * per_thread) << "n " << n;
                for (int s = 0; s < threads; s++) {
                    const int64_t s0 = n * s / threads, len = n * (s + 1) / threads - s0;
                    for (int k = 0; k < per_thread; k++) {
                        const auto [a, b] = chunks[size_t(s * per_thread + k)];
                        const int64_t want_a = s0 + (k == 0 ? 0 : len - (len >> k));
                        const int64_t want_b = s0 + (k + 1 == per_thread ? len : len - (len >> (k + 1)));
                        EXPECT_EQ(a, want_a) << "share " << s << " chunk " << k << " n " << n;
                        EXPECT_EQ(b, want_b) << "share " << s << " chunk " << k << " n " << n;
                    }
                    // The first chunk is half the share, the last two are equal (within one index).
                    const auto first = chunks[size_t(s * per_thread)];
                    EXPECT_NEAR(double(first.second - first.first), len / 2.0, 1.0);
                    const auto l1 = chunks[size_t(s * per_thread + per_thread - 1)],
                               l2 = chunks[size_t(s * per_thread + per_thread - 2)];
                    EXPECT_LE(std::abs((l1.second - l1.first) - (l2.second - l2.first)), 1);
                }
            }
        }
    }
}

// The trace records every call and chunk of a job between publish and done; records beyond its arrays are dropped
// and counted.
TEST(thread_pool, trace_records_calls_and_chunks) {
    for (int threads : {1, 2}) {
        thread_pool pool(threads);
        pool_trace trace(4, 128);  // room for every chunk of the three calls (ranges 16: up to 32 per call)
        pool.set_trace(&trace);
        for (int64_t n : {1, 37, 100}) pool.parallel_for(n, [](int, int64_t, int64_t) {});
        pool.set_trace(nullptr);
        pool.parallel_for(10, [](int, int64_t, int64_t) {});  // not recorded
        ASSERT_EQ(trace.n_calls.load(), 3u);
        EXPECT_EQ(trace.dropped.load(), 0u);
        size_t chunks = 0;
        for (size_t i = 0; i < 3; i++) {
            const pool_trace::call& c = trace.calls[i];
            EXPECT_LE(c.enter, c.publish);
            EXPECT_LE(c.publish, c.done);
            int64_t covered = 0, n_chunks = 0;
            for (size_t j = 0; j < trace.n_chunks.load(); j++) {
                const pool_trace::chunk& ch = trace.chunks[j];
                if (ch.generation != c.generation) continue;
                covered += ch.end - ch.begin;
                n_chunks++;
                EXPECT_GE(ch.start, c.enter);
                EXPECT_LE(ch.stop, c.done);
                EXPECT_LE(ch.start, ch.stop);
            }
            EXPECT_EQ(covered, c.n);
            EXPECT_EQ(n_chunks, c.n_chunks);
            chunks += size_t(n_chunks);
        }
        EXPECT_EQ(chunks, trace.n_chunks.load());
        trace.clear();
        pool.set_trace(&trace);
        for (int i = 0; i < 6; i++) pool.parallel_for(2, [](int, int64_t, int64_t) {});
        pool.set_trace(nullptr);
        EXPECT_EQ(trace.n_calls.load(), 6u);
        EXPECT_EQ(trace.dropped.load(), 2u);
    }
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
