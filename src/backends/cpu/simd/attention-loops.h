// The attention loops whose AVX2 and AVX-512 forms differ only in vector width (attention-kernels.h): the prefill
// score and accumulate of up to V::max_rows query rows at a time, and the conversion of K/V rows to f32. Compiled
// once per ISA translation unit (avx2/attention-avx2.cpp, avx512/attention-avx512.cpp) with that unit's target flags
// and vector traits V (everything here has internal linkage):
//   V::reg, V::lanes (floats per register), V::max_rows (query rows per call that fit the registers: score keeps
//   rows x 4 accumulators, accumulate rows x 4), V::zero(), V::load(const float*), V::store(float*, reg),
//   V::set1(float), V::mul(a, b), V::fmadd(a, b, c) = a * b + c, V::load_f16(const uint8_t*) (lanes halves -> f32),
//   and for the decode: V::load_aligned(const float*), V::max(a, b), V::sub(a, b), V::add(a, b),
//   V::exp_nonpositive(x), V::reduce_max(x), V::reduce_add(x), V::sum_lanes(const reg (&t)[lanes]) (lane j: the sum
//   of t[j]'s lanes), V::keep_first(x, n) (lanes >= n set to -inf).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/attention-kernels.h"
#include "backends/cpu/simd/row-prefetch.h"

