// CUDA backend: the llama-family decode step (one token of one sequence) on an NVIDIA GPU.
//
// Weights are uploaded once from the GGUF mapping (or filled with random values of the right formats for
// benchmarks), in GGUF layout where its blocks are already 16-byte aligned (Q5_K, F16, BF16, F32) and
// otherwise split into a 16-byte aligned quant array plus a separate scale array (Q8_0, Q4_0, Q4_K, Q6_K; the K
// formats re-laid out for the decode kernels, cuda-kernels.h), so that every weight byte is read with coalesced
// 16-byte loads. The whole step (embedding, RMSNorm,
// projections, RoPE + KV write, split-K attention, SwiGLU, output, argmax) is captured once in a CUDA graph
// and replayed per token; the position and the token live in device memory so that the graph never changes.
//
// This header has no CUDA types: it is compiled into every build. Without MEMTILE_CUDA, compiled() is false
// and everything else reports that the backend is not compiled in.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/norm-bits.h"
#include "backends/cuda/qkm-bits.h"
#include "core/dtype.h"
#include "models/model-config.h"
#include "quant/file-type.h"

namespace memtile {
class gguf_file;
struct sampling_draw;
}  // namespace memtile

namespace memtile::cuda {

bool compiled();
int device_count();                // 0 when not compiled in, no driver or no device
std::string device_description();  // "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" or why none is usable
void require_device();             // throws memtile::error ("cuda") naming the reason when none is usable
// Loads cuBLAS (dlopen on first use: processes that never run a GPU prefill do not map it); needs no device.
// Throws memtile::error ("cuda") naming the library when it or an entry point is missing.
void load_blas();

struct bandwidth_probe {
    double hbm_read_gbs = 0;  // streaming read of a 4 GiB buffer (16-byte loads), median of several passes
    double l2_read_gbs = 0;   // the same over a 16 MiB buffer that stays in L2
};
bandwidth_probe probe_bandwidth();

// Matrix-vector products y = W x on random [n_out, n_in] weights of type t, `reps` launches back to back in
// one CUDA graph, each on a cold copy; GB/s of weight bytes streamed. rows/warps: the block shape
// (matvec_shape in cuda-kernels.h; 0: the decode step's choice). warm: every launch on the same copy (it stays in L2
// where it fits). For locating the gap between the decode step and the bandwidth limit.
double bench_matvec(dtype t, int64_t n_in, int64_t n_out, int reps, int rows = 0, int warps = 0, bool warm = false);
// The same by the decode step's launch (launch_matvec_qkm with the fusion mask `bits` where it takes the product, else
// launch_matvec; 0: launch_matvec only).
double bench_matvec_bits(dtype t, int64_t n_in, int64_t n_out, int reps, unsigned bits, bool warm, int rows = 0,
                         int warps = 0);

// What chaining dependent steps costs in read bandwidth, apart from any arithmetic (boundary-bench.cu): slices of
// cold bytes (slice_bytes, in order, each rounded up to 8 KiB units; 0: a step without bytes) read one after another,
// each slice's step reading the previous one's output. Forms: 0 every slice in one launch (no boundary), 1 a launch per
// slice with PDL, 2 the same with each block's loads issued before the PDL wait, 3 a launch per slice without PDL;
// one persistent (cooperative) launch of 128-thread blocks: 4 with a two-level grid barrier between slices, 5 the same
// with each block's first unit of the next slice loaded before the barrier, 6 without barriers; of 1,024-thread blocks:
// 7 with the two-level barrier, 8 with a one-level release / acquire barrier, 9 the same with the early unit, 10
// without barriers, 11 the one-level barrier polling with backoff; 1,024-thread blocks whose sub-blocks copy their
// units into a ring in shared memory ahead of the barriers (the reads of later slices can stream while a block waits):
// 3 units per sub-block, the one-level barrier: 12 by cp.async, 13 by bulk copies (TMA), 14 and 15 the same with the
// refill of a slice's last unit issued after the block's arrival at the barrier, 16 bulk copies without barriers.
// Medians of `reps` alternated runs.
constexpr int k_boundary_forms = 17;
struct boundary_figures {
    double gbs = 0;           // the slices' bytes read per second (0 where they have none)
    double us_per_slice = 0;  // the run's time / the slices
    int blocks = 0;           // the persistent forms' grid (0: the chains, one block per 8 KiB unit)
    int threads = 0;          // their threads per block
};
std::vector<boundary_figures> bench_boundaries(const std::vector<uint64_t>& slice_bytes, const std::vector<int>& forms,
                                               int reps);

// The decode step's matvec on GGUF rows (host memory: n_out rows of n_in elements of type t) and f32
// activations x ([n_in], quantized on the device as the decode step does): y ([n_out], host). Op-level
// checks against the CPU engine's matmul.
std::vector<float> matvec_gguf_rows(dtype t, const uint8_t* rows, int64_t n_in, int64_t n_out, const float* x);
// The Q4_K_M decode products of matvec-qkm.h on GGUF rows (checks): a = n_out_a Q4_K rows, b = n_out_b Q6_K rows (0:
// none) of n_in elements: [a x; b x] (host), by the path the decode fusion mask `bits` selects (k_qkm_pair with its
// variants: a and b in one launch; the other k_qkm bits: the alternative kernels, of a and of b; 0: launch_matvec per
// matrix).
std::vector<float> qkm_products_gguf(const uint8_t* a, int64_t n_out_a, const uint8_t* b, int64_t n_out_b, int64_t n_in,
                                     const float* x, unsigned bits);
// The decode step's RoPE + KV write (f16 cache) for positions 0..qkv.size()-1 (qkv[p]: [q_dim + 2 kv_dim] of
// position p before RoPE, no bias), then its attention of the last position's q over all of them, in n_split
// key ranges: [q_dim] (host). RoPE over the whole head (n_rot = head_dim), no frequency factors.
// variant: 0 launch_rope_kv + launch_attention_split; with RoPE folded into the attention kernel
// (launch_attention_rope): 1 separate merge, 2 K/V loads before the PDL wait, 3 merge in the kernel's last blocks,
// 4 merge in a thread-block cluster, 5 the same with the early K/V loads. q_block 32 / 256: the output also quantized
// as for a Wo reading it, appended as [q_dim] quantized values, then [q_dim / 32] scales and [q_dim / 32] sums.
// split_keys: the least keys per split (rope_params::split_keys; 0: ceil(positions / n_split)).
std::vector<float> attention_check(const std::vector<std::vector<float>>& qkv, int n_head, int n_head_kv, int head_dim,
                                   float freq_base, bool neox, int n_split, int variant = 0, int q_block = 0,
                                   int split_keys = 0);
// The decode step's embedding gather of row `token` of such rows, dequantized on the device ([n_in], host).
std::vector<float> embed_gguf_row(dtype t, const uint8_t* rows, int64_t n_in, int64_t n_out, int32_t token);
// The decode steps' greedy pick (launch_argmax_rows) of each row of logits ([n_rows, n], host; n_rows <= 16): the index
// of the largest value, the lowest of equal ones, NaN never chosen, 0 for a row without a number above -inf ([n_rows]).
std::vector<int32_t> argmax_rows_check(const std::vector<float>& logits, int n_rows, int n);

// Programmatic dependent launch of the decode step's kernels (launch.cuh): on unless set off here or by
// MEMTILE_CUDA_PDL=0. Read when a graph is captured; for A/B benchmarks.
void set_pdl(bool on);
// Query heads per decode attention block (GQA; attention-decode.cu): 0 as many of a KV head's query heads as the
// kernels allow where the grid then still fills the GPU and the context is 1,024 positions or more, else one (default;
// MEMTILE_CUDA_ATTN_GROUP otherwise), 1 one head per block (the kernels before session 24), n at most n everywhere.
// Every setting gives the same bits. Read when a graph is captured or a kernel launched; for checks and A/B benchmarks.
void set_attention_group(int g);
// The GQA attention blocks' key steps (attention-decode.cu): k_attention_pipe_mma (default; head_dim 64 or 128, else
// form 1) on tensor cores, not bit-equal to one head per block (so with it a sequence's heads-per-block choice ignores
// the batch); the forms 0 .. k_attention_pipes - 1, bit-equal to one head per block: 1 a warp's keys of a tile batched
// (attn_gqa_keys), 0 one key at a time (before session 26); -1 MEMTILE_CUDA_ATTN_PIPE or the default. Read when a
// graph is captured or a kernel launched.
constexpr int k_attention_pipes = 2, k_attention_pipe_mma = 2;
void set_attention_pipe(int pipe);
// Kernel fusions of the decode step (decoder.cpp record(), docs/cuda.md), bits: 2 attention merge in the attention
// kernel's last blocks (used where measured faster: Wo input f32 or quantized in groups of 32); 4 SwiGLU in the
// epilogue of an F16/BF16 gate/up product where the down matrix reads f32 (matvec-fused.cu); 8 / 16 SwiGLU and the
// quantization of its groups of 32 in the epilogue of a Q4_0 / Q8_0 gate/up product where the down matrix reads int8
// in groups of 32 (matvec-fused.cu; 16 measured slower, so off by default); 32 RoPE and the KV write folded into the
// attention kernel (no RoPE kernel), 64 with it the attention's K/V loads of earlier positions before the PDL wait, 128
// with 2 the merge in the attention kernel also for a K-format Wo (measured slower again, so off by default;
// docs/cuda-decode-log.md, session 7).
// k_decode_fusion_default unless set here or by MEMTILE_CUDA_FUSE; read when a graph is captured; bit-equal results
// with any mask (for A/B benchmarks). The fusions measured slower (RoPE + KV write in Q/K/V, last-block SwiGLU and
// RMSNorm tails: branch gfuse-exp; RMSNorm recomputed in every block of its F16/BF16 consumers: branch gfu-exp) are not
// offered.
// Bits 256 .. 2^21, 2^24 .. 2^26: the Q4_K_M product forms of matvec-qkm.h (qkm-bits.h; docs/cuda-decode-log.md,
// sessions 7 and 8).
// k_attn_cluster_k / k_attn_cluster (with 32): the attention merge in a thread-block cluster of the attention kernel's
// blocks, through distributed shared memory, for a K-format Wo (replacing the merge kernel) / for another Wo (replacing
// the last-block merge of bit 2), where a chunk's heads x splits fit a cluster of 8 (n_ctx <= 512 for a K-format Wo,
// <= 1,024 for the others; else the merges above); default on (tg128 +1.0 % Q4_K_M, +4.4 % Q8_0, +2.1 % F16;
// docs/cuda-decode-log.md, "Session 7 (branch gclu)").
constexpr unsigned k_attn_cluster_k = 1u << 22;
constexpr unsigned k_attn_cluster = 1u << 23;
// Diagnostic knock-outs (bits 2^27 .. 2^31 of the same mask; benchmarks only, NOT bit-equal: the step computes wrong
// results with any of them, and no default or k_decode_fusion_all holds them): the kernels named are not launched, so
// that a same-run step-time difference is their cost on the step's critical path (boundaries included; the next
// kernel reads stale inputs). Attention half: its RMSNorm, the Q/K/V product(s), the attention, Wo; FFN half: its
// RMSNorm, gate/up, SwiGLU and down. docs/cuda-decode-log.md, "Session 8 (branch gatt8)".
constexpr unsigned k_knockout_attn_norm = 1u << 27;
constexpr unsigned k_knockout_qkv = 1u << 28;
constexpr unsigned k_knockout_attn = 1u << 29;
constexpr unsigned k_knockout_wo = 1u << 30;
constexpr unsigned k_knockout_ffn = 1u << 31;
constexpr unsigned k_decode_fusion_default = 2 | 4 | 8 | 32 | 64 | k_attn_cluster_k | k_attn_cluster | k_qkm_pair |
                                             k_qkm_pair_v2 | k_qkm_lean_q6k | k_qkm_lean_pair;
constexpr unsigned k_decode_fusion_all =
    2 | 4 | 8 | 16 | 32 | 64 | 128 | k_attn_cluster_k | k_attn_cluster | k_qkm_pair | k_qkm_pair_v2 | k_qkm_pair_qk4 |
    k_qkm_small_4x2 | k_qkm_gate_up_4x2 | k_qkm_gate_up_3x2 | k_qkm_gate_up_loop | k_qkm_down_u4 | k_qkm_down_4x2 |
    k_qkm_q6_down_64 | k_qkm_q6_down_3 | k_qkm_lean_q4k | k_qkm_lean_q6k | k_qkm_lean_pair;
void set_decode_fusion(unsigned mask);
// The decode step's RMSNorm without the whole-row reduction on its critical path (norm-fused.h, docs/cuda-decode-log.md
// "Session 9 (branch gnf9)"): for Q8_0 / Q4_0 consumers a lean kernel leaves the int8 values of x * g (quantizing is
// scale-invariant) and the group sums of squares, and the consumers apply the norm's scale to the group scales. mode 0
// rms_norm_kernel (default); 1 the lean kernel (Q8_0 tg128 +2.6 %, Q4_0 unchanged); 2 the parts left by the Wo / down
// products in thread-block clusters (slower than 0); 3 a diagnostic of 2. Or MEMTILE_CUDA_NORM=MODE; read when a graph
// is captured. Modes 1 and 2 round the norm differently from mode 0 (the batched step follows them, so a batch's rows
// keep the single step's bits): off by default, since the default model's greedy tokens then leave the CPU engine's at
// token 47 (a near tie). Bit k_norm_fusion_k (norm-bits.h, 4): the same for the K formats' consumers (Q4_K / Q6_K, one
// activation scale per 256): a parts kernel of units of 256 and scaled Q4_K lane-pair, Q4_K + Q6_K pair and Q6_K lean
// products (docs/cuda-decode-log.md, "Session 11 (branch gnk11)"; measured 1 % slower in the single step, B=8 2 %
// faster); with it bits 8, 16, 32 other register budgets, 64 rms_norm_parts_rows_k in the single step too. The
// default is 4 | 64 (session 11: no parts kernel or scaled consumers; both steps' K-format norms are
// rms_norm_parts_rows_k, which rounds as the parts do: Q4_K_M tg128 +2.3 %, B=8 +2.2 %; within 1e-3 of the CPU engine).
// MEMTILE_CUDA_NORM=0 gives rms_norm_kernel everywhere (the CPU engine's norm arithmetic).
void set_norm_fusion(int mode);
int norm_fusion();  // the current mode
// The Q6_K products of the decode step's lean kernels (fusion bit k_qkm_lean_q6k) at other register budgets
// (matvec-q6k.cu, docs/cuda-decode-log.md "Session 10 (branch gq6k10)"), bit-equal to them. By default (mode 0) the
// down product (2 x 4 rows, one task per thread) runs at 64 registers, 8 blocks per SM (Q4_K_M tg128 +0.8-1.1 %); mode
// bits: 1 every Q6_K product by the session-8 lean kernels (52 registers; for A/B), 2 / 4 the down / the 2 x 1 products
// (the output matrix) at R rows per warp group and a budget of MINB blocks per SM, param = 16 R + MINB (MINB 0: ptxas's
// default budget, 1: no limit; bits 0..7 for the down product, bits 8..15 for the 2 x 1 products where nonzero, else
// bits 0..7; the pairs offered are listed in matvec-q6k.cu). Or MEMTILE_CUDA_Q6K=MODE[,PARAM]; read when a graph is
// captured.
void set_q6k_variant(int mode, int param = 0);
int q6k_variant();  // the current mode
// Weight loads of the decode matvecs before the PDL wait (matvec-common.cuh, docs/cuda-decode-log-s5-s6.md "Session 5
// (branch gf16)"): at level 4 (default) each thread of a Q8_0, F16 or BF16 matvec loads its first 4 tasks of each row
// while the previous kernel still runs; 0: every load after the wait (main's kernels before gf16). Or
// MEMTILE_CUDA_EARLY; read when a graph is captured; bit-equal results at either level (for A/B benchmarks).
void set_matvec_early(int level);
// The Q4_K products of the single-sequence step at their default shape (2 rows x 2 warps) in lane pairs
// (matvec-q4k.cuh: 512 contiguous weight bytes per load instruction), bit-equal to the plain kernel
// (docs/cuda-decode-log.md, "Session 10 (branch gq4k10)"). Mode bits: 2 lane pairs for the plain launches; with 2: 8
// only where n_in <= 4,096 (not the down product), 32 also the Q/K of the Q/K + V pair launch (matvec-qkm.h); 0 the
// plain kernels; with 2: 64 the lane-pair kernel's (gate/up, Wo, down) first weights loaded before the PDL wait, after
// (mode >> 8) x 250 ns (session 33). Default 2 | 64 | 2 << 8 = 578 (lane pairs: tg128 +0.6 % on the H200; early loads
// after 500 ns: +1.1-1.3 % on the H100); or MEMTILE_CUDA_Q4K=MODE; read when a graph is captured (for A/B benchmarks).
void set_q4k_matvec(int mode);
int q4k_matvec();  // the current mode
// Weights staged in shared memory before the PDL wait (docs/cuda-decode-log.md, "Session 7 (branch gpre)"): each thread
// of a Q8_0 / Q4_0 product copies its next `tasks` tasks of each row (after the early-level ones) by cp.async into
// dynamic shared memory while the previous kernel still runs, and computes them from there after the wait (Q4_K: the
// Wo product's one task per thread). mask: the products (1 Q/K/V, 2 Wo, 4 down, 8 the fused gate/up, 16 the output
// matrix; 256: also the Q4_K Wo with 2); 32 / 128: the single-row RMSNorm without / with quantization lets its
// dependents launch before its own wait; 64 (diagnostic): reserve the staged bytes but stage nothing. carveout: the
// shared-memory carveout (percent) every kernel launched with PDL asks for (-1: the driver's choice). Or
// MEMTILE_CUDA_PREFETCH="TASKS,MASK[,CARVEOUT]" ("0": off); read when a graph is captured; bit-equal results with any
// setting (for A/B benchmarks). Default (and tasks < 0): 1 task of the Wo product, the trigger before f32 consumers
// (1, 2 | 32, -1), the only settings measured faster.
void set_matvec_prefetch(int tasks, unsigned mask, int carveout);
// How the RMSNorm kernel of the decode steps loads its row (ops.cu, docs/cuda-decode-log.md "Session 10 (branch
// gq8a10)"): 0 a strided loop (four dependent L2 round trips per thread at n_embd 4,096); 1 each thread's elements in
// runs of 16 loaded before they are summed, the norm weight with them; 2 as 1 with the norm weight loaded before the
// PDL wait; -1 (default) 2 for the single-sequence step's RMSNorm that quantizes, 0 for the others (measured). A mode
// >= 0 applies to every RMSNorm kernel launch (A/B). Or MEMTILE_CUDA_NORM_LOADS; read when a graph is captured;
// bit-equal results in every mode.
void set_norm_loads(int mode);

// TFLOPS of one cuBLAS GEMM [n_tok, n_in] x [n_in, n_out]^T (f16 in, f32 accumulate and out), median of reps:
// the tensor-core reference for the prefill figures.
double bench_gemm_f16(int n_tok, int64_t n_in, int64_t n_out, int reps);

// The batched products on tensor cores against the dp4a/FMA kernels (their reference): random [n_out, n_in]
// weight of type t, random activations of n_rows sequences; NMSE of the tensor-core results.
double check_batch_products(dtype t, int64_t n_in, int64_t n_out, int n_rows, uint64_t seed);
// The batched Q4_K products in set_mma_q4k_xs mode `mode` (mma-pair.h; session 11) on random weights [n_out, n_in]
// and n_rows (2..8) sequences: first the number of outputs that differ from the pipelined kernel in mode 0 (0
// expected), second the NMSE against the dp4a kernel. Leaves the mode as it was.
std::pair<int64_t, double> check_batch_q4k_xs(int64_t n_in, int64_t n_out, int n_rows, int mode, uint64_t seed);

class batch_decoder;

// The decoder's GPU sampler on logits given by the host: checks against memtile::sampler and its timing.
class logits_sampler {
public:
    static std::unique_ptr<logits_sampler> create(int n_vocab);
    virtual ~logits_sampler() = default;
    virtual void set_logits(std::span<const float> logits) = 0;  // [n_vocab], uploaded
    virtual int32_t sample(const sampling_draw& d) = 0;          // as decoder::sample()
    virtual double bench(const sampling_draw& d, int reps) = 0;  // seconds per draw, incl. the copy back
    // Batched (as batch_decoder::step_sample): logits [b, n_vocab] uploaded, row i drawn with draws[i] by one
    // device_sampler::sample_rows call; with_argmax: each row's argmax computed first and handed over, as the
    // batched step's graph does (greedy rows without penalties take it).
    virtual std::vector<int32_t> sample_rows(std::span<const float> logits, std::span<const sampling_draw> draws,
                                             bool with_argmax) = 0;
    // Seconds per sample_rows call on the rows the last sample_rows uploaded, incl. the copy back.
    virtual double bench_rows(std::span<const sampling_draw> draws, int reps) = 0;
};

// Process-wide knobs of the prefill pass and the batched decoder, for checks and benchmarks (defaults are the
// fast paths); batched decoders read them when they first capture a batch size.
struct prefill_options {
    bool reference_attention = false;  // scalar attention kernel instead of the tensor-core one
    // f16 scratch per dequantized weight slice: whole matrices measured faster than L2-sized slices
    // (Q4_K_M pp512 22,370 vs 19,309 tok/s with 32 MiB slices, docs/cuda-prefill-batch-log.md).
    uint64_t dequant_chunk_bytes = 256ull << 20;
    bool reference_batch_products = false;  // batched decode: dp4a/FMA kernels instead of tensor-core MMA
    int mma_unroll = 0;                     // weight units in flight per warp of the MMA kernels: 8, 4, 0 = per format
    bool mma_fragment_loads = false;        // Q8_0/Q4_0/F16/BF16 weights loaded in the fragment layout (A/B)
    bool mma_q4_0_shuffles = false;         // Q4_0: quad shuffles instead of ldmatrix (the first row-wise kernel; A/B)
    bool mma_previous = false;  // Q4_K/Q8_0/Q4_0: register-staged kernels instead of the cp.async pipeline (A/B)
    int mma_pipe_variant = 0;   // pipelined kernels, A/B only: 1 other stages/occupancy, 2 alternative arithmetic
};
void set_prefill_options(const prefill_options& o);
prefill_options get_prefill_options();

class decoder {
public:
    // Weights from a GGUF file (llama, qwen2, phi3); n_ctx positions of f16 KV cache on the device. With
    // first_layer > 0 (--gpu-layers), only layers [first_layer, n_layer), the output norm and the output matrix
    // (plus the embedding table) go to the GPU: steps then start from the CPU's hidden state (forward_hidden).
    static std::unique_ptr<decoder> load(std::shared_ptr<gguf_file> g, uint32_t n_ctx, uint32_t first_layer = 0);
    // Random weights of the shapes of `c` and the tensor types file type `ft` implies (benchmarks).
    static std::unique_ptr<decoder> random(const model_config& c, file_type ft, uint32_t n_ctx, uint64_t seed);
    virtual ~decoder() = default;

