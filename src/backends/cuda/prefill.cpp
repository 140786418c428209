// The prefill pass (one sequence, many tokens: GEMMs on tensor cores through cuBLAS) and the batched decoder
// (B sequences, one token each: skinny products that read every weight once per step, in a CUDA graph per B).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "backends/cuda/batch-step.h"
#include "backends/cuda/blas-loader.h"
#include "backends/cuda/gpu-sampler.h"
#include "backends/cuda/host-util.h"
#include "backends/cuda/mma-pair.h"
#include "backends/cuda/norm-fused.h"
#include "backends/cuda/prefill-kernels.h"
#include "backends/cuda/prefill-pass.h"
#include "core/error.h"
#include "sampling/sampler.h"

namespace memtile::cuda {
namespace {

prefill_options g_options;
unsigned g_batch_step = k_batch_step_default;

rope_params rope_of(const model_view& m) {
    const auto& c = *m.cfg;
    return {int(c.n_head), int(c.n_head_kv), int(c.head_dim), int(c.n_rot), c.rope == rope_style::neox,
            m.freq,        m.factors};
}

constexpr int k_max_prefill = 1024;  // tokens per pass (longer prompts: several passes)

}  // namespace

void set_batch_step(unsigned mask) {
    g_batch_step = mask;
}
unsigned batch_step() {
    const char* env = std::getenv("MEMTILE_CUDA_BATCH_STEP");
    return env && *env ? unsigned(std::strtoul(env, nullptr, 0)) : g_batch_step;
}

void set_prefill_options(const prefill_options& o) {
    g_options = o;
    set_mma_unroll(o.mma_unroll, o.mma_fragment_loads, o.mma_q4_0_shuffles, o.mma_previous, o.mma_pipe_variant);
}
prefill_options get_prefill_options() {
    return g_options;
}

struct prefill_pass::impl {
    model_view m;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas_handle = nullptr;
    device_arena arena;
    int capacity = 0;  // tokens the buffers hold (multiple of 64)
    int32_t* tokens = nullptr;
    float *x = nullptr, *qkv = nullptr, *gu = nullptr;
    uint16_t *xh = nullptr, *qh = nullptr, *atth = nullptr, *scratch = nullptr;
    size_t scratch_elems = 0;
    uint64_t sliced_for = 0;  // dequant_chunk_bytes the scratch was sized for
    float *xn = nullptr, *xd = nullptr, *xs = nullptr;
    int8_t* xq = nullptr;

    int64_t slice_rows(const gpu_weight& w) const {
        const int64_t bytes_per_row = w.n_in * 2;
        int64_t rows = int64_t(g_options.dequant_chunk_bytes) / bytes_per_row;
        rows = std::max<int64_t>(128, rows / 128 * 128);
        return std::min(rows, w.n_out);
    }

    void ensure(int n_tok) {
        const int need = (std::min(n_tok, k_max_prefill) + 63) / 64 * 64;
        // The scratch holds one slice of the current option's size: reallocate when the option changed.
        if (need <= capacity && scratch && sliced_for == g_options.dequant_chunk_bytes) return;
        sliced_for = g_options.dequant_chunk_bytes;
        arena.release();
        const auto& c = *m.cfg;
        const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
        const int64_t widest = std::max({E, Q, F});
        const size_t n = size_t(std::max(need, capacity));
        tokens = arena.get_n<int32_t>(n);
        x = arena.get_n<float>(n * size_t(E));
        qkv = arena.get_n<float>(n * size_t(Q + 2 * KV));
        gu = arena.get_n<float>(n * size_t(2 * F));
        xh = arena.get_n<uint16_t>(n * size_t(widest));
        qh = arena.get_n<uint16_t>(n * size_t(Q));
        check(cudaMemset(qh, 0, n * size_t(Q) * 2), "cudaMemset");  // rows past n_tok stay zero
        atth = arena.get_n<uint16_t>(n * size_t(Q));
        xn = arena.get_n<float>(size_t(widest));
        xq = arena.get_n<int8_t>(size_t(widest));
        xd = arena.get_n<float>(size_t(widest / 32 + 1));
        xs = arena.get_n<float>(size_t(widest / 32 + 1));
        scratch_elems = 0;
        auto need_scratch = [&](const gpu_weight& w) {
            if (w.type != dtype::f16) scratch_elems = std::max(scratch_elems, size_t(slice_rows(w) * w.n_in));
        };
        for (const auto& L : m.layers) {
            for (const auto& p : L.qkv) need_scratch(p.w);
            for (const auto& p : L.gate_up) need_scratch(p.w);
            need_scratch(L.wo);
            need_scratch(L.down);
        }
        scratch = arena.get_n<uint16_t>(std::max<size_t>(scratch_elems, 8));
        capacity = std::max(need, capacity);
    }

