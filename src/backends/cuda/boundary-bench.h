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
// The wide persistent forms' blocks: 8 sub-blocks of 128 threads (1,024 threads per block).
constexpr int k_wide_sub = 8;
// The persistent forms, in the order of cuda-backend.h's forms 4-16: 128-thread blocks with the two-level barrier,
// the same with the next slice's first unit loaded before it, without barriers; 1,024-thread blocks with the
// two-level barrier, with the one-level one, the same with the early unit, without barriers, with the one-level one
// polling with backoff; 1,024-thread blocks with their units copied into a shared-memory ring of 3 per sub-block ahead
// of the one-level barrier: by cp.async, by bulk copies, the same two with the last refill before each barrier issued
// after the arrival; bulk copies without barriers.
constexpr int k_boundary_persistent_forms = 13;
constexpr bool boundary_persistent_wide(int form) {
    return form >= 3;
}

// A slice of the persistent forms: `units` units from unit `first` of the bytes (-1: none, the units read nothing),
// its outputs at ys + y_at (y_at: also the units of the slices before it).
struct boundary_slice {
    int units;
    long long first, y_at;
};

// One slice as `grid` one-unit blocks (w: grid units, 16-byte aligned; null: no loads), each block's output y[block]
// reading x[thread % nx] of the previous slice. early: the loads before the PDL wait; pdl: the launch attribute.
cudaError_t launch_boundary_chain(bool early, bool pdl, int grid, const void* w, const float* x, int nx, float* y,
                                  cudaStream_t s);
// Every slice (slices: n_slices on the device, y_at counting the units of the width's slices before each) in one
// cooperative launch of `grid` blocks of persistent form `form` (0..k_boundary_persistent_forms - 1); x0: [nx0] the
// first slice's activations; bar: k_barrier_words zero words.
cudaError_t launch_boundary_persistent(int form, int grid, const void* w, const boundary_slice* slices, int n_slices,
                                       const float* x0, int nx0, float* ys, unsigned* bar, cudaStream_t s);
// The blocks per SM that every persistent form of that width keeps resident.
cudaError_t boundary_persistent_blocks_per_sm(bool wide, int& per_sm);

}  // namespace memtile::cuda::detail
