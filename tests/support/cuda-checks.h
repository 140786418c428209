// Checks of the CUDA decoder against the CPU engine, shared by the GoogleTest suite (skipped without a
// device) and the device-machine driver tests/cuda/cuda-check.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/ops.h"
#include "backends/cuda/cuda-backend.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "kv/kv-cache.h"
#include "models/synthetic-model.h"
#include "models/transformer.h"
#include "quant/quant.h"

namespace memtile::test {

// Normalised mean squared error: sum (a - ref)^2 / sum ref^2 (infinite when a holds a NaN or infinity).
inline double nmse(std::span<const float> a, std::span<const float> ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(a[i])) return INFINITY;
        const double e = double(a[i]) - double(ref[i]);
        num += e * e;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? num / den : num;
}

inline std::string make_synthetic(const std::string& dir, const std::string& preset, file_type ft) {
    synthetic_options o;
    o.preset = preset;
    o.type = ft;
    o.seed = 7;
    o.progress = false;
    const std::string path = dir + "/" + preset + "-" + std::string(file_type_name(ft)) + ".gguf";
    write_synthetic_model(o, path);
    return path;
}

struct logits_comparison {
    double worst_nmse = 0;  // over all steps
    int steps = 0;
};

// Feeds the same token sequence to the CPU engine (f16 KV cache) and the CUDA decoder; NMSE per step.
inline logits_comparison compare_logits(const std::string& path, int n_steps) {
    auto m = transformer::load(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    forward_context ctx(*m, uint32_t(n_steps + 1), dtype::f16, pool);
    auto d = cuda::decoder::load(gguf_file::open(path), uint32_t(n_steps + 1));
    logits_comparison r;
    const uint32_t V = m->config().n_vocab;
    for (int i = 0; i < n_steps; i++) {
        const int32_t t = int32_t((7 + 37 * uint32_t(i)) % V);
        const auto cl = ctx.forward(std::span<const int32_t>(&t, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto gpu = d->forward(t);
        r.worst_nmse = std::max(r.worst_nmse, nmse(gpu, cpu));
        r.steps++;
    }
    return r;
}

// The checks' reproducible random inputs: xorshift64 from a seed, values in [-1, 1).
struct uniform_source {
    uint64_t z;
    explicit uniform_source(uint64_t seed) : z(seed * 0x9e3779b97f4a7c15ull + 1) {}
    float operator()() {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        return float(double(z >> 11) / double(1ull << 53) * 2.0 - 1.0);
    }
};

// One matvec of [n_out, n_in] random weights of type t (quantized on the host by the CPU engine's quantizer)
// on random activations, on the GPU and by the CPU engine's matmul; NMSE of the GPU's y. Both quantize the
// activations the same way and take the same integer dot products, so only float summation order differs.
inline double compare_matvec(dtype t, int64_t n_in, int64_t n_out, uint64_t seed) {
    std::vector<float> w(static_cast<size_t>(n_in * n_out)), x(static_cast<size_t>(n_in));
    uniform_source next(seed);
    for (auto& v : w) v = next() * 0.05f;
    for (auto& v : x) v = next();
    std::vector<uint8_t> rows = quantize_tensor(t, w.data(), n_out, n_in);
    cpu::weight_view view{t, rows.data(), n_in, n_out, row_bytes(t, uint64_t(n_in))};
    auto pw = cpu::prepare_weight(view);
    std::vector<float> cpu_y(static_cast<size_t>(n_out));
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    cpu::matmul(*pw, x.data(), 1, cpu_y.data(), pool);
    const auto gpu_y = cuda::matvec_gguf_rows(t, rows.data(), n_in, n_out, x.data());
    return nmse(gpu_y, cpu_y);
}

// The Q4_K_M decode products of cuda::qkm_products_gguf (a Q4_K and a Q6_K matrix on one activation, the path of the
// decode fusion mask `bits`) against the CPU engine's matmul of each matrix (worst NMSE of the two), and whether they
// are bit-equal to the plain launches (bits 0).
struct qkm_comparison {
    double nmse = 0;
    bool bit_equal = false;
};
inline qkm_comparison compare_qkm_products(int64_t n_in, int64_t n_out_a, int64_t n_out_b, unsigned bits,
                                           uint64_t seed) {
    uniform_source next(seed);
    std::vector<float> wa(static_cast<size_t>(n_in * n_out_a)), wb(static_cast<size_t>(n_in * n_out_b));
    std::vector<float> x(static_cast<size_t>(n_in));
    for (auto& v : wa) v = next() * 0.05f;
    for (auto& v : wb) v = next() * 0.05f;
    for (auto& v : x) v = next();
    const std::vector<uint8_t> ra = quantize_tensor(dtype::q4_k, wa.data(), n_out_a, n_in);
    const std::vector<uint8_t> rb =
        n_out_b ? quantize_tensor(dtype::q6_k, wb.data(), n_out_b, n_in) : std::vector<uint8_t>{};
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    auto cpu_product = [&](dtype t, const std::vector<uint8_t>& rows, int64_t n_out) {
        cpu::weight_view view{t, rows.data(), n_in, n_out, row_bytes(t, uint64_t(n_in))};
        auto pw = cpu::prepare_weight(view);
        std::vector<float> y(static_cast<size_t>(n_out));
        cpu::matmul(*pw, x.data(), 1, y.data(), pool);
        return y;
    };
    const std::vector<float> ya = cpu_product(dtype::q4_k, ra, n_out_a);
    const std::vector<float> yb = n_out_b ? cpu_product(dtype::q6_k, rb, n_out_b) : std::vector<float>{};
    const auto plain = cuda::qkm_products_gguf(ra.data(), n_out_a, rb.data(), n_out_b, n_in, x.data(), 0);
    const auto gpu = cuda::qkm_products_gguf(ra.data(), n_out_a, rb.data(), n_out_b, n_in, x.data(), bits);
    qkm_comparison r;
    const std::span<const float> g(gpu);
    r.nmse = nmse(g.first(size_t(n_out_a)), ya);
    if (n_out_b) r.nmse = std::max(r.nmse, nmse(g.subspan(size_t(n_out_a)), yb));
    r.bit_equal = plain.size() == gpu.size() &&
                  std::equal(plain.begin(), plain.end(), gpu.begin(),
                             [](float p, float q) { return std::memcmp(&p, &q, sizeof(float)) == 0; });
    return r;
}

// A Q4_K matvec ([n_out, n_in] random rows) through the form `mode` of cuda::set_q4k_matvec against the CPU engine's
// matmul (NMSE) and whether it is bit-equal to the plain kernel (mode 0). The mode set before is restored.
inline qkm_comparison compare_q4k_mode(int64_t n_in, int64_t n_out, int mode, uint64_t seed) {
    uniform_source next(seed);
    std::vector<float> w(static_cast<size_t>(n_in * n_out)), x(static_cast<size_t>(n_in));
    for (auto& v : w) v = next() * 0.05f;
    for (auto& v : x) v = next();
    const std::vector<uint8_t> rows = quantize_tensor(dtype::q4_k, w.data(), n_out, n_in);
    cpu::weight_view view{dtype::q4_k, rows.data(), n_in, n_out, row_bytes(dtype::q4_k, uint64_t(n_in))};
    auto pw = cpu::prepare_weight(view);
    std::vector<float> cpu_y(static_cast<size_t>(n_out));
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    cpu::matmul(*pw, x.data(), 1, cpu_y.data(), pool);
    const int before = cuda::q4k_matvec();
    cuda::set_q4k_matvec(0);
    const auto plain = cuda::matvec_gguf_rows(dtype::q4_k, rows.data(), n_in, n_out, x.data());
    cuda::set_q4k_matvec(mode);
    const auto gpu = cuda::matvec_gguf_rows(dtype::q4_k, rows.data(), n_in, n_out, x.data());
    cuda::set_q4k_matvec(before);
    qkm_comparison r;
    r.nmse = nmse(gpu, cpu_y);
    r.bit_equal = plain.size() == gpu.size() &&
                  std::equal(plain.begin(), plain.end(), gpu.begin(),
                             [](float p, float q) { return std::memcmp(&p, &q, sizeof(float)) == 0; });
    return r;
}

// Largest |difference| between the GPU's embedding gather of a few rows and the CPU's dequantize_row (both
// elementwise d * scale * q (- min) products: equal up to float contraction).
inline double compare_embedding(dtype t, int64_t n_in, int64_t n_out, uint64_t seed) {
    std::vector<float> w(static_cast<size_t>(n_in * n_out));
    uniform_source next(seed);
    for (auto& v : w) v = next() * 0.05f;
    std::vector<uint8_t> rows = quantize_tensor(t, w.data(), n_out, n_in);
    const size_t rb = row_bytes(t, uint64_t(n_in));
    double worst = 0;
    for (int32_t r : {0, int32_t(n_out / 2), int32_t(n_out - 1)}) {
        std::vector<float> ref(static_cast<size_t>(n_in));
        dequantize_row(t, rows.data() + size_t(r) * rb, ref.data(), n_in);
        const auto g = cuda::embed_gguf_row(t, rows.data(), n_in, n_out, r);
        for (size_t i = 0; i < ref.size(); i++)
            worst = std::max(worst, double(std::fabs(g[i] - ref[i])) / (std::fabs(double(ref[i])) + 1e-6));
    }
    return worst;
}

// The GPU's greedy pick (cuda::argmax_rows_check) against a plain host scan on rows built to catch slicing errors: the
// maximum repeated (the lowest index must win, also across the kernel's slices), at the first / last index, NaN and
// -inf around it, a row of NaN only (0), row lengths below, at and above the slice count. Returns the rows that differ.
inline int argmax_mismatches(uint64_t seed) {
    int bad = 0;
    uniform_source next(seed);
    for (int n : {1, 37, 64, 1000, 4097, 128256}) {
        const int n_rows = 9;
        std::vector<float> l(size_t(n_rows) * size_t(n));
        for (auto& v : l) v = next() * 8.0f;
        auto row = [&](int r) { return l.data() + size_t(r) * size_t(n); };
        const float big = 100.0f;
        row(1)[n - 1] = big;                                         // maximum at the last index
        row(2)[0] = big;                                             // at the first
        for (int k = 1; k <= 5; k++) row(3)[(n - 1) * k / 5] = big;  // ties across slices: lowest index wins
        row(4)[n / 2] = std::numeric_limits<float>::quiet_NaN();     // NaN is never chosen
        row(4)[n - 1] = big;
        for (int i = 0; i < n; i++) row(5)[i] = std::numeric_limits<float>::quiet_NaN();  // nothing to choose: 0
        for (int i = 0; i < n; i++) row(6)[i] = -std::numeric_limits<float>::infinity();  // nothing above -inf: 0
        for (int i = 0; i < n; i++) row(7)[i] = 1.5f;                                     // all equal: index 0
        row(8)[n / 3] = std::numeric_limits<float>::infinity();                           // +inf wins
        const auto got = cuda::argmax_rows_check(l, n_rows, n);
        for (int r = 0; r < n_rows; r++) {
            float best = -std::numeric_limits<float>::infinity();
            int idx = 0;
            for (int i = 0; i < n; i++)
                if (row(r)[i] > best) {
                    best = row(r)[i];
                    idx = i;
                }
            if (got[size_t(r)] != idx) bad++;
        }
    }
    return bad;
}

struct attention_comparison {
    double nmse[6] = {};    // per cuda::attention_check variant, against the CPU engine
    int differ_from_0 = 0;  // variants 1..5 whose output is not bit-equal to variant 0's
    // (variant 0..3, heads per block auto / at most 2 / as many as the kernels take, key steps) runs not bit-equal to
    // one head per block, of `grouped` runs
    int differ_grouped = 0, grouped = 0;
    // The tensor-core key steps (cuda::k_attention_pipe_mma; not bit-equal): the worst NMSE against one head per block
    // over the variants and heads per block, and how many runs took them (head_dim 64 or 128, at least 2 query heads
    // per KV head).
    double mma_nmse = 0;
    int mma_runs = 0;
    // Tensor-core runs of variants 1..3 (RoPE folded: the single step's kernels) not bit-equal to variant 0's (the
    // separate RoPE kernel: the batched step's kernels) at the same heads per block.
    int mma_differ = 0;
    int mma_unchanged = 0;  // tensor-core runs bit-equal to one head per block
};

// RoPE, f16 KV cache and attention of the last of n_pos positions, on the GPU (every cuda::attention_check variant:
// separate RoPE kernel, RoPE folded into the attention kernel with separate merge, with early K/V loads, with the merge
// in the kernel, with the merge in a thread-block cluster) and by the CPU engine's ops; q, k, v random in [-amp, amp].
// q_block > 0: the outputs are also quantized as for a Wo reading them (32 / 256), and the quantized values count in
// the bit comparison. split_keys: the GPU's least keys per split (rope_params::split_keys).
inline attention_comparison compare_attention_variants(int n_pos, int n_head, int n_head_kv, int head_dim, float amp,
                                                       bool neox, int n_split, uint64_t seed, int q_block = 0,
                                                       int split_keys = 0) {
    const int q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
    uniform_source next(seed);
    std::vector<std::vector<float>> qkv(static_cast<size_t>(n_pos));
    for (auto& r : qkv) {
        r.resize(size_t(q_dim + 2 * kv_dim));
        for (auto& v : r) v = next() * amp;
    }
    const float base = 10000.0f;
    // One GPU run of variant v over these positions (the grouping and key steps in force).
    auto run = [&](int v) {
        return cuda::attention_check(qkv, n_head, n_head_kv, head_dim, base, neox, n_split, v, q_block, split_keys);
    };
    // The default grouping with the GQA blocks' bit-equal key steps (form 1): the tensor-core form, the default where
    // it applies, rounds q and p to f16 and is compared by NMSE below.
    std::vector<float> gpu[6];
    cuda::set_attention_pipe(1);
    for (int v = 0; v < 6; v++) gpu[v] = run(v);
    cuda::set_attention_pipe(-1);
    // The GQA blocks (several query heads of one KV head per block; the cluster variants 4, 5 keep one head) against
    // one head per block: the default grouping, and at most 2 heads per block (uneven cuts: 3 heads as 2 + 1).
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    // Each with both key-step forms of the GQA blocks (cuda::set_attention_pipe), and as many heads per block as the
    // kernels take.
    int differ_grouped = 0, grouped = 0;
    double mma_nmse = 0;
    int mma_runs = 0, mma_differ = 0, mma_unchanged = 0;
    std::vector<float> mma0[2];  // variant 0's tensor-core outputs at 2 and 8 heads per block
    for (int v = 0; v < 4; v++) {
        cuda::set_attention_group(1);
        const auto one = run(v);
        differ_grouped += !same_bits(one, gpu[v]);
        grouped++;
        for (int pipe = 0; pipe < cuda::k_attention_pipes; pipe++) {
            cuda::set_attention_pipe(pipe);
            for (int g : {2, 8}) {
                cuda::set_attention_group(g);
                const auto out = run(v);
                differ_grouped += !same_bits(one, out);
                grouped++;
            }
        }
        cuda::set_attention_pipe(cuda::k_attention_pipe_mma);
        for (int gi = 0; gi < 2; gi++) {
            cuda::set_attention_group(gi == 0 ? 2 : 8);
            const auto out = run(v);
            if (v == 0)
                mma0[gi] = out;
            else
                mma_differ += !same_bits(mma0[gi], out);
            const size_t n = std::min({out.size(), one.size(), size_t(q_dim)});  // the attention outputs
            mma_nmse =
                std::max(mma_nmse, nmse(std::span<const float>(out.data(), n), std::span<const float>(one.data(), n)));
            mma_unchanged += same_bits(one, out);
            mma_runs++;
        }
        cuda::set_attention_pipe(-1);
    }
    // The default grouping with the tensor-core form: the cluster-merge variants (4, 5: one head per block) must give
    // the separate kernels' bits, i.e. not run one head per block where the batched step takes the tensor-core blocks.
    cuda::set_attention_group(0);
    cuda::set_attention_pipe(cuda::k_attention_pipe_mma);
    {
        const auto base0 = run(0);
        for (int v : {4, 5}) mma_differ += !same_bits(base0, run(v));
    }
    cuda::set_attention_pipe(-1);
    kv_cache kv(1, uint32_t(n_pos), uint32_t(kv_dim), dtype::f16);
    std::vector<float> q;
    for (int p = 0; p < n_pos; p++) {
        std::vector<float> r = qkv[size_t(p)];
        const rope_style st = neox ? rope_style::neox : rope_style::normal;
        cpu::rope(r.data(), n_head, head_dim, head_dim, p, base, st, nullptr);
        cpu::rope(r.data() + q_dim, n_head_kv, head_dim, head_dim, p, base, st, nullptr);
        kv.store(0, uint32_t(p), r.data() + q_dim, r.data() + q_dim + kv_dim);
        q.assign(r.begin(), r.begin() + q_dim);
    }
    std::vector<float> cpu_out(static_cast<size_t>(q_dim));
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    cpu::attention(q.data(), cpu_out.data(), 1, n_pos - 1, kv, 0, n_head, n_head_kv, head_dim, pool);
    attention_comparison r;
    r.differ_grouped = differ_grouped;
    r.grouped = grouped;
    r.mma_nmse = mma_nmse;
    r.mma_differ = mma_differ;
    r.mma_unchanged = mma_unchanged;
    r.mma_runs = (head_dim == 64 || head_dim == 128) && n_head > n_head_kv ? mma_runs : 0;
    for (int v = 0; v < 6; v++) {
        r.nmse[v] = nmse(std::vector<float>(gpu[v].begin(), gpu[v].begin() + q_dim), cpu_out);
        if (v > 0 && std::memcmp(gpu[v].data(), gpu[0].data(), gpu[0].size() * sizeof(float)) != 0) r.differ_from_0++;
    }
    return r;
}

// NMSE of the separate-kernel path (variant 0) only (compare_attention_variants).
inline double compare_attention(int n_pos, int n_head, int n_head_kv, int head_dim, float amp, bool neox, int n_split,
                                uint64_t seed) {
    const auto r = compare_attention_variants(n_pos, n_head, n_head_kv, head_dim, amp, neox, n_split, seed);
    return r.nmse[0];
}

struct greedy_comparison {
    std::vector<int32_t> cpu, gpu;
    int first_mismatch = -1;
};

// Greedy generation of n tokens from `first` on both engines (ties: lowest id on both).
inline greedy_comparison compare_greedy(const std::string& path, int32_t first, int n) {
    auto m = transformer::load(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    const uint32_t n_ctx = uint32_t(n + 1);
    forward_context ctx(*m, n_ctx, dtype::f16, pool);
    auto d = cuda::decoder::load(gguf_file::open(path), n_ctx);
    greedy_comparison r;
    int32_t tc = first, tg = first;
    for (int i = 0; i < n; i++) {
        const auto logits = ctx.forward(std::span<const int32_t>(&tc, 1));
        tc = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        tg = d->forward_greedy(tg);
        r.cpu.push_back(tc);
        r.gpu.push_back(tg);
        if (tc != tg && r.first_mismatch < 0) r.first_mismatch = i;
    }
    return r;
}

struct prefill_comparison {
    double prefill_nmse = 0;  // worst over the prefill passes (last-token logits)
    double decode_nmse = 0;   // worst over the decode steps that follow (they read the KV the passes wrote)
};

// Prompt tokens j = 0..n-1 of sequence `seq` (distinct per sequence, valid for any vocabulary of >= 2 tokens).
inline std::vector<int32_t> prompt_tokens(uint32_t n_vocab, int seq, int n) {
    std::vector<int32_t> t;
    for (int j = 0; j < n; j++) t.push_back(int32_t((3 + 11 * uint32_t(seq) + 37 * uint32_t(j)) % n_vocab));
    return t;
}

// Two prefill passes (n_first tokens from position 0, then n_second more) and n_decode decode steps on the CUDA
// decoder, against the CPU engine fed the same tokens (f16 KV cache).
inline prefill_comparison compare_prefill(const std::string& path, int n_first, int n_second, int n_decode) {
    auto m = transformer::load(path);
    thread_pool pool(std::min(thread_pool::default_threads(), 16));
    const uint32_t n_ctx = uint32_t(n_first + n_second + n_decode + 1);
    forward_context ctx(*m, n_ctx, dtype::f16, pool);
    auto d = cuda::decoder::load(gguf_file::open(path), n_ctx);
    const uint32_t V = m->config().n_vocab;
    const auto all = prompt_tokens(V, 0, n_first + n_second);
    prefill_comparison r;
    for (const auto& piece : {std::span<const int32_t>(all).first(size_t(n_first)),
                              std::span<const int32_t>(all).subspan(size_t(n_first))}) {
        const auto cl = ctx.forward(piece);
        const std::vector<float> cpu(cl.begin(), cl.end());
        const auto gpu = d->forward_prefill(piece);
        r.prefill_nmse = std::max(r.prefill_nmse, nmse(gpu, cpu));
    }
    for (int i = 0; i < n_decode; i++) {
        const int32_t t = int32_t((5 + 29 * uint32_t(i)) % V);
        const auto cl = ctx.forward(std::span<const int32_t>(&t, 1));
        const std::vector<float> cpu(cl.begin(), cl.end());
        r.decode_nmse = std::max(r.decode_nmse, nmse(d->forward(t), cpu));
    }
    return r;
}

struct batch_comparison {
    double worst_nmse = 0;     // batched-step logits vs the single-sequence decoder's, all rows and steps
    int token_mismatches = 0;  // argmax of the batched step vs that of the single-sequence step
    int steps = 0;
};

// n_seq sequences (prompts of different lengths through the batch's prefill) decoded greedily together for
// n_steps batched steps; then each sequence alone through the single-sequence decoder (prefill + forward) with
// the same tokens. The last step leaves sequence 0 out, so that steps over a subset are covered too.
inline batch_comparison compare_batch(const std::string& path, int n_seq, int n_steps) {
    auto g = gguf_file::open(path);
    const uint32_t n_ctx = uint32_t(8 + 3 * n_seq + n_steps + 1);
    auto d = cuda::decoder::load(g, n_ctx);
    auto batch = d->make_batch(n_seq, n_ctx);
    const uint32_t V = d->config().n_vocab;
    std::vector<std::vector<int32_t>> fed(static_cast<size_t>(n_seq));  // tokens appended by the batched steps
    std::vector<std::vector<std::vector<float>>> logits(static_cast<size_t>(n_seq));
    std::vector<int32_t> next(static_cast<size_t>(n_seq));
    for (int s = 0; s < n_seq; s++) {
        const auto p = prompt_tokens(V, s, 4 + 3 * s);
        const auto l = batch->prefill(s, p);
        next[size_t(s)] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    batch_comparison r;
    for (int i = 0; i < n_steps; i++) {
        std::vector<int32_t> toks, seqs;
        for (int s = (i == n_steps - 1 && n_seq > 1) ? 1 : 0; s < n_seq; s++) {
            toks.push_back(next[size_t(s)]);
            seqs.push_back(s);
        }
        const auto l = batch->step(toks, seqs);
        for (size_t k = 0; k < seqs.size(); k++) {
            const auto row = l.subspan(k * V, V);
            const size_t s = size_t(seqs[k]);
            fed[s].push_back(toks[k]);
            logits[s].emplace_back(row.begin(), row.end());
            next[s] = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
        }
        r.steps++;
    }
    for (int s = 0; s < n_seq; s++) {
        d->reset();
        d->forward_prefill(prompt_tokens(V, s, 4 + 3 * s));
        for (size_t i = 0; i < fed[size_t(s)].size(); i++) {
            const auto l = d->forward(fed[size_t(s)][i]);
            const auto& b = logits[size_t(s)][i];
            r.worst_nmse = std::max(r.worst_nmse, nmse(b, l));
            const auto am_single = std::max_element(l.begin(), l.end()) - l.begin();
            const auto am_batch = std::max_element(b.begin(), b.end()) - b.begin();
            if (am_single != am_batch) r.token_mismatches++;
        }
    }
    return r;
}

// The RMSNorm from parts in units of 256 (cuda::set_norm_fusion's bit cuda::k_norm_fusion_k; the K formats' consumers)
// with `mode` set (the previous mode restored): logits against the CPU engine (12 steps), a batch of one against the
// single step (8 steps: bit-equal expected) and a batch of 4 against single steps (5 steps).
struct norm_k_comparison {
    double cpu_nmse = 0, one_nmse = 0, batch_nmse = 0;
    int one_mismatches = 0, batch_mismatches = 0;
};
inline norm_k_comparison compare_norm_k(const std::string& path, int mode) {
    const int mode0 = cuda::norm_fusion();
    cuda::set_norm_fusion(mode);
    norm_k_comparison r;
    try {
        r.cpu_nmse = compare_logits(path, 12).worst_nmse;
        const auto one = compare_batch(path, 1, 8);
        r.one_nmse = one.worst_nmse;
        r.one_mismatches = one.token_mismatches;
        const auto b = compare_batch(path, 4, 5);
        r.batch_nmse = b.worst_nmse;
        r.batch_mismatches = b.token_mismatches;
    } catch (...) {
        cuda::set_norm_fusion(mode0);
        throw;
    }
    cuda::set_norm_fusion(mode0);
    return r;
}

struct batch_greedy_comparison {
    int mismatches = 0;  // sequences whose greedy tokens differ from the single-sequence decoder's
    int first_mismatch_step = -1;
};

// n_seq sequences greedy for n_steps with step_greedy() vs each alone with forward_greedy().
inline batch_greedy_comparison compare_batch_greedy(const std::string& path, int n_seq, int n_steps) {
    auto g = gguf_file::open(path);
    const uint32_t n_ctx = uint32_t(8 + 3 * n_seq + n_steps + 1);
    auto d = cuda::decoder::load(g, n_ctx);
    auto batch = d->make_batch(n_seq, n_ctx);
    const uint32_t V = d->config().n_vocab;
    std::vector<int32_t> next(static_cast<size_t>(n_seq)), seqs(static_cast<size_t>(n_seq));
    std::vector<std::vector<int32_t>> got(static_cast<size_t>(n_seq));
    for (int s = 0; s < n_seq; s++) {
        const auto l = batch->prefill(s, prompt_tokens(V, s, 4 + 3 * s));
        next[size_t(s)] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        seqs[size_t(s)] = s;
    }
    for (int i = 0; i < n_steps; i++) {
        const auto out = batch->step_greedy(next, seqs);
        for (int s = 0; s < n_seq; s++) got[size_t(s)].push_back(next[size_t(s)] = out[size_t(s)]);
    }
    batch_greedy_comparison r;
    for (int s = 0; s < n_seq; s++) {
        d->reset();
        const auto l = d->forward_prefill(prompt_tokens(V, s, 4 + 3 * s));
        int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        for (int i = 0; i < n_steps; i++) {
            t = d->forward_greedy(t);
            if (t != got[size_t(s)][size_t(i)]) {
                r.mismatches++;
                if (r.first_mismatch_step < 0 || i < r.first_mismatch_step) r.first_mismatch_step = i;
                break;
            }
        }
    }
    return r;
}

// Batch invariance: n_seq sequences decoded n_steps times by one batched decoder in steps of all of them, and
// by a second one in two steps per round (the first half of the sequences, then the rest; each half at least 2
// sequences, so that both take the same product kernels). Returns the number of (sequence, step) logit rows
// that are not bit-equal between the two: a sequence's result must not depend on which others share its step.
inline int compare_batch_groupings(const std::string& path, int n_seq, int n_steps) {
    auto g = gguf_file::open(path);
    const uint32_t n_ctx = uint32_t(8 + 3 * n_seq + n_steps + 1);
    auto d = cuda::decoder::load(g, n_ctx);
    auto all = d->make_batch(n_seq, n_ctx), split = d->make_batch(n_seq, n_ctx);
    const uint32_t V = d->config().n_vocab;
    std::vector<int32_t> next(static_cast<size_t>(n_seq)), seqs(static_cast<size_t>(n_seq));
    for (int s = 0; s < n_seq; s++) {
        const auto p = prompt_tokens(V, s, 4 + 3 * s);
        const auto l = all->prefill(s, p);
        split->prefill(s, p);
        next[size_t(s)] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        seqs[size_t(s)] = s;
    }
    const size_t h = size_t(n_seq / 2);
    int differ = 0;
    for (int i = 0; i < n_steps; i++) {
        const auto la = all->step(next, seqs);
        const std::vector<float> a(la.begin(), la.end());  // step() reuses its buffer
        std::vector<float> b;
        for (const auto& [lo, hi] : {std::pair<size_t, size_t>{0, h}, {h, size_t(n_seq)}}) {
            const auto lb = split->step(std::span(next).subspan(lo, hi - lo), std::span(seqs).subspan(lo, hi - lo));
            b.insert(b.end(), lb.begin(), lb.end());
        }
        for (int s = 0; s < n_seq; s++) {
            const std::span<const float> ra = std::span(a).subspan(size_t(s) * V, V);
            const std::span<const float> rb = std::span(b).subspan(size_t(s) * V, V);
            if (!std::equal(ra.begin(), ra.end(), rb.begin())) differ++;
            next[size_t(s)] = int32_t(std::max_element(ra.begin(), ra.end()) - ra.begin());
        }
    }
    return differ;
}

}  // namespace memtile::test
