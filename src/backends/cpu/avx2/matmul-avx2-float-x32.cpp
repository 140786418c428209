// AVX2 kernels of the interleaved float layouts (F32, F16, BF16 under --repack on; repack.h): 32 rows per group
// stored column by column, so for each k one 64-byte line (F16, BF16; two for F32) holds element k of the 32
// rows as 4 vectors of 8 rows. One SIMD lane belongs to one row.
//
// Numerics (the contract shared by decode and prefill): per (row, token) one chain of FMAs over k = 0 .. n_in - 1
// in increasing order, starting from zero, with no horizontal sum and no scalar tail. Decode runs the chains of a
// group's 4 row vectors for one token (4 independent chains hide the FMA latency; the group is read as one
// sequential stream); prefill runs the same chains for a tile of 4 row vectors x T tokens (the activation
// element of each token broadcast, each weight vector converted once for the tile), over K slices with the
// accumulators kept in memory in between (a stored f32 vector reloads exactly). So every (row, token) result is
// the same sequence of IEEE operations whatever the batch, bit for bit (cpu-matmul-test checks it).
#include <algorithm>
#include <type_traits>

#include "backends/cpu/avx2/avx2-common.h"

namespace memtile::cpu::avx2 {
namespace {

constexpr int V = 4;  // row vectors per group (32 rows)
constexpr int T = 3;  // tokens per prefill tile: 12 accumulators + 3 broadcasts + 1 weight vector
// K slices of S elements and token blocks of TB tokens (bench-prefill-ab layer, F16, 1 thread, GFLOP per
// CPU-second, session 7): S 128-512 with TB 64: 75-81; S 1024-2048 or whole rows: 82-85; TB 32: 74-78, TB 128-256:
// 83-87. A group's slice (128 KiB of F16) and the block's activations of the slice stay in L2.
constexpr int64_t S = 2048;
constexpr int64_t TB = 128;

// acc[v * nt + j] continues the chains of row vector v and token j over elements [0, n) of the group slice gp
// (element k's 4 vectors at gp + k * L::bytes * 32) against x[j][0 .. n). first: the chains start from zero
// (acc is not read).
template <class L, int nt>
inline void chains(const uint8_t* gp, const float* const* x, int64_t n, bool first, __m256* acc_mem) {
    constexpr int64_t stride = int64_t(L::bytes) * 8 * V;
    __m256 acc[V][nt];
    for (int v = 0; v < V; v++)
        for (int j = 0; j < nt; j++) acc[v][j] = first ? _mm256_setzero_ps() : acc_mem[v * nt + j];
    for (int64_t k = 0; k < n; k++) {
        const uint8_t* p = gp + k * stride;
        __m256 xb[nt];
        for (int j = 0; j < nt; j++) xb[j] = _mm256_broadcast_ss(x[j] + k);
        for (int v = 0; v < V; v++) {
            const __m256 wv = L::vec(p + v * 8 * L::bytes);
            for (int j = 0; j < nt; j++) acc[v][j] = _mm256_fmadd_ps(wv, xb[j], acc[v][j]);
        }
    }
    for (int v = 0; v < V; v++)
        for (int j = 0; j < nt; j++) acc_mem[v * nt + j] = acc[v][j];
}

// Stores the 32 row results of one token (rows o0 .. o0 + 31; those at or past n_out are padding).
void store_group(const __m256* acc, int stride, float* y, int64_t o0, int64_t n_out) {
    if (o0 + 8 * V <= n_out) {
        for (int v = 0; v < V; v++) _mm256_storeu_ps(y + o0 + 8 * v, acc[v * stride]);
        return;
    }
    alignas(32) float lanes[8 * V];
    for (int v = 0; v < V; v++) _mm256_store_ps(lanes + 8 * v, acc[v * stride]);
    for (int64_t r = 0; o0 + r < n_out; r++) y[o0 + r] = lanes[r];
}

// Decode of two groups at once (two sequential streams, set_decode_streams): each row's chain is the one of
// chains<L, 1>, so the results are the same bit for bit; the element broadcast feeds both groups.
template <class L>
inline void chains_two(const uint8_t* gp0, const uint8_t* gp1, const float* x, int64_t n, __m256* acc0, __m256* acc1) {
    constexpr int64_t stride = int64_t(L::bytes) * 8 * V;
    __m256 r0[V], r1[V];
    for (int v = 0; v < V; v++) r0[v] = r1[v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const uint8_t *p0 = gp0 + k * stride, *p1 = gp1 + k * stride;
        const __m256 xb = _mm256_broadcast_ss(x + k);
        for (int v = 0; v < V; v++) {
            r0[v] = _mm256_fmadd_ps(L::vec(p0 + v * 8 * L::bytes), xb, r0[v]);
            r1[v] = _mm256_fmadd_ps(L::vec(p1 + v * 8 * L::bytes), xb, r1[v]);
        }
    }
    for (int v = 0; v < V; v++) {
        acc0[v] = r0[v];
        acc1[v] = r1[v];
    }
}

// Decode: token t over groups [g0, g1), one sequential stream, or two (groups g and g + half) when
// set_decode_streams allows it (as the x8 decode; more than two count as two here). No software prefetch: the hardware
// prefetcher follows the stream, and prefetcht1 at 2-128 KiB ahead measured 15-35 % slower (bench-decode-prefetch
// layers, docs/cpu-log-s7-s11.md session 7), so set_decode_prefetch does not apply to this layout.
template <class L>
void gemv_x32(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* y, int64_t n_out,
              int64_t g0, int64_t g1) {
    const float* x[1] = {a.f32 + t * a.n_in};
    __m256 acc[V];
    const detail::decode_stream_setting st = detail::decode_streams(L::type);
    const int64_t half = (g1 - g0) / 2;
    if (st.count >= 2 && st.min_distance > 0 && half > 0 && size_t(half) * group_bytes >= size_t(st.min_distance)) {
        __m256 acc1[V];
        for (int64_t g = g0; g < g0 + half; g++) {
            const uint8_t* gp = packed + size_t(g) * group_bytes;
            chains_two<L>(gp, gp + size_t(half) * group_bytes, x[0], a.n_in, acc, acc1);
            store_group(acc, 1, y + t * n_out, g * 8 * V, n_out);
            store_group(acc1, 1, y + t * n_out, (g + half) * 8 * V, n_out);
        }
        g0 += 2 * half;  // an odd count leaves the last group to the loop below
    }
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t* gp = packed + size_t(g) * group_bytes;
        chains<L, 1>(gp, x, a.n_in, true, acc);
        store_group(acc, 1, y + t * n_out, g * 8 * V, n_out);
    }
}

// One tile of nt tokens (tok[0..nt)) over the K slice [k0, k1) at sp (its element k0); on the last slice the
// results go to y.
template <class L, int nt>
void tile(const uint8_t* sp, const act_view& a, const int64_t* tok, int64_t k0, int64_t k1, bool last, __m256* acc,
          float* y, int64_t n_out, int64_t o0) {
    const float* x[nt];
    for (int j = 0; j < nt; j++) x[j] = a.f32 + tok[j] * a.n_in + k0;
    chains<L, nt>(sp, x, k1 - k0, k0 == 0, acc);
    if (last)
        for (int j = 0; j < nt; j++) store_group(acc + j, nt, y + tok[j] * n_out, o0, n_out);
}

// Prefill: tokens [t0, t1) over groups [g0, g1): token blocks of TB > groups > K slices of S > tiles of T
// tokens; a last partial tile runs its own instantiation (each token's chains are the same either way).
// convert: each group slice is first widened to f32 (exact) in scratch and the tiles read that: BF16's widening
// (zero-extend + shift, 2 vector operations on the FMA pipes) per tile held it at 67 GFLOP per CPU-second in
// the layer bench, against 81-83 for F32 (F16's vcvtph2ps per tile costs nothing measurable).
template <class L, bool convert>
void gemm_x32(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1, float* y,
              int64_t n_out, int64_t g0, int64_t g1) {
    using K = std::conditional_t<convert, f32_loader, L>;
    const int64_t n_in = a.n_in;
    const int64_t max_tiles = (std::min<int64_t>(TB, t1 - t0) + T - 1) / T;
    const size_t acc_bytes = size_t(max_tiles) * V * T * sizeof(__m256);
    uint8_t* scratch = detail::gemm_scratch(acc_bytes + (convert ? size_t(S) * 8 * V * sizeof(float) : 0));
    // acc: [tile][V][T] vectors, the chains between K slices; wide: [S][32] f32, the converted slice
    __m256* acc = reinterpret_cast<__m256*>(scratch);
    float* wide = reinterpret_cast<float*>(scratch + acc_bytes);
    for (int64_t tb = t0; tb < t1; tb += TB) {
        const int64_t te = std::min(t1, tb + TB);
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t* gp = packed + size_t(g) * group_bytes;
            for (int64_t k0 = 0; k0 < n_in; k0 += S) {
                const int64_t k1 = std::min(n_in, k0 + S);
                const bool last = k1 == n_in;
                const uint8_t* sp = gp + size_t(k0) * L::bytes * 8 * V;
                if constexpr (convert) {
                    for (int64_t e = 0; e < (k1 - k0) * V; e++)
                        _mm256_store_ps(wide + 8 * e, L::vec(sp + size_t(e) * 8 * L::bytes));
                    sp = reinterpret_cast<const uint8_t*>(wide);
                }
                int64_t tok[T];
                int64_t i = 0;
                for (int64_t t = tb; t < te; t += T, i++) {
                    const int n = int(std::min<int64_t>(T, te - t));
                    for (int j = 0; j < n; j++) tok[j] = t + j;
                    __m256* ai = acc + i * V * T;
                    if (n == T)
                        tile<K, T>(sp, a, tok, k0, k1, last, ai, y, n_out, g * 8 * V);
                    else if (n == 2)
                        tile<K, 2>(sp, a, tok, k0, k1, last, ai, y, n_out, g * 8 * V);
                    else
                        tile<K, 1>(sp, a, tok, k0, k1, last, ai, y, n_out, g * 8 * V);
                }
            }
        }
    }
}

}  // namespace

