#include "convert/hf-import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "convert/hf-config.h"
#include "convert/hf-tokenizer.h"
#include "convert/safetensors.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread-pool.h"
#include "gguf/gguf-writer.h"
#include "models/tensor-table.h"
#include "quant/encode.h"
#include "quant/tensor-stream.h"

namespace memtile {
namespace {

namespace fs = std::filesystem;

// Where one GGUF tensor comes from: a checkpoint tensor (rows possibly permuted) or computed values.
struct tensor_source {
    const st_tensor* st = nullptr;
    bool permute = false;  // llama Q/K: rotary halves → interleaved pairs
    const std::vector<float>* values = nullptr;
};

std::string hf_name(const tensor_spec& s, bool phi3) {
    const std::string l = "model.layers." + std::to_string(s.layer) + ".";
    switch (s.role) {
        case tensor_role::token_embd: return "model.embed_tokens.weight";
        case tensor_role::output_norm: return "model.norm.weight";
        case tensor_role::output: return "lm_head.weight";
        case tensor_role::rope_freqs: return {};
        case tensor_role::attn_norm: return l + "input_layernorm.weight";
        case tensor_role::attn_q: return l + "self_attn.q_proj.weight";
        case tensor_role::attn_k: return l + "self_attn.k_proj.weight";
        case tensor_role::attn_v: return l + "self_attn.v_proj.weight";
        case tensor_role::attn_qkv: return l + "self_attn.qkv_proj.weight";
        case tensor_role::attn_q_bias: return l + "self_attn.q_proj.bias";
        case tensor_role::attn_k_bias: return l + "self_attn.k_proj.bias";
        case tensor_role::attn_v_bias: return l + "self_attn.v_proj.bias";
        case tensor_role::attn_output: return l + "self_attn.o_proj.weight";
        case tensor_role::ffn_norm: return l + "post_attention_layernorm.weight";
        case tensor_role::ffn_gate: return l + "mlp.gate_proj.weight";
        case tensor_role::ffn_up: return l + (phi3 ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight");
        case tensor_role::ffn_down: return l + "mlp.down_proj.weight";
    }
    return {};
}

std::string shape_string(const std::vector<uint64_t>& s) {
    return dims_to_string(s);
}

// The folder's own name ("TinyLlama-1.1B-Chat-v1.0"), also for paths ending in a slash.
std::string folder_name(const std::string& dir) {
    fs::path p = fs::absolute(dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return p.filename().string();
}

}  // namespace

uint64_t llama_qk_source_row(uint64_t row, uint32_t head_dim) {
    const uint64_t head = row / head_dim, j = row % head_dim;
    return head * head_dim + (j % 2 == 0 ? j / 2 : j / 2 + head_dim / 2);
}

hf_import_result import_hf(const std::string& dir, const std::string& out_path, const hf_import_options& o) {
    if (!fs::is_directory(dir)) fail("convert", "{}: not a folder (expected a Hugging Face checkpoint folder)", dir);
    if (!file_type_writable(o.type))
        fail("convert", "cannot write file type {} (writable: {})", file_type_name(o.type), writable_file_types());
    hf_import_result r;
    const bool have_config = fs::exists(fs::path(dir) / "config.json");
    if (!have_config && !o.vocab_only) fail("convert", "{}: no config.json", dir);

    gguf_writer w;
    hf_config hc;
    hf_vocab_options vo;
    vo.source = o.tokenizer_source;
    if (have_config && !o.vocab_only) {
        hc = read_hf_config(dir);
        vo.model_type = hc.model_type;
        vo.n_vocab = hc.cfg.n_vocab;
        vo.config_eos_ids = hc.eos_token_ids;
        r.hf_arch = hc.hf_arch;
        r.arch = hc.cfg.arch;
    } else if (have_config) {
        // Vocab-only: the config is optional and only helps choosing the pre-tokenizer and padding the vocabulary.
        try {
            hc = read_hf_config(dir);
            vo.model_type = hc.model_type;
            vo.n_vocab = hc.cfg.n_vocab;
            vo.config_eos_ids = hc.eos_token_ids;
            r.hf_arch = hc.hf_arch;
            r.arch = hc.cfg.arch;
        } catch (const error&) {
            hc = {};
        }
    }
    const hf_vocab vocab = read_hf_vocab(dir, vo);
    r.tokenizer_model = vocab.model;
    r.tokenizer_pre = vocab.pre;
    r.tokenizer_source = vocab.source;
    r.n_vocab = vocab.tokens.size();

    model_config& c = hc.cfg;
    const std::string name = c.name.empty() ? folder_name(dir) : c.name;
    if (!r.arch.empty()) w.set("general.architecture", gguf_value::string(c.arch));
    w.set("general.type", gguf_value::string(o.vocab_only ? "vocab" : "model"));
    w.set("general.name", gguf_value::string(name));
    if (!o.vocab_only) {
        w.set("general.file_type", gguf_value::u32(static_cast<uint32_t>(o.type)));
        if (traits(file_type_base(o.type)).quantized) w.set("general.quantization_version", gguf_value::u32(2));
    }
    std::filesystem::path out(out_path);
    if (out.has_parent_path()) fs::create_directories(out.parent_path());
    if (o.vocab_only) {
        if (!r.arch.empty()) {
            c.name = name;
            write_model_config(w, c);
            w.set(c.arch + ".vocab_size", gguf_value::u32(uint32_t(vocab.tokens.size())));
        }
        write_hf_vocab(w, vocab);
        w.begin(out_path);
        w.finish();
        r.file_bytes = fs::file_size(out);
        return r;
    }

    const safetensors_set st = safetensors_set::open_dir(dir);
    const bool phi3 = c.arch == "phi3";
    c.tied_embeddings = hc.tie_word_embeddings || !st.find("lm_head.weight");
    c.name = name;
    write_model_config(w, c);
    if (phi3 && hc.rope_original_ctx)
        w.set("phi3.rope.scaling.original_context_length", gguf_value::u32(hc.rope_original_ctx));
    write_hf_vocab(w, vocab);

    // Match every GGUF tensor to its source and check shapes (Hugging Face [out, in] == GGUF dims [in, out]).
    std::vector<tensor_spec> specs;
    std::vector<tensor_source> sources;
    std::map<std::string, bool> used;
    for (const auto& n : st.names()) used[n] = false;
    std::string missing;
    for (const auto& s : tensor_table(c)) {
        if (!s.required) continue;
        tensor_source src;
        if (s.role == tensor_role::rope_freqs) {
            src.values = &hc.rope_factors;
        } else {
            const std::string hn = hf_name(s, phi3);
            src.st = st.find(hn);
            if (!src.st) {
                missing += (missing.empty() ? "" : ", ") + hn;
                continue;
            }
            used[hn] = true;
            std::vector<uint64_t> expect(s.dims.rbegin(), s.dims.rend());
            if (src.st->shape != expect)
                fail("convert", "{}: tensor '{}' has shape {}, expected {} for '{}' of this {} config", src.st->file,
                     hn, shape_string(src.st->shape), shape_string(expect), s.name, hc.hf_arch);
            if (src.st->type == st_dtype::other)
                fail("convert",
                     "{}: tensor '{}' has dtype {}, which convert does not support (supported: F32, F16, "
                     "BF16)",
                     src.st->file, hn, src.st->dtype_name);
            src.permute = c.arch == "llama" && (s.role == tensor_role::attn_q || s.role == tensor_role::attn_k);
        }
        specs.push_back(s);
        sources.push_back(src);
    }
    if (!missing.empty()) fail("convert", "{}: checkpoint lacks tensor(s) {} needed by {}", dir, missing, hc.hf_arch);
    std::string unused;
    for (const auto& [n, u] : used) {
        if (u || n.find("rotary_emb.inv_freq") != std::string::npos || (n == "lm_head.weight" && c.tied_embeddings))
            continue;
        unused += (unused.empty() ? "" : ", ") + n;
    }
    if (!unused.empty())
        fail("convert", "{}: checkpoint tensor(s) {} have no GGUF counterpart for {} (unsupported variant?)", dir,
             unused, hc.hf_arch);

    std::vector<dtype> types;
    uint64_t total = 0;
    for (const auto& s : specs) {
        const dtype t = tensor_type_for(o.type, s, c);
        if (!can_encode(t)) fail("convert", "tensor '{}' needs type {}, which has no encoder", s.name, dtype_name(t));
        types.push_back(t);
        w.add_tensor(s.name, t, s.dims);
        total += w.tensor_bytes(w.tensor_count() - 1);
    }
    w.begin(out_path);

    thread_pool pool(o.threads > 0 ? o.threads : thread_pool::default_threads());
    progress_bar bar(fmt::format("convert {} → {}", hc.hf_arch, file_type_name(o.type)), o.progress ? total : 0);
    for (size_t ti = 0; ti < specs.size(); ti++) {
        const auto& s = specs[ti];
        const auto& src = sources[ti];
        const int64_t row_len = int64_t(s.dims[0]);
        int64_t n_rows = 1;
        for (size_t d = 1; d < s.dims.size(); d++) n_rows *= int64_t(s.dims[d]);
        auto fill = [&](int, int64_t row0, int64_t n, float* out) {
            for (int64_t i = 0; i < n; i++) {
                float* dst = out + i * row_len;
                if (src.values) {
                    std::copy(src.values->begin(), src.values->end(), dst);
                    continue;
                }
                const uint64_t row = uint64_t(row0 + i);
                const uint64_t from = src.permute ? llama_qk_source_row(row, c.head_dim) : row;
                src.st->to_f32(from * uint64_t(row_len), uint64_t(row_len), dst);
            }
        };
        write_encoded_tensor(w, types[ti], n_rows, row_len, pool, fill, {}, o.progress ? &bar : nullptr);
    }
    w.finish();
    bar.finish();
    r.n_tensors = uint32_t(specs.size());
    r.file_bytes = fs::file_size(out);
    return r;
}

}  // namespace memtile
