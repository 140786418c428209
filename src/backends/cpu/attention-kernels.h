// Inner loops of CPU attention (ops.cpp) with per-ISA versions, chosen at run time like the matmul kernels.
// Same rule as kernels.h for the ISA translation units: include only this header and intrinsics.
//   load_tile:  key rows -> kt [head_dim][k_tile] (transposed), value rows -> v [n][head_dim], f16 or f32 source
//   score:      sc[j] = sum_d q[d] * kt[d][j] for j < round_up(n, 8)  (q already scaled)
//   accumulate: acc[d] += sum_j p[j] * v[j][d] for j < n
//   exp_sum:    sc[j] = exp(sc[j] - mx) for j < n (mx >= every sc[j]); returns the sum of the new values
//   swiglu:     gate[i] = silu(gate[i]) * up[i] for i < n (the feed-forward activation, which shares the exp)
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtile::cpu::detail {

inline constexpr int k_attention_tile = 64;

struct attention_kernels {
    // rows[j] points at key j's head slice; f16 selects the source format.
    void (*load_tile)(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                      float* kt, float* v);
    void (*score)(const float* q, const float* kt, int head_dim, int n, float* sc);
    void (*accumulate)(const float* p, const float* v, int n, int head_dim, float* acc);
    float (*exp_sum)(float* sc, int n, float mx);
    void (*swiglu)(float* gate, const float* up, int64_t n);
};

// nullptr when not compiled in; requires head_dim % 8 == 0.
const attention_kernels* avx2_attention_kernels();

}  // namespace memtile::cpu::detail
