#include "models/synthetic-model.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "gguf/gguf-writer.h"
#include "models/presets.h"
#include "models/tensor-table.h"
#include "models/vocab-metadata.h"
#include "quant/encode.h"
#include "quant/quant.h"
#include "quant/tensor-stream.h"

namespace memtile {
namespace {

constexpr float k_weight_std = 0.02f;

uint64_t row_seed(uint64_t seed, uint64_t tensor, uint64_t row) {
    uint64_t s = seed ^ (tensor * 0x9e3779b97f4a7c15ull);
    s = splitmix64(s) ^ row;
    return splitmix64(s);
}

void fill_rows(const tensor_spec& spec, const model_preset& preset, uint64_t seed, uint64_t tensor_index, int64_t row0,
               int64_t n_rows, int64_t row_len, float* dst) {
    if (spec.role == tensor_role::rope_freqs) {
        const auto f = llama3_rope_factors(preset);
        std::copy(f.begin(), f.end(), dst);
        return;
    }
    const bool bias = spec.role == tensor_role::attn_q_bias || spec.role == tensor_role::attn_k_bias ||
                      spec.role == tensor_role::attn_v_bias;
    if (spec.is_norm() && !bias) {
        std::fill(dst, dst + n_rows * row_len, 1.0f);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        rng g(row_seed(seed, tensor_index, uint64_t(row0 + r)));
        float* row = dst + r * row_len;
        for (int64_t i = 0; i < row_len; i++) row[i] = g.normal_fast() * k_weight_std;
    }
}

}  // namespace

synthetic_result write_synthetic_model(const synthetic_options& o, const std::string& out_path) {
    const model_preset& preset = find_preset(o.preset);
    model_config cfg = preset.config;
    if (!file_type_writable(o.type))
        fail("gen", "cannot write file type {} (writable: {})", file_type_name(o.type), writable_file_types());

    gguf_writer w;
    w.set("general.architecture", gguf_value::string(cfg.arch));
    w.set("general.name", gguf_value::string(cfg.name));
    w.set("general.file_type", gguf_value::u32(static_cast<uint32_t>(o.type)));
    if (traits(file_type_base(o.type)).quantized) w.set("general.quantization_version", gguf_value::u32(2));
    if (!o.vocab_path.empty()) {
        auto vocab = gguf_file::open(o.vocab_path);
        cfg.n_vocab = copy_tokenizer_metadata(w, *vocab);
    } else {
        write_placeholder_vocab(w, cfg.n_vocab);
    }
    write_model_config(w, cfg);

    std::vector<tensor_spec> specs;
    for (auto& s : tensor_table(cfg))
        if (s.required) specs.push_back(s);
    std::vector<dtype> types;
    uint64_t total = 0;
    for (const auto& s : specs) {
        const dtype t = tensor_type_for(o.type, s, cfg);
        if (!can_encode(t))
            fail("gen", "tensor '{}' needs type {}, which has no encoder in this build", s.name, dtype_name(t));
        types.push_back(t);
        w.add_tensor(s.name, t, s.dims);
        total += w.tensor_bytes(w.tensor_count() - 1);
    }
    std::filesystem::path out(out_path);
    if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
    w.begin(out_path);
    // Random weights gain nothing from the exhaustive scale search; the fast one keeps gen of 8B models in
    // minutes (quant.h). Restored on exit so the process default stays `best`.
    struct effort_scope {
        effort_scope() { set_quantize_effort(quantize_effort::fast); }
        ~effort_scope() { set_quantize_effort(quantize_effort::best); }
    } effort;

    thread_pool pool(o.threads > 0 ? o.threads : thread_pool::default_threads());
    progress_bar bar(fmt::format("gen {} {}", preset.name, file_type_name(o.type)), o.progress ? total : 0);
    for (size_t ti = 0; ti < specs.size(); ti++) {
        const auto& s = specs[ti];
        const int64_t row_len = int64_t(s.dims[0]);
        int64_t n_rows = 1;
        for (size_t d = 1; d < s.dims.size(); d++) n_rows *= int64_t(s.dims[d]);
        write_encoded_tensor(
            w, types[ti], n_rows, row_len, pool,
            [&](int, int64_t row0, int64_t n, float* dst) { fill_rows(s, preset, o.seed, ti, row0, n, row_len, dst); },
            {}, o.progress ? &bar : nullptr);
    }
    w.finish();
    bar.finish();
    return {std::filesystem::file_size(out), static_cast<uint32_t>(specs.size())};
}

}  // namespace memtile
