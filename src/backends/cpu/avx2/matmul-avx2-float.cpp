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

    template <int nt>
    static void dot(const uint8_t* row, const act_view& a, int64_t t0, float* out) {
        constexpr int unroll = 4;  // the same for every nt: a token's sum must not depend on its batch
        const int64_t n = a.n_in;
        const float* x[nt];
        for (int j = 0; j < nt; j++) x[j] = a.f32 + (t0 + j) * n;
        __m256 acc[nt][unroll];
        for (int j = 0; j < nt; j++)
            for (int u = 0; u < unroll; u++) acc[j][u] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 * unroll <= n; i += 8 * unroll) {
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

// Decode of long rows. Rows of 4608+ F16 elements decoded from DRAM at ~13 instead of ~22 GB/s per core (8192:
// ~9.5): the f32 activations (18+ KiB) and a row's weights no longer fit the 32 KiB L1 together, so the weight
// stream evicts the activation lines and their reloads from L2 for every row starve it. Here blocks of 8 rows
// are taken in K chunks of at most 16 KiB of activations, which then stay in L1; each row keeps its 4
// accumulators in memory between chunks, so every accumulator sees the FMAs of float_kernel::dot<1> in the
// same order (the same result, bit for bit). The chunks make the weight reads jump between rows, which the
// hardware prefetcher does not follow (8.7-9.6 GB/s alone), so the next block's bytes at the same position
// are requested into L2 while this block is computed: 20-25 GB/s (docs/cpu-log-s3-s6.md, "Software prefetch").
template <class L>
void decode_long_rows(const weight_view& w, const act_view& a, float* y, int64_t r0, int64_t r1) {
    constexpr int unroll = 4, block = 8;
    constexpr int64_t x_bytes = 16 * 1024;
    const int64_t n = a.n_in, nmain = n / (8 * unroll) * (8 * unroll);
    const int64_t n_chunks = (4 * n + x_bytes - 1) / x_bytes;
    const int64_t chunk = (nmain / n_chunks + 8 * unroll - 1) / (8 * unroll) * (8 * unroll);  // unit multiple
    const float* x = a.f32;
    const size_t rb = w.row_bytes;
    __m256 mem[block][unroll];  // the accumulators of the block's rows between chunks
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
        const int64_t b1 = b0 + block < r1 ? b0 + block : r1;
        // Prefetch only while the next block is the calling thread's.
        const int64_t pf = b1 + block <= r1 ? int64_t(block * rb) : 0;
        for (int64_t o = b0; o < b1; o++)
            for (int u = 0; u < unroll; u++) mem[o - b0][u] = _mm256_setzero_ps();
        for (int64_t c0 = 0; c0 < nmain; c0 += chunk) {
            const int64_t c1 = c0 + chunk < nmain ? c0 + chunk : nmain;
            for (int64_t o = b0; o < b1; o++) {
                const uint8_t* row = w.data + size_t(o) * rb;
                __m256 acc[unroll];
                for (int u = 0; u < unroll; u++) acc[u] = mem[o - b0][u];
                for (int64_t i = c0; i < c1; i += 8 * unroll) {
                    if (pf > 0) prefetch_l2<8 * unroll * L::bytes>(row + i * L::bytes + pf);
                    for (int u = 0; u < unroll; u++)
                        acc[u] = _mm256_fmadd_ps(L::vec(row + (i + 8 * u) * L::bytes), _mm256_loadu_ps(x + i + 8 * u),
                                                 acc[u]);
                }
                for (int u = 0; u < unroll; u++) mem[o - b0][u] = acc[u];
            }
        }
        // The end of float_kernel::dot<1>: whole units past the last group of 4, the accumulators added in
        // order, the horizontal sum, the scalar tail.
        for (int64_t o = b0; o < b1; o++) {
            const uint8_t* row = w.data + size_t(o) * rb;
            __m256 acc0 = mem[o - b0][0];
            int64_t i = nmain;
            for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(L::vec(row + i * L::bytes), _mm256_loadu_ps(x + i), acc0);
            for (int u = 1; u < unroll; u++) acc0 = _mm256_add_ps(acc0, mem[o - b0][u]);
            float s = hsum(acc0);
            for (int64_t k = i; k < n; k++) s += L::one(row + k * L::bytes) * x[k];
            y[o] = s;
        }
    }
}

// Rows whose activations + weights exceed this take decode_long_rows (unless set_decode_prefetch(0), the
// A/B baseline); below it, the per-row kernel was as fast (and prefetch cost a few %).
constexpr int64_t k_long_row_bytes = 24 * 1024;

template <class L>
void gemm_float(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    if (n_tok == 1 && w.n_in * (4 + L::bytes) > k_long_row_bytes && detail::decode_prefetch_bytes() > 0)
        decode_long_rows<L>(w, a, y, r0, r1);
    else
        detail::gemm_tiled<float_kernel<L>>(w, a, n_tok, y, ys, r0, r1);
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
