// AVX2 entry points of the Q4_K, Q5_K and Q6_K kernels (simd/int8-kernels-256.h) and the AVX2 kernel table.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {

void gemm_q4_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<simd256::q45_k_kernel<false, int8_ops>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_q5_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<simd256::q45_k_kernel<true, int8_ops>>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_q6_k(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<simd256::q6_k_kernel<int8_ops>>(w, a, n_tok, y, ys, r0, r1);
}

const detail::kernel_set k_avx2_set = {
    "avx2",    gemm_f32,  gemm_f16,  gemm_bf16,     gemm_q8_0,     gemm_q4_0,
    gemm_q4_k, gemm_q5_k, gemm_q6_k, quantize_q8_0, quantize_q8_k,
};

}  // namespace memtile::cpu::avx2

namespace memtile::cpu::detail {

const kernel_set* avx2_kernels() {
    return &avx2::k_avx2_set;
}

}  // namespace memtile::cpu::detail
