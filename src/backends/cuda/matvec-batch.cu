// Batched decode products: y[b] = W x[b] for up to 16 sequences, one warp per output row. Each lane takes the
// same 16-byte weight "tasks" as the batch-1 kernels of matvec.cu (so the arithmetic per sequence is the same),
// unpacks the quants once into registers and applies them to every sequence's activations: the weights are
// streamed once per step whatever the batch, the activations (B x a few KB) are re-read from L1/L2.
#include <cuda_fp16.h>

#include "backends/cuda/device-common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

constexpr int k_warps = 4;

__device__ __forceinline__ float bf_lo(int w) {
    return __uint_as_float(uint32_t(w) << 16);
}
__device__ __forceinline__ float bf_hi(int w) {
    return __uint_as_float(uint32_t(w) & 0xffff0000u);
}

// Activations of sequence b: x + b * n_in; xq, xd, xs group-major over the nb rows (prefill-kernels.h).
template <dtype T, int NB>
__global__ void __launch_bounds__(32 * k_warps)
    matvec_batch_kernel(gpu_weight w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                        float* y, int64_t y_stride, int accumulate) {
    detail::griddep_wait();
    detail::griddep_launch();
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * k_warps + (threadIdx.x >> 5);
    if (row >= w.n_out) return;
    const int n_in = int(w.n_in);
    const uint8_t* q = w.q + row * w.q_row_bytes;
    const int64_t d_row = T == dtype::q6_k   ? n_in / 256
                          : T == dtype::q4_k ? 2 * q4k_side_row_words(n_in / 256)
                                             : n_in / 32;
    const uint16_t* d = w.d ? w.d + row * d_row : nullptr;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++) acc[b] = 0;
    if constexpr (T == dtype::q8_0) {
        for (int t = lane; t < n_in / 16; t += 32) {
            const int4 wv = load_stream(q + 16 * t);
            const float dw = h2f(__ldg(d + t / 2));
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const int4 a = load_act(xq + (int64_t(t / 2) * nb + b) * 32 + 16 * (t & 1));
                int s = __dp4a(wv.x, a.x, 0);
                s = __dp4a(wv.y, a.y, s);
                s = __dp4a(wv.z, a.z, s);
                s = __dp4a(wv.w, a.w, s);
                acc[b] += dw * xd[(t / 2) * nb + b] * float(s);
            }
        }
    } else if constexpr (T == dtype::q4_0) {
        for (int t = lane; t < n_in / 32; t += 32) {
            const int4 wv = load_stream(q + 16 * t);
            const float dw = h2f(__ldg(d + t));
            int lo[4], hi[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lo[k] = word(wv, k) & 0x0f0f0f0f;
                hi[k] = (word(wv, k) >> 4) & 0x0f0f0f0f;
            }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const int8_t* ax = xq + (int64_t(t) * nb + b) * 32;
                const int4 a0 = load_act(ax), a1 = load_act(ax + 16);
                int s = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    s = __dp4a(lo[k], word(a0, k), s);
                    s = __dp4a(hi[k], word(a1, k), s);
                }
                acc[b] += dw * (xd[t * nb + b] * float(s) - 8.0f * xs[t * nb + b]);
            }
        }
    } else if constexpr (T == dtype::q4_k) {
        // Device layout (device-common.cuh); the same integer sums as matvec's task_q4k.
        for (int t = lane; t < n_in / 64; t += 32) {
            const int bl = t >> 2, c = t & 3;
            const int4 w0 = load_stream(q + bl * 128 + 32 * c), w1 = load_stream(q + bl * 128 + 32 * c + 16);
            const uint32_t* side = reinterpret_cast<const uint32_t*>(d);  // row's side words (cuda-kernels.h)
            const uint32_t sm = __ldg(side + q4k_sm_word(bl) + c), dm = __ldg(side + q4k_dm_word(bl));
            const int sc0 = int(sm & 0xffu), sc1 = int((sm >> 8) & 0xffu);
            const float mn0 = float((sm >> 16) & 0xffu), mn1 = float(sm >> 24);
            const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&dm));
            int L0[4], L1[4];
            uint32_t H0[4], H1[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                L0[k] = word(w0, k) & 0x0f0f0f0f;
                L1[k] = word(w1, k) & 0x0f0f0f0f;
                H0[k] = uint32_t(word(w0, k)) & 0xf0f0f0f0u;
                H1[k] = uint32_t(word(w1, k)) & 0xf0f0f0f0u;
            }
            const int g = bl * 8 + 2 * c;
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const int8_t* ax = xq + (int64_t(g) * nb + b) * 32;  // groups g, g + 1
                const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32 * nb),
                           a3 = load_act(ax + 32 * nb + 16);
                int lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo = __dp4a(L0[k], word(a0, k), lo);
                    lo = __dp4a(L1[k], word(a1, k), lo);
                    hi = dp4a_us(H0[k], word(a2, k), hi);
                    hi = dp4a_us(H1[k], word(a3, k), hi);
                }
                const int isum = lo * sc0 + ((hi * sc1) >> 4);
                acc[b] +=
                    dd.x * xd[g * nb + b] * float(isum) - dd.y * (mn0 * xs[g * nb + b] + mn1 * xs[(g + 1) * nb + b]);
            }
        }
    } else if constexpr (T == dtype::q5_k) {
        constexpr bool five = true;
        for (int t = lane; t < n_in / 64; t += 32) {
            const int bl = t >> 2, c = t & 3;
            const uint8_t* blk = q + int64_t(bl) * (five ? 176 : 144);
            const int4 h = load_stream(blk);
            const int qs_off = five ? 48 : 16;
            const int4 w0 = load_stream(blk + qs_off + 32 * c), w1 = load_stream(blk + qs_off + 16 + 32 * c);
            int4 qh0 = make_int4(0, 0, 0, 0), qh1 = qh0;
            if (five) {
                qh0 = load_stream(blk + 16);
                qh1 = load_stream(blk + 32);
            }
            const int s0 = 2 * c, s1 = 2 * c + 1;
            int L0[4], L1[4], H0[4], H1[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                L0[k] = word(w0, k) & 0x0f0f0f0f;
                L1[k] = word(w1, k) & 0x0f0f0f0f;
                H0[k] = (word(w0, k) >> 4) & 0x0f0f0f0f;
                H1[k] = (word(w1, k) >> 4) & 0x0f0f0f0f;
                if (five) {
                    const int hA = word(qh0, k), hB = word(qh1, k);
                    L0[k] |= ((hA >> s0) & 0x01010101) << 4;
                    L1[k] |= ((hB >> s0) & 0x01010101) << 4;
                    H0[k] |= ((hA >> s1) & 0x01010101) << 4;
                    H1[k] |= ((hB >> s1) & 0x01010101) << 4;
                }
            }
            float sc0, mn0, sc1, mn1;
            scale_min(h, s0, sc0, mn0);
            scale_min(h, s1, sc1, mn1);
            const float dd = h2f(uint16_t(h.x & 0xffff)), dmin = h2f(uint16_t(uint32_t(h.x) >> 16));
            const int g = bl * 8 + 2 * c;
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const int8_t* ax = xq + (int64_t(g) * nb + b) * 32;  // groups g, g + 1
                const int4 a0 = load_act(ax), a1 = load_act(ax + 16), a2 = load_act(ax + 32 * nb),
                           a3 = load_act(ax + 32 * nb + 16);
                int lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo = __dp4a(L0[k], word(a0, k), lo);
                    lo = __dp4a(L1[k], word(a1, k), lo);
                    hi = __dp4a(H0[k], word(a2, k), hi);
                    hi = __dp4a(H1[k], word(a3, k), hi);
                }
                acc[b] += dd * (sc0 * xd[g * nb + b] * float(lo) + sc1 * xd[(g + 1) * nb + b] * float(hi)) -
                          dmin * (mn0 * xs[g * nb + b] + mn1 * xs[(g + 1) * nb + b]);
            }
        }
    } else if constexpr (T == dtype::q6_k) {
        const int n_half = n_in / 128;
        for (int t = lane; t < n_half; t += 32) {
            const int bl = t >> 1, hh = t & 1, grp = t >> 5, n_grp = min(32, n_half - 32 * grp);
            int4 C[6];
#pragma unroll
            for (int i = 0; i < 6; i++) C[i] = load_stream(q + 3072 * grp + 16 * (n_grp * i + (t & 31)));
            const int2 sc = __ldcs(reinterpret_cast<const int2*>(q + q6k_scale_byte(t, n_half)));
            // Word c of the operands of sub-block s, as matvec's task_q6_k (device layout, cuda-kernels.h).
            int qv[8][4], scs[8];
#pragma unroll
            for (int s = 0; s < 8; s++) {
                const int g = s / 4, k = s % 4;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    auto w = [&](int n) { return word(C[n], c); };
                    qv[s][c] = k < 3 ? q6k_operand(w(3 * g + k)) : q6k_operand3(w(3 * g), w(3 * g + 1), w(3 * g + 2));
                }
                scs[s] = int(int8_t((s < 4 ? sc.x : sc.y) >> (8 * (s % 4))));
            }
            const float dw = h2f(__ldg(d + bl));
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const int g0 = bl * 8 + 4 * hh;  // groups of 32: g0 + s / 2
                int part = 0;                    // exact integer sum (4 times GGUF's), as matvec's task_q6_k
#pragma unroll
                for (int s = 0; s < 8; s++) {
                    const int4 a = load_act(xq + (int64_t(g0 + s / 2) * nb + b) * 32 + 16 * (s % 2));
                    int dot = 0;
#pragma unroll
                    for (int c = 0; c < 4; c++) dot = __dp4a(qv[s][c], word(a, c), dot);
                    part += scs[s] * dot;
                }
                acc[b] += dw * (xd[g0 * nb + b] * 0.25f * float(part));
            }
        }
    } else if constexpr (T == dtype::f16 || T == dtype::bf16) {
        for (int t = lane; t < n_in / 8; t += 32) {
            const int4 v = load_stream(q + 16 * t);
            float wf[8];
            if constexpr (T == dtype::f16) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int wd = word(v, k);
                    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&wd));
                    wf[2 * k] = p.x;
                    wf[2 * k + 1] = p.y;
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    wf[2 * k] = bf_lo(word(v, k));
                    wf[2 * k + 1] = bf_hi(word(v, k));
                }
            }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const float4* x4 = reinterpret_cast<const float4*>(x + int64_t(b) * n_in);
                const float4 x0 = __ldg(x4 + 2 * t), x1 = __ldg(x4 + 2 * t + 1);
                acc[b] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
                          wf[6] * x1.z + wf[7] * x1.w;
            }
        }
    } else {
        for (int t = lane; t < n_in / 4; t += 32) {
            const float4 v = __ldcs(reinterpret_cast<const float4*>(q) + t);
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (b >= nb) break;
                const float4 a = __ldg(reinterpret_cast<const float4*>(x + int64_t(b) * n_in) + t);
                acc[b] += v.x * a.x + v.y * a.y + v.z * a.z + v.w * a.w;
            }
        }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        if (b >= nb) break;
        const float v = warp_sum(acc[b]);
        if (lane == 0) {
            float* yp = y + int64_t(b) * y_stride + row;
            *yp = accumulate ? *yp + v : v;
        }
    }
}

