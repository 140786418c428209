// Kernel launches of the decode step with programmatic dependent launch (PDL, sm_90): each kernel may be
// launched while its predecessor in the stream still runs. Every kernel launched this way calls
// griddep_wait() before it touches memory that earlier kernels write or read (activations, caches, outputs:
// the wait returns once the predecessor grid has completed and its writes are visible, and the predecessor
// waited for its own, so all earlier kernels are done), and griddep_launch() to let its successor start.
// Before the wait a kernel may only read what no kernel writes: the weights. The matvec kernels use that
// time to prefetch their rows into L2, so the launch and the predecessor's tail overlap weight streaming.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace memtile::cuda::detail {

bool pdl_enabled();
bool prefetch_enabled();  // matvec rows prefetched into L2 before the wait (off unless set)

__device__ __forceinline__ void griddep_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void griddep_launch() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// Asynchronous prefetch of [p, p + bytes) into L2 (both multiples of 16; ignored otherwise).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
    if ((reinterpret_cast<uintptr_t>(p) | uint64_t(bytes)) % 16 != 0 || bytes <= 0) return;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(uint32_t(bytes)) : "memory");
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace memtile::cuda::detail
