// The K-format consumers of the RMSNorm parts in units of 256 (norm-fused.h, mode bit k_norm_fusion_k;
// docs/cuda-decode-log.md "Session 11 (branch gnk11)"): the Q4_K_M step's Q/K/V (Q4_K lane pairs, or the Q4_K + Q6_K
// pair launch), gate/up (Q4_K lane pairs) and output (Q6_K lean 2 x 1) products, each as its plain kernel with the
// norm's scale formed after the wait and applied to each activation scale, at the plain kernel's blocks per SM (ptxas
// -v, sm_90a): Q4_K lane pairs 54 registers under __launch_bounds__ (.., 9) (plain 56: 9 blocks of 4 warps; at (.., 8)
// 62 and unbounded 48, mode bits k_norm_fusion_k_q4k62 / _q4k48), Q6_K lean 2 x 1 56 (plain 52: also 9 blocks; at (..,
// 9) ptxas spilled 8 bytes), the pair 48 at (.., 10) with 20 bytes spilled (plain 48: 10 blocks; unbounded 56: 9
// blocks, mode bit k_norm_fusion_k_pair56 for the A/B). gnf9's Q8_0 consumers lost speed when they took more registers.
#include "backends/cuda/matvec-lean.cuh"
#include "backends/cuda/matvec-q4k.cuh"
#include "backends/cuda/matvec-qkm.h"
#include "backends/cuda/norm-fused.h"

namespace memtile::cuda {
namespace {

using namespace detail;

// MINB 9: 54 registers; 8: 62 (k_norm_fusion_k_q4k62); 0: 48 (k_norm_fusion_k_q4k48).
template <int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_q4k_lp_scaled_kernel(q4k_args a, norm_parts p, float* y, int accumulate) {
    q4k_lp_block<true, true>(a, int(blockIdx.x), p.q, p.d, p.sq, y, accumulate, p.ss, p.eps);
}

__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q6k_lean_scaled_kernel(kq_lean_args a, norm_parts p, float* y, int accumulate) {
    kq_lean_block<dtype::q6_k, 2, 1, true, true>(a, int(blockIdx.x), p.q, p.d, p.sq, y, accumulate, p.ss, p.eps);
}

// matvec_pair_lean_kernel (matvec-qkm.cu: the V blocks first) on norm parts; MINB 10: 48 registers, 0: 56.
template <int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_pair_lean_scaled_kernel(kq_lean_args a, float* ya, kq_lean_args b, float* yb, int nb, norm_parts p) {
    const int blk = int(blockIdx.x);
    if (blk < nb)
        kq_lean_block<dtype::q6_k, 2, 1, true, true>(b, blk, p.q, p.d, p.sq, yb, 0, p.ss, p.eps);
    else
        kq_lean_block<dtype::q4_k, 2, 2, true, true>(a, blk - nb, p.q, p.d, p.sq, ya, 0, p.ss, p.eps);
}

// One task per thread and row at the default shape: Q4_K 2 x 2 (64 tasks of 64), Q6_K 2 x 1 (32 tasks of 128).
bool q6k_one(const gpu_weight& w, kq_lean_args& a) {
    const matvec_shape sh = default_matvec_shape(w);
    return w.type == dtype::q6_k && w.n_in % 256 == 0 && w.n_in <= 4096 && sh.rows == 2 && sh.warps == 1 &&
           lean_args(w, a);
}
bool q4k_one(const gpu_weight& w, q4k_args& a) {
    return w.n_in <= 4096 && default_matvec_shape(w).warps == 2 && q4k_args_of(w, a);
}

}  // namespace

bool matvec_scaled_k_supported(const gpu_weight& w) {
    q4k_args a;
    kq_lean_args b;
    return q4k_one(w, a) || q6k_one(w, b);
}

void launch_matvec_scaled_k(const gpu_weight& w, const norm_parts& p, float* y, bool accumulate, cudaStream_t s) {
    q4k_args a;
    kq_lean_args b;
    const int acc = accumulate ? 1 : 0;
    if (q4k_one(w, a))
        launch((norm_fusion_mode() & k_norm_fusion_k_q4k62)   ? matvec_q4k_lp_scaled_kernel<8>
               : (norm_fusion_mode() & k_norm_fusion_k_q4k48) ? matvec_q4k_lp_scaled_kernel<0>
                                                              : matvec_q4k_lp_scaled_kernel<9>,
               unsigned((w.n_out + 3) / 4), 32 * k_block_warps, s, a, p, y, acc);
    else if (q6k_one(w, b))
        launch(matvec_q6k_lean_scaled_kernel, unsigned((w.n_out + 7) / 8), 32 * k_block_warps, s, b, p, y, acc);
}

bool matvec_pair_scaled_supported(const gpu_weight& a, const gpu_weight& b) {
    kq_lean_args la, lb;
    return matvec_pair_supported(a, b) && a.n_in <= 4096 && lean_args(a, la) && lean_args(b, lb);
}

void launch_matvec_pair_scaled(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const norm_parts& p,
                               cudaStream_t s) {
    kq_lean_args la, lb;
    if (!lean_args(a, la) || !lean_args(b, lb)) return;
    const int na = int((a.n_out + 3) / 4), nb = int((b.n_out + 7) / 8);
    const bool wide = norm_fusion_mode() & k_norm_fusion_k_pair56;
    launch(wide ? matvec_pair_lean_scaled_kernel<0> : matvec_pair_lean_scaled_kernel<10>, unsigned(na + nb),
           32 * k_block_warps, s, la, ya, lb, yb, nb, p);
}

}  // namespace memtile::cuda
