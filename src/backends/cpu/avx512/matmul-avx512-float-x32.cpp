// AVX-512 prefill of the interleaved float layouts (F32, F16, BF16 under --repack on; repack.h): 32 rows per group
// stored column by column, element k of the 32 rows in one 64-byte line (F16, BF16; two for F32), taken here as 2
// vectors of 16 rows. One SIMD lane belongs to one row, as in the AVX2 kernels (avx2/matmul-avx2-float-x32.cpp).
//
// Numerics: per (row, token) the one chain of FMAs over k = 0 .. n_in - 1 in increasing order, from zero, of the
// AVX2 kernels' contract. A lane's FMA does not depend on the vector width, so every result equals the AVX2 decode's
// (gemv_x32, which the AVX-512 sets keep: decode is bound by memory, not by the FMA pipes) bit for bit, whatever the
// batch (tests/unit/cpu-matmul-test.cpp checks both).
//
// Why: a 1-thread prefill of F16 is bound by the FMA pipes, and the AVX2 tile (4 row vectors x 3 tokens, 12 of 16 ymm
// registers) does 8 lanes per FMA. Here a tile is 2 row vectors x T tokens of zmm accumulators (24 of the 32
// registers), each weight vector converted once for the T tokens and each activation broadcast once for the 2 row
// vectors, from a copy of the token block interleaved by tile, [tile][k][T], so that one pointer reaches every
// token's element k.
#include <algorithm>
#include <array>
#include <utility>

#include "backends/cpu/avx512/avx512-common.h"

namespace memtile::cpu::avx512 {
namespace {

constexpr int V = 2;   // row vectors per group (32 rows)
constexpr int T = 14;  // tokens per tile: 28 accumulators + 2 weight vectors
// K slices of S elements (a group's slice of F16, 128 KiB, and the block's activations of it stay in L2) and token
// blocks of TB tokens, a multiple of T.
constexpr int64_t S = 2048;
constexpr int64_t TB = 140;

// acc[v * nt + j] continues the chains of row vector v and token j over elements [0, n) of the group slice sp
// (element k's 2 vectors at sp + k * L::bytes * 32) against xs[k * T + j]. first: the chains start from zero (acc is
// not read). last: the results go to y (token j's row at y + j * n_out, rows o0 ..; those at or past n_out are the
// group's padding).
template <class L, int nt>
void tile(const uint8_t* sp, const float* xs, int64_t n, bool first, bool last, __m512* acc_mem, float* y,
          int64_t n_out, int64_t o0) {
    constexpr int64_t stride = int64_t(L::bytes) * 16 * V;
    __m512 acc[V][nt];
    for (int v = 0; v < V; v++)
        for (int j = 0; j < nt; j++) acc[v][j] = first ? _mm512_setzero_ps() : acc_mem[v * nt + j];
    for (int64_t k = 0; k < n; k++) {
        const uint8_t* p = sp + k * stride;
        const float* xk = xs + k * T;
        __m512 w[V];
        for (int v = 0; v < V; v++) w[v] = L::vec(p + v * 16 * L::bytes);
        for (int j = 0; j < nt; j++) {
            const __m512 xb = _mm512_set1_ps(xk[j]);
            for (int v = 0; v < V; v++) acc[v][j] = _mm512_fmadd_ps(w[v], xb, acc[v][j]);
        }
    }
    if (!last) {
        for (int v = 0; v < V; v++)
            for (int j = 0; j < nt; j++) acc_mem[v * nt + j] = acc[v][j];
        return;
    }
    const int64_t rows = std::min<int64_t>(16 * V, n_out - o0);
    for (int v = 0; v < V; v++) {
        const int64_t r = std::clamp<int64_t>(rows - 16 * v, 0, 16);
        const __mmask16 m = r == 16 ? __mmask16(0xffff) : __mmask16((1u << r) - 1);
        for (int j = 0; j < nt; j++) _mm512_mask_storeu_ps(y + j * n_out + o0 + 16 * v, m, acc[v][j]);
    }
}

template <class L>
using tile_fn = void (*)(const uint8_t*, const float*, int64_t, bool, bool, __m512*, float*, int64_t, int64_t);

template <class L, size_t... I>
constexpr std::array<tile_fn<L>, sizeof...(I)> tile_table(std::index_sequence<I...>) {
    return {&tile<L, int(I) + 1>...};
}

// Tokens [t0, t1) over groups [g0, g1): token blocks of TB (copied interleaved) > groups > K slices of S > tiles of T
// tokens; a last partial tile runs its own instantiation (each token's chains are the same either way).
template <class L>
void gemm_x32(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
              int64_t n_out, int64_t g0, int64_t g1) {
    static constexpr auto tiles = tile_table<L>(std::make_index_sequence<T>());
    const int64_t n_in = a.n_in;
    const int64_t max_tiles = (std::min<int64_t>(TB, t1 - t0) + T - 1) / T;
    const size_t acc_bytes = size_t(max_tiles) * V * T * sizeof(__m512);
    uint8_t* scratch = detail::gemm_scratch(acc_bytes + size_t(max_tiles) * T * size_t(n_in) * sizeof(float));
    // acc: [tile][V][T] vectors, the chains between K slices; xp: [tile][n_in][T] f32, the block's activations
    __m512* acc = reinterpret_cast<__m512*>(scratch);
    float* xp = reinterpret_cast<float*>(scratch + acc_bytes);
    for (int64_t tb = t0; tb < t1; tb += TB) {
        const int64_t te = std::min(t1, tb + TB);
        for (int64_t t = tb; t < te; t++) {
            const float* src = a.f32 + t * n_in;
            float* dst = xp + (t - tb) / T * T * n_in + (t - tb) % T;
            for (int64_t k = 0; k < n_in; k++) dst[k * T] = src[k];
        }
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t* gp = packed + size_t(g) * group_bytes;
            for (int64_t k0 = 0; k0 < n_in; k0 += S) {
                const int64_t k1 = std::min(n_in, k0 + S);
                const uint8_t* sp = gp + size_t(k0) * L::bytes * 16 * V;
                int64_t i = 0;
                for (int64_t t = tb; t < te; t += T, i++) {
                    const int n = int(std::min<int64_t>(T, te - t));
                    tiles[size_t(n - 1)](sp, xp + i * T * n_in + k0 * T, k1 - k0, k0 == 0, k1 == n_in, acc + i * V * T,
                                         y + t * n_out, n_out, g * 16 * V);
                }
            }
        }
    }
}

}  // namespace

void gemm_x32_f32(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                  int64_t g0, int64_t g1) {
    gemm_x32<f32_loader>(p, gb, a, t0, t1, y, n_out, g0, g1);
}
void gemm_x32_f16(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                  int64_t g0, int64_t g1) {
    gemm_x32<f16_loader>(p, gb, a, t0, t1, y, n_out, g0, g1);
}
void gemm_x32_bf16(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                   int64_t g0, int64_t g1) {
    gemm_x32<bf16_loader>(p, gb, a, t0, t1, y, n_out, g0, g1);
}

}  // namespace memtile::cpu::avx512
