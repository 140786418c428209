// The Q4_K products of the single-sequence step in lane pairs (matvec-q4k.cuh), bit-equal to the plain 2 x 2 kernel;
// set_q4k_matvec / MEMTILE_CUDA_Q4K (cuda-backend.h), read when a graph is captured. docs/cuda-decode-log.md, "Session
// 10 (branch gq4k10)", also for the forms measured slower and removed (activations staged in shared memory, one warp
// per row pair: commit 913882c; a leaner lane-pair kernel and 4 rows per pair of warps: commit 34fbe62).
#include <cstdlib>

#include "backends/cuda/matvec-q4k.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

template <bool ONE, bool EARLY>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q4k_lp_kernel(q4k_args a, const int8_t* xq, const float* xd, const float* xs, float* y, int accumulate,
                         unsigned delay_ns) {
    q4k_lp_block<ONE, false, EARLY>(a, int(blockIdx.x), xq, xd, xs, y, accumulate, nullptr, 0, delay_ns);
}

bool g_q4k_set = false;
// Lane pairs: tg128 +0.6 % (docs/cuda-decode-log.md); the lane-pair kernel's early loads after 500 ns: +1.1-1.3 % on
// the H100 (docs/cuda-log-s32-s35.md, "Session 33").
int g_q4k = k_q4k_lane_pairs | k_q4k_early | (2 << k_q4k_delay_shift);

}  // namespace

int q4k_matvec_mode() {
    if (!g_q4k_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_Q4K")) g_q4k = int(std::strtol(env, nullptr, 0));
        g_q4k_set = true;
    }
    return g_q4k;
}

bool launch_matvec_q4k(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, cudaStream_t s) {
    const int mode = q4k_matvec_mode();
    q4k_args a;
    if (!(mode & k_q4k_lane_pairs) || ((mode & k_q4k_short_only) && w.n_in > 4096) || !q4k_args_of(w, a)) return false;
    const unsigned blocks = unsigned((w.n_out + 3) / 4);
    const bool one = w.n_in <= 4096;
    const bool early = (mode & k_q4k_early) && pdl_enabled();  // without PDL nothing runs before the wait
    const unsigned delay = unsigned(mode >> k_q4k_delay_shift) * 250u;
    auto kernel = early ? (one ? matvec_q4k_lp_kernel<true, true> : matvec_q4k_lp_kernel<false, true>)
                        : (one ? matvec_q4k_lp_kernel<true, false> : matvec_q4k_lp_kernel<false, false>);
    launch(kernel, blocks, 32 * k_block_warps, s, a, xq, xd, xs, y, accumulate ? 1 : 0, delay);
    return true;
}

}  // namespace detail

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_q4k_matvec(int mode);
void set_q4k_matvec(int mode) {
    detail::q4k_matvec_mode();
    detail::g_q4k = mode;
}
int q4k_matvec();
int q4k_matvec() {
    return detail::q4k_matvec_mode();
}

}  // namespace memtile::cuda
