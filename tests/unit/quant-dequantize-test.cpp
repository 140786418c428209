// Dequantization against the reference: for each of the 15 llama.cpp files of the tiny Llama, every tensor's
// first 16 rows must equal, bit for bit, the f32 rows of expected-dequant-<TYPE>.gguf (made by gguf-py's
// reference dequantizer). Also checks block sizes against core/dtype's table and the error paths.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
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

const char* const k_file_types[] = {"F16",    "BF16", "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_0", "Q4_1", "Q4_K_S",
                                    "Q4_K_M", "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0"};

}  // namespace

TEST(quant_formats, block_sizes_match_dtype_table) {
    EXPECT_EQ(traits(dtype::q4_0).block_bytes, sizeof(block_q4_0));
    EXPECT_EQ(traits(dtype::q4_1).block_bytes, sizeof(block_q4_1));
    EXPECT_EQ(traits(dtype::q5_0).block_bytes, sizeof(block_q5_0));
    EXPECT_EQ(traits(dtype::q5_1).block_bytes, sizeof(block_q5_1));
    EXPECT_EQ(traits(dtype::q8_0).block_bytes, sizeof(block_q8_0));
    EXPECT_EQ(traits(dtype::q8_1).block_bytes, sizeof(block_q8_1));
    EXPECT_EQ(traits(dtype::q2_k).block_bytes, sizeof(block_q2_k));
    EXPECT_EQ(traits(dtype::q3_k).block_bytes, sizeof(block_q3_k));
    EXPECT_EQ(traits(dtype::q4_k).block_bytes, sizeof(block_q4_k));
    EXPECT_EQ(traits(dtype::q5_k).block_bytes, sizeof(block_q5_k));
    EXPECT_EQ(traits(dtype::q6_k).block_bytes, sizeof(block_q6_k));
    EXPECT_EQ(traits(dtype::q8_k).block_bytes, sizeof(block_q8_k));
    for (dtype t : {dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q8_0, dtype::q8_1})
        EXPECT_EQ(traits(t).block_elems, uint32_t(k_qk_legacy)) << dtype_name(t);
    for (dtype t : {dtype::q2_k, dtype::q3_k, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_k})
        EXPECT_EQ(traits(t).block_elems, uint32_t(k_qk)) << dtype_name(t);
}

TEST(quant_formats, scale_min_k4_packing_round_trips) {
    uint8_t scales[8], mins[8], packed[k_k_scale_bytes];
    for (int seed = 0; seed < 64; ++seed) {
        for (int j = 0; j < 8; ++j) {
            scales[j] = uint8_t((seed * 7 + j * 13) % 64);
            mins[j] = uint8_t((seed * 11 + j * 5 + 3) % 64);
        }
        pack_scale_min_k4(scales, mins, packed);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, mn;
            unpack_scale_min_k4(packed, j, sc, mn);
            EXPECT_EQ(sc, scales[j]) << "seed " << seed << " pair " << j;
            EXPECT_EQ(mn, mins[j]) << "seed " << seed << " pair " << j;
        }
    }
}

TEST(quant_dequantize, hand_made_q4_0_block) {
    block_q4_0 b{};
    b.d = f32_to_fp16(0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
    float y[32];
    dequantize_row(dtype::q4_0, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * float(j - 8));
        EXPECT_EQ(y[j + 16], 0.5f * float(7 - j));
    }
}

TEST(quant_dequantize, rejects_bad_sizes_and_types) {
    std::vector<uint8_t> buf(1024);
    std::vector<float> out(512);
    EXPECT_THROW(dequantize_row(dtype::q4_0, buf.data(), out.data(), 33), error);
    EXPECT_THROW(dequantize_row(dtype::q4_k, buf.data(), out.data(), 128), error);
    EXPECT_THROW(dequantize_row(dtype::i32, buf.data(), out.data(), 8), error);
    EXPECT_THROW(dequantize_rows(dtype::q8_0, buf.data(), out.data(), -1, 32), error);
    EXPECT_FALSE(can_dequantize(dtype::f64));
    EXPECT_TRUE(can_dequantize(dtype::q3_k));
}

// One test per llama.cpp file type so that a failure names the file; each reports the first differing
// element of every tensor (bit patterns included, since -0.0 == 0.0 and NaN != NaN hide differences).
class quant_dequantize_reference : public testing::TestWithParam<const char*> {};

TEST_P(quant_dequantize_reference, bit_exact_with_expected_files) {
    const std::string type = GetParam();
    const auto model = gguf_file::open(k_quant_dir + "tiny-llama-" + type + ".gguf");
    const auto expected = gguf_file::open(k_quant_dir + "expected-dequant-" + type + ".gguf");
    ASSERT_EQ(model->tensors().size(), expected->tensors().size());

    int checked_tensors = 0;
    for (const auto& t : model->tensors()) {
        const gguf_tensor_info* ref = expected->find_tensor(t.name);
        ASSERT_NE(ref, nullptr) << t.name << " missing from expected file of " << type;
        ASSERT_EQ(ref->type, dtype::f32);
        const int64_t row_len = int64_t(t.dims[0]);
        const int64_t rows = std::min<int64_t>(int64_t(t.n_rows()), 16);
        ASSERT_EQ(int64_t(ref->n_elems), rows * row_len) << t.name;

        const std::vector<float> got = dequantize_tensor(t.type, t.data, int64_t(t.n_rows()), row_len, 16);
        std::vector<float> want(size_t(ref->n_elems));
        std::memcpy(want.data(), ref->data, want.size() * sizeof(float));

        int64_t mismatches = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
            if (mismatches++ == 0)
                ADD_FAILURE() << type << " " << t.name << " (" << dtype_name(t.type) << ") row " << int64_t(i) / row_len
                              << " col " << int64_t(i) % row_len << ": got " << got[i] << " (0x" << std::hex
                              << std::bit_cast<uint32_t>(got[i]) << "), want " << want[i] << " (0x"
                              << std::bit_cast<uint32_t>(want[i]) << std::dec << ")";
        }
        EXPECT_EQ(mismatches, 0) << type << " " << t.name << ": " << mismatches << " of " << want.size()
                                 << " elements differ";
        ++checked_tensors;
    }
    EXPECT_GT(checked_tensors, 0);
}

INSTANTIATE_TEST_SUITE_P(quant_files, quant_dequantize_reference, testing::ValuesIn(k_file_types),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });
