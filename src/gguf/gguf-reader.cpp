#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf-file.h"

namespace memtile {

// Sequential, bounds-checked reader over the file bytes. `what` names the field for error messages.
class gguf_parser {
public:
    explicit gguf_parser(std::shared_ptr<const mapped_file> f)
        : f_(*f), data_(f->data()), size_(f->size()), owner_(std::move(f)) {}

    [[noreturn]] void error_at(uint64_t offset, const std::string& msg) const {
        fail("gguf", "{}: offset {}: {}", f_.path(), offset, msg);
    }
    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    template <typename T>
    T read(const char* what) {
        if (remaining() < sizeof(T))
            error_at(pos_, fmt::format("file truncated while reading {} ({} bytes needed, {} left)", what, sizeof(T),
                                       remaining()));
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const std::string& what) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(what.c_str());
        if (len > remaining())
            error_at(at,
                     fmt::format("{}: string length {} exceeds the {} bytes left in the file", what, len, remaining()));
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

    // Checks and steps over one string (u64 length, bytes) without copying it.
    void skip_string(const std::string& what) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(what.c_str());
        if (len > remaining())
            error_at(at,
                     fmt::format("{}: string length {} exceeds the {} bytes left in the file", what, len, remaining()));
        pos_ += len;
    }

    gguf_value read_value(gguf_type t, const std::string& what, int depth) {
        switch (t) {
            case gguf_type::u8: return gguf_value::u8(read<uint8_t>(what.c_str()));
            case gguf_type::i8: return gguf_value::i8(read<int8_t>(what.c_str()));
            case gguf_type::u16: return gguf_value::u16(read<uint16_t>(what.c_str()));
            case gguf_type::i16: return gguf_value::i16(read<int16_t>(what.c_str()));
            case gguf_type::u32: return gguf_value::u32(read<uint32_t>(what.c_str()));
            case gguf_type::i32: return gguf_value::i32(read<int32_t>(what.c_str()));
            case gguf_type::f32: return gguf_value::f32(read<float>(what.c_str()));
            case gguf_type::u64: return gguf_value::u64(read<uint64_t>(what.c_str()));
            case gguf_type::i64: return gguf_value::i64(read<int64_t>(what.c_str()));
            case gguf_type::f64: return gguf_value::f64(read<double>(what.c_str()));
            case gguf_type::boolean: {
                const uint64_t at = pos_;
                const uint8_t b = read<uint8_t>(what.c_str());
                if (b > 1) error_at(at, fmt::format("{}: bool value {} is neither 0 nor 1", what, b));
                return gguf_value::boolean(b != 0);
            }
            case gguf_type::string: return gguf_value::string(read_string(what));
            case gguf_type::array: return read_array(what, depth);
        }
        error_at(pos_, fmt::format("{}: invalid value type", what));
    }

    gguf_value read_array(const std::string& what, int depth) {
        const uint64_t at = pos_;
        if (depth >= 8) error_at(at, fmt::format("{}: arrays nested deeper than 8 levels", what));
        const uint32_t raw = read<uint32_t>("array element type");
        if (!gguf_type_valid(raw)) error_at(at, fmt::format("{}: invalid array element type {}", what, raw));
        const auto et = static_cast<gguf_type>(raw);
        const uint64_t count_at = pos_;
        const uint64_t count = read<uint64_t>("array length");
        // The smallest encoding of one element bounds how many can fit in what is left.
        uint64_t min_size = gguf_scalar_size(et);
        if (et == gguf_type::string) min_size = 8;
        if (et == gguf_type::array) min_size = 12;
        // Besides the bytes left, cap the element count: no real model has arrays beyond a few million entries
        // (vocabularies, merges).
        constexpr uint64_t k_max_items = uint64_t(1) << 24;
        if (count > k_max_items)
            error_at(count_at,
                     fmt::format("{}: array of {} elements exceeds the limit of {}", what, count, k_max_items));
        if (count > remaining() / min_size)
            error_at(count_at, fmt::format("{}: array of {} {} elements cannot fit in the {} bytes left", what, count,
                                           gguf_type_name(et), remaining()));
        gguf_value v;
        v.type_ = gguf_type::array;
        v.elem_type_ = et;
        v.count_ = count;
        if (et == gguf_type::array) {
            v.items_.reserve(static_cast<size_t>(count));
            for (uint64_t i = 0; i < count; i++) v.items_.push_back(read_value(et, what, depth + 1));
            return v;
        }
        // Scalars and strings stay in the mapping; the value views them (and keeps the mapping alive).
        const uint64_t start = pos_;
        v.raw_ = data_ + start;
        v.owner_ = owner_;
        if (et == gguf_type::string) {
            v.offs_.resize(static_cast<size_t>(count) + 1);
            for (uint64_t i = 0; i < count; i++) {
                if (pos_ - start > 0xFFFFFFFFull)
                    error_at(pos_, fmt::format("{}: the array's strings span more than 4 GiB", what));
                v.offs_[i] = static_cast<uint32_t>(pos_ - start);
                skip_string(what);
            }
            if (pos_ - start > 0xFFFFFFFFull)
                error_at(pos_, fmt::format("{}: the array's strings span more than 4 GiB", what));
            v.offs_[count] = static_cast<uint32_t>(pos_ - start);
            return v;
        }
        if (et == gguf_type::boolean)
            for (uint64_t i = 0; i < count; i++)
                if (data_[pos_ + i] > 1)
                    error_at(pos_ + i, fmt::format("{}: bool value {} is neither 0 nor 1", what, data_[pos_ + i]));
        pos_ += count * gguf_scalar_size(et);  // fits: count <= remaining() / size
        return v;
    }

