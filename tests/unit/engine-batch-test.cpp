// forward_batch (continuous batching) must give every sequence exactly the logits of its own single-token
// forward(): the weights are shared across sequences, the arithmetic of each row is not.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/transformer.h"
#include "support/test-paths.h"

using namespace memtile;

namespace {

void check_batch_equals_single(const std::string& file) {
    auto model = transformer::from_gguf(gguf_file::open(test::shared_path(file)));
    thread_pool pool(2);
    // Three sequences of different lengths, so positions and attention spans differ per row.
    const std::vector<std::vector<int32_t>> prompts = {{1, 15, 300}, {1, 7}, {1, 42, 99, 100, 5, 6}};
    std::vector<std::unique_ptr<forward_context>> single, batched;
    for (const auto& p : prompts) {
        single.push_back(std::make_unique<forward_context>(*model, 32, dtype::f16, pool));
        batched.push_back(std::make_unique<forward_context>(*model, 32, dtype::f16, pool));
        single.back()->forward(p);
        batched.back()->forward(p);
    }
    std::vector<int32_t> next = {11, 22, 33};
    for (int step = 0; step < 4; step++) {
        std::vector<forward_context*> ptrs;
        for (auto& b : batched) ptrs.push_back(b.get());
        forward_context::forward_batch(ptrs, next);
        for (size_t s = 0; s < prompts.size(); s++) {
            const auto want = single[s]->forward(std::span<const int32_t>(&next[s], 1));
            const auto got = batched[s]->logits();
            ASSERT_EQ(want.size(), got.size());
            for (size_t i = 0; i < want.size(); i++)
                ASSERT_EQ(want[i], got[i]) << file << " seq " << s << " step " << step;
            EXPECT_EQ(single[s]->used(), batched[s]->used());
            next[s] = (next[s] * 7 + int32_t(step)) % 500;
        }
    }
}

}  // namespace

TEST(engine_batch, equals_single_sequence_decode_llama) {
    check_batch_equals_single("quant/tiny-llama-Q8_0.gguf");
}

TEST(engine_batch, equals_single_sequence_decode_after_truncate) {
    auto model = transformer::from_gguf(gguf_file::open(test::shared_path("quant/tiny-llama-Q8_0.gguf")));
    thread_pool pool(1);
    forward_context a(*model, 16, dtype::f16, pool), b(*model, 16, dtype::f16, pool);
    a.forward(std::vector<int32_t>{1, 2, 3, 4, 5});
    a.truncate(3);  // the prefix cache's reuse: keep {1, 2, 3}, continue with 9
    b.forward(std::vector<int32_t>{1, 2, 3});
    forward_context* pa = &a;
    const int32_t t = 9;
    forward_context::forward_batch(std::span<forward_context* const>(&pa, 1), std::span<const int32_t>(&t, 1));
    const auto want = b.forward(std::span<const int32_t>(&t, 1));
    const auto got = a.logits();
    for (size_t i = 0; i < want.size(); i++) ASSERT_EQ(want[i], got[i]);
}

TEST(engine_batch, rejects_bad_batches) {
    auto model = transformer::from_gguf(gguf_file::open(test::shared_path("quant/tiny-llama-Q8_0.gguf")));
    thread_pool pool(1);
    forward_context a(*model, 2, dtype::f16, pool);
    forward_context* two[] = {&a, &a};
    const int32_t toks[] = {1, 2};
    EXPECT_THROW(forward_context::forward_batch(two, toks), error);
    forward_context* one[] = {&a};
    EXPECT_THROW(forward_context::forward_batch(one, toks), error);
    const int32_t bad[] = {100000};
    EXPECT_THROW(forward_context::forward_batch(one, bad), error);
    a.forward(std::vector<int32_t>{1, 2});
    EXPECT_THROW(forward_context::forward_batch(one, std::span<const int32_t>(toks, 1)), error);
}
