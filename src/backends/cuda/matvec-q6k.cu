// Q6_K decode products by the lean block at other register budgets (set_q6k_variant in cuda-backend.h;
// docs/cuda-decode-log.md, "Session 10 (branch gq6k10)"); bit-equal to the lean kernels of matvec-qkm.cu, whose tasks,
// order and sums they keep (the rows per block R change neither).
//
// Why: ptxas gives the lean 2 x 4 block (the down product, 4,096 x 14,336: 112 tasks per row, one per thread) 52
// registers under its default budget (9 blocks per SM), for which it issues the later pieces of a task after the
// first sub-blocks' arithmetic, so a thread waits on memory twice; with no limit it issues every load first (106
// registers, 4 blocks per SM). At 64 (8 blocks per SM) the down product is 5-6 % faster alone and the Q4_K_M step ~1 %
// (session 10): the default for the down product. The other budgets and row counts stay selectable for measurements;
// streaming rows through warps with the next units in flight and early weight loads in the first blocks were measured
// slower (the branch history, commit 5cd1c73).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "backends/cuda/matvec-lean.cuh"
#include "backends/cuda/matvec-q6k.h"

namespace memtile::cuda {
namespace detail {
namespace {

// kq_lean_block<q6_k, R, W, true> (matvec-lean.cuh: every thread at most one task per row) with __launch_bounds__'s
// minimum of MINB blocks per SM (0: none, ptxas's default budget; 1: no limit).
template <int R, int W, int MINB>
__global__ void __launch_bounds__(32 * k_block_warps, MINB)
    matvec_q6k_lean_kernel(kq_lean_args a, const int8_t* xq, const float* xd, float* y, int accumulate) {
    kq_lean_block<dtype::q6_k, R, W, true>(a, int(blockIdx.x), xq, xd, nullptr, y, accumulate);
}

using lean_kernel = void (*)(kq_lean_args, const int8_t*, const float*, float*, int);
struct variant {
    int r, minb;
    lean_kernel k;
};
// The offered (R, MINB) of the W = 4 (down) and W = 1 (output) products; ptxas registers in the comments.
const variant k_fours[] = {{1, 0, matvec_q6k_lean_kernel<1, 4, 0>},    // 34
                           {2, 0, matvec_q6k_lean_kernel<2, 4, 0>},    // 52, the session-8 lean kernel's budget
                           {2, 1, matvec_q6k_lean_kernel<2, 4, 1>},    // 106, every load first
                           {2, 6, matvec_q6k_lean_kernel<2, 4, 6>},    // 80
                           {2, 7, matvec_q6k_lean_kernel<2, 4, 7>},    // 72
                           {2, 8, matvec_q6k_lean_kernel<2, 4, 8>},    // 64, the default
                           {2, 9, matvec_q6k_lean_kernel<2, 4, 9>},    // 56 (4 bytes spilled)
                           {2, 10, matvec_q6k_lean_kernel<2, 4, 10>},  // 48
                           {3, 0, matvec_q6k_lean_kernel<3, 4, 0>},    // 58
                           {3, 5, matvec_q6k_lean_kernel<3, 4, 5>},    // 96
                           {3, 6, matvec_q6k_lean_kernel<3, 4, 6>}};   // 80
const variant k_ones[] = {{1, 0, matvec_q6k_lean_kernel<1, 1, 0>},     // 32
                          {2, 0, matvec_q6k_lean_kernel<2, 1, 0>},     // 52, the session-8 lean kernel's budget
                          {2, 1, matvec_q6k_lean_kernel<2, 1, 1>},     // 104
                          {2, 8, matvec_q6k_lean_kernel<2, 1, 8>},     // 64
                          {2, 9, matvec_q6k_lean_kernel<2, 1, 9>},     // 56 (8 bytes spilled)
                          {2, 10, matvec_q6k_lean_kernel<2, 1, 10>},   // 48
                          {3, 0, matvec_q6k_lean_kernel<3, 1, 0>},     // 72
                          {3, 8, matvec_q6k_lean_kernel<3, 1, 8>},     // 64
                          {4, 0, matvec_q6k_lean_kernel<4, 1, 0>}};    // 82

int g_mode = 0, g_param = 0;
bool g_mode_set = false;

}  // namespace
}  // namespace detail

using namespace detail;

int q6k_variant_mode() {
    if (!g_mode_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_Q6K")) {
            char* end = nullptr;
            g_mode = int(std::strtol(env, &end, 0));
            if (end && *end == ',') g_param = int(std::strtol(end + 1, nullptr, 0));
        }
        g_mode_set = true;
    }
    return g_mode;
}

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_q6k_variant(int mode, int param);
void set_q6k_variant(int mode, int param) {
    q6k_variant_mode();
    g_mode = mode;
    g_param = param;
}
int q6k_variant();
int q6k_variant() {
    return q6k_variant_mode();
}

bool launch_q6k_lean(const gpu_weight& w, const int8_t* xq, const float* xd, float* y, bool accumulate,
                     cudaStream_t s) {
    const int mode = q6k_variant_mode();
    if (w.type != dtype::q6_k || !w.d || w.n_in % 256 != 0 || (mode & 1)) return false;
    constexpr int64_t lim = int64_t(1) << 30;
    if (w.n_out >= lim || w.q_row_bytes >= lim || w.n_in >= lim) return false;
    const matvec_shape shape = default_matvec_shape(w);
    const int64_t n_half = w.n_in / 128;
    // The lean kernel's shapes with one task per thread: 2 x 4 (n_half <= 128) and 2 x 1 (n_half <= 32).
    const bool four = shape.rows == 2 && shape.warps == 4 && n_half <= 128;
    const bool one = shape.rows == 2 && shape.warps == 1 && n_half <= 32;
    if (!four && !one) return false;
    int r = 2, minb = 8;  // the default: the down product at 64 registers
    if (mode & (four ? 2 : 4)) {
        const int param = four || (g_param >> 8) == 0 ? g_param & 255 : g_param >> 8;
        r = param / 16;
        minb = param % 16;
    } else if (!four) {
        return false;  // the 2 x 1 products: the lean kernel of matvec-qkm.cu
    }
    const variant* list = four ? k_fours : k_ones;
    const int n_list = four ? int(std::size(k_fours)) : int(std::size(k_ones));
    for (int i = 0; i < n_list; i++)
        if (const variant& v = list[i]; v.r == r && v.minb == minb) {
            const int n_out = int(w.n_out), rows_per_block = r * (four ? 1 : k_block_warps);
            const kq_lean_args a{w.q, w.d, n_out, int(w.q_row_bytes), int(w.n_in / 256), int(w.n_in)};
            launch(v.k, unsigned((n_out + rows_per_block - 1) / rows_per_block), 32 * k_block_warps, s, a, xq, xd, y,
                   accumulate ? 1 : 0);
            return true;
        }
    throw std::invalid_argument("[cuda] set_q6k_variant: no Q6_K lean variant of " + std::to_string(r) +
                                " rows and minimum " + std::to_string(minb) + " blocks per SM");
}

}  // namespace memtile::cuda
