#include "gguf/gguf-writer.h"

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf-file.h"

namespace memtile {

gguf_writer::~gguf_writer() {
    if (out_) std::fclose(out_);
}

void gguf_writer::set(const std::string& key, gguf_value v) {
    if (key == "general.alignment") {
        const uint64_t al = v.as_u64();
        if (al == 0 || (al & (al - 1)) != 0) fail("gguf", "general.alignment {} is not a power of two", al);
        alignment_ = static_cast<uint32_t>(al);
        v = gguf_value::u32(alignment_);
    }
    for (auto& kv : kv_)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void gguf_writer::add_tensor(const std::string& name, dtype type, std::vector<uint64_t> dims) {
    if (out_) fail("gguf", "add_tensor('{}') after begin()", name);
    if (dims.empty() || dims.size() > k_gguf_max_dims) fail("gguf", "tensor '{}': {} dimensions", name, dims.size());
    for (const auto& t : tensors_)
        if (t.name == name) fail("gguf", "duplicate tensor '{}'", name);
    const auto& tr = traits(type);
    if (dims[0] % tr.block_elems != 0)
        fail("gguf", "tensor '{}': row length {} is not a multiple of the {} block size {}", name, dims[0], tr.name,
             tr.block_elems);
    uint64_t n = 1;
    for (auto d : dims) n *= d;
    tensors_.push_back({name, type, std::move(dims), row_bytes(type, n), 0});
}

uint64_t gguf_writer::tensor_bytes(size_t i) const {
    return tensors_.at(i).n_bytes;
}

void gguf_writer::put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out_) != n) fail("gguf", "write to '{}' failed: {}", path_, std::strerror(errno));
    written_ += n;
}

void gguf_writer::put_string(const std::string& s) {
    const uint64_t n = s.size();
    put(&n, 8);
    put(s.data(), s.size());
}

void gguf_writer::put_value(const gguf_value& v) {
    switch (v.type()) {
        case gguf_type::u8: {
            const uint8_t x = uint8_t(v.as_u64());
            put(&x, 1);
            break;
        }
        case gguf_type::i8: {
            const int8_t x = int8_t(v.as_i64());
            put(&x, 1);
            break;
        }
        case gguf_type::u16: {
            const uint16_t x = uint16_t(v.as_u64());
            put(&x, 2);
            break;
        }
        case gguf_type::i16: {
            const int16_t x = int16_t(v.as_i64());
            put(&x, 2);
            break;
        }
        case gguf_type::u32: {
            const uint32_t x = uint32_t(v.as_u64());
            put(&x, 4);
            break;
        }
        case gguf_type::i32: {
            const int32_t x = int32_t(v.as_i64());
            put(&x, 4);
            break;
        }
        case gguf_type::u64: {
            const uint64_t x = v.as_u64();
            put(&x, 8);
            break;
        }
        case gguf_type::i64: {
            const int64_t x = v.as_i64();
            put(&x, 8);
            break;
        }
        case gguf_type::f32: {
            const float x = float(v.as_f64());
            put(&x, 4);
            break;
        }
        case gguf_type::f64: {
            const double x = v.as_f64();
            put(&x, 8);
            break;
        }
        case gguf_type::boolean: {
            const uint8_t x = v.as_bool() ? 1 : 0;
            put(&x, 1);
            break;
        }
        case gguf_type::string: put_string(v.as_string()); break;
        case gguf_type::array: {
            const uint32_t et = static_cast<uint32_t>(v.elem_type());
            const uint64_t n = v.array_size();
            put(&et, 4);
            put(&n, 8);
            if (v.elem_type() == gguf_type::array) {
                for (size_t i = 0; i < n; i++) put_value(v.at(i));
            } else {
                const auto bytes = v.encoded_elements();  // already the file's encoding
                put(bytes.data(), bytes.size());
            }
            break;
        }
    }
}

void gguf_writer::pad() {
    static const uint8_t zeros[256] = {};
    uint64_t n = (alignment_ - written_ % alignment_) % alignment_;
    while (n) {
        const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
        put(zeros, k);
        n -= k;
    }
}

void gguf_writer::begin(const std::string& path) {
    if (out_) fail("gguf", "begin() called twice");
    path_ = path;
    out_ = std::fopen(path.c_str(), "wb");
    if (!out_) fail("gguf", "cannot create '{}': {}", path, std::strerror(errno));
    std::setvbuf(out_, nullptr, _IOFBF, 1 << 20);
    written_ = 0;
    next_tensor_ = 0;
    current_bytes_ = 0;

    uint64_t off = 0;
    for (auto& t : tensors_) {
        t.offset = off;
        off += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
    }
    const uint32_t magic = k_gguf_magic, version = 3;
    const uint64_t n_tensors = tensors_.size(), n_kv = kv_.size();
    put(&magic, 4);
    put(&version, 4);
    put(&n_tensors, 8);
    put(&n_kv, 8);
    for (const auto& [key, v] : kv_) {
        put_string(key);
        const uint32_t t = static_cast<uint32_t>(v.type());
        put(&t, 4);
        put_value(v);
    }
    for (const auto& t : tensors_) {
        put_string(t.name);
        const uint32_t nd = static_cast<uint32_t>(t.dims.size());
        put(&nd, 4);
        for (auto d : t.dims) put(&d, 8);
        const uint32_t ty = static_cast<uint32_t>(t.type);
        put(&ty, 4);
        put(&t.offset, 8);
    }
    pad();
}

void gguf_writer::write_tensor_data(std::span<const uint8_t> bytes) {
    if (!out_) fail("gguf", "write_tensor_data before begin()");
    while (!bytes.empty()) {
        if (next_tensor_ >= tensors_.size()) fail("gguf", "'{}': more tensor data than tensors declared", path_);
        const auto& t = tensors_[next_tensor_];
        const uint64_t k = std::min<uint64_t>(bytes.size(), t.n_bytes - current_bytes_);
        put(bytes.data(), k);
        bytes = bytes.subspan(k);
        current_bytes_ += k;
        if (current_bytes_ == t.n_bytes) {
            pad();
            next_tensor_++;
            current_bytes_ = 0;
        }
    }
}

void gguf_writer::finish() {
    if (!out_) fail("gguf", "finish() before begin()");
    while (next_tensor_ < tensors_.size() && tensors_[next_tensor_].n_bytes == 0) next_tensor_++;
    if (next_tensor_ != tensors_.size())
        fail("gguf", "'{}': {} of {} tensors written", path_, next_tensor_, tensors_.size());
    const bool ok = std::fflush(out_) == 0;
    std::fclose(out_);
    out_ = nullptr;
    if (!ok) fail("gguf", "flushing '{}' failed: {}", path_, std::strerror(errno));
}

void gguf_writer::write_file(const std::string& path, const std::vector<std::span<const uint8_t>>& data) {
    if (data.size() != tensors_.size()) fail("gguf", "{} data buffers for {} tensors", data.size(), tensors_.size());
    begin(path);
    for (size_t i = 0; i < data.size(); i++) {
        if (data[i].size() != tensors_[i].n_bytes)
            fail("gguf", "tensor '{}': {} bytes given, {} expected", tensors_[i].name, data[i].size(),
                 tensors_[i].n_bytes);
        write_tensor_data(data[i]);
    }
    finish();
}

}  // namespace memtile