namespace memtile::cpu::detail {
namespace {

// Rows j < n of a block (row j at base + j * stride, f16 or f32) as f32 rows of width at out (row j at
// out + j * width, aligned for V); with ZERO, rows n..K-1 are zero (their scores come out 0 and are masked).
template <class V, int K, bool ZERO>
void load_rows(const uint8_t* base, size_t stride, bool f16, int width, int n, float* out) {
    for (int j = 0; j < K; j++) {
        float* o = out + size_t(j) * size_t(width);
        if (j >= n) {
            if constexpr (!ZERO) break;
            for (int d = 0; d < width; d += V::lanes) V::store(o + d, V::zero());
            continue;
        }
        const uint8_t* r = base + size_t(j) * stride;
        for (int d = 0; d < width; d += V::lanes)
            V::store(o + d, f16 ? V::load_f16(r + 2 * size_t(d)) : V::load(reinterpret_cast<const float*>(r) + d));
    }
}

// Scores of R rows against a transposed key tile, 4 vectors of keys per pass (R x 4 accumulators).
template <class V, int R>
void score_rows(const float* q, const float* kt, int head_dim, float* sc) {
    constexpr int step = 4 * V::lanes;
    for (int j0 = 0; j0 < k_attention_tile; j0 += step) {
        typename V::reg acc[R][4];
        for (int r = 0; r < R; r++)
            for (int b = 0; b < 4; b++) acc[r][b] = V::zero();
        for (int d = 0; d < head_dim; d++) {
            const float* row = kt + size_t(d) * k_attention_tile + j0;
            typename V::reg k[4];
            for (int b = 0; b < 4; b++) k[b] = V::load(row + b * V::lanes);
            for (int r = 0; r < R; r++) {
                const auto qd = V::set1(q[size_t(r) * size_t(head_dim) + size_t(d)]);
                for (int b = 0; b < 4; b++) acc[r][b] = V::fmadd(qd, k[b], acc[r][b]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int b = 0; b < 4; b++) V::store(sc + size_t(r) * k_attention_tile + j0 + b * V::lanes, acc[r][b]);
    }
}

// attention_kernels::score: rows <= k_score_rows, in calls of up to V::max_rows.
template <class V>
void score(const float* q, int rows, const float* kt, int head_dim, int, float* sc) {
    for (int r = 0; r < rows; r += V::max_rows) {
        const float* qr = q + size_t(r) * size_t(head_dim);
        float* s = sc + size_t(r) * k_attention_tile;
        switch (std::min(rows - r, V::max_rows)) {
            case 1: score_rows<V, 1>(qr, kt, head_dim, s); break;
            case 2: score_rows<V, 2>(qr, kt, head_dim, s); break;
            case 3: score_rows<V, std::min(3, V::max_rows)>(qr, kt, head_dim, s); break;
            default: score_rows<V, V::max_rows>(qr, kt, head_dim, s); break;
        }
    }
}

// acc rows = acc * corr + p . v for R rows over W vectors of head_dim from acc and v: R x W accumulators, each value
// vector loaded once for the R rows. W is a template parameter so that every array stays in registers (with a
// run-time width GCC kept them in memory and copied them with memmove per key).
template <class V, int R, int W>
void accumulate_chunk(const float* p, const float* corr, const float* v, int n, int head_dim, float* acc) {
    typename V::reg a[R][W];
    for (int r = 0; r < R; r++) {
        const auto c = V::set1(corr[r]);
        for (int k = 0; k < W; k++) a[r][k] = V::mul(V::load(acc + size_t(r) * size_t(head_dim) + k * V::lanes), c);
    }
    for (int j = 0; j < n; j++) {
        const float* vj = v + size_t(j) * size_t(head_dim);
        typename V::reg x[W];
        for (int k = 0; k < W; k++) x[k] = V::load(vj + k * V::lanes);
        for (int r = 0; r < R; r++) {
            const auto pj = V::set1(p[size_t(r) * k_attention_tile + size_t(j)]);
            for (int k = 0; k < W; k++) a[r][k] = V::fmadd(pj, x[k], a[r][k]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int k = 0; k < W; k++) V::store(acc + size_t(r) * size_t(head_dim) + k * V::lanes, a[r][k]);
}

template <class V, int R>
void accumulate_rows(const float* p, const float* corr, const float* v, int n, int head_dim, float* acc) {
    for (int d = 0; d < head_dim; d += 4 * V::lanes) {
        switch (std::min(4, (head_dim - d) / V::lanes)) {
            case 1: accumulate_chunk<V, R, 1>(p, corr, v + d, n, head_dim, acc + d); break;
            case 2: accumulate_chunk<V, R, 2>(p, corr, v + d, n, head_dim, acc + d); break;
            case 3: accumulate_chunk<V, R, 3>(p, corr, v + d, n, head_dim, acc + d); break;
            default: accumulate_chunk<V, R, 4>(p, corr, v + d, n, head_dim, acc + d); break;
        }
    }
}

// attention_kernels::accumulate: rows <= k_score_rows, in calls of up to V::max_rows.
template <class V>
void accumulate(const float* p, int rows, const float* corr, const float* v, int n, int head_dim, float* acc) {
    for (int r = 0; r < rows; r += V::max_rows) {
        const float* pr = p + size_t(r) * k_attention_tile;
        float* ar = acc + size_t(r) * size_t(head_dim);
        switch (std::min(rows - r, V::max_rows)) {
            case 1: accumulate_rows<V, 1>(pr, corr + r, v, n, head_dim, ar); break;
            case 2: accumulate_rows<V, 2>(pr, corr + r, v, n, head_dim, ar); break;
            case 3: accumulate_rows<V, std::min(3, V::max_rows)>(pr, corr + r, v, n, head_dim, ar); break;
            default: accumulate_rows<V, V::max_rows>(pr, corr + r, v, n, head_dim, ar); break;
        }
    }
}

// The decode's scores pass over one chunk (attention-kernels.h, decode): per block of V::lanes keys and KV head,
// the head's K slice converted into `rows` ([lanes][hd] f32, in L1, aligned for V) and dotted with the q of every
// query head of its group, the lanes' dot products reduced into one vector of scores (padding keys -inf), stored at
// sc + h * k_decode_chunk. The slices' strided reads (128 bytes of every 1 KiB row at Llama-3.2-1B's shape) wait on
// memory unless prefetched: the next block, K then the chunk's first V block, goes into L2 a few lines per head (pf,
// per lines per step; the caller goes on with it through its values pass). Without the prefetch the conversions
// waited on DRAM (Zen 4: 40 cycles per key and head against 22 with the rows in cache); issued as one burst per block
// it gained nothing (the burst waits for free miss buffers as the loads did). Converting the block's whole rows
// instead of one head's slice kept them in L2 past 256 elements per row (Llama-3.1-8B shape, depth 4,096: 80 ms per
// token against 50).
template <class V>
void decode_scores(const float* q, int n_kv, int group, const uint8_t* k, const uint8_t* v, size_t stride, bool f16,
                   int hd, int n, float* sc, float* rows, row_prefetcher& pf, int per) {
    constexpr int B = V::lanes;
    const size_t head_bytes = size_t(hd) * (f16 ? 2 : 4);
    const int nv = hd / B, n_q = n_kv * group;
    for (int j0 = 0; j0 < n; j0 += B) {
        const int nb = std::min(B, n - j0);
        if (j0 + B < n)
            pf.start(k + size_t(j0 + B) * stride, size_t(std::min(B, n - j0 - nb)) * stride);
        else
            pf.start(v, size_t(std::min(B, n)) * stride);
        for (int h = 0; h < n_q; h++) {
            if (h % group == 0)
                load_rows<V, B, true>(k + size_t(j0) * stride + size_t(h / group) * head_bytes, stride, f16, hd, nb,
                                      rows);
            pf.step(per);
            const float* qh = q + size_t(h) * size_t(hd);
            typename V::reg t[B];
            for (int j = 0; j < B; j++) t[j] = V::zero();
            for (int c = 0; c < nv; c++) {
                const auto qc = V::load(qh + B * c);
                for (int j = 0; j < B; j++)
                    t[j] = V::fmadd(V::load_aligned(rows + size_t(j) * size_t(hd) + B * c), qc, t[j]);
            }
            V::store(sc + size_t(h) * k_decode_chunk + j0, V::keep_first(V::sum_lanes(t), nb));
        }
    }
}

// The decode's softmax within a chunk of n keys: per query head h, m[h] = max of its scores, the scores replaced by
// exp(s - m[h]) (padding: -inf, so 0), l[h] = their sum.
template <class V>
void chunk_softmax(float* sc, int n_q, int n, float* m, float* l) {
    const int n_pad = (n + V::lanes - 1) / V::lanes * V::lanes;
    for (int h = 0; h < n_q; h++) {
        float* s = sc + size_t(h) * k_decode_chunk;
        auto mx = V::set1(-INFINITY);
        for (int j = 0; j < n_pad; j += V::lanes) mx = V::max(mx, V::load(s + j));
        const float mh = V::reduce_max(mx);
        const auto mv = V::set1(mh);
        auto sum = V::zero();
        for (int j = 0; j < n_pad; j += V::lanes) {
            const auto e = V::exp_nonpositive(V::sub(V::load(s + j), mv));
            V::store(s + j, e);
            sum = V::add(sum, e);
        }
        m[h] = mh;
        l[h] = V::reduce_add(sum);
    }
}

// A thread's scratch of n floats aligned for V (reused across calls).
template <class V>
float* aligned_scratch(size_t n) {
    thread_local std::vector<float> buf;
    buf.resize(n + V::lanes);
    const size_t mis = (reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float)) % V::lanes;
    return buf.data() + (V::lanes - mis) % V::lanes;
}

}  // namespace
}  // namespace memtile::cpu::detail
