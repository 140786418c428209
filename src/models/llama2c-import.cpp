#include "models/llama2c-import.h"

#include <cstring>

#include "core/error.h"
#include "core/mapped-file.h"
#include "gguf/gguf-writer.h"
#include "models/model-config.h"
#include "models/tensor-table.h"
#include "models/vocab-metadata.h"
#include "quant/file-type.h"

namespace memtile {

llama2c_import_result import_llama2c(const std::string& in_path, const std::string& out_path) {
    auto f = mapped_file::open(in_path);
    int32_t h[7];
    if (f->size() < sizeof h) fail("llama2c", "{}: {} bytes, too short for the 28-byte header", in_path, f->size());
    std::memcpy(h, f->data(), sizeof h);
    llama2c_import_result r{h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
    auto bad = [&](const char* field, int v) {
        fail("llama2c", "{}: header field {} = {} is out of range (not a llama2.c checkpoint?)", in_path, field, v);
    };
    if (r.dim <= 0 || r.dim > 65536) bad("dim", r.dim);
    if (r.hidden_dim <= 0 || r.hidden_dim > 1 << 20) bad("hidden_dim", r.hidden_dim);
    if (r.n_layers <= 0 || r.n_layers > 1024) bad("n_layers", r.n_layers);
    if (r.n_heads <= 0 || r.dim % r.n_heads) bad("n_heads", r.n_heads);
    if (r.n_kv_heads <= 0 || r.n_heads % r.n_kv_heads) bad("n_kv_heads", r.n_kv_heads);
    if (r.vocab_size <= 0 || r.vocab_size > 1 << 22) bad("vocab_size", h[5]);
    if (r.seq_len <= 0 || r.seq_len > 1 << 24) bad("seq_len", r.seq_len);

    const uint64_t D = uint64_t(r.dim), H = uint64_t(r.hidden_dim), L = uint64_t(r.n_layers),
                   V = uint64_t(r.vocab_size);
    const uint64_t hs = D / uint64_t(r.n_heads), KV = hs * uint64_t(r.n_kv_heads);
    // Section sizes in floats, in file order.
    struct section {
        const char* name;
        uint64_t floats;
    };
    const section sections[] = {{"token_embedding_table", V * D},
                                {"rms_att_weight", L * D},
                                {"wq", L * D * D},
                                {"wk", L * D * KV},
                                {"wv", L * D * KV},
                                {"wo", L * D * D},
                                {"rms_ffn_weight", L * D},
                                {"w1", L * H * D},
                                {"w2", L * D * H},
                                {"w3", L * H * D},
                                {"rms_final_weight", D},
                                {"freq_cis", uint64_t(r.seq_len) * hs},  // real and imaginary halves
                                {"wcls", r.shared_classifier ? 0 : V * D}};
    const float* p = reinterpret_cast<const float*>(f->data() + sizeof h);
    const float* ptr[std::size(sections)];
    uint64_t expected = sizeof h;
    for (size_t i = 0; i < std::size(sections); i++) {
        ptr[i] = reinterpret_cast<const float*>(f->data() + expected);
        expected += sections[i].floats * 4;
    }
    (void)p;
    if (f->size() != expected)
        fail("llama2c",
             "{}: file has {} bytes, but the header (dim {}, hidden {}, {} layers, {} heads, {} kv heads, "
             "vocab {}, {} classifier) implies {}",
             in_path, f->size(), r.dim, r.hidden_dim, r.n_layers, r.n_heads, r.n_kv_heads, r.vocab_size,
             r.shared_classifier ? "shared" : "separate", expected);

    model_config c;
    c.arch = "llama";
    c.name = "llama2c-" + std::to_string(r.dim) + "d-" + std::to_string(r.n_layers) + "l";
    c.n_vocab = uint32_t(V);
    c.n_ctx_train = uint32_t(r.seq_len);
    c.n_embd = uint32_t(D);
    c.n_layer = uint32_t(L);
    c.n_head = uint32_t(r.n_heads);
    c.n_head_kv = uint32_t(r.n_kv_heads);
    c.n_ff = uint32_t(H);
    c.head_dim = uint32_t(hs);
    c.n_rot = uint32_t(hs);
    c.rope_freq_base = 10000.0f;
    c.norm_eps = 1e-5f;
    c.tied_embeddings = r.shared_classifier;

    gguf_writer w;
    w.set("general.architecture", gguf_value::string("llama"));
    w.set("general.name", gguf_value::string(c.name));
    w.set("general.file_type", gguf_value::u32(static_cast<uint32_t>(file_type::all_f32)));
    write_model_config(w, c);
    write_placeholder_vocab(w, c.n_vocab, false);

    // Every llama2.c matrix is stored PyTorch-style [out, in] row-major, which is GGUF's [in, out] with the
    // same bytes; per-layer sections are concatenated, so layer l starts at l × (per-layer size).
    std::vector<std::span<const uint8_t>> data;
    auto bytes = [](const float* q, uint64_t n) {
        return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(q), n * 4);
    };
    for (const auto& spec : tensor_table(c)) {
        if (!spec.required) continue;
        const float* base = nullptr;
        uint64_t n = 1;
        for (auto d : spec.dims) n *= d;
        const uint64_t l = spec.layer < 0 ? 0 : uint64_t(spec.layer);
        switch (spec.role) {
            case tensor_role::token_embd: base = ptr[0]; break;
            case tensor_role::attn_norm: base = ptr[1] + l * n; break;
            case tensor_role::attn_q: base = ptr[2] + l * n; break;
            case tensor_role::attn_k: base = ptr[3] + l * n; break;
            case tensor_role::attn_v: base = ptr[4] + l * n; break;
            case tensor_role::attn_output: base = ptr[5] + l * n; break;
            case tensor_role::ffn_norm: base = ptr[6] + l * n; break;
            case tensor_role::ffn_gate: base = ptr[7] + l * n; break;
            case tensor_role::ffn_down: base = ptr[8] + l * n; break;
            case tensor_role::ffn_up: base = ptr[9] + l * n; break;
            case tensor_role::output_norm: base = ptr[10]; break;
            case tensor_role::output: base = ptr[12]; break;
            default: fail("llama2c", "unexpected tensor '{}' for a llama2.c model", spec.name);
        }
        w.add_tensor(spec.name, dtype::f32, spec.dims);
        data.push_back(bytes(base, n));
    }
    w.write_file(out_path, data);
    return r;
}

}  // namespace memtile
