// GGUF metadata values: the 13 GGUF value types, arrays of any of them (arrays may nest).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtile {

enum class gguf_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

std::string_view gguf_type_name(gguf_type t);
bool gguf_type_valid(uint32_t raw);
// Bytes a value of scalar type `t` occupies in the file (0 for string and array).
uint32_t gguf_scalar_size(gguf_type t);

class gguf_value {
public:
    gguf_value() = default;
    static gguf_value u8(uint8_t v) { return scalar(gguf_type::u8, v); }
    static gguf_value i8(int8_t v) { return signed_scalar(gguf_type::i8, v); }
    static gguf_value u16(uint16_t v) { return scalar(gguf_type::u16, v); }
    static gguf_value i16(int16_t v) { return signed_scalar(gguf_type::i16, v); }
    static gguf_value u32(uint32_t v) { return scalar(gguf_type::u32, v); }
    static gguf_value i32(int32_t v) { return signed_scalar(gguf_type::i32, v); }
    static gguf_value u64(uint64_t v) { return scalar(gguf_type::u64, v); }
    static gguf_value i64(int64_t v) { return signed_scalar(gguf_type::i64, v); }
    static gguf_value f32(float v);
    static gguf_value f64(double v);
    static gguf_value boolean(bool v) { return scalar(gguf_type::boolean, v ? 1 : 0); }
    static gguf_value string(std::string v);
    static gguf_value array(gguf_type elem_type, std::vector<gguf_value> items);
    static gguf_value string_array(const std::vector<std::string>& items);
    static gguf_value f32_array(const std::vector<float>& items);
    static gguf_value i32_array(const std::vector<int32_t>& items);

    gguf_type type() const { return type_; }
    gguf_type elem_type() const { return elem_type_; }  // arrays only
    bool is_integer() const;
    bool is_float() const { return type_ == gguf_type::f32 || type_ == gguf_type::f64; }
    bool is_string() const { return type_ == gguf_type::string; }
    bool is_array() const { return type_ == gguf_type::array; }

    // Conversions: throw memtile::error when the value has an incompatible type or does not fit.
    uint64_t as_u64() const;
    int64_t as_i64() const;
    double as_f64() const;  // integers convert too
    bool as_bool() const;
    const std::string& as_string() const;
    const std::vector<gguf_value>& as_array() const;

    // Text form for `inspect`: scalars in full, arrays abbreviated to their first items.
    std::string to_display(size_t max_items = 8) const;

    bool operator==(const gguf_value& o) const = default;

private:
    static gguf_value scalar(gguf_type t, uint64_t bits);
    static gguf_value signed_scalar(gguf_type t, int64_t v);
    gguf_type type_ = gguf_type::u8;
    gguf_type elem_type_ = gguf_type::u8;
    uint64_t bits_ = 0;  // integers (two's complement for signed), bool, or the bit pattern of a double
    std::string str_;
    std::vector<gguf_value> items_;
};

}  // namespace memtile
