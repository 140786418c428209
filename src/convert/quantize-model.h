// memtile quantize: re-encodes every tensor of a GGUF model into the mixture of a target file type
// (quant/file-type.h's tensor_type_for), streaming: each chunk of rows is dequantized to f32, encoded, written,
// and decoded again to measure the error it introduced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "quant/file-type.h"

namespace memtile {

struct quantize_options {
    file_type type = file_type::q8_0;
    int threads = 0;  // 0: thread_pool::default_threads()
    bool progress = true;
};

struct quantized_tensor {
    std::string name;
    dtype from, to;
    uint64_t n_elems = 0;
    double rms_input = 0;  // sqrt(mean(x^2)) of the input values
    double rms_error = 0;  // sqrt(mean((q(x) - x)^2)): 0 when the tensor is copied exactly
};

struct quantize_result {
    std::vector<quantized_tensor> tensors;  // file order
    uint64_t in_bytes = 0, out_bytes = 0;
};

quantize_result quantize_model(const std::string& in_path, const std::string& out_path, const quantize_options& o);

}  // namespace memtile
