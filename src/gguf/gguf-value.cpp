#include "gguf/gguf-value.h"

#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace memtile {

std::string_view gguf_type_name(gguf_type t) {
    static constexpr std::string_view names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                 "bool", "string", "array", "u64", "i64", "f64"};
    const auto i = static_cast<uint32_t>(t);
    return i < std::size(names) ? names[i] : "invalid";
}

bool gguf_type_valid(uint32_t raw) {
    return raw <= static_cast<uint32_t>(gguf_type::f64);
}

uint32_t gguf_scalar_size(gguf_type t) {
    switch (t) {
        case gguf_type::u8:
        case gguf_type::i8:
        case gguf_type::boolean: return 1;
        case gguf_type::u16:
        case gguf_type::i16: return 2;
        case gguf_type::u32:
        case gguf_type::i32:
        case gguf_type::f32: return 4;
        case gguf_type::u64:
        case gguf_type::i64:
        case gguf_type::f64: return 8;
        case gguf_type::string:
        case gguf_type::array: return 0;
    }
    return 0;
}

gguf_value gguf_value::scalar(gguf_type t, uint64_t bits) {
    gguf_value v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
}

gguf_value gguf_value::signed_scalar(gguf_type t, int64_t x) {
    return scalar(t, static_cast<uint64_t>(x));
}

gguf_value gguf_value::f32(float x) {
    return scalar(gguf_type::f32, std::bit_cast<uint64_t>(double(x)));
}
gguf_value gguf_value::f64(double x) {
    return scalar(gguf_type::f64, std::bit_cast<uint64_t>(x));
}

gguf_value gguf_value::string(std::string s) {
    gguf_value v;
    v.type_ = gguf_type::string;
    v.str_ = std::move(s);
    return v;
}

gguf_value gguf_value::owned_array(gguf_type elem_type, uint64_t count, std::vector<uint8_t> bytes) {
    auto buf = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    gguf_value v;
    v.type_ = gguf_type::array;
    v.elem_type_ = elem_type;
    v.count_ = count;
    v.raw_ = buf->data();
    v.owner_ = std::move(buf);
    if (elem_type == gguf_type::string) v.index_strings();
    return v;
}

void gguf_value::index_strings() {
    offs_.resize(count_ + 1);
    uint64_t at = 0;
    for (uint64_t i = 0; i < count_; i++) {
        if (at > 0xFFFFFFFFull) fail("gguf", "the strings of an array span more than 4 GiB");
        offs_[i] = static_cast<uint32_t>(at);
        uint64_t len;
        std::memcpy(&len, raw_ + at, 8);
        at += 8 + len;
    }
    if (at > 0xFFFFFFFFull) fail("gguf", "the strings of an array span more than 4 GiB");
    offs_[count_] = static_cast<uint32_t>(at);
}

namespace {

void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}

void append_string(std::vector<uint8_t>& out, std::string_view s) {
    const uint64_t len = s.size();
    append_bytes(out, &len, 8);
    append_bytes(out, s.data(), s.size());
}

}  // namespace

gguf_value gguf_value::array(gguf_type elem_type, std::vector<gguf_value> items) {
    for (const auto& it : items)
        if (it.type_ != elem_type)
            fail("gguf", "array of {} holds an element of type {}", gguf_type_name(elem_type),
                 gguf_type_name(it.type_));
    if (elem_type == gguf_type::array) {
        gguf_value v;
        v.type_ = gguf_type::array;
        v.elem_type_ = elem_type;
        v.count_ = items.size();
        v.items_ = std::move(items);
        return v;
    }
    std::vector<uint8_t> bytes;
    const uint32_t size = gguf_scalar_size(elem_type);
    bytes.reserve(size ? items.size() * size : 0);
    for (const auto& it : items) {
        if (elem_type == gguf_type::string) {
            append_string(bytes, it.str_);
        } else if (it.type_ == gguf_type::f32) {
            const float x = float(std::bit_cast<double>(it.bits_));
            append_bytes(bytes, &x, 4);
        } else {
            // Integers (two's complement), bool and f64: the low `size` bytes of bits_, little-endian as GGUF.
            append_bytes(bytes, &it.bits_, size);
        }
    }
    return owned_array(elem_type, items.size(), std::move(bytes));
}

gguf_value gguf_value::string_array(const std::vector<std::string>& items) {
    std::vector<uint8_t> bytes;
    size_t n = 0;
    for (const auto& s : items) n += 8 + s.size();
    bytes.reserve(n);
    for (const auto& s : items) append_string(bytes, s);
    return owned_array(gguf_type::string, items.size(), std::move(bytes));
}

gguf_value gguf_value::f32_array(const std::vector<float>& items) {
    std::vector<uint8_t> bytes(items.size() * 4);
    if (!items.empty()) std::memcpy(bytes.data(), items.data(), bytes.size());
    return owned_array(gguf_type::f32, items.size(), std::move(bytes));
}

gguf_value gguf_value::i32_array(const std::vector<int32_t>& items) {
    std::vector<uint8_t> bytes(items.size() * 4);
    if (!items.empty()) std::memcpy(bytes.data(), items.data(), bytes.size());
    return owned_array(gguf_type::i32, items.size(), std::move(bytes));
}

bool gguf_value::is_integer() const {
    switch (type_) {
        case gguf_type::u8:
        case gguf_type::i8:
        case gguf_type::u16:
        case gguf_type::i16:
        case gguf_type::u32:
        case gguf_type::i32:
        case gguf_type::u64:
        case gguf_type::i64: return true;
        default: return false;
    }
}

