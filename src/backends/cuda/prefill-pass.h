// Host side of the prefill pass and of the batched decoder (prefill.cpp), used by the decoder (decoder.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>

#include "backends/cuda/cuda-backend.h"
#include "backends/cuda/decoder-state.h"

namespace memtile::cuda {

// One forward pass over the tokens of one sequence: per weight, slices of rows dequantized to an f16 scratch
// (F16 weights are used in place) and one cuBLAS GEMM per slice (f16 x f16, f32 accumulate and output); f32
// residual stream; f16 GEMM inputs; flash attention on tensor cores.
class prefill_pass {
public:
    prefill_pass(const model_view& m, cudaStream_t s);
    ~prefill_pass();
    prefill_pass(const prefill_pass&) = delete;
    prefill_pass& operator=(const prefill_pass&) = delete;

    static bool supported(const model_view& m);  // else the caller goes token by token
    // Tokens at positions pos0..; layer il's caches at k_cache + il * layer_stride (rows of kv_dim f16). Writes
    // the last token's logits ([n_vocab] f32) to the device buffer `logits`; asynchronous on the stream.
    void run(std::span<const int32_t> tokens, uint16_t* k_cache, uint16_t* v_cache, int64_t layer_stride, int pos0,
             float* logits);

private:
    struct impl;
    std::unique_ptr<impl> p_;
};

std::unique_ptr<batch_decoder> make_batch_decoder(const model_view& m, int max_seq, uint32_t n_ctx);

}  // namespace memtile::cuda
