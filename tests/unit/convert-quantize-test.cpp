// quantize: a synthetic f32 model re-encoded into every writable type has the tensor types tensor_type_for
// prescribes, loads, and gives finite logits close to the f32 model's.
#include <gtest/gtest.h>

#include <cmath>

#include "convert/quantize-model.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/synthetic-model.h"
#include "models/tensor-table.h"
#include "models/transformer.h"
#include "support/test-paths.h"

namespace {

using namespace memtile;

const std::string& tiny_f32() {
    static const std::string path = [] {
        synthetic_options o;
        o.preset = "tiny";
        o.type = file_type::all_f32;
        o.progress = false;
        o.threads = 2;
        const std::string p = test::scratch("quant-tiny-f32.gguf");
        write_synthetic_model(o, p);
        return p;
    }();
    return path;
}

std::vector<float> run_logits(const std::string& path, const std::vector<int32_t>& toks) {
    auto m = transformer::load(path);
    thread_pool pool(2);
    forward_context ctx(*m, 32, dtype::f32, pool);
    ctx.forward(toks, true);
    return {ctx.logits().begin(), ctx.logits().end()};
}

class quantize_types : public ::testing::TestWithParam<std::string> {};

TEST_P(quantize_types, mixture_types_and_logits) {
    const auto ft = file_type_from_name(GetParam());
    ASSERT_TRUE(ft);
    const std::string out = test::scratch("quant-tiny-" + GetParam() + ".gguf");
    quantize_options o;
    o.type = *ft;
    o.threads = 2;
    o.progress = false;
    const auto r = quantize_model(tiny_f32(), out, o);

    auto in = gguf_file::open(tiny_f32());
    auto g = gguf_file::open(out);
    EXPECT_EQ(g->get_u64("general.file_type", 999), static_cast<uint32_t>(*ft));
    // Every metadata key but general.file_type / quantization_version is copied unchanged.
    for (const auto& [k, v] : in->metadata()) {
        if (k != "general.file_type" && k != "general.quantization_version") {
            EXPECT_EQ(*g->find(k), v) << k;
        }
    }
    const model_config c = read_model_config(*g);
    ASSERT_EQ(r.tensors.size(), g->tensors().size());
    for (const auto& spec : tensor_table(c)) {
        const auto* t = g->find_tensor(spec.name);
        if (!spec.required && !t) continue;
        ASSERT_NE(t, nullptr) << spec.name;
        EXPECT_EQ(dtype_name(t->type), dtype_name(tensor_type_for(*ft, spec, c))) << spec.name;
    }
    for (const auto& t : r.tensors) {
        EXPECT_TRUE(std::isfinite(t.rms_error)) << t.name;
        EXPECT_LE(t.rms_error, 0.2 * t.rms_input + 1e-12) << t.name;
        if (t.to == dtype::f32) {
            EXPECT_EQ(t.rms_error, 0.0) << t.name;
        }
    }

    const std::vector<int32_t> toks = {1, 17, 300, 42, 511, 7};
    const auto ref = run_logits(tiny_f32(), toks);
    const auto got = run_logits(out, toks);
    ASSERT_EQ(got.size(), ref.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        ASSERT_TRUE(std::isfinite(got[i])) << i;
        err += double(got[i] - ref[i]) * double(got[i] - ref[i]);
        norm += double(ref[i]) * double(ref[i]);
    }
    EXPECT_LT(std::sqrt(err / norm), 0.25) << "relative RMS logit error for " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(all, quantize_types,
                         ::testing::Values("Q8_0", "Q4_0", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16",
                                           "BF16"));

TEST(quantize, requantizing_a_quantized_model_works) {
    quantize_options o;
    o.type = file_type::q8_0;
    o.progress = false;
    const std::string q8 = test::scratch("requant-q8.gguf"), q4 = test::scratch("requant-q4km.gguf");
    quantize_model(tiny_f32(), q8, o);
    o.type = file_type::q4_k_m;
    const auto r = quantize_model(q8, q4, o);
    for (const auto& t : r.tensors) {
        if (t.name == "blk.0.attn_q.weight") {
            EXPECT_EQ(t.from, dtype::q8_0);
        }
    }
    auto g = gguf_file::open(q4);
    EXPECT_EQ(g->find_tensor("blk.0.attn_q.weight")->type, dtype::q4_k);
    const auto logits = run_logits(q4, {1, 2, 3});
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    o.type = file_type::q4_1;
    EXPECT_THROW(quantize_model(tiny_f32(), test::scratch("x.gguf"), o), error);
}

}  // namespace