    // Y [n, ldy] (columns 0..w.n_out of each row) = (accumulate ? Y : 0) + X W^T; X [n, w.n_in] f16.
    void gemm(const gpu_weight& w, const uint16_t* X, int n, float* Y, int64_t ldy, bool accumulate) {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        auto one = [&](const void* A, int64_t rows, float* C) {
            // Column-major view: C^T [rows, n] = A^T (A: [n_in, rows] col-major = W rows) x X^T [n_in, n].
            check_blas(blas().gemm_ex(blas_handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), n, int(w.n_in), &alpha, A,
                                      CUDA_R_16F, int(w.n_in), X, CUDA_R_16F, int(w.n_in), &beta, C, CUDA_R_32F,
                                      int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
        };
        if (w.type == dtype::f16) {
            one(w.q, w.n_out, Y);
            return;
        }
        const int64_t step = slice_rows(w);
        for (int64_t r0 = 0; r0 < w.n_out; r0 += step) {
            const int64_t rows = std::min(step, w.n_out - r0);
            launch_dequant_f16(w, r0, rows, scratch, stream);
            one(scratch, rows, Y + r0);
        }
    }

    void pass(const int32_t* host_tokens, int n, uint16_t* kc, uint16_t* vc, int64_t layer_stride, int pos0,
              float* logits, bool last) {
        const auto& c = *m.cfg;
        const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
        const int64_t QKV = Q + 2 * KV;
        cudaStream_t s = stream;
        check(cudaMemcpyAsync(tokens, host_tokens, size_t(n) * 4, cudaMemcpyHostToDevice, s), "copy tokens");
        launch_embed_rows(m.tok_embd, tokens, n, x, s);
        const rope_params rp = rope_of(m);
        for (uint32_t il = 0; il < c.n_layer; il++) {
            const auto& L = m.layers[il];
            uint16_t* k_l = kc + il * layer_stride;
            uint16_t* v_l = vc + il * layer_stride;
            launch_rms_norm_rows(x, L.attn_norm, n, int(E), c.norm_eps, xh, s);
            for (const auto& p : L.qkv) gemm(p.w, xh, n, qkv + p.offset, QKV, false);
            launch_rope_kv_rows(qkv, n, L.bias, rp, pos0, k_l, v_l, qh, s);
            launch_attention_prefill(qh, k_l, v_l, n, pos0, int(c.n_head), int(c.n_head_kv), int(c.head_dim), atth,
                                     g_options.reference_attention, s);
            gemm(L.wo, atth, n, x, E, true);
            launch_rms_norm_rows(x, L.ffn_norm, n, int(E), c.norm_eps, xh, s);
            for (const auto& p : L.gate_up) gemm(p.w, xh, n, gu + p.offset, 2 * F, false);
            launch_swiglu_rows(gu, n, F, xh, s);
            gemm(L.down, xh, n, x, E, true);
        }
        if (!last) return;
        // The last token's logits with the decode step's kernels (the output matrix is read once).
        const int qb = consumers_q_block({{m.output, 0}});
        launch_rms_norm(x + int64_t(n - 1) * E, m.output_norm, xn, int(E), c.norm_eps, qb, xq, xd, xs, s);
        launch_matvec(m.output, xn, xq, xd, xs, logits, false, s);
    }
};

prefill_pass::prefill_pass(const model_view& m, cudaStream_t s) : p_(std::make_unique<impl>()) {
    p_->m = m;
    p_->stream = s;
    check_blas(blas().create(&p_->blas_handle), "cublasCreate");
    check_blas(blas().set_stream(p_->blas_handle, s), "cublasSetStream");
}

prefill_pass::~prefill_pass() {
    if (p_->blas_handle) blas().destroy(p_->blas_handle);
}

bool prefill_pass::supported(const model_view& m) {
    const auto& c = *m.cfg;
    return c.n_embd % 8 == 0 && c.q_dim() % 8 == 0 && c.n_ff % 8 == 0 && m.tok_embd.n_in % 8 == 0;
}

void prefill_pass::run(std::span<const int32_t> tokens, uint16_t* k_cache, uint16_t* v_cache, int64_t layer_stride,
                       int pos0, float* logits) {
    if (tokens.empty()) fail("cuda", "prefill of no tokens");
    p_->ensure(int(tokens.size()));
    for (size_t i = 0; i < tokens.size(); i += k_max_prefill) {
        const int n = int(std::min<size_t>(k_max_prefill, tokens.size() - i));
        p_->pass(tokens.data() + i, n, k_cache, v_cache, layer_stride, pos0 + int(i), logits,
                 i + size_t(n) == tokens.size());
    }
    check(cudaGetLastError(), "prefill launch");
}

namespace {

class cuda_batch_decoder final : public batch_decoder {
public:
    cuda_batch_decoder(const model_view& m, int max_seq, uint32_t n_ctx) : m_(m), max_seq_(max_seq), n_ctx_(n_ctx) {
        if (max_seq < 1 || max_seq > k_max_batch)
            fail("cuda", "a batch holds 1 to {} sequences, not {}", k_max_batch, max_seq);
        if (n_ctx == 0) fail("cuda", "a batch needs a context of at least one position");
        if (m.tok_embd.n_in % 8 != 0)
            fail("cuda", "batched decode needs an embedding width that is a multiple of 8 (not {})", m.tok_embd.n_in);
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        const auto& c = *m.cfg;
        const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, V = c.n_vocab;
        const int64_t widest = std::max({E, Q, F});
        const size_t B = size_t(k_max_batch);
        x_ = arena_.get_n<float>(B * size_t(E));
        xn_ = arena_.get_n<float>(B * size_t(widest));
        qkv_ = arena_.get_n<float>(B * size_t(Q + 2 * KV));
        att_ = arena_.get_n<float>(B * size_t(Q));
        gu_ = arena_.get_n<float>(B * size_t(2 * F));
        xq_ = arena_.get_n<int8_t>(B * size_t(widest));
        xd_ = arena_.get_n<float>(B * size_t(widest / 32 + 1));
        xs_ = arena_.get_n<float>(B * size_t(widest / 32 + 1));
        logits_ = arena_.get_n<float>(B * size_t(V));
        argmax_scratch_ = arena_.get_n<float>(size_t(k_argmax_scratch));
        n_split_ = attention_splits(n_ctx, c);
        split_keys_ = attention_split_keys();
        partial_ = arena_.get_n<float>(B * c.n_head * size_t(n_split_) * (c.head_dim + 2));
        layer_kv_ = int64_t(n_ctx) * KV;
        slot_stride_ = layer_kv_ * c.n_layer;
        k_cache_ = arena_.get_n<uint16_t>(size_t(slot_stride_) * size_t(max_seq));
        v_cache_ = arena_.get_n<uint16_t>(size_t(slot_stride_) * size_t(max_seq));
        io_n_ = 2 * k_max_batch + max_seq;
        io_ = arena_.get_n<int32_t>(size_t(io_n_));
        check(cudaMallocHost(reinterpret_cast<void**>(&host_io_), size_t(io_n_) * 4), "cudaMallocHost");
        used_.assign(size_t(max_seq), 0);
        logits_host_.resize(B * size_t(V));
        prefill_ = std::make_unique<prefill_pass>(m, stream_);
        prepare_mma_kernels();
        if (warm_up_enabled()) warm_up();
    }
    ~cuda_batch_decoder() override {
        sampler_.reset();
        prefill_.reset();
        for (auto& [b, e] : graphs_) cudaGraphExecDestroy(e);
        if (host_io_) cudaFreeHost(host_io_);
        if (stream_) cudaStreamDestroy(stream_);
    }

