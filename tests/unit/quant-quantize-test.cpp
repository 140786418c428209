// Quantization quality against llama.cpp and behaviour of the reference quantizers.
//
// The quality test quantizes every 2-D tensor of tiny-llama-f32.gguf with memtile and compares the RMS
// error of the round trip with the RMS error of llama.cpp's own file of that type (dequantized by memtile's
// bit-exact dequantizer), only for tensors llama.cpp stored in that very type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf-file.h"
#include "quant/quant-formats.h"
#include "quant/quant.h"

using namespace memtile;

namespace {

const std::string k_quant_dir = std::string(MEMTILE_SHARED_DIR) + "/quant/";

double rms_error(const std::vector<float>& a, const float* b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double e = double(a[i]) - b[i];
        sum += e * e;
    }
    return std::sqrt(sum / double(a.size()));
}

std::vector<float> round_trip(dtype t, const float* x, int64_t n_rows, int64_t row_len,
                              const float* importance = nullptr) {
    const std::vector<uint8_t> q = quantize_tensor(t, x, n_rows, row_len, importance);
    return dequantize_tensor(t, q.data(), n_rows, row_len);
}

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

struct quality_case {
    const char* file_type;  // llama.cpp file to compare with
    dtype type;             // tensors of that file stored in this type are compared
};

// memtile's error may exceed llama.cpp's by at most this factor on any tensor.
constexpr double k_max_rms_ratio = 1.02;

}  // namespace

class quant_quality : public testing::TestWithParam<quality_case> {};

TEST_P(quant_quality, rms_error_not_worse_than_llama_cpp) {
    const quality_case c = GetParam();
    const auto original = gguf_file::open(k_quant_dir + "tiny-llama-f32.gguf");
    const auto theirs = gguf_file::open(k_quant_dir + "tiny-llama-" + std::string(c.file_type) + ".gguf");
    int compared = 0;
    double sum_ratio = 0;
    for (const auto& t : original->tensors()) {
        if (t.type != dtype::f32 || t.dims.size() != 2) continue;
        const gguf_tensor_info* ref = theirs->find_tensor(t.name);
        ASSERT_NE(ref, nullptr) << t.name;
        if (ref->type != c.type) continue;
        const auto n_rows = int64_t(t.n_rows()), row_len = int64_t(t.dims[0]);
        const auto* x = reinterpret_cast<const float*>(t.data);
        const std::vector<float> x_copy(x, x + t.n_elems);

        const double rms_theirs = rms_error(dequantize_tensor(ref->type, ref->data, n_rows, row_len), x);
        const double rms_ours = rms_error(round_trip(c.type, x_copy.data(), n_rows, row_len), x);
        std::printf("  %-7s %-6s %-26s memtile %.6e  llama.cpp %.6e  ratio %.4f\n", c.file_type,
                    std::string(dtype_name(c.type)).c_str(), t.name.c_str(), rms_ours, rms_theirs,
                    rms_theirs > 0 ? rms_ours / rms_theirs : 1.0);
        EXPECT_LE(rms_ours, k_max_rms_ratio * rms_theirs) << c.file_type << " " << t.name;
        sum_ratio += rms_theirs > 0 ? rms_ours / rms_theirs : 1.0;
        ++compared;
    }
    ASSERT_GT(compared, 0) << "no tensor of " << c.file_type << " is stored as " << dtype_name(c.type);
    std::printf("  %-7s %-6s mean ratio over %d tensors: %.4f\n", c.file_type, std::string(dtype_name(c.type)).c_str(),
                compared, sum_ratio / compared);
}

INSTANTIATE_TEST_SUITE_P(quant_files, quant_quality,
                         testing::Values(quality_case{"F16", dtype::f16}, quality_case{"BF16", dtype::bf16},
                                         quality_case{"Q8_0", dtype::q8_0}, quality_case{"Q4_0", dtype::q4_0},
                                         quality_case{"Q4_K_M", dtype::q4_k}, quality_case{"Q5_K_M", dtype::q5_k},
                                         quality_case{"Q6_K", dtype::q6_k}, quality_case{"Q4_K_M", dtype::q6_k},
                                         quality_case{"Q5_K_M", dtype::q6_k}),
                         [](const testing::TestParamInfo<quality_case>& info) {
                             return std::string(info.param.file_type) + "_as_" +
                                    std::string(dtype_name(info.param.type));
                         });

