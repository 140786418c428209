// Host entry points around single matvec launches: the benchmark of one matrix shape (bench_matvec) and the
// op-level check on GGUF rows (matvec_gguf_rows).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/host-util.h"
#include "backends/cuda/matvec-qkm.h"
#include "backends/cuda/prefill-kernels.h"
#include "core/error.h"

namespace memtile::cuda {
namespace {

bool k_format(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::q6_k;
}

}  // namespace

double bench_matvec(dtype t, int64_t n_in, int64_t n_out, int reps, int rows, int warps, bool warm) {
    return bench_matvec_bits(t, n_in, n_out, reps, 0, warm, rows, warps);
}

double bench_matvec_bits(dtype t, int64_t n_in, int64_t n_out, int reps, unsigned bits, bool warm, int rows,
                         int warps) {
    require_device();
    if (!matvec_supported(t)) fail("cuda", "no CUDA matvec for {}", dtype_name(t));
    gpu_weight w;
    w.type = t;
    w.n_in = n_in;
    w.n_out = n_out;
    w.q_row_bytes = device_q_row_bytes(t, n_in);
    const int64_t d_row = device_d_row_elems(t, n_in);
    device_arena arena;
    // Enough copies that the set is several times the L2: each launch reads a cold copy.
    const uint64_t bytes = uint64_t(w.q_row_bytes * n_out + d_row * n_out * 2);
    const int copies = warm ? 1 : int(std::max<uint64_t>(2, (1ull << 30) / std::max<uint64_t>(bytes, 1) + 1));
    std::vector<gpu_weight> ws;
    for (int i = 0; i < copies; i++) {
        gpu_weight c = w;
        c.q = static_cast<uint8_t*>(arena.get(size_t(w.q_row_bytes * n_out)));
        c.d = d_row ? static_cast<uint16_t*>(arena.get(size_t(d_row * n_out) * 2)) : nullptr;
        launch_fill_random(c, uint64_t(i) + 3, nullptr);
        ws.push_back(c);
    }
    auto* x = static_cast<float*>(arena.get(size_t(n_in) * 4));
    auto* xq = static_cast<int8_t*>(arena.get(size_t(n_in)));
    auto* xd = static_cast<float*>(arena.get(size_t(n_in / 32 + 1) * 4));
    auto* xs = static_cast<float*>(arena.get(size_t(n_in / 32 + 1) * 4));
    auto* y = static_cast<float*>(arena.get(size_t(n_out) * 4));
    launch_fill_f32(x, n_in, 0.5f, nullptr);
    // The activation blocks each format's kernel expects (K formats: one scale per 256), as the decoder passes.
    const int q_block = k_format(t) && n_in % 256 == 0 ? 256 : 32;
    if (n_in % 32 == 0) launch_quantize(x, n_in, q_block, xq, xd, xs, nullptr);
    check(cudaDeviceSynchronize(), "bench setup");

    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    force_matvec_shape({rows, warps});
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int r = 0; r < reps; r++) {
        const gpu_weight& c = ws[size_t(r % copies)];
        if (!bits || !launch_matvec_qkm(c, xq, xd, xs, y, false, bits, s)) launch_matvec(c, x, xq, xd, xs, y, false, s);
    }
    const cudaError_t launch_error = cudaGetLastError();
    check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    force_matvec_shape({});
    check(launch_error, "matvec launch during capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    std::vector<double> gbs;
    for (int k = 0; k < 4; k++) {
        check(cudaEventRecord(a, s), "cudaEventRecord");
        check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
        check(cudaEventRecord(b, s), "cudaEventRecord");
        check(cudaEventSynchronize(b), "matvec bench");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        if (k > 0) gbs.push_back(double(bytes) * reps / (double(ms) * 1e-3) / 1e9);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaStreamDestroy(s);
    std::sort(gbs.begin(), gbs.end());
    return gbs[gbs.size() / 2];
}

namespace {

// Uploads GGUF rows into the device layout (allocations in `arena`).
gpu_weight upload_rows(device_arena& arena, dtype t, const uint8_t* rows, int64_t n_in, int64_t n_out) {
    gpu_weight w;
    w.type = t;
    w.n_in = n_in;
    w.n_out = n_out;
    w.q_row_bytes = device_q_row_bytes(t, n_in);
    const int64_t d_row = device_d_row_elems(t, n_in);
    std::vector<uint8_t> hq(size_t(w.q_row_bytes * n_out));
    std::vector<uint16_t> hd(size_t(d_row * n_out));
    repack_rows(t, rows, n_in, n_out, hq.data(), d_row ? hd.data() : nullptr);
    auto* q = static_cast<uint8_t*>(arena.get(hq.size()));
    auto* d = d_row ? static_cast<uint16_t*>(arena.get(hd.size() * 2)) : nullptr;
    check(cudaMemcpy(q, hq.data(), hq.size(), cudaMemcpyHostToDevice), "upload");
    if (d) check(cudaMemcpy(d, hd.data(), hd.size() * 2, cudaMemcpyHostToDevice), "upload");
    w.q = q;
    w.d = d;
    return w;
}

}  // namespace

std::vector<float> attention_check(const std::vector<std::vector<float>>& qkv, int n_head, int n_head_kv, int head_dim,
                                   float freq_base, bool neox, int n_split, int variant, int q_block, int split_keys) {
    require_device();
    if (variant < 0 || variant > 5) fail("cuda", "attention check: unknown variant {}", variant);
    if (q_block != 0 && q_block != 32 && q_block != 256) fail("cuda", "attention check: q_block {}", q_block);
    const int n_pos = int(qkv.size());
    const int q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
    if (n_pos == 0 || n_split < 1 || split_keys < 0)
        fail("cuda", "attention check needs positions, n_split >= 1 and split_keys >= 0");
    device_arena arena;
    auto* buf = static_cast<float*>(arena.get(size_t(q_dim + 2 * kv_dim) * 4));
    auto* kc = static_cast<uint16_t*>(arena.get(size_t(n_pos) * size_t(kv_dim) * 2));
    auto* vc = static_cast<uint16_t*>(arena.get(size_t(n_pos) * size_t(kv_dim) * 2));
    auto* pos = static_cast<int32_t*>(arena.get(4));
    auto* partial = static_cast<float*>(arena.get(size_t(n_head) * size_t(n_split) * size_t(head_dim + 2) * 4));
    auto* out = static_cast<float*>(arena.get(size_t(q_dim) * 4));
    const bool quantize = q_block > 0 && q_dim % 32 == 0;
    auto* xq = quantize ? static_cast<int8_t*>(arena.get(size_t(q_dim))) : nullptr;
    auto* xd = quantize ? static_cast<float*>(arena.get(size_t(q_dim / 32) * 4)) : nullptr;
    auto* xs = quantize ? static_cast<float*>(arena.get(size_t(q_dim / 32) * 4)) : nullptr;
    const int qb = quantize ? q_block : 0;
    auto* counters = static_cast<unsigned*>(arena.get(size_t(attention_merge_counters(n_head)) * sizeof(unsigned)));
    check(cudaMemset(counters, 0, size_t(attention_merge_counters(n_head)) * sizeof(unsigned)), "cudaMemset");
    std::vector<float> freq(size_t(head_dim / 2));
    for (size_t i = 0; i < freq.size(); i++) freq[i] = std::pow(freq_base, -2.0f * float(i) / float(head_dim));
    auto* freq_d = static_cast<float*>(arena.get(freq.size() * 4));
    check(cudaMemcpy(freq_d, freq.data(), freq.size() * 4, cudaMemcpyHostToDevice), "upload");
    const rope_params rp{n_head, n_head_kv, head_dim, head_dim, neox, freq_d, nullptr, split_keys};
    // Each position as a decode step does it: RoPE + cache write of position p and attention at p.
    for (int p = 0; p < n_pos; p++) {
        if (int(qkv[size_t(p)].size()) != q_dim + 2 * kv_dim) fail("cuda", "attention check: bad qkv size");
        check(cudaMemcpy(buf, qkv[size_t(p)].data(), qkv[size_t(p)].size() * 4, cudaMemcpyHostToDevice), "upload");
        check(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice), "upload");
        if (variant == 0)
            launch_attention(buf, nullptr, rp, pos, kc, vc, n_split, partial, out, qb, xq, xd, xs, nullptr);
        else if (!launch_attention_rope(buf, nullptr, rp, pos, kc, vc, n_split, partial,
                                        variant == 3 ? counters : nullptr, out, qb, xq, xd, xs,
                                        variant == 2 || variant == 5, variant >= 4, nullptr))
            fail("cuda", "attention check: no folded-RoPE kernel (MEMTILE_CUDA_ATTN_KEYS forces another count)");
    }
    check(cudaGetLastError(), "attention launch");
    // The last-block merges must leave their counters at zero for the next launch.
    std::vector<unsigned> left(static_cast<size_t>(attention_merge_counters(n_head)));
    check(cudaMemcpy(left.data(), counters, left.size() * sizeof(unsigned), cudaMemcpyDeviceToHost), "attention");
    for (size_t i = 0; i < left.size(); i++)
        if (left[i] != 0) fail("cuda", "attention check: merge counter {} left at {}", i, left[i]);
    std::vector<float> r(static_cast<size_t>(q_dim));
    check(cudaMemcpy(r.data(), out, r.size() * 4, cudaMemcpyDeviceToHost), "attention");
    if (quantize) {
        std::vector<int8_t> hq(static_cast<size_t>(q_dim));
        std::vector<float> hd(static_cast<size_t>(q_dim / 32)), hs(hd.size());
        check(cudaMemcpy(hq.data(), xq, hq.size(), cudaMemcpyDeviceToHost), "attention");
        check(cudaMemcpy(hd.data(), xd, hd.size() * 4, cudaMemcpyDeviceToHost), "attention");
        check(cudaMemcpy(hs.data(), xs, hs.size() * 4, cudaMemcpyDeviceToHost), "attention");
        r.insert(r.end(), hq.begin(), hq.end());
        r.insert(r.end(), hd.begin(), hd.end());
        r.insert(r.end(), hs.begin(), hs.end());
    }
    return r;
}

std::vector<float> embed_gguf_row(dtype t, const uint8_t* rows, int64_t n_in, int64_t n_out, int32_t token) {
    require_device();
    if (!matvec_supported(t)) fail("cuda", "no CUDA embedding for {}", dtype_name(t));
    if (token < 0 || token >= n_out) fail("cuda", "embedding row {} outside 0..{}", token, n_out - 1);
    device_arena arena;
    const gpu_weight w = upload_rows(arena, t, rows, n_in, n_out);
    auto* tok = static_cast<int32_t*>(arena.get(4));
    auto* x = static_cast<float*>(arena.get(size_t(n_in) * 4));
    check(cudaMemcpy(tok, &token, 4, cudaMemcpyHostToDevice), "upload");
    launch_embed(w, tok, x, nullptr);
    check(cudaGetLastError(), "embedding launch");
    std::vector<float> out(static_cast<size_t>(n_in));
    check(cudaMemcpy(out.data(), x, out.size() * 4, cudaMemcpyDeviceToHost), "embedding");
    return out;
}

std::vector<int32_t> argmax_rows_check(const std::vector<float>& logits, int n_rows, int n) {
    require_device();
    if (n_rows < 1 || n_rows > k_max_batch || n < 1 || logits.size() != size_t(n_rows) * size_t(n))
        fail("cuda", "argmax check: {} logits for {} rows of {} (1..{} rows)", logits.size(), n_rows, n, k_max_batch);
    device_arena arena;
    auto* l = static_cast<float*>(arena.get(logits.size() * 4));
    auto* scratch = static_cast<float*>(arena.get(size_t(k_argmax_scratch) * 4));
    auto* tok = static_cast<int32_t*>(arena.get(size_t(n_rows) * 4));
    auto* pos = static_cast<int32_t*>(arena.get(size_t(n_rows) * 4));
    check(cudaMemcpy(l, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemset(pos, 0, size_t(n_rows) * 4), "clear");
    launch_argmax_rows(l, n_rows, n, tok, pos, nullptr, scratch, nullptr);
    check(cudaGetLastError(), "argmax launch");
    std::vector<int32_t> out(static_cast<size_t>(n_rows)), p(out.size());
    check(cudaMemcpy(out.data(), tok, out.size() * 4, cudaMemcpyDeviceToHost), "argmax");
    check(cudaMemcpy(p.data(), pos, p.size() * 4, cudaMemcpyDeviceToHost), "argmax positions");
    for (int32_t v : p)
        if (v != 1) fail("cuda", "argmax check: a row's position advanced by {}, not 1", v);
    return out;
}

std::vector<float> matvec_gguf_rows(dtype t, const uint8_t* rows, int64_t n_in, int64_t n_out, const float* x) {
    require_device();
    if (!matvec_supported(t)) fail("cuda", "no CUDA matvec for {}", dtype_name(t));
    if (n_in % 32 != 0 && matvec_uses_int8(t)) fail("cuda", "matvec: row length {} is not a multiple of 32", n_in);
    device_arena arena;
    const gpu_weight w = upload_rows(arena, t, rows, n_in, n_out);
    auto* xg = static_cast<float*>(arena.get(size_t(n_in) * 4));
    auto* xq = static_cast<int8_t*>(arena.get(size_t(n_in)));
    auto* xd = static_cast<float*>(arena.get(size_t(n_in / 32 + 1) * 4));
    auto* xs = static_cast<float*>(arena.get(size_t(n_in / 32 + 1) * 4));
    auto* y = static_cast<float*>(arena.get(size_t(n_out) * 4));
    check(cudaMemcpy(xg, x, size_t(n_in) * 4, cudaMemcpyHostToDevice), "upload");
    if (matvec_uses_int8(t)) launch_quantize(xg, n_in, k_format(t) ? 256 : 32, xq, xd, xs, nullptr);
    launch_matvec(w, xg, xq, xd, xs, y, false, nullptr);
    check(cudaGetLastError(), "matvec launch");
    std::vector<float> out(static_cast<size_t>(n_out));
    check(cudaMemcpy(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost), "matvec");
    return out;
}

std::vector<float> qkm_products_gguf(const uint8_t* a, int64_t n_out_a, const uint8_t* b, int64_t n_out_b, int64_t n_in,
                                     const float* x, unsigned bits) {
    require_device();
    if (n_in % 256 != 0) fail("cuda", "Q4_K_M products: row length {} is not a multiple of 256", n_in);
    device_arena arena;
    const gpu_weight wa = upload_rows(arena, dtype::q4_k, a, n_in, n_out_a);
    const gpu_weight wb = n_out_b ? upload_rows(arena, dtype::q6_k, b, n_in, n_out_b) : gpu_weight{};
    auto* xg = static_cast<float*>(arena.get(size_t(n_in) * 4));
    auto* xq = static_cast<int8_t*>(arena.get(size_t(n_in)));
    auto* xd = static_cast<float*>(arena.get(size_t(n_in / 32) * 4));
    auto* xs = static_cast<float*>(arena.get(size_t(n_in / 32) * 4));
    auto* y = static_cast<float*>(arena.get(size_t(n_out_a + n_out_b) * 4));
    check(cudaMemcpy(xg, x, size_t(n_in) * 4, cudaMemcpyHostToDevice), "upload");
    launch_quantize(xg, n_in, 256, xq, xd, xs, nullptr);
    if ((bits & k_qkm_pair) && n_out_b && matvec_pair_supported(wa, wb)) {
        launch_matvec_pair(wa, y, wb, y + n_out_a, xq, xd, xs, bits, nullptr);
    } else {
        if (!launch_matvec_qkm(wa, xq, xd, xs, y, false, bits, nullptr))
            launch_matvec(wa, xg, xq, xd, xs, y, false, nullptr);
        if (n_out_b && !launch_matvec_qkm(wb, xq, xd, xs, y + n_out_a, false, bits, nullptr))
            launch_matvec(wb, xg, xq, xd, xs, y + n_out_a, false, nullptr);
    }
    check(cudaGetLastError(), "Q4_K_M products launch");
    std::vector<float> out(static_cast<size_t>(n_out_a + n_out_b));
    check(cudaMemcpy(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost), "Q4_K_M products");
    return out;
}

}  // namespace memtile::cuda