    virtual const model_config& config() const = 0;
    virtual uint32_t first_layer() const = 0;  // 0 unless the CPU runs the first layers
    // Split execution: appends one position whose hidden state after layer first_layer() - 1 is x ([n_embd]
    // f32, computed by the CPU) and returns its logits. Only for first_layer() > 0.
    virtual std::span<const float> forward_hidden(std::span<const float> x) = 0;
    // Appends `token` at position used() and returns its logits ([n_vocab], valid until the next call).
    virtual std::span<const float> forward(int32_t token) = 0;
    // As forward, but returns only the argmax of the logits (computed on the GPU; ties: lowest id).
    virtual int32_t forward_greedy(int32_t token) = 0;
    // Runs n greedy steps back to back on the device (each feeds its argmax to the next, no host round
    // trip) after `warmup` untimed steps, starting at position `start` (0: an empty cache; else the cache must
    // already hold the positions below it, e.g. from forward_prefill); returns seconds for the n steps.
    virtual double bench_decode(int n, int warmup, int32_t first_token, uint32_t start = 0) = 0;
    virtual uint32_t used() const = 0;
    virtual void reset() = 0;                      // empties the KV cache
    virtual void truncate(uint32_t n_tokens) = 0;  // forgets positions >= n_tokens (later steps overwrite them)

