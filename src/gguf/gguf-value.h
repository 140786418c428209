// GGUF metadata values: the 13 GGUF value types, arrays of any of them (arrays may nest).
//
// Arrays of scalars and strings keep their elements in the file's encoding, one block of bytes: a value read
// from a file views the file's bytes and holds its mapped_file alive (bytes given to mapped_file::from_memory
// must outlive the values, as they must outlive the tensor data); a value built in memory owns such a block.
// A vocabulary of 128k tokens thus costs 4 bytes per token (string offsets) instead of a parsed value each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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

    // Arrays: element count and elements; throw memtile::error for a non-array, an index out of range or (the
    // typed accessors) an element type that does not convert.
    size_t array_size() const;
    gguf_value at(size_t i) const;               // any element type (strings are copied)
    std::string_view string_at(size_t i) const;  // string elements, viewed in place
    double f64_at(size_t i) const;               // numeric elements, as as_f64()
    int64_t i64_at(size_t i) const;              // integer elements, as as_i64()
    // The elements in the file's encoding (scalars little-endian back to back; strings each a u64 length and
    // its bytes); empty for arrays of arrays.
    std::span<const uint8_t> encoded_elements() const;

    // Text form for `inspect`: scalars in full, arrays abbreviated to their first items.
    std::string to_display(size_t max_items = 8) const;

    bool operator==(const gguf_value& o) const;

private:
    friend class gguf_parser;
    static gguf_value scalar(gguf_type t, uint64_t bits);
    static gguf_value signed_scalar(gguf_type t, int64_t v);
    // An array whose elements are `bytes` (scalar or string elements, the file's encoding) owned by the value.
    static gguf_value owned_array(gguf_type elem_type, uint64_t count, std::vector<uint8_t> bytes);
    void index_strings();  // fills offs_ from the encoded strings at raw_
    void check_index(size_t i) const;

    gguf_type type_ = gguf_type::u8;
    gguf_type elem_type_ = gguf_type::u8;
    uint64_t bits_ = 0;  // integers (two's complement for signed), bool, or the bit pattern of a double
    std::string str_;
    // Arrays of count_ elements. Scalar elements: count_ * gguf_scalar_size bytes at raw_. String element i:
    // its u64 length at raw_ + offs_[i], its bytes up to raw_ + offs_[i + 1] (count_ + 1 offsets; an array's
    // strings span less than 4 GiB). Array elements: items_.
    uint64_t count_ = 0;
    const uint8_t* raw_ = nullptr;
    std::vector<uint32_t> offs_;
    std::vector<gguf_value> items_;
    std::shared_ptr<const void> owner_;  // keeps raw_ alive: the mapped file, or the value's own bytes
};

}  // namespace memtile
