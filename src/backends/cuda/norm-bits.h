// Bits of the decode step's RMSNorm mode (cuda-backend.h, set_norm_fusion / MEMTILE_CUDA_NORM; norm-fused.h) for the
// consumers in units of 256 (the K formats; docs/cuda-decode-log.md, "Session 11 (branch gnk11)"). Bits 0-1 are the
// modes 0-3 of the consumers in groups of 32. No includes: read by the public header and by the kernels' translation
// units.
#pragma once

namespace memtile::cuda {

constexpr int k_norm_fusion_k = 4;         // the K formats' norms from parts in units of 256
constexpr int k_norm_fusion_k_pair56 = 8;  // with it: the pair launch's scaled kernel at 56 registers instead of 48

}  // namespace memtile::cuda
