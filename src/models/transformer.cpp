#include "models/transformer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "backends/cpu/ops.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "kv/kv-cache.h"
#include "models/tensor-table.h"
#include "quant/quant.h"

namespace memtile {

struct transformer::layer {
    std::vector<float> attn_norm, ffn_norm;  // [n_embd]
    std::vector<float> bq, bk, bv;           // [q_dim], [kv_dim], [kv_dim] (qwen2) or empty
    std::unique_ptr<cpu::prepared_weight> wq, wk, wv, wqkv, wo, w_gate, w_up, w_down;
};

transformer::~transformer() = default;

std::vector<std::span<const uint8_t>> transformer::streamed_weights() const {
    std::vector<std::span<const uint8_t>> r;
    for (const layer& l : layers_)
        for (const auto* w : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            if (*w) r.push_back((*w)->streamed());
    if (output_) r.push_back(output_->streamed());
    return r;
}

namespace {

// Runs f, and when an observer is installed, times it and reports e (bytes in f32 activations: 4 per element).
template <class F>
void observed(forward_observer* obs, op_event e, F&& f) {
    if (!obs) return f();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    e.ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    obs->on_op(e);
}

// Tied embeddings with repack: token_embd's file pages were returned at load (the output reads the packed
// copy), and each row the embedding gathers faults its page back in, with up to 16 cached neighbours (the
// kernel's 64 KiB fault-around), so a long generation would map a growing part of the table again (44 MB of
// Llama-3.2-1B's 215 MB after 400 tokens). The pages of the gathered rows' 64 KiB windows inside the table go
// back after the gather. embedding_released: whether the rows are such released pages.
bool embedding_released(const cpu::weight_view& emb, const cpu::prepared_weight& output, bool mmapped) {
    return mmapped && output.view().data == emb.data && output.streamed().data() != emb.data;
}

void release_rows(const cpu::weight_view& emb, std::span<const int32_t> tokens) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE)), window = 64 << 10;
    const uintptr_t lo = (uintptr_t(emb.data) + page - 1) / page * page;
    const uintptr_t hi = (uintptr_t(emb.data) + size_t(emb.n_out) * emb.row_bytes) / page * page;
    for (int32_t t : tokens) {
        const uintptr_t r = uintptr_t(emb.data) + size_t(t) * emb.row_bytes;
        const uintptr_t a = std::max(lo, r / window * window),
                        b = std::min(hi, (r + emb.row_bytes + window - 1) / window * window);
        if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
    }
}

cpu::weight_view view_of(const gguf_tensor_info& t) {
    cpu::weight_view v;
    v.type = t.type;
    v.data = t.data;
    v.n_in = int64_t(t.dims[0]);
    v.n_out = int64_t(t.n_elems / t.dims[0]);
    v.row_bytes = size_t(t.row_size());
    return v;
}

std::vector<float> to_f32(const gguf_tensor_info& t) {
    if (!can_dequantize(t.type)) fail("model", "tensor '{}' has unsupported type {}", t.name, dtype_name(t.type));
    std::vector<float> out(size_t(t.n_elems));
    dequantize_row(t.type, t.data, out.data(), int64_t(t.n_elems));
    return out;
}

}  // namespace

repack_mode parse_repack_mode(const std::string& s) {
    if (s == "off") return repack_mode::off;
    if (s == "on") return repack_mode::on;
    if (s == "auto") return repack_mode::automatic;
    fail("model", "--repack takes auto, on or off (got '{}')", s);
}

const char* repack_mode_name(repack_mode m) {
    return m == repack_mode::on ? "on" : m == repack_mode::off ? "off" : "auto";
}

std::unique_ptr<transformer> transformer::load(const std::string& path, const model_options& o, thread_pool* pool) {
    return from_gguf(gguf_file::open(path, o.load), o, pool);
}