    void parse_into(gguf_file& g) {
        const uint32_t magic = read<uint32_t>("magic");
        if (magic != k_gguf_magic)
            error_at(0,
                     fmt::format("not a GGUF file (magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", magic, k_gguf_magic));
        g.version_ = read<uint32_t>("version");
        if (g.version_ == 1) error_at(4, "GGUF version 1 is not supported (convert the file with a newer tool)");
        if (g.version_ != 2 && g.version_ != 3)
            error_at(4, fmt::format("unsupported GGUF version {} (supported: 2, 3)", g.version_));
        const uint64_t nt_at = pos_;
        const uint64_t n_tensors = read<uint64_t>("tensor count");
        const uint64_t nkv_at = pos_;
        const uint64_t n_kv = read<uint64_t>("metadata count");
        // Each key/value takes at least 12 bytes (key length + type), each tensor info at least 24.
        if (n_kv > remaining() / 12)
            error_at(nkv_at, fmt::format("metadata count {} cannot fit in the {} bytes left", n_kv, remaining()));
        if (n_tensors > remaining() / 24)
            error_at(nt_at, fmt::format("tensor count {} cannot fit in the {} bytes left", n_tensors, remaining()));

        g.kv_.reserve(static_cast<size_t>(n_kv));
        for (uint64_t i = 0; i < n_kv; i++) {
            const uint64_t key_at = pos_;
            std::string key = read_string(fmt::format("key of metadata #{}", i));
            if (g.kv_index_.count(key)) error_at(key_at, fmt::format("duplicate metadata key '{}'", key));
            const uint64_t type_at = pos_;
            const uint32_t raw = read<uint32_t>("metadata value type");
            if (!gguf_type_valid(raw)) error_at(type_at, fmt::format("metadata '{}': invalid value type {}", key, raw));
            gguf_value v = read_value(static_cast<gguf_type>(raw), fmt::format("metadata '{}'", key), 0);
            g.kv_index_.emplace(key, g.kv_.size());
            g.kv_.emplace_back(std::move(key), std::move(v));
        }

        if (const gguf_value* a = g.find("general.alignment")) {
            if (a->type() != gguf_type::u32)
                error_at(nkv_at, fmt::format("general.alignment has type {}, expected u32", gguf_type_name(a->type())));
            const uint64_t al = a->as_u64();
            if (al == 0 || (al & (al - 1)) != 0)
                error_at(nkv_at, fmt::format("general.alignment {} is not a power of two", al));
            g.alignment_ = static_cast<uint32_t>(al);
        }

        g.tensors_.reserve(static_cast<size_t>(n_tensors));
        for (uint64_t i = 0; i < n_tensors; i++) {
            const uint64_t info_at = pos_;
            gguf_tensor_info t;
            t.name = read_string(fmt::format("name of tensor #{}", i));
            const std::string label = fmt::format("tensor '{}'", t.name);
            if (g.tensor_index_.count(t.name)) error_at(info_at, fmt::format("duplicate {}", label));
            const uint64_t nd_at = pos_;
            const uint32_t n_dims = read<uint32_t>("tensor dimension count");
            if (n_dims == 0 || n_dims > k_gguf_max_dims)
                error_at(nd_at, fmt::format("{}: {} dimensions (1..{} allowed)", label, n_dims, k_gguf_max_dims));
            t.n_elems = 1;
            for (uint32_t d = 0; d < n_dims; d++) {
                const uint64_t dim_at = pos_;
                const uint64_t n = read<uint64_t>("tensor dimension");
                if (n == 0 || n > uint64_t(std::numeric_limits<int64_t>::max()) / t.n_elems)
                    error_at(dim_at, fmt::format("{}: dimension {} = {} is zero or overflows", label, d, n));
                t.dims.push_back(n);
                t.n_elems *= n;
            }
            const uint64_t type_at = pos_;
            const uint32_t raw_type = read<uint32_t>("tensor type");
            const dtype_traits* tr = find_dtype(raw_type);
            if (!tr) error_at(type_at, fmt::format("{}: unknown tensor type {}", label, raw_type));
            t.type = tr->type;
            if (t.dims[0] % tr->block_elems != 0)
                error_at(nd_at, fmt::format("{}: row length {} is not a multiple of the {} block size {}", label,
                                            t.dims[0], tr->name, tr->block_elems));
            if (t.n_elems / tr->block_elems > std::numeric_limits<uint64_t>::max() / tr->block_bytes)
                error_at(nd_at, fmt::format("{}: byte size overflows", label));
            t.n_bytes = t.n_elems / tr->block_elems * tr->block_bytes;
            const uint64_t off_at = pos_;
            t.offset = read<uint64_t>("tensor data offset");
            if (t.offset % g.alignment_ != 0)
                error_at(off_at, fmt::format("{}: data offset {} is not a multiple of the alignment {}", label,
                                             t.offset, g.alignment_));
            g.tensor_index_.emplace(t.name, g.tensors_.size());
            g.tensors_.push_back(std::move(t));
        }

        const uint64_t al = g.alignment_;
        g.data_offset_ = (pos_ + al - 1) / al * al;
        if (!g.tensors_.empty() && g.data_offset_ > size_)
            error_at(pos_, fmt::format("data section starts at {}, past the end of the file ({} bytes)", g.data_offset_,
                                       size_));
        const uint64_t data_size = size_ >= g.data_offset_ ? size_ - g.data_offset_ : 0;
        for (auto& t : g.tensors_) {
            if (t.offset > data_size || t.n_bytes > data_size - t.offset)
                error_at(g.data_offset_ + std::min(t.offset, data_size),
                         fmt::format("tensor '{}' ({} bytes at data offset {}) extends past end of file", t.name,
                                     t.n_bytes, t.offset));
            t.data = data_ + g.data_offset_ + t.offset;
        }
    }

private:
    const mapped_file& f_;
    const uint8_t* data_;
    uint64_t size_;
    std::shared_ptr<const mapped_file> owner_;  // what array values view
    uint64_t pos_ = 0;
};

