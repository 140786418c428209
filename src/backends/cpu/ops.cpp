#include "backends/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/cpu-isa.h"

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

void swiglu(float* gate, const float* up, int64_t n) {
    // The AVX2 loop (vectorized exp) when the matmul path is AVX2 or better, as for attention.
    const auto* k = active_isa() != isa::scalar ? detail::avx2_attention_kernels() : nullptr;
    (k ? k : detail::portable_attention_kernels())->swiglu(gate, up, n);
}

}  // namespace memtile::cpu
