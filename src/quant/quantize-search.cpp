#include "quant/quantize-search.h"

#include <algorithm>
#include <atomic>

namespace memtile::quant_detail {
namespace {

// Candidate grid: the element of largest magnitude is mapped to edge + k * k_grid_step for
// k = -k_grid_half..k_grid_half. Mapping it slightly inside the edge trades clipping of the extreme value
// for finer resolution of the bulk; mapping it beyond the edge clips it. A step of 0.1 level and +-1 level
// is wide enough that the refinement below rarely changes the winner, so finer grids buy little.
constexpr int k_grid_half_best = 10;
constexpr int k_grid_half_fast = 2;
constexpr float k_grid_step = 0.1f;
constexpr int k_refine_rounds_best = 3;
constexpr int k_refine_rounds_fast = 1;

std::atomic<int> g_effort{0};  // quantize_effort::best

int grid_half() {
    return g_effort.load(std::memory_order_relaxed) == 0 ? k_grid_half_best : k_grid_half_fast;
}
int refine_rounds() {
    return g_effort.load(std::memory_order_relaxed) == 0 ? k_refine_rounds_best : k_refine_rounds_fast;
}

// Closed-form least-squares scale for fixed levels; returns the gain sxq^2 / sqq (the error is
// sum(w x^2) - gain), or -1 when every level is zero.
float symmetric_gain(const float* x, const float* w, int n, const int* q, float& scale) {
    double sxq = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
        sxq += double(w[i]) * x[i] * q[i];
        sqq += double(w[i]) * q[i] * q[i];
    }
    if (sqq <= 0) return -1;
    scale = float(sxq / sqq);
    return float(sxq * sxq / sqq);
}

void round_symmetric(const float* x, int n, float iscale, int qmin, int qmax, int* q) {
    for (int i = 0; i < n; ++i) q[i] = clamp_level(round_level(x[i] * iscale), qmin, qmax);
}

// Least-squares (scale, offset) of x ≈ scale * q + offset for fixed levels with offset <= 0; returns the
// weighted squared error.
float fit_affine(const float* x, const float* w, int n, const int* q, float& scale, float& offset) {
    double sw = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
        sw += w[i];
        sq += double(w[i]) * q[i];
        sqq += double(w[i]) * q[i] * q[i];
        sx += double(w[i]) * x[i];
        sxq += double(w[i]) * x[i] * q[i];
    }
    const double det = sw * sqq - sq * sq;
    double a = 0, b = 0;
    if (det > 0) {
        a = (sw * sxq - sq * sx) / det;
        b = (sqq * sx - sq * sxq) / det;
    }
    if (det <= 0 || b > 0) {  // the unconstrained optimum needs a positive offset: pin it to 0
        b = 0;
        a = sqq > 0 ? sxq / sqq : 0;
    }
    if (a < 0) a = 0;
    scale = float(a);
    offset = float(b);
    double err = 0;
    for (int i = 0; i < n; ++i) {
        const double e = a * q[i] + b - x[i];
        err += w[i] * e * e;
    }
    return float(err);
}

}  // namespace

void set_effort(int effort) {
    g_effort.store(effort, std::memory_order_relaxed);
}

void block_weights(const float* x, const float* importance, int n, float* w) {
    double sum = 0;
    if (importance) {
        for (int i = 0; i < n; ++i) {
            w[i] = std::max(importance[i], 0.0f);
            sum += w[i];
        }
    }
    if (sum > 0) return;
    for (int i = 0; i < n; ++i) w[i] = 1.0f;
}

float fit_symmetric(const float* x, const float* w, int n, int qmin, int qmax, int* q) {
    float vmax = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
    if (std::fabs(vmax) < 1e-30f) {
        std::fill(q, q + n, 0);
        return 0;
    }
    int trial[256];
    float best_gain = -1, best_iscale = 0;
    // Map vmax to either edge: the negative edge has one level more (e.g. -8 vs 7 for Q4_0).
    for (const int edge : {qmin, qmax}) {
        if (edge == 0) continue;
        const float dir = edge < 0 ? -1.0f : 1.0f;
        const int half = grid_half();
        for (int k = -half; k <= half; ++k) {
            const float target = float(edge) + dir * float(k) * k_grid_step;
            if (target * dir < 0.5f) continue;
            const float iscale = target / vmax;
            round_symmetric(x, n, iscale, qmin, qmax, trial);
            float scale;
            const float gain = symmetric_gain(x, w, n, trial, scale);
            if (gain > best_gain) {
                best_gain = gain;
                best_iscale = iscale;
            }
        }
    }
    round_symmetric(x, n, best_iscale, qmin, qmax, q);
    float scale = 0;
    symmetric_gain(x, w, n, q, scale);
    const int rounds = refine_rounds();
    for (int round = 0; round < rounds && scale != 0; ++round) {
        round_symmetric(x, n, 1.0f / scale, qmin, qmax, trial);
        float s = 0;
        const float gain = symmetric_gain(x, w, n, trial, s);
        if (gain <= best_gain) break;
        best_gain = gain;
        scale = s;
        std::copy(trial, trial + n, q);
    }
    return scale;
}

scale_min fit_scale_min(const float* x, const float* w, int n, int qmax, int* q) {
    float lo = 0, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    if (hi - lo < 1e-30f) {  // constant block (<= 0): represented exactly by the minimum alone
        std::fill(q, q + n, 0);
        return {0, -lo};
    }
    int trial[256];
    float best_err = INFINITY, best_scale = 0, best_offset = lo;
    bool have_best = false;
    const int half = grid_half();
    for (int k = -half; k <= half; ++k) {
        const float iscale = (float(qmax) + float(k) * k_grid_step) / (hi - lo);
        for (int i = 0; i < n; ++i) trial[i] = clamp_level(round_level((x[i] - lo) * iscale), 0, qmax);
        float scale, offset;
        const float err = fit_affine(x, w, n, trial, scale, offset);
        if (!have_best || err < best_err) {
            have_best = true;
            best_err = err;
            best_scale = scale;
            best_offset = offset;
            std::copy(trial, trial + n, q);
        }
    }
    const int rounds = refine_rounds();
    for (int round = 0; round < rounds && best_scale > 0; ++round) {
        const float iscale = 1.0f / best_scale;
        for (int i = 0; i < n; ++i) trial[i] = clamp_level(round_level((x[i] - best_offset) * iscale), 0, qmax);
        float scale, offset;
        const float err = fit_affine(x, w, n, trial, scale, offset);
        if (err >= best_err) break;
        best_err = err;
        best_scale = scale;
        best_offset = offset;
        std::copy(trial, trial + n, q);
    }
    return {best_scale, -best_offset};
}

float requantize_error(const float* x, const float* w, int n, float scale, float min, int qmin, int qmax, int* q) {
    double err = 0;
    for (int i = 0; i < n; ++i) {
        // Division rather than a reciprocal multiply: the level must be the nearest one for this exact scale.
        q[i] = scale != 0 ? clamp_level(round_level((x[i] + min) / scale), qmin, qmax) : 0;
        const float y = scale * float(q[i]) - min;
        const double e = double(y) - x[i];
        err += w[i] * e * e;
    }
    return float(err);
}

}  // namespace memtile::quant_detail
