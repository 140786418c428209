// bench_boundaries (cuda-backend.h): what a chain of dependent steps costs in read bandwidth, apart from any
// arithmetic. A decode step reads its weights as a chain of products, each waiting for the previous one's output;
// this bench reads slices of cold bytes the same way and times each way of chaining them (docs/cuda-log-s32-s35.md,
// "Session 32").
//
// A unit is what one block of a decode product reads: 128 threads x 4 loads of 16 bytes (8 KiB, about a 4-row Q4_K
// block of a 4,096-wide matrix), folded, multiplied by an "activation" of the previous slice's output and summed over
// the block into one float of this slice's output.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/boundary-bench.h"
#include "backends/cuda/device-common.cuh"
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

// grid_barrier's one-level forms (BAR 2 and 3) in two halves, for thread 0: the arrival, and the wait for every
// block's arrival number gen.
__device__ __forceinline__ void flat_arrive(unsigned* bar) {
    // the old value is not needed, but atom (not red) keeps session 32's measured form
    asm volatile("{\n .reg .u32 old;\n atom.add.release.gpu.u32 old, [%0], 1;\n}" ::"l"(bar) : "memory");
}
template <int BAR>
__device__ __forceinline__ void flat_wait(const unsigned* bar, unsigned gen) {
    while (load_acquire(bar) < gen * gridDim.x) {
        if constexpr (BAR == 3) __nanosleep(64);
    }
}

// Barrier number `gen` (1, 2, ...) of the whole grid (bar: k_barrier_words words, zero at launch). BAR 1: two levels,
// so that no address takes more than k_barrier_groups or about gridDim.x / k_barrier_groups arrivals: a block arrives
// at its group's counter (fenced), the group's last arrival at the top counter, whose last arrival releases every block
// through the flag; the top counter, the flag and the group counters lie 128 bytes apart. BAR 2: one counter, each
// block's arrival a release add and its wait an acquire poll of the same counter, no fences. BAR 3: BAR 2 with a
// 64 ns sleep between polls, so that the polls leave the counter's L2 slice to the arrivals.
template <int BAR>
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned gen) {
    __syncthreads();
    if ((BAR == 2 || BAR == 3) && threadIdx.x == 0) {
        flat_arrive(bar);
        flat_wait<BAR>(bar, gen);
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

// Bulk copies (TMA, sm_90) of one unit into shared memory, completing on an mbarrier of shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return unsigned(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* mbar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(mbar)) : "memory");
}
// The producer's arrival announcing `bytes`, then the copy that completes them.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* mbar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(mbar)), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(mbar))
        : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* mbar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(smem_addr(mbar)), "r"(parity)
            : "memory");
}