std::unique_ptr<transformer> transformer::from_gguf(std::shared_ptr<gguf_file> g, const model_options& o,
                                                    thread_pool* pool) {
    std::unique_ptr<transformer> m(new transformer());
    m->file_ = g;
    m->cfg_ = read_model_config(*g);
    if (!arch_supported(m->cfg_.arch))
        fail("model", "{}: unknown architecture '{}' (supported: {})", g->path(), m->cfg_.arch, supported_archs());
    if (m->cfg_.expert_count > 0) fail("model", "{}: mixture-of-experts models are not supported yet", g->path());
    check_tensors(*g, m->cfg_);
    // A repacked tensor's file pages are dropped only when they are a mapping of the file (see prepare_options);
    // mlocked pages cannot be dropped.
    const bool releasable = g->file().is_mmapped() && !o.load.mlock;
    const bool repack = o.repack == repack_mode::on || (o.repack == repack_mode::automatic && releasable);
    cpu::prepare_options po{repack, repack && g->file().is_mmapped(), pool};
    const bool cpu_output = o.cpu_layers >= m->cfg_.n_layer;
    const auto is_matrix = [](tensor_role r) {
        return r == tensor_role::output || r == tensor_role::attn_q || r == tensor_role::attn_k ||
               r == tensor_role::attn_v || r == tensor_role::attn_qkv || r == tensor_role::attn_output ||
               r == tensor_role::ffn_gate || r == tensor_role::ffn_up || r == tensor_role::ffn_down;
    };
    if (repack && o.packed_arena) {
        // The packed copies of the CPU's matrices go into one arena in decode order (the table's layer order,
        // the output matrix last; the loop below prepares them in that order), so a decode step reads them as
        // one stream (packed_arena in matmul.h).
        size_t total = 0;
        bool has_output = false;
        for (const auto& spec : tensor_table(m->cfg_)) {
            const auto* t = g->find_tensor(spec.name);
            if (!t || !is_matrix(spec.role) || !can_dequantize(t->type)) continue;
            has_output = has_output || spec.role == tensor_role::output;
            if (spec.layer >= 0 ? uint32_t(spec.layer) < o.cpu_layers : cpu_output)
                total += cpu::packed_bytes(view_of(*t), po);
        }
        if (!has_output && cpu_output) {
            const auto* t = g->find_tensor("token_embd.weight");
            if (t && can_dequantize(t->type)) total += cpu::packed_bytes(view_of(*t), po);
        }
        if (total > 0) po.arena = std::make_shared<cpu::packed_arena>(total);
    }
    // layer: the tensor's layer, -1 for the output matrix.
    auto weight = [&](const std::string& name, int layer) {
        const auto* t = g->find_tensor(name);
        if (!can_dequantize(t->type))
            fail("model", "{}: tensor '{}' has type {}, which memtile cannot compute with", g->path(), name,
                 dtype_name(t->type));
        const bool on_cpu = layer >= 0 ? uint32_t(layer) < o.cpu_layers : cpu_output;
        return cpu::prepare_weight(view_of(*t), on_cpu ? po : cpu::prepare_options{});
    };
    m->layers_.resize(m->cfg_.n_layer);
    std::string output_name;
    for (const auto& spec : tensor_table(m->cfg_)) {
        const auto* t = g->find_tensor(spec.name);
        if (!t) continue;  // optional and absent (checked above)
        layer* L = spec.layer >= 0 ? &m->layers_[size_t(spec.layer)] : nullptr;
        switch (spec.role) {
            case tensor_role::token_embd: m->tok_embd_ = view_of(*t); break;
            case tensor_role::output_norm: m->output_norm_ = to_f32(*t); break;
            case tensor_role::output: output_name = spec.name; break;  // prepared last (decode order)
            case tensor_role::rope_freqs: m->rope_factors_ = to_f32(*t); break;
            case tensor_role::attn_norm: L->attn_norm = to_f32(*t); break;
            case tensor_role::ffn_norm: L->ffn_norm = to_f32(*t); break;
            case tensor_role::attn_q_bias: L->bq = to_f32(*t); break;
            case tensor_role::attn_k_bias: L->bk = to_f32(*t); break;
            case tensor_role::attn_v_bias: L->bv = to_f32(*t); break;
            case tensor_role::attn_q: L->wq = weight(spec.name, spec.layer); break;
            case tensor_role::attn_k: L->wk = weight(spec.name, spec.layer); break;
            case tensor_role::attn_v: L->wv = weight(spec.name, spec.layer); break;
            case tensor_role::attn_qkv: L->wqkv = weight(spec.name, spec.layer); break;
            case tensor_role::attn_output: L->wo = weight(spec.name, spec.layer); break;
            case tensor_role::ffn_gate: L->w_gate = weight(spec.name, spec.layer); break;
            case tensor_role::ffn_up: L->w_up = weight(spec.name, spec.layer); break;
            case tensor_role::ffn_down: L->w_down = weight(spec.name, spec.layer); break;
        }
    }
    if (!output_name.empty()) m->output_ = weight(output_name, -1);
    if (!can_dequantize(m->tok_embd_.type))
        fail("model", "{}: token_embd.weight has unsupported type {}", g->path(), dtype_name(m->tok_embd_.type));
    if (!m->output_) m->output_ = cpu::prepare_weight(m->tok_embd_, cpu_output ? po : cpu::prepare_options{});  // tied
    return m;
}

