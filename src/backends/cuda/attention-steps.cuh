// The decode attention's per-key arithmetic and RoPE pieces shared by its one-head kernels (attention-decode.cu) and
// its GQA blocks (attention-gqa.cuh): one definition, so that every kernel gives the same bits.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/device-common.cuh"

namespace memtile::cuda::detail {

// Element pair (a, b) of pair i of a head as the decode RoPE takes it: v heads (is_v) and the pairs past n_rot / 2 pass
// through; rotated pairs are adjacent (normal) or n_rot / 2 apart (NeoX).
__device__ __forceinline__ void rope_pair(const rope_params& p, int i, bool is_v, int& a, int& b) {
    const int half = p.n_rot / 2;
    if (is_v) {
        a = 2 * i;
        b = 2 * i + 1;
    } else if (i < half) {
        a = p.neox ? i : 2 * i;
        b = p.neox ? i + half : 2 * i + 1;
    } else {
        a = p.n_rot + 2 * (i - half);
        b = a + 1;
    }
}
// sin and cos of pair i (< n_rot / 2) at position pos.
__device__ __forceinline__ void rope_sincos(const rope_params& p, int pos, int i, float& sn, float& cs) {
    float theta = float(pos) * p.freq[i];
    if (p.factors) theta /= p.factors[i];
    sincosf(theta, &sn, &cs);
}
// The rotation of one pair (one function for rope_kv_kernel and the attention with RoPE folded in: the same bits).
// Every operation is an explicit _rn intrinsic: nvcc and ptxas may contract a plain a * b + c into an FMA or not,
// depending on the surrounding kernel, which gave kernels sharing this code different bits (session 7, gatn).
__device__ __forceinline__ void rope_rotate(float& x0, float& x1, float sn, float cs) {
    const float r0 = __fmaf_rn(x0, cs, -__fmul_rn(x1, sn)), r1 = __fmaf_rn(x0, sn, __fmul_rn(x1, cs));
    x0 = r0;
    x1 = r1;
}

// One key of a warp's online softmax: score s = q . k (lane holds dims lane + 32i, q pre-scaled), then the running
// maximum m, sum l and accumulator acc. Shared by every decode attention kernel, so they all give the same bits (the
// products and sums as explicit _rn intrinsics, as rope_rotate). attn_gqa_keys (attention-gqa.cuh) writes the same
// expressions out for a tile of keys at once: a change here must be made there too (the GQA checks compare the two).
template <int ND>
__device__ __forceinline__ void attn_key_step(const float (&qr)[ND], const __half (&kh)[ND], const __half (&vh)[ND],
                                              int lane, int hd, float& m, float& l, float (&acc)[ND]) {
    float s = 0, vv[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) {
        const int d = lane + 32 * i;
        if (d < hd) s = __fmaf_rn(qr[i], __half2float(kh[i]), s);
        vv[i] = d < hd ? __half2float(vh[i]) : 0.0f;
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = __fmaf_rn(l, corr, p);
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = __fmaf_rn(acc[i], corr, __fmul_rn(p, vv[i]));
    m = m_new;
}
// A warp's query (lane's dims lane + 32i of q, scaled by 1 / sqrt(hd); zeros past hd or for an idle warp) and zeroed
// accumulator, for attn_key_step.
template <int ND>
__device__ __forceinline__ void attn_query_init(const float* q, bool active, int lane, int hd, float (&qr)[ND],
                                                float (&acc)[ND]) {
    const float scale = rsqrtf(float(hd));
#pragma unroll
    for (int i = 0; i < ND; i++) {
        const int d = lane + 32 * i;
        qr[i] = active && d < hd ? __fmul_rn(q[d], scale) : 0.0f;
        acc[i] = 0;
    }
}

}  // namespace memtile::cuda::detail
