// AVX-512 path, integer formats: the shared 256-bit kernels (simd/int8-kernels-256.h) with the u8 x s8 steps
// done by AVX512-VNNI on 256-bit vectors (AVX512VL): vpdpbusd sums four u8 * s8 products straight into
// int32 (Q8_0/Q4_0), and vpdpwssd fuses the K formats' per-sub-block scale multiply with the accumulation.
// Activations are quantized by the AVX2 quantizers (every AVX-512 CPU has AVX2). Also holds the table.
#include "backends/cpu/avx512/avx512-common.h"
#include "backends/cpu/simd/int8-kernels-256.h"

namespace memtile::cpu::avx2 {
// Defined in avx2/matmul-avx2-legacy.cpp (declared here rather than through avx2-common.h so that no AVX2
// header code is compiled with the AVX-512 flags).
void quantize_q8_0(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);
void quantize_q8_k(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);
}  // namespace memtile::cpu::avx2

namespace memtile::cpu::avx512 {
namespace {

struct vnni_ops {
    static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
    static __m256i dot_u8s8_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale) {
        return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), scale);
    }
};

template <class K>
void gemm(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    detail::gemm_tiled<K>(w, a, n_tok, y, ys, r0, r1);
}

const detail::kernel_set k_avx512_set = {
    "avx512-vnni",
    gemm_f32,
    gemm_f16,
    gemm_bf16,
    gemm<simd256::legacy_kernel<simd256::q8_0_weights, vnni_ops>>,
    gemm<simd256::legacy_kernel<simd256::q4_0_weights, vnni_ops>>,
    gemm<simd256::q45_k_kernel<false, vnni_ops>>,
    gemm<simd256::q45_k_kernel<true, vnni_ops>>,
    gemm<simd256::q6_k_kernel<vnni_ops>>,
    avx2::quantize_q8_0,
    avx2::quantize_q8_k,
};

}  // namespace
}  // namespace memtile::cpu::avx512

namespace memtile::cpu::detail {

const kernel_set* avx512_kernels() {
    return &avx512::k_avx512_set;
}

}  // namespace memtile::cpu::detail
