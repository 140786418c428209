// Row-wise kernels of the prefill pass and the batched decode step: weight dequantization to f16 (the GEMM
// operand), embedding gather, RMSNorm, activation quantization, RoPE + KV write, SwiGLU, argmax and the
// batched decode attention. Normalisation and quantization use the same arithmetic as the batch-1 kernels of
// ops.cu (and the CPU engine), so that a batched step equals B single steps.
#include <cuda_fp16.h>

#include <cmath>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

using detail::griddep_launch;
using detail::griddep_wait;
using detail::launch;

// Elements e..e+7 (e % 8 == 0) of row r of w in the device layout, as f32.
__device__ void dequant8(const gpu_weight& w, int64_t r, int64_t e, float (&v)[8]) {
    const uint8_t* row = w.q + r * w.q_row_bytes;
    switch (w.type) {
        case dtype::q8_0: {
            const uint2 b = *reinterpret_cast<const uint2*>(row + e);
            const float d = h2f(w.d[r * (w.n_in / 32) + e / 32]);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = d * float(int8_t(((i < 4 ? b.x : b.y) >> (8 * (i & 3))) & 0xff));
            break;
        }
        case dtype::q4_0: {
            const int j0 = int(e % 32);
            const uint2 b = *reinterpret_cast<const uint2*>(row + (e / 32) * 16 + (j0 % 16));
            const float d = h2f(w.d[r * (w.n_in / 32) + e / 32]);
            const int sh = j0 < 16 ? 0 : 4;
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = d * float(int(((i < 4 ? b.x : b.y) >> (8 * (i & 3) + sh)) & 15) - 8);
            break;
        }
        case dtype::q4_k: {
            const int el = int(e % 256), s = el / 32, l0 = el % 32;
            const uint32_t* side = q4k_side_of(w.d, r, int(w.n_in / 256));
            const auto* sm = reinterpret_cast<const uint8_t*>(side + q4k_sm_word(e / 256));
            const uint32_t dm = side[q4k_dm_word(e / 256)];
            const int scale = sm[4 * (s / 2) + s % 2], mn = sm[4 * (s / 2) + 2 + s % 2];
            const uint2 b = *reinterpret_cast<const uint2*>(row + (e / 256) * 128 + 32 * (s / 2) + l0);
            const float d = h2f(uint16_t(dm)) * float(scale);
            const float m = h2f(uint16_t(dm >> 16)) * float(mn);
            const int sh = (s % 2) ? 4 : 0;
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = d * float(int(((i < 4 ? b.x : b.y) >> (8 * (i & 3) + sh)) & 15)) - m;
            break;
        }
        case dtype::q5_k: {
            const uint8_t* blk = row + (e / 256) * 176;
            const int el = int(e % 256), s = el / 32, l0 = el % 32;
            const uint8_t* sc = blk + 4;
            int scale, mn;
            scale_min_bytes(sc, s, scale, mn);
            const uint2 b = *reinterpret_cast<const uint2*>(blk + 48 + 32 * (s / 2) + l0);
            const uint2 h = *reinterpret_cast<const uint2*>(blk + 16 + l0);
            const float d = h2f(uint16_t(blk[0] | blk[1] << 8)) * float(scale);
            const float m = h2f(uint16_t(blk[2] | blk[3] << 8)) * float(mn);
            const int sh = (s % 2) ? 4 : 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int q = int(((i < 4 ? b.x : b.y) >> (8 * (i & 3) + sh)) & 15);
                q |= int(((i < 4 ? h.x : h.y) >> (8 * (i & 3) + s)) & 1) << 4;
                v[i] = d * float(q) - m;
            }
            break;
        }
        case dtype::q6_k: {
            // Elements 4 t0 .. 4 t0 + 7 of sub-block s: words t0 and t0 + 1 of its pieces (cuda-kernels.h).
            const int64_t n_half = w.n_in / 128, j = e / 128;
            const int el = int(e % 128), s = el / 16, t0 = (el % 16) / 4, g = s / 4, k = s % 4;
            const float d =
                h2f(w.d[r * (w.n_in / 256) + e / 256]) * float(int8_t(row[q6k_scale_byte(0, n_half) + e / 16]));
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int op =
                    k < 3 ? q6k_operand(q6k_word(row, j, t0 + c, g, k, n_half))
                          : q6k_operand3(q6k_word(row, j, t0 + c, g, 0, n_half), q6k_word(row, j, t0 + c, g, 1, n_half),
                                         q6k_word(row, j, t0 + c, g, 2, n_half));
#pragma unroll
                for (int i = 0; i < 4; i++) v[4 * c + i] = d * float(int(int8_t(op >> (8 * i))) >> 2);
            }
            break;
        }
        case dtype::f16: {
            const uint4 b = *reinterpret_cast<const uint4*>(row + e * 2);
            const uint32_t wd[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = h2f(uint16_t(wd[i / 2] >> (16 * (i & 1))));
            break;
        }
        case dtype::bf16: {
            const uint4 b = *reinterpret_cast<const uint4*>(row + e * 2);
            const uint32_t wd[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = __uint_as_float((wd[i / 2] >> (16 * (i & 1))) << 16);
            break;
        }
        default: {
            const float* f = reinterpret_cast<const float*>(row) + e;
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = f[i];
            break;
        }
    }
}

