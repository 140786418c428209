// The project's default model (models/memtile-kjv-q8_0.gguf) against golden data recorded from Hugging Face
// transformers when it was trained (tests/golden/kjv-golden.json, see tools/train/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/hf-import.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "models/transformer.h"
#include "runtime/default-model.h"
#include "support/test-paths.h"
#include "tokenizer/tokenizer.h"

using namespace memtile;

namespace {

const nlohmann::json& golden() {
    static const nlohmann::json g = [] {
        std::ifstream f(std::string(MEMTILE_SOURCE_DIR) + "/tests/golden/kjv-golden.json");
        return nlohmann::json::parse(f);
    }();
    return g;
}

std::string model_path() {
    return std::string(MEMTILE_SOURCE_DIR) + "/models/" + k_default_model_file;
}

std::vector<int32_t> golden_ids(const nlohmann::json& p) {
    return p["ids"].get<std::vector<int32_t>>();
}

std::vector<float> last_logits(const transformer& m, const std::vector<int32_t>& ids) {
    thread_pool pool(2);
    forward_context ctx(m, 64, dtype::f32, pool);
    const auto l = ctx.forward(ids);
    return {l.begin(), l.end()};
}

int argmax(const std::vector<float>& v) {
    return int(std::max_element(v.begin(), v.end()) - v.begin());
}

// The HF checkpoint is not in the repository (only its Q8_0 conversion is); where it is present (the
// training run's output, or MEMTILE_KJV_HF_DIR), the exact F32 and F16 conversions are checked too.
std::string hf_checkpoint() {
    if (const char* e = std::getenv("MEMTILE_KJV_HF_DIR"); e && *e) return e;
    const std::string local = std::string(MEMTILE_SOURCE_DIR) + "/build-train/memtile-kjv-15m";
    return std::filesystem::exists(local + "/config.json") ? local : "";
}

}  // namespace

TEST(default_model, tokenizer_ids_equal_hugging_face) {
    auto tok = tokenizer::open(model_path());
    tokenize_options o;
    o.add_special = false;
    o.parse_special = true;
    for (const auto& p : golden()["prompts"]) {
        const std::string text = p["prompt"];
        EXPECT_EQ(tok->tokenize(text, o), golden_ids(p)) << text;
        EXPECT_EQ(tok->detokenize(golden_ids(p), true), text);
    }
}

TEST(default_model, q8_0_top1_matches_transformers) {
    auto m = transformer::load(model_path());
    for (const auto& p : golden()["prompts"]) {
        const auto l = last_logits(*m, golden_ids(p));
        EXPECT_EQ(argmax(l), p["top50_indices"][0].get<int>()) << p["prompt"];
        // The top-5 of transformers are all among memtile's top-10.
        std::vector<int> order(l.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = int(i);
        std::partial_sort(order.begin(), order.begin() + 10, order.end(), [&](int a, int b) { return l[a] > l[b]; });
        for (int k = 0; k < 5; k++)
            EXPECT_NE(std::find(order.begin(), order.begin() + 10, p["top50_indices"][k].get<int>()),
                      order.begin() + 10)
                << p["prompt"] << " rank " << k;
    }
    const auto& p0 = golden()["prompts"][0];
    const auto want = p0["logits"].get<std::vector<float>>();
    const auto got = last_logits(*m, golden_ids(p0));
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    std::printf("[golden] Q8_0 vs transformers, prompt 0: NMSE %.3g\n", num / den);
    EXPECT_LT(num / den, 1e-3);
}

TEST(default_model, f32_and_f16_conversions_match_transformers) {
    const std::string hf = hf_checkpoint();
    if (hf.empty()) GTEST_SKIP() << "HF checkpoint of the default model not present (set MEMTILE_KJV_HF_DIR)";
    for (file_type ft : {file_type::all_f32, file_type::f16}) {
        hf_import_options o;
        o.type = ft;
        o.progress = false;
        const auto out = test::scratch(std::string("kjv-") + std::string(file_type_name(ft)) + ".gguf");
        import_hf(hf, out, o);
        auto m = transformer::load(out);
        for (const auto& p : golden()["prompts"]) {
            const auto l = last_logits(*m, golden_ids(p));
            EXPECT_EQ(argmax(l), p["top50_indices"][0].get<int>()) << p["prompt"];
            if (ft != file_type::all_f32 || !p.contains("logits")) continue;
            const auto want = p["logits"].get<std::vector<float>>();
            float max_abs = 0, max_diff = 0;
            for (size_t i = 0; i < want.size(); i++) {
                max_abs = std::max(max_abs, std::fabs(want[i]));
                max_diff = std::max(max_diff, std::fabs(l[i] - want[i]));
            }
            std::printf("[golden] F32 vs transformers: max |diff| %.3g, max |logit| %.3g (ratio %.3g)\n", max_diff,
                        max_abs, max_diff / max_abs);
            EXPECT_LE(max_diff, 1e-3f * max_abs);
        }
    }
}
