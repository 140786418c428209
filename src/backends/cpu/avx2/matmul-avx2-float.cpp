// AVX2 kernels for float weights (F32, F16, BF16) against f32 activations. Each weight vector of 8 elements
// is converted to f32 once and multiplied into `nt` token accumulators with FMA. Decode (nt = 1) keeps four
// independent accumulators so the FMA latency never limits the stream; tiles keep the same four per token,
// so the summation order, and thus each result, is the same whatever the number of tokens.
#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

template <class L>
struct float_kernel {
    static constexpr int tile = 4;

    // pf > 0 (decode only): prefetch the weight stream pf bytes ahead of the loads.
    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out, int64_t pf = 0) {
        constexpr int unroll = 4;  // the same for every nt: a token's sum must not depend on its batch
        const int64_t n = a.n_in;
        const float* x[nt];
        for (int j = 0; j < nt; j++) x[j] = a.f32 + (t0 + j) * n;
        __m256 acc[nt][unroll];
        for (int j = 0; j < nt; j++)
            for (int u = 0; u < unroll; u++) acc[j][u] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 * unroll <= n; i += 8 * unroll) {
            if (nt == 1 && pf > 0) prefetch_l2<8 * unroll * L::bytes>(row + i * L::bytes + pf);
            for (int u = 0; u < unroll; u++) {
                const __m256 wv = L::vec(row + (i + 8 * u) * L::bytes);
                for (int j = 0; j < nt; j++)
                    acc[j][u] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[j] + i + 8 * u), acc[j][u]);
            }
        }
        for (; i + 8 <= n; i += 8) {
            const __m256 wv = L::vec(row + i * L::bytes);
            for (int j = 0; j < nt; j++) acc[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[j] + i), acc[j][0]);
        }
        for (int j = 0; j < nt; j++) {
            for (int u = 1; u < unroll; u++) acc[j][0] = _mm256_add_ps(acc[j][0], acc[j][u]);
            float s = hsum(acc[j][0]);
            for (int64_t k = i; k < n; k++) s += L::one(row + k * L::bytes) * x[j][k];
            out[j] = s;
        }
    }
};

// Decode: the rows one by one, the same dot<1> as gemm_tiled (so the same results), with the weight stream
// prefetched when the rows are long. F16 rows of 4608+ elements decoded from DRAM at ~13 instead of ~22 GB/s
// per core: the f32 activations (18+ KiB) and a row's weights no longer fit L1 together, and the activation
// lines reloaded from L2 for every row starve the weight stream; prefetching it into L2 far enough ahead
// (16-64 KiB) restores ~22-25 GB/s. On short rows it cost a few % (docs/cpu.md, "Software prefetch").
// Prefetch stops at the calling thread's last row.
constexpr int64_t k_prefetch_min_row_bytes = 24 * 1024;  // activations + weights of one row

template <class L>
void gemm_float(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    if (n_tok != 1) {
        detail::gemm_tiled<float_kernel<L>>(w, a, n_tok, y, ys, r0, r1);
        return;
    }
    const int64_t pf = w.n_in * (4 + L::bytes) > k_prefetch_min_row_bytes ? detail::decode_prefetch_bytes() : 0;
    const uint8_t* end = w.data + size_t(r1) * w.row_bytes;
    for (int64_t o = r0; o < r1; o++) {
        const uint8_t* row = w.data + size_t(o) * w.row_bytes;
        float_kernel<L>::template dot<1>(row, a, 0, y + o, row + w.row_bytes + pf <= end ? pf : 0);
    }
}

}  // namespace

void gemm_f32(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    gemm_float<f32_loader>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_f16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    gemm_float<f16_loader>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_bf16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    gemm_float<bf16_loader>(w, a, n_tok, y, ys, r0, r1);
}

}  // namespace memtile::cpu::avx2
