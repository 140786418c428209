// Q4_K decode products in other launch forms than matvec-common.cuh's plain 2 x 2 kernel, all bit-equal to it
// (docs/cuda-decode-log.md, "Session 10 (branch gq4k10)"); set_q4k_matvec / MEMTILE_CUDA_Q4K (cuda-backend.h), read
// when a graph is captured. Bits of the mode:
// - k_q4k_smem_act: the activations (n_in int8 bytes) staged once per block in shared memory by 16-byte coalesced
//   loads, read back conflict-free (a swizzle of each task's four 16-byte units). The plain kernel's lanes read their
//   task's 64 activation bytes as four 16-byte loads at a 64-byte stride: 16 L1 lines per load instruction.
// - k_q4k_lane_pairs: the weights read 512 contiguous bytes per load instruction: lanes 2m and 2m + 1 take piece 0 and
//   1 (bytes 0..15 and 16..31) of tasks m and m + 16 of the warp's 32. A piece's integer sum lo sc0 + (hi sc1) >> 4 is
//   exact and the two pieces' sums add to the task's (hi is a multiple of 16 in both), so one shuffle gives lane 2m + p
//   the integer sum of task m + 16p, whose float term it forms as the plain lane m + 16p does (same expression); one
//   more shuffle (lane offset 1) is then the plain warp sum's first step (lane offset 16), and offsets 16, 8, 4, 2 its
//   offsets 8, 4, 2, 1.
// - k_q4k_one_warp: one warp per row pair takes both of the plain kernel's warps of a row (two accumulators per row,
//   reduced apart and added in warp order), so no shared-memory exchange and twice the loads in flight per thread.
// - k_q4k_short_only: the forms only where n_in <= 4,096 (one task per thread; the down product keeps the plain
//   kernel).
// Every form keeps the plain kernel's tasks per lane, their order and its sum tree; the warp sums of a thread's several
// values are reduced transposed (each butterfly step halves the values a lane carries), which pairs the same partial
// sums as one butterfly per value.
#include <cstdlib>

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {
namespace {

// A Q4_K matrix with 32-bit strides (rows at q + r row_bytes, side words at side + r side_row).
struct q4k_args {
    const uint8_t* q;
    const uint32_t* side;
    int n_out, row_bytes, side_row, n_in;
};

// Shared-memory slot of activation unit k (0..3: bytes 16k..16k+15 of elements 64t..64t+63) of task t: a rotation of
// the task's four units such that the 8 lanes of each quarter-warp phase of a 16-byte load hit 8 different 16-byte bank
// groups: lane = task (LP false: consecutive t, one k) or lane = 2m + p (LP: tasks t = m, k = p or p + 2).
template <bool LP>
__device__ __forceinline__ int act_slot(int t, int k) {
    return 4 * t + ((k + (LP ? 2 : 1) * (t >> 1)) & 3);
}

// The integer sum lo sc0 + (hi sc1) >> 4 of one 16-byte piece w of a Q4_K task (low nibbles against al, high nibbles
// masked in place against ah; sm: the task's scale word).
__device__ __forceinline__ int q4k_piece_isum(const int4& w, uint32_t sm, const int4& al, const int4& ah) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo = __dp4a(word(w, k) & 0x0f0f0f0f, word(al, k), lo);
        hi = dp4a_us(uint32_t(word(w, k)) & 0xf0f0f0f0u, word(ah, k), hi);
    }
    return lo * int(sm & 0xffu) + ((hi * int((sm >> 8) & 0xffu)) >> 4);
}
// q4k_accumulate's float term of a task from its integer sum (the same expression).
__device__ __forceinline__ void q4k_finish(int isum, uint32_t sm, uint32_t dm, float2 as, float ad, float& acc) {
    const float mn = byte_float<2>(sm) * as.x + byte_float<3>(sm) * as.y;
    const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&dm));  // d, dmin
    acc += dd.x * ad * float(isum) - dd.y * mn;
}

