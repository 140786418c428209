// Prefill GEMM for F32, F16 and BF16 weights (n_tok >= k_gemm_min_tokens on the original layout).
//
// Numerics (the contract with float_kernel in matmul-avx2-float.cpp, the decode kernel): per (row, token),
// 4 accumulators over 8-element units (unit i into accumulator i % 4, whole units past the last group of 4
// into accumulator 0), added in order 0 + 1 + 2 + 3, a horizontal sum, then the scalar products of the
// elements past the last whole unit. Each accumulator is a chain of FMAs over its units in increasing order,
// so the GEMM runs the 4 chains as 4 passes (units u, u + 4, ...) and keeps the partial vectors in memory
// between K slices: every (row, token) result is bit-identical to decode, whatever the batch.
//
// Micro-kernel: R x T = 4 rows x 3 tokens of accumulators (12 of the 16 ymm registers); per unit it loads 4
// weight vectors (f32, converted once when packed) and 3 activation vectors for 12 FMAs.
//
// Loop nest per thread (rows [r0, r1)): token blocks of about TB tokens > row blocks of MC rows > K slices
// of S units > panels of R rows > passes > token tiles of T. Per token block the activations are copied pass
// by pass (xp), so that both operands of a pass are read contiguously; per (row block, K slice) the weights
// are converted once into buf, pass by pass. A panel's pass (S / 4 units x 4 rows, 8 KiB) stays in L1 while
// the block's tiles stream their activations from L2, 64 units per micro-kernel call.
// Why (bench-prefill-ab layer, F16, 1 thread, GFLOP per CPU-second, session 6): the previous nest (panel of 4
// rows packed over the whole row > K slices of 64 units > tiles > passes of 16 units, units strided by 4)
// ran at 54-56; this one at 61-64 (of a 90.7 peak measured at the same time). The micro-kernel alone, its
// operands in L1, runs at 74 GFLOP/s with 16 units per call and 82-86 with 64; with the activations streamed
// from L2 as here, 72-77. The rest is the pack, the per-(row, token) reduction of 4 accumulators and the copy.
#include <algorithm>

#include "backends/cpu/avx2/gemm-avx2.h"