void gemv_x32_f32(const uint8_t* p, size_t gb, const act_view& a, int64_t t, float* y, int64_t n_out, int64_t g0,
                  int64_t g1) {
    gemv_x32<f32_loader>(p, gb, a, t, y, n_out, g0, g1);
}
void gemv_x32_f16(const uint8_t* p, size_t gb, const act_view& a, int64_t t, float* y, int64_t n_out, int64_t g0,
                  int64_t g1) {
    gemv_x32<f16_loader>(p, gb, a, t, y, n_out, g0, g1);
}
void gemv_x32_bf16(const uint8_t* p, size_t gb, const act_view& a, int64_t t, float* y, int64_t n_out, int64_t g0,
                   int64_t g1) {
    gemv_x32<bf16_loader>(p, gb, a, t, y, n_out, g0, g1);
}
void gemm_x32_f32(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                  int64_t g0, int64_t g1) {
    gemm_x32<f32_loader, false>(p, gb, a, t0, t1, y, n_out, g0, g1);
}
void gemm_x32_f16(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                  int64_t g0, int64_t g1) {
    gemm_x32<f16_loader, false>(p, gb, a, t0, t1, y, n_out, g0, g1);
}
void gemm_x32_bf16(const uint8_t* p, size_t gb, const act_view& a, int64_t t0, int64_t t1, float* y, int64_t n_out,
                   int64_t g0, int64_t g1) {
    gemm_x32<bf16_loader, true>(p, gb, a, t0, t1, y, n_out, g0, g1);
}

}  // namespace memtile::cpu::avx2