    int max_sequences() const override { return max_seq_; }
    uint32_t used(int seq) const override { return used_.at(size_t(valid(seq))); }
    void reset(int seq) override { used_.at(size_t(valid(seq))) = 0; }
    void truncate(int seq, uint32_t n) override {
        uint32_t& u = used_.at(size_t(valid(seq)));
        u = std::min(u, n);
    }

    std::span<const float> prefill(int seq, std::span<const int32_t> tokens) override {
        valid(seq);
        if (used_[size_t(seq)] + tokens.size() > n_ctx_)
            fail("cuda", "context overflow: {} + {} tokens exceed the context of {}", used_[size_t(seq)], tokens.size(),
                 n_ctx_);
        for (int32_t t : tokens) check_token(t);
        if (!prefill_pass::supported(m_)) {  // token by token through the batched step
            std::span<const float> last;
            for (const int32_t& t : tokens) last = step({&t, 1}, {&seq, 1});
            return last;
        }
        const auto& c = *m_.cfg;
        prefill_->run(tokens, k_cache_ + seq * slot_stride_, v_cache_ + seq * slot_stride_, layer_kv_,
                      int(used_[size_t(seq)]), logits_);
        check(cudaMemcpyAsync(logits_host_.data(), logits_, size_t(c.n_vocab) * 4, cudaMemcpyDeviceToHost, stream_),
              "copy logits");
        check(cudaStreamSynchronize(stream_), "prefill");
        used_[size_t(seq)] += uint32_t(tokens.size());
        return {logits_host_.data(), size_t(c.n_vocab)};
    }

    std::span<const float> step(std::span<const int32_t> tokens, std::span<const int32_t> seqs) override {
        const int b = launch_step(tokens, seqs);
        const size_t V = m_.cfg->n_vocab;
        check(cudaMemcpyAsync(logits_host_.data(), logits_, size_t(b) * V * 4, cudaMemcpyDeviceToHost, stream_),
              "copy logits");
        check(cudaStreamSynchronize(stream_), "batched step");
        return {logits_host_.data(), size_t(b) * V};
    }

    std::span<const int32_t> step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> seqs) override {
        const int b = launch_step(tokens, seqs);
        check(cudaMemcpyAsync(host_io_, io_, size_t(b) * 4, cudaMemcpyDeviceToHost, stream_), "copy tokens");
        check(cudaStreamSynchronize(stream_), "batched step");
        greedy_.assign(host_io_, host_io_ + b);
        return greedy_;
    }

