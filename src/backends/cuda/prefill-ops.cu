// Row-wise kernels of the prefill pass and the batched decode step: weight dequantization to f16 (the GEMM
// operand), embedding gather, RMSNorm, activation quantization, RoPE + KV write, SwiGLU, argmax and the
// batched decode attention. Normalisation and quantization use the same arithmetic as the batch-1 kernels of
// ops.cu (and the CPU engine), so that a batched step equals B single steps.
#include <cuda_fp16.h>

#include <cmath>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

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
        case dtype::q4_k:
        case dtype::q5_k: {
            const bool five = w.type == dtype::q5_k;
            const uint8_t* blk = row + (e / 256) * (five ? 176 : 144);
            const int el = int(e % 256), s = el / 32, l0 = el % 32;
            const uint8_t* sc = blk + 4;
            int scale, mn;
            scale_min_bytes(sc, s, scale, mn);
            const uint2 b = *reinterpret_cast<const uint2*>(blk + (five ? 48 : 16) + 32 * (s / 2) + l0);
            uint2 h = make_uint2(0, 0);
            if (five) h = *reinterpret_cast<const uint2*>(blk + 16 + l0);
            const float d = h2f(uint16_t(blk[0] | blk[1] << 8)) * float(scale);
            const float m = h2f(uint16_t(blk[2] | blk[3] << 8)) * float(mn);
            const int sh = (s % 2) ? 4 : 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int q = int(((i < 4 ? b.x : b.y) >> (8 * (i & 3) + sh)) & 15);
                if (five) q |= int(((i < 4 ? h.x : h.y) >> (8 * (i & 3) + s)) & 1) << 4;
                v[i] = d * float(q) - m;
            }
            break;
        }
        case dtype::q6_k: {
            const uint8_t* blk = row + (e / 256) * 208;
            const int el = int(e % 256), hh = el / 128, j = (el % 128) / 32, l0 = el % 32;
            const uint2 lb = *reinterpret_cast<const uint2*>(blk + 64 * hh + 32 * (j & 1) + l0);
            const uint2 hb = *reinterpret_cast<const uint2*>(blk + 128 + 32 * hh + l0);
            const float d = h2f(w.d[r * (w.n_in / 256) + e / 256]) * float(int8_t(blk[192 + el / 16]));
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t lw = i < 4 ? lb.x : lb.y, hw = i < 4 ? hb.x : hb.y;
                const int lo = int((lw >> (8 * (i & 3) + ((j >> 1) ? 4 : 0))) & 15);
                const int hi = int((hw >> (8 * (i & 3) + 2 * j)) & 3);
                v[i] = d * float((lo | hi << 4) - 32);
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

__global__ void embed_rows_kernel(gpu_weight w, const int32_t* tokens, int n, float* x) {
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

// Block of 1024 threads per row (the reduction order of ops.cu's rms_norm_kernel).
template <int NG>
__global__ void rms_norm_rows_kernel(const float* x_all, const float* w, int n, float eps, __half* out_h,
                                     float* out_all, int8_t* xq_all, float* xd_all, float* xs_all) {
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
    if (out_h) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) out_h[row * n + i] = __float2half_rn(x[i] * scale * w[i]);
        return;
    }
    float* out = out_all + row * n;
    if (xq_all) {
        int8_t* xq = xq_all + row * n;
        float* xd = xd_all + row * (n / 32);
        float* xs = xs_all + row * (n / 32);
        for (int r = warp; r < n / (32 * NG); r += n_warps) {
            float v[NG];
#pragma unroll
            for (int k = 0; k < NG; k++) {
                const int i = (r * NG + k) * 32 + lane;
                v[k] = x[i] * scale * w[i];
                out[i] = v[k];
            }
            quantize_warp<NG>(v, int64_t(r) * NG, lane, xq, xd, xs);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = x[i] * scale * w[i];
    }
}

// One warp per run of NG groups of 32; rows are whole runs, so flat indexing keeps groups inside rows.
template <int NG>
__global__ void quantize_flat_kernel(const float* x, int64_t n, int8_t* xq, float* xd, float* xs) {
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (r >= n / (32 * NG)) return;
    float v[NG];
#pragma unroll
    for (int k = 0; k < NG; k++) v[k] = x[(r * NG + k) * 32 + lane];
    quantize_warp<NG>(v, r * NG, lane, xq, xd, xs);
}

// Block per row: bias, then the rotations of q and k, then the f16 writes (the phases of ops.cu's kernel).
__global__ void rope_kv_rows_kernel(float* qkv_all, const float* bias, rope_params p, int pos0, const int32_t* pos_arr,
                                    const int32_t* slots, int64_t slot_stride, __half* kc_base, __half* vc_base,
                                    __half* q_h) {
    const int row = blockIdx.x;
    const int q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim, half = p.n_rot / 2;
    const int total = q_dim + 2 * kv_dim;
    float* qkv = qkv_all + int64_t(row) * total;
    const int slot = slots ? slots[row] : 0;
    const int pos = slots ? pos_arr[slot] : pos0 + row;
    __half* kc = kc_base + int64_t(slot) * slot_stride;
    __half* vc = vc_base + int64_t(slot) * slot_stride;
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

__global__ void swiglu_rows_kernel(const float* gu, int n_rows, int64_t n_ff, __half* out_h, float* out) {
    const int64_t total = int64_t(n_rows) * n_ff;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / n_ff, c = i % n_ff;
        const float g = gu[r * 2 * n_ff + c];
        const float v = g / (1.0f + expf(-g)) * gu[r * 2 * n_ff + n_ff + c];
        if (out_h)
            out_h[i] = __float2half_rn(v);
        else
            out[i] = v;
    }
}

__global__ void argmax_rows_kernel(const float* logits_all, int n, int32_t* token, int32_t* pos, const int32_t* slots) {
    const int idx = block_argmax(logits_all + int64_t(blockIdx.x) * n, n);
    if (threadIdx.x == 0) {
        token[blockIdx.x] = idx;
        pos[slots[blockIdx.x]] += 1;
    }
}

// ops.cu's split-K decode attention with a batch dimension: grid (n_head, n_split, B).
template <int ND>
__global__ void __launch_bounds__(32 * k_attn_warps)
    attn_batch_partial_kernel(const float* q_all, int64_t q_stride, const __half* kc_base, const __half* vc_base,
                              int64_t slot_stride, const int32_t* pos_arr, const int32_t* slots, int n_head,
                              int n_head_kv, int hd, float* partial_all) {
    const int b = blockIdx.z, slot = slots[b];
    attn_partial_block<ND>(q_all + int64_t(b) * q_stride, kc_base + int64_t(slot) * slot_stride,
                           vc_base + int64_t(slot) * slot_stride, n_head, n_head_kv, hd, pos_arr[slot] + 1, blockIdx.x,
                           blockIdx.y, gridDim.y, partial_all + int64_t(b) * n_head * gridDim.y * (hd + 2));
}

// Grid (n_head, B).
__global__ void attn_batch_combine_kernel(const float* partial_all, int n_head, int n_split, int hd, float* out_all) {
    const int h = blockIdx.x, b = blockIdx.y;
    const float* p = partial_all + (int64_t(b) * n_head + h) * n_split * (hd + 2);
    float* out = out_all + int64_t(b) * n_head * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[h * hd + d] = attn_merge(p, n_split, hd, d);
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
    embed_rows_kernel<<<grid_for(int64_t(n) * (w.n_in / 8), 256), 256, 0, s>>>(w, tokens, n, x);
}

void launch_rms_norm_rows(const float* x, const float* w, int n_rows, int n, float eps, uint16_t* out_h, float* out,
                          int q_block, int8_t* xq, float* xd, float* xs, cudaStream_t s) {
    auto* oh = reinterpret_cast<__half*>(out_h);
    if (!out_h && xq && q_block == 256 && n % 256 == 0)
        rms_norm_rows_kernel<8><<<unsigned(n_rows), 1024, 0, s>>>(x, w, n, eps, oh, out, xq, xd, xs);
    else
        rms_norm_rows_kernel<1>
            <<<unsigned(n_rows), 1024, 0, s>>>(x, w, n, eps, oh, out, n % 32 == 0 ? xq : nullptr, xd, xs);
}

void launch_quantize_rows(const float* x, int n_rows, int64_t n, int q_block, int8_t* xq, float* xd, float* xs,
                          cudaStream_t s) {
    const int64_t total = int64_t(n_rows) * n;
    if (q_block == 256 && n % 256 == 0)
        quantize_flat_kernel<8><<<grid_for(total / 8, 256), 256, 0, s>>>(x, total, xq, xd, xs);
    else
        quantize_flat_kernel<1><<<grid_for(total, 256), 256, 0, s>>>(x, total, xq, xd, xs);
}

void launch_rope_kv_rows(float* qkv, int n_rows, const float* bias, const rope_params& p, int pos0, const int32_t* pos,
                         const int32_t* slots, int64_t slot_stride, uint16_t* k_cache, uint16_t* v_cache, uint16_t* q_h,
                         cudaStream_t s) {
    rope_kv_rows_kernel<<<unsigned(n_rows), 256, 0, s>>>(
        qkv, bias, p, pos0, pos, slots, slot_stride, reinterpret_cast<__half*>(k_cache),
        reinterpret_cast<__half*>(v_cache), reinterpret_cast<__half*>(q_h));
}

void launch_swiglu_rows(const float* gu, int n_rows, int64_t n_ff, uint16_t* out_h, float* out, int q_block, int8_t* xq,
                        float* xd, float* xs, cudaStream_t s) {
    swiglu_rows_kernel<<<grid_for(int64_t(n_rows) * n_ff, 256), 256, 0, s>>>(gu, n_rows, n_ff,
                                                                             reinterpret_cast<__half*>(out_h), out);
    if (!out_h && xq && n_ff % 32 == 0) launch_quantize_rows(out, n_rows, n_ff, q_block, xq, xd, xs, s);
}

void launch_argmax_rows(const float* logits, int n_rows, int n, int32_t* token, int32_t* pos, const int32_t* slots,
                        cudaStream_t s) {
    argmax_rows_kernel<<<unsigned(n_rows), 1024, 0, s>>>(logits, n, token, pos, slots);
}

void launch_attention_batch(const float* q, int64_t q_stride, int n_rows, const uint16_t* k_cache,
                            const uint16_t* v_cache, int64_t slot_stride, const int32_t* pos, const int32_t* slots,
                            int n_head, int n_head_kv, int head_dim, int n_split, float* partial, float* out,
                            cudaStream_t s) {
    const dim3 grid{unsigned(n_head), unsigned(n_split), unsigned(n_rows)};
    const auto* kc = reinterpret_cast<const __half*>(k_cache);
    const auto* vc = reinterpret_cast<const __half*>(v_cache);
    const int nd = (head_dim + 31) / 32;
#define MEMTILE_ATTN_BATCH(ND)                                                                                     \
    attn_batch_partial_kernel<ND><<<grid, 32 * k_attn_warps, 0, s>>>(q, q_stride, kc, vc, slot_stride, pos, slots, \
                                                                     n_head, n_head_kv, head_dim, partial)
    if (nd <= 1)
        MEMTILE_ATTN_BATCH(1);
    else if (nd <= 2)
        MEMTILE_ATTN_BATCH(2);
    else if (nd <= 4)
        MEMTILE_ATTN_BATCH(4);
    else
        MEMTILE_ATTN_BATCH(8);
#undef MEMTILE_ATTN_BATCH
    attn_batch_combine_kernel<<<dim3(unsigned(n_head), unsigned(n_rows)), 128, 0, s>>>(partial, n_head, n_split,
                                                                                       head_dim, out);
}

}  // namespace memtile::cuda
