// packed_arena (matmul.h): a model's repacked weights taken one after another from one mapping give the results of
// weights with buffers of their own, bit for bit, lie back to back in the order they were prepared, and an arena
// that is too small fails with an error instead of writing past its end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "quant/quant.h"

using namespace memtile;
using namespace memtile::cpu;

namespace {

std::vector<uint8_t> random_weight(dtype t, int64_t n_out, int64_t n_in, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> w(size_t(n_out * n_in));
    for (float& f : w) f = dist(rng);
    if (t != dtype::f32) return quantize_tensor(t, w.data(), n_out, n_in);
    std::vector<uint8_t> bytes(w.size() * sizeof(float));
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
}

weight_view view(dtype t, const std::vector<uint8_t>& data, int64_t n_out, int64_t n_in) {
    return {t, data.data(), n_in, n_out, size_t(row_bytes(t, uint64_t(n_in)))};
}

}  // namespace

TEST(cpu_packed_arena, weights_in_one_arena_match_own_buffers_and_lie_in_order) {
    const dtype types[] = {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k,
                           dtype::q6_k, dtype::f16,  dtype::bf16, dtype::f32};
    // Ragged row counts (not a multiple of the 8- or 32-row group), so some copies end inside a group.
    const int64_t n_in = 512, n_outs[] = {37, 7, 20, 9, 33, 37, 1, 40};
    std::vector<std::vector<uint8_t>> data;
    size_t total = 0;
    for (size_t i = 0; i < std::size(types); i++) {
        data.push_back(random_weight(types[i], n_outs[i], n_in, uint32_t(7 + i)));
        total += packed_bytes(view(types[i], data[i], n_outs[i], n_in), {.repack = true});
    }
    if (total == 0) GTEST_SKIP() << "no interleaved layout on this CPU";
    auto arena = std::make_shared<packed_arena>(total);
    thread_pool pool(2);
    const uint8_t* next = nullptr;
    for (size_t i = 0; i < std::size(types); i++) {
        const weight_view v = view(types[i], data[i], n_outs[i], n_in);
        const size_t bytes = packed_bytes(v, {.repack = true});
        const auto own = prepare_weight(v, {.repack = true});
        const auto in_arena = prepare_weight(v, {.repack = true, .arena = arena});
        SCOPED_TRACE(std::string(dtype_name(types[i])));
        ASSERT_GT(bytes, 0u);
        EXPECT_EQ(bytes % 64, 0u);
        EXPECT_LE(in_arena->streamed().size(), bytes);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(in_arena->streamed().data()) % 64, 0u);
        if (next) {
            EXPECT_EQ(in_arena->streamed().data(), next) << "not right after the previous copy";
        }
        next = in_arena->streamed().data() + bytes;
        ASSERT_EQ(in_arena->streamed().size(), own->streamed().size());
        EXPECT_EQ(std::memcmp(in_arena->streamed().data(), own->streamed().data(), own->streamed().size()), 0);
        for (int64_t n_tok : {1, 5}) {
            std::mt19937 rng{uint32_t(n_tok)};
            std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
            std::vector<float> x(size_t(n_in * n_tok));
            for (float& f : x) f = dist(rng);
            std::vector<float> a(size_t(n_outs[i] * n_tok), NAN), b(a.size(), NAN);
            matmul(*own, x.data(), n_tok, a.data(), pool);
            matmul(*in_arena, x.data(), n_tok, b.data(), pool);
            for (size_t k = 0; k < a.size(); k++) ASSERT_EQ(a[k], b[k]) << "n_tok " << n_tok << " element " << k;
        }
    }
    EXPECT_EQ(arena->used(), arena->capacity());
}

TEST(cpu_packed_arena, too_small_an_arena_fails_clearly) {
    const int64_t n_in = 256, n_out = 24;
    const auto data = random_weight(dtype::q4_k, n_out, n_in, 3);
    const weight_view v = view(dtype::q4_k, data, n_out, n_in);
    const size_t bytes = packed_bytes(v, {.repack = true});
    if (bytes == 0) GTEST_SKIP() << "no interleaved layout on this CPU";
    auto arena = std::make_shared<packed_arena>(bytes - 64);
    EXPECT_THROW(prepare_weight(v, {.repack = true, .arena = arena}), error);
    EXPECT_EQ(arena->used(), 0u);
    EXPECT_THROW(arena->take(100), error);  // not a multiple of 64
}

TEST(cpu_packed_arena, nothing_is_taken_without_repack) {
    const int64_t n_in = 256, n_out = 8;
    const auto q8 = random_weight(dtype::q8_0, n_out, n_in, 5);
    EXPECT_EQ(packed_bytes(view(dtype::q8_0, q8, n_out, n_in), {.repack = false}), 0u);
    // A format without an interleaved layout (only the size is read).
    const std::vector<uint8_t> q5(size_t(row_bytes(dtype::q5_0, uint64_t(n_in)) * n_out));
    EXPECT_EQ(packed_bytes(view(dtype::q5_0, q5, n_out, n_in), {.repack = true}), 0u);
    auto arena = std::make_shared<packed_arena>(4096);
    const auto w = prepare_weight(view(dtype::q8_0, q8, n_out, n_in), {.repack = false, .arena = arena});
    EXPECT_EQ(arena->used(), 0u);
    EXPECT_EQ(w->streamed().data(), q8.data());
}