forward_context::forward_context(const transformer& m, uint32_t n_ctx, dtype kv_type, thread_pool& pool)
    : m_(m), pool_(pool) {
    const auto& c = m.config();
    if (n_ctx == 0) fail("model", "context length must be at least 1");
    kv_ = std::make_unique<kv_cache>(c.n_layer, n_ctx, c.kv_dim(), kv_type);
    // f32 activations per token of a slice: x, xn, q, att, k, v, gate, up (embed_and_run), and their 8-bit copies.
    const uint64_t per_token =
        5 * (4 * uint64_t(c.n_embd) + 2 * uint64_t(c.q_dim()) + 2 * uint64_t(c.kv_dim()) + 2 * uint64_t(c.n_ff));
    const uint64_t budget = (uint64_t(m.file().file().size()) + kv_->bytes()) / 100;
    max_batch_ = std::clamp<size_t>(std::bit_floor(std::max<uint64_t>(budget / per_token, 1)), 32, 512);
}

forward_context::~forward_context() = default;

uint32_t forward_context::used() const {
    return kv_->used;
}
uint32_t forward_context::n_ctx() const {
    return kv_->n_ctx();
}

void forward_context::truncate(uint32_t n_tokens) {
    kv_->used = std::min(kv_->used, n_tokens);
}

void forward_context::check_tokens(std::span<const int32_t> tokens) const {
    const auto& c = m_.config();
    if (tokens.empty()) fail("model", "forward() called with no tokens");
    const uint32_t pos0 = kv_->used;
    if (uint64_t(pos0) + uint64_t(tokens.size()) > kv_->n_ctx())
        fail("model", "context overflow: {} tokens in the cache + {} new exceed the context of {} (use --ctx)", pos0,
             tokens.size(), kv_->n_ctx());
    for (int32_t t : tokens)
        if (t < 0 || uint32_t(t) >= c.n_vocab)
            fail("model", "token id {} is outside the vocabulary (0..{})", t, c.n_vocab - 1);
}

