// The attention loops whose AVX2 and AVX-512 forms differ only in vector width (attention-kernels.h): the prefill
// score and accumulate of up to V::max_rows query rows at a time, and the conversion of K/V rows to f32. Compiled
// once per ISA translation unit (avx2/attention-avx2.cpp, avx512/attention-avx512.cpp) with that unit's target flags
// and vector traits V (everything here has internal linkage):
//   V::reg, V::lanes (floats per register), V::max_rows (query rows per call that fit the registers: score keeps
//   rows x 4 accumulators, accumulate rows x 4), V::zero(), V::load(const float*), V::store(float*, reg),
//   V::set1(float), V::mul(a, b), V::fmadd(a, b, c) = a * b + c, V::load_f16(const uint8_t*) (lanes halves -> f32).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/attention-kernels.h"

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

}  // namespace
}  // namespace memtile::cpu::detail
