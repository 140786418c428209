// Launchers of the CUDA kernels (defined in the .cu files), callable from host C++ compiled by the C++
// compiler. Shapes are in elements; every pointer is device memory unless stated otherwise.
//
// Activations that feed integer-quantized weights are quantized per group of 32 elements:
//   xq: int8 [n], xd: float [n / 32] (scale, x ~ xd * xq), xs: float [n / 32] (xd * sum of the 32 xq).
// The matrix-vector kernels take dot products of the weight quants with xq by __dp4a and apply the weight
// scales and the group scale per block; xs carries the offset (min) terms of Q4_0, Q4_K and Q5_K.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace memtile::cuda {

// A weight matrix of n_out rows of n_in elements on the device, in the layout the matvec kernels read:
//   F32/F16/BF16: q = rows of n_in elements, row stride q_row_bytes; d = null.
//   Q5_K:         q = GGUF blocks (176 bytes, a multiple of 16) back to back; d = null.
//   Q4_K:         q = [n_out][n_in / 256][128] GGUF quant bytes; d = per row q4k_side_row_words(n_in / 256) words
//                 in groups of 4 super-blocks (80 bytes): their 4 x 4 scale/min words (word c of a super-block:
//                 bytes sc 2c, sc 2c+1, mn 2c, mn 2c+1, the 6-bit values of the sub-blocks of elements 64c..64c+63),
//                 then their 4 words f16 d | dmin << 16. A super-block's scale words are one aligned 16-byte load
//                 and its d/dmin word lies in the same 128-byte line or the next.
//   Q8_0:         q = [n_out][n_in] int8 quants; d = [n_out][n_in / 32] f16 scales.
//   Q4_0:         q = [n_out][n_in / 32][16] GGUF nibble bytes; d = [n_out][n_in / 32] f16 scales.
//   Q6_K:         q = per row the quants of its n_in / 128 halves (96 bytes each: 128 elements of a super-block),
//                 then its int8 scales (16 per super-block, 8 per half, in order); d = [n_out][n_in / 256] f16.
//                 Halves in groups of 32 (the tasks one warp takes with one instruction per 16-byte piece): piece k
//                 (bytes 16k..16k+15) of half j of a group of m halves lies at 16 (m k + j) in the group's 96 m
//                 bytes (q6k_half_byte), so that a warp's load of piece k of 32 halves reads 512 contiguous bytes.
//                 Within a half: the signed values v = q - 32 (6 bits) of elements 16s + 4c + i (s < 8: sub-block of
//                 the half, c < 4, i < 4) in byte i of word c of pieces 3g .. 3g + 2 (g = s / 4): byte i of word c of
//                 piece 3g + k (k < 3) has v of sub-block 4g + k in bits 2..7 (the byte is the signed 4v, a dp4a
//                 operand after one mask) and, in bits 0..1, bits 4-2k..5-2k of v of sub-block 4g + 3. So word c of
//                 the 6 pieces is everything an MMA lane with k slice 4c..4c+3 needs (16 contiguous bytes per row
//                 for the 4 lanes of a row).
// The Q4_K side array (layout above): words per row, and the word offsets of super-block b's scale words and
// of its d/dmin word within the row.
__host__ __device__ constexpr int64_t q4k_side_row_words(int64_t n_sb) {
    return (n_sb + 3) / 4 * 20;
}
template <class I>  // int in the kernels' inner loops, int64_t on the host
__host__ __device__ constexpr I q4k_sm_word(I b) {
    return (b >> 2) * 20 + (b & 3) * 4;
}
template <class I>
__host__ __device__ constexpr I q4k_dm_word(I b) {
    return (b >> 2) * 20 + 16 + (b & 3);
}

// Q6_K (layout above): offset in the row of byte o (0..95) of half j of n_half; of the 8 scale bytes of half j.
__host__ __device__ constexpr int64_t q6k_half_byte(int64_t j, int o, int64_t n_half) {
    const int64_t g = j >> 5, m = n_half - 32 * g < 32 ? n_half - 32 * g : 32;
    return 3072 * g + 16 * (m * (o >> 4) + (j & 31)) + (o & 15);
}
__host__ __device__ constexpr int64_t q6k_scale_byte(int64_t j, int64_t n_half) {
    return 96 * n_half + 8 * j;
}

