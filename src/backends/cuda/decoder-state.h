// The uploaded model as the prefill and batched-decode paths (prefill.cpp) see it: weights in the device layout
// of cuda-kernels.h, per layer, plus what the decode step's RoPE needs. Copied from the decoder's own tables
// (decoder.cpp), pointers into its device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "backends/cuda/cuda-kernels.h"
#include "models/model-config.h"

namespace memtile::cuda {

// A product whose output columns start at `offset` of the destination rows (Q/K/V and gate/up share one).
struct view_part {
    gpu_weight w;
    int64_t offset = 0;
};

struct layer_view {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* bias = nullptr;  // [q_dim + 2 kv_dim] or null
    std::vector<view_part> qkv, gate_up;
    gpu_weight wo, down;
};

struct model_view {
    const model_config* cfg = nullptr;
    std::vector<layer_view> layers;
    gpu_weight tok_embd, output;
    const float* output_norm = nullptr;
    const float* freq = nullptr;     // [n_rot / 2]
    const float* factors = nullptr;  // [n_rot / 2] or null
};

// Activation quantization block of the consumers of one activation: 256 (one scale per 256, as the CPU
// engine's q8_k) when any is a K format, else 32 (its q8_0), so that integer dot products equal the CPU's.
inline int consumers_q_block(const std::vector<view_part>& consumers) {
    for (const auto& p : consumers)
        if (p.w.type == dtype::q4_k || p.w.type == dtype::q5_k || p.w.type == dtype::q6_k) return 256;
    return 32;
}

// Whether a norm with these consumers has the arithmetic of norm-parts.cuh in set_norm_fusion's modes 1 and 2 (int8
// consumers in groups of 32): the single-sequence step forms it from parts or by rms_norm_parts_rows, the batched step
// by rms_norm_parts_rows, so that a batch's rows keep the single step's bits.
inline bool norm_parts_consumers(const std::vector<view_part>& consumers, int64_t n_embd) {
    if (n_embd % 32 != 0 || consumers.empty()) return false;
    for (const auto& p : consumers)
        if (!matvec_uses_int8(p.w.type)) return false;
    return consumers_q_block(consumers) == 32;
}

// Whether a norm with these consumers has the arithmetic of norm-parts.cuh in units of 256 with set_norm_fusion's bit
// k_norm_fusion_k (int8 consumers whose activation is quantized per 256: the K formats), in both steps as above.
inline bool norm_parts_k_consumers(const std::vector<view_part>& consumers, int64_t n_embd) {
    if (n_embd % 256 != 0 || consumers.empty()) return false;
    for (const auto& p : consumers)
        if (!matvec_uses_int8(p.w.type)) return false;
    return consumers_q_block(consumers) == 256;
}

// Key ranges of the split-K decode attention for a context of n_ctx positions (the single-sequence and batched steps
// use the same count, so that a batch of one equals the single step): n_ctx / 128 in 1..32 as attention_wave_splits
// fits it to this device's waves for c's heads, or MEMTILE_CUDA_SPLITS when set (1..32; A/B benchmarks). Defined in
// decoder.cpp.
int attention_splits(uint32_t n_ctx, const model_config& c);

// The least keys per split of the decode attention (rope_params::split_keys, both steps): k_attention_split_keys, or
// MEMTILE_CUDA_SPLIT_KEYS when set (0 .. 2^20; 0: every split from the first key, the cut before session 39; A/B
// benchmarks). Read when a decoder is made. 64 since session 39 (docs/cuda.md): at the default context of 4,096 a
// short sequence fills a few splits of the 32 instead of all, +2.8 % tok/s at depth 0 and level at 600 and 4,096
// positions (H100, llama3-8b Q4_K_M; 32 read the same, 128 less), and every model-level check passed at 64.
constexpr int k_attention_split_keys = 64;
int attention_split_keys();

}  // namespace memtile::cuda