    // Device sampling (run and chat on the GPU): appends tokens as forward() (one) or forward_prefill()
    // (several) do, but the logits stay on the device (nothing is copied back).
    virtual void append(std::span<const int32_t> tokens) = 0;
    // The token memtile::sampler::sample() would draw from the last logits this decoder computed (forward,
    // forward_prefill, forward_hidden or append): d's penalties, temperature, top-k, top-p, min-p and uniform
    // number (sampler::next_draw), on the GPU (gpu-sampler.h); 4 bytes come back instead of the logits.
    virtual int32_t sample(const sampling_draw& d) = 0;

    // Prefill: appends `tokens` at positions used().. in passes of up to 1024 tokens (weights dequantized
    // slice by slice to f16 and multiplied by cuBLAS on tensor cores, flash-style causal attention), writing
    // the KV cache that forward() then reads; returns the logits of the last token ([n_vocab], valid until the
    // next call). Models the pass does not cover (embedding width not a multiple of 8) go token by token.
    virtual std::span<const float> forward_prefill(std::span<const int32_t> tokens) = 0;
    // Seconds of one prefill of n tokens from an empty cache (median of reps after a warm-up); empties the cache.
    virtual double bench_prefill(int n_tokens, int reps) = 0;
    // Up to max_seq (<= 16) sequences decoded together, each with its own KV cache of n_ctx positions; shares
    // this decoder's weights (the decoder must outlive it).
    virtual std::unique_ptr<batch_decoder> make_batch(int max_seq, uint32_t n_ctx) = 0;
    // Weight bytes read per decode step (every matrix once, one embedding row), excluding the KV cache.
    virtual uint64_t streamed_bytes_per_token() const = 0;
    virtual std::string summary() const = 0;  // tensor types and device memory, one line
};

// Batched decode (continuous batching): one step appends one token to each of B sequences; every weight is
// read once per step for all B (skinny products), attention stays per sequence. Sequence ids 0..max_seq-1.
class batch_decoder {
public:
    virtual ~batch_decoder() = default;
    virtual int max_sequences() const = 0;
    virtual uint32_t used(int seq) const = 0;
    virtual void reset(int seq) = 0;                        // empties that sequence's KV cache
    virtual void truncate(int seq, uint32_t n_tokens) = 0;  // forgets that sequence's positions >= n_tokens
    // The prompt of sequence `seq` through the prefill pass; returns its last logits ([n_vocab]).
    virtual std::span<const float> prefill(int seq, std::span<const int32_t> tokens) = 0;
    // Appends tokens[i] to sequence seqs[i] (distinct ids) in one step; returns the logits [B, n_vocab], row i
    // for seqs[i] (valid until the next call).
    virtual std::span<const float> step(std::span<const int32_t> tokens, std::span<const int32_t> seqs) = 0;
    // As step, but returns the argmax of each row (on the GPU; ties: lowest id).
    virtual std::span<const int32_t> step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> seqs) = 0;
    // As step, but the logits stay on the device: row i is drawn there with draws[i] (sampler::next_draw() of
    // seqs[i]'s sampler; gpu-sampler.h), exactly as memtile::sampler would draw it; returns the b token ids.
    virtual std::span<const int32_t> step_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                                 std::span<const sampling_draw> draws) = 0;
    // n greedy steps of sequences 0..b-1 back to back on the device after `warmup` untimed ones, from position
    // `start` of each (0: empty caches; else over the rows their prefill left); returns seconds for the n steps
    // (aggregate tok/s = b * n / seconds).
    virtual double bench(int b, int n, int warmup, int32_t first_token, uint32_t start = 0) = 0;
    // Op check on the model's own weights: every product for n random activation rows on tensor cores vs the
    // dp4a/FMA kernels; the worst NMSE and where.
    virtual std::pair<double, std::string> check_products(int n) = 0;
};

}  // namespace memtile::cuda
