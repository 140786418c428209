// bench_boundaries (cuda-backend.h): what a chain of dependent steps costs in read bandwidth, apart from any
// arithmetic. A decode step reads its weights as a chain of products, each waiting for the previous one's output;
// this bench reads slices of cold bytes the same way and times each way of chaining them (docs/cuda.md, "Session 32").
//
// A unit is what one block of a decode product reads: 128 threads x 4 loads of 16 bytes (8 KiB, about a 4-row Q4_K
// block of a 4,096-wide matrix), folded, multiplied by an "activation" of the previous slice's output and summed over
// the block into one float of this slice's output.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/boundary-bench.h"
#include "backends/cuda/launch.cuh"

namespace memtile::cuda::detail {
namespace {

constexpr int k_threads = 128, k_loads = 4;
constexpr uint64_t k_unit_vecs = uint64_t(k_threads) * k_loads;  // 16-byte vectors per unit
static_assert(k_unit_vecs * 16 == k_boundary_unit_bytes);

struct unit_loads {
    int4 v[k_loads];
};

// A block is SUB sub-blocks of 128 threads, each reading its own units; t: the thread within its sub-block.
__device__ __forceinline__ unsigned sub_thread() {
    return threadIdx.x % unsigned(k_threads);
}

// Thread t takes vectors t, t + 128, ...: each load instruction of a warp reads 512 contiguous bytes.
__device__ __forceinline__ void load_unit(const int4* unit, unit_loads& u) {
#pragma unroll
    for (int k = 0; k < k_loads; k++) u.v[k] = __ldcs(unit + sub_thread() + k * k_threads);
}

// The sub-block's 128 threads meet (the whole block where it is one sub-block).
template <int SUB>
__device__ __forceinline__ void sub_sync() {
    if constexpr (SUB == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(1 + int(threadIdx.x / k_threads)), "r"(k_threads) : "memory");
}

// y[i] = the sub-block's sum of (fold of its loads) x x[t % nx]; x: the previous slice's output ([nx], nx >= 1).
template <int SUB>
__device__ __forceinline__ void finish_unit(const unit_loads& u, bool loaded, const float* x, int nx, float* y, int i) {
    int acc = 0;
    if (loaded)
#pragma unroll
        for (int k = 0; k < k_loads; k++) acc ^= u.v[k].x ^ u.v[k].y ^ u.v[k].z ^ u.v[k].w;
    float v = float(acc & 0xff) * x[sub_thread() % unsigned(nx)];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __shared__ float part[SUB][k_threads / 32];
    float* p = part[threadIdx.x / k_threads];
    if ((threadIdx.x & 31) == 0) p[sub_thread() >> 5] = v;
    sub_sync<SUB>();
    if (sub_thread() == 0) y[i] = p[0] + p[1] + p[2] + p[3];
    sub_sync<SUB>();  // part is reused by the persistent kernels' next unit
}

// One slice per launch, one unit per block (w null: no loads, one block per unit of the empty slice).
// EARLY: the unit's loads issued before the PDL wait, as the Q8_0 / F16 products do with their first tasks.
template <bool EARLY>
__global__ void __launch_bounds__(k_threads) chain_kernel(const int4* w, const float* x, int nx, float* y) {
    unit_loads u;
    const int4* unit = w ? w + uint64_t(blockIdx.x) * k_unit_vecs : nullptr;
    if (EARLY && unit) load_unit(unit, u);
    griddep_wait();
    griddep_launch();
    if (!EARLY && unit) load_unit(unit, u);
    finish_unit<1>(u, unit != nullptr, x, nx, y, int(blockIdx.x));
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Barrier number `gen` (1, 2, ...) of the whole grid (bar: k_barrier_words words, zero at launch). BAR 1: two levels,
// so that no address takes more than k_barrier_groups or about gridDim.x / k_barrier_groups arrivals: a block arrives
// at its group's counter (fenced), the group's last arrival at the top counter, whose last arrival releases every block
// through the flag; the top counter, the flag and the group counters lie 128 bytes apart. BAR 2: one counter, each
// block's arrival a release add and its wait an acquire poll of the same counter, no fences.
template <int BAR>
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned gen) {
    __syncthreads();
    if (BAR == 2 && threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(bar) : "memory");
        while (load_acquire(bar) < gen * gridDim.x) {
        }
    }
    if (BAR == 1 && threadIdx.x == 0) {
        const unsigned groups = min(unsigned(k_barrier_groups), gridDim.x);
        const unsigned g = blockIdx.x % groups, in_group = (gridDim.x - g + groups - 1) / groups;
        unsigned* flag = bar + 32;
        __threadfence();
        if (atomicAdd(bar + 64 + 32 * g, 1u) + 1 == gen * in_group && atomicAdd(bar, 1u) + 1 == gen * groups) {
            __threadfence();
            atomicExch(flag, gen);
        }
        while (load_acquire(flag) < gen) {
        }
    }
    __syncthreads();
}

// The first unit of a slice for sub-block c of `stride`: c shifted by the units of the slices before it (y_at), so that
// a slice of fewer units than sub-blocks does not always leave the same sub-blocks idle (the no-barrier form runs on).
__device__ __forceinline__ int first_unit(int c, int stride, long long y_at) {
    const int i = c - int(y_at % stride);
    return i < 0 ? i + stride : i;
}

// Every slice in one launch of co-resident blocks (a cooperative launch) of SUB sub-blocks of 128 threads; sub-block
// c = b SUB + j (block b, sub-block j) takes the units first_unit(c), + SUB grid, ... of each slice. slices[i]: {units,
// first unit in w or -1 for no loads, where its outputs start in ys (also the units before it)}. BAR: the grid-wide
// barrier between slices (1, 2: grid_barrier; the dependency: slice i reads slice i - 1's outputs); 0: none, the
// blocks run on through the slices reading x0 (the no-boundary ceiling of this loop). EARLY: before each barrier a
// sub-block issues its first unit of the next slice, whose loads do not depend on the barrier.
template <int SUB, int BAR, bool EARLY>
__global__ void __launch_bounds__(k_threads* SUB)
    persistent_kernel(const int4* w, const boundary_slice* slices, int n_slices, const float* x0, int nx0, float* ys,
                      unsigned* bar) {
    const int c = int(blockIdx.x) * SUB + int(threadIdx.x / k_threads), stride = int(gridDim.x) * SUB;
    unit_loads next;
    bool have_next = false;
    for (int s = 0; s < n_slices; s++) {
        const boundary_slice sl = slices[s];
        const int4* slice = sl.first >= 0 ? w + uint64_t(sl.first) * k_unit_vecs : nullptr;
        const bool dep = BAR != 0 && s > 0;
        const float* x = dep ? ys + slices[s - 1].y_at : x0;
        const int nx = dep ? slices[s - 1].units : nx0;
        for (int i = first_unit(c, stride, sl.y_at); i < sl.units; i += stride) {
            unit_loads u;
            if (have_next)
                u = next;
            else if (slice)
                load_unit(slice + uint64_t(i) * k_unit_vecs, u);
            have_next = false;
            finish_unit<SUB>(u, slice != nullptr, x, nx, ys + sl.y_at, i);
        }
        if (BAR == 0 || s + 1 == n_slices) continue;
        const boundary_slice nl = slices[s + 1];
        const int ni = first_unit(c, stride, nl.y_at);
        if (EARLY && nl.first >= 0 && ni < nl.units) {
            load_unit(w + (uint64_t(nl.first) + uint64_t(ni)) * k_unit_vecs, next);
            have_next = true;
        }
        grid_barrier<BAR>(bar, unsigned(s + 1));
    }
}

// One chain launch with the PDL attribute on or off (independent of set_pdl: this bench compares both).
template <bool EARLY>
cudaError_t launch_chain(bool pdl, int grid, const int4* w, const float* x, int nx, float* y, cudaStream_t s) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(grid));
    cfg.blockDim = dim3(k_threads);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, chain_kernel<EARLY>, w, x, nx, y);
}