namespace memtile::cpu::avx2 {
namespace {

constexpr int R = 4, T = 3, NA = 4;
constexpr int MC = 16;      // rows per row block: 4 panels (32: slower)
constexpr int64_t S = 256;  // units of 8 elements per K slice (2048 elements), a multiple of NA (64, 128: slower)
constexpr int64_t TB = 63;  // tokens per token block (balanced, rounded up to a multiple of T)

// acc[r * T + j] += sum over q < n of panel[q][r] * x[j] at unit q * step, in increasing q; the sums start
// from zero instead of acc with first set (saves zeroing the partial sums).
// panel: [n][R][8] f32; x[j] points at the first unit of token j.
inline void micro_kernel(const float* panel, const float* const* x, int64_t n, int64_t step, bool first,
                         __m256* acc_mem) {
    __m256 acc[R][T];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < T; j++) acc[r][j] = first ? _mm256_setzero_ps() : acc_mem[r * T + j];
    const float* x0 = x[0];
    const float* x1 = x[1];
    const float* x2 = x[2];
    const int64_t xs = step * 8;
    for (int64_t q = 0; q < n; q++) {
        const __m256 xv0 = _mm256_loadu_ps(x0), xv1 = _mm256_loadu_ps(x1), xv2 = _mm256_loadu_ps(x2);
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_load_ps(panel + r * 8);
            acc[r][0] = _mm256_fmadd_ps(wv, xv0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(wv, xv1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(wv, xv2, acc[r][2]);
        }
        panel += R * 8;
        x0 += xs;
        x1 += xs;
        x2 += xs;
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < T; j++) acc_mem[r * T + j] = acc[r][j];
}

// Converts units [u0, u1) of rows row0 .. row0 + n_rows - 1 (rows past them zero, up to whole panels) into
// buf: [panel][pass < passes][q][R][8] f32, unit u0 + q * passes + pass; (u1 - u0) is a multiple of passes.
// Each row is read in order (written pass by pass).
template <class L>
void pack(const weight_view& w, int64_t row0, int n_rows, int n_panels, int64_t u0, int64_t u1, int passes,
          float* buf) {
    const int64_t nq = (u1 - u0) / passes;
    for (int p = 0; p < n_panels; p++) {
        for (int r = 0; r < R; r++) {
            const int rr = p * R + r;
            float* dst = buf + size_t(p) * passes * nq * R * 8 + r * 8;
            if (rr >= n_rows) {
                for (int64_t k = 0; k < passes * nq; k++) _mm256_store_ps(dst + k * R * 8, _mm256_setzero_ps());
                continue;
            }
            const uint8_t* src = w.data + size_t(row0 + rr) * w.row_bytes + u0 * 8 * L::bytes;
            for (int64_t k = 0; k < u1 - u0; k++)
                _mm256_store_ps(dst + ((k % passes) * nq + k / passes) * R * 8, L::vec(src + k * 8 * L::bytes));
        }
    }
}

template <class L>
void gemm_blocked(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                  int64_t r1) {
    const int64_t n_in = w.n_in, nu = n_in / 8, nu_main = nu / NA * NA;
    // Token blocks of equal size: a short last block would repack every row for a few tokens.
    const int64_t n_blocks = std::max<int64_t>(1, (n_tok + TB / 2) / TB);
    const int64_t block = ((n_tok + n_blocks - 1) / n_blocks + T - 1) / T * T;
    const int64_t max_tiles = block / T;
    constexpr int max_panels = MC / R;
    const size_t buf_floats = size_t(max_panels) * S * R * 8;
    // part: [panel][tile][acc][R][T] vectors
    const size_t part_vectors = size_t(max_panels) * max_tiles * NA * R * T;
    // xp: the token block's activations of the main units, pass by pass: [token][pass][unit / NA][8] f32.
    const size_t xp_floats = size_t(block) * nu_main * 8;
    uint8_t* scratch = detail::gemm_scratch((buf_floats + xp_floats) * sizeof(float) + part_vectors * sizeof(__m256));
    float* buf = reinterpret_cast<float*>(scratch);
    float* xp = buf + buf_floats;
    __m256* part = reinterpret_cast<__m256*>(xp + xp_floats);
    const int64_t nqa = nu_main / NA;

    for (int64_t tb = 0; tb < n_tok; tb += block) {
        const int64_t nt = std::min(block, n_tok - tb), n_tiles = (nt + T - 1) / T;
        // x[tile][j]: token rows of the tile; a last partial tile repeats its last token (results dropped).
        const auto token_row = [&](int64_t tile, int j) {
            const int64_t t = std::min(tile * T + j, nt - 1);
            return a.f32 + (tb + t) * n_in;
        };
        const auto token_xp = [&](int64_t tile, int j) { return xp + std::min(tile * T + j, nt - 1) * nu_main * 8; };
        for (int64_t t = 0; t < nt; t++) {
            const float* x = a.f32 + (tb + t) * n_in;
            float* d = xp + t * nu_main * 8;
            for (int64_t k = 0; k < nu_main; k++)
                _mm256_store_ps(d + ((k % NA) * nqa + k / NA) * 8, _mm256_loadu_ps(x + k * 8));
        }
        for (int64_t rb = r0; rb < r1; rb += MC) {
            const int n_rows = int(std::min<int64_t>(MC, r1 - rb)), n_panels = (n_rows + R - 1) / R;
            const size_t tile_stride = size_t(NA) * R * T, panel_stride = size_t(n_tiles) * tile_stride;
            if (nu_main == 0)
                for (size_t k = 0; k < size_t(n_panels) * panel_stride; k++) part[k] = _mm256_setzero_ps();
            for (int64_t s0 = 0; s0 < nu_main; s0 += S) {
                const int64_t s1 = std::min(s0 + S, nu_main), nq = (s1 - s0) / NA;
                pack<L>(w, rb, n_rows, n_panels, s0, s1, NA, buf);
                for (int p = 0; p < n_panels; p++) {
                    const float* pp = buf + size_t(p) * NA * nq * R * 8;
                    for (int u = 0; u < NA; u++) {
                        for (int64_t tile = 0; tile < n_tiles; tile++) {
                            const float* x[T];
                            for (int j = 0; j < T; j++) x[j] = token_xp(tile, j) + (u * nqa + s0 / NA) * 8;
                            micro_kernel(pp + u * nq * R * 8, x, nq, 1, s0 == 0,
                                         part + p * panel_stride + tile * tile_stride + u * R * T);
                        }
                    }
                }
            }
            // Whole units past the last group of 4: accumulator 0, after its main units.
            if (nu_main < nu) {
                pack<L>(w, rb, n_rows, n_panels, nu_main, nu, 1, buf);
                for (int p = 0; p < n_panels; p++) {
                    for (int64_t tile = 0; tile < n_tiles; tile++) {
                        const float* x[T];
                        for (int j = 0; j < T; j++) x[j] = token_row(tile, j) + nu_main * 8;
                        micro_kernel(buf + size_t(p) * (nu - nu_main) * R * 8, x, nu - nu_main, 1, false,
                                     part + p * panel_stride + tile * tile_stride);
                    }
                }
            }
            for (int64_t t = 0; t < nt; t++) {
                const float* x = a.f32 + (tb + t) * n_in;
                for (int rr = 0; rr < n_rows; rr++) {
                    const __m256* pt = part + (rr / R) * panel_stride + (t / T) * tile_stride + (rr % R) * T + t % T;
                    __m256 s = pt[0];
                    for (int u = 1; u < NA; u++) s = _mm256_add_ps(s, pt[u * R * T]);
                    float sum = hsum(s);
                    const uint8_t* row = w.data + size_t(rb + rr) * w.row_bytes;
                    for (int64_t k = nu * 8; k < n_in; k++) sum += L::one(row + k * L::bytes) * x[k];
                    y[(tb + t) * ys + rb + rr] = sum;
                }
            }
        }
    }
}

}  // namespace

void gemm_panel_f32(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                    int64_t r1) {
    gemm_blocked<f32_loader>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_f16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                    int64_t r1) {
    gemm_blocked<f16_loader>(w, a, n_tok, y, ys, r0, r1);
}

void gemm_panel_bf16(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
    gemm_blocked<bf16_loader>(w, a, n_tok, y, ys, r0, r1);
}

}  // namespace memtile::cpu::avx2
