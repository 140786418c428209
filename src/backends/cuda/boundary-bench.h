// The kernels of bench_boundaries (cuda-backend.h; boundary-bench.cu), launched by its host side
// (boundary-bench.cpp). A unit is one block's read: 128 threads x 4 loads of 16 bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace memtile::cuda::detail {

constexpr uint64_t k_boundary_unit_bytes = 8192;
// The persistent forms' barrier: a top counter, a flag and 64 group counters, each 32 words (128 bytes) apart.
constexpr int k_barrier_groups = 64;
constexpr int k_barrier_words = 32 * (2 + k_barrier_groups);
// The wide persistent forms' blocks: 8 sub-blocks of 128 threads (1,024 threads), so 8 times fewer barrier arrivals;
// their barrier is one counter (release adds, acquire polls) instead of two levels.
constexpr int k_wide_sub = 8;

// A slice of the persistent forms: `units` units from unit `first` of the bytes (-1: none, the units read nothing),
// its outputs at ys + y_at.
struct boundary_slice {
    int units;
    long long first, y_at;
};

// One slice as `grid` one-unit blocks (w: grid units, 16-byte aligned; null: no loads), each block's output y[block]
// reading x[thread % nx] of the previous slice. early: the loads before the PDL wait; pdl: the launch attribute.
cudaError_t launch_boundary_chain(bool early, bool pdl, int grid, const void* w, const float* x, int nx, float* y,
                                  cudaStream_t s);
// Every slice (slices: n_slices on the device) in one cooperative launch of `grid` blocks; x0: [nx0] the first
// slice's activations; bar: k_barrier_words zero words. barrier: a grid-wide barrier between slices; early: each
// sub-block's first unit of the next slice loaded before it; wide: blocks of k_wide_sub sub-blocks (always with the
// barrier), else of one.
cudaError_t launch_boundary_persistent(bool barrier, bool early, bool wide, int grid, const void* w,
                                       const boundary_slice* slices, int n_slices, const float* x0, int nx0, float* ys,
                                       unsigned* bar, cudaStream_t s);
// The blocks per SM that every persistent form of that width keeps resident.
cudaError_t boundary_persistent_blocks_per_sm(bool wide, int& per_sm);

}  // namespace memtile::cuda::detail