// Error bounds on Gaussian data that follow from the formats: with the block's largest magnitude amax
// mapped near the top level, a step is about 2 * amax / levels. Round-to-nearest leaves half a step on most
// elements; the search may clip the extreme element by up to about one step when that lowers the block's
// total error, and the coarse super-block scales of the K formats add a little, hence 1.1 steps.
TEST(quant_quantize, round_trip_error_within_one_step) {
    const int64_t row_len = 512, n_rows = 8;
    const std::vector<float> x = random_values(size_t(row_len * n_rows), 1);
    struct bound {
        dtype type;
        int block;
        float levels;  // usable steps across [-max, max]
    };
    for (const bound b : {bound{dtype::q8_0, 32, 254}, bound{dtype::q4_0, 32, 15}, bound{dtype::q4_k, 32, 15},
                          bound{dtype::q5_k, 32, 31}, bound{dtype::q6_k, 16, 63}, bound{dtype::q8_k, 256, 254}}) {
        const std::vector<float> y = round_trip(b.type, x.data(), n_rows, row_len);
        for (size_t start = 0; start < x.size(); start += size_t(b.block)) {
            float amax = 0;
            for (int j = 0; j < b.block; ++j) amax = std::max(amax, std::fabs(x[start + size_t(j)]));
            const float tol = 1.1f * 2.0f * amax / b.levels + 1e-6f;
            for (int j = 0; j < b.block; ++j) {
                const size_t i = start + size_t(j);
                ASSERT_LE(std::fabs(y[i] - x[i]), tol)
                    << dtype_name(b.type) << " element " << i << ": " << x[i] << " -> " << y[i];
            }
        }
    }
}

TEST(quant_quantize, exactly_representable_values_are_exact) {
    // Levels -8..7 times 0.25 fit Q4_0 exactly; the scale search must find that scale.
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) x[size_t(i)] = 0.25f * float((i * 7) % 16 - 8);
    EXPECT_EQ(round_trip(dtype::q4_0, x.data(), 1, 64), x);

    const std::vector<float> r = random_values(256, 5);
    std::vector<float> halves(256), bhalves(256);
    for (size_t i = 0; i < 256; ++i) {
        halves[i] = fp16_to_f32(f32_to_fp16(r[i]));
        bhalves[i] = bf16_to_f32(f32_to_bf16(r[i]));
    }
    EXPECT_EQ(round_trip(dtype::f16, halves.data(), 1, 256), halves);
    EXPECT_EQ(round_trip(dtype::bf16, bhalves.data(), 1, 256), bhalves);
    EXPECT_NE(round_trip(dtype::bf16, halves.data(), 1, 256), halves);
}

TEST(quant_quantize, zero_and_constant_rows) {
    const std::vector<float> zeros(512, 0.0f);
    for (dtype t : {dtype::q4_0, dtype::q8_0, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_k})
        EXPECT_EQ(round_trip(t, zeros.data(), 2, 256), zeros) << dtype_name(t);
    // A constant negative row is exactly the (unsigned) minimum term of Q4_K/Q5_K up to its 6-bit code.
    const std::vector<float> neg(256, -1.5f);
    for (dtype t : {dtype::q4_k, dtype::q5_k}) {
        const std::vector<float> y = round_trip(t, neg.data(), 1, 256);
        for (float v : y) EXPECT_NEAR(v, -1.5f, 1e-3f) << dtype_name(t);
    }
}

TEST(quant_quantize, importance_reduces_error_where_it_is_large) {
    const int64_t row_len = 256, n_rows = 64;
    const std::vector<float> x = random_values(size_t(row_len * n_rows), 7);
    std::vector<float> importance(size_t(row_len), 0.01f);
    for (int64_t j = 0; j < row_len; j += 8) importance[size_t(j)] = 100.0f;
    for (dtype t : {dtype::q4_0, dtype::q4_k, dtype::q5_k, dtype::q6_k}) {
        const std::vector<float> plain = round_trip(t, x.data(), n_rows, row_len);
        const std::vector<float> weighted = round_trip(t, x.data(), n_rows, row_len, importance.data());
        double err_plain = 0, err_weighted = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double w = importance[i % size_t(row_len)];
            err_plain += w * (plain[i] - x[i]) * (plain[i] - x[i]);
            err_weighted += w * (weighted[i] - x[i]) * (weighted[i] - x[i]);
        }
        EXPECT_LT(err_weighted, 0.8 * err_plain) << dtype_name(t);
    }
}

TEST(quant_quantize, q8_k_block_sums) {
    const std::vector<float> x = random_values(512, 9, 3.0f);
    const std::vector<uint8_t> q = quantize_tensor(dtype::q8_k, x.data(), 1, 512);
    for (int ib = 0; ib < 2; ++ib) {
        const auto b = read_block<block_q8_k>(q.data(), ib);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
            EXPECT_EQ(b.bsums[g], sum) << "block " << ib << " group " << g;
        }
    }
}

TEST(quant_quantize, rejects_bad_sizes_and_types) {
    std::vector<float> x(512, 1.0f);
    std::vector<uint8_t> out(4096);
    EXPECT_THROW(quantize_row(dtype::q4_k, x.data(), out.data(), 128), error);
    EXPECT_THROW(quantize_row(dtype::q8_0, x.data(), out.data(), 48), error);
    EXPECT_THROW(quantize_row(dtype::q2_k, x.data(), out.data(), 256), error);
    EXPECT_THROW(quantize_rows(dtype::q8_0, x.data(), out.data(), -2, 32), error);
    EXPECT_FALSE(can_quantize(dtype::q3_k));
    EXPECT_TRUE(can_quantize(dtype::q6_k));
    EXPECT_EQ(quantize_rows(dtype::q4_k, x.data(), out.data(), 2, 256), 2 * sizeof(block_q4_k));
}
