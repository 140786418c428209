// The decode RMSNorm without its whole-row reduction on the critical path (docs/cuda-decode-log.md, "Session 9 (branch
// gnf9)"). Quantizing in groups is scale-invariant, so the int8 values of x * g need no sum of squares: a lean kernel
// (or, mode 2, the product that writes x: Wo or down, whose thread-block clusters own a group's 32 rows) leaves the
// norm's parts (norm-parts.cuh: the quants of x * g, their unscaled group scales and sums, each group's sum of
// squares), and the Q8_0 / Q4_0 consumers form the norm's scale from the group sums after their wait and apply it to
// each group scale. Not the bits of rms_norm_kernel (norm-parts.cuh); consumers reading int8 in groups of 32. Where the
// single step's consumers cannot read parts, and in the batched step, launch_rms_norm_parts_rows forms the same values
// (decoder-state.h's norm_parts_consumers), so that every path keeps one rounding. Opt-in (set_norm_fusion).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/norm-bits.h"

namespace memtile::cuda {

// The parts of the RMSNorm of one row of n elements (n % 32 == 0), device memory.
struct norm_parts {
    const float* g = nullptr;  // [n] the norm's weight
    int8_t* q = nullptr;       // [n] quants of x * g
    float* d = nullptr;        // [n / 32] their group scales, unscaled
    float* sq = nullptr;       // [n / 32] each group's sum of quants
    float* ss = nullptr;       // [n / 32] each group's sum of squares of x
    float eps = 0;
};

// The decode step's RMSNorm mode (set_norm_fusion in cuda-backend.h, or MEMTILE_CUDA_NORM=MODE), read when a graph is
// captured. Bits 0-1, the consumers in groups of 32: 0 rms_norm_kernel; 1 the parts kernel before each consumer that
// reads parts (measured faster); 2 the parts left by the Wo / down products where they can (launch_matvec_norm;
// measured slower); 3 (diagnostic) the products leave them but the RMSNorm kernels still run and the consumers read
// their output (the cost of the products' epilogue; the bits of mode 0). Modes 1 and 2 have the same bits.
// Bit k_norm_fusion_k (norm-bits.h), the consumers in units of 256 (the K formats): the parts kernel of units
// (launch_norm_parts_k) before consumers that read them (launch_matvec_scaled_k, launch_matvec_pair_scaled), else
// launch_rms_norm_parts_rows_k; k_norm_fusion_k_pair56: the pair's scaled kernel at 56 registers (an A/B).
int norm_fusion_mode();
// Modes 1 and 2: the consumers in groups of 32 read parts (where decoder-state.h's norm_parts_* hold).
inline bool norm_parts_read() {
    return (norm_fusion_mode() & 3) == 1 || (norm_fusion_mode() & 3) == 2;
}
// Bit k_norm_fusion_k: the norms of consumers in units of 256 have the parts' arithmetic (norm_parts_k_consumers).
inline bool norm_parts_k_read() {
    return (norm_fusion_mode() & k_norm_fusion_k) != 0;
}

// Whether w can be a consumer of norm parts (Q8_0 / Q4_0 in a block shape of launch_matvec_scaled).
bool matvec_scaled_supported(const gpu_weight& w);
// y = (accumulate ? y : 0) + W rmsnorm(x) from the parts of x: launch_matvec's block shape and sums.
void launch_matvec_scaled(const gpu_weight& w, const norm_parts& p, float* y, bool accumulate, cudaStream_t s);
// y += W x (launch_matvec with accumulate, the same bits) and the parts of the RMSNorm of the new y (w.n_out elements).
// Returns false (nothing launched) where the format or block shape has no such kernel.
bool launch_matvec_norm(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                        const norm_parts& p, cudaStream_t s);
// The batched step's RMSNorm where the single step reads parts (rows of x [n_rows, n], n % 32 == 0): xq, xd, xs
// group-major over the rows as launch_rms_norm_batch, with the values a consumer of parts forms (norm-parts.cuh), and
// out (f32).
void launch_rms_norm_parts_rows(const float* x, const float* g, float* out, int n_rows, int n, float eps, int8_t* xq,
                                float* xd, float* xs, cudaStream_t s);
// The parts of the RMSNorm of x ([n], n % 32 == 0) by a kernel of their own (the first layer, or after a product
// without the epilogue).
void launch_norm_parts(const float* x, int n, const norm_parts& p, cudaStream_t s);

// Units of 256 (bit k_norm_fusion_k; norm-parts.cuh): the parts of x ([n], n % 256 == 0) in units (q [n], d and sq [n /
// 32]: the unit's unscaled scale in each of its groups, each group's sum of quants; ss [n / 256] the units' sums of
// squares), a warp per unit.
void launch_norm_parts_k(const float* x, int n, const norm_parts& p, cudaStream_t s);
// The batched step's (and the single step's, where a consumer cannot read parts) RMSNorm of consumers in units of 256:
// as launch_rms_norm_parts_rows, the values a consumer of launch_norm_parts_k's parts forms.
void launch_rms_norm_parts_rows_k(const float* x, const float* g, float* out, int n_rows, int n, float eps, int8_t* xq,
                                  float* xd, float* xs, cudaStream_t s);
// Whether w has a consumer of the parts in units of 256 (Q4_K at 2 x 2 in lane pairs, Q6_K at 2 x 1; one task per
// thread: n_in <= 4,096), and the product: y = (accumulate ? y : 0) + W rmsnorm(x), the bits of the plain kernel on
// launch_rms_norm_parts_rows_k's values.
bool matvec_scaled_k_supported(const gpu_weight& w);
void launch_matvec_scaled_k(const gpu_weight& w, const norm_parts& p, float* y, bool accumulate, cudaStream_t s);
// The pair launch of Q/K (Q4_K) and V (Q6_K) on the parts in units of 256 (matvec_pair_lean_kernel's blocks).
bool matvec_pair_scaled_supported(const gpu_weight& a, const gpu_weight& b);
void launch_matvec_pair_scaled(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, const norm_parts& p,
                               cudaStream_t s);

}  // namespace memtile::cuda
