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
// Bits 22, 23: cuda-backend.h. The products at their default shapes by matvec_kq_lean_kernel (32-bit index arithmetic,
// constants from the host, no task loop where a thread has one task; docs/cuda-decode-log.md, "Session 8 (branch
// gkq8)"): Q4_K (2 x 2; not the pair's Q/K; measured slower, off) / Q6_K (down 2 x 4, output and other 2 x 1; not the
// pair's V; default on) / the pair launch (default on).
constexpr unsigned k_qkm_lean_q4k = 1u << 24;
constexpr unsigned k_qkm_lean_q6k = 1u << 25;
constexpr unsigned k_qkm_lean_pair = 1u << 26;  // the pair launch (with k_qkm_pair_v2, V first) in lean blocks

}  // namespace memtile::cuda
