#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/thread-pool.h"
#include "observe/read-variants.h"

using namespace memtile;

namespace {

// Sum (mod 2^64) of every 64-bit word, the plain scalar way.
uint64_t word_sum(const uint8_t* p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        s += w;
    }
    return s;
}

}  // namespace

TEST(read_variants, every_variant_reads_every_word_once_for_any_thread_count) {
    // 6 MiB + 384 B: not a multiple of the 2 MiB chunks, the 32-128 KiB distances or the thread counts, so the
    // last chunk is short, shares are uneven, and prefetch must stop at each range's end.
    const size_t bytes = (size_t(6) << 20) + 16 * 384;
    std::vector<uint8_t> buf(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = uint8_t(i * 131 + (i >> 9));
    const uint64_t want = word_sum(buf.data(), bytes);
    auto variants = standard_read_variants();
    variants.push_back({prefetch_hint::t0, 64, size_t(128) * 3, 4});
    variants.push_back({prefetch_hint::none, 0, 0, 2, false, 3});  // streams without a vector path, over 2 passes
    std::set<std::string> names;
    for (const auto& v : variants) {
        names.insert(read_variant_name(v));
        for (int threads : {1, 2, 3, 7}) {
            uint64_t got = 0;
            for (int pass = 0; pass < v.passes; pass++)
                for (int t = 0; t < threads; t++) got += read_variant_share(v, buf.data(), bytes, pass, t, threads);
            EXPECT_EQ(got, want) << read_variant_name(v) << ", " << threads << " threads";
        }
    }
    EXPECT_EQ(names.size(), variants.size());  // every variant is told apart by its name
    EXPECT_EQ(read_variant_name(standard_read_variants()[0]), "plain");
    EXPECT_EQ(read_variant_name({prefetch_hint::t1, 32768, size_t(2) << 20, 1, true}), "t1-32k chunks-2m huge");
    EXPECT_EQ(read_variant_name({prefetch_hint::none, 0, 0, 1, true, 4}), "plain streams-4 huge");
}

TEST(read_variants, shares_that_do_not_split_fail_clearly) {
    std::vector<uint8_t> buf(1024);
    EXPECT_THROW(read_variant_share({prefetch_hint::none, 0, 0, 3}, buf.data(), 1024, 0, 0, 1), error);
    EXPECT_THROW(read_variant_share({prefetch_hint::none, 0, 100}, buf.data(), 1024, 0, 0, 1), error);
    EXPECT_THROW(read_variant_share({}, buf.data(), 1000, 0, 0, 1), error);
    EXPECT_THROW(read_variant_share({}, buf.data(), 1024, 0, 2, 2), error);
    EXPECT_THROW(read_variant_share({prefetch_hint::none, 0, 0, 2}, buf.data(), 1024, 2, 0, 1), error);
    EXPECT_THROW(read_variant_share({prefetch_hint::t1, 64, 0, 1, false, 4}, buf.data(), 1024, 0, 0, 1), error);
    EXPECT_THROW(read_variant_share({prefetch_hint::none, 0, 256, 1, false, 4}, buf.data(), 1024, 0, 0, 1), error);
    EXPECT_THROW(read_variant_share({prefetch_hint::none, 0, 0, 1, false, 0}, buf.data(), 1024, 0, 0, 1), error);
}

TEST(read_variants, quick_best_read_measures_and_rejects_odd_sizes) {
    const double gbps = quick_best_read_gbps(2, size_t(4) << 20, 1);
    EXPECT_GT(gbps, 0.0);
    EXPECT_TRUE(std::isfinite(gbps));
    EXPECT_THROW(quick_best_read_gbps(1, size_t(3) << 20, 1), error);  // not a multiple of 2 MiB
}

TEST(read_variants, best_index_is_the_largest_figure) {
    const std::vector<double> a = {30.1, 45.2, 44.9, 12.0};
    EXPECT_EQ(best_read_index(a), 1u);
    const std::vector<double> ties = {5, 7, 7};
    EXPECT_EQ(best_read_index(ties), 1u);
    const std::vector<double> one = {3};
    EXPECT_EQ(best_read_index(one), 0u);
    EXPECT_THROW(best_read_index(std::vector<double>{}), error);
}

TEST(read_variants, probe_checksums_agree_across_variants_and_pages) {
    thread_pool pool(2);
    read_probe probe(size_t(4) << 20, pool);
    const auto small = probe.buffer(false), huge = probe.buffer(true);
    ASSERT_EQ(small.size(), size_t(4) << 20);
    const uint64_t want = word_sum(small.data(), small.size());
    EXPECT_EQ(word_sum(huge.data(), huge.size()), want);  // both buffers hold the same words
    EXPECT_NE(want, 0u);
    const auto variants = standard_read_variants();
    const auto f = probe.measure(pool, variants, 2);
    ASSERT_EQ(f.size(), variants.size());
    for (size_t v = 0; v < f.size(); v++) {
        EXPECT_EQ(f[v].checksum, want) << read_variant_name(variants[v]);
        EXPECT_GT(f[v].gbps, 0.0);
    }
    thread_pool one(1);
    EXPECT_EQ(probe.measure(one, variants, 1)[2].checksum, want);
    EXPECT_THROW(read_probe(size_t(3) << 20, pool), error);
    EXPECT_THROW(probe.measure(pool, variants, 0), error);
}
