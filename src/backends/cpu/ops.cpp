#include "backends/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/cpu-isa.h"
#include "core/fp16.h"
#include "core/thread-pool.h"
#include "kv/kv-cache.h"

namespace memtile::cpu {

// The squares are exact in double; eight partial sums break the chain of dependent additions (one chain took 2.9 us
// for n = 2048 on session 17's Zen 4, ~1 % of a decode token over the 45 norms of TinyLlama). The order differs from
// one sequential sum only below double precision, far under the float rounding of the scale.
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
    double part[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += double(x[i + k]) * x[i + k];
    double tail = 0;
    for (; i < n; i++) tail += double(x[i]) * x[i];
    const double ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7])) + tail;
    const float scale = float(1.0 / std::sqrt(ss / double(n) + eps));
    for (int64_t j = 0; j < n; j++) out[j] = x[j] * scale * w[j];
}

void rope_angles(int n_rot, int pos, float freq_base, const float* freq_factors, float* cs) {
    for (int i = 0; i < n_rot / 2; i++) {
        float theta = float(pos) * std::pow(freq_base, -2.0f * float(i) / float(n_rot));
        if (freq_factors) theta /= freq_factors[i];
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
    }
}

void rope_apply(float* x, int n_head, int head_dim, int n_rot, const float* cs, rope_style style) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        for (int h = 0; h < n_head; h++) {
            float* v = x + h * head_dim;
            const int a = style == rope_style::normal ? 2 * i : i;
            const int b = style == rope_style::normal ? 2 * i + 1 : i + half;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void rope(float* x, int n_head, int head_dim, int n_rot, int pos, float freq_base, rope_style style,
          const float* freq_factors) {
    std::vector<float> cs(static_cast<size_t>(n_rot));
    rope_angles(n_rot, pos, freq_base, freq_factors, cs.data());
    rope_apply(x, n_head, head_dim, n_rot, cs.data(), style);
}

namespace {

void swiglu_portable(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace

void swiglu(float* gate, const float* up, int64_t n) {
    // The AVX2 loop (vectorized exp) when the matmul path is AVX2 or better, as for attention.
    const auto* k = active_isa() != isa::scalar ? detail::avx2_attention_kernels() : nullptr;
    (k ? k->swiglu : swiglu_portable)(gate, up, n);
}

namespace {

constexpr int k_key_tile = detail::k_attention_tile;  // keys converted to f32 and scored together
constexpr int k_query_block = 16;  // query tokens sharing one pass over the converted key/value tiles

// One job's scratch: a key tile transposed to [head_dim][k_key_tile] (so scores vectorize over keys), a value
// tile [k_key_tile][head_dim], and per query-head state of the online softmax.
struct attention_scratch {
    std::vector<float> kt, v, scores, qs, acc, m, l;
};

void load_tile_portable(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                        float* kt, float* v) {
    for (int j = 0; j < n; j++) {
        float* vd = v + size_t(j) * size_t(head_dim);
        for (int d = 0; d < head_dim; d++) {
            float kx, vx;
            if (f16) {
                kx = fp16_to_f32(reinterpret_cast<const uint16_t*>(k_rows[j])[d]);
                vx = fp16_to_f32(reinterpret_cast<const uint16_t*>(v_rows[j])[d]);
            } else {
                kx = reinterpret_cast<const float*>(k_rows[j])[d];
                vx = reinterpret_cast<const float*>(v_rows[j])[d];
            }
            kt[size_t(d) * k_key_tile + size_t(j)] = kx;
            vd[d] = vx;
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

const detail::attention_kernels k_portable{load_tile_portable, score_portable, accumulate_portable, exp_sum_portable,
                                           swiglu_portable};

// The AVX2 loops when the matmul path is AVX2 or better (so force_isa("scalar") covers attention too).
const detail::attention_kernels& pick_kernels(int head_dim) {
    const isa path = active_isa();
    if (head_dim % 8 == 0 && path != isa::scalar)
        if (const auto* k = detail::avx2_attention_kernels()) return *k;
    return k_portable;
}

}  // namespace

void attention(const float* q, float* out, int n_tok, int pos0, const kv_cache& kv, int layer, int n_head,
               int n_head_kv, int head_dim, thread_pool& pool) {
    const int group = n_head / n_head_kv;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const int n_blocks = (n_tok + k_query_block - 1) / k_query_block;
    const detail::attention_kernels& kern = pick_kernels(head_dim);
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
            // Only the block's query rows are used: one token's (group rows, 2 KiB of acc at head_dim 64) in
            // decode, where clearing all k_query_block tokens' (32 KiB) per job was most of the job's time.
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