// Warp sums of v[0..N) (N = 1, 2, 4) by xor butterflies over the lane offsets o[0..4] in that order, the first log2 N
// steps transposed: value i ends in the lanes whose bits o[0], o[1] (log2 N of them) spell i, most significant first.
template <int N>
__device__ __forceinline__ float transposed_sums(float (&v)[N], int lane, const int (&o)[5]) {
    constexpr int L = N == 1 ? 0 : N == 2 ? 1 : 2;
    static_assert(N == 1 || N == 2 || N == 4, "1, 2 or 4 values");
    float cur[N];
#pragma unroll
    for (int i = 0; i < N; i++) cur[i] = v[i];
    int n = N;
#pragma unroll
    for (int s = 0; s < L; s++) {
        const int half = n / 2;
        const bool up = (lane & o[s]) != 0;
#pragma unroll
        for (int i = 0; i < half; i++) {
            const float keep = up ? cur[half + i] : cur[i], send = up ? cur[i] : cur[half + i];
            cur[i] = keep + __shfl_xor_sync(0xffffffffu, send, o[s]);
        }
        n = half;
    }
#pragma unroll
    for (int s = L; s < 5; s++) cur[0] += __shfl_xor_sync(0xffffffffu, cur[0], o[s]);
    return cur[0];
}

// One loaded task step of a lane: R rows, V virtual warps; plain: pieces w0, w1 of the lane's task; LP: piece p of
// tasks A = m and B = m + 16 (w0 = A's, w1 = B's), sa / sb their scale words, dm the owned task's d/dmin word.
template <int R, int V>
struct q4k_step {
    int4 w0[V][R], w1[V][R];
    uint32_t sa[V][R], sb[V][R], dm[V][R];
};