template <dtype T>
void launch_typed(const gpu_weight& w, int nb, const float* x, const int8_t* xq, const float* xd, const float* xs,
                  float* y, int64_t y_stride, bool accumulate, cudaStream_t s) {
    const unsigned blocks = unsigned((w.n_out + k_warps - 1) / k_warps);
    const int acc = accumulate ? 1 : 0;
    if (nb <= 2)
        detail::launch(matvec_batch_kernel<T, 2>, blocks, 32 * k_warps, s, w, nb, x, xq, xd, xs, y, y_stride, acc);
    else if (nb <= 4)
        detail::launch(matvec_batch_kernel<T, 4>, blocks, 32 * k_warps, s, w, nb, x, xq, xd, xs, y, y_stride, acc);
    else if (nb <= 8)
        detail::launch(matvec_batch_kernel<T, 8>, blocks, 32 * k_warps, s, w, nb, x, xq, xd, xs, y, y_stride, acc);
    else
        detail::launch(matvec_batch_kernel<T, 16>, blocks, 32 * k_warps, s, w, nb, x, xq, xd, xs, y, y_stride, acc);
}

bool vector_friendly(const gpu_weight& w) {
    switch (w.type) {
        case dtype::f16:
        case dtype::bf16: return w.n_in % 8 == 0;
        case dtype::f32: return w.n_in % 4 == 0;
        default: return true;
    }
}

}  // namespace

