// Launchers of the kernels of the prefill pass (one sequence, n tokens, tensor-core GEMMs through cuBLAS) and
// of the batched decode step (B sequences, one token each), defined in prefill-ops.cu, attention-prefill.cu and
// matvec-batch.cu. Row-major float activations: row r of an [n_rows, n] buffer starts at r * n. Quantized
// activations of n_rows rows are group-major: group g (elements 32g..32g+31) of row r at xq[(g * n_rows + r) *
// 32 ..], its scales at xd/xs[g * n_rows + r], so that the rows' bytes of one group are adjacent for the batched
// products (one row: the layout of cuda-kernels.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// Rows [r0, r0 + n_rows) of w dequantized to f16: out [n_rows, w.n_in] (w.n_in % 8 == 0).
void launch_dequant_f16(const gpu_weight& w, int64_t r0, int64_t n_rows, uint16_t* out, cudaStream_t s);
// x [n, w.n_in] f32 = embedding rows tokens[0..n) (device array; w.n_in % 8 == 0).
void launch_embed_rows(const gpu_weight& w, const int32_t* tokens, int n, float* x, cudaStream_t s);
// Per row of x [n_rows, n]: out_h = x / rms(x) * w as f16 [n_rows, n].
void launch_rms_norm_rows(const float* x, const float* w, int n_rows, int n, float eps, uint16_t* out_h,
                          cudaStream_t s);
// Quantizes each row of x [n_rows, n] into the group-major layout above (n % 32 == 0).
void launch_quantize_rows(const float* x, int n_rows, int64_t n, int q_block, int8_t* xq, float* xd, float* xs,
                          cudaStream_t s);
// Bias, RoPE and the KV write for the n_rows rows of qkv [n_rows, q_dim + 2 kv_dim] of one prompt: row r has
// position pos0 + r. q_h (nullable): rotated q as f16 [n_rows, q_dim].
void launch_rope_kv_rows(float* qkv, int n_rows, const float* bias, const rope_params& p, int pos0, uint16_t* k_cache,
                         uint16_t* v_cache, uint16_t* q_h, cudaStream_t s);
// Per row of gu [n_rows, 2 n_ff] (gate then up): silu(gate) * up as f16 [n_rows, n_ff].
void launch_swiglu_rows(const float* gu, int n_rows, int64_t n_ff, uint16_t* out_h, cudaStream_t s);
// token[b] = argmax of logits row b ([n_rows, n]; ties: lowest id); then pos[slots[b]] += 1 (pos[b] when slots is
// null). scratch: device memory of k_argmax_scratch words (partial results of 64 slices per row).
void launch_argmax_rows(const float* logits, int n_rows, int n, int32_t* token, int32_t* pos, const int32_t* slots,
                        float* scratch, cudaStream_t s);

// Causal attention of one sequence's n_tok queries (q_h [n_tok rounded up to 64, n_head * head_dim] f16, rows
// past n_tok readable) at positions pos0.. over the f16 caches (rows 0..pos0 + n_tok - 1 written), GQA.
// out_h [n_tok, n_head * head_dim] f16. Tensor cores (flash-attention tiles of 64 queries x 64 keys, online
// softmax, nothing of size n x n stored) when head_dim % 16 == 0 and head_dim <= 256 and !reference; else the
// scalar kernel (one warp per query and head), which is also the oracle.
void launch_attention_prefill(const uint16_t* q_h, const uint16_t* k_cache, const uint16_t* v_cache, int n_tok,
                              int pos0, int n_head, int n_head_kv, int head_dim, uint16_t* out_h, bool reference,
                              cudaStream_t s);
bool attention_prefill_uses_tensor_cores(int head_dim);
// The batched decode step's row-wise kernels (ops.cu): the single-sequence step's kernels (same arithmetic
// and order, launched with PDL, fused as there) with a row dimension, so that every row of a batched step
// equals the single-sequence step of its sequence. Rows of x, out [n_rows, n]; xq, xd, xs group-major.
void launch_rms_norm_batch(const float* x, const float* w, float* out, int n_rows, int n, float eps, int q_block,
                           int8_t* xq, float* xd, float* xs, cudaStream_t s);
// Rows of qkv [n_rows, q_dim + 2 kv_dim]: row r is sequence slots[r] at position pos[slots[r]] (already
// counted: the step's token is written at that row of the caches), caches at k_cache + slots[r] *
// slot_stride; partial: n_rows * n_head * n_split * (head_dim + 2) floats; out [n_rows, q_dim] and, with
// q_block > 0, its quantized form (the Wo input).
void launch_attention_batch(float* qkv, int n_rows, const float* bias, const rope_params& p, const int32_t* pos,
                            const int32_t* slots, int64_t slot_stride, uint16_t* k_cache, uint16_t* v_cache,
                            int n_split, float* partial, float* out, int q_block, int8_t* xq, float* xd, float* xs,
                            cudaStream_t s);
// gu [n_rows, 2 n_ff] -> out [n_rows, n_ff] (and quantized with xq non-null).
void launch_swiglu_batch(const float* gu, int n_rows, int64_t n_ff, float* out, int q_block, int8_t* xq, float* xd,
                         float* xs, cudaStream_t s);

// y[b] = (accumulate ? y[b] : 0) + W x[b] for b < n_rows (1..16), each weight byte read once for all rows:
// x [n_rows, n_in] f32 (plain formats) or xq/xd/xs group-major (integer formats); y rows y_stride apart.
// tensor_cores: for n_rows >= 2 and the formats matvec_mma_supported() covers, the mma kernels of
// matvec-mma.cu; else (and as their reference) the dp4a/FMA kernels of matvec-batch.cu.
void launch_matvec_batch(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                         const float* xs, float* y, int64_t y_stride, bool accumulate, bool tensor_cores,
                         cudaStream_t s);
bool matvec_mma_supported(const gpu_weight& w);
void launch_matvec_mma(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                       const float* xs, float* y, int64_t y_stride, bool accumulate, cudaStream_t s);
// Weight units each warp of the mma kernels keeps in flight: 8 or 4 (A/B in benchmarks); 0: per format.
// fragment_loads: Q8_0/Q4_0/F16/BF16 load weights in the MMA fragment layout instead of row-wise (A/B only);
// q4_0_shuffles: row-wise Q4_0 forms its fragments by quad shuffles instead of ldmatrix (A/B only);
// previous: Q4_K/Q8_0/Q4_0 run the register-staged kernels instead of the cp.async pipelined ones (A/B only);
// pipe_variant (A/B only): 1 = the pipelined kernels' other stage/occupancy choice (Q8_0 2 stages, Q4_0 4 stages for
// up to 8 sequences and 2 for more, Q4_K up to 8 sequences with 3 blocks per SM instead of 2), 2 = their alternative
// arithmetic (ALT in matvec-mma.cu). units or fragment_loads select the register-staged kernels too.
void set_mma_unroll(int units, bool fragment_loads, bool q4_0_shuffles, bool previous = false, int pipe_variant = 0);
constexpr int k_max_batch = 16;

}  // namespace memtile::cuda
