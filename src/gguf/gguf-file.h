// GGUF reader (versions 2 and 3). Every count, size, string length and offset is validated against the
// bytes that remain before it is used, so a truncated or hostile file yields a memtile::error naming the
// file, the field and its offset, and no allocation is larger than the file justifies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped-file.h"
#include "gguf/gguf-value.h"

namespace memtile {

inline constexpr uint32_t k_gguf_magic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t k_gguf_default_alignment = 32;
inline constexpr uint32_t k_gguf_max_dims = 4;

struct gguf_tensor_info {
    std::string name;
    dtype type = dtype::f32;
    std::vector<uint64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
    uint64_t offset = 0;         // relative to the start of the data section
    uint64_t n_elems = 0;
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;  // into the mapped file

    uint64_t n_rows() const { return dims.empty() ? 0 : n_elems / dims[0]; }
    uint64_t row_size() const { return dims.empty() ? 0 : row_bytes(type, dims[0]); }
};

class gguf_file {
public:
    static std::shared_ptr<gguf_file> open(const std::string& path, const load_options& opts = {});
    static std::shared_ptr<gguf_file> parse(std::shared_ptr<mapped_file> file);

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    const std::string& path() const { return file_->path(); }
    const mapped_file& file() const { return *file_; }

    const std::vector<std::pair<std::string, gguf_value>>& metadata() const { return kv_; }
    const gguf_value* find(const std::string& key) const;
    bool has(const std::string& key) const { return find(key) != nullptr; }

    // Typed getters: missing key → default (or error for the `require_` forms); wrong type → error naming
    // the key.
    std::string get_string(const std::string& key, const std::string& def = {}) const;
    uint64_t get_u64(const std::string& key, uint64_t def) const;
    double get_f64(const std::string& key, double def) const;
    bool get_bool(const std::string& key, bool def) const;
    const gguf_value& require(const std::string& key) const;

    const std::vector<gguf_tensor_info>& tensors() const { return tensors_; }
    const gguf_tensor_info* find_tensor(const std::string& name) const;

private:
    gguf_file() = default;
    std::shared_ptr<mapped_file> file_;
    uint32_t version_ = 0;
    uint32_t alignment_ = k_gguf_default_alignment;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, gguf_value>> kv_;
    std::map<std::string, size_t, std::less<>> kv_index_;
    std::vector<gguf_tensor_info> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;

    friend class gguf_parser;
};

}  // namespace memtile