// The persistent loop with its loads decoupled from the barriers: each sub-block copies its units into a ring of
// DEPTH units in shared memory, DEPTH units ahead of the one it finishes, across slices and barriers (slices without
// bytes take no slot), so that the reads of the next slices can stream while the sub-block waits at a barrier; a
// unit's loads depend on no output. BULK false: every thread copies the vectors load_unit reads (cp.async, 16 bytes
// each) and reads back only those, so its own cp.async wait is the only synchronisation. BULK true: one thread of the
// sub-block's second warp copies the whole unit (cp.async.bulk, completing on the slot's mbarrier) and every thread
// waits on that mbarrier, so that the thread which arrives at the grid barrier (thread 0, whose release must order
// its earlier stores) has no copy of its own in flight. DEFER (BAR 2 or 3): the copy that refills the slot of a
// slice's last unit is issued after the block's arrival at the barrier instead of before it, so that the arrival does
// not queue behind it. Shared memory: [DEPTH][SUB][k_unit_vecs] int4 (dynamic).
template <int SUB, int BAR, int DEPTH, bool BULK, bool DEFER = false>
__global__ void __launch_bounds__(k_threads* SUB, 1)
    ring_kernel(const int4* w, const boundary_slice* slices, int n_slices, const float* x0, int nx0, float* ys,
                unsigned* bar) {
    extern __shared__ int4 ring[];
    __shared__ uint64_t mbar[DEPTH][SUB];
    const int sub = int(threadIdx.x / k_threads);
    const int c = int(blockIdx.x) * SUB + sub, stride = int(gridDim.x) * SUB;
    const bool producer = sub_thread() == 32;
    if (BULK && producer)
        for (int d = 0; d < DEPTH; d++) mbar_init(&mbar[d][sub]);
    if (BULK) {
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        __syncthreads();
    }
    // The next unit to copy: unit li of slice ls (ls == n_slices: none left).
    int ls = 0, li = first_unit(c, stride, slices[0].y_at);
    auto issue = [&](int slot) {
        while (ls < n_slices && (slices[ls].first < 0 || li >= slices[ls].units))
            if (++ls < n_slices) li = first_unit(c, stride, slices[ls].y_at);
        if (ls < n_slices) {
            const int4* src = w + (uint64_t(slices[ls].first) + uint64_t(li)) * k_unit_vecs;
            int4* dst = ring + (uint64_t(slot) * SUB + uint64_t(sub)) * k_unit_vecs;
            if constexpr (BULK) {
                if (producer) {
                    // the slot was last read through the generic proxy (ordered by finish_unit's barrier)
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    bulk_copy(dst, src, unsigned(k_boundary_unit_bytes), &mbar[slot][sub]);
                }
            } else {
#pragma unroll
                for (int k = 0; k < k_loads; k++)
                    cp_async16(dst + sub_thread() + k * k_threads, src + sub_thread() + k * k_threads);
            }
            li += stride;
        }
        if constexpr (!BULK) cp_async_commit();  // an empty group past the last unit keeps the count of groups per unit
    };
#pragma unroll
    for (int d = 0; d < DEPTH; d++) issue(d);
    int slot = 0, pending = -1;  // pending: the slot whose refill waits for the barrier's arrival (DEFER)
    unsigned phases = 0;         // bit d: the parity of slot d's next completion
    for (int s = 0; s < n_slices; s++) {
        const boundary_slice sl = slices[s];
        const bool dep = BAR != 0 && s > 0;
        const float* x = dep ? ys + slices[s - 1].y_at : x0;
        const int nx = dep ? slices[s - 1].units : nx0;
        for (int i = first_unit(c, stride, sl.y_at); i < sl.units; i += stride) {
            unit_loads u;
            if (sl.first >= 0) {
                if constexpr (BULK) {
                    mbar_wait(&mbar[slot][sub], (phases >> slot) & 1u);
                    phases ^= 1u << slot;
                } else {
                    cp_async_wait<DEPTH - 1>();
                }
                const int4* src = ring + (uint64_t(slot) * SUB + uint64_t(sub)) * k_unit_vecs;
#pragma unroll
                for (int k = 0; k < k_loads; k++) u.v[k] = src[sub_thread() + k * k_threads];
            }
            finish_unit<SUB>(u, sl.first >= 0, x, nx, ys + sl.y_at, i);
            if (sl.first >= 0) {
                if (DEFER && i + stride >= sl.units && s + 1 < n_slices)
                    pending = slot;
                else
                    issue(slot);
                slot = slot + 1 == DEPTH ? 0 : slot + 1;
            }
        }
        if (BAR == 0 || s + 1 == n_slices) continue;
        if constexpr (DEFER) {
            static_assert(BAR == 2 || BAR == 3, "deferred refills need the one-level barrier");
            __syncthreads();
            if (threadIdx.x == 0) flat_arrive(bar);
            __syncthreads();  // the arrival is issued before any thread's refill
            if (pending >= 0) issue(pending);
            pending = -1;
            if (threadIdx.x == 0) flat_wait<BAR>(bar, unsigned(s + 1));
            __syncthreads();
        } else {
            grid_barrier<BAR>(bar, unsigned(s + 1));
        }
    }
    if constexpr (!BULK) cp_async_wait_all();
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

template <int SUB, int DEPTH>
constexpr size_t ring_bytes() {
    return size_t(DEPTH) * SUB * k_boundary_unit_bytes;
}

template <int SUB, int BAR, int DEPTH, bool BULK, bool DEFER>
cudaError_t launch_ring(int grid, const int4* w, const boundary_slice* slices, int n_slices, const float* x0, int nx0,
                        float* ys, unsigned* bar, cudaStream_t s) {
    void* args[] = {&w, &slices, &n_slices, &x0, &nx0, &ys, &bar};
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(ring_kernel<SUB, BAR, DEPTH, BULK, DEFER>),
                                       dim3(unsigned(grid)), dim3(k_threads * SUB), args, ring_bytes<SUB, DEPTH>(), s);
}