// Rows row0, row0 + 1 of the plain kernel's 2 x 2 form: virtual warps j = 0, 1 of a row (the plain kernel's two warps),
// each lane of virtual warp j taking tasks 32 j + lane + 64 k (lane pairs: the same tasks' pieces, owned as above).
// MODE: bits k_q4k_*. ONE: at most one step (n_in <= 4,096).
template <int MODE, bool ONE>
__global__ void __launch_bounds__(32 * k_block_warps)
    matvec_q4k_kernel(q4k_args a, const int8_t* xq, const float* xd, const float* xs, float* y, int accumulate) {
    constexpr int R = 2;
    constexpr bool SA = MODE & k_q4k_smem_act, LP = MODE & k_q4k_lane_pairs, OW = MODE & k_q4k_one_warp;
    constexpr int W = OW ? 1 : 2;  // physical warps per row
    constexpr int V = OW ? 2 : 1;  // virtual warps per physical warp
    constexpr int G = k_block_warps / W;
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), group = warp / W;
    const int j0 = (warp % W) * V;  // the first virtual warp of this warp
    const int row0 = (int(blockIdx.x) * G + group) * R;
    const int n = a.n_in >> 6;  // tasks per row
    const uint8_t* q[R];
    const uint32_t* side[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned row = unsigned(min(row0 + r, a.n_out - 1));
        q[r] = a.q + size_t(row) * unsigned(a.row_bytes);
        side[r] = a.side + size_t(row) * unsigned(a.side_row);
    }
    const int m = lane >> 1, p = lane & 1;
    // The lane's tasks of virtual warp v at step k: plain t; LP tA, tB (piece p) and the owned one.
    auto task_of = [&](int v, int k) { return 32 * (j0 + v) + 64 * k + lane; };
    auto task_a = [&](int v, int k) { return 32 * (j0 + v) + 64 * k + m; };
    auto load = [&](int k, q4k_step<R, V>& st) {
#pragma unroll
        for (int v = 0; v < V; v++) {
            if constexpr (LP) {
                const int ta = task_a(v, k), tb = ta + 16, to = p ? tb : ta;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (ta < n) {
                        st.w0[v][r] = load_stream(q[r] + 32 * ta + 16 * p);
                        st.sa[v][r] = __ldg(side[r] + q4k_sm_word(ta >> 2) + (ta & 3));
                    }
                    if (tb < n) {
                        st.w1[v][r] = load_stream(q[r] + 32 * tb + 16 * p);
                        st.sb[v][r] = __ldg(side[r] + q4k_sm_word(tb >> 2) + (tb & 3));
                    }
                    if (to < n) st.dm[v][r] = __ldg(side[r] + q4k_dm_word(to >> 2));
                }
            } else {
                const int t = task_of(v, k);
                if (t < n)
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        st.w0[v][r] = load_stream(q[r] + 32 * t);
                        st.w1[v][r] = load_stream(q[r] + 32 * t + 16);
                        st.sa[v][r] = __ldg(side[r] + q4k_sm_word(t >> 2) + (t & 3));
                        st.dm[v][r] = __ldg(side[r] + q4k_dm_word(t >> 2));
                    }
            }
        }
    };
    extern __shared__ int4 q4k_act[];
    auto act = [&](int t, int k) {
        if constexpr (SA)
            return q4k_act[act_slot<LP>(t, k)];
        else
            return load_act(xq + 64 * t + 16 * k);
    };
    float acc[R][V];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int v = 0; v < V; v++) acc[r][v] = 0;
    auto compute = [&](int k, const q4k_step<R, V>& st) {
#pragma unroll
        for (int v = 0; v < V; v++) {
            if constexpr (LP) {
                const int ta = task_a(v, k), tb = ta + 16, to = p ? tb : ta;
                if (32 * (j0 + v) + 64 * k >= n) continue;  // warp-uniform (the shuffles below need every lane)
                const int4 z = make_int4(0, 0, 0, 0);
                const int4 aal = ta < n ? act(ta, p) : z, aah = ta < n ? act(ta, p + 2) : z;
                const int4 bal = tb < n ? act(tb, p) : z, bah = tb < n ? act(tb, p + 2) : z;
                const int g = (to >> 2) * 8 + 2 * (to & 3);
                const float ad = to < n ? xd[g] : 0.0f;
                const float2 as = to < n ? *reinterpret_cast<const float2*>(xs + g) : make_float2(0, 0);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int ia = ta < n ? q4k_piece_isum(st.w0[v][r], st.sa[v][r], aal, aah) : 0;
                    const int ib = tb < n ? q4k_piece_isum(st.w1[v][r], st.sb[v][r], bal, bah) : 0;
                    const int other = __shfl_xor_sync(0xffffffffu, p ? ia : ib, 1);
                    if (to < n)
                        q4k_finish((p ? ib : ia) + other, p ? st.sb[v][r] : st.sa[v][r], st.dm[v][r], as, ad,
                                   acc[r][v]);
                }
            } else {
                const int t = task_of(v, k);
                if (t >= n) continue;
                const int4 a0 = act(t, 0), a1 = act(t, 1), a2 = act(t, 2), a3 = act(t, 3);
                const int g = (t >> 2) * 8 + 2 * (t & 3);
                const float ad = xd[g];
                const float2 as = *reinterpret_cast<const float2*>(xs + g);
#pragma unroll
                for (int r = 0; r < R; r++)
                    q4k_accumulate(st.w0[v][r], st.w1[v][r], st.sa[v][r], st.dm[v][r], a0, a1, a2, a3, as, ad,
                                   acc[r][v]);
            }
        }
    };
    griddep_wait();
    griddep_launch();
    // The first step's weights are requested before the activations are staged (their latency overlaps).
    {
        q4k_step<R, V> st;
        load(0, st);
        if constexpr (SA) {
            const int nu = a.n_in >> 4;
            for (int u = int(threadIdx.x); u < nu; u += 32 * k_block_warps)
                q4k_act[act_slot<LP>(u >> 2, u & 3)] = load_act(xq + 16 * u);
            __syncthreads();
        }
        compute(0, st);
    }
    if constexpr (!ONE) {
        // Steps while the warp's first task exists (lane pairs need every lane of the warp at their shuffles).
#pragma unroll 2
        for (int k = 1; 32 * j0 + 64 * k < n; k++) {
            q4k_step<R, V> st;
            load(k, st);
            compute(k, st);
        }
    }
    // The plain lane l's accumulator is in lane l (plain order) or lane 2 (l % 16) + l / 16 (lane pairs).
    constexpr int N = R * V;
    float vals[N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int v = 0; v < V; v++) vals[r * V + v] = acc[r][v];
    float sum;
    int owner;  // the lane holding row r's sum (of virtual warp 0 where V = 2): bits spell r * V
    if constexpr (LP) {
        constexpr int o[5] = {1, 16, 8, 4, 2};
        sum = transposed_sums<N>(vals, lane, o);
        // value i = r V + v at bits (1, 16): r = bit 0 if V = 1; (r, v) = (bit 0, bit 16) if V = 2
        owner = V == 1 ? (lane & 1) : 2 * (lane & 1) + ((lane >> 4) & 1);
    } else {
        constexpr int o[5] = {16, 8, 4, 2, 1};
        sum = transposed_sums<N>(vals, lane, o);
        owner = V == 1 ? (lane >> 4) : (lane >> 3) & 3;
    }
    if constexpr (V == 2) {
        // virtual warp 1's sum of the same row: the lane whose last transposed bit is set
        const float s1 = __shfl_xor_sync(0xffffffffu, sum, LP ? 16 : 8);
        const bool first = LP ? (lane & ~1) == 0 : (lane & 7) == 0 && (lane & 8) == 0;
        if (first) {
            const int r = owner >> 1, row = row0 + r;
            float s = 0;
            s += sum;
            s += s1;
            if (row < a.n_out) y[row] = accumulate ? y[row] + s : s;
        }
    } else {
        __shared__ float part[k_block_warps][R];
        const bool first = LP ? (lane & ~1) == 0 : (lane & 15) == 0;
        if (first) part[warp][owner] = sum;
        __syncthreads();
        const int tid = (warp % W) * 32 + lane;
        if (tid >= R) return;
        float s = 0;
#pragma unroll
        for (int k = 0; k < W; k++) s += part[group * W + k][tid];
        if (row0 + tid < a.n_out) y[row0 + tid] = accumulate ? y[row0 + tid] + s : s;
    }
}

