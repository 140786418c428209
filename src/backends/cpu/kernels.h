// Internal interface between matmul.cpp (dispatch, threads, scratch) and the per-ISA kernel translation
// units under src/backends/cpu/<isa>/.
//
// Rule for the ISA translation units: they are compiled with target flags (-mavx2, -mavx512f, ...), so any
// inline function or template they instantiate from a shared header could be emitted with those
// instructions and chosen by the linker for baseline callers. They therefore include only this header,
// <immintrin.h> and <cstring>/<cstdint>, and keep their own helpers in an ISA-named namespace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/matmul.h"

namespace memtile::cpu::detail {

// How activations are handed to a kernel. Integer-dot formats get the tokens quantized once per matmul call
// into a structure-of-arrays form of Q8_0 (32-element blocks) or Q8_K (256-element blocks):
//   qs[t * n_in + i]                      int8 level of element i of token t, |q| <= 127
//   d[t * (n_in / block) + b]             float scale of block b (x ~= d * q)
//   bsums[t * (n_in / 16) + g]            sum of the 16 levels of group g (for min/offset terms)
// Float formats read the f32 tokens directly: f32[t * n_in + i].
enum class act_format { f32, q8_0, q8_k };

struct act_view {
    const float* f32 = nullptr;
    const int8_t* qs = nullptr;
    const float* d = nullptr;
    const int16_t* bsums = nullptr;
    int64_t n_in = 0;
};

// y[t * y_stride + o] = dot(row o, token t) for o in [row_begin, row_end), t < n_tok.
using gemm_fn = void (*)(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t y_stride,
                         int64_t row_begin, int64_t row_end);
// Quantizes one token of n_in floats (a multiple of the block) into the SoA layout above.
using quantize_fn = void (*)(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums);

struct kernel_set {
    const char* name;
    gemm_fn f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k;
    quantize_fn quantize_q8_0, quantize_q8_k;
};

// Decode kernels of the interleaved layouts of repack.h: for token t and 8-row groups [g0, g1) of `packed`
// (group g at packed + g * group_bytes), y[t * n_out + o] = dot(row o, token t) for the rows o < n_out.
using gemv_x8_fn = void (*)(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t, float* y,
                            int64_t n_out, int64_t g0, int64_t g1);

// Prefill on the same layouts: tokens [t0, t1) over groups [g0, g1), several tokens per pass over a group's
// weights. Each token's result is bit for bit the gemv_x8_fn one (batch invariance, see avx2/gemm-avx2.h).
using gemm_x8_fn = void (*)(const uint8_t* packed, size_t group_bytes, const act_view& a, int64_t t0, int64_t t1,
                            float* y, int64_t n_out, int64_t g0, int64_t g1);

// The float formats' 32-row groups (repack.h) take the same entry points, with groups of 32 rows.
struct repack_kernel_set {
    gemv_x8_fn q8_0, q4_0, q4_k, q5_k, q6_k, f32, f16, bf16;
    gemm_x8_fn q8_0_gemm, q4_0_gemm, q4_k_gemm, q5_k_gemm, q6_k_gemm, f32_gemm, f16_gemm, bf16_gemm;
};

// nullptr when the path is not compiled in (non-x86 builds).
const repack_kernel_set* avx2_repack_kernels();
const repack_kernel_set* avx512_repack_kernels();
// The avx512 set with the K-quant bit unpacking done by GFNI affine transforms (isa::avx512_gfni).
const repack_kernel_set* avx512_gfni_repack_kernels();
// The set of the active path (cpu-isa.h); nullptr for the scalar path, which has no interleaved layouts.
const repack_kernel_set* active_repack_kernels();

// How far ahead (bytes) the decode kernels that use software prefetch ask for their weight stream, 0 = off
// (set_decode_prefetch in matmul.h). Defined in matmul.cpp, so no ISA translation unit compiles <atomic>.
int64_t decode_prefetch_bytes();
// How many group streams per thread the x8 / x32 decode of format t walks (1, 2 or 4; the x32 layouts take at most
// 2) and the least distance in bytes between two of them, 0 = one stream (set_decode_streams in matmul.h).
struct decode_stream_setting {
    int count;
    int64_t min_distance;
    bool stagger;  // set_decode_stream_stagger
};
decode_stream_setting decode_streams(dtype t);
// The run length (groups) that `count` streams walking runs of at most `part` groups of `group_bytes` bytes each
// take under set_decode_stream_stagger: part itself where the runs' starts already lie at least 256 bytes apart
// modulo 4 KiB, else the longest shorter run (by at most part / 4) whose starts do; part where none does.
inline int64_t staggered_run(int64_t part, size_t group_bytes, int count) {
    constexpr int64_t page = 4096, gap = 256;
    for (int64_t p = part; p >= part - part / 4 && p > 0; p--) {
        const int64_t d = int64_t((size_t(p) * group_bytes) % page);
        bool apart = true;
        for (int i = 1; i < count && apart; i++) {
            const int64_t o = (i * d) % page;  // start of run i against run 0, modulo 4 KiB
            apart = std::min(o, page - o) >= gap;
        }
        if (apart) return p;
    }
    return part;
}
// Whether the AVX-512 decode kernel of x8 format t loads each 64-byte pair of weight vectors as two 256-bit loads
// (decode_load_width(t) in matmul.h is 256).
bool decode_narrow_loads(dtype t);

// Matrix-matrix (prefill) paths, used for n_tok >= k_gemm_min_tokens on plain (not repacked) weights; same
// gemm_fn contract and the same per-token results, bit for bit, as the kernel_set path (see
// avx2/gemm-avx2.h for the design). nullptr entries fall back to the kernel_set path.
struct gemm_set {
    gemm_fn f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k;
};
inline constexpr int64_t k_gemm_min_tokens = 4;

// A 64-byte aligned buffer of at least `bytes`, owned by the calling thread and reused by its next call
// (defined in matmul.cpp, a baseline translation unit, so no container code is compiled with ISA flags).
uint8_t* gemm_scratch(size_t bytes);

// nullptr when the path is not compiled in (non-x86 builds).
const gemm_set* avx2_gemm_kernels();
const kernel_set* avx2_kernels();
const kernel_set* avx512_kernels();
const kernel_set* active_kernels();

inline act_format act_format_for(dtype t) {
    switch (t) {
        case dtype::q8_0:
        case dtype::q4_0: return act_format::q8_0;
        case dtype::q4_k:
        case dtype::q5_k:
        case dtype::q6_k: return act_format::q8_k;
        default: return act_format::f32;
    }
}

inline gemm_fn kernel_for(const kernel_set& k, dtype t) {
    switch (t) {
        case dtype::f32: return k.f32;
        case dtype::f16: return k.f16;
        case dtype::bf16: return k.bf16;
        case dtype::q8_0: return k.q8_0;
        case dtype::q4_0: return k.q4_0;
        case dtype::q4_k: return k.q4_k;
        case dtype::q5_k: return k.q5_k;
        case dtype::q6_k: return k.q6_k;
        default: return nullptr;
    }
}

inline gemm_fn gemm_for(const gemm_set& g, dtype t) {
    switch (t) {
        case dtype::f32: return g.f32;
        case dtype::f16: return g.f16;
        case dtype::bf16: return g.bf16;
        case dtype::q8_0: return g.q8_0;
        case dtype::q4_0: return g.q4_0;
        case dtype::q4_k: return g.q4_k;
        case dtype::q5_k: return g.q5_k;
        case dtype::q6_k: return g.q6_k;
        default: return nullptr;
    }
}

// Tiling shared by every kernel. Rows are taken in blocks of about k_row_block_bytes of weights; for each
// block, tiles of `K::tile` tokens pass over all its rows. The block stays in L2 while the tiles pass, a
// tile's activations (at most 4 tokens, <= 90 KB even as f32 for n_in = 5632) stay close while the rows
// pass, and each weight vector unpacked into registers serves every token of the tile, so prefill is
// bound by arithmetic, not by the weight stream. K::dot<nt>(row, a, t0, out) computes
// out[j] = dot(row, token t0 + j) for j < nt; nt = 1 is the decode (gemv) case, a single pass over the rows.
inline constexpr uint64_t k_row_block_bytes = 64 * 1024;

template <class K, int nt>
void gemm_rows(const weight_view& w, const act_view& a, int64_t t0, float* y, int64_t y_stride, int64_t r0,
               int64_t r1) {
    float out[nt];
    for (int64_t o = r0; o < r1; o++) {
        K::template dot<nt>(w.data + size_t(o) * w.row_bytes, a, t0, out);
        for (int j = 0; j < nt; j++) y[(t0 + j) * y_stride + o] = out[j];
    }
}

template <class K>
void gemm_tiled(const weight_view& w, const act_view& a, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                int64_t r1) {
    constexpr int tile = K::tile;
    static_assert(tile == 4, "the remainder below covers 1..3 tokens");
    const int64_t block = w.row_bytes >= k_row_block_bytes ? 1 : int64_t(k_row_block_bytes / w.row_bytes);
    for (int64_t rb = r0; rb < r1; rb += block) {
        const int64_t re = rb + block < r1 ? rb + block : r1;
        int64_t t = 0;
        for (; t + tile <= n_tok; t += tile) gemm_rows<K, tile>(w, a, t, y, y_stride, rb, re);
        if (n_tok - t == 1) gemm_rows<K, 1>(w, a, t, y, y_stride, rb, re);
        if (n_tok - t == 2) gemm_rows<K, 2>(w, a, t, y, y_stride, rb, re);
        if (n_tok - t == 3) gemm_rows<K, 3>(w, a, t, y, y_stride, rb, re);
    }
}

}  // namespace memtile::cpu::detail