static bool is_signed(gguf_type t) {
    return t == gguf_type::i8 || t == gguf_type::i16 || t == gguf_type::i32 || t == gguf_type::i64;
}

uint64_t gguf_value::as_u64() const {
    if (type_ == gguf_type::boolean) return bits_;
    if (!is_integer()) fail("gguf", "expected an integer, found {}", gguf_type_name(type_));
    if (is_signed(type_) && static_cast<int64_t>(bits_) < 0)
        fail("gguf", "expected a non-negative integer, found {}", static_cast<int64_t>(bits_));
    return bits_;
}

int64_t gguf_value::as_i64() const {
    if (type_ == gguf_type::boolean) return static_cast<int64_t>(bits_);
    if (!is_integer()) fail("gguf", "expected an integer, found {}", gguf_type_name(type_));
    if (!is_signed(type_) && bits_ > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("gguf", "integer {} does not fit in int64", bits_);
    return static_cast<int64_t>(bits_);
}

double gguf_value::as_f64() const {
    if (is_float()) return std::bit_cast<double>(bits_);
    if (is_integer()) return is_signed(type_) ? double(static_cast<int64_t>(bits_)) : double(bits_);
    fail("gguf", "expected a number, found {}", gguf_type_name(type_));
}

bool gguf_value::as_bool() const {
    if (type_ == gguf_type::boolean || is_integer()) return bits_ != 0;
    fail("gguf", "expected a bool, found {}", gguf_type_name(type_));
}

const std::string& gguf_value::as_string() const {
    if (type_ != gguf_type::string) fail("gguf", "expected a string, found {}", gguf_type_name(type_));
    return str_;
}

size_t gguf_value::array_size() const {
    if (type_ != gguf_type::array) fail("gguf", "expected an array, found {}", gguf_type_name(type_));
    return static_cast<size_t>(count_);
}

void gguf_value::check_index(size_t i) const {
    if (i >= array_size()) fail("gguf", "array index {} is out of range ({} elements)", i, count_);
}

gguf_value gguf_value::at(size_t i) const {
    check_index(i);
    switch (elem_type_) {
        case gguf_type::string: return string(std::string(string_at(i)));
        case gguf_type::array: return items_[i];
        default: break;
    }
    const uint32_t size = gguf_scalar_size(elem_type_);
    const uint8_t* p = raw_ + i * size;
    uint64_t bits = 0;
    std::memcpy(&bits, p, size);  // little-endian: the low bytes
    switch (elem_type_) {
        case gguf_type::i8: return i8(static_cast<int8_t>(bits));
        case gguf_type::i16: return i16(static_cast<int16_t>(bits));
        case gguf_type::i32: return i32(static_cast<int32_t>(bits));
        case gguf_type::f32: return f32(std::bit_cast<float>(static_cast<uint32_t>(bits)));
        case gguf_type::f64: return f64(std::bit_cast<double>(bits));
        default: return scalar(elem_type_, bits);  // unsigned integers and bool
    }
}

std::string_view gguf_value::string_at(size_t i) const {
    check_index(i);
    if (elem_type_ != gguf_type::string)
        fail("gguf", "expected an array of strings, found an array of {}", gguf_type_name(elem_type_));
    const uint32_t a = offs_[i] + 8, b = offs_[i + 1];
    return {reinterpret_cast<const char*>(raw_ + a), b - a};
}

double gguf_value::f64_at(size_t i) const {
    return at(i).as_f64();
}

int64_t gguf_value::i64_at(size_t i) const {
    return at(i).as_i64();
}

std::span<const uint8_t> gguf_value::encoded_elements() const {
    if (type_ != gguf_type::array) fail("gguf", "expected an array, found {}", gguf_type_name(type_));
    if (elem_type_ == gguf_type::array) return {};
    if (elem_type_ == gguf_type::string) return {raw_, offs_[count_]};
    return {raw_, static_cast<size_t>(count_) * gguf_scalar_size(elem_type_)};
}

bool gguf_value::operator==(const gguf_value& o) const {
    if (type_ != o.type_ || bits_ != o.bits_ || str_ != o.str_) return false;
    if (type_ != gguf_type::array) return true;
    if (elem_type_ != o.elem_type_ || count_ != o.count_) return false;
    if (elem_type_ == gguf_type::array) return items_ == o.items_;
    // One encoding per element sequence (a string's length precedes it), so equal bytes = equal elements.
    const auto a = encoded_elements(), b = o.encoded_elements();
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

std::string gguf_value::to_display(size_t max_items) const {
    switch (type_) {
        case gguf_type::string: {
            std::string s = str_.size() > 120 ? str_.substr(0, 117) + "..." : str_;
            for (auto& c : s)
                if (c == '\n') c = ' ';
            return fmt::format("\"{}\"", s);
        }
        case gguf_type::boolean: return bits_ ? "true" : "false";
        case gguf_type::f32:
        case gguf_type::f64: return fmt::format("{:g}", as_f64());
        case gguf_type::array: {
            std::string out = fmt::format("[{} x {}]", count_, gguf_type_name(elem_type_));
            if (max_items == 0) return out;
            out += " [";
            for (size_t i = 0; i < count_ && i < max_items; i++)
                out += (i ? ", " : "") + at(i).to_display(max_items / 2);
            if (count_ > max_items) out += ", ...";
            return out + "]";
        }
        default: return is_signed(type_) ? fmt::format("{}", static_cast<int64_t>(bits_)) : fmt::format("{}", bits_);
    }
}

}  // namespace memtile