void launch_matvec_batch(const gpu_weight& w, int n_rows, const float* x, const int8_t* xq, const float* xd,
                         const float* xs, float* y, int64_t y_stride, bool accumulate, bool tensor_cores,
                         cudaStream_t s) {
    if (tensor_cores && n_rows >= 2 && matvec_mma_supported(w)) {
        launch_matvec_mma(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s);
        return;
    }
    if (n_rows == 1) {  // the batch-1 kernel (a group-major layout of one row is the plain one)
        launch_matvec(w, x, xq, xd, xs, y, accumulate, s);
        return;
    }
    if (!vector_friendly(w)) {  // plain formats of odd widths (f32 activations only): the batch-1 kernel per row
        for (int b = 0; b < n_rows; b++)
            launch_matvec(w, x + b * w.n_in, nullptr, nullptr, nullptr, y + b * y_stride, accumulate, s);
        return;
    }
    switch (w.type) {
        case dtype::q8_0: launch_typed<dtype::q8_0>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q4_0: launch_typed<dtype::q4_0>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q4_k: launch_typed<dtype::q4_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q5_k: launch_typed<dtype::q5_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::q6_k: launch_typed<dtype::q6_k>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::f16: launch_typed<dtype::f16>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        case dtype::bf16: launch_typed<dtype::bf16>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
        default: launch_typed<dtype::f32>(w, n_rows, x, xq, xd, xs, y, y_stride, accumulate, s); break;
    }
}

}  // namespace memtile::cuda
