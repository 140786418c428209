// GGUF v3 writer with llama.cpp's layout rules: metadata, tensor infos, padding to general.alignment, then
// tensor data in declaration order, each tensor padded to the alignment. Tensor data is streamed: the
// header is written first and each tensor's bytes are appended as they are produced.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf/gguf-value.h"

namespace memtile {

class gguf_writer {
public:
    explicit gguf_writer(uint32_t alignment = 32) : alignment_(alignment) {}
    ~gguf_writer();

    void set(const std::string& key, gguf_value v);  // replaces an existing key, keeps its position
    void add_tensor(const std::string& name, dtype type, std::vector<uint64_t> dims);  // dims in ggml order

    // Writes everything before the tensor data. Then write_tensor_data streams the tensors' bytes in the
    // order they were added, in chunks of any size (a chunk may span tensors), and finish() checks that
    // every declared byte was written.
    void begin(const std::string& path);
    void write_tensor_data(std::span<const uint8_t> bytes);
    void finish();

    // Convenience: in-memory tensors, all at once.
    void write_file(const std::string& path, const std::vector<std::span<const uint8_t>>& data);

    uint64_t tensor_bytes(size_t i) const;
    size_t tensor_count() const { return tensors_.size(); }

private:
    struct tensor {
        std::string name;
        dtype type;
        std::vector<uint64_t> dims;
        uint64_t n_bytes;
        uint64_t offset;
    };
    void put(const void* p, size_t n);
    void put_string(const std::string& s);
    void put_value(const gguf_value& v);
    void pad();

    uint32_t alignment_;
    std::vector<std::pair<std::string, gguf_value>> kv_;
    std::vector<tensor> tensors_;
    std::FILE* out_ = nullptr;
    std::string path_;
    uint64_t written_ = 0;
    size_t next_tensor_ = 0;
    uint64_t current_bytes_ = 0;  // bytes of tensors_[next_tensor_] written so far
};

}  // namespace memtile
