// Causal attention over the KV cache (ops.h): the portable loops of attention-kernels.h, which are both the fallback
// and the reference of the ISA loops, the choice between them, and the two drivers: blocks of query tokens against
// converted K/V tiles (prefill), and one token against chunks of keys split over the threads (decode).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/cpu-isa.h"
#include "backends/cpu/ops.h"
#include "core/fp16.h"
#include "core/thread-pool.h"
#include "kv/kv-cache.h"

namespace memtile::cpu {
namespace {

constexpr int k_key_tile = detail::k_attention_tile;  // keys converted to f32 and scored together
constexpr int k_query_block = 16;  // query tokens sharing one pass over the converted key/value tiles

// One job's scratch: a key tile transposed to [head_dim][k_key_tile] (so scores vectorize over keys), a value
// tile [k_key_tile][head_dim], and per query-head state of the online softmax.
struct attention_scratch {
    std::vector<float> kt, v, scores, qs, acc, m, l;
};

float kv_value(const uint8_t* row, bool f16, int d) {
    return f16 ? fp16_to_f32(reinterpret_cast<const uint16_t*>(row)[d]) : reinterpret_cast<const float*>(row)[d];
}

void load_tile_portable(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                        float* kt, float* v) {
    for (int j = 0; j < n; j++) {
        float* vd = v + size_t(j) * size_t(head_dim);
        for (int d = 0; d < head_dim; d++) {
            kt[size_t(d) * k_key_tile + size_t(j)] = kv_value(k_rows[j], f16, d);
            vd[d] = kv_value(v_rows[j], f16, d);
        }
    }
}

void score_portable(const float* q, const float* kt, int head_dim, int n, float* sc) {
    std::fill(sc, sc + n, 0.0f);
    for (int d = 0; d < head_dim; d++) {
        const float* kd = kt + size_t(d) * k_key_tile;
        for (int j = 0; j < n; j++) sc[j] += q[d] * kd[j];
    }
}

void accumulate_portable(const float* p, const float* v, int n, int head_dim, float* acc) {
    for (int j = 0; j < n; j++) {
        const float* vj = v + size_t(j) * size_t(head_dim);
        for (int d = 0; d < head_dim; d++) acc[d] += p[j] * vj[d];
    }
}

float exp_sum_portable(float* sc, int n, float mx) {
    float sum = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = std::exp(sc[j] - mx);
        sum += sc[j];
    }
    return sum;
}

void swiglu_portable(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void decode_portable(const float* q, int n_kv, int group, const uint8_t* k, const uint8_t* v, size_t stride, bool f16,
                     int head_dim, int n, float* sc, float* m, float* l, float* acc) {
    const size_t head_bytes = size_t(head_dim) * (f16 ? 2 : 4);
    std::vector<float> row(static_cast<size_t>(head_dim));
    for (int h = 0; h < n_kv * group; h++) {
        const size_t slice = size_t(h / group) * head_bytes;
        const float* qh = q + size_t(h) * size_t(head_dim);
        float* s = sc + size_t(h) * detail::k_decode_chunk;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const uint8_t* kr = k + size_t(j) * stride + slice;
            for (int d = 0; d < head_dim; d++) row[size_t(d)] = kv_value(kr, f16, d);
            float dot = 0;
            for (int d = 0; d < head_dim; d++) dot += qh[d] * row[size_t(d)];
            s[j] = dot;
            mx = std::max(mx, dot);
        }
        float* a = acc + size_t(h) * size_t(head_dim);
        std::fill(a, a + head_dim, 0.0f);
        float sum = 0;
        for (int j = 0; j < n; j++) {
            const float p = std::exp(s[j] - mx);
            sum += p;
            const uint8_t* vr = v + size_t(j) * stride + slice;
            for (int d = 0; d < head_dim; d++) row[size_t(d)] = kv_value(vr, f16, d);
            for (int d = 0; d < head_dim; d++) a[d] += p * row[size_t(d)];
        }
        m[h] = mx;
        l[h] = sum;
    }
}

const detail::attention_kernels k_portable{load_tile_portable, score_portable,  accumulate_portable,
                                           exp_sum_portable,   swiglu_portable, decode_portable};

// The ISA loops of the matmul path (so force_isa("scalar") covers attention too): AVX2's, with the AVX-512 decode
// on the AVX-512 paths where head_dim is a multiple of 16.
const detail::attention_kernels& pick_kernels(int head_dim) {
    const isa path = active_isa();
    if (head_dim % 8 != 0 || path == isa::scalar) return k_portable;
    const detail::attention_kernels* k = nullptr;
    if (is_avx512(path) && head_dim % 16 == 0) k = detail::avx512_attention_kernels();
    if (!k) k = detail::avx2_attention_kernels();
    return k ? *k : k_portable;
}

// One query token (decode): jobs of k_decode_chunk keys, each giving every head's softmax state over its chunk,
// merged per head in chunk order. A job reads its chunk's K and V rows whole (all KV heads), one contiguous run
// each: split by KV head instead, each job read a 128-byte slice of every 1 KiB row and the attention ran at 4 GB/s
// (Llama-3.2-1B shape, depth 4,096). The fixed chunks make the result independent of the thread count.
void attention_decode(const float* q, float* out, int pos, const kv_cache& kv, int layer, int n_head, int n_head_kv,
                      int head_dim, thread_pool& pool, const detail::attention_kernels& kern) {
    const int group = n_head / n_head_kv;
    const int n_keys = pos + 1;
    const int n_chunks = (n_keys + detail::k_decode_chunk - 1) / detail::k_decode_chunk;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const bool f16 = kv.type() == dtype::f16;
    const size_t stride = size_t(kv.kv_dim()) * kv.elem_bytes();
    const size_t n_q = size_t(n_head), hd = size_t(head_dim);
    // Per chunk: m [n_head], l [n_head], acc [n_head][head_dim].
    const size_t state = n_q * (hd + 2);
    thread_local std::vector<float> qs, states;
    qs.resize(n_q * hd);
    for (size_t i = 0; i < n_q * hd; i++) qs[i] = q[i] * scale;
    states.resize(size_t(n_chunks) * state);
    float* st = states.data();
    const float* qsp = qs.data();
    pool.parallel_for(n_chunks, [&](int, int64_t begin, int64_t end) {
        thread_local std::vector<float> sc;
        sc.resize(n_q * detail::k_decode_chunk);
        for (int64_t c = begin; c < end; c++) {
            const int j0 = int(c) * detail::k_decode_chunk, n = std::min(detail::k_decode_chunk, n_keys - j0);
            float* cs = st + size_t(c) * state;
            kern.decode(qsp, n_head_kv, group, kv.k_row(uint32_t(layer), uint32_t(j0)),
                        kv.v_row(uint32_t(layer), uint32_t(j0)), stride, f16, head_dim, n, sc.data(), cs, cs + n_q,
                        cs + 2 * n_q);
        }
    });
    // Merge: out = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M), M the largest m_c.
    for (size_t h = 0; h < n_q; h++) {
        float* o = out + h * hd;
        float mx = -INFINITY;
        for (int c = 0; c < n_chunks; c++) mx = std::max(mx, st[size_t(c) * state + h]);
        std::fill(o, o + hd, 0.0f);
        float sum = 0;
        for (int c = 0; c < n_chunks; c++) {
            const float* cs = st + size_t(c) * state;
            const float w = std::exp(cs[h] - mx);
            sum += cs[n_q + h] * w;
            const float* a = cs + 2 * n_q + h * hd;
            for (size_t d = 0; d < hd; d++) o[d] += a[d] * w;
        }
        const float inv = 1.0f / sum;
        for (size_t d = 0; d < hd; d++) o[d] *= inv;
    }
}

}  // namespace

