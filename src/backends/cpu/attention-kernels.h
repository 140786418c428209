// Inner loops of CPU attention (attention.cpp) with per-ISA versions, chosen at run time like the matmul kernels.
// Same rule as kernels.h for the ISA translation units: include only this header and intrinsics.
//   load_tile:  key rows -> kt [head_dim][k_tile] (transposed), value rows -> v [n][head_dim], f16 or f32 source
//   score:      rows <= k_score_rows query rows q [rows][head_dim] (already scaled) against the tile:
//               sc[r][j] = sum_d q[r][d] * kt[d][j] for j < k_tile (sc rows k_tile apart; columns >= n undefined)
//   softmax:    per row r of sc [rows][k_tile] (rows <= k_score_rows): keys j >= nj[r] dropped; the row's
//               online-softmax state m[r], l[r] updated with its scores, which become p = exp(s - m_new) (0 for the
//               dropped keys); corr[r] = exp(m_old - m_new). A row with nj[r] <= 0 keeps its state: p all 0,
//               corr 1.
//   accumulate: acc[r][d] = acc[r][d] * corr[r] + sum_{j<n} p[r][j] v[j][d], p = sc (rows k_tile apart), acc rows
//               head_dim apart, rows <= k_score_rows: each value row loaded once for all the rows
//   swiglu:     gate[i] = silu(gate[i]) * up[i] for i < n (the feed-forward activation, which shares the exp)
//   decode:     one query token against keys 0..n-1 of one chunk (n <= k_decode_chunk), n_kv KV heads: key j's
//               slices of those heads (side by side) at k + j * stride bytes, value j's at v + j * stride (f16 or
//               f32); query head h [head_dim] (already scaled) at q + h * head_dim reads KV head h / group. Outputs
//               the chunk's online-softmax state per query head: m[h] = max_j s_hj, l[h] = sum_j exp(s_hj - m[h]),
//               acc[h][d] = sum_j exp(s_hj - m[h]) v_j[d], s_hj = q_h . k_j. sc: scratch of
//               n_kv * group * k_decode_chunk floats. The rows are read in the cache's own layout, a block of keys
//               at a time, KV head after KV head, the next block prefetched; each slice is converted once and
//               scored against every head of its group, the scores of 16 (8) keys reduced together.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtile::cpu::detail {

inline constexpr int k_attention_tile = 64;
inline constexpr int k_score_rows = 4;  // query rows per score / softmax / accumulate call
// Keys per decode job: fixed (not derived from the thread count), so the partial sums and their merge, and with
// them the result's bits, are the same for any number of threads.
inline constexpr int k_decode_chunk = 128;

struct attention_kernels {
    // rows[j] points at key j's head slice; f16 selects the source format.
    void (*load_tile)(const uint8_t* const* k_rows, const uint8_t* const* v_rows, bool f16, int head_dim, int n,
                      float* kt, float* v);
    void (*score)(const float* q, int rows, const float* kt, int head_dim, int n, float* sc);
    void (*softmax)(float* sc, int rows, const int* nj, float* m, float* l, float* corr);
    void (*accumulate)(const float* p, int rows, const float* corr, const float* v, int n, int head_dim, float* acc);
    void (*swiglu)(float* gate, const float* up, int64_t n);
    void (*decode)(const float* q, int n_kv, int group, const uint8_t* k, const uint8_t* v, size_t stride, bool f16,
                   int head_dim, int n, float* sc, float* m, float* l, float* acc);
};

// nullptr when not compiled in; require head_dim % 8 == 0 (AVX2) or % 16 == 0 (AVX-512).
const attention_kernels* avx2_attention_kernels();
// The AVX2 set with the AVX-512 decode (the other loops are AVX2's).
const attention_kernels* avx512_attention_kernels();
// The portable loops (attention.cpp): the fallback and the reference of the ISA sets.
const attention_kernels* portable_attention_kernels();

}  // namespace memtile::cpu::detail
