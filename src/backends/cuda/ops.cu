// Element-wise, normalisation and sampling kernels of the decode step (its attention: attention-decode.cu), plus the
// bandwidth probe and random weight fill used by benchmarks. All activations are f32; the KV cache is f16.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda-kernels.h"
#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace detail {

namespace {
bool g_pdl_set = false, g_pdl = true;
bool g_norm_loads_set = false;
int g_norm_loads = -1;
}  // namespace

// set_norm_loads / MEMTILE_CUDA_NORM_LOADS (cuda-backend.h): read at every launch, so a graph keeps the mode it was
// captured with.
int norm_loads() {
    if (!g_norm_loads_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_NORM_LOADS")) g_norm_loads = int(std::strtol(env, nullptr, 10));
        g_norm_loads_set = true;
    }
    return g_norm_loads;
}

bool pdl_enabled() {
    if (!g_pdl_set) {
        const char* env = std::getenv("MEMTILE_CUDA_PDL");
        g_pdl = !(env && env[0] == '0');
        g_pdl_set = true;
    }
    return g_pdl;
}

// Whether the single-row RMSNorm lets its dependents launch before its own wait (set_matvec_prefetch's mask bits 32:
// without quantization, 128: with it; matvec.cu).
bool norm_trigger_early(bool quantizes);

}  // namespace detail

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_norm_loads(int mode);
void set_norm_loads(int mode) {
    detail::norm_loads();
    detail::g_norm_loads = mode;
}
void set_pdl(bool on);
void set_pdl(bool on) {
    detail::pdl_enabled();
    detail::g_pdl = on;
}

