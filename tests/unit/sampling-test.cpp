// memtile::sampler's device draws (sampler::next_draw) and the generation loop through an executor's
// device-sampling capability (CPU only); the GPU sampler against the host one (skipped without a CUDA device).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <tuple>

#include "backends/cuda/cuda-backend.h"
#include "core/error.h"
#include "runtime/executor.h"
#include "runtime/generator.h"
#include "support/cuda-checks.h"
#include "support/sampling-checks.h"

namespace memtile {
namespace {

TEST(sampler_draw, takes_the_uniform_numbers_sample_takes) {
    sampling_params p;
    p.seed = 42;
    const auto logits = test::test_logits(500, 0, 3);
    sampler host(p), dev(p);
    rng stream(42);
    sampling_draw d;
    for (int i = 0; i < 50; i++) {
        const int32_t h = host.sample(logits);
        dev.next_draw(d);
        EXPECT_EQ(d.u, stream.uniform()) << "draw " << i;
        const auto ref = test::reference_draw(logits, d);
        if (ref.margin >= test::near_boundary) {
            EXPECT_EQ(ref.token, h) << "draw " << i;
        }
    }
    p.temperature = 0;
    sampler greedy(p);
    greedy.next_draw(d);
    EXPECT_EQ(d.u, 0.0);  // greedy takes no number, as sample() takes none
}

TEST(sampler_draw, lists_the_recent_window_with_counts) {
    sampling_params p;
    p.repeat_penalty = 1.2f;
    p.repeat_last_n = 4;
    sampler s(p);
    for (int32_t t : {9, 5, 7, 5, 9, 5}) s.accept(t);  // window: 7 5 9 5
    sampling_draw d;
    s.next_draw(d);
    ASSERT_EQ(d.penalty_ids.size(), 3u);
    ASSERT_EQ(d.penalty_counts.size(), 3u);
    for (size_t i = 0; i < 3; i++) {
        const int expected = d.penalty_ids[i] == 5 ? 2 : 1;
        EXPECT_TRUE(d.penalty_ids[i] == 5 || d.penalty_ids[i] == 7 || d.penalty_ids[i] == 9) << d.penalty_ids[i];
        EXPECT_EQ(d.penalty_counts[i], expected) << d.penalty_ids[i];
    }
    p.repeat_penalty = 1.0f;
    sampler off(p);
    off.accept(3);
    off.next_draw(d);
    EXPECT_TRUE(d.penalty_ids.empty());
}

// The double-precision reference (the GPU check's oracle for near-boundary cases) agrees with the host sampler.
TEST(sampler_draw, the_reference_agrees_with_the_host_sampler) {
    int index = 0, near = 0, draws = 0;
    for (sampling_params p : test::sampler_param_sets()) {
        p.seed = uint64_t(index);
        const auto logits = test::test_logits(2000, index % 3, uint64_t(index) + 5);
        sampler host(p), dev(p);
        sampling_draw d;
        for (int i = 0; i < 4; i++, draws++) {
            const int32_t h = host.sample(logits);
            dev.next_draw(d);
            const auto ref = test::reference_draw(logits, d);
            if (ref.token != h) {
                EXPECT_LT(ref.margin, test::near_boundary) << "set " << index << " draw " << i;
                near++;
            }
            host.accept(h);
            dev.accept(h);
        }
        index++;
    }
    std::cout << "[ sampler  ] " << draws << " draws, " << near << " differ from the reference near a boundary\n";
    EXPECT_LE(near * 100, draws);
}

// An executor whose logits depend only on the position; optionally it samples "on the device" (here: the
// reference on the draw it is given), as the CUDA executor does.
class fake_executor final : public executor, public device_sampling {
public:
    explicit fake_executor(bool device) : device_(device) { cfg_.n_vocab = 300; }
    const model_config& config() const override { return cfg_; }
    const gguf_file& file() const override { fail("test", "no file"); }
    std::span<const float> forward(std::span<const int32_t> tokens) override {
        used_ += uint32_t(tokens.size());
        logits_ = test::test_logits(int(cfg_.n_vocab), 0, used_);
        return logits_;
    }
    uint32_t used() const override { return used_; }
    uint32_t n_ctx() const override { return 64; }
    void truncate(uint32_t n) override { used_ = std::min(used_, n); }
    std::string device() const override { return "fake"; }
    std::string describe() const override { return "fake"; }
    int threads() const override { return 0; }
    device_sampling* device_sampler() override { return device_ ? this : nullptr; }
    void append(std::span<const int32_t> tokens) override {
        appended_ += int(tokens.size());
        forward(tokens);
    }
    int32_t sample(const sampling_draw& d) override {
        draws_++;
        return test::reference_draw(logits_, d).token;
    }
    int appended_ = 0, draws_ = 0;

private:
    bool device_;
    model_config cfg_;
    uint32_t used_ = 0;
    std::vector<float> logits_;
};

TEST(generator, samples_through_the_device_capability_with_the_same_stream) {
    for (float temp : {0.0f, 0.8f}) {
        sampling_params p;
        p.temperature = temp;
        p.repeat_penalty = 1.2f;
        p.seed = 11;
        generate_options o;
        o.n_predict = 24;
        const std::vector<int32_t> prompt = {1, 2, 3};
        fake_executor host_ex(false), dev_ex(true);
        sampler hs(p), ds(p);
        const auto a = generate(host_ex, nullptr, hs, prompt, o, nullptr);
        const auto b = generate(dev_ex, nullptr, ds, prompt, o, nullptr);
        EXPECT_EQ(a.tokens, b.tokens) << "temperature " << temp;
        EXPECT_EQ(dev_ex.draws_, 24);
        EXPECT_EQ(dev_ex.appended_, 3 + 23);  // the prompt, then every sampled token but the last
        EXPECT_EQ(host_ex.appended_, 0);
    }
}

bool have_device() {
    return cuda::compiled() && cuda::device_count() > 0;
}

#define MEMTILE_SKIP_WITHOUT_CUDA() \
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")"

TEST(gpu_sampler, matches_the_host_sampler) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    for (const auto& [n_vocab, draws] : {std::pair<int, int>{1000, 8}, {32000, 4}}) {
        const auto c = test::compare_gpu_sampler(n_vocab, draws, uint64_t(n_vocab));
        std::cout << "[ gpu      ] vocabulary " << n_vocab << ": " << c.draws << " draws, " << c.equal << " equal, "
                  << c.near_boundary << " near a boundary, " << c.unexplained << " other\n";
        EXPECT_EQ(c.unexplained, 0) << c.first_unexplained;
        EXPECT_LE(c.near_boundary * 100, c.draws);
    }
}

TEST(gpu_sampler, decoder_path_matches_the_host_sampler) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    const auto dir = std::filesystem::temp_directory_path() / "memtile-cuda-test";
    std::filesystem::create_directories(dir);
    const std::string path = test::make_synthetic(dir.string(), "tiny", file_type::q8_0);
    for (sampling_params p : test::decoder_sampling_params()) {
        p.seed = 5;
        const auto r = test::compare_decoder_sampling(path, p, 40);
        EXPECT_TRUE(r.first_mismatch < 0 || r.near_boundary)
            << "temp " << p.temperature << ": differs at step " << r.first_mismatch;
    }
}

