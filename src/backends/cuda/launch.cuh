// Kernel launches of the decode step with programmatic dependent launch (PDL, sm_90): each kernel may be
// launched while its predecessor in the stream still runs. Every kernel launched this way calls
// griddep_wait() before it touches memory that earlier kernels write or read (activations, caches, outputs:
// the wait returns once the predecessor grid has completed and its writes are visible, and the predecessor
// waited for its own, so all earlier kernels are done), and griddep_launch() to let its successor start.
// Before the wait a kernel may only read what no kernel writes (the weights): the Q8_0/F16/BF16 matvecs load their
// first tasks' weights into registers there (matvec_early); prefetching weights into L2 there was measured slower
// (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace memtile::cuda::detail {

bool pdl_enabled();

__device__ __forceinline__ void griddep_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void griddep_launch() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
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
