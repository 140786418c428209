// Decode matrix-vector dispatch (block shape per matrix), the Q8_0/Q4_0 instantiations, and the embedding
// gather. Kernels: matvec-common.cuh.
#include <cstdlib>

#include "backends/cuda/matvec-common.cuh"

namespace memtile::cuda {
namespace detail {

void launch_matvec_legacy(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs,
                          float* y, bool accumulate, matvec_shape shape, cudaStream_t s) {
    if (w.type == dtype::q8_0)
        launch_early<dtype::q8_0>(w, x, xq, xd, xs, y, accumulate, shape, s);
    else
        launch_staged<dtype::q4_0, 0>(w, x, xq, xd, xs, y, accumulate, shape, s);
}

}  // namespace detail

namespace {

using namespace detail;

// Element i of row r of a weight in the device layout (the embedding gather; one thread per element).
__device__ float dequant_elem(const gpu_weight& w, int64_t r, int64_t i) {
    const uint8_t* row = w.q + r * w.q_row_bytes;
    switch (w.type) {
        case dtype::q8_0: return h2f(w.d[r * (w.n_in / 32) + i / 32]) * float(int8_t(row[i]));
        case dtype::q4_0: {
            const int j = int(i % 32);
            const uint8_t byte = row[(i / 32) * 16 + (j % 16)];
            return h2f(w.d[r * (w.n_in / 32) + i / 32]) * float(int((j < 16 ? byte & 15 : byte >> 4)) - 8);
        }
        case dtype::q4_k: {
            const int e = int(i % 256), s = e / 32, l = e % 32;
            const uint8_t byte = row[(i / 256) * 128 + 32 * (s / 2) + l];
            const int qv = (s % 2) ? byte >> 4 : byte & 15;
            const uint32_t* side = q4k_side_of(w.d, r, int(w.n_in / 256));
            const auto* sm = reinterpret_cast<const uint8_t*>(side + q4k_sm_word(i / 256));
            const uint32_t dm = side[q4k_dm_word(i / 256)];
            const int scale = sm[4 * (s / 2) + s % 2], mn = sm[4 * (s / 2) + 2 + s % 2];
            const float d = h2f(uint16_t(dm)), dmin = h2f(uint16_t(dm >> 16));
            return d * float(scale) * float(qv) - dmin * float(mn);
        }
        case dtype::q5_k: {
            const uint8_t* blk = row + (i / 256) * 176;
            const int e = int(i % 256), s = e / 32, l = e % 32;
            const uint8_t* sc = blk + 4;
            int scale, mn;
            scale_min_bytes(sc, s, scale, mn);
            const uint8_t* qs = blk + 48;
            const uint8_t byte = qs[32 * (s / 2) + l];
            int qv = (s % 2) ? byte >> 4 : byte & 15;
            qv |= ((blk[16 + l] >> s) & 1) << 4;
            const float d = h2f(uint16_t(blk[0] | blk[1] << 8)), dmin = h2f(uint16_t(blk[2] | blk[3] << 8));
            return d * float(scale) * float(qv) - dmin * float(mn);
        }
        case dtype::q6_k: {
            const int64_t n_half = w.n_in / 128;
            const float sc = float(int8_t(row[q6k_scale_byte(0, n_half) + i / 16]));
            return h2f(w.d[r * (w.n_in / 256) + i / 256]) * sc * float(q6k_value(row, i, n_half));
        }
        default: return plain_elem(w.type, row, i);
    }
}

__global__ void embed_kernel(gpu_weight w, const int32_t* token, float* x) {
    griddep_wait();
    griddep_launch();
    const int64_t r = *token;
    for (int64_t i = threadIdx.x + int64_t(blockIdx.x) * blockDim.x; i < w.n_in; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = dequant_elem(w, r, i);
}

matvec_shape g_forced_shape{};

// set_matvec_early / MEMTILE_CUDA_EARLY: read at every launch, so a decoder's graph keeps the level set when it was
// captured.
bool g_early_set = false;
int g_early = 4;

// set_matvec_prefetch / MEMTILE_CUDA_PREFETCH ("TASKS,MASK[,CARVEOUT]"; "0" turns it off): read at every launch, as
// the early level.
bool g_prefetch_set = false;
prefetch_config g_prefetch{};
int g_carveout = -1;

void parse_prefetch(const char* v) {
    char* end = nullptr;
    g_prefetch.tasks = int(std::strtol(v, &end, 10));
    g_prefetch.mask = *end == ',' ? unsigned(std::strtoul(end + 1, &end, 0)) : 0u;
    g_carveout = *end == ',' ? int(std::strtol(end + 1, &end, 10)) : -1;
}

void read_prefetch_env() {
    if (g_prefetch_set) return;
    if (const char* env = std::getenv("MEMTILE_CUDA_PREFETCH")) parse_prefetch(env);
    g_prefetch_set = true;
}

}  // namespace

namespace detail {

int matvec_early() {
    if (!g_early_set) {
        if (const char* env = std::getenv("MEMTILE_CUDA_EARLY")) g_early = int(std::strtol(env, nullptr, 10));
        g_early_set = true;
    }
    return g_early;
}

prefetch_config matvec_prefetch() {
    read_prefetch_env();
    return g_prefetch;
}

bool norm_trigger_early(bool quantizes) {
    read_prefetch_env();
    return (g_prefetch.mask & (quantizes ? k_prefetch_norm_trigger_q : k_prefetch_norm_trigger)) != 0;
}

int launch_carveout() {
    read_prefetch_env();
    return g_carveout;
}

}  // namespace detail

// Declared in cuda-backend.h (C++20, so not included by this C++17 translation unit).
void set_matvec_early(int level);
void set_matvec_early(int level) {
    detail::matvec_early();
    g_early = level;
}

void set_matvec_prefetch(int tasks, unsigned mask, int carveout);
void set_matvec_prefetch(int tasks, unsigned mask, int carveout) {
    read_prefetch_env();
    g_prefetch = tasks < 0 ? prefetch_config{} : prefetch_config{tasks, mask};
    g_carveout = tasks < 0 ? -1 : carveout;
}

void force_matvec_shape(matvec_shape shape) {
    g_forced_shape = shape;
}

// From the shape sweep of tests/cuda/cuda-check.cpp (H200, docs/cuda-decode-log-s2-s4.md). Long rows (the down matrix,
// n_in 14,336 over 4,096 rows) split each row over 4 warps (not Q6_K: its task is twice as long); the float formats do
// so everywhere (their loop is short per byte, so the memory system needs more warps in flight). 2 rows per warp share
// the activation loads of the integer formats; Q8_0/Q4_0 with many rows prefer one row per warp.
matvec_shape default_matvec_shape(const gpu_weight& w) {
    if (g_forced_shape.rows > 0) return g_forced_shape;
    if (!matvec_uses_int8(w.type)) return {2, 4};
    // Q6_K device layout (session 5): 2 x 1 measured in the decode step; 1 x 1 on V (n_out 1,024, faster alone) was
    // slower there; 2 x 4 on the down matrix (n_in 14,336; 25 % faster alone) made Q4_K_M tg128 +1.7 %
    // (docs/cuda-decode-log-s5-s6.md, its session 5 status).
    if (w.type == dtype::q6_k) return w.n_in >= 8192 ? matvec_shape{2, 4} : matvec_shape{2, 1};
    if (w.type == dtype::q4_k) return {2, 2};  // its device-layout kernel: 2 x 2 best on every sweep shape
    if (w.n_in >= 8192) return {2, 4};
    if (w.n_out <= 4096) return {2, 2};
    if (w.type == dtype::q8_0 || w.type == dtype::q4_0) return {1, 1};
    return {2, 1};
}

void launch_matvec(const gpu_weight& w, const float* x, const int8_t* xq, const float* xd, const float* xs, float* y,
                   bool accumulate, cudaStream_t s) {
    const matvec_shape shape = default_matvec_shape(w);
    switch (w.type) {
        case dtype::q8_0:
        case dtype::q4_0: launch_matvec_legacy(w, x, xq, xd, xs, y, accumulate, shape, s); break;
        case dtype::q4_k:
        case dtype::q5_k:
        case dtype::q6_k: launch_matvec_kquant(w, x, xq, xd, xs, y, accumulate, shape, s); break;
        default: launch_matvec_float(w, x, xq, xd, xs, y, accumulate, shape, s); break;
    }
}

void launch_embed(const gpu_weight& w, const int32_t* token, float* x, cudaStream_t s) {
    launch(embed_kernel, unsigned((w.n_in + 255) / 256), 256, s, w, token, x);
}

}  // namespace memtile::cuda
