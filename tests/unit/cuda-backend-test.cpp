// CUDA backend vs the CPU engine on tiny synthetic models, one per weight format. Without a CUDA device
// (CI) every test reports itself skipped; the device-machine driver tests/cuda/cuda-check.cpp runs the same
// checks (tests/support/cuda-checks.h) with the larger models and the benchmarks.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/cuda/cuda-backend.h"
#include "core/error.h"
#include "support/cuda-checks.h"

namespace memtile {
namespace {

bool have_device() {
    return cuda::compiled() && cuda::device_count() > 0;
}

#define MEMTILE_SKIP_WITHOUT_CUDA() \
    if (!have_device()) GTEST_SKIP() << "no CUDA device (" << cuda::device_description() << ")"

TEST(cuda_backend, require_device_names_the_reason) {
    if (have_device()) GTEST_SKIP() << "a CUDA device is present";
    try {
        cuda::require_device();
        FAIL() << "require_device() did not throw";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("[cuda]"), std::string::npos) << e.what();
    }
}

struct format_case {
    const char* preset;
    file_type type;
    double tolerance;
};

TEST(cuda_backend, logits_match_the_cpu_engine_per_format) {
    MEMTILE_SKIP_WITHOUT_CUDA();
    const auto dir = std::filesystem::temp_directory_path() / "memtile-cuda-test";
    std::filesystem::create_directories(dir);
    const format_case cases[] = {
        {"tiny", file_type::f16, 1e-5},           {"tiny", file_type::bf16, 1e-5},
        {"tiny", file_type::q8_0, 1e-3},          {"tiny", file_type::q4_0, 1e-3},
        {"tiny", file_type::q4_k_m, 1e-3},        {"tiny", file_type::q5_k_m, 1e-3},
        {"tiny-qwen2", file_type::q8_0, 1e-3},    {"tiny-phi3", file_type::f16, 1e-5},
        {"tiny-llama3", file_type::q4_k_m, 1e-3},
    };
    for (const auto& c : cases) {
        const std::string path = test::make_synthetic(dir.string(), c.preset, c.type);
        const auto r = test::compare_logits(path, 12);
        EXPECT_LE(r.worst_nmse, c.tolerance) << c.preset << " " << file_type_name(c.type);
    }
}

}  // namespace
}  // namespace memtile
