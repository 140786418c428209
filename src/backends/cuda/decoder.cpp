// CUDA decoder: weight upload (GGUF or random), device buffers, the decode step and its CUDA graph.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/gpu-sampler.h"
#include "backends/cuda/host-util.h"
#include "backends/cuda/matvec-fused.h"
#include "backends/cuda/matvec-qkm.h"
#include "backends/cuda/norm-fused.h"
#include "backends/cuda/prefill-pass.h"
#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf-file.h"
#include "models/tensor-table.h"
#include "quant/quant.h"

namespace memtile::cuda {
namespace {

// A tensor to upload: GGUF bytes (rows back to back) or, with data == nullptr, random values.
struct source {
    dtype type = dtype::f32;
    int64_t n_in = 0, n_out = 0;
    const uint8_t* data = nullptr;
};

// The decoder's layers are stored as decoder-state.h's layer_view (the form the prefill and batched paths read).
using part = view_part;
using layer_weights = layer_view;

// Fusions of the decode step (bits of set_decode_fusion / MEMTILE_CUDA_FUSE, record()): read when a graph is captured.
bool g_fusion_set = false;
unsigned g_fusion = k_decode_fusion_default;

unsigned decode_fusion() {
    if (!g_fusion_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_FUSE")) g_fusion = unsigned(std::strtoul(env, nullptr, 0));
        g_fusion_set = true;
    }
    return g_fusion;
}

// MEMTILE_CUDA_ATTN_SHAPES="QR,QW,WR,WW" (benchmarks): the block shape (rows, warps: cuda-kernels.h's matvec_shape) of
// the single-sequence step's plain Q/K/V and Wo products instead of default_matvec_shape's; 0,0 keeps the default. Read
// when a graph is captured. docs/cuda-decode-log.md, "Session 8 (branch gatt8)".
struct attn_shapes {
    matvec_shape qkv, wo;
};

attn_shapes forced_attn_shapes() {
    attn_shapes a;
    const char* env = std::getenv("MEMTILE_CUDA_ATTN_SHAPES");
    if (!env) return a;
    int v[4] = {0, 0, 0, 0};
    if (std::sscanf(env, "%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3]) != 4)
        fail("cuda", "MEMTILE_CUDA_ATTN_SHAPES '{}': expected four numbers QR,QW,WR,WW", env);
    for (int k = 0; k < 4; k += 2) {
        const bool off = v[k] == 0 && v[k + 1] == 0;
        const bool ok = (v[k] == 1 || v[k] == 2) && (v[k + 1] == 1 || v[k + 1] == 2 || v[k + 1] == 4);
        if (!off && !ok) fail("cuda", "MEMTILE_CUDA_ATTN_SHAPES '{}': rows 1 or 2, warps 1, 2 or 4 (or 0,0)", env);
    }
    a.qkv = {v[0], v[1]};
    a.wo = {v[2], v[3]};
    return a;
}

// The single-sequence step's forms of the FFN input (record()): SwiGLU in an F16/BF16 gate/up epilogue, or with its
// quantization in a Q4_0/Q8_0 one.
bool glu_f_used(const layer_view& L, int64_t n_ff) {
    return (decode_fusion() & 4) && L.gate_up.size() == 1 && L.gate_up[0].w.n_out == 2 * n_ff &&
           matvec_glu_supported(L.gate_up[0].w) && !matvec_uses_int8(L.down.type);
}
bool glu_q_used(const layer_view& L, int64_t n_ff) {
    const dtype gut = L.gate_up[0].w.type;
    return (((decode_fusion() & 8) && gut == dtype::q4_0) || ((decode_fusion() & 16) && gut == dtype::q8_0)) &&
           L.gate_up.size() == 1 && L.gate_up[0].w.n_out == 2 * n_ff && matvec_glu_q_supported(L.gate_up[0].w) &&
           matvec_uses_int8(L.down.type) && consumers_q_block({{L.down, 0}}) == 32;
}
// Whether every consumer is a launch_matvec_scaled one (norm-fused.h).
bool scaled_consumers(const std::vector<view_part>& cons, int64_t n_embd) {
    if (!norm_parts_consumers(cons, n_embd)) return false;
    for (const auto& p : cons)
        if (!matvec_scaled_supported(p.w)) return false;
    return true;
}

class cuda_decoder final : public decoder {
public:
    cuda_decoder(const model_config& c, uint32_t n_ctx, uint32_t first_layer = 0)
        : cfg_(c), n_ctx_(n_ctx), first_layer_(first_layer) {
        if (first_layer >= c.n_layer)
            fail("cuda", "the GPU part starts at layer {} but the model has {} layers (--gpu-layers must be >= 1)",
                 first_layer, c.n_layer);
        // The decode attention holds up to 8 dims per lane (256) and merges at most 32 heads per block of 256 outputs.
        if (c.head_dim < 8 || c.head_dim > 256)
            fail("cuda", "head_dim {} is outside the 8..256 that the CUDA decode attention supports", c.head_dim);
        require_device();
        check(cudaSetDevice(0), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~cuda_decoder() override {
        prefill_.reset();  // its cuBLAS handle uses stream_
        sampler_.reset();  // so does the sampler
        if (exec_) cudaGraphExecDestroy(exec_);
        if (stream_) cudaStreamDestroy(stream_);
        if (host_io_) cudaFreeHost(host_io_);
        for (void* p : allocs_) cudaFree(p);
    }

    // Builds weights from `src(spec)` for every tensor of the architecture's table that it provides.
    void build(const std::function<std::optional<source>(const tensor_spec&)>& src,
               const std::function<std::vector<float>(const tensor_spec&)>& vec, uint64_t seed) {
        const auto& c = cfg_;
        const int64_t Q = c.q_dim(), KV = c.kv_dim();
        std::map<std::string, source> mats;
        std::map<std::string, std::vector<float>> vecs;
        for (const auto& spec : tensor_table(c)) {
            if (spec.layer >= 0 && uint32_t(spec.layer) < first_layer_) continue;  // the CPU's layers
            const bool is_vec = spec.dims.size() == 1;
            if (is_vec) {
                auto v = vec(spec);
                if (!v.empty()) vecs[spec.name] = std::move(v);
            } else if (auto s = src(spec)) {
                if (spec.role != tensor_role::token_embd && !matvec_supported(s->type))
                    fail("cuda", "tensor '{}' has type {}, which the CUDA backend does not support yet", spec.name,
                         dtype_name(s->type));
                mats[spec.name] = *s;
            }
        }
        auto find = [&](const std::string& n) -> const source* {
            auto it = mats.find(n);
            return it == mats.end() ? nullptr : &it->second;
        };
        auto vec_dev = [&](const std::string& n, bool required) -> const float* {
            auto it = vecs.find(n);
            if (it == vecs.end()) {
                if (required) fail("cuda", "missing tensor '{}'", n);
                return nullptr;
            }
            return upload_f32(it->second);
        };
        uint64_t s = seed;
        const source* emb = find("token_embd.weight");
        if (!emb) fail("cuda", "missing tensor 'token_embd.weight'");
        if (!matvec_supported(emb->type))
            fail("cuda", "token_embd.weight has type {}, which the CUDA backend does not support yet",
                 dtype_name(emb->type));
        tok_embd_ = upload({*emb}, s++);
        const source* out = find("output.weight");
        output_ = out ? upload({*out}, s++) : tok_embd_;
        output_norm_ = vec_dev("output_norm.weight", true);
        layers_.resize(c.n_layer);
        for (uint32_t il = first_layer_; il < c.n_layer; il++) {
            const std::string p = "blk." + std::to_string(il) + ".";
            layer_weights& L = layers_[il];
            L.attn_norm = vec_dev(p + "attn_norm.weight", true);
            L.ffn_norm = vec_dev(p + "ffn_norm.weight", true);
            if (vecs.count(p + "attn_q.bias")) {
                std::vector<float> b = vecs[p + "attn_q.bias"];
                for (const char* n : {"attn_k.bias", "attn_v.bias"}) {
                    const auto& v = vecs[p + n];
                    b.insert(b.end(), v.begin(), v.end());
                }
                if (int64_t(b.size()) != Q + 2 * KV) fail("cuda", "layer {}: bias sizes do not match", il);
                L.bias = upload_f32(b);
            }
            if (const source* qkv = find(p + "attn_qkv.weight")) {
                L.qkv = upload_parts({*qkv}, {0}, s);
            } else {
                L.qkv =
                    upload_parts({*find(p + "attn_q.weight"), *find(p + "attn_k.weight"), *find(p + "attn_v.weight")},
                                 {0, Q, Q + KV}, s);
            }
            L.wo = upload({*find(p + "attn_output.weight")}, s++);
            if (const source* gate = find(p + "ffn_gate.weight"))
                L.gate_up = upload_parts({*gate, *find(p + "ffn_up.weight")}, {0, int64_t(c.n_ff)}, s);
            else
                L.gate_up = upload_parts({*find(p + "ffn_up.weight")}, {0}, s);
            L.down = upload({*find(p + "ffn_down.weight")}, s++);
        }
        std::vector<float> freq(c.n_rot / 2);
        for (size_t i = 0; i < freq.size(); i++)
            freq[i] = std::pow(c.rope_freq_base, -2.0f * float(i) / float(c.n_rot));
        freq_ = upload_f32(freq);
        if (vecs.count("rope_freqs.weight")) factors_ = upload_f32(vecs["rope_freqs.weight"]);
        allocate_state();
        // The prefill pass's cuBLAS handle is made here, at load: creating it loads libcublasLt (~0.1 s), which
        // the first prompt's time to first token would otherwise carry.
        if (!first_layer_ && prefill_pass::supported(view()))
            prefill_ = std::make_unique<prefill_pass>(view(), stream_);
        if (warm_up_enabled()) warm_up();
    }

    const model_config& config() const override { return cfg_; }
    uint32_t used() const override { return used_; }
    void reset() override { used_ = 0; }
    void truncate(uint32_t n) override { used_ = std::min(used_, n); }
    uint64_t streamed_bytes_per_token() const override { return streamed_; }
    std::string summary() const override {
        std::string types;
        for (const auto& [t, n] : type_bytes_)
            types += fmt::format("{}{} {}", types.empty() ? "" : ", ", dtype_name(t), format_bytes(n));
        return fmt::format("{} layers{}, weights {} ({}), KV cache {} for {} positions, {} attention splits{}",
                           cfg_.n_layer - first_layer_,
                           first_layer_ ? fmt::format(" ({}..{}; the CPU runs 0..{})", first_layer_, cfg_.n_layer - 1,
                                                      first_layer_ - 1)
                                        : "",
                           format_bytes(streamed_), types, format_bytes(kv_bytes_), n_ctx_, n_split_,
                           split_keys_ > 0 ? fmt::format(" of >= {} keys", split_keys_) : std::string());
    }

    uint32_t first_layer() const override { return first_layer_; }

    std::span<const float> forward_hidden(std::span<const float> x) override {
        if (first_layer_ == 0) fail("cuda", "forward_hidden() on a decoder that runs every layer (use forward())");
        if (x.size() != size_t(cfg_.n_embd))
            fail("cuda", "forward_hidden(): {} values for an embedding width of {}", x.size(), cfg_.n_embd);
        // The CPU's hidden state replaces the embedding gather; the graph then starts at layer first_layer_.
        check(cudaMemcpyAsync(x_, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream_), "copy hidden");
        return forward(0);
    }

    std::span<const float> forward(int32_t token) override {
        step(token);
        check(cudaMemcpyAsync(logits_host_.data(), logits_, logits_host_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_),
              "copy logits");
        check(cudaStreamSynchronize(stream_), "decode step");
        return logits_host_;
    }

    int32_t forward_greedy(int32_t token) override {
        step(token);
        check(cudaMemcpyAsync(host_io_, io_, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "copy token");
        check(cudaStreamSynchronize(stream_), "decode step");
        return host_io_[0];
    }

    double bench_decode(int n, int warmup, int32_t first_token, uint32_t start) override {
        if (start > used_)
            fail("cuda", "bench from position {} with {} positions in the cache (prefill them first)", start, used_);
        if (uint64_t(start) + uint64_t(n) + uint64_t(warmup) > n_ctx_)
            fail("cuda", "bench of {} + {} steps from position {} exceeds the context of {}", warmup, n, start, n_ctx_);
        if (unawaited_) check(cudaStreamSynchronize(stream_), "decode step");
        used_ = start;
        host_io_[0] = first_token;
        host_io_[1] = int32_t(start);
        check(cudaMemcpyAsync(io_, host_io_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "copy token");
        ensure_graph();
        const double seconds = time_graph_replays(exec_, stream_, warmup, n, "decode steps");
        used_ = start + uint32_t(warmup + n);
        return seconds;
    }

    void append(std::span<const int32_t> tokens) override {
        if (tokens.size() == 1) {
            step(tokens[0]);
            return;
        }
        prefill_device(tokens);
    }

    int32_t sample(const sampling_draw& d) override {
        if (used_ == 0) fail("cuda", "sample() before any token was appended");
        if (!sampler_) sampler_ = std::make_unique<device_sampler>(int(cfg_.n_vocab), stream_);
        // After a decode step the graph has already written argmax(logits) to io_[0] (the next step's token slot,
        // which step() overwrites only from the host).
        const int32_t id = sampler_->sample(logits_, d, argmax_ready_ ? io_ : nullptr);
        unawaited_ = false;  // sample() waited for the stream
        return id;
    }

    std::span<const float> forward_prefill(std::span<const int32_t> tokens) override {
        prefill_device(tokens);
        check(cudaMemcpyAsync(logits_host_.data(), logits_, logits_host_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_),
              "copy logits");
        check(cudaStreamSynchronize(stream_), "prefill");
        return logits_host_;
    }

    // The prefill pass (or, for models it does not cover, decode steps) with the last logits left in logits_.
    void prefill_device(std::span<const int32_t> tokens) {
        if (tokens.empty()) fail("cuda", "prefill of no tokens");
        if (first_layer_) fail("cuda", "prefill on the GPU needs every layer there (--gpu-layers all)");
        if (used_ + tokens.size() > n_ctx_)
            fail("cuda", "context overflow: {} + {} tokens exceed the context of {}", used_, tokens.size(), n_ctx_);
        const model_view v = view();
        if (!prefill_pass::supported(v)) {
            for (int32_t t : tokens) {
                step(t);
                check(cudaStreamSynchronize(stream_), "decode step");  // step() reuses the pinned host_io_
            }
            return;
        }
        for (int32_t t : tokens)
            if (t < 0 || uint32_t(t) >= cfg_.n_vocab)
                fail("cuda", "token id {} is outside the vocabulary (0..{})", t, cfg_.n_vocab - 1);
        if (!prefill_) prefill_ = std::make_unique<prefill_pass>(v, stream_);
        const int64_t layer_kv = int64_t(n_ctx_) * cfg_.kv_dim();
        prefill_->run(tokens, k_cache_, v_cache_, layer_kv, int(used_), logits_);
        argmax_ready_ = false;
        used_ += uint32_t(tokens.size());
    }

    double bench_prefill(int n_tokens, int reps) override {
        if (n_tokens < 1 || uint32_t(n_tokens) > n_ctx_)
            fail("cuda", "bench of a {}-token prefill in a context of {}", n_tokens, n_ctx_);
        std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t((17 + 7919 * i) % cfg_.n_vocab);
        std::vector<double> secs;
        cudaEvent_t a, b;
        check(cudaEventCreate(&a), "cudaEventCreate");
        check(cudaEventCreate(&b), "cudaEventCreate");
        for (int r = 0; r <= reps; r++) {
            used_ = 0;
            check(cudaEventRecord(a, stream_), "cudaEventRecord");
            forward_prefill(tokens);
            check(cudaEventRecord(b, stream_), "cudaEventRecord");
            check(cudaEventSynchronize(b), "prefill");
            float ms = 0;
            check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
            if (r > 0) secs.push_back(double(ms) / 1e3);
        }
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        used_ = 0;
        std::sort(secs.begin(), secs.end());
        return secs.empty() ? 0.0 : secs[secs.size() / 2];
    }

    std::unique_ptr<batch_decoder> make_batch(int max_seq, uint32_t n_ctx) override {
        if (first_layer_) fail("cuda", "batched decode on the GPU needs every layer there (--gpu-layers all)");
        return make_batch_decoder(view(), max_seq, n_ctx);
    }

private:
    // The weights as prefill.cpp sees them (copies of the tables, pointers into this decoder's memory).
    model_view view() const {
        model_view v;
        v.cfg = &cfg_;
        v.tok_embd = tok_embd_;
        v.output = output_;
        v.output_norm = output_norm_;
        v.freq = freq_;
        v.factors = factors_;
        v.layers = layers_;
        return v;
    }

    void* alloc(size_t bytes) {
        void* p = nullptr;
        check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
        allocs_.push_back(p);
        return p;
    }
    const float* upload_f32(const std::vector<float>& v) {
        auto* p = static_cast<float*>(alloc(v.size() * sizeof(float)));
        check(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
        return p;
    }

    // Uploads the row-wise concatenation of `srcs` (same type and n_in) as one weight in the device layout.
    gpu_weight upload(const std::vector<source>& srcs, uint64_t seed) {
        gpu_weight w;
        w.type = srcs[0].type;
        w.n_in = srcs[0].n_in;
        for (const auto& s : srcs) w.n_out += s.n_out;
        w.q_row_bytes = device_q_row_bytes(w.type, w.n_in);
        const int64_t d_row = device_d_row_elems(w.type, w.n_in);
        auto* q = static_cast<uint8_t*>(alloc(size_t(w.q_row_bytes * w.n_out)));
        auto* d = d_row ? static_cast<uint16_t*>(alloc(size_t(d_row * w.n_out) * 2)) : nullptr;
        w.q = q;
        w.d = d;
        if (!srcs[0].data) {
            launch_fill_random(w, seed * 0x9e3779b97f4a7c15ull + 1, stream_);
            check(cudaGetLastError(), "random fill");
            check(cudaStreamSynchronize(stream_), "random fill");
        } else {
            int64_t row = 0;
            std::vector<uint8_t> hq;
            std::vector<uint16_t> hd;
            for (const auto& s : srcs) {
                hq.resize(size_t(w.q_row_bytes * s.n_out));
                hd.resize(size_t(d_row * s.n_out));
                repack_rows(w.type, s.data, w.n_in, s.n_out, hq.data(), d ? hd.data() : nullptr);
                check(cudaMemcpy(q + row * w.q_row_bytes, hq.data(), hq.size(), cudaMemcpyHostToDevice), "upload");
                if (d) check(cudaMemcpy(d + row * d_row, hd.data(), hd.size() * 2, cudaMemcpyHostToDevice), "upload");
                row += s.n_out;
            }
        }
        const uint64_t bytes = uint64_t(w.q_row_bytes * w.n_out + d_row * w.n_out * 2);
        type_bytes_[w.type] += bytes;
        return w;
    }

    // Groups consecutive sources of one type into one weight (one launch); offsets: output row of each.
    std::vector<part> upload_parts(const std::vector<source>& srcs, const std::vector<int64_t>& offsets,
                                   uint64_t& seed) {
        std::vector<part> parts;
        size_t i = 0;
        while (i < srcs.size()) {
            size_t j = i + 1;
            while (j < srcs.size() && srcs[j].type == srcs[i].type && srcs[j].n_in == srcs[i].n_in) j++;
            parts.push_back({upload({srcs.begin() + long(i), srcs.begin() + long(j)}, seed++), offsets[i]});
            i = j;
        }
        return parts;
    }

    void allocate_state() {
        const auto& c = cfg_;
        const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, V = c.n_vocab;
        const int64_t widest = std::max({E, Q, F});
        x_ = static_cast<float*>(alloc(size_t(E) * 4));
        xn_ = static_cast<float*>(alloc(size_t(widest) * 4));
        qkv_ = static_cast<float*>(alloc(size_t(Q + 2 * KV) * 4));
        att_ = static_cast<float*>(alloc(size_t(Q) * 4));
        gu_ = static_cast<float*>(alloc(size_t(2 * F) * 4));
        xq_ = static_cast<int8_t*>(alloc(size_t(widest)));
        xd_ = static_cast<float*>(alloc(size_t(widest / 32 + 1) * 4));
        xs_ = static_cast<float*>(alloc(size_t(widest / 32 + 1) * 4));
        hq_ = static_cast<int8_t*>(alloc(size_t(F)));
        hd_ = static_cast<float*>(alloc(size_t(F / 32 + 1) * 4));
        hs_ = static_cast<float*>(alloc(size_t(F / 32 + 1) * 4));
        nq_ = static_cast<int8_t*>(alloc(size_t(E)));
        nd_ = static_cast<float*>(alloc(size_t(E / 32 + 1) * 4));
        nsq_ = static_cast<float*>(alloc(size_t(E / 32 + 1) * 4));
        nss_ = static_cast<float*>(alloc(size_t(E / 32 + 1) * 4));
        logits_ = static_cast<float*>(alloc(size_t(V) * 4));
        argmax_scratch_ = static_cast<float*>(alloc(k_argmax_scratch * 4));
        logits_host_.resize(size_t(V));
        n_split_ = attention_splits(n_ctx_, c);
        split_keys_ = attention_split_keys();
        partial_ = static_cast<float*>(alloc(size_t(c.n_head) * size_t(n_split_) * (c.head_dim + 2) * 4));
        // Caches of the GPU's layers only: layer il at (il - first_layer_) * layer_kv.
        const size_t layer_kv = size_t(n_ctx_) * size_t(KV), gpu_layers = c.n_layer - first_layer_;
        kv_bytes_ = uint64_t(layer_kv) * gpu_layers * 2 * 2;
        k_cache_ = static_cast<uint16_t*>(alloc(layer_kv * gpu_layers * 2));
        v_cache_ = static_cast<uint16_t*>(alloc(layer_kv * gpu_layers * 2));
        // launch_attention_fused's counters (zero between kernels).
        const size_t merge_bytes = size_t(attention_merge_counters(int(c.n_head))) * sizeof(unsigned);
        merge_counters_ = static_cast<unsigned*>(alloc(merge_bytes));
        check(cudaMemset(merge_counters_, 0, merge_bytes), "cudaMemset");
        io_ = static_cast<int32_t*>(alloc(2 * sizeof(int32_t)));
        check(cudaMallocHost(reinterpret_cast<void**>(&host_io_), 2 * sizeof(int32_t)), "cudaMallocHost");
        streamed_ = 0;
        for (const auto& [t, n] : type_bytes_) streamed_ += n;
        if (output_.q == tok_embd_.q) {
            // Tied: the matrix is read as the output; the embedding row is extra and tiny.
        } else {
            streamed_ -= uint64_t(tok_embd_.q_row_bytes * tok_embd_.n_out +
                                  device_d_row_elems(tok_embd_.type, tok_embd_.n_in) * tok_embd_.n_out * 2);
        }
        streamed_ += uint64_t(tok_embd_.q_row_bytes);
    }

    // Activation quantization block of the consumers of one activation: 256 (one scale per 256, as the CPU
    // engine's q8_k) when any is a K format, else 32 (its q8_0), so that integer dot products equal the CPU's.
    static int q_block(const std::vector<part>& consumers) {
        for (const auto& p : consumers)
            if (p.w.type == dtype::q4_k || p.w.type == dtype::q5_k || p.w.type == dtype::q6_k) return 256;
        return 32;
    }

    // xq_ where a consumer of an activation reads it quantized, else null: the float formats read the f32 activation,
    // so the norms and SwiGLU skip quantizing it for them.
    int8_t* xq_for(const std::vector<part>& consumers) const {
        for (const auto& p : consumers)
            if (matvec_uses_int8(p.w.type)) return xq_;
        return nullptr;
    }

    // The decode step, in stream order (captured once into the graph). decode_fusion() bits:
    // 2: the attention merge runs in the attention kernel's last blocks (launch_attention_fused, bit-equal) where that
    // was measured faster: Wo input in f32 or quantized in groups of 32; with K-format Wo (one scale per 256, two heads
    // per chunk) the separate merge kernel was faster (docs/cuda-decode-log-s2-s4.md, "Session 4 (branch gfuse)").
    // 4: SwiGLU in the epilogue of an F16/BF16 gate/up product (launch_matvec_glu, bit-equal) where the down matrix
    // reads f32 (F16/BF16/F32 down); the quantized down matrices need their input quantized in groups of 32 or 256.
    // 8 (Q4_0) / 16 (Q8_0): SwiGLU and its quantization in groups of 32 in the epilogue of a Q4_0 / Q8_0 gate/up
    // product where the down matrix reads int8 in groups of 32 (launch_matvec_glu_q, bit-equal; the quantized h goes
    // to hq_, hd_, hs_ since the product still reads xq_). Q8_0 measured slower (docs/cuda-decode-log-s5-s6.md,
    // "Session 6 (branch gq8)").
    // 32: RoPE and the KV write folded into the attention kernel (launch_attention_rope, bit-equal; no RoPE kernel);
    // 64: with 32, its K/V loads of earlier positions before the PDL wait; 128: with 2, the merge in the attention
    // kernel also for a K-format Wo (the whole block quantizes its unit of 256; measured slower, off by default).
    // docs/cuda-decode-log.md, session 7.
    // k_attn_cluster_k (2^22) / k_attn_cluster (2^23), with 32: the merge in a thread-block cluster of the attention
    // blocks (distributed shared memory; bit-equal) for a K-format / another Wo (docs/cuda-decode-log.md, branch gclu).
    // 256 .. 2^21 (qkm-bits.h): the Q4_K_M products of matvec-qkm.h (bit-equal; docs/cuda-decode-log.md, session 7).
    void record() {
        const auto& c = cfg_;
        const int64_t E = c.n_embd, KV = c.kv_dim(), F = c.n_ff;
        cudaStream_t s = stream_;
        int32_t* token = io_;
        int32_t* pos = io_ + 1;
        if (first_layer_ == 0) launch_embed(tok_embd_, token, x_, s);  // else x_ holds the CPU's hidden state
        const rope_params rp{int(c.n_head), int(c.n_head_kv), int(c.head_dim), int(c.n_rot), c.rope == rope_style::neox,
                             freq_,         factors_,         split_keys_};
        const size_t layer_kv = size_t(n_ctx_) * size_t(KV);
        const unsigned knock = decode_fusion();
        const attn_shapes shapes = forced_attn_shapes();
        // A plain product at `shape` (rows 0: the default one).
        auto plain = [&](const gpu_weight& w, matvec_shape shape, const float* x, float* y, bool acc) {
            if (shape.rows > 0) force_matvec_shape(shape);
            launch_matvec(w, x, xq_, xd_, xs_, y, acc, s);
            if (shape.rows > 0) force_matvec_shape({});
        };
        // (bits 4, 8, 16: glu_f_used / glu_q_used)
        const bool fuse_merge = decode_fusion() & 2, fuse_rope = decode_fusion() & 32, early_kv = decode_fusion() & 64,
                   fuse_merge_k = decode_fusion() & 128, fuse_pair = decode_fusion() & k_qkm_pair;
        // set_norm_fusion (norm-fused.h). In modes 1 and 2 every norm of int8 consumers in groups of 32 has the parts'
        // arithmetic (norm_parts_consumers, decoder-state.h; the batched step the same): where all its consumers read
        // parts (scaled_consumers), the parts kernel or (mode 2) the product before it (Wo, down; mode 3: only that
        // side, a diagnostic) leaves them, parts_ready: the last product did; else rms_norm_parts_rows forms the same
        // values for any int8 kernel.
        // Bit k_norm_fusion_k (the consumers in units of 256, the K formats): the parts kernel of units where every
        // consumer of the norm reads them (k_consumers), else rms_norm_parts_rows_k's values.
        const int nmode = norm_fusion_mode() & 3;
        const bool leave_parts = nmode == 2 || nmode == 3, read_parts = norm_parts_read(), read_k = norm_parts_k_read();
        auto parts = [&](const float* g) { return norm_parts{g, nq_, nd_, nsq_, nss_, c.norm_eps}; };
        auto attn_parts_of = [&](const layer_view& L) {
            const bool pair = fuse_pair && L.qkv.size() == 2 && matvec_pair_supported(L.qkv[0].w, L.qkv[1].w);
            return nmode != 0 && shapes.qkv.rows == 0 && !pair && scaled_consumers(L.qkv, E);
        };
        const bool k_rows = norm_fusion_mode() & k_norm_fusion_k_rows;  // norm() forms them
        auto k_consumers = [&](const std::vector<part>& cons) {
            if (!read_k || k_rows || !norm_parts_k_consumers(cons, E)) return false;
            for (const auto& p : cons)
                if (!matvec_scaled_k_supported(p.w)) return false;
            return true;
        };
        // Q/K/V on parts in units of 256: 2 the pair launch, 1 each product, 0 none.
        auto attn_k_of = [&](const layer_view& L) {
            if (!read_k || k_rows || shapes.qkv.rows != 0 || !norm_parts_k_consumers(L.qkv, E)) return 0;
            if (fuse_pair && L.qkv.size() == 2 && matvec_pair_supported(L.qkv[0].w, L.qkv[1].w))
                return matvec_pair_scaled_supported(L.qkv[0].w, L.qkv[1].w) ? 2 : 0;
            return k_consumers(L.qkv) ? 1 : 0;
        };
        // A norm not formed from parts: rms_norm_kernel, or its values with the parts' arithmetic.
        auto norm = [&](const float* g, const std::vector<part>& cons) {
            if (read_parts && norm_parts_consumers(cons, E))
                launch_rms_norm_parts_rows(x_, g, xn_, 1, int(E), c.norm_eps, xq_, xd_, xs_, s);
            else if (read_k && norm_parts_k_consumers(cons, E))
                launch_rms_norm_parts_rows_k(x_, g, xn_, 1, int(E), c.norm_eps, xq_, xd_, xs_, s);
            else
                launch_rms_norm(x_, g, xn_, int(E), c.norm_eps, q_block(cons), xq_for(cons), xd_, xs_, s);
        };
        const bool out_ok = nmode != 0 && scaled_consumers({{output_, 0}}, E), out_parts = read_parts && out_ok;
        bool parts_ready = false;
        for (uint32_t il = first_layer_; il < c.n_layer; il++) {
            const auto& L = layers_[il];
            uint16_t* kc = k_cache_ + (il - first_layer_) * layer_kv;
            uint16_t* vc = v_cache_ + (il - first_layer_) * layer_kv;
            const bool attn_parts = read_parts && attn_parts_of(L);
            const int attn_k = attn_k_of(L);
            if (!(knock & k_knockout_attn_norm) && attn_parts && !parts_ready)
                launch_norm_parts(x_, int(E), parts(L.attn_norm), s);
            else if (!(knock & k_knockout_attn_norm) && attn_k)
                launch_norm_parts_k(x_, int(E), parts(L.attn_norm), s);
            else if (!(knock & k_knockout_attn_norm) && !attn_parts)
                norm(L.attn_norm, L.qkv);
            parts_ready = false;
            const bool pair = fuse_pair && L.qkv.size() == 2 && matvec_pair_supported(L.qkv[0].w, L.qkv[1].w);
            if (!(knock & k_knockout_qkv) && attn_parts)
                for (const auto& p : L.qkv) launch_matvec_scaled(p.w, parts(L.attn_norm), qkv_ + p.offset, false, s);
            else if (!(knock & k_knockout_qkv) && attn_k == 2)
                launch_matvec_pair_scaled(L.qkv[0].w, qkv_ + L.qkv[0].offset, L.qkv[1].w, qkv_ + L.qkv[1].offset,
                                          parts(L.attn_norm), s);
            else if (!(knock & k_knockout_qkv) && attn_k == 1)
                for (const auto& p : L.qkv) launch_matvec_scaled_k(p.w, parts(L.attn_norm), qkv_ + p.offset, false, s);
            else if (!(knock & k_knockout_qkv) && pair)
                launch_matvec_pair(L.qkv[0].w, qkv_ + L.qkv[0].offset, L.qkv[1].w, qkv_ + L.qkv[1].offset, xq_, xd_,
                                   xs_, decode_fusion(), s);
            else if (!(knock & k_knockout_qkv))
                for (const auto& p : L.qkv)
                    if (!launch_matvec_qkm(p.w, xq_, xd_, xs_, qkv_ + p.offset, false, decode_fusion(), s))
                        plain(p.w, shapes.qkv, xn_, qkv_ + p.offset, false);
            const int wo_qb = matvec_uses_int8(L.wo.type) ? q_block({{L.wo, 0}}) : 0;
            const bool merge_in = fuse_merge && (wo_qb != 256 || fuse_merge_k);
            const bool cluster = decode_fusion() & (wo_qb == 256 ? k_attn_cluster_k : k_attn_cluster);
            if (!(knock & k_knockout_attn) &&
                !(fuse_rope && launch_attention_rope(qkv_, L.bias, rp, pos, kc, vc, n_split_, partial_,
                                                     merge_in ? merge_counters_ : nullptr, att_, wo_qb, xq_, xd_, xs_,
                                                     early_kv, cluster, s))) {
                launch_rope_kv(qkv_, L.bias, rp, pos, kc, vc, s);
                if (!(merge_in && launch_attention_fused(qkv_, 0, 1, rp, pos, nullptr, 0, kc, vc, n_split_, partial_,
                                                         merge_counters_, att_, wo_qb, xq_, xd_, xs_, s)))
                    launch_attention_split(qkv_, rp, pos, kc, vc, n_split_, partial_, att_, wo_qb, xq_, xd_, xs_, s);
            }
            const bool glu_f = glu_f_used(L, F), glu_q = glu_q_used(L, F);
            const bool ffn_ok =
                !(knock & k_knockout_ffn) && nmode != 0 && !glu_f && !glu_q && scaled_consumers(L.gate_up, E);
            const bool ffn_parts = read_parts && ffn_ok;
            const bool ffn_k = !(knock & k_knockout_ffn) && !glu_f && !glu_q && k_consumers(L.gate_up);
            bool ffn_ready = false;
            if (!(knock & k_knockout_wo) && shapes.wo.rows == 0 && leave_parts && ffn_ok &&
                launch_matvec_norm(L.wo, xq_, xd_, xs_, x_, parts(L.ffn_norm), s))
                ffn_ready = true;
            else if (!(knock & k_knockout_wo) && !launch_matvec_qkm(L.wo, xq_, xd_, xs_, x_, true, decode_fusion(), s))
                plain(L.wo, shapes.wo, att_, x_, true);
            if (knock & k_knockout_ffn) continue;
            // The next norm's parts from the down product, where its consumers read them.
            const bool last = il + 1 == c.n_layer;
            const bool next_parts = leave_parts && (last ? out_ok : attn_parts_of(layers_[il + 1]));
            const float* next_g = last ? output_norm_ : layers_[il + 1].attn_norm;
            if (ffn_parts) {
                if (!ffn_ready) launch_norm_parts(x_, int(E), parts(L.ffn_norm), s);
                for (const auto& p : L.gate_up) launch_matvec_scaled(p.w, parts(L.ffn_norm), gu_ + p.offset, false, s);
            } else if (ffn_k) {
                launch_norm_parts_k(x_, int(E), parts(L.ffn_norm), s);
                for (const auto& p : L.gate_up)
                    launch_matvec_scaled_k(p.w, parts(L.ffn_norm), gu_ + p.offset, false, s);
            } else {
                norm(L.ffn_norm, L.gate_up);
                if (glu_f) {
                    launch_matvec_glu(L.gate_up[0].w, xn_, gu_, s);  // h [F] into gu_: xn_ is still being read
                    launch_matvec(L.down, gu_, xq_, xd_, xs_, x_, true, s);
                    continue;
                }
                if (glu_q) {
                    launch_matvec_glu_q(L.gate_up[0].w, xq_, xd_, xs_, gu_, hq_, hd_, hs_, s);
                    if (next_parts && launch_matvec_norm(L.down, hq_, hd_, hs_, x_, parts(next_g), s))
                        parts_ready = true;
                    else
                        launch_matvec(L.down, gu_, hq_, hd_, hs_, x_, true, s);
                    continue;
                }
                for (const auto& p : L.gate_up)
                    if (!launch_matvec_qkm(p.w, xq_, xd_, xs_, gu_ + p.offset, false, decode_fusion(), s))
                        launch_matvec(p.w, xn_, xq_, xd_, xs_, gu_ + p.offset, false, s);
            }
            launch_swiglu(gu_, F, xn_, q_block({{L.down, 0}}), xq_for({{L.down, 0}}), xd_, xs_, s);
            if (next_parts && launch_matvec_norm(L.down, xq_, xd_, xs_, x_, parts(next_g), s))
                parts_ready = true;
            else if (!launch_matvec_qkm(L.down, xq_, xd_, xs_, x_, true, decode_fusion(), s))
                launch_matvec(L.down, xn_, xq_, xd_, xs_, x_, true, s);
        }
        if (out_parts) {
            if (!parts_ready) launch_norm_parts(x_, int(E), parts(output_norm_), s);
            launch_matvec_scaled(output_, parts(output_norm_), logits_, false, s);
        } else if (k_consumers({{output_, 0}})) {
            launch_norm_parts_k(x_, int(E), parts(output_norm_), s);
            launch_matvec_scaled_k(output_, parts(output_norm_), logits_, false, s);
        } else {
            norm(output_norm_, {{output_, 0}});
            if (!launch_matvec_qkm(output_, xq_, xd_, xs_, logits_, false, decode_fusion(), s))
                launch_matvec(output_, xn_, xq_, xd_, xs_, logits_, false, s);
        }
        launch_argmax(logits_, int(c.n_vocab), token, pos, argmax_scratch_, s);
    }

    void ensure_graph() {
        if (exec_) return;
        cudaGraph_t graph = nullptr;
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        record();
        const cudaError_t launch_error = cudaGetLastError();
        check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
        check(launch_error, "kernel launch during capture");
        check(cudaGraphInstantiate(&exec_, graph, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(graph);
    }

    // A short prefill and one decode step at load, then the cache is declared empty again (positions at or past
    // used_ are never read). Each kernel's module is loaded on its first launch (lazy loading), cuBLAS picks and
    // loads its GEMM kernels on the first call of a shape, and the decode graph is captured and instantiated on the
    // first step: without this, the first prompt's time to first token carried ~50 ms of that (default model,
    // 10-token prompt). Set MEMTILE_CUDA_WARMUP=0 to skip it (A/B of load time against time to first token).

    void warm_up() {
        if (first_layer_) {
            forward_hidden(std::vector<float>(cfg_.n_embd, 0.0f));
        } else {
            std::vector<int32_t> tokens(std::min<uint32_t>(8, n_ctx_ - 1));
            for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(i % cfg_.n_vocab);
            if (!tokens.empty()) prefill_device(tokens);
            forward(0);
        }
        reset();
        argmax_ready_ = false;
    }

    void step(int32_t token) {
        if (used_ >= n_ctx_) fail("cuda", "context overflow: {} tokens fill the context of {}", used_, n_ctx_);
        if (token < 0 || uint32_t(token) >= cfg_.n_vocab)
            fail("cuda", "token id {} is outside the vocabulary (0..{})", token, cfg_.n_vocab - 1);
        // append() leaves a step unawaited: its copy from the pinned host_io_ may still be pending.
        if (unawaited_) check(cudaStreamSynchronize(stream_), "decode step");
        host_io_[0] = token;
        host_io_[1] = int32_t(used_);
        check(cudaMemcpyAsync(io_, host_io_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "copy token");
        ensure_graph();
        check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
        argmax_ready_ = true;
        unawaited_ = true;
        used_++;
    }

    model_config cfg_;
    uint32_t n_ctx_;
    uint32_t first_layer_ = 0;  // layers [0, first_layer_) run on the CPU (--gpu-layers)
    uint32_t used_ = 0;
    cudaStream_t stream_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    std::vector<void*> allocs_;
    std::map<dtype, uint64_t> type_bytes_;
    uint64_t streamed_ = 0, kv_bytes_ = 0;
    gpu_weight tok_embd_, output_;
    const float* output_norm_ = nullptr;
    const float* freq_ = nullptr;
    const float* factors_ = nullptr;
    std::vector<layer_weights> layers_;
    float *x_ = nullptr, *xn_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gu_ = nullptr, *logits_ = nullptr;
    float *xd_ = nullptr, *xs_ = nullptr, *partial_ = nullptr;
    float* argmax_scratch_ = nullptr;  // [k_argmax_scratch] launch_argmax's partial results
    int8_t* xq_ = nullptr;
    int8_t* hq_ = nullptr;  // [n_ff] h quantized by launch_matvec_glu_q (fusion bits 8, 16), hd_, hs_ [n_ff / 32]
    float *hd_ = nullptr, *hs_ = nullptr;
    // The RMSNorm parts (norm-fused.h; set_norm_fusion): nq_ [n_embd], nd_, nsq_, nss_ [n_embd / 32].
    int8_t* nq_ = nullptr;
    float *nd_ = nullptr, *nsq_ = nullptr, *nss_ = nullptr;
    unsigned* merge_counters_ = nullptr;
    uint16_t *k_cache_ = nullptr, *v_cache_ = nullptr;
    int32_t* io_ = nullptr;       // device: token, position
    int32_t* host_io_ = nullptr;  // pinned host mirror
    int n_split_ = 1, split_keys_ = 0;
    std::vector<float> logits_host_;
    std::unique_ptr<prefill_pass> prefill_;
    std::unique_ptr<device_sampler> sampler_;
    bool argmax_ready_ = false;  // io_[0] holds argmax(logits_) (the decode graph ran last)
    bool unawaited_ = false;     // a step was launched and the stream not waited for since
};

source source_of(const gguf_tensor_info& t) {
    return {t.type, int64_t(t.dims[0]), int64_t(t.n_elems / t.dims[0]), t.data};
}

}  // namespace

bool compiled() {
    return true;
}

int attention_splits(uint32_t n_ctx, const model_config& c) {
    if (const char* env = std::getenv("MEMTILE_CUDA_SPLITS")) {
        const int v = int(std::strtol(env, nullptr, 10));
        if (v >= 1 && v <= 32) return v;
    }
    return attention_wave_splits(int(c.n_head), int(c.n_head_kv), int(c.head_dim),
                                 int(std::clamp<uint32_t>(n_ctx / 128, 1, 32)));
}

int attention_split_keys() {
    if (const char* env = std::getenv("MEMTILE_CUDA_SPLIT_KEYS")) {
        const int v = int(std::strtol(env, nullptr, 10));
        if (v >= 0 && v <= 1 << 20) return v;
    }
    return k_attention_split_keys;
}

void set_decode_fusion(unsigned mask) {
    decode_fusion();
    g_fusion = mask;
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::string device_description() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fmt::format("no usable CUDA device ({})", cudaGetErrorString(e));
    }
    if (n == 0) return "no CUDA device";
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "no usable CUDA device (cannot read its properties)";
    return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB, L2 {} MiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                       double(p.totalGlobalMem) / double(1ull << 30), p.l2CacheSize >> 20);
}

void require_device() {
    if (device_count() == 0) fail("cuda", "--device cuda needs a CUDA device: {}", device_description());
}

bandwidth_probe probe_bandwidth() {
    require_device();
    bandwidth_probe r;
    r.hbm_read_gbs = probe_read_gbs(4ull << 30, 9);
    r.l2_read_gbs = probe_read_gbs(16ull << 20, 9);
    if (r.hbm_read_gbs <= 0 || r.l2_read_gbs <= 0) fail("cuda", "bandwidth probe failed");
    return r;
}

std::unique_ptr<decoder> decoder::load(std::shared_ptr<gguf_file> g, uint32_t n_ctx, uint32_t first_layer) {
    const model_config c = read_model_config(*g);
    if (!arch_supported(c.arch)) fail("cuda", "{}: unknown architecture '{}'", g->path(), c.arch);
    if (c.expert_count > 0) fail("cuda", "{}: mixture-of-experts models are not supported", g->path());
    check_tensors(*g, c);
    auto d = std::make_unique<cuda_decoder>(c, n_ctx, first_layer);
    d->build(
        [&](const tensor_spec& s) -> std::optional<source> {
            const auto* t = g->find_tensor(s.name);
            if (!t) return std::nullopt;
            return source_of(*t);
        },
        [&](const tensor_spec& s) {
            const auto* t = g->find_tensor(s.name);
            if (!t) return std::vector<float>();
            std::vector<float> v(size_t(t->n_elems));
            dequantize_row(t->type, t->data, v.data(), int64_t(t->n_elems));
            return v;
        },
        1);
    return d;
}

std::unique_ptr<decoder> decoder::random(const model_config& c, file_type ft, uint32_t n_ctx, uint64_t seed) {
    auto d = std::make_unique<cuda_decoder>(c, n_ctx);
    d->build(
        [&](const tensor_spec& s) -> std::optional<source> {
            if (!s.required) return std::nullopt;
            return source{tensor_type_for(ft, s, c), int64_t(s.dims[0]), int64_t(s.dims.size() > 1 ? s.dims[1] : 1),
                          nullptr};
        },
        [&](const tensor_spec& s) {
            if (!s.required || s.role == tensor_role::rope_freqs) return std::vector<float>();
            // Norm weights 1, biases small.
            return std::vector<float>(size_t(s.dims[0]), s.role == tensor_role::attn_norm ||
                                                                 s.role == tensor_role::ffn_norm ||
                                                                 s.role == tensor_role::output_norm
                                                             ? 1.0f
                                                             : 0.01f);
        },
        seed);
    return d;
}

}  // namespace memtile::cuda