namespace {

using detail::griddep_launch;
using detail::griddep_wait;
using detail::launch;

// Blocks of 256 threads, one element each; blockIdx.y = row of x and out [n_rows, n] (xq, xd, xs group-major
// over the rows, prefill-kernels.h). Every block sums the squares of all of its row in double (the same order in every
// block and for every row count, so the same scale; as the CPU engine, in double), then normalises (and quantizes) its
// 256 elements: no single-block kernel on the critical path. The batched step runs this same kernel, so that its rows
// equal the single-sequence step's.
// TRIGGER: griddep_launch also before the wait, so that the next kernel's blocks (a product staging its weights) may
// become resident while this kernel's predecessor still runs (its wait still covers this kernel's completion).
// LOADS (set_norm_loads): 0 the strided loop (nvcc unrolls it by 4: for n = 4,096 four dependent L2 round trips per
// thread, each behind the next product's early weight loads); 1 a thread's elements loaded in runs of 16 before they
// are summed (one round trip up to n = 4,096), the norm weight w[i] with them and x[i] taken from the run; 2 as 1 with
// w[i] loaded before the wait. The same products and sums in the same order: the same bits in every mode.
template <bool TRIGGER = false, int LOADS = 0>
__global__ void __launch_bounds__(256) rms_norm_kernel(const float* x, const float* w, float* out, int n, float eps,
                                                       int q_block, int8_t* xq, float* xd, float* xs) {
    constexpr int RUN = 16;
    const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;
    float wi = 0, xi = 0;
    if (LOADS == 2 && i < n) wi = w[i];
    if (TRIGGER) griddep_launch();
    griddep_wait();
    griddep_launch();
    const int64_t row = blockIdx.y;
    x += row * n;
    out += row * n;
    __shared__ double partial[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double ss = 0;
    if constexpr (LOADS == 0) {
        for (int i = threadIdx.x; i < n; i += 256) ss += double(x[i]) * double(x[i]);
    } else {
        if (LOADS == 1 && i < n) wi = w[i];
        for (int i0 = threadIdx.x; i0 < n; i0 += 256 * RUN) {
            float v[RUN];
#pragma unroll
            for (int k = 0; k < RUN; k++) v[k] = i0 + 256 * k < n ? x[i0 + 256 * k] : 0.0f;
#pragma unroll
            for (int k = 0; k < RUN; k++) {
                if (i0 + 256 * k < n) ss = __fma_rn(double(v[k]), double(v[k]), ss);
                if (i0 + 256 * k == i) xi = v[k];
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    double t = 0;
    for (int k = 0; k < 8; k++) t += partial[k];
    const float scale = float(1.0 / sqrt(t / double(n) + double(eps)));
    float v = 0;
    if (i < n) {
        v = LOADS ? xi * scale * wi : x[i] * scale * w[i];
        out[i] = v;
    }
    if (xq) quantize_block256(v, int64_t(blockIdx.x) * 256, n, q_block, xq, xd, xs, row, gridDim.y);
}

// One warp per run of NG groups of 32 of x.
template <int NG>
__global__ void quantize_kernel(const float* x, int64_t n, int8_t* xq, float* xd, float* xs) {
    griddep_wait();
    griddep_launch();
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (r >= n / (32 * NG)) return;
    float v[NG];
#pragma unroll
    for (int k = 0; k < NG; k++) v[k] = x[(r * NG + k) * 32 + lane];
    quantize_warp<NG>(v, r * NG, lane, xq, xd, xs);
}

// gate/up product, one element per thread in blocks of 256; with xq also quantized (n_ff % 32 == 0).
// blockIdx.y = row (gu rows 2 n_ff apart, out rows n_ff; xq, xd, xs group-major over the rows).
__global__ void __launch_bounds__(256)
    swiglu_kernel(const float* gu, int64_t n_ff, float* out, int q_block, int8_t* xq, float* xd, float* xs) {
    griddep_wait();
    griddep_launch();
    const int64_t row = blockIdx.y;
    gu += row * 2 * n_ff;
    out += row * n_ff;
    const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;
    float v = 0;
    if (i < n_ff) {
        const float g = gu[i];
        v = g / (1.0f + expf(-g)) * gu[n_ff + i];
        out[i] = v;
    }
    if (xq) quantize_block256(v, int64_t(blockIdx.x) * 256, n_ff, q_block, xq, xd, xs, row, gridDim.y);
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Small random value in [-amp, amp) as f16 bits.
__device__ __forceinline__ uint16_t rand_half(uint64_t h, float amp) {
    const float u = float(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
    return __half_as_ushort(__float2half_rn(u * amp));
}

// Random weight bytes: plain formats get values of N(0, ~0.02)-like magnitude, quant bytes are uniform, and
// every f16 scale (separate d arrays, d/dmin of the Q4_K/Q5_K headers) is a small positive value.
__global__ void fill_random_kernel(gpu_weight w, uint64_t seed, uint64_t n_q_words, uint64_t n_d) {
    uint8_t* q = const_cast<uint8_t*>(w.q);
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_q_words; i += stride) {
        const uint64_t h = mix(seed ^ (i * 0x2545f4914f6cdd1dull));
        uint32_t v = uint32_t(h);
        if (w.type == dtype::f16) {
            v = uint32_t(rand_half(h, 0.035f)) | uint32_t(rand_half(h >> 32, 0.035f)) << 16;
        } else if (w.type == dtype::bf16) {
            const uint32_t a = __float_as_uint((float(h & 0xffff) / 65536.0f - 0.5f) * 0.07f) >> 16;
            const uint32_t b = __float_as_uint((float((h >> 16) & 0xffff) / 65536.0f - 0.5f) * 0.07f) >> 16;
            v = a | b << 16;
        } else if (w.type == dtype::f32) {
            v = __float_as_uint((float(h & 0xffffff) / 16777216.0f - 0.5f) * 0.07f);
        }
        reinterpret_cast<uint32_t*>(q)[i] = v;
    }
    __syncthreads();
    uint16_t* d = const_cast<uint16_t*>(w.d);
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_d; i += stride)
        d[i] = rand_half(mix(seed + i) | 0x800000, 0.002f);
}

__global__ void fix_k_headers_kernel(gpu_weight w, uint64_t n_blocks, int block_bytes, uint64_t seed) {
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t b = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks; b += stride) {
        uint16_t* h = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(w.q) + b * block_bytes);
        h[0] = rand_half(mix(seed + b) | 0x800000, 0.002f);
        h[1] = rand_half(mix(seed + b + 1) | 0x800000, 0.001f);
    }
}

// Q4_K side words (device layout, cuda-kernels.h): 6-bit scales and mins, then d and dmin as above.
__global__ void fix_q4k_side_kernel(gpu_weight w, uint64_t n_blocks, uint64_t seed) {
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    const int n_sb = int(w.n_in / 256);
    for (uint64_t b = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks; b += stride) {
        uint32_t* side = const_cast<uint32_t*>(q4k_side_of(w.d, int64_t(b / n_sb), n_sb));
        uint32_t* p = side + q4k_sm_word(int64_t(b % n_sb));
        uint32_t* dm = side + q4k_dm_word(int64_t(b % n_sb));
        const uint64_t h0 = mix(seed ^ (b * 0x9e3779b97f4a7c15ull)), h1 = mix(h0 + 1);
        p[0] = uint32_t(h0) & 0x3f3f3f3fu;
        p[1] = uint32_t(h0 >> 32) & 0x3f3f3f3fu;
        p[2] = uint32_t(h1) & 0x3f3f3f3fu;
        p[3] = uint32_t(h1 >> 32) & 0x3f3f3f3fu;
        *dm = uint32_t(rand_half(mix(seed + b) | 0x800000, 0.002f)) |
              uint32_t(rand_half(mix(seed + b + 1) | 0x800000, 0.001f)) << 16;
    }
}

__global__ void fill_f32_kernel(float* p, int64_t n, float v) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = v;
}

// Streaming read: each thread sums 4 independent 16-byte loads per iteration; the sum goes to *sink only
// when it equals an impossible value, so the loads cannot be removed.
__global__ void read_kernel(const int4* p, uint64_t n, int* sink) {
    int acc = 0;
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const int4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                   d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const int4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x7f3a5c1d) *sink = acc;
}

__global__ void read_l2_kernel(const int4* p, uint64_t n, int passes, int* sink) {
    int acc = 0;
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (int r = 0; r < passes; r++)
        for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
            const int4 a = __ldcg(p + i);
            acc ^= a.x ^ a.y ^ a.z ^ a.w ^ r;
        }
    if (acc == 0x7f3a5c1d) *sink = acc;
}

}  // namespace