// The persistent forms (boundary-bench.h's order): each one's launch, kernel and dynamic shared memory.
using persistent_fn = cudaError_t (*)(int, const int4*, const boundary_slice*, int, const float*, int, float*,
                                      unsigned*, cudaStream_t);
struct persistent_form {
    persistent_fn launch;
    const void* kernel;
    size_t smem;
};
template <int SUB, int BAR, bool EARLY>
persistent_form plain_form() {
    return {launch_persistent<SUB, BAR, EARLY>, reinterpret_cast<const void*>(persistent_kernel<SUB, BAR, EARLY>), 0};
}
template <int SUB, int BAR, int DEPTH, bool BULK, bool DEFER = false>
persistent_form ring_form() {
    return {launch_ring<SUB, BAR, DEPTH, BULK, DEFER>,
            reinterpret_cast<const void*>(ring_kernel<SUB, BAR, DEPTH, BULK, DEFER>), ring_bytes<SUB, DEPTH>()};
}
const persistent_form& persistent(int form) {
    static const persistent_form forms[k_boundary_persistent_forms] = {plain_form<1, 1, false>(),
                                                                       plain_form<1, 1, true>(),
                                                                       plain_form<1, 0, false>(),
                                                                       plain_form<k_wide_sub, 1, false>(),
                                                                       plain_form<k_wide_sub, 2, false>(),
                                                                       plain_form<k_wide_sub, 2, true>(),
                                                                       plain_form<k_wide_sub, 0, false>(),
                                                                       plain_form<k_wide_sub, 3, false>(),
                                                                       ring_form<k_wide_sub, 2, 3, false>(),
                                                                       ring_form<k_wide_sub, 2, 3, true>(),
                                                                       ring_form<k_wide_sub, 2, 3, false, true>(),
                                                                       ring_form<k_wide_sub, 2, 3, true, true>(),
                                                                       ring_form<k_wide_sub, 0, 3, true>()};
    return forms[form];
}

}  // namespace

cudaError_t launch_boundary_chain(bool early, bool pdl, int grid, const void* w, const float* x, int nx, float* y,
                                  cudaStream_t s) {
    const auto* p = static_cast<const int4*>(w);
    return early ? launch_chain<true>(pdl, grid, p, x, nx, y, s) : launch_chain<false>(pdl, grid, p, x, nx, y, s);
}

cudaError_t launch_boundary_persistent(int form, int grid, const void* w, const boundary_slice* slices, int n_slices,
                                       const float* x0, int nx0, float* ys, unsigned* bar, cudaStream_t s) {
    if (form < 0 || form >= k_boundary_persistent_forms) return cudaErrorInvalidValue;
    return persistent(form).launch(grid, static_cast<const int4*>(w), slices, n_slices, x0, nx0, ys, bar, s);
}

cudaError_t boundary_persistent_blocks_per_sm(bool wide, int& per_sm) {
    per_sm = 1 << 30;
    for (int f = 0; f < k_boundary_persistent_forms; f++) {
        if (boundary_persistent_wide(f) != wide) continue;
        const persistent_form& p = persistent(f);
        if (p.smem)
            if (const cudaError_t e =
                    cudaFuncSetAttribute(p.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem));
                e != cudaSuccess)
                return e;
        int n = 0;
        if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, p.kernel, wide ? k_threads * k_wide_sub : k_threads, p.smem);
            e != cudaSuccess)
            return e;
        per_sm = std::min(per_sm, n);
    }
    return cudaSuccess;
}

}  // namespace memtile::cuda::detail
