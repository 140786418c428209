// Kernel launches of the decode step with programmatic dependent launch (PDL, sm_90): each kernel may be
// launched while its predecessor in the stream still runs. Every kernel launched this way calls
// griddep_wait() before it touches memory that earlier kernels write or read (activations, caches, outputs:
// the wait returns once the predecessor grid has completed and its writes are visible, and the predecessor
// waited for its own, so all earlier kernels are done), and griddep_launch() to let its successor start.
// Before the wait a kernel may only read what no kernel writes (the weights): the Q8_0/F16/BF16 matvecs load their
// first tasks' weights into registers there (matvec_early), and optionally the next tasks into shared memory
// (matvec_prefetch); prefetching weights into L2 there was measured slower (docs/cuda-decode-log-s5-s6.md, "Session 5
// (branch gl2)").
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
// The shared-memory carveout (percent, -1: the driver's choice) every kernel launched here asks for
// (set_matvec_prefetch in cuda-backend.h; one value for all of a step's kernels, so that an SM need not drain to change
// its L1 / shared-memory split between them: docs/cuda-decode-log-s5-s6.md, "Session 6 (branch gmv)").
int launch_carveout();

// `smem`: bytes of dynamic shared memory per block; `cluster`: thread-block cluster dimensions (grid a multiple of
// them; 1 x 1 x 1: no cluster attribute).
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, dim3 cluster, cudaStream_t s,
                    Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[3];
    unsigned n = 0;
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x;
        attr[n].val.clusterDim.y = cluster.y;
        attr[n++].val.clusterDim.z = cluster.z;
    }
    if (pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (const int c = launch_carveout(); c >= 0) {
        attr[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
        attr[n++].val.sharedMemCarveout = unsigned(c);
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
template <typename... Params, typename... Args>
void launch_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    launch_cluster(kernel, grid, block, smem, dim3(1, 1, 1), s, std::forward<Args>(args)...);
}
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
    launch_smem(kernel, grid, block, 0, s, std::forward<Args>(args)...);
}

}  // namespace memtile::cuda::detail
