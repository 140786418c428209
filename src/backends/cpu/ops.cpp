#include "backends/cpu/ops.h"

#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/thread-pool.h"
#include "kv/kv-cache.h"

namespace memtile::cpu {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += double(x[i]) * x[i];
    const float scale = float(1.0 / std::sqrt(ss / double(n) + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void rope(float* x, int n_head, int head_dim, int n_rot, int pos, float freq_base, rope_style style,
          const float* freq_factors) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float theta = float(pos) * std::pow(freq_base, -2.0f * float(i) / float(n_rot));
        if (freq_factors) theta /= freq_factors[i];
        const float c = std::cos(theta), s = std::sin(theta);
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

void swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

namespace {

inline void load_row(const uint8_t* src, bool f16, int n, float* dst) {
    if (!f16) {
        const auto* f = reinterpret_cast<const float*>(src);
        for (int i = 0; i < n; i++) dst[i] = f[i];
        return;
    }
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    for (int i = 0; i < n; i++) dst[i] = fp16_to_f32(h[i]);
}

}  // namespace

void attention(const float* q, float* out, int n_tok, int pos0, const kv_cache& kv, int layer, int n_head,
               int n_head_kv, int head_dim, thread_pool& pool) {
    const int group = n_head / n_head_kv;
    const bool f16 = kv.type() == dtype::f16;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const size_t head_bytes = size_t(head_dim) * kv.elem_bytes();
    pool.parallel_for(int64_t(n_tok) * n_head, [&](int, int64_t begin, int64_t end) {
        std::vector<float> k(static_cast<size_t>(head_dim)), v(k.size()), acc(k.size());
        for (int64_t job = begin; job < end; job++) {
            const int t = int(job / n_head), h = int(job % n_head), kvh = h / group;
            const float* qh = q + (int64_t(t) * n_head + h) * head_dim;
            const int n_keys = pos0 + t + 1;
            // Online softmax: running max m, running denominator l, accumulator acc (unnormalised).
            float m = -INFINITY, l = 0;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int j = 0; j < n_keys; j++) {
                load_row(kv.k_row(uint32_t(layer), uint32_t(j)) + kvh * head_bytes, f16, head_dim, k.data());
                float s = 0;
                for (int d = 0; d < head_dim; d++) s += qh[d] * k[size_t(d)];
                s *= scale;
                load_row(kv.v_row(uint32_t(layer), uint32_t(j)) + kvh * head_bytes, f16, head_dim, v.data());
                if (s > m) {
                    const float corr = std::exp(m - s);
                    for (auto& a : acc) a *= corr;
                    l *= corr;
                    m = s;
                }
                const float p = std::exp(s - m);
                l += p;
                for (int d = 0; d < head_dim; d++) acc[size_t(d)] += p * v[size_t(d)];
            }
            float* o = out + (int64_t(t) * n_head + h) * head_dim;
            for (int d = 0; d < head_dim; d++) o[d] = acc[size_t(d)] / l;
        }
    });
}

}  // namespace memtile::cpu
