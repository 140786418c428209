// Element-wise and attention operations of the transformer blocks on the CPU (f32 activations).
#pragma once

#include <cstdint>

#include "models/model-config.h"

namespace memtile {
class kv_cache;
class thread_pool;
}  // namespace memtile

namespace memtile::cpu {

// out[i] = x[i] / rms(x) * w[i]; x, out, w: [n]
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

// Rotates the first n_rot dims of each head of x ([n_head, head_dim] for one token) at position pos.
// freq_factors: [n_rot / 2] or nullptr (Llama 3.1: theta_i / factor_i).
void rope(float* x, int n_head, int head_dim, int n_rot, int pos, float freq_base, rope_style style,
          const float* freq_factors);

// rope() in two steps, so that a forward pass computes the angles of a position once for q and k of every
// layer: rope_angles writes cs[2i] = cos, cs[2i + 1] = sin of angle i < n_rot / 2 ([n_rot] floats);
// rope_apply rotates with them. rope_apply(rope_angles(...)) is bit-identical to rope().
void rope_angles(int n_rot, int pos, float freq_base, const float* freq_factors, float* cs);
void rope_apply(float* x, int n_head, int head_dim, int n_rot, const float* cs, rope_style style);

// gate[i] = silu(gate[i]) * up[i], [n]
void swiglu(float* gate, const float* up, int64_t n);

// Causal attention for n_tok query tokens at positions pos0..pos0+n_tok-1 against the cache of `layer`
// (which already holds keys/values up to pos0+n_tok-1). q: [n_tok, n_head * head_dim]; out: same shape.
// Tiled over keys (64 at a time) with an online softmax, so no [n_tok, n_ctx] score matrix is materialised;
// queries are taken in blocks of 16 tokens per KV head so each converted K/V tile serves many queries. GQA: head h
// reads KV head h / (n_head / n_head_kv).
void attention(const float* q, float* out, int n_tok, int pos0, const kv_cache& kv, int layer, int n_head,
               int n_head_kv, int head_dim, thread_pool& pool);

}  // namespace memtile::cpu