void launch_rms_norm_batch(const float* x, const float* w, float* out, int n_rows, int n, float eps, int q_block,
                           int8_t* xq, float* xd, float* xs, cudaStream_t s) {
    // Groups of 256 share one scale only when n allows them (K-format consumers need n % 256 == 0 anyway).
    const int qb = q_block == 256 && n % 256 == 0 ? 256 : 32;
    const bool trigger = n_rows == 1 && detail::norm_trigger_early(xq && n % 32 == 0);
    // Default (-1): mode 2 on the single-row RMSNorm that quantizes (Q8_0 tg128 +0.3-0.7 %, Q4_K_M +0.5-1.0 %), mode 0
    // elsewhere (F16's f32 consumers -0.2 to -0.4 %, the B=8 step -1.8 % with mode 2; docs/cuda-decode-log.md).
    const int mode = detail::norm_loads();
    const int loads = mode >= 0 ? mode : n_rows == 1 && xq && n % 32 == 0 ? 2 : 0;
    auto kernel = trigger ? (loads == 2   ? rms_norm_kernel<true, 2>
                             : loads == 1 ? rms_norm_kernel<true, 1>
                                          : rms_norm_kernel<true, 0>)
                          : (loads == 2   ? rms_norm_kernel<false, 2>
                             : loads == 1 ? rms_norm_kernel<false, 1>
                                          : rms_norm_kernel<false, 0>);
    launch(kernel, dim3(unsigned((n + 255) / 256), trigger ? 1u : unsigned(n_rows)), 256, s, x, w, out, n, eps, qb,
           n % 32 == 0 ? xq : nullptr, xd, xs);
}