void forward_context::embed_and_run(std::span<const int32_t> tokens, uint32_t n_layers) {
    const auto& c = m_.config();
    const int64_t n = int64_t(tokens.size());
    check_tokens(tokens);
    const uint32_t pos0 = kv_->used;

    const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
    x_.resize(size_t(n * E));
    xn_.resize(size_t(n * E));
    q_.resize(size_t(n * Q));
    k_.resize(size_t(n * KV));
    v_.resize(size_t(n * KV));
    att_.resize(size_t(n * Q));
    gate_.resize(size_t(n * F));
    up_.resize(size_t(n * F));

    const auto op = [this](op_event e, auto&& f) { observed(obs_, e, f); };
    const auto mm = [&](const cpu::prepared_weight& w, int il, const float* in, float* out) {
        const auto& v = w.view();
        op({op_class::matmul, il, v.type, uint64_t(v.n_out) * v.row_bytes, 0, 0, uint64_t(n * (v.n_in + v.n_out) * 4)},
           [&] { cpu::matmul(w, in, n, out, pool_); });
    };
    // Products of one input in one call (one activation quantization, one hand-over to the pool). With an
    // observer installed they run one by one, so each is timed and attributed to its own weight type.
    const auto mm_multi = [&](std::initializer_list<const cpu::prepared_weight*> ws, int il, const float* in,
                              std::initializer_list<float*> outs) {
        if (obs_) {
            auto o = outs.begin();
            for (const auto* w : ws) mm(*w, il, in, *o++);
            return;
        }
        cpu::matmul_multi(std::span(ws.begin(), ws.size()), in, n, std::span(outs.begin(), outs.size()), pool_);
    };
    const uint64_t kv_row = uint64_t(KV) * kv_->elem_bytes();

    // Embedding: gather and dequantize one row per token.
    op({op_class::embedding, -1, m_.tok_embd_.type, uint64_t(n) * m_.tok_embd_.row_bytes, 0, 0, uint64_t(n * E * 4)},
       [&] {
           for (int64_t t = 0; t < n; t++)
               dequantize_row(m_.tok_embd_.type, m_.tok_embd_.data + size_t(tokens[size_t(t)]) * m_.tok_embd_.row_bytes,
                              x_.data() + t * E, E);
           if (embedding_released(m_.tok_embd_, *m_.output_, m_.file_->file().is_mmapped()))
               release_rows(m_.tok_embd_, tokens);
       });

    const float* factors = m_.rope_factors_.empty() ? nullptr : m_.rope_factors_.data();
    // Rotation angles of each token's position, shared by q and k of every layer: [n, n_rot]
    std::vector<float> angles(size_t(n * c.n_rot));
    for (int64_t t = 0; t < n; t++)
        cpu::rope_angles(int(c.n_rot), int(pos0 + t), c.rope_freq_base, factors, &angles[size_t(t * c.n_rot)]);
    const op_event norm_ev{op_class::norm, -1, dtype::f32, uint64_t(E * 4), 0, 0, uint64_t(n * E * 4 * 2)};
    const op_event add_ev{op_class::elementwise, -1, dtype::f32, 0, 0, 0, uint64_t(n * E * 4 * 3)};
    for (uint32_t il = 0; il < n_layers; il++) {
        const auto& L = m_.layers_[il];
        const int li = int(il);
        auto at = [li](op_event e) {
            e.layer = li;
            return e;
        };
        op(at(norm_ev), [&] {
            for (int64_t t = 0; t < n; t++) cpu::rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], E, c.norm_eps);
        });
        if (L.wqkv) {
            // phi3: one fused projection [n_tok, Q + 2 KV], split into q, k, v.
            qkv_.resize(size_t(n * (Q + 2 * KV)));
            mm(*L.wqkv, li, xn_.data(), qkv_.data());
            for (int64_t t = 0; t < n; t++) {
                const float* r = &qkv_[t * (Q + 2 * KV)];
                std::copy(r, r + Q, &q_[t * Q]);
                std::copy(r + Q, r + Q + KV, &k_[t * KV]);
                std::copy(r + Q + KV, r + Q + 2 * KV, &v_[t * KV]);
            }
        } else {
            mm_multi({L.wq.get(), L.wk.get(), L.wv.get()}, li, xn_.data(), {q_.data(), k_.data(), v_.data()});
        }
        if (!L.bq.empty())
            for (int64_t t = 0; t < n; t++) {
                for (int64_t i = 0; i < Q; i++) q_[t * Q + i] += L.bq[size_t(i)];
                for (int64_t i = 0; i < KV; i++) k_[t * KV + i] += L.bk[size_t(i)];
                for (int64_t i = 0; i < KV; i++) v_[t * KV + i] += L.bv[size_t(i)];
            }
        op({op_class::rope, li, dtype::f32, 0, 0, 0, uint64_t(n * (Q + KV) * 4 * 2)}, [&] {
            for (int64_t t = 0; t < n; t++) {
                const float* cs = &angles[size_t(t * c.n_rot)];
                cpu::rope_apply(&q_[t * Q], int(c.n_head), int(c.head_dim), int(c.n_rot), cs, c.rope);
                cpu::rope_apply(&k_[t * KV], int(c.n_head_kv), int(c.head_dim), int(c.n_rot), cs, c.rope);
            }
        });
        op({op_class::kv_store, li, dtype::f32, 0, 0, uint64_t(n) * kv_row * 2, uint64_t(n * KV * 4 * 2)}, [&] {
            for (int64_t t = 0; t < n; t++) kv_->store(il, uint32_t(pos0 + t), &k_[t * KV], &v_[t * KV]);
        });
        // Token t attends to pos0 + t + 1 positions, reading one K and one V row each.
        const uint64_t kv_rows = uint64_t(n) * pos0 + uint64_t(n) * uint64_t(n + 1) / 2;
        op({op_class::attention, li, dtype::f32, 0, kv_rows * kv_row * 2, 0, uint64_t(n * Q * 4 * 2)}, [&] {
            cpu::attention(q_.data(), att_.data(), int(n), int(pos0), *kv_, int(il), int(c.n_head), int(c.n_head_kv),
                           int(c.head_dim), pool_);
        });
        mm(*L.wo, li, att_.data(), xn_.data());
        op(at(add_ev), [&] {
            for (int64_t i = 0; i < n * E; i++) x_[size_t(i)] += xn_[size_t(i)];
        });

        op(at(norm_ev), [&] {
            for (int64_t t = 0; t < n; t++) cpu::rms_norm(&x_[t * E], L.ffn_norm.data(), &xn_[t * E], E, c.norm_eps);
        });
        if (L.w_gate) {
            mm_multi({L.w_gate.get(), L.w_up.get()}, li, xn_.data(), {gate_.data(), up_.data()});
        } else {
            // phi3: fused [n_tok, 2F], gate first then up.
            qkv_.resize(size_t(n * 2 * F));
            mm(*L.w_up, li, xn_.data(), qkv_.data());
            for (int64_t t = 0; t < n; t++) {
                std::copy(&qkv_[t * 2 * F], &qkv_[t * 2 * F] + F, &gate_[t * F]);
                std::copy(&qkv_[t * 2 * F] + F, &qkv_[t * 2 * F] + 2 * F, &up_[t * F]);
            }
        }
        op({op_class::elementwise, li, dtype::f32, 0, 0, 0, uint64_t(n * F * 4 * 3)},
           [&] { cpu::swiglu(gate_.data(), up_.data(), n * F); });
        mm(*L.w_down, li, gate_.data(), xn_.data());
        op(at(add_ev), [&] {
            for (int64_t i = 0; i < n * E; i++) x_[size_t(i)] += xn_[size_t(i)];
        });
    }
    kv_->used = pos0 + uint32_t(n);
}

