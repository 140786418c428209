// Causal attention of the prefill pass (one sequence, n queries at positions pos0.., GQA) over the f16 KV
// cache the same pass has just written. The fast path is flash-attention style on tensor cores (WMMA
// 16x16x16 f16 products, f32 accumulation): a block takes 64 queries of one head, walks the keys in tiles of
// 64 staged in shared memory, and each warp keeps its 16 queries' running max, sum and output in shared memory
// (online softmax), so nothing of size n x n exists. The scalar kernel (one warp per query and head) is the
// fallback for other head sizes and the oracle of the checks.
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>

#include "backends/cuda/prefill-kernels.h"

namespace memtile::cuda {
namespace {

using namespace nvcuda;

constexpr int k_bm = 64;  // queries per block (16 per warp)
constexpr int k_bn = 64;  // keys per tile

template <int HD>
struct flash_layout {
    static constexpr int ldk = HD + 8;    // K and V tiles [k_bn][ldk] f16 (padding against bank conflicts)
    static constexpr int lds = k_bn + 4;  // per warp S [16][lds] f32
    static constexpr int ldp = k_bn + 8;  // per warp P [16][ldp] f16
    static constexpr int ldo = HD + 4;    // per warp O [16][ldo] f32
    static constexpr int bytes =
        2 * k_bn * ldk * 2 + 4 * 16 * lds * 4 + 4 * 16 * ldp * 2 + 4 * 16 * ldo * 4 + 3 * 64 * 4;
};

// Grid (ceil(n_tok / 64), n_head), 128 threads. q [>= grid.x * 64 rows, n_head * HD] f16.
template <int HD>
__global__ void __launch_bounds__(128)
    flash_prefill_kernel(const __half* q, const __half* kc, const __half* vc, int n_tok, int pos0, int n_head,
                         int n_head_kv, float scale, __half* out) {
    using L = flash_layout<HD>;
    extern __shared__ __align__(128) unsigned char smem[];
    __half* Ks = reinterpret_cast<__half*>(smem);
    __half* Vs = Ks + k_bn * L::ldk;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* S = reinterpret_cast<float*>(Vs + k_bn * L::ldk) + warp * 16 * L::lds;
    __half* P =
        reinterpret_cast<__half*>(reinterpret_cast<float*>(Vs + k_bn * L::ldk) + 4 * 16 * L::lds) + warp * 16 * L::ldp;
    float* O = reinterpret_cast<float*>(
                   reinterpret_cast<__half*>(reinterpret_cast<float*>(Vs + k_bn * L::ldk) + 4 * 16 * L::lds) +
                   4 * 16 * L::ldp) +
               warp * 16 * L::ldo;
    float* row_m = reinterpret_cast<float*>(
                       reinterpret_cast<__half*>(reinterpret_cast<float*>(Vs + k_bn * L::ldk) + 4 * 16 * L::lds) +
                       4 * 16 * L::ldp) +
                   4 * 16 * L::ldo + warp * 16;
    float* row_l = row_m + 64;

    const int h = blockIdx.y, q0 = blockIdx.x * k_bm, wq0 = q0 + warp * 16;
    const int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * HD, q_ld = n_head * HD;

    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qf[HD / 16];
#pragma unroll
    for (int k = 0; k < HD / 16; k++) wmma::load_matrix_sync(qf[k], q + int64_t(wq0) * q_ld + h * HD + k * 16, q_ld);
    for (int i = lane; i < 16 * L::ldo; i += 32) O[i] = 0;
    if (lane < 16) {
        row_m[lane] = -INFINITY;
        row_l[lane] = 0;
    }
    const int last_q = min(q0 + k_bm, n_tok) - 1;
    const int n_keys = pos0 + last_q + 1;
    const int warp_last = min(wq0 + 15, n_tok - 1);
    const int warp_keys = warp_last >= wq0 ? pos0 + warp_last + 1 : 0;
    const int r = lane >> 1, c0 = (lane & 1) * (k_bn / 2);
    const int qpos = pos0 + wq0 + r;

    for (int k0 = 0; k0 < n_keys; k0 += k_bn) {
        __syncthreads();  // the previous tile is no longer read
        constexpr int chunks = HD / 8;
        for (int i = threadIdx.x; i < k_bn * chunks; i += blockDim.x) {
            const int kr = i / chunks, c = i % chunks, j = k0 + kr;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (j < n_keys) {
                kv = *reinterpret_cast<const uint4*>(kc + int64_t(j) * kv_dim + kvh * HD + c * 8);
                vv = *reinterpret_cast<const uint4*>(vc + int64_t(j) * kv_dim + kvh * HD + c * 8);
            }
            *reinterpret_cast<uint4*>(Ks + kr * L::ldk + c * 8) = kv;
            *reinterpret_cast<uint4*>(Vs + kr * L::ldk + c * 8) = vv;
        }
        __syncthreads();
        if (k0 >= warp_keys) continue;  // every key of the tile is after this warp's queries

#pragma unroll
        for (int c = 0; c < k_bn / 16; c++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf;
            wmma::fill_fragment(sf, 0.0f);
#pragma unroll
            for (int k = 0; k < HD / 16; k++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kf;
                wmma::load_matrix_sync(kf, Ks + (c * 16) * L::ldk + k * 16, L::ldk);
                wmma::mma_sync(sf, qf[k], kf, sf);
            }
            wmma::store_matrix_sync(S + c * 16, sf, L::lds, wmma::mem_row_major);
        }
        __syncwarp();
        // Online softmax: lanes 2r and 2r + 1 share row r, 32 columns each.
        float mx = -INFINITY;
        for (int c = 0; c < k_bn / 2; c++) {
            const int j = k0 + c0 + c;
            const float v = j <= qpos ? S[r * L::lds + c0 + c] * scale : -INFINITY;
            S[r * L::lds + c0 + c] = v;
            mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_old = row_m[r], m_new = fmaxf(m_old, mx);
        const float corr = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
        float sum = 0;
        for (int c = 0; c < k_bn / 2; c++) {
            const float v = S[r * L::lds + c0 + c];
            const float p = v == -INFINITY ? 0.0f : __expf(v - m_new);
            P[r * L::ldp + c0 + c] = __float2half_rn(p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        __syncwarp();
        if ((lane & 1) == 0) {
            row_m[r] = m_new;
            row_l[r] = row_l[r] * corr + sum;
        }
        for (int d = (lane & 1) * (HD / 2); d < (lane & 1) * (HD / 2) + HD / 2; d++) O[r * L::ldo + d] *= corr;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < HD / 16; c++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
            wmma::load_matrix_sync(of, O + c * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < k_bn / 16; k++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pf;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vf;
                wmma::load_matrix_sync(pf, P + k * 16, L::ldp);
                wmma::load_matrix_sync(vf, Vs + (k * 16) * L::ldk + c * 16, L::ldk);
                wmma::mma_sync(of, pf, vf, of);
            }
            wmma::store_matrix_sync(O + c * 16, of, L::ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    const int qi = wq0 + r;
    if (qi < n_tok) {
        const float inv = 1.0f / row_l[r];
        for (int d = (lane & 1) * (HD / 2); d < (lane & 1) * (HD / 2) + HD / 2; d++)
            out[int64_t(qi) * q_ld + h * HD + d] = __float2half_rn(O[r * L::ldo + d] * inv);
    }
}

// Reference: grid (n_tok, n_head), one warp; lane holds dims lane + 32 t (head_dim <= 256).
__global__ void attn_prefill_ref_kernel(const __half* q, const __half* kc, const __half* vc, int n_tok, int pos0,
                                        int n_head, int n_head_kv, int hd, float scale, __half* out) {
    const int i = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    const int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * hd, q_ld = n_head * hd;
    const int qpos = pos0 + i;
    float qr[8], acc[8];
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const int d = lane + 32 * t;
        qr[t] = d < hd ? __half2float(q[int64_t(i) * q_ld + h * hd + d]) : 0.0f;
        acc[t] = 0;
    }
    float m = -INFINITY, l = 0;
    for (int j = 0; j <= qpos; j++) {
        const __half* kr = kc + int64_t(j) * kv_dim + kvh * hd;
        const __half* vr = vc + int64_t(j) * kv_dim + kvh * hd;
        float s = 0;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int d = lane + 32 * t;
            if (d < hd) s += qr[t] * __half2float(kr[d]);
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int d = lane + 32 * t;
            acc[t] = acc[t] * corr + (d < hd ? p * __half2float(vr[d]) : 0.0f);
        }
        m = m_new;
    }
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const int d = lane + 32 * t;
        if (d < hd) out[int64_t(i) * q_ld + h * hd + d] = __float2half_rn(acc[t] / l);
    }
}

template <int HD>
void launch_flash(const __half* q, const __half* kc, const __half* vc, int n_tok, int pos0, int n_head, int n_head_kv,
                  float scale, __half* out, cudaStream_t s) {
    constexpr int bytes = flash_layout<HD>::bytes;
    static bool configured = false;
    if (!configured) {
        cudaFuncSetAttribute(flash_prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        configured = true;
    }
    const dim3 grid{unsigned((n_tok + k_bm - 1) / k_bm), unsigned(n_head), 1u};
    flash_prefill_kernel<HD><<<grid, 128, bytes, s>>>(q, kc, vc, n_tok, pos0, n_head, n_head_kv, scale, out);
}

}  // namespace

bool attention_prefill_uses_tensor_cores(int head_dim) {
    return head_dim == 64 || head_dim == 96 || head_dim == 128;
}

void launch_attention_prefill(const uint16_t* q_h, const uint16_t* k_cache, const uint16_t* v_cache, int n_tok,
                              int pos0, int n_head, int n_head_kv, int head_dim, uint16_t* out_h, bool reference,
                              cudaStream_t s) {
    const auto* q = reinterpret_cast<const __half*>(q_h);
    const auto* kc = reinterpret_cast<const __half*>(k_cache);
    const auto* vc = reinterpret_cast<const __half*>(v_cache);
    auto* out = reinterpret_cast<__half*>(out_h);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    if (!reference && head_dim == 64)
        launch_flash<64>(q, kc, vc, n_tok, pos0, n_head, n_head_kv, scale, out, s);
    else if (!reference && head_dim == 96)
        launch_flash<96>(q, kc, vc, n_tok, pos0, n_head, n_head_kv, scale, out, s);
    else if (!reference && head_dim == 128)
        launch_flash<128>(q, kc, vc, n_tok, pos0, n_head, n_head_kv, scale, out, s);
    else
        attn_prefill_ref_kernel<<<dim3(unsigned(n_tok), unsigned(n_head), 1u), 32, 0, s>>>(
            q, kc, vc, n_tok, pos0, n_head, n_head_kv, head_dim, scale, out);
}

}  // namespace memtile::cuda
