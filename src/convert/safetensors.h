// Reader for Hugging Face safetensors checkpoints: one file, or shards listed by model.safetensors.index.json.
//
// File layout: u64 little-endian header length N, then N bytes of JSON mapping tensor names to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the first byte after the header), then
// the data. Files are memory-mapped; the header is treated as hostile: every offset, size and shape is checked
// against the file before a tensor is exposed, and errors name the file, the tensor and the offending value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped-file.h"

namespace memtile {

enum class st_dtype { f32, f16, bf16, other };

struct st_tensor {
    std::string name;
    st_dtype type = st_dtype::other;
    std::string dtype_name;       // as written in the header, e.g. "BF16", "I64"
    std::vector<uint64_t> shape;  // PyTorch order: shape.back() is the contiguous dimension
    uint64_t n_elems = 0;
    const uint8_t* data = nullptr;  // into the mapped file
    uint64_t n_bytes = 0;
    std::string file;  // the shard holding it, for error messages

    // Converts elements [first, first + n) to f32; throws for dtypes other than F32/F16/BF16, naming the tensor.
    void to_f32(uint64_t first, uint64_t n, float* dst) const;
};

class safetensors_file {
public:
    static std::shared_ptr<safetensors_file> open(const std::string& path);
    // Parses an in-memory (or already mapped) file; `file` stays referenced by the result.
    static std::shared_ptr<safetensors_file> parse(std::shared_ptr<mapped_file> file);

    const std::vector<st_tensor>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"

private:
    std::shared_ptr<mapped_file> file_;
    std::vector<st_tensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint folder: model.safetensors.index.json (its weight_map names the shard of every
// tensor; each listed tensor must be in that shard), else model.safetensors, else every *.safetensors file.
class safetensors_set {
public:
    static safetensors_set open_dir(const std::string& dir);

    const st_tensor* find(const std::string& name) const;
    const st_tensor& require(const std::string& name) const;  // error names the checkpoint and tensor
    std::vector<std::string> names() const;                   // sorted
    const std::string& dir() const { return dir_; }

private:
    std::string dir_;
    std::vector<std::shared_ptr<safetensors_file>> files_;
    std::map<std::string, const st_tensor*> index_;
};

}  // namespace memtile