bool g_q4k_set = false;
int g_q4k = 0;

}  // namespace

int q4k_matvec_mode() {
    if (!g_q4k_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_Q4K")) g_q4k = int(std::strtol(env, nullptr, 0));
        g_q4k_set = true;
    }
    return g_q4k;
}

bool launch_matvec_q4k(const gpu_weight& w, const int8_t* xq, const float* xd, const float* xs, float* y,
                       bool accumulate, cudaStream_t s) {
    const int bits = q4k_matvec_mode(), mode = bits & (k_q4k_smem_act | k_q4k_lane_pairs | k_q4k_one_warp);
    if (mode == 0 || w.type != dtype::q4_k || !w.d || w.n_in % 256 != 0) return false;
    if ((bits & k_q4k_short_only) && w.n_in > 4096) return false;
    constexpr int64_t lim = int64_t(1) << 30;
    const int64_t side_row = q4k_side_row_words(w.n_in / 256);
    if (w.n_out >= lim || w.q_row_bytes >= lim || w.n_in > 32768 || reinterpret_cast<uintptr_t>(xq) % 16 != 0)
        return false;
    const q4k_args a{
        w.q, reinterpret_cast<const uint32_t*>(w.d), int(w.n_out), int(w.q_row_bytes), int(side_row), int(w.n_in)};
    const bool one = w.n_in <= 4096;
    const int rows_per_block = (mode & k_q4k_one_warp) ? 8 : 4;
    const unsigned blocks = unsigned((w.n_out + rows_per_block - 1) / rows_per_block);
    const size_t smem = (mode & k_q4k_smem_act) ? size_t(w.n_in) : 0;
    const int acc = accumulate ? 1 : 0;
    auto go = [&](auto one_kernel, auto loop_kernel) {
        launch_smem(one ? one_kernel : loop_kernel, blocks, 32 * k_block_warps, smem, s, a, xq, xd, xs, y, acc);
        return true;
    };
#define MEMTILE_Q4K_MODE(M) \
    case M: return go(matvec_q4k_kernel<M, true>, matvec_q4k_kernel<M, false>);
    switch (mode) {
        MEMTILE_Q4K_MODE(1)
        MEMTILE_Q4K_MODE(2)
        MEMTILE_Q4K_MODE(3)
        MEMTILE_Q4K_MODE(4)
        MEMTILE_Q4K_MODE(5)
        MEMTILE_Q4K_MODE(6)
        MEMTILE_Q4K_MODE(7)
        default: return false;
    }
#undef MEMTILE_Q4K_MODE
}

}  // namespace detail

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_q4k_matvec(int mode);
void set_q4k_matvec(int mode) {
    detail::q4k_matvec_mode();
    detail::g_q4k = mode;
}

}  // namespace memtile::cuda
