// The GQA blocks' tensor-core key steps (key-step form 2, opt-in: set_attention_pipe(k_attention_pipe_mma)). The GQA
// blocks of forms 0 and 1 were issue-bound at ~72 warp instructions per (query head, key) (docs/cuda-log-s18-s31.md,
// "Session 27"): every key cost each of its query heads a score's butterfly, two expf and an FMA per dim. Here a block
// of 4 warps takes all of its (at most 4) query heads at once as the rows of mma products (padded to 16; the rows past
// the heads are zeros), each warp 16 keys of every 64-key tile: S = Q K^T by mma.m16n8k16 with K rows by ldmatrix, the
// online softmax in the C fragment (the 4 lanes of a quad share a head), O += P V by mma.m16n8k16 with V by
// ldmatrix.trans. q and p are rounded to f16 and the tensor cores sum in their own order, so this form is not bit-equal
// to one head per block: memtile-cuda-check compares it by NMSE. head_dim 64 or 128 only (attn_mma_head); other sizes
// keep form 1.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/attention-gqa.cuh"
#include "backends/cuda/matvec-mma-util.cuh"

namespace memtile::cuda::detail {

constexpr int k_attn_form_mma = 2;  // the key-step form number (set_attention_pipe)
__host__ __device__ constexpr bool attn_mma_head(int hd) {
    return hd == 64 || hd == 128;
}

// Tiles of T keys (16 per warp), rows padded to HD + 8 halves (the 8 rows of an ldmatrix matrix start 16 bytes apart
// modulo 128: no bank conflicts), ST tiles in flight (their copies issued ST - 1 tiles ahead).
template <int HD>
struct attn_mma_shape {
    static constexpr int T = 16 * k_attn_warps, RSH = HD + 8, ST = 3;
    static constexpr int tile_halves = T * RSH;                  // one K or V tile
    static constexpr int smem_bytes = ST * 2 * tile_halves * 2;  // a block's dynamic shared memory
};

// One GQA block of 4 warps for the heads hs (at most GB), split `split` of n_split: attn_gqa_block's contract (ROPE,
// EARLY, the partial states), with the key steps on tensor cores. Dynamic shared memory: attn_mma_shape<32 ND>.
template <int ND, int GB, bool ROPE, bool EARLY>
__device__ __forceinline__ void attn_gqa_block_mma(const float* src, const float* bias, const rope_params& p,
                                                   const int32_t* pos_p, __half* kc, __half* vc, attn_heads hs,
                                                   int split, int n_split, float* partial) {
    constexpr int HD = 32 * ND, NK = HD / 16, W = k_attn_warps;
    using shape = attn_mma_shape<HD>;
    constexpr int T = shape::T, RSH = shape::RSH, ST = shape::ST;
    static_assert(attn_mma_head(HD) && GB <= 8, "attn_gqa_block_mma: head_dim 64 or 128, at most 8 heads");
    extern __shared__ __align__(16) unsigned char attn_mma_tiles[];
    __half* tiles = reinterpret_cast<__half*>(attn_mma_tiles);  // [ST][K, V][T][RSH] f16
    __shared__ float s_q[GB][HD];
    __shared__ __half s_k[HD], s_v[HD];
    const int lane = int(threadIdx.x & 31), w = int(threadIdx.x >> 5);
    const int gr = lane >> 2, tq = lane & 3;  // the lane's fragment row (head slot) and column pair
    const int group = p.n_head / p.n_head_kv, kvh = hs.h0 / group, kv_dim = p.n_head_kv * HD;
    auto k_tile = [&](int n) { return tiles + (n % ST) * 2 * shape::tile_halves; };
    auto v_tile = [&](int n) { return tiles + ((n % ST) * 2 + 1) * shape::tile_halves; };
    auto load = [&](int n, int j0, int jc) {
        attn_tile_load<ND, T, RSH>(kc, vc, j0 + n * T, jc, kv_dim, kvh * HD, HD, k_tile(n), v_tile(n));
    };
    const attn_split_span sp = attn_gqa_setup<GB, HD, ROPE, EARLY>(src, bias, p, pos_p, kc, vc, hs, split, n_split, s_q,
                                                                   s_k, s_v, [&](int j0, int jc) {
#pragma unroll
                                                                       for (int n = 0; n < ST - 1; n++) load(n, j0, jc);
                                                                   });
    __syncthreads();
    // q of head slot gr as A fragments (dims 16 k + 2 tq, + 1 and + 8, + 9), scaled as attn_query_init; zeros for the
    // slots past the block's heads.
    uint32_t qa[NK][2];
    const float scale = rsqrtf(float(HD));
#pragma unroll
    for (int k = 0; k < NK; k++) {
        const float* q = s_q[min(gr, GB - 1)] + 16 * k + 2 * tq;
        const bool on = gr < hs.n;
        qa[k][0] = on ? mma_util::pack_half2(__fmul_rn(q[0], scale), __fmul_rn(q[1], scale)) : 0u;
        qa[k][1] = on ? mma_util::pack_half2(__fmul_rn(q[8], scale), __fmul_rn(q[9], scale)) : 0u;
    }
    float acc[2 * NK]
             [4];  // C fragment of dims 8 n .. 8 n + 7: [0], [1] dims 8 n + 2 tq, + 1 of slot gr; [2], [3] padding
#pragma unroll
    for (int n = 0; n < 2 * NK; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
    float m = -INFINITY, l = 0;               // slot gr's running maximum and this lane's share of its sum
    const int mi = lane >> 3, r8 = lane & 7;  // the ldmatrix matrix this lane addresses, and its row there
    const int n_tiles = (sp.j1 - sp.j0 + T - 1) / T;
    for (int n = 0; n < n_tiles; n++) {
        const int t0 = sp.j0 + n * T;
        load(n + ST - 1, sp.j0, sp.jc);  // an empty group past the split's last tile
        cp_async_wait<ST - 1>();
        __half* sk = k_tile(n);
        __half* sv = v_tile(n);
        if (sp.has_new && sp.pos >= t0 && sp.pos - t0 < T)  // the new key's row (the copies took rows below jc only)
            for (int e = threadIdx.x; e < HD; e += blockDim.x) {
                sk[(sp.pos - t0) * RSH + e] = s_k[e];
                sv[(sp.pos - t0) * RSH + e] = s_v[e];
            }
        // V rows past the split's keys are zeroed: their p is 0, but a stale row's Inf or NaN times 0 would not be.
        // Only those of the warp that holds the split's last key (a warp past it skips the tile), by 16-byte stores:
        // all rows past the keys, by halves, were a quarter of a warp's instructions where a split has few keys.
        if (const int valid = sp.j1 - t0; valid < T) {
            constexpr int P = HD / 8;  // 16-byte pieces of a row
            const int rows = min(T, (valid + 15) & ~15) - valid;
            for (int e = threadIdx.x; e < rows * P; e += blockDim.x)
                *reinterpret_cast<uint4*>(sv + (valid + e / P) * RSH + e % P * 8) = make_uint4(0u, 0u, 0u, 0u);
        }
        __syncthreads();
        const int kb = t0 + 16 * w;  // the warp's first key
        if (kb < sp.j1) {
            float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};  // keys kb + 8 i + 2 tq, + 1 of slot gr in s[i][0], [1]
            const __half* kw = sk + 16 * w * RSH;
#pragma unroll
            for (int k = 0; k < NK; k++) {
                int b[4];
                mma_util::ldmatrix_x4(kw + ((mi >> 1) * 8 + r8) * RSH + 16 * k + (mi & 1) * 8, b);
                const uint32_t a[4] = {qa[k][0], 0u, qa[k][1], 0u};
                mma_util::mma_f16_k16(a, uint32_t(b[0]), uint32_t(b[1]), s[0]);
                mma_util::mma_f16_k16(a, uint32_t(b[2]), uint32_t(b[3]), s[1]);
            }
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    if (kb + 8 * i + 2 * tq + c >= sp.j1) s[i][c] = -INFINITY;
                    mx = fmaxf(mx, s[i][c]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m, mx);  // finite: key kb is a key of the split
            const float corr = expf(m - m_new);
            float pr[2][2], ps = 0;
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    pr[i][c] = expf(s[i][c] - m_new);
                    ps += pr[i][c];
                }
            l = __fmaf_rn(l, corr, ps);
            m = m_new;
#pragma unroll
            for (int d = 0; d < 2 * NK; d++) {
                acc[d][0] *= corr;
                acc[d][1] *= corr;
            }
            const uint32_t pa[4] = {mma_util::pack_half2(pr[0][0], pr[0][1]), 0u,
                                    mma_util::pack_half2(pr[1][0], pr[1][1]), 0u};
            const __half* vw = sv + 16 * w * RSH;
#pragma unroll
            for (int k = 0; k < NK; k++) {  // dims 16 k .. 16 k + 15: the C fragments 2 k and 2 k + 1
                int b[4];
                mma_util::ldmatrix_x4_trans(vw + ((mi & 1) * 8 + r8) * RSH + 16 * k + (mi >> 1) * 8, b);
                mma_util::mma_f16_k16(pa, uint32_t(b[0]), uint32_t(b[1]), acc[2 * k]);
                mma_util::mma_f16_k16(pa, uint32_t(b[2]), uint32_t(b[3]), acc[2 * k + 1]);
            }
        }
        __syncthreads();  // the copies issued next overwrite this tile's buffers
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    // The 4 warps' states per head slot through the tile buffers (no copy is in flight: the groups past the last tile
    // are empty), merged by attn_slots_merge.
    cp_async_wait<0>();
    static_assert(shape::smem_bytes >= int(sizeof(float)) * GB * (W * (3 + HD) + 1), "the merge's scratch");
    float* sm = reinterpret_cast<float*>(tiles);  // [GB][W] the states' maxima
    float* sl = sm + GB * W;                      // [GB][W] their sums
    float* sw = sl + GB * W;                      // [GB][W] their weights expf(m - M)
    float* s_max = sw + GB * W;                   // [GB] the slots' maxima M
    float* sacc = s_max + GB;                     // [GB][W][HD] their accumulators
    if (gr < GB) {
        if (tq == 0) {
            sm[gr * W + w] = m;
            sl[gr * W + w] = l;
        }
#pragma unroll
        for (int d = 0; d < 2 * NK; d++) {
            sacc[(gr * W + w) * HD + 8 * d + 2 * tq] = acc[d][0];
            sacc[(gr * W + w) * HD + 8 * d + 2 * tq + 1] = acc[d][1];
        }
    }
    __syncthreads();
    constexpr int64_t out_slot = HD + 2;  // partial: [head][split] states of (M, L, acc[HD])
    attn_slots_merge<GB>(sm, sl, sw, s_max, sacc, HD, hs.n, HD, partial + (int64_t(hs.h0) * n_split + split) * out_slot,
                         int64_t(n_split) * out_slot);
}

}  // namespace memtile::cuda::detail
