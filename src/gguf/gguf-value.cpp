#include "gguf/gguf-value.h"

#include <bit>
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

gguf_value gguf_value::array(gguf_type elem_type, std::vector<gguf_value> items) {
    for (const auto& it : items)
        if (it.type_ != elem_type)
            fail("gguf", "array of {} holds an element of type {}", gguf_type_name(elem_type),
                 gguf_type_name(it.type_));
    gguf_value v;
    v.type_ = gguf_type::array;
    v.elem_type_ = elem_type;
    v.items_ = std::move(items);
    return v;
}

gguf_value gguf_value::string_array(const std::vector<std::string>& items) {
    std::vector<gguf_value> v;
    v.reserve(items.size());
    for (const auto& s : items) v.push_back(string(s));
    return array(gguf_type::string, std::move(v));
}

gguf_value gguf_value::f32_array(const std::vector<float>& items) {
    std::vector<gguf_value> v;
    v.reserve(items.size());
    for (float x : items) v.push_back(f32(x));
    return array(gguf_type::f32, std::move(v));
}

gguf_value gguf_value::i32_array(const std::vector<int32_t>& items) {
    std::vector<gguf_value> v;
    v.reserve(items.size());
    for (int32_t x : items) v.push_back(i32(x));
    return array(gguf_type::i32, std::move(v));
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

const std::vector<gguf_value>& gguf_value::as_array() const {
    if (type_ != gguf_type::array) fail("gguf", "expected an array, found {}", gguf_type_name(type_));
    return items_;
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
            std::string out = fmt::format("[{} x {}]", items_.size(), gguf_type_name(elem_type_));
            if (max_items == 0) return out;
            out += " [";
            for (size_t i = 0; i < items_.size() && i < max_items; i++)
                out += (i ? ", " : "") + items_[i].to_display(max_items / 2);
            if (items_.size() > max_items) out += ", ...";
            return out + "]";
        }
        default: return is_signed(type_) ? fmt::format("{}", static_cast<int64_t>(bits_)) : fmt::format("{}", bits_);
    }
}

}  // namespace memtile