std::span<const float> forward_context::forward_hidden(std::span<const int32_t> tokens, uint32_t n_layers) {
    if (n_layers > m_.config().n_layer)
        fail("model", "forward_hidden(): {} layers requested, the model has {}", n_layers, m_.config().n_layer);
    check_tokens(tokens);
    const size_t E = m_.config().n_embd;
    if (tokens.size() <= max_batch_) {
        embed_and_run(tokens, n_layers);
        return {x_.data(), tokens.size() * E};
    }
    hidden_.resize(tokens.size() * E);
    for (size_t s0 = 0; s0 < tokens.size(); s0 += max_batch_) {
        const auto slice = tokens.subspan(s0, std::min(max_batch_, tokens.size() - s0));
        embed_and_run(slice, n_layers);
        std::copy(x_.begin(), x_.begin() + std::ptrdiff_t(slice.size() * E), hidden_.begin() + std::ptrdiff_t(s0 * E));
    }
    return hidden_;
}

void forward_context::output_logits(int64_t n, int64_t n_out, float* dst) {
    const auto& c = m_.config();
    const int64_t E = c.n_embd;
    const auto op = [this](op_event e, auto&& f) { observed(obs_, e, f); };
    const float* last = &x_[size_t((n - n_out) * E)];
    op({op_class::norm, -1, dtype::f32, uint64_t(E * 4), 0, 0, uint64_t(n_out * E * 4 * 2)}, [&] {
        for (int64_t t = 0; t < n_out; t++)
            cpu::rms_norm(last + t * E, m_.output_norm_.data(), &xn_[size_t(t * E)], E, c.norm_eps);
    });
    const auto& ov = m_.output_->view();
    op({op_class::output, -1, ov.type, uint64_t(ov.n_out) * ov.row_bytes, 0, 0,
        uint64_t(n_out * (ov.n_in + ov.n_out) * 4)},
       [&] { cpu::matmul(*m_.output_, xn_.data(), n_out, dst, pool_); });
}

