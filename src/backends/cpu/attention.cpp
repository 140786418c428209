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
// tile [k_key_tile][head_dim], and per query row its scaled q, scores, output sums and online-softmax state.
struct attention_scratch {
    std::vector<float> kt, v, scores, qs, acc, m, l, corr;
    std::vector<int> nj;
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

void score_portable(const float* q, int rows, const float* kt, int head_dim, int n, float* sc) {
    for (int r = 0; r < rows; r++) {
        float* s = sc + size_t(r) * k_key_tile;
        const float* qr = q + size_t(r) * size_t(head_dim);
        std::fill(s, s + n, 0.0f);
        for (int d = 0; d < head_dim; d++) {
            const float* kd = kt + size_t(d) * k_key_tile;
            for (int j = 0; j < n; j++) s[j] += qr[d] * kd[j];
        }
    }
}

void softmax_portable(float* sc, int rows, const int* nj, float* m, float* l, float* corr) {
    for (int r = 0; r < rows; r++) {
        float* s = sc + size_t(r) * k_key_tile;
        const int n = std::max(nj[r], 0);
        float mx = m[r];
        for (int j = 0; j < n; j++) mx = std::max(mx, s[j]);
        corr[r] = n > 0 ? std::exp(m[r] - mx) : 1.0f;  // 0 on the row's first keys (m = -inf)
        float sum = 0;
        for (int j = 0; j < n; j++) sum += (s[j] = std::exp(s[j] - mx));
        std::fill(s + n, s + k_key_tile, 0.0f);
        l[r] = l[r] * corr[r] + sum;
        m[r] = mx;
    }
}

void accumulate_portable(const float* p, int rows, const float* corr, const float* v, int n, int head_dim, float* acc) {
    for (int r = 0; r < rows; r++) {
        float* a = acc + size_t(r) * size_t(head_dim);
        const float* pr = p + size_t(r) * k_key_tile;
        for (int d = 0; d < head_dim; d++) a[d] *= corr[r];
        for (int j = 0; j < n; j++) {
            const float* vj = v + size_t(j) * size_t(head_dim);
            for (int d = 0; d < head_dim; d++) a[d] += pr[j] * vj[d];
        }
    }
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

const detail::attention_kernels k_portable{load_tile_portable,  score_portable,  softmax_portable,
                                           accumulate_portable, swiglu_portable, decode_portable};

// The ISA loops of the matmul path (so force_isa("scalar") covers attention too): AVX2's, and on the AVX-512 paths
// where head_dim is a multiple of 16 the AVX-512 set (its own score, softmax, accumulate and decode loops).
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
    // Where the chunks are fewer than two per thread (short contexts), each chunk's KV heads are also split into
    // parts. Heads are independent, so the parts change which thread computes a head, not its bits.
    const int threads = pool.size();
    const int parts = n_chunks >= 2 * threads ? 1 : std::min(n_head_kv, (2 * threads + n_chunks - 1) / n_chunks);
    const size_t head_bytes = size_t(head_dim) * kv.elem_bytes();
    pool.parallel_for(int64_t(n_chunks) * parts, [&](int, int64_t begin, int64_t end) {
        thread_local std::vector<float> sc;
        sc.resize(n_q * detail::k_decode_chunk);
        for (int64_t job = begin; job < end; job++) {
            const int c = int(job / parts), part = int(job % parts);
            const int kv0 = part * n_head_kv / parts, kv1 = (part + 1) * n_head_kv / parts;
            const int j0 = c * detail::k_decode_chunk, n = std::min(detail::k_decode_chunk, n_keys - j0);
            const size_t h0 = size_t(kv0) * size_t(group);
            float* cs = st + size_t(c) * state;
            kern.decode(qsp + h0 * hd, kv1 - kv0, group,
                        kv.k_row(uint32_t(layer), uint32_t(j0)) + size_t(kv0) * head_bytes,
                        kv.v_row(uint32_t(layer), uint32_t(j0)) + size_t(kv0) * head_bytes, stride, f16, head_dim, n,
                        sc.data(), cs + h0, cs + n_q + h0, cs + 2 * n_q + h0 * hd);
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
    // query row of the block (its tokens x the group's heads, row r = token * group + head), k_score_rows rows at a
    // time so that each loaded key column and value row serves several rows. Causal: query t sees keys 0..pos0+t.
    const int rows_max = k_query_block * group;
    pool.parallel_for(int64_t(n_head_kv) * n_blocks, [&](int, int64_t begin, int64_t end) {
        thread_local attention_scratch s;
        s.kt.resize(size_t(head_dim) * k_key_tile);
        s.v.resize(size_t(k_key_tile) * size_t(head_dim));
        s.scores.resize(size_t(rows_max) * k_key_tile);
        s.qs.resize(size_t(rows_max) * size_t(head_dim));
        s.acc.resize(size_t(rows_max) * size_t(head_dim));
        s.m.resize(size_t(rows_max));
        s.l.resize(size_t(rows_max));
        s.corr.resize(size_t(rows_max));
        s.nj.resize(size_t(rows_max));
        const uint8_t* k_rows[k_key_tile];
        const uint8_t* v_rows[k_key_tile];
        for (int64_t job = begin; job < end; job++) {
            const int kvh = int(job / n_blocks), blk = int(job % n_blocks);
            const int t0 = blk * k_query_block, t1 = std::min(n_tok, t0 + k_query_block);
            const int rows = (t1 - t0) * group;
            for (int r = 0; r < rows; r++) {
                const float* qh = q + (int64_t(t0 + r / group) * n_head + kvh * group + r % group) * head_dim;
                for (int d = 0; d < head_dim; d++) s.qs[size_t(r) * size_t(head_dim) + size_t(d)] = qh[d] * scale;
            }
            std::fill_n(s.acc.begin(), size_t(rows) * size_t(head_dim), 0.0f);
            std::fill_n(s.m.begin(), rows, -INFINITY);
            std::fill_n(s.l.begin(), rows, 0.0f);
            const int n_keys_max = pos0 + t1;
            for (int j0 = 0; j0 < n_keys_max; j0 += k_key_tile) {
                const int nj_tile = std::min(k_key_tile, n_keys_max - j0);
                for (int j = 0; j < nj_tile; j++) {
                    k_rows[j] = kv.k_row(uint32_t(layer), uint32_t(j0 + j)) + size_t(kvh) * head_bytes;
                    v_rows[j] = kv.v_row(uint32_t(layer), uint32_t(j0 + j)) + size_t(kvh) * head_bytes;
                }
                kern.load_tile(k_rows, v_rows, f16, head_dim, nj_tile, s.kt.data(), s.v.data());
                for (int r = 0; r < rows; r++)  // causal mask within the tile
                    s.nj[size_t(r)] = std::min(nj_tile, pos0 + t0 + r / group + 1 - j0);
                for (int r0 = 0; r0 < rows; r0 += detail::k_score_rows) {
                    const int nr = std::min(detail::k_score_rows, rows - r0);
                    float* sc = s.scores.data() + size_t(r0) * k_key_tile;
                    kern.score(s.qs.data() + size_t(r0) * size_t(head_dim), nr, s.kt.data(), head_dim, nj_tile, sc);
                    kern.softmax(sc, nr, s.nj.data() + r0, s.m.data() + r0, s.l.data() + r0, s.corr.data() + r0);
                    kern.accumulate(sc, nr, s.corr.data() + r0, s.v.data(), nj_tile, head_dim,
                                    s.acc.data() + size_t(r0) * size_t(head_dim));
                }
            }
            for (int r = 0; r < rows; r++) {
                float* o = out + (int64_t(t0 + r / group) * n_head + kvh * group + r % group) * head_dim;
                const float inv = 1.0f / s.l[size_t(r)];
                for (int d = 0; d < head_dim; d++) o[d] = s.acc[size_t(r) * size_t(head_dim) + size_t(d)] * inv;
            }
        }
    });
}

}  // namespace memtile::cpu