std::shared_ptr<gguf_file> gguf_file::open(const std::string& path, const load_options& opts) {
    return parse(mapped_file::open(path, opts));
}

std::shared_ptr<gguf_file> gguf_file::parse(std::shared_ptr<mapped_file> file) {
    std::shared_ptr<gguf_file> g(new gguf_file());
    g->file_ = std::move(file);
    gguf_parser p(g->file_);
    p.parse_into(*g);
    return g;
}

const gguf_value* gguf_file::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const gguf_value& gguf_file::require(const std::string& key) const {
    const gguf_value* v = find(key);
    if (!v) fail("gguf", "{}: required metadata key '{}' is missing", path(), key);
    return *v;
}

template <typename F>
static auto with_key(const gguf_file& g, const std::string& key, F&& f) {
    try {
        return f();
    } catch (const error& e) {
        fail("gguf", "{}: metadata '{}': {}", g.path(), key, e.what());
    }
}

std::string gguf_file::get_string(const std::string& key, const std::string& def) const {
    const gguf_value* v = find(key);
    return v ? with_key(*this, key, [&] { return v->as_string(); }) : def;
}

uint64_t gguf_file::get_u64(const std::string& key, uint64_t def) const {
    const gguf_value* v = find(key);
    return v ? with_key(*this, key, [&] { return v->as_u64(); }) : def;
}

double gguf_file::get_f64(const std::string& key, double def) const {
    const gguf_value* v = find(key);
    return v ? with_key(*this, key, [&] { return v->as_f64(); }) : def;
}

bool gguf_file::get_bool(const std::string& key, bool def) const {
    const gguf_value* v = find(key);
    return v ? with_key(*this, key, [&] { return v->as_bool(); }) : def;
}

const gguf_tensor_info* gguf_file::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace memtile
