// Launchers of the kernels of the prefill pass (one sequence, n tokens, tensor-core GEMMs through cuBLAS) and
// of the batched decode step (B sequences, one token each), defined in prefill-ops.cu, attention-prefill.cu and
// matvec-batch.cu. Row-major activations: row r of an [n_rows, n] buffer starts at r * n. Quantized activations
// follow cuda-kernels.h per row: xq [n_rows, n], xd and xs [n_rows, n / 32].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// Rows [r0, r0 + n_rows) of w dequantized to f16: out [n_rows, w.n_in] (w.n_in % 8 == 0).
void launch_dequant_f16(const gpu_weight& w, int64_t r0, int64_t n_rows, uint16_t* out, cudaStream_t s);
// x [n, w.n_in] f32 = embedding rows tokens[0..n) (device array; w.n_in % 8 == 0).
void launch_embed_rows(const gpu_weight& w, const int32_t* tokens, int n, float* x, cudaStream_t s);
// Per row of x [n_rows, n]: v = x / rms(x) * w, written as f16 to out_h when non-null, else as f32 to out and,
// with xq non-null, quantized (q_block 32 or 256 as launch_rms_norm, n % 32 == 0).
void launch_rms_norm_rows(const float* x, const float* w, int n_rows, int n, float eps, uint16_t* out_h, float* out,
                          int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s);
// Quantizes each row of x [n_rows, n] (groups never cross rows; n % 32 == 0).
void launch_quantize_rows(const float* x, int n_rows, int64_t n, int q_block, int8_t* xq, float* xd, float* xs,
                          cudaStream_t s);
// Bias, RoPE and the KV write for n_rows rows of qkv [n_rows, q_dim + 2 kv_dim]. Row r has position
// pos0 + r and writes into k_cache / v_cache when slots is null (prefill); else position pos[slots[r]] in the
// caches at k_cache + slots[r] * slot_stride (batched decode). q_h (nullable): rotated q as f16 [n_rows, q_dim].
void launch_rope_kv_rows(float* qkv, int n_rows, const float* bias, const rope_params& p, int pos0, const int32_t* pos,
                         const int32_t* slots, int64_t slot_stride, uint16_t* k_cache, uint16_t* v_cache, uint16_t* q_h,
                         cudaStream_t s);
// Per row of gu [n_rows, 2 n_ff] (gate then up): silu(gate) * up, as f16 to out_h when non-null, else as f32 to
// out [n_rows, n_ff] and, with xq non-null, quantized per row.
void launch_swiglu_rows(const float* gu, int n_rows, int64_t n_ff, uint16_t* out_h, float* out, int q_block, int8_t* xq,
                        float* xd, float* xs, cudaStream_t s);
// token[b] = argmax of logits row b ([n_rows, n]; ties: lowest id); then pos[slots[b]] += 1.
void launch_argmax_rows(const float* logits, int n_rows, int n, int32_t* token, int32_t* pos, const int32_t* slots,
                        cudaStream_t s);

// Causal attention of one sequence's n_tok queries (q_h [n_tok rounded up to 64, n_head * head_dim] f16, rows
// past n_tok readable) at positions pos0.. over the f16 caches (rows 0..pos0 + n_tok - 1 written), GQA.
// out_h [n_tok, n_head * head_dim] f16. Tensor cores (flash-attention tiles of 64 queries x 64 keys, online
// softmax, nothing of size n x n stored) when head_dim % 16 == 0 and head_dim <= 256 and !reference; else the
// scalar kernel (one warp per query and head), which is also the oracle.
void launch_attention_prefill(const uint16_t* q_h, const uint16_t* k_cache, const uint16_t* v_cache, int n_tok,
                              int pos0, int n_head, int n_head_kv, int head_dim, uint16_t* out_h, bool reference,
                              cudaStream_t s);
bool attention_prefill_uses_tensor_cores(int head_dim);
// Decode attention of B sequences: q rows q_stride apart (row b: n_head * head_dim f32 of sequence slots[b],
// position pos[slots[b]] already written), caches at k_cache + slots[b] * slot_stride; partial: B * n_head *
// n_split * (head_dim + 2) floats; out [B, n_head * head_dim] f32.
void launch_attention_batch(const float* q, int64_t q_stride, int n_rows, const uint16_t* k_cache,
                            const uint16_t* v_cache, int64_t slot_stride, const int32_t* pos, const int32_t* slots,
                            int n_head, int n_head_kv, int head_dim, int n_split, float* partial, float* out,
                            cudaStream_t s);

// y[b] = (accumulate ? y[b] : 0) + W x[b] for b < n_rows (1..16), each weight byte read once for all rows:
// x [n_rows, n_in] f32 (plain formats) or xq/xd/xs per row (integer formats); y rows y_stride apart.
// tensor_cores: for n_rows >= 2 and the formats matvec_mma_supported() covers, the mma kernels of
// matvec-mma.cu; else (and as their reference) the dp4a/FMA kernels of matvec-batch.cu.
void launch_matvec_batch(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                         const float* xs, float* y, int64_t y_stride, bool accumulate, bool tensor_cores,
                         cudaStream_t s);
bool matvec_mma_supported(const gpu_weight& w);
void launch_matvec_mma(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                       const float* xs, float* y, int64_t y_stride, bool accumulate, cudaStream_t s);
constexpr int k_max_batch = 16;

}  // namespace memtile::cuda
