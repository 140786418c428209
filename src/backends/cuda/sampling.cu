// Kernels of the GPU sampler (gpu-sampler.h): penalties, argmax, the CUB sort and the draw from the sorted
// pairs. Every float and double step uses the round-to-nearest intrinsics, so that nvcc contracts nothing
// into an FMA that sampler.cpp (compiled without FMA) does not have.
#include <cub/cub.cuh>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/gpu-sampler.h"

namespace memtile::cuda {
namespace {

constexpr int draw_block = 1024;

__global__ void iota_kernel(int32_t* ids, int n) {
    const int i = int(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) ids[i] = i;
}

__global__ void penalty_kernel(float* keys, const int32_t* ids, const int32_t* counts, int n_pen, int n, float repeat,
                               float presence, float frequency) {
    const int i = int(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n_pen) return;
    const int32_t t = ids[i];
    if (t < 0 || t >= n) return;
    float l = keys[t];
    l = l > 0 ? __fdiv_rn(l, repeat) : __fmul_rn(l, repeat);
    keys[t] = __fsub_rn(l, __fadd_rn(presence, __fmul_rn(frequency, float(counts[i]))));
}

__global__ void argmax_id_kernel(const float* keys, int n, int32_t* out) {
    const int idx = block_argmax(keys, n);
    if (threadIdx.x == 0) *out = idx;
}

// exp((logit - max) / temperature) as the host computes it in float (std::exp of a float: glibc's expf,
// <= 0.502 ulp; here the double exp rounded once to float).
__device__ __forceinline__ float weight(float logit, float max_logit, float temperature) {
    return __double2float_rn(exp(double(__fdiv_rn(__fsub_rn(logit, max_logit), temperature))));
}

// sampler.cpp's loops after the softmax numerators, in its order (one thread): normalise, min-p, top-p, draw.
// w: [n] numerators, overwritten by the probabilities. Returns the index of the drawn survivor.
__device__ int draw_sequential(float* w, int n, const sample_params& p) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum = __dadd_rn(sum, double(w[i]));
    for (int i = 0; i < n; i++) w[i] = __double2float_rn(__ddiv_rn(double(w[i]), sum));
    if (p.min_p > 0) {
        const float threshold = __fmul_rn(p.min_p, w[0]);
        int keep = 1;
        while (keep < n && w[keep] >= threshold) keep++;
        n = keep;
    }
    if (p.top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < n) {
            cum = __dadd_rn(cum, double(w[keep++]));
            if (cum >= double(p.top_p)) break;
        }
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total = __dadd_rn(total, double(w[i]));
    const double r = __dmul_rn(p.u, total);
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc = __dadd_rn(acc, double(w[i]));
        if (r < acc) return i;
    }
    return n - 1;
}

using scan_type = cub::BlockScan<double, draw_block>;
using sum_type = cub::BlockReduce<double, draw_block>;

struct draw_shared {
    union {
        scan_type::TempStorage scan;
        sum_type::TempStorage sum;
    } tmp;
    double value;
    int index;
};

// The first i in [0, n) whose inclusive prefix sum of probs is > thr (strict) or >= thr, n when none; *cum_at:
// that prefix sum (the sum of all n when none). Block-wide scan tile by tile: the same sums for the same n and
// probs, so top-p's total and the draw's accumulation agree with each other.
__device__ int scan_find(const float* probs, int n, double thr, bool strict, double* cum_at, draw_shared& sh) {
    double running = 0;
    for (int base = 0; base < n; base += draw_block) {
        const int i = base + int(threadIdx.x);
        const double v = i < n ? double(probs[i]) : 0.0;
        double incl = 0, tile = 0;
        scan_type(sh.tmp.scan).InclusiveSum(v, incl, tile);
        incl = __dadd_rn(running, incl);
        if (threadIdx.x == 0) sh.index = n;
        __syncthreads();
        const bool hit = i < n && (strict ? incl > thr : incl >= thr);
        if (hit) atomicMin(&sh.index, i);
        __syncthreads();
        const int found = sh.index;
        if (found < n) {
            if (i == found) sh.value = incl;
            __syncthreads();
            *cum_at = sh.value;
            return found;
        }
        running = __dadd_rn(running, tile);
        __syncthreads();  // sh.tmp and sh.index are reused by the next tile
    }
    *cum_at = running;
    return n;
}