template <int SUB, int BAR, bool EARLY>
cudaError_t launch_persistent(int grid, const int4* w, const boundary_slice* slices, int n_slices, const float* x0,
                              int nx0, float* ys, unsigned* bar, cudaStream_t s) {
    void* args[] = {&w, &slices, &n_slices, &x0, &nx0, &ys, &bar};
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(persistent_kernel<SUB, BAR, EARLY>),
                                       dim3(unsigned(grid)), dim3(k_threads * SUB), args, 0, s);
}

// The persistent forms' kernels (k_boundary_persistent: {wide, barrier, early}).
using persistent_fn = cudaError_t (*)(int, const int4*, const boundary_slice*, int, const float*, int, float*,
                                      unsigned*, cudaStream_t);
constexpr persistent_fn k_persistent[k_boundary_persistent_forms] = {
    launch_persistent<1, 1, false>,          launch_persistent<1, 1, true>,
    launch_persistent<1, 0, false>,          launch_persistent<k_wide_sub, 1, false>,
    launch_persistent<k_wide_sub, 2, false>, launch_persistent<k_wide_sub, 2, true>,
    launch_persistent<k_wide_sub, 0, false>};
const void* const k_persistent_kernels[k_boundary_persistent_forms] = {
    reinterpret_cast<const void*>(persistent_kernel<1, 1, false>),
    reinterpret_cast<const void*>(persistent_kernel<1, 1, true>),
    reinterpret_cast<const void*>(persistent_kernel<1, 0, false>),
    reinterpret_cast<const void*>(persistent_kernel<k_wide_sub, 1, false>),
    reinterpret_cast<const void*>(persistent_kernel<k_wide_sub, 2, false>),
    reinterpret_cast<const void*>(persistent_kernel<k_wide_sub, 2, true>),
    reinterpret_cast<const void*>(persistent_kernel<k_wide_sub, 0, false>)};

}  // namespace

cudaError_t launch_boundary_chain(bool early, bool pdl, int grid, const void* w, const float* x, int nx, float* y,
                                  cudaStream_t s) {
    const auto* p = static_cast<const int4*>(w);
    return early ? launch_chain<true>(pdl, grid, p, x, nx, y, s) : launch_chain<false>(pdl, grid, p, x, nx, y, s);
}

cudaError_t launch_boundary_persistent(int form, int grid, const void* w, const boundary_slice* slices, int n_slices,
                                       const float* x0, int nx0, float* ys, unsigned* bar, cudaStream_t s) {
    if (form < 0 || form >= k_boundary_persistent_forms) return cudaErrorInvalidValue;
    return k_persistent[form](grid, static_cast<const int4*>(w), slices, n_slices, x0, nx0, ys, bar, s);
}

cudaError_t boundary_persistent_blocks_per_sm(bool wide, int& per_sm) {
    per_sm = 1 << 30;
    for (int f = 0; f < k_boundary_persistent_forms; f++) {
        if (boundary_persistent_wide(f) != wide) continue;
        int n = 0;
        if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, k_persistent_kernels[f], wide ? k_threads * k_wide_sub : k_threads, 0);
            e != cudaSuccess)
            return e;
        per_sm = std::min(per_sm, n);
    }
    return cudaSuccess;
}

}  // namespace memtile::cuda::detail