void launch_rms_norm(const float* x, const float* w, float* out, int n, float eps, int q_block, int8_t* xq, float* xd,
                     float* xs, cudaStream_t s) {
    launch_rms_norm_batch(x, w, out, 1, n, eps, q_block, xq, xd, xs, s);
}

void launch_quantize(const float* x, int64_t n, int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s) {
    if (q_block == 256 && n % 256 == 0)
        launch(quantize_kernel<8>, unsigned((n / 8 + 255) / 256), 256, s, x, n, xq, xd, xs);
    else
        launch(quantize_kernel<1>, unsigned((n + 255) / 256), 256, s, x, n, xq, xd, xs);
}

void launch_swiglu_batch(const float* gu, int n_rows, int64_t n_ff, float* out, int q_block, int8_t* xq, float* xd,
                         float* xs, cudaStream_t s) {
    const int qb = q_block == 256 && n_ff % 256 == 0 ? 256 : 32;
    launch(swiglu_kernel, dim3(unsigned((n_ff + 255) / 256), unsigned(n_rows)), 256, s, gu, n_ff, out, qb,
           n_ff % 32 == 0 ? xq : nullptr, xd, xs);
}

void launch_swiglu(const float* gu, int64_t n_ff, float* out, int q_block, int8_t* xq, float* xd, float* xs,
                   cudaStream_t s) {
    launch_swiglu_batch(gu, 1, n_ff, out, q_block, xq, xd, xs, s);
}

void launch_argmax(const float* logits, int n, int32_t* token, int32_t* pos, float* scratch, cudaStream_t s) {
    launch_argmax_rows(logits, 1, n, token, pos, nullptr, scratch, s);
}

void launch_fill_random(const gpu_weight& w, uint64_t seed, cudaStream_t s) {
    const uint64_t q_bytes = uint64_t(w.q_row_bytes) * uint64_t(w.n_out);
    const uint64_t n_d = w.d ? uint64_t(device_d_row_elems(w.type, w.n_in)) * uint64_t(w.n_out) : 0;
    fill_random_kernel<<<2048, 256, 0, s>>>(w, seed, q_bytes / 4, n_d);
    if (w.type == dtype::q5_k) fix_k_headers_kernel<<<1024, 256, 0, s>>>(w, q_bytes / 176, 176, seed * 31 + 7);
    if (w.type == dtype::q4_k)
        fix_q4k_side_kernel<<<1024, 256, 0, s>>>(w, uint64_t(w.n_out) * uint64_t(w.n_in / 256), seed * 31 + 7);
}

void launch_fill_f32(float* p, int64_t n, float v, cudaStream_t s) {
    fill_f32_kernel<<<256, 256, 0, s>>>(p, n, v);
}

double probe_read_gbs(uint64_t bytes, int passes) {
    int4* buf = nullptr;
    int* sink = nullptr;
    if (cudaMalloc(&buf, bytes) != cudaSuccess) return -1;
    cudaMalloc(&sink, sizeof(int));
    gpu_weight w;
    w.type = dtype::q8_0;  // random bytes, no scale array
    w.q = reinterpret_cast<uint8_t*>(buf);
    w.q_row_bytes = int64_t(bytes);
    w.n_out = 1;
    fill_random_kernel<<<2048, 256>>>(w, 12345, bytes / 4, 0);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const bool l2 = bytes <= (64ull << 20);
    const int inner = l2 ? 50 : 1;
    std::vector<double> gbs;
    for (int r = 0; r < passes + 2; r++) {
        cudaEventRecord(a);
        if (l2)
            read_l2_kernel<<<sms * 4, 512>>>(buf, bytes / 16, inner, sink);
        else
            read_kernel<<<sms * 8, 512>>>(buf, bytes / 16, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 2) gbs.push_back(double(bytes) * inner / (double(ms) * 1e-3) / 1e9);
    }
    const bool ok = cudaGetLastError() == cudaSuccess;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    if (!ok || gbs.empty()) return -1;
    std::sort(gbs.begin(), gbs.end());
    return gbs[gbs.size() / 2];
}

}  // namespace memtile::cuda