struct gpu_weight {
    dtype type = dtype::f32;
    int64_t n_in = 0, n_out = 0;
    const uint8_t* q = nullptr;
    const uint16_t* d = nullptr;
    int64_t q_row_bytes = 0;
};

bool matvec_supported(dtype t);
bool matvec_uses_int8(dtype t);  // reads xq/xd/xs instead of x
// Bytes of q per row and of d per row in the device layout above.
int64_t device_q_row_bytes(dtype t, int64_t n_in);
int64_t device_d_row_elems(dtype t, int64_t n_in);
// Converts n_rows GGUF rows at src into the device layout (host memory; q and d sized by the functions above).
void repack_rows(dtype t, const uint8_t* src, int64_t n_in, int64_t n_rows, uint8_t* q, uint16_t* d);

// Block shape of a matvec launch: output rows per block and warps per block (sharing those rows' columns).
struct matvec_shape {
    int rows = 0, warps = 0;  // supported: rows 1 or 2, warps 1, 2 or 4
};
// The shape launch_matvec uses for w (or the forced one, when set).
matvec_shape default_matvec_shape(const gpu_weight& w);
// Forces one shape on every later launch_matvec ({0, 0}: back to the default); for benchmarks only.
void force_matvec_shape(matvec_shape shape);

// y[o] = (accumulate ? y[o] : 0) + sum_i W[o][i] x[i]. K formats need activations quantized with q_block 256
// (launch_quantize): Q4_K and Q6_K sum their sub-blocks in integers under the one activation scale per 256.
void launch_matvec(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                   bool accumulate, cudaStream_t s);
// q_block: elements per activation scale, 32 (as the CPU's q8_0, for Q8_0/Q4_0 weights) or 256 (as its q8_k,
// for the K formats); xd then repeats the scale for each group of 32 of a block.
void launch_quantize(const float* x, int64_t n, int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s);
// x = row *token of the embedding matrix, dequantized.
void launch_embed(const gpu_weight& w, const int32_t* token, float* x, cudaStream_t s);
// out = x / rms(x) * w ([n]); with xq non-null also the quantized out (n % 32 == 0).
void launch_rms_norm(const float* x, const float* w, float* out, int n, float eps, int q_block, int8_t* xq, float* xd,
                     float* xs, cudaStream_t s);

struct rope_params {
    int n_head, n_head_kv, head_dim, n_rot;
    bool neox;
    const float* freq;     // [n_rot / 2]: freq_base^(-2i / n_rot)
    const float* factors;  // [n_rot / 2] or null (theta_i / factor_i)
    int split_keys = 0;    // the decode attention's least keys per split (attn_split_chunk; 0: none)
};
// qkv: [q_dim + 2 kv_dim] (q, k, v back to back); adds bias ([same], nullable), rotates q and k at *pos and
// writes k and v as f16 into row *pos of the layer's caches ([n_ctx, kv_dim] each).
void launch_rope_kv(float* qkv, const float* bias, const rope_params& p, const int32_t* pos, uint16_t* k_cache,
                    uint16_t* v_cache, cudaStream_t s);
// Decode attention of one query token over cache rows 0..*pos, split over n_split key ranges (partial:
// n_head * n_split * (head_dim + 2) floats) and merged into out ([n_head, head_dim]); with q_block > 0 also
// quantizes out into xq/xd/xs (the Wo input, as launch_quantize). qkv, bias as launch_rope_kv, which runs
// first (RoPE and the cache write of position *pos; launch_attention_rope folds it into the attention kernel).
void launch_attention(float* qkv, const float* bias, const rope_params& p, const int32_t* pos, uint16_t* k_cache,
                      uint16_t* v_cache, int n_split, float* partial, float* out, int q_block, int8_t* xq, float* xd,
                      float* xs, cudaStream_t s);