// One block: the top-k survivors of the sorted pairs -> the drawn id.
__global__ void __launch_bounds__(draw_block) sample_sorted_kernel(const float* keys, const int32_t* ids, int n_all,
                                                                   sample_params p, float* probs, int32_t* out) {
    __shared__ float w[sample_seq_max];
    __shared__ draw_shared sh;
    const int tid = int(threadIdx.x);
    int n = p.top_k > 0 && p.top_k < n_all ? p.top_k : n_all;
    const float max_logit = keys[0];
    if (n <= sample_seq_max) {
        for (int i = tid; i < n; i += draw_block) w[i] = weight(keys[i], max_logit, p.temperature);
        __syncthreads();
        if (tid == 0) *out = ids[draw_sequential(w, n, p)];
        return;
    }
    // Many survivors: block-wide sums (their rounding differs from the host's sequential order).
    double part = 0;
    for (int i = tid; i < n; i += draw_block) {
        const float e = weight(keys[i], max_logit, p.temperature);
        probs[i] = e;
        part = __dadd_rn(part, double(e));
    }
    const double total_w = sum_type(sh.tmp.sum).Sum(part);
    if (tid == 0) sh.value = total_w;
    __syncthreads();
    const double sum = sh.value;
    for (int i = tid; i < n; i += draw_block) probs[i] = __double2float_rn(__ddiv_rn(double(probs[i]), sum));
    __syncthreads();
    if (p.min_p > 0) {
        const float threshold = __fmul_rn(p.min_p, probs[0]);
        if (tid == 0) sh.index = n;
        __syncthreads();
        for (int i = 1 + tid; i < n; i += draw_block)
            if (probs[i] < threshold) {
                atomicMin(&sh.index, i);
                break;
            }
        __syncthreads();
        n = sh.index;
        __syncthreads();
    }
    double total = 0;
    if (p.top_p < 1.0f) {
        const int at = scan_find(probs, n, double(p.top_p), false, &total, sh);
        if (at < n) n = at + 1;
    } else {
        scan_find(probs, n, INFINITY, true, &total, sh);
    }
    double unused = 0;
    const int at = scan_find(probs, n, __dmul_rn(p.u, total), true, &unused, sh);
    if (tid == 0) *out = ids[at < n ? at : n - 1];
}

}  // namespace

size_t sort_temp_bytes(int n) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const float*>(nullptr),
                                              static_cast<float*>(nullptr), static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), n);
    return bytes;
}

void launch_sort_desc(void* temp, size_t temp_bytes, const float* keys_in, float* keys_out, const int32_t* ids_in,
                      int32_t* ids_out, int n, cudaStream_t s) {
    cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, keys_in, keys_out, ids_in, ids_out, n, 0, 32, s);
}

void launch_iota(int32_t* ids, int n, cudaStream_t s) {
    iota_kernel<<<(n + 255) / 256, 256, 0, s>>>(ids, n);
}

void launch_penalties(float* keys, const int32_t* ids, const int32_t* counts, int n_pen, int n, float repeat,
                      float presence, float frequency, cudaStream_t s) {
    if (n_pen <= 0) return;
    penalty_kernel<<<(n_pen + 255) / 256, 256, 0, s>>>(keys, ids, counts, n_pen, n, repeat, presence, frequency);
}

void launch_argmax_id(const float* keys, int n, int32_t* out, cudaStream_t s) {
    argmax_id_kernel<<<1, 1024, 0, s>>>(keys, n, out);
}

void launch_sample_sorted(const float* sorted_keys, const int32_t* sorted_ids, int n, const sample_params& p,
                          float* probs, int32_t* out, cudaStream_t s) {
    sample_sorted_kernel<<<1, draw_block, 0, s>>>(sorted_keys, sorted_ids, n, p, probs, out);
}

}  // namespace memtile::cuda
