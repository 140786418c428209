// The CUDA prefill pass against the CPU engine and the batched decode step against the single-sequence
// decoder, on tiny synthetic models (skipped without a CUDA device; the device driver tests/cuda/cuda-check.cpp
// runs the same checks on more formats and the default model).
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/cuda/cuda-backend.h"
#include "support/cuda-checks.h"

namespace memtile {
namespace {

bool have_device() {
    return cuda::compiled() && cuda::device_count() > 0;
}

struct format_case {
    const char* preset;
    file_type type;
    double tolerance;
};

const format_case k_cases[] = {
    {"tiny", file_type::f16, 1e-5},      {"tiny", file_type::q8_0, 1e-3},
    {"tiny", file_type::q4_k_m, 1e-3},   {"tiny-qwen2", file_type::q8_0, 1e-3},
    {"tiny-phi3", file_type::f16, 1e-5}, {"tiny-llama3", file_type::q4_k_m, 1e-3},
};

std::string model_path(const format_case& c) {
    const auto dir = std::filesystem::temp_directory_path() / "memtile-cuda-test";
    std::filesystem::create_directories(dir);
    return test::make_synthetic(dir.string(), c.preset, c.type);
}

TEST(cuda_prefill, logits_and_following_decode_match_the_cpu_engine) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    for (const auto& c : k_cases) {
        const auto r = test::compare_prefill(model_path(c), 70, 60, 6);
        EXPECT_LE(r.prefill_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
        EXPECT_LE(r.decode_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
    }
}

TEST(cuda_prefill, reference_attention_matches_the_cpu_engine) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    cuda::prefill_options o;
    o.reference_attention = true;
    cuda::set_prefill_options(o);
    const auto r = test::compare_prefill(model_path(k_cases[0]), 70, 60, 2);
    cuda::set_prefill_options({});
    EXPECT_LE(r.prefill_nmse, k_cases[0].tolerance);
}

TEST(cuda_batch, batched_steps_equal_single_sequence_steps) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    for (const auto& c : k_cases) {
        const auto r = test::compare_batch(model_path(c), 4, 5);
        EXPECT_LE(r.worst_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(r.token_mismatches, 0) << c.preset << " " << file_type_name(c.type);
    }
}

// The batched step runs the single-sequence step's row kernels and, for one sequence, its matvec kernels: a
// batch of one is bit-equal to single-sequence decode. With several sequences the tensor-core products sum in
// another order than the batch-1 kernels (docs/cuda.md), but a sequence's logits must not depend on which
// other sequences share its step (6 sequences: one step of 6 vs two of 3).
TEST(cuda_batch, batch_of_one_is_bit_equal_and_steps_are_batch_invariant) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    for (const auto& c : {k_cases[1], k_cases[2]}) {
        const std::string path = model_path(c);
        const auto one = test::compare_batch(path, 1, 8);
        EXPECT_EQ(one.worst_nmse, 0.0) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(one.token_mismatches, 0) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(test::compare_batch_groupings(path, 6, 8), 0) << c.preset << " " << file_type_name(c.type);
    }
}

// The RMSNorm from parts in units of 256 (cuda::k_norm_fusion_k; tests/support/cuda-checks.h, compare_norm_k): with
// the bit set the K formats' logits stay within the CPU engine's bound, a batch of one stays bit-equal to the single
// step (the batched step forms the values the single step's consumers form from the parts) and a batch of 4 matches
// the single steps. Q5_K_M: the single step's consumers read rms_norm_parts_rows_k's values (no scaled Q5_K kernel).
TEST(cuda_batch, norm_from_parts_in_units_of_256_keeps_the_checks) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    const format_case cases[] = {
        {"tiny", file_type::q4_k_m, 1e-3}, {"tiny", file_type::q5_k_m, 1e-3}, {"tiny-llama3", file_type::q4_k_m, 1e-3}};
    for (const auto& c : cases) {
        const auto r = test::compare_norm_k(model_path(c), cuda::k_norm_fusion_k);
        EXPECT_LE(r.cpu_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(r.one_nmse, 0.0) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(r.one_mismatches, 0) << c.preset << " " << file_type_name(c.type);
        EXPECT_LE(r.batch_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
        EXPECT_EQ(r.batch_mismatches, 0) << c.preset << " " << file_type_name(c.type);
    }
}

TEST(cuda_batch, tensor_core_products_match_the_dp4a_kernels) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    for (dtype t : {dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::f16, dtype::bf16})
        for (int nb : {2, 5, 9, 16}) {
            const double tol = (t == dtype::f16 || t == dtype::bf16) ? 1e-5 : 1e-10;
            EXPECT_LE(cuda::check_batch_products(t, 768, 272, nb, 3), tol) << dtype_name(t) << " B=" << nb;
        }
}

// Session 11: the Q4_K products with their activations staged in shared memory (set_mma_q4k_xs mode 3, the default)
// give the bits of the kernels without.
TEST(cuda_batch, q4k_staged_activations_are_bit_equal) {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")";
    for (int nb : {2, 5, 8}) {
        const auto [n, e] = cuda::check_batch_q4k_xs(768, 272, nb, 3, 5);
        EXPECT_EQ(n, 0) << "B=" << nb;
        EXPECT_LE(e, 1e-10) << "B=" << nb;
        EXPECT_EQ(cuda::check_batch_q4k_xs(14336, 72, nb, 3, 6).first, 0) << "B=" << nb;
    }
}

}  // namespace
}  // namespace memtile
