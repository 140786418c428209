// Host-side helpers shared by the CUDA backend's C++ files: error checking of runtime calls and timing of
// CUDA graph replays (the decode benchmarks).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace memtile::cuda {

// Throws memtile::error ("cuda") naming the call and the CUDA error when e is not cudaSuccess.
inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda", "{} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Whether the decoders warm up at load (decoder.cpp, prefill.cpp warm_up()): on unless MEMTILE_CUDA_WARMUP=0
// (A/B of load time against time to first token).
inline bool warm_up_enabled() {
    const char* env = std::getenv("MEMTILE_CUDA_WARMUP");
    return !env || std::strcmp(env, "0") != 0;
}

// Device allocations freed together (when the arena is destroyed or released). get() never returns null: a
// failed cudaMalloc throws; zero bytes still get a 16-byte allocation so that every buffer has an address.
class device_arena {
public:
    device_arena() = default;
    ~device_arena() { release(); }
    device_arena(const device_arena&) = delete;
    device_arena& operator=(const device_arena&) = delete;
    void* get(size_t bytes) {
        void* p = nullptr;
        check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
        ptrs_.push_back(p);
        return p;
    }
    template <class T>
    T* get_n(size_t n) {
        return static_cast<T*>(get(n * sizeof(T)));
    }
    void release() {
        for (void* p : ptrs_) cudaFree(p);
        ptrs_.clear();
    }

private:
    std::vector<void*> ptrs_;
};

// Seconds taken by n launches of g on s, after `warmup` untimed ones (CUDA events around the n; waits for
// them). `what` names the steps in an error.
inline double time_graph_replays(cudaGraphExec_t g, cudaStream_t s, int warmup, int n, const char* what) {
    for (int i = 0; i < warmup; i++) check(cudaGraphLaunch(g, s), "cudaGraphLaunch");
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "cudaEventCreate");
    check(cudaEventCreate(&e1), "cudaEventCreate");
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    for (int i = 0; i < n; i++) check(cudaGraphLaunch(g, s), "cudaGraphLaunch");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    const cudaError_t done = cudaEventSynchronize(e1);
    float ms = 0;
    if (done == cudaSuccess) check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    check(done, what);
    return double(ms) / 1e3;
}

}  // namespace memtile::cuda
