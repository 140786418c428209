// Bits of the decode step's RMSNorm mode (cuda-backend.h, set_norm_fusion / MEMTILE_CUDA_NORM; norm-fused.h) for the
// consumers in units of 256 (the K formats; docs/cuda-decode-log.md, "Session 11 (branch gnk11)"). Bits 0-1 are the
// modes 0-3 of the consumers in groups of 32. No includes: read by the public header and by the kernels' translation
// units.
#pragma once

namespace memtile::cuda {

constexpr int k_norm_fusion_k = 4;         // the K formats' norms from parts in units of 256
constexpr int k_norm_fusion_k_pair56 = 8;  // with it: the pair launch's scaled kernel at 56 registers instead of 48
constexpr int k_norm_fusion_k_q4k62 =
    16;  // with it: the Q4_K lane-pair scaled kernel at 62 registers (8 blocks per SM)
constexpr int k_norm_fusion_k_q4k48 = 32;  // with it: the same unbounded (ptxas: 48 registers)
// With k_norm_fusion_k: no parts kernel and no scaled consumers; the single step's norms too are
// rms_norm_parts_rows_k (the batched step's kernel, B=8 +2 % over rms_norm_batch; the single step not measured).
constexpr int k_norm_fusion_k_rows = 64;

}  // namespace memtile::cuda