namespace detail {
const attention_kernels* portable_attention_kernels() {
    return &k_portable;
}
}  // namespace detail

void attention(const float* q, float* out, int n_tok, int pos0, const kv_cache& kv, int layer, int n_head,
               int n_head_kv, int head_dim, thread_pool& pool) {
    const detail::attention_kernels& kern = pick_kernels(head_dim);
    if (n_tok == 1) return attention_decode(q, out, pos0, kv, layer, n_head, n_head_kv, head_dim, pool, kern);
    const int group = n_head / n_head_kv;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const int n_blocks = (n_tok + k_query_block - 1) / k_query_block;
    const bool f16 = kv.type() == dtype::f16;
    const size_t head_bytes = size_t(head_dim) * kv.elem_bytes();
    // Jobs: (KV head, block of query tokens). Each key/value tile is converted once per job and used by every
    // query head of the group and every token of the block: the conversion is amortised over up to
    // group × k_query_block queries. Causal: query t sees keys 0..pos0+t.
    pool.parallel_for(int64_t(n_head_kv) * n_blocks, [&](int, int64_t begin, int64_t end) {
        thread_local attention_scratch s;
        s.kt.resize(size_t(head_dim) * k_key_tile);
        s.v.resize(size_t(k_key_tile) * size_t(head_dim));
        s.scores.resize(k_key_tile);
        s.qs.resize(size_t(head_dim));
        const uint8_t* k_rows[k_key_tile];
        const uint8_t* v_rows[k_key_tile];
        const size_t n_q = size_t(k_query_block) * size_t(group);
        s.acc.resize(n_q * size_t(head_dim));
        s.m.resize(n_q);
        s.l.resize(n_q);
        for (int64_t job = begin; job < end; job++) {
            const int kvh = int(job / n_blocks), blk = int(job % n_blocks);
            const int t0 = blk * k_query_block, t1 = std::min(n_tok, t0 + k_query_block);
            // Only the block's query rows are used (the last block may be short).
            const size_t used = size_t(t1 - t0) * size_t(group);
            std::fill_n(s.acc.begin(), used * size_t(head_dim), 0.0f);
            std::fill_n(s.m.begin(), used, -INFINITY);
            std::fill_n(s.l.begin(), used, 0.0f);
            const int n_keys_max = pos0 + t1;
            for (int j0 = 0; j0 < n_keys_max; j0 += k_key_tile) {
                const int nj_tile = std::min(k_key_tile, n_keys_max - j0);
                for (int j = 0; j < nj_tile; j++) {
                    k_rows[j] = kv.k_row(uint32_t(layer), uint32_t(j0 + j)) + size_t(kvh) * head_bytes;
                    v_rows[j] = kv.v_row(uint32_t(layer), uint32_t(j0 + j)) + size_t(kvh) * head_bytes;
                }
                kern.load_tile(k_rows, v_rows, f16, head_dim, nj_tile, s.kt.data(), s.v.data());
                for (int t = t0; t < t1; t++) {
                    const int nj = std::min(nj_tile, pos0 + t + 1 - j0);  // causal mask within the tile
                    if (nj <= 0) continue;
                    for (int g = 0; g < group; g++) {
                        const int h = kvh * group + g;
                        const size_t qi = size_t(t - t0) * size_t(group) + size_t(g);
                        const float* qh = q + (int64_t(t) * n_head + h) * head_dim;
                        float* sc = s.scores.data();
                        for (int d = 0; d < head_dim; d++) s.qs[size_t(d)] = qh[d] * scale;
                        kern.score(s.qs.data(), s.kt.data(), head_dim, nj, sc);
                        float mx = s.m[qi];
                        for (int j = 0; j < nj; j++) mx = std::max(mx, sc[j]);
                        const float corr = std::exp(s.m[qi] - mx);  // 0 on the first tile (m = -inf)
                        float* acc = &s.acc[qi * size_t(head_dim)];
                        for (int d = 0; d < head_dim; d++) acc[d] *= corr;
                        const float sum = kern.exp_sum(sc, nj, mx);
                        kern.accumulate(sc, s.v.data(), nj, head_dim, acc);
                        s.l[qi] = s.l[qi] * corr + sum;
                        s.m[qi] = mx;
                    }
                }
            }
            for (int t = t0; t < t1; t++)
                for (int g = 0; g < group; g++) {
                    const size_t qi = size_t(t - t0) * size_t(group) + size_t(g);
                    float* o = out + (int64_t(t) * n_head + kvh * group + g) * head_dim;
                    const float inv = 1.0f / s.l[qi];
                    for (int d = 0; d < head_dim; d++) o[d] = s.acc[qi * size_t(head_dim) + size_t(d)] * inv;
                }
        }
    });
}

}  // namespace memtile::cpu