    std::span<const int32_t> step_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                         std::span<const sampling_draw> draws) override {
        if (draws.size() != tokens.size())
            fail("cuda", "batched step: {} sampling draws for {} tokens", draws.size(), tokens.size());
        launch_step(tokens, seqs);
        if (!sampler_) sampler_ = std::make_unique<device_sampler>(int(m_.cfg->n_vocab), stream_);
        // io_[0..b) holds each row's argmax (the graph's last kernel): greedy rows without penalties take it.
        const int32_t* ids = sampler_->sample_rows(logits_, draws.data(), int(draws.size()), io_);
        greedy_.assign(ids, ids + draws.size());
        return greedy_;
    }

    double bench(int b, int n, int warmup, int32_t first_token, uint32_t start) override {
        if (b < 1 || b > max_seq_) fail("cuda", "bench of {} sequences in a batch of {}", b, max_seq_);
        if (uint64_t(n) + uint64_t(warmup) + start > n_ctx_)
            fail("cuda", "bench of {} + {} steps from position {} exceeds the context of {}", warmup, n, start, n_ctx_);
        check_token(first_token);
        std::fill(used_.begin(), used_.end(), 0u);
        for (int i = 0; i < b; i++) {
            host_io_[i] = int32_t((uint32_t(first_token) + uint32_t(i)) % m_.cfg->n_vocab);
            host_io_[k_max_batch + i] = i;
        }
        for (int i = 0; i < max_seq_; i++) host_io_[2 * k_max_batch + i] = int32_t(start);
        check(cudaMemcpyAsync(io_, host_io_, size_t(io_n_) * 4, cudaMemcpyHostToDevice, stream_), "copy io");
        const double seconds = time_graph_replays(graph(b), stream_, warmup, n, "batched steps");
        for (int i = 0; i < b; i++) used_[size_t(i)] = start + uint32_t(n + warmup);
        return seconds;
    }

    // Every product of the model on random activations of n rows: tensor-core kernels vs dp4a/FMA kernels.
    std::pair<double, std::string> check_products(int n) override {
        if (n < 2 || n > k_max_batch) fail("cuda", "check of {} rows", n);
        const auto& c = *m_.cfg;
        std::vector<std::pair<std::string, gpu_weight>> all;
        for (size_t il = 0; il < m_.layers.size(); il++) {
            const auto& L = m_.layers[il];
            for (const auto& p : L.qkv) all.push_back({fmt::format("blk.{}.qkv@{}", il, p.offset), p.w});
            for (const auto& p : L.gate_up) all.push_back({fmt::format("blk.{}.gate_up@{}", il, p.offset), p.w});
            all.push_back({fmt::format("blk.{}.wo", il), L.wo});
            all.push_back({fmt::format("blk.{}.down", il), L.down});
        }
        all.push_back({"output", m_.output});
        const int64_t widest = std::max({int64_t(c.n_embd), int64_t(c.q_dim()), int64_t(c.n_ff)});
        std::vector<float> hx(size_t(widest) * size_t(n));
        uint64_t z = 12345;
        for (auto& v : hx) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            v = float(uint32_t(z >> 40)) / float(1u << 24) * 2.0f - 1.0f;
        }
        double worst = 0;
        std::string where = "none";
        for (const auto& [name, w] : all) {
            if (!matvec_mma_supported(w)) continue;
            check(cudaMemcpy(xn_, hx.data(), size_t(w.n_in) * size_t(n) * 4, cudaMemcpyHostToDevice), "upload");
            const bool k_type = w.type == dtype::q4_k || w.type == dtype::q5_k || w.type == dtype::q6_k;
            launch_quantize_rows(xn_, n, w.n_in, k_type ? 256 : 32, xq_, xd_, xs_, stream_);
            device_arena tmp;
            auto* y1 = tmp.get_n<float>(size_t(w.n_out) * size_t(n));
            auto* y2 = tmp.get_n<float>(size_t(w.n_out) * size_t(n));
            launch_matvec_batch(w, n, xn_, xq_, xd_, xs_, y1, w.n_out, false, true, stream_);
            launch_matvec_batch(w, n, xn_, xq_, xd_, xs_, y2, w.n_out, false, false, stream_);
            check(cudaStreamSynchronize(stream_), "products");
            std::vector<float> a(size_t(w.n_out) * size_t(n)), r(a.size());
            check(cudaMemcpy(a.data(), y1, a.size() * 4, cudaMemcpyDeviceToHost), "download");
            check(cudaMemcpy(r.data(), y2, r.size() * 4, cudaMemcpyDeviceToHost), "download");
            double num = 0, den = 0;
            for (size_t i = 0; i < a.size(); i++) {
                num += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
                den += double(r[i]) * r[i];
            }
            const double e = den > 0 ? num / den : num;
            if (e >= worst) {
                worst = e;
                where = fmt::format("{} {} [{} x {}]", name, dtype_name(w.type), w.n_out, w.n_in);
            }
        }
        return {worst, where};
    }

private:
    int valid(int seq) const {
        if (seq < 0 || seq >= max_seq_) fail("cuda", "sequence {} is outside the batch (0..{})", seq, max_seq_ - 1);
        return seq;
    }
    void check_token(int32_t t) const {
        if (t < 0 || uint32_t(t) >= m_.cfg->n_vocab)
            fail("cuda", "token id {} is outside the vocabulary (0..{})", t, m_.cfg->n_vocab - 1);
    }

