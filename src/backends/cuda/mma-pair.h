// The batched step's Q/K/V products of Q4_K_M's more-bits layers in one launch (matvec-mma.cu: Q4_K Q/K rows and
// Q6_K V rows of the same activations), its A/B switch and its check against the two launches and the dp4a kernels;
// the batched products' other A/B switches and the pipelined Q6_K kernel (matvec-mma-q6k.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "backends/cuda/cuda-kernels.h"

namespace memtile::cuda {

// y = W x (no accumulation) for Q4_K a [rows_a, n_in] into ya and Q6_K b [rows_b, n_in] into yb, n_rows sequences'
// group-major int8 activations (prefill-kernels.h), output rows y_stride apart; bit-equal to launch_matvec_batch of
// each with the register-staged Q6_K kernel (set_mma_q6k_pipe(0, 0); the default pipelined one sums in integers).
// Returns false (nothing launched) where it does not apply: other types or widths, n_rows outside 2..8, non-default mma
// options (set_mma_unroll), or switched off.
bool launch_matvec_mma_pair(const gpu_weight& a, float* ya, const gpu_weight& b, float* yb, int n_rows,
                            const int8_t* xq, const float* xd, const float* xs, int64_t y_stride, cudaStream_t s);
// Default on; off (A/B): the two launches. Batched decoders read it when they capture a batch size.
void set_mma_pair(bool on);
// Q4_K pipelined products at up to 8 sequences with deeper cp.async rings (A/B, bit-equal: same units, order and
// arithmetic): 0 = 2 stages (default), 1 = 4 stages for rows of >= 8,192 elements, 2 = 4 stages for all, 3 = 3
// stages for rows of >= 8,192. Rings over 44 KB use dynamic shared memory, whose limit prepare_mma_kernels raises
// (outside graph captures: batched decoders call it when made).
void set_mma_q4k_stages(int mode);
// Session 11 (gbq11): the Q4_K pipelined products at 2..8 sequences with their activations staged in the cp.async ring
// next to the weights (bit-equal: the same values and arithmetic): bit 0 the Q4_K launches, bit 1 the Q4_K blocks of
// the Q/K + V pair; default 3 (both; MEMTILE_CUDA_Q4K_XS=MODE replaces it), 0: the kernels before. Read at launch
// (batched decoders: at capture); prepare_mma_kernels raises the staged kernels' shared-memory limit. Checked by
// check_batch_q4k_xs (cuda-backend.h).
void set_mma_q4k_xs(int mode);
int mma_q4k_xs();
// Session 7 (gq4b), all at up to 8 sequences: cp.async stages of Q4_0 rows of >= 8,192 elements (8, the default,
// for any value but 2 / 4) and of shorter rows (2, the default; 3 as A/B), Q6_K's halves in flight per warp (0: 2,
// the default; 4 as A/B: 1 all rows, 2 rows of < 8,192 elements, i.e. the output matrix). The products are bit-equal
// across these settings (same per-lane order).
void set_mma_batch_tune(int q4_0_long_stages, int q6k_halves, int q4_0_short_stages = 2);
void prepare_mma_kernels();

// Session 8 (gbq8): Q6_K products at 2..8 sequences by the pipelined kernel (matvec-mma-q6k.cu; rows of whole
// super-block pairs, n_in % 512 == 0), per width: short_mode for rows of < 8,192 elements (output, V), long_mode for
// longer rows (down). 0: the register-staged kernel (before); bit-equal to it: 1: 4 stages, 2 blocks per SM, 2: 4
// stages, 3 blocks (85 registers), 3: 6 stages, 2 blocks, 4: 3 stages, 3 blocks, 5: 3 stages, 4 blocks (64
// registers); with each half's scales applied in integers (not bit-equal): 6: 3 stages, 3 blocks (default for the
// short rows), 7: 4 stages, 2 blocks (the long rows' default before session 9), 8: 4 stages, 3 blocks; session 9
// (gbt9), a warp's unit a whole super-block (both halves of each 32-byte quant sector copied by one warp), integer
// sums: 9: 2 stages, 3 blocks, 10: 3 stages, 2 blocks (default for the long rows). Values out of range: the defaults
// (MEMTILE_CUDA_Q6K_MODES="SHORT,LONG", read once, replaces them). Steps of 9..16 sequences keep the register-staged
// kernel.
void set_mma_q6k_pipe(int short_mode, int long_mode);
void prepare_mma_q6k_pipe();  // raises the kernels' dynamic shared-memory limits (outside graph captures)
// y = W x by the pipelined Q6_K kernel where it applies (returns false, nothing launched, otherwise: mode 0, another
// type, n_rows outside 2..8, n_in % 512 != 0, unaligned buffers).
bool launch_matvec_q6k_pipe(const gpu_weight& w, int n_rows, const int8_t* xq, const float* xd, float* y,
                            int64_t y_stride, bool accumulate, cudaStream_t s);
// The pipelined Q6_K kernel in mode `mode` (both widths) on random weights [n_out, n_in] and n_rows sequences: first
// the number of outputs that differ from the register-staged kernel (0 expected for modes 1-5), second the NMSE
// against the dp4a kernel. Fails if the pipelined kernel does not apply. Leaves the modes at their defaults.
std::pair<int64_t, double> check_batch_q6k_pipe(int64_t n_in, int64_t n_out, int n_rows, int mode, uint64_t seed);

// The pair on random weights (Q4_K [rows_a, n_in], Q6_K [rows_b, n_in]) and n_rows sequences: first the number of
// outputs that differ from the two tensor-core launches (0 expected: bit-equal), second the NMSE against the dp4a
// kernels. Fails if the pair does not apply to these arguments.
std::pair<int64_t, double> check_batch_pair(int64_t n_in, int64_t rows_a, int64_t rows_b, int n_rows, uint64_t seed);

}  // namespace memtile::cuda