// launch_attention after launch_rope_kv (its two halves, so that the merge can be chosen).
void launch_attention_split(float* qkv, const rope_params& p, const int32_t* pos, const uint16_t* k_cache,
                            const uint16_t* v_cache, int n_split, float* partial, float* out, int q_block, int8_t* xq,
                            float* xd, float* xs, cudaStream_t s);
// The same as one kernel: the last block of each chunk of heads (one head, or as many as one quantization unit of
// q_block 256 spans) merges the chunk's partial states and quantizes them (q_block > 0): no merge launch, the same
// bits. n_rows queries q_stride apart (decode: 1, 0), slots/slot_stride as the batched step (null: one sequence).
// counters: n_rows * attention_merge_counters(n_head), zero before the first launch (each launch leaves them zero).
// Returns false (nothing launched) when the head size and the quantization unit do not tile.
int attention_merge_counters(int n_head);
// The split count (1..n_split) of the decode attention (both steps) asked for n_split key ranges: n_split, except
// where one sequence's one-head kernels take these heads (attn_group's default) and n_head x n_split blocks exceed a
// wave of them on this device; there a partial last wave costs a whole one, so fewest_wave_splits' count
// (wave-splits.h). docs/cuda-log-s18-s31.md, "Session 27".
int attention_wave_splits(int n_head, int n_head_kv, int head_dim, int n_split);
bool launch_attention_fused(float* qkv, int64_t q_stride, int n_rows, const rope_params& p, const int32_t* pos,
                            const int32_t* slots, int64_t slot_stride, const uint16_t* k_cache, const uint16_t* v_cache,
                            int n_split, float* partial, unsigned* counters, float* out, int q_block, int8_t* xq,
                            float* xd, float* xs, cudaStream_t s);
// launch_rope_kv + launch_attention_split (counters null) or + launch_attention_fused (counters as there; where the
// shapes do not tile, the separate merge) with RoPE and the KV write folded into the attention kernel (one sequence):
// qkv is read before RoPE and left unchanged; the same bits as the separate kernels. early: the K/V rows of earlier
// positions are loaded before the PDL wait. Returns false (nothing launched) where the folded kernel does not exist
// (MEMTILE_CUDA_ATTN_KEYS forcing another keys-in-flight count than its 8). cluster: where a merge chunk's blocks (its
// heads x n_split) fit a cluster of 8, the merge through distributed shared memory of a thread-block cluster instead
// (no partials, counters or merge kernel; the same bits).
bool launch_attention_rope(const float* qkv, const float* bias, const rope_params& p, const int32_t* pos,
                           uint16_t* k_cache, uint16_t* v_cache, int n_split, float* partial, unsigned* counters,
                           float* out, int q_block, int8_t* xq, float* xd, float* xs, bool early, bool cluster,
                           cudaStream_t s);
// out[i] = silu(gu[i]) * gu[n_ff + i] and its quantized form (n_ff % 32 == 0 for xq).
void launch_swiglu(const float* gu, int64_t n_ff, float* out, int q_block, int8_t* xq, float* xd, float* xs,
                   cudaStream_t s);
// *token = argmax(logits) (lowest index on ties); then *pos += 1 (the step is complete). scratch: device memory
// of k_argmax_scratch words (launch_argmax_rows with one row: 64 slices of the row, then their merge).
constexpr int k_argmax_scratch = 2 * 16 * 64;
void launch_argmax(const float* logits, int n, int32_t* token, int32_t* pos, float* scratch, cudaStream_t s);

// Fills a weight in the device layout with random values valid for its format (scales small and finite).
void launch_fill_random(const gpu_weight& w, uint64_t seed, cudaStream_t s);
void launch_fill_f32(float* p, int64_t n, float v, cudaStream_t s);

// Median GB/s of a streaming 16-byte-load read over `bytes` of device memory (passes: repetitions timed).
double probe_read_gbs(uint64_t bytes, int passes);

}  // namespace memtile::cuda