    int launch_step(std::span<const int32_t> tokens, std::span<const int32_t> seqs) {
        const int b = int(tokens.size());
        if (b == 0) fail("cuda", "batched step of no sequences");
        if (seqs.size() != tokens.size()) fail("cuda", "batched step: {} tokens but {} sequences", b, seqs.size());
        if (b > max_seq_) fail("cuda", "batched step of {} sequences in a batch of {}", b, max_seq_);
        std::vector<bool> seen(size_t(max_seq_), false);
        for (int i = 0; i < b; i++) {
            const int s = valid(seqs[size_t(i)]);
            if (seen[size_t(s)]) fail("cuda", "batched step: sequence {} appears twice", s);
            seen[size_t(s)] = true;
            if (used_[size_t(s)] >= n_ctx_)
                fail("cuda", "context overflow: sequence {} fills the context of {}", s, n_ctx_);
            check_token(tokens[size_t(i)]);
            host_io_[i] = tokens[size_t(i)];
            host_io_[k_max_batch + i] = s;
        }
        for (int i = 0; i < max_seq_; i++) host_io_[2 * k_max_batch + i] = int32_t(used_[size_t(i)]);
        check(cudaMemcpyAsync(io_, host_io_, size_t(io_n_) * 4, cudaMemcpyHostToDevice, stream_), "copy io");
        check(cudaGraphLaunch(graph(b), stream_), "cudaGraphLaunch");
        for (int i = 0; i < b; i++) used_[size_t(seqs[size_t(i)])]++;
        return b;
    }

    // At load, as the single-sequence decoder's warm-up: a short prompt on sequence 0 and one step of every batch
    // width 1..max_seq, then every sequence is empty again (positions at or past used() are never read). The lazy
    // module loads, cuBLAS's first GEMM of each prompt shape and the capture of each width's graph would otherwise
    // fall on the first requests (a new width on the running ones). MEMTILE_CUDA_WARMUP=0 skips it.
    void warm_up() {
        std::vector<int32_t> tokens(std::min<uint32_t>(8, n_ctx_ - 1));
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(i % m_.cfg->n_vocab);
        if (!tokens.empty()) prefill(0, tokens);
        std::vector<int32_t> seqs;
        for (int b = 1; b <= max_seq_; b++) {
            seqs.push_back(b - 1);
            std::fill(used_.begin(), used_.end(), 0u);
            step_greedy(std::vector<int32_t>(size_t(b), 0), seqs);
        }
        std::fill(used_.begin(), used_.end(), 0u);
    }