// One thread per 8 output elements (one 16-byte store).
__global__ void dequant_f16_kernel(gpu_weight w, int64_t r0, int64_t n_rows, __half* out) {
    const int64_t per_row = w.n_in / 8;
    const int64_t total = n_rows * per_row;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / per_row, e = (i % per_row) * 8;
        float v[8];
        dequant8(w, r0 + r, e, v);
        __align__(16) __half2 h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
        *reinterpret_cast<uint4*>(out + r * w.n_in + e) = *reinterpret_cast<const uint4*>(h);
    }
}

// Launched with PDL (it starts the batched step's graph; the prefill pass launches it too).
__global__ void embed_rows_kernel(gpu_weight w, const int32_t* tokens, int n, float* x) {
    griddep_wait();
    griddep_launch();
    const int64_t per_row = w.n_in / 8;
    const int64_t total = int64_t(n) * per_row;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / per_row, e = (i % per_row) * 8;
        float v[8];
        dequant8(w, tokens[r], e, v);
#pragma unroll
        for (int k = 0; k < 8; k++) x[r * w.n_in + e + k] = v[k];
    }
}

// Block of 1024 threads per row: out_h = x / rms(x) * w as f16 (the GEMM input of the prefill pass).
__global__ void rms_norm_rows_kernel(const float* x_all, const float* w, int n, float eps, __half* out_h) {
    __shared__ double partial[32];
    __shared__ float scale_s;
    const int64_t row = blockIdx.x;
    const float* x = x_all + row * n;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += double(x[i]) * double(x[i]);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = blockDim.x >> 5;
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        double t = lane < n_warps ? partial[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        if (lane == 0) scale_s = float(1.0 / sqrt(t / double(n) + double(eps)));
    }
    __syncthreads();
    const float scale = scale_s;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out_h[row * n + i] = __float2half_rn(x[i] * scale * w[i]);
}

// One warp per run of NG groups of 32 of x [n_rows, n] (n % (32 NG) == 0), output group-major over the rows.
template <int NG>
__global__ void quantize_rows_kernel(const float* x, int n_rows, int64_t n, int8_t* xq, float* xd, float* xs) {
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t runs = n / (32 * NG);
    if (r >= runs * n_rows) return;
    const int64_t row = r / runs, run = r % runs;
    float v[NG];
#pragma unroll
    for (int k = 0; k < NG; k++) v[k] = x[row * n + (run * NG + k) * 32 + lane];
    quantize_warp<NG>(v, run * NG, lane, xq, xd, xs, row, n_rows);
}

// Block per row (position pos0 + row): bias, then the rotations of q and k, then the f16 writes (the phases
// of ops.cu's kernel).
__global__ void rope_kv_rows_kernel(float* qkv_all, const float* bias, rope_params p, int pos0, __half* kc, __half* vc,
                                    __half* q_h) {
    const int row = blockIdx.x;
    const int q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim, half = p.n_rot / 2;
    const int total = q_dim + 2 * kv_dim;
    float* qkv = qkv_all + int64_t(row) * total;
    const int pos = pos0 + row;
    if (bias)
        for (int i = threadIdx.x; i < total; i += blockDim.x) qkv[i] += bias[i];
    __syncthreads();
    const int n_pairs = (p.n_head + p.n_head_kv) * half;
    for (int job = threadIdx.x; job < n_pairs; job += blockDim.x) {
        const int h = job / half, i = job % half;
        float* v = h < p.n_head ? qkv + h * p.head_dim : qkv + q_dim + (h - p.n_head) * p.head_dim;
        float theta = float(pos) * p.freq[i];
        if (p.factors) theta /= p.factors[i];
        float s, c;
        sincosf(theta, &s, &c);
        const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        kc[int64_t(pos) * kv_dim + i] = __float2half_rn(qkv[q_dim + i]);
        vc[int64_t(pos) * kv_dim + i] = __float2half_rn(qkv[q_dim + kv_dim + i]);
    }
    if (q_h)
        for (int i = threadIdx.x; i < q_dim; i += blockDim.x) q_h[int64_t(row) * q_dim + i] = __float2half_rn(qkv[i]);
}

__global__ void swiglu_rows_kernel(const float* gu, int n_rows, int64_t n_ff, __half* out_h) {
    const int64_t total = int64_t(n_rows) * n_ff;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / n_ff, c = i % n_ff;
        const float g = gu[r * 2 * n_ff + c];
        out_h[i] = __float2half_rn(g / (1.0f + expf(-g)) * gu[r * 2 * n_ff + n_ff + c]);
    }
}