std::span<const float> forward_context::forward(std::span<const int32_t> tokens, bool all_logits) {
    check_tokens(tokens);
    const int64_t n = int64_t(tokens.size()), V = m_.config().n_vocab;
    logits_.resize(size_t((all_logits ? n : 1) * V));
    for (size_t s0 = 0; s0 < tokens.size(); s0 += max_batch_) {
        const auto slice = tokens.subspan(s0, std::min(max_batch_, tokens.size() - s0));
        const int64_t ns = int64_t(slice.size());
        embed_and_run(slice, m_.config().n_layer);
        if (all_logits)
            output_logits(ns, ns, logits_.data() + int64_t(s0) * V);
        else if (s0 + slice.size() == tokens.size())
            output_logits(ns, 1, logits_.data());
    }
    return {logits_.data() + (all_logits ? n - 1 : 0) * V, size_t(V)};
}

void forward_context::forward_batch(std::span<forward_context* const> ctxs, std::span<const int32_t> tokens) {
    if (ctxs.empty()) fail("model", "forward_batch() called with no sequences");
    if (ctxs.size() != tokens.size())
        fail("model", "forward_batch(): {} sequences but {} tokens", ctxs.size(), tokens.size());
    const transformer& m = ctxs[0]->m_;
    const auto& c = m.config();
    thread_pool& pool = ctxs[0]->pool_;
    for (size_t s = 0; s < ctxs.size(); s++) {
        forward_context* f = ctxs[s];
        if (&f->m_ != &m) fail("model", "forward_batch(): sequences of different models");
        for (size_t r = 0; r < s; r++)
            if (ctxs[r] == f) fail("model", "forward_batch(): the same sequence appears twice");
        if (f->kv_->used + 1 > f->kv_->n_ctx())
            fail("model", "context overflow: {} tokens in the cache + 1 new exceed the context of {} (use --ctx)",
                 f->kv_->used, f->kv_->n_ctx());
        if (tokens[s] < 0 || uint32_t(tokens[s]) >= c.n_vocab)
            fail("model", "token id {} is outside the vocabulary (0..{})", tokens[s], c.n_vocab - 1);
    }
    const int64_t n = int64_t(ctxs.size());
    const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
    // Row t of every buffer belongs to sequence t; the buffers are local because they span contexts.
    std::vector<float> x(size_t(n * E)), xn(size_t(n * E)), q(size_t(n * Q)), k(size_t(n * KV)), v(size_t(n * KV)),
        att(size_t(n * Q)), gate(size_t(n * F)), up(size_t(n * F)), tmp;
    for (int64_t t = 0; t < n; t++)
        dequantize_row(m.tok_embd_.type, m.tok_embd_.data + size_t(tokens[size_t(t)]) * m.tok_embd_.row_bytes,
                       x.data() + t * E, E);
    if (embedding_released(m.tok_embd_, *m.output_, m.file_->file().is_mmapped())) release_rows(m.tok_embd_, tokens);

    const float* factors = m.rope_factors_.empty() ? nullptr : m.rope_factors_.data();
    for (uint32_t il = 0; il < c.n_layer; il++) {
        const auto& L = m.layers_[il];
        for (int64_t t = 0; t < n; t++) cpu::rms_norm(&x[t * E], L.attn_norm.data(), &xn[t * E], E, c.norm_eps);
        if (L.wqkv) {
            tmp.resize(size_t(n * (Q + 2 * KV)));
            cpu::matmul(*L.wqkv, xn.data(), n, tmp.data(), pool);
            for (int64_t t = 0; t < n; t++) {
                const float* r = &tmp[t * (Q + 2 * KV)];
                std::copy(r, r + Q, &q[t * Q]);
                std::copy(r + Q, r + Q + KV, &k[t * KV]);
                std::copy(r + Q + KV, r + Q + 2 * KV, &v[t * KV]);
            }
        } else {
            const cpu::prepared_weight* ws[] = {L.wq.get(), L.wk.get(), L.wv.get()};
            float* outs[] = {q.data(), k.data(), v.data()};
            cpu::matmul_multi(ws, xn.data(), n, outs, pool);
        }
        if (!L.bq.empty())
            for (int64_t t = 0; t < n; t++) {
                for (int64_t i = 0; i < Q; i++) q[t * Q + i] += L.bq[size_t(i)];
                for (int64_t i = 0; i < KV; i++) k[t * KV + i] += L.bk[size_t(i)];
                for (int64_t i = 0; i < KV; i++) v[t * KV + i] += L.bv[size_t(i)];
            }
        for (int64_t t = 0; t < n; t++) {
            kv_cache& kv = *ctxs[size_t(t)]->kv_;
            const int pos = int(kv.used);
            cpu::rope(&q[t * Q], int(c.n_head), int(c.head_dim), int(c.n_rot), pos, c.rope_freq_base, c.rope, factors);
            cpu::rope(&k[t * KV], int(c.n_head_kv), int(c.head_dim), int(c.n_rot), pos, c.rope_freq_base, c.rope,
                      factors);
            kv.store(il, uint32_t(pos), &k[t * KV], &v[t * KV]);
            cpu::attention(&q[t * Q], &att[t * Q], 1, pos, kv, int(il), int(c.n_head), int(c.n_head_kv),
                           int(c.head_dim), pool);
        }
        cpu::matmul(*L.wo, att.data(), n, xn.data(), pool);
        for (int64_t i = 0; i < n * E; i++) x[size_t(i)] += xn[size_t(i)];

        for (int64_t t = 0; t < n; t++) cpu::rms_norm(&x[t * E], L.ffn_norm.data(), &xn[t * E], E, c.norm_eps);
        if (L.w_gate) {
            const cpu::prepared_weight* ws[] = {L.w_gate.get(), L.w_up.get()};
            float* outs[] = {gate.data(), up.data()};
            cpu::matmul_multi(ws, xn.data(), n, outs, pool);
        } else {
            tmp.resize(size_t(n * 2 * F));
            cpu::matmul(*L.w_up, xn.data(), n, tmp.data(), pool);
            for (int64_t t = 0; t < n; t++) {
                std::copy(&tmp[t * 2 * F], &tmp[t * 2 * F] + F, &gate[t * F]);
                std::copy(&tmp[t * 2 * F] + F, &tmp[t * 2 * F] + 2 * F, &up[t * F]);
            }
        }
        cpu::swiglu(gate.data(), up.data(), n * F);
        cpu::matmul(*L.w_down, gate.data(), n, xn.data(), pool);
        for (int64_t i = 0; i < n * E; i++) x[size_t(i)] += xn[size_t(i)];
    }
    for (int64_t t = 0; t < n; t++) {
        ctxs[size_t(t)]->kv_->used += 1;
        cpu::rms_norm(&x[t * E], m.output_norm_.data(), &xn[t * E], E, c.norm_eps);
    }
    std::vector<float> logits(size_t(n * c.n_vocab));
    cpu::matmul(*m.output_, xn.data(), n, logits.data(), pool);
    for (int64_t t = 0; t < n; t++) {
        auto& out = ctxs[size_t(t)]->logits_;
        out.assign(logits.begin() + t * c.n_vocab, logits.begin() + (t + 1) * c.n_vocab);
    }
}

}  // namespace memtile