    cudaGraphExec_t graph(int b) {
        auto it = graphs_.find(b);
        if (it != graphs_.end()) return it->second;
        cudaGraph_t g = nullptr;
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        record(b);
        const cudaError_t launch_error = cudaGetLastError();
        check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
        check(launch_error, "kernel launch during capture");
        cudaGraphExec_t e = nullptr;
        check(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(g);
        graphs_[b] = e;
        return e;
    }

    // The step for rows 0..b-1: tokens io_[0..b), sequence ids io_[16..16+b), positions io_[32..).
    void record(int b) {
        const auto& c = *m_.cfg;
        const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, V = c.n_vocab;
        const int64_t QKV = Q + 2 * KV;
        cudaStream_t s = stream_;
        int32_t* tokens = io_;
        const int32_t* slots = io_ + k_max_batch;
        int32_t* pos = io_ + 2 * k_max_batch;
        rope_params rp = rope_of(m_);
        rp.split_keys = split_keys_;
        const bool tc = !g_options.reference_batch_products;
        const unsigned mask = batch_step();
        auto on = [&](unsigned ko) { return (mask & ko) == 0; };
        // The norms the single-sequence step forms from parts (set_norm_fusion): the same values here.
        const bool parts = norm_parts_read(), parts_k = norm_parts_k_read();
        auto norm = [&](const float* g, const std::vector<view_part>& consumers) {
            if (parts && norm_parts_consumers(consumers, E))
                launch_rms_norm_parts_rows(x_, g, xn_, b, int(E), c.norm_eps, xq_, xd_, xs_, s);
            else if (parts_k && norm_parts_k_consumers(consumers, E))
                launch_rms_norm_parts_rows_k(x_, g, xn_, b, int(E), c.norm_eps, xq_, xd_, xs_, s);
            else
                launch_rms_norm_batch(x_, g, xn_, b, int(E), c.norm_eps, consumers_q_block(consumers), xq_, xd_, xs_,
                                      s);
        };
        launch_embed_rows(m_.tok_embd, tokens, b, x_, s);
        for (uint32_t il = 0; il < c.n_layer; il++) {
            const auto& L = m_.layers[il];
            uint16_t* kc = k_cache_ + il * layer_kv_;
            uint16_t* vc = v_cache_ + il * layer_kv_;
            if (on(k_batch_ko_attn_norm)) norm(L.attn_norm, L.qkv);
            if (on(k_batch_ko_qkv)) {
                const bool pair = tc && L.qkv.size() == 2 &&
                                  launch_matvec_mma_pair(L.qkv[0].w, qkv_ + L.qkv[0].offset, L.qkv[1].w,
                                                         qkv_ + L.qkv[1].offset, b, xq_, xd_, xs_, QKV, s);
                if (!pair)
                    for (const auto& p : L.qkv)
                        launch_matvec_batch(p.w, b, xn_, xq_, xd_, xs_, qkv_ + p.offset, QKV, false, tc, s);
            }
            if (on(k_batch_ko_attention))
                launch_attention_batch(qkv_, b, L.bias, rp, pos, slots, slot_stride_, kc, vc, n_split_, partial_, att_,
                                       matvec_uses_int8(L.wo.type) ? consumers_q_block({{L.wo, 0}}) : 0, xq_, xd_, xs_,
                                       s);
            if (on(k_batch_ko_wo)) launch_matvec_batch(L.wo, b, att_, xq_, xd_, xs_, x_, E, true, tc, s);
            if (on(k_batch_ko_ffn_norm)) norm(L.ffn_norm, L.gate_up);
            if (on(k_batch_ko_gate_up))
                for (const auto& p : L.gate_up)
                    launch_matvec_batch(p.w, b, xn_, xq_, xd_, xs_, gu_ + p.offset, 2 * F, false, tc, s);
            if (on(k_batch_ko_swiglu))
                launch_swiglu_batch(gu_, b, F, xn_, consumers_q_block({{L.down, 0}}),
                                    matvec_uses_int8(L.down.type) ? xq_ : nullptr, xd_, xs_, s);
            if (on(k_batch_ko_down)) launch_matvec_batch(L.down, b, xn_, xq_, xd_, xs_, x_, E, true, tc, s);
        }
        if (on(k_batch_ko_output)) {
            norm(m_.output_norm, {{m_.output, 0}});
            launch_matvec_batch(m_.output, b, xn_, xq_, xd_, xs_, logits_, V, false, tc, s);
            launch_argmax_rows(logits_, b, int(V), tokens, pos, slots, argmax_scratch_, s);
        }
    }

    model_view m_;
    int max_seq_;
    uint32_t n_ctx_;
    cudaStream_t stream_ = nullptr;
    device_arena arena_;
    std::unique_ptr<prefill_pass> prefill_;
    std::unique_ptr<device_sampler> sampler_;  // step_sample's, on stream_ (made on first use)
    std::map<int, cudaGraphExec_t> graphs_;
    float *x_ = nullptr, *xn_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gu_ = nullptr, *logits_ = nullptr;
    float *xd_ = nullptr, *xs_ = nullptr, *partial_ = nullptr;
    float* argmax_scratch_ = nullptr;  // [k_argmax_scratch] launch_argmax_rows' partial results
    int8_t* xq_ = nullptr;
    uint16_t *k_cache_ = nullptr, *v_cache_ = nullptr;
    int64_t layer_kv_ = 0, slot_stride_ = 0;
    int n_split_ = 1, split_keys_ = 0;
    int io_n_ = 0;
    int32_t* io_ = nullptr;       // device: tokens [16], sequence ids [16], positions [max_seq]
    int32_t* host_io_ = nullptr;  // pinned mirror
    std::vector<uint32_t> used_;
    std::vector<float> logits_host_;
    std::vector<int32_t> greedy_;
};

// The batched-product checks' inputs. A weight of n_out rows x n_in in type t's device layout, random
// (launch_fill_random); its memory belongs to arena.
gpu_weight random_weight(device_arena& arena, dtype t, int64_t n_in, int64_t n_out, uint64_t seed) {
    gpu_weight w;
    w.type = t;
    w.n_in = n_in;
    w.n_out = n_out;
    w.q_row_bytes = device_q_row_bytes(t, n_in);
    const int64_t d_row = device_d_row_elems(t, n_in);
    w.q = arena.get_n<uint8_t>(size_t(w.q_row_bytes * n_out));
    w.d = d_row ? arena.get_n<uint16_t>(size_t(d_row * n_out)) : nullptr;
    launch_fill_random(w, seed, nullptr);
    return w;
}

// Activations x: [n_rows, n_in] f32 from a simple host generator (values in [-1, 1) of varied magnitude per row),
// uploaded, and int8 buffers xq / xd / xs sized for them (not yet quantized).
struct test_activations {
    float* x;
    int8_t* xq;
    float *xd, *xs;
};
test_activations random_activations(device_arena& arena, int64_t n_in, int n_rows, uint64_t seed) {
    std::vector<float> hx(size_t(n_in) * size_t(n_rows));
    uint64_t z = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < hx.size(); i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        hx[i] = (float(uint32_t(z >> 40)) / float(1u << 24) * 2.0f - 1.0f) * (1.0f + float(i / size_t(n_in)));
    }
    test_activations a;
    a.x = arena.get_n<float>(hx.size());
    check(cudaMemcpy(a.x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice), "upload");
    a.xq = arena.get_n<int8_t>(hx.size());
    a.xd = arena.get_n<float>(hx.size() / 32 + 1);
    a.xs = arena.get_n<float>(hx.size() / 32 + 1);
    return a;
}