// Argmax of rows in two kernels: block (p, r) finds the largest value of slice p of row r and its lowest index, a warp
// per row merges the slices in slice order (ties and NaN resolved as block_argmax: the largest value, its lowest index,
// NaN never chosen). One block per row of 128,256 logits took ~50 us (ncu), one dependent load chain of 125 steps per
// thread; 16 slices with one load per step still took ~15 us. 64 slices and block_argmax_range's 8 loads issued before
// the compares make each thread's chain one round of loads for a row of 128,256.
constexpr int k_argmax_slices = 64;
static_assert(k_argmax_scratch >= 2 * k_max_batch * k_argmax_slices, "launch_argmax_rows: scratch too small");
__global__ void argmax_slices_kernel(const float* logits_all, int n, float* part_v, int* part_i) {
    griddep_wait();
    griddep_launch();
    const int r = blockIdx.y, p = blockIdx.x;
    const int len = (n + k_argmax_slices - 1) / k_argmax_slices, b = p * len, e = min(n, b + len);
    float best;
    int idx;
    block_argmax_range(logits_all + int64_t(r) * n, b, e, best, idx);
    if (threadIdx.x == 0) {
        part_v[r * k_argmax_slices + p] = best;
        part_i[r * k_argmax_slices + p] = idx;
    }
}
__global__ void argmax_merge_kernel(const float* part_v, const int* part_i, int32_t* token, int32_t* pos,
                                    const int32_t* slots) {
    griddep_wait();
    griddep_launch();
    const int r = blockIdx.x, lane = threadIdx.x;
    float best = -INFINITY;
    int idx = 0x7fffffff;
    for (int p = lane; p < k_argmax_slices; p += 32) {  // slices in order: ">" keeps the earlier slice on ties
        const float v = part_v[r * k_argmax_slices + p];
        if (v > best) {
            best = v;
            idx = part_i[r * k_argmax_slices + p];
        }
    }
    warp_argmax(best, idx);
    if (lane == 0) {
        token[r] = idx == 0x7fffffff ? 0 : idx;
        pos[slots ? slots[r] : r] += 1;
    }
}

unsigned grid_for(int64_t work, int threads) {
    const int64_t blocks = (work + threads - 1) / threads;
    return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void launch_dequant_f16(const gpu_weight& w, int64_t r0, int64_t n_rows, uint16_t* out, cudaStream_t s) {
    dequant_f16_kernel<<<grid_for(n_rows * (w.n_in / 8), 256), 256, 0, s>>>(w, r0, n_rows,
                                                                            reinterpret_cast<__half*>(out));
}

void launch_embed_rows(const gpu_weight& w, const int32_t* tokens, int n, float* x, cudaStream_t s) {
    launch(embed_rows_kernel, grid_for(int64_t(n) * (w.n_in / 8), 256), 256, s, w, tokens, n, x);
}

void launch_rms_norm_rows(const float* x, const float* w, int n_rows, int n, float eps, uint16_t* out_h,
                          cudaStream_t s) {
    rms_norm_rows_kernel<<<unsigned(n_rows), 1024, 0, s>>>(x, w, n, eps, reinterpret_cast<__half*>(out_h));
}

void launch_quantize_rows(const float* x, int n_rows, int64_t n, int q_block, int8_t* xq, float* xd, float* xs,
                          cudaStream_t s) {
    const int64_t total = int64_t(n_rows) * n;
    if (q_block == 256 && n % 256 == 0)
        quantize_rows_kernel<8><<<grid_for(total / 8, 256), 256, 0, s>>>(x, n_rows, n, xq, xd, xs);
    else
        quantize_rows_kernel<1><<<grid_for(total, 256), 256, 0, s>>>(x, n_rows, n, xq, xd, xs);
}

void launch_rope_kv_rows(float* qkv, int n_rows, const float* bias, const rope_params& p, int pos0, uint16_t* k_cache,
                         uint16_t* v_cache, uint16_t* q_h, cudaStream_t s) {
    rope_kv_rows_kernel<<<unsigned(n_rows), 256, 0, s>>>(qkv, bias, p, pos0, reinterpret_cast<__half*>(k_cache),
                                                         reinterpret_cast<__half*>(v_cache),
                                                         reinterpret_cast<__half*>(q_h));
}

void launch_swiglu_rows(const float* gu, int n_rows, int64_t n_ff, uint16_t* out_h, cudaStream_t s) {
    swiglu_rows_kernel<<<grid_for(int64_t(n_rows) * n_ff, 256), 256, 0, s>>>(gu, n_rows, n_ff,
                                                                             reinterpret_cast<__half*>(out_h));
}

void launch_argmax_rows(const float* logits, int n_rows, int n, int32_t* token, int32_t* pos, const int32_t* slots,
                        float* scratch, cudaStream_t s) {
    float* part_v = scratch;
    int* part_i = reinterpret_cast<int*>(scratch + k_max_batch * k_argmax_slices);
    launch(argmax_slices_kernel, dim3(k_argmax_slices, unsigned(n_rows)), 256, s, logits, n, part_v, part_i);
    launch(argmax_merge_kernel, unsigned(n_rows), 32, s, static_cast<const float*>(part_v),
           static_cast<const int*>(part_i), token, pos, slots);
}

}  // namespace memtile::cuda