// memtile serve's path: one call draws a step's rows, each with its own parameters, window and seed.
TEST(gpu_sampler, batched_rows_match_the_host_sampler) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    for (const auto& [n_vocab, rows, with_argmax] : {std::tuple<int, int, bool>{1000, 4, true}, {32000, 7, false}}) {
        const auto c = test::compare_gpu_sampler_rows(n_vocab, rows, 4, uint64_t(n_vocab) + 3, with_argmax);
        std::cout << "[ gpu      ] vocabulary " << n_vocab << ", " << rows << " rows per call: " << c.draws
                  << " draws, " << c.equal << " equal, " << c.near_boundary << " near a boundary, " << c.unexplained
                  << " other\n";
        EXPECT_EQ(c.draws, int(test::sampler_param_sets().size()) * 4);
        EXPECT_EQ(c.unexplained, 0) << c.first_unexplained;
        EXPECT_LE(c.near_boundary * 100, c.draws);
    }
}

TEST(gpu_sampler, batch_decoder_path_matches_the_host_sampler) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    const auto dir = std::filesystem::temp_directory_path() / "memtile-cuda-test";
    std::filesystem::create_directories(dir);
    const std::string path = test::make_synthetic(dir.string(), "tiny", file_type::q8_0);
    const auto r = test::compare_batch_sampling(path, 5, 30, test::decoder_sampling_params());
    EXPECT_GT(r.tokens, 5 * 20);
    EXPECT_EQ(r.differ, r.near) << r.first;
}

}  // namespace
}  // namespace memtile