// Outputs of a check on the device, n_y floats each: y[0] the path under test, y[1] the one it must equal bit for
// bit, y[2] the reference. Returns (values of y[0] that differ from y[1], NMSE of y[0] against y[2]; infinite when
// y[0] holds a non-finite value).
std::pair<int64_t, double> compare_outputs(float* const (&y)[3], size_t n_y) {
    std::vector<float> h[3];
    for (int k = 0; k < 3; k++) {
        h[k].resize(n_y);
        check(cudaMemcpy(h[k].data(), y[k], n_y * 4, cudaMemcpyDeviceToHost), "download");
    }
    int64_t differ = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < n_y; i++) {
        if (std::memcmp(&h[0][i], &h[1][i], 4) != 0) differ++;
        if (!std::isfinite(h[0][i])) return {differ, INFINITY};
        num += (double(h[0][i]) - h[2][i]) * (double(h[0][i]) - h[2][i]);
        den += double(h[2][i]) * h[2][i];
    }
    return {differ, den > 0 ? num / den : num};
}

}  // namespace

double check_batch_products(dtype t, int64_t n_in, int64_t n_out, int n_rows, uint64_t seed) {
    require_device();
    if (n_rows < 1 || n_rows > k_max_batch) fail("cuda", "batch of {} rows", n_rows);
    device_arena arena;
    const gpu_weight w = random_weight(arena, t, n_in, n_out, seed);
    const auto [x, xq, xd, xs] = random_activations(arena, n_in, n_rows, seed);
    const bool k_type = t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
    if (matvec_uses_int8(t)) launch_quantize_rows(x, n_rows, n_in, k_type ? 256 : 32, xq, xd, xs, nullptr);
    auto* y_mma = arena.get_n<float>(size_t(n_out) * size_t(n_rows));
    auto* y_ref = arena.get_n<float>(size_t(n_out) * size_t(n_rows));
    launch_matvec_batch(w, n_rows, x, xq, xd, xs, y_mma, n_out, false, true, nullptr);
    launch_matvec_batch(w, n_rows, x, xq, xd, xs, y_ref, n_out, false, false, nullptr);
    check(cudaDeviceSynchronize(), "batched products");
    std::vector<float> a(size_t(n_out) * size_t(n_rows)), r(a.size());
    check(cudaMemcpy(a.data(), y_mma, a.size() * 4, cudaMemcpyDeviceToHost), "download");
    check(cudaMemcpy(r.data(), y_ref, r.size() * 4, cudaMemcpyDeviceToHost), "download");
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!std::isfinite(a[i])) return INFINITY;
        num += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
        den += double(r[i]) * r[i];
    }
    return den > 0 ? num / den : num;
}

std::pair<int64_t, double> check_batch_pair(int64_t n_in, int64_t rows_a, int64_t rows_b, int n_rows, uint64_t seed) {
    require_device();
    if (n_rows < 1 || n_rows > k_max_batch) fail("cuda", "batch of {} rows", n_rows);
    device_arena arena;
    const gpu_weight wa = random_weight(arena, dtype::q4_k, n_in, rows_a, seed),
                     wb = random_weight(arena, dtype::q6_k, n_in, rows_b, seed + 1);
    const auto [x, xq, xd, xs] = random_activations(arena, n_in, n_rows, seed);
    launch_quantize_rows(x, n_rows, n_in, 256, xq, xd, xs, nullptr);
    const int64_t ld = rows_a + rows_b;  // [n_rows, ld]: a's rows, then b's
    const size_t n_y = size_t(ld) * size_t(n_rows);
    float* y[3] = {arena.get_n<float>(n_y), arena.get_n<float>(n_y), arena.get_n<float>(n_y)};
    for (float* p : y) check(cudaMemset(p, 0xff, n_y * 4), "cudaMemset");  // NaN: rows left unwritten show
    if (!launch_matvec_mma_pair(wa, y[0], wb, y[0] + rows_a, n_rows, xq, xd, xs, ld, nullptr))
        fail("cuda", "the Q4_K + Q6_K pair launch does not apply to n_in {}, {} rows", n_in, n_rows);
    // The pair's V blocks run the register-staged Q6_K kernel, so the reference launch does too (the pipelined Q6_K
    // kernel's default sums in integers: checked by check_batch_q6k_pipe).
    set_mma_q6k_pipe(0, 0);
    for (int k = 1; k < 3; k++) {  // 1: the two tensor-core launches, 2: the dp4a kernels
        launch_matvec_batch(wa, n_rows, x, xq, xd, xs, y[k], ld, false, k == 1, nullptr);
        launch_matvec_batch(wb, n_rows, x, xq, xd, xs, y[k] + rows_a, ld, false, k == 1, nullptr);
    }
    set_mma_q6k_pipe(-1, -1);
    check(cudaDeviceSynchronize(), "pair products");
    return compare_outputs(y, n_y);
}

