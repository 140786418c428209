// CPU matrix multiplication against weights stored in any GGUF format: the one operation that streams the
// weights, so the one that decides decode speed. Contract:
//   y[t][o] = sum_i W[o][i] * x[t][i]   for t < n_tok, o < n_out
// W is n_out rows of n_in elements (GGUF [n_in, n_out]); x: [n_in, n_tok] f32 (token-major rows);
// y: [n_out, n_tok] f32 (token-major rows of n_out). Work is split across the pool by output rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/dtype.h"

namespace memtile {
class thread_pool;
}

namespace memtile::cpu {

struct weight_view {
    dtype type = dtype::f32;
    const uint8_t* data = nullptr;
    int64_t n_in = 0;   // row length (elements)
    int64_t n_out = 0;  // rows
    size_t row_bytes = 0;
};

class packed_arena;

struct prepare_options {
    bool repack = false;  // allow an interleaved, cache-line-aligned layout built at load (may own memory)
    // The weight bytes are a read-only file mapping: once repacked, their pages are returned to the OS
    // (madvise DONTNEED; they fault back in from the page cache if the original layout is read again), so
    // resident memory holds one copy. Never set for anonymous or owned memory, which DONTNEED would zero.
    bool release_source = false;
    // Threads that build the repacked layout (the caller's persistent pool; null: the calling thread alone).
    thread_pool* pool = nullptr;
    // Where the repacked copy goes: the next bytes of this arena (shared by a model's weights, kept alive by each
    // of them), or, when null, a buffer of its own.
    std::shared_ptr<packed_arena> arena = nullptr;
};

// One contiguous mapping for the repacked copies of a model's weights, handed out in the order the weights are
// prepared (a model prepares them in decode order). Why: a decode step then reads its weights as one sequential
// stream on 2 MiB pages. Separate buffers per matrix (the earlier layout) read 11-12 % slower at one thread on
// this VM even with every buffer on 2 MiB pages, and the 0.5 MB k and v matrices (under 2 MiB: small pages) at
// 0.55-0.6x the rate of the large ones (docs/cpu-log-s7-s11.md, session 8). Untouched bytes cost no memory: the mapping
// is reserved (MAP_NORESERVE) and each page is first written by the packer. Not thread-safe (take() is called
// by the loading thread; the packing itself runs over the pool as before).
class packed_arena {
public:
    explicit packed_arena(size_t bytes);
    ~packed_arena();
    packed_arena(const packed_arena&) = delete;
    packed_arena& operator=(const packed_arena&) = delete;
    // The next `bytes` (a multiple of 64) of the arena, 64-byte aligned; fails when fewer are left.
    uint8_t* take(size_t bytes);
    size_t capacity() const { return capacity_; }
    size_t used() const { return used_; }

private:
    uint8_t* map_ = nullptr;
    size_t map_bytes_ = 0;
    uint8_t* base_ = nullptr;  // 2 MiB aligned when the arena is at least that large
    size_t capacity_ = 0, used_ = 0;
};

// The bytes prepare_weight(w, o) takes from o.arena (its repacked copy), 0 when it does not repack w.
size_t packed_bytes(const weight_view& w, const prepare_options& o);

// A weight ready for matmul: the original view, plus any layout the kernels built at load.
class prepared_weight {
public:
    virtual ~prepared_weight() = default;
    virtual const weight_view& view() const = 0;
    virtual uint64_t resident_bytes() const = 0;  // extra bytes owned (0 when the mmap is used as is)
    // The bytes a one-token product reads: the file rows, or the repacked copy when there is one.
    virtual std::span<const uint8_t> streamed() const = 0;
};

std::unique_ptr<prepared_weight> prepare_weight(const weight_view& w, const prepare_options& o = {});

void matmul(const prepared_weight& w, const float* x, int64_t n_tok, float* y, thread_pool& pool);

// Several products of the same input x (q, k and v of a layer; gate and up): the activations are quantized
// once and the rows of all the matrices are split over the pool in one parallel_for, so a decode step has
// fewer hand-overs and the small matrices do not each pay one. ws[i] and ys[i] as matmul's w and y; every
// weight has the same n_in; 1 to 4 weights. Each result is bit-identical to matmul's.
void matmul_multi(std::span<const prepared_weight* const> ws, const float* x, int64_t n_tok, std::span<float* const> ys,
                  thread_pool& pool);

// Scalar reference: dequantize each row to f32 and take dot products in double-free f32 order. The test
// oracle of every optimized path and the fallback for formats without one.
void matmul_ref(const weight_view& w, const float* x, int64_t n_tok, float* y, int64_t row_begin, int64_t row_end);

// Turns the prefill GEMM paths (n_tok >= 4, kernels.h; on the x8 layout several tokens per pass over a
// group) off or on (default on) so that benchmarks can compare them side by side with the per-row / per-token
// kernels in one run. Results are the same bit for bit either way.
void set_prefill_gemm(bool on);

// Software prefetch in the decode (1-token) per-row kernels of the float formats' long rows (not repacked; the x8
// and x32 layouts take none since session 14): each 64-byte line of the weight stream is requested into L2
// (prefetcht1) `bytes` ahead of its use, within the rows of the calling thread (docs/cpu-log-s3-s6.md, "Software
// prefetch"). 0 turns it off; results are the same bit for bit either way (an A/B switch for benchmarks, like
// set_prefill_gemm).
inline constexpr int64_t k_default_decode_prefetch = 32 * 1024;
void set_decode_prefetch(int64_t bytes);

// Decode of the x8 layouts (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and the float x32 layouts over several streams per
// thread: a call's groups [g0, g1) are cut into `count` equal runs walked side by side (groups g, g + part, ...),
// each activation broadcast feeding all of them, when the runs are at least `min_distance` bytes apart (else
// fewer streams; count 1 or min_distance 0: one). count 4 applies to the x8 layouts; the x32 layouts take at most
// 2 (their two streams already hold 8 of AVX2's 16 vector registers in accumulators). count 0: the default of
// each format (default_decode_streams: 4 for the x8 layouts since session 14 but 2 for the AVX-512 Q4_K, Q5_K and Q6_K
// kernels on AMD and for the AVX-512 Q8_0 decode elsewhere (session 41), 2 for x32). Why several: on a VM whose DRAM
// latency held one core to ~14 GB/s, two streams decoded 22-44 % more tokens per second than one at one thread and
// 22-39 % at two (the hardware prefetcher keeps more lines in flight; at two threads each thread walks inside its
// chunks, so the distance must be small enough for a chunk: 1 MiB gave two threads 0-13 %, 32 KiB 22-39 %; session 12);
// on session 9's VM it was neutral at one thread (docs/cpu-log-s7-s11.md). Results are the same bit for bit for every
// setting.
inline constexpr int64_t k_default_decode_stream_distance = 32 * 1024;
void set_decode_streams(int count, int64_t min_distance = k_default_decode_stream_distance);
int default_decode_streams(dtype t);
// Staggered x8 decode streams: where a call's equal runs would start a multiple of 4 KiB apart (run length x group
// bytes; e.g. TinyLlama's Q5_K gate / up, 176 groups of 11,520 bytes per run at 4 streams), each run is shortened by
// the fewest groups that put the starts at least 256 bytes apart modulo 4 KiB (detail::staggered_run), and the groups
// left over go one stream at a time. nullopt: the default of each format (default_decode_stagger: on for Q4_K, Q5_K and
// Q6_K, and for Q8_0 except on AMD CPUs; off for Q4_0). Why: streams walking addresses with the same low 12 bits in
// lockstep read slower; session 20's AMD Zen 4, in-process A/B, 1 thread, TinyLlama-shaped matrices: Q5_K 21.9 -> 24.7
// GB/s (its gate / up 22.4 / 20.8 -> 26.0 / 25.2), Q4_K +1-4 %, Q6_K +1 %, Q8_0 and Q4_0 within -2..+1 % (docs/cpu.md).
// On session 38's Intel Xeon (AVX-512 + AMX) the Q8_0 decode gained 1-4 % from it (whole models, 1 thread, medians of
// 5 in-process rounds: TinyLlama 13.23-13.25 -> 13.62-13.73 tok/s, Llama-3.2-1B 11.31-11.41 -> 11.54-11.55). Results
// are the same bit for bit either way (an A/B switch for benchmarks).
void set_decode_stream_stagger(std::optional<bool> on);
bool default_decode_stagger(dtype t);

// Width of the weight loads in the AVX-512 decode kernels of the x8 layouts (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): 512, one
// load per pair of 32-byte vectors, or 256, two loads joined by vinserti64x4 (one more instruction per 64 bytes); for
// Q8_0, 256 selects the kernel that also does its arithmetic on 256-bit vectors (q8_0_x8_decode_256). 0: the default
// of each format, 256 for Q8_0 and on AMD CPUs for every format but Q5_K, 512 elsewhere. Why: on session 20's AMD Zen
// 4 (one core reads ~26-30 GB/s) Q4_K, Q6_K and Q4_0 streamed their weights from DRAM faster with 256-bit loads
// although they run 7-14 % slower from L2 (in-process A/B, 1 thread, TinyLlama-shaped matrices, staggered streams:
// Q4_K 26.3 -> 27.7 GB/s, Q6_K 26.1 -> 26.8, Q4_0 24.9 -> 26.2), Q5_K slower (24.7 -> 22.0); a loop doing nothing but
// 512-bit loads of the Q4_K bytes read at 0.6 of the same loop with 256-bit loads (docs/cpu.md, session 20). The
// AVX-512 Q8_0 decode (its set's since session 22): on Zen 4 its 512-bit loads ran 4-6 % behind the AVX2 decode, its
// 256-bit ones 1-5 % ahead; on session 41's Intel Xeon the 256-bit kernel (whose arithmetic does not lower the core
// clock as 512-bit work does) decoded 5-7 % faster with two streams (default_decode_streams), level to +4 % with four.
// Prefill keeps the 512-bit loads everywhere. Results are the same bit for bit either way.
void set_decode_load_width(int bits);
// The width in force for format t: 256 or 512.
int decode_load_width(dtype t);
int default_decode_load_width(dtype t);

// Name of the instruction-set path matmul uses for this weight type here, e.g. "avx512-vnni", "scalar".
std::string matmul_path(dtype t);

}  // namespace memtile::cpu
