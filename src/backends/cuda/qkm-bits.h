// Bits of the decode fusion mask (cuda-backend.h, set_decode_fusion / MEMTILE_CUDA_FUSE) that select the Q4_K_M product
// forms of matvec-qkm.h (docs/cuda-decode-log.md, "Session 7 (branch gqkm)"); every form is bit-equal to launch_matvec.
// No includes: read by the public header and by the kernels' translation unit.
#pragma once

namespace memtile::cuda {

constexpr unsigned k_qkm_pair = 1u << 8;           // Q4_K Q/K and Q6_K V in one launch (default on)
constexpr unsigned k_qkm_pair_v_last = 1u << 9;    // variant: the V blocks after the Q/K blocks
constexpr unsigned k_qkm_pair_v2 = 1u << 10;       // variant: V at 2 rows per warp, 80 registers (default on)
constexpr unsigned k_qkm_pair_nocap = 1u << 11;    // variant: V at 1 row per warp without the 64-register cap
constexpr unsigned k_qkm_pair_qk4 = 1u << 12;      // variant (with v2): Q/K at 4 rows x 2 warps
constexpr unsigned k_qkm_small_4x2 = 1u << 13;     // Q4_K, n_in < 8,192, n_out <= 8,192 (Wo, Q/K/V) at 4 x 2
constexpr unsigned k_qkm_gate_up_4x2 = 1u << 14;   // Q4_K gate/up (n_in < 8,192, n_out > 8,192) at 4 x 2
constexpr unsigned k_qkm_gate_up_3x2 = 1u << 15;   // the same at 3 x 2
constexpr unsigned k_qkm_gate_up_loop = 1u << 16;  // the same (n_in <= 4,096) in loops over row pairs
constexpr unsigned k_qkm_down_u4 = 1u << 17;       // Q4_K down (n_in >= 8,192) at 2 x 2, 4 tasks in flight
constexpr unsigned k_qkm_down_4x2 = 1u << 18;      // Q4_K down at 4 x 2
constexpr unsigned k_qkm_all_1x2 = 1u << 19;       // every other Q4_K product at 1 x 2
constexpr unsigned k_qkm_q6_down_64 = 1u << 20;    // Q6_K down (4 warps per row) capped at 64 registers
constexpr unsigned k_qkm_q6_down_3 = 1u << 21;     // Q6_K down at 3 rows per block
// Each thread's first task loaded before the PDL wait (docs/cuda-decode-log.md, "Session 8 (branch gkq8)"), at the
// default shapes: the down products (n_in >= 8,192: Q4_K 2 x 2, Q6_K 2 x 4), the Q4_K gate/up (n_out > 8,192), the
// other Q4_K products and the pair launch (Wo, Q/K/V; the pair only with k_qkm_pair_v2, V first), the Q6_K output
// (n_out > 32,768, 2 x 1). Bits 22, 23: cuda-backend.h.
constexpr unsigned k_qkm_early_down = 1u << 24;
constexpr unsigned k_qkm_early_gate_up = 1u << 25;
constexpr unsigned k_qkm_early_small = 1u << 26;
constexpr unsigned k_qkm_early_output = 1u << 27;
// The Q4_K products at 2 x 2 (the plain shape; the pair's Q/K with k_qkm_pair_v2, V first) with a warp's tasks in lane
// pairs (contiguous 512-byte loads; matvec-qkm.cu, q4k_half_tasks).
constexpr unsigned k_qkm_q4k_half = 1u << 28;
constexpr unsigned k_qkm_q4k_half_u2 = 1u << 29;  // with it: the down (n_in >= 8,192) unrolled by 2

}  // namespace memtile::cuda