std::pair<int64_t, double> check_batch_q4k_xs(int64_t n_in, int64_t n_out, int n_rows, int mode, uint64_t seed) {
    require_device();
    if (n_rows < 2 || n_rows > 8) fail("cuda", "batch of {} rows (staged activations: 2..8)", n_rows);
    device_arena arena;
    const gpu_weight w = random_weight(arena, dtype::q4_k, n_in, n_out, seed);
    const auto [x, xq, xd, xs] = random_activations(arena, n_in, n_rows, seed);
    launch_quantize_rows(x, n_rows, n_in, 256, xq, xd, xs, nullptr);
    const size_t n_y = size_t(n_out) * size_t(n_rows);
    float* y[3] = {arena.get_n<float>(n_y), arena.get_n<float>(n_y), arena.get_n<float>(n_y)};
    for (float* p : y) check(cudaMemset(p, 0xff, n_y * 4), "cudaMemset");  // NaN: rows left unwritten show
    prepare_mma_kernels();
    const int was = mma_q4k_xs();
    for (int k = 0; k < 3; k++) {  // 0: in `mode`, 1: the pipelined kernel without, 2: the dp4a kernel
        set_mma_q4k_xs(k == 0 ? mode : 0);
        launch_matvec_batch(w, n_rows, x, xq, xd, xs, y[k], n_out, false, k < 2, nullptr);
    }
    set_mma_q4k_xs(was);
    check(cudaDeviceSynchronize(), "Q4_K staged products");
    return compare_outputs(y, n_y);
}

std::pair<int64_t, double> check_batch_q6k_pipe(int64_t n_in, int64_t n_out, int n_rows, int mode, uint64_t seed) {
    require_device();
    if (n_rows < 1 || n_rows > k_max_batch) fail("cuda", "batch of {} rows", n_rows);
    device_arena arena;
    const gpu_weight w = random_weight(arena, dtype::q6_k, n_in, n_out, seed);
    const auto [x, xq, xd, xs] = random_activations(arena, n_in, n_rows, seed);
    launch_quantize_rows(x, n_rows, n_in, 256, xq, xd, xs, nullptr);
    const size_t n_y = size_t(n_out) * size_t(n_rows);
    float* y[3] = {arena.get_n<float>(n_y), arena.get_n<float>(n_y), arena.get_n<float>(n_y)};
    for (float* p : y) check(cudaMemset(p, 0xff, n_y * 4), "cudaMemset");  // NaN: rows left unwritten show
    prepare_mma_q6k_pipe();
    set_mma_q6k_pipe(mode, mode);
    const bool applies = launch_matvec_q6k_pipe(w, n_rows, xq, xd, y[0], n_out, false, nullptr);
    set_mma_q6k_pipe(0, 0);  // 1: the register-staged kernel, 2: the dp4a kernel
    if (applies) {
        launch_matvec_batch(w, n_rows, x, xq, xd, xs, y[1], n_out, false, true, nullptr);
        launch_matvec_batch(w, n_rows, x, xq, xd, xs, y[2], n_out, false, false, nullptr);
    }
    set_mma_q6k_pipe(-1, -1);
    if (!applies) fail("cuda", "the pipelined Q6_K kernel does not apply to n_in {}, {} rows", n_in, n_rows);
    check(cudaDeviceSynchronize(), "Q6_K pipelined products");
    return compare_outputs(y, n_y);
}

double bench_gemm_f16(int n_tok, int64_t n_in, int64_t n_out, int reps) {
    require_device();
    device_arena arena;
    auto* w = arena.get_n<uint16_t>(size_t(n_in * n_out));
    auto* x = arena.get_n<uint16_t>(size_t(n_in) * size_t(n_tok));
    auto* y = arena.get_n<float>(size_t(n_out) * size_t(n_tok));
    check(cudaMemset(w, 0, size_t(n_in * n_out) * 2), "cudaMemset");
    check(cudaMemset(x, 0, size_t(n_in) * size_t(n_tok) * 2), "cudaMemset");
    cublasHandle_t h = nullptr;
    check_blas(blas().create(&h), "cublasCreate");
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    const float alpha = 1, beta = 0;
    std::vector<double> tf;
    for (int r = 0; r < reps + 2; r++) {
        cudaEventRecord(a);
        check_blas(blas().gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n_out), n_tok, int(n_in), &alpha, w, CUDA_R_16F,
                                  int(n_in), x, CUDA_R_16F, int(n_in), &beta, y, CUDA_R_32F, int(n_out),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
        cudaEventRecord(b);
        check(cudaEventSynchronize(b), "gemm");
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 2) tf.push_back(2.0 * double(n_tok) * double(n_in) * double(n_out) / (double(ms) * 1e-3) / 1e12);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    blas().destroy(h);
    std::sort(tf.begin(), tf.end());
    return tf[tf.size() / 2];
}

std::unique_ptr<batch_decoder> make_batch_decoder(const model_view& m, int max_seq, uint32_t n_ctx) {
    return std::make_unique<cuda_batch_decoder>(m, max_seq, n_ctx);
}

}  // namespace memtile::cuda
